/* cpu/conv_dnnl.c: the oneDNN path of the CPU convolution (dense convs,
 * cpu/conv_impl.h says which): oneDNN 2.x's C API, primitives that choose
 * their own blocked layouts (format_tag_any; direct, or Winograd where the
 * geometry's flag asks, iabn_dnnl_wino_geometry() agrees and the CPU has
 * the kernel),
 * and reorders between those and the tensors the graph keeps: OIHW
 * weights, activations in the layouts of
 * the geometry (NCHW, or nChw16c / nChw8c where the graph's layout pass
 * blocked them, and then no reorder when the primitive chose that layout
 * too); 1x1 convs on
 * large maps read and write NCHW directly (iabn_conv_dnnl_plain).
 *
 * A plan holds, for one (geometry, pass, thread count), the convolution's
 * primitive, one reorder per operand whose layout differs from the plain one,
 * and memory objects that are re-pointed at each call's buffers.  Its
 * scratch layout, all inside the caller's scratch (the node scratch the
 * planner sized through iabn_conv_scratch_bytes):
 *   [64 bytes of alignment slack][merged weights, for merged groups (below)]
 *   [blocked copy of each reordered operand]
 *   [oneDNN scratchpad: user-managed, shared by the conv and its reorders]
 * The weight-gradient pass always computes into a scratch copy and adds it
 * to dw (and db), because the kernel table's bwd-filter accumulates while
 * oneDNN overwrites.  That addition goes through cpu/blocked_map.c where it
 * can express the layout: oneDNN's reorder with a sum post-op out of its
 * 16x16 weight blocks runs at a quarter of memory speed.  A 1x1 conv's
 * weights go into their 16x16 blocks through the map's copy too (oneDNN's
 * reorder into the data pass's IOhw16o16i ran at 0.6x its speed).  Every
 * other copy (and the layouts the map cannot express) is oneDNN's reorder:
 * its copies into blocked layouts run at memory speed.
 *
 * A Winograd plan runs its primitive on slices of the batch (the plan's pg,
 * cpu/conv_dnnl_plan.c wino_slice): oneDNN's Winograd scratchpad grows
 * with the tiles of a call, and the slices cut it (450 to 36 MiB on
 * WideResNet-38's 128-channel convs at batch 16) at no cost in speed; the
 * activations' copies are per slice too, and the weight pass adds each
 * slice's part to dw.
 *
 * An accumulating forward (a residual add fused into the convolution,
 * layers.h iabn_conv2d_add) adds to y with the sum post-op where y holds
 * the residual, and reads the residual from its own buffer with the binary
 * post-op where the sum may not overwrite it (iabn_conv_fwd_add: the
 * shortcut of standard BN, which bn1's backward reads again).  The binary
 * post-op is taken only where the primitive is the one the convolution
 * alone runs, so the bits are those of the convolution and then the add;
 * elsewhere the residual is copied into y first.
 *
 * Building a plan is cpu/conv_dnnl_plan.c's (cpu/conv_dnnl_impl.h); this
 * file caches, sizes and runs them.
 *
 * Plans live in an iabn_conv_cache (a CPU device context owns one); without
 * a cache a call builds its plan, runs it and frees it (correct, only slower:
 * oneDNN's own primitive cache keeps the JIT cost down).  Threads: oneDNN's
 * OpenMP runtime, i.e. the caller's pool, with omp_get_max_threads() threads,
 * which is part of the plan's key (the scratchpad size depends on it).
 *
 * A build without oneDNN (IABN_HAVE_DNNL 0) compiles none of this file:
 * cpu/conv_dnnl_none.c holds its entry points.
 */
#include "tensor/cpu/conv_impl.h"

#include "iabn_config.h"

#include <stdlib.h>

#if IABN_HAVE_DNNL

#include "tensor/cpu/conv_dnnl_impl.h"
#include "tensor/cpu/ops.h"

#include <stdint.h>
#include <string.h>

struct iabn_conv_cache {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    iabn_dnnl_plan *plans;
    int nplans, cap;
};

/* ---- the cache ------------------------------------------------------------ */

static int engine_new(dnnl_engine_t *eng, dnnl_stream_t *stream, iabn_err *e)
{
    dnnl_status_t s = dnnl_engine_create(eng, dnnl_cpu, 0);
    if (s == dnnl_success) {
        s = dnnl_stream_create(stream, *eng, dnnl_stream_default_flags);
        if (s != dnnl_success) dnnl_engine_destroy(*eng);
    }
    if (s != dnnl_success)
        return iabn_err_set(e, s == dnnl_out_of_memory ? IABN_ENOMEM : IABN_EDEVICE,
                            "oneDNN: cannot open the CPU engine (%s)", iabn_dnnl_status_name(s));
    return 0;
}

int iabn_conv_cache_new(iabn_conv_cache **out, iabn_err *e)
{
    *out = NULL;
    iabn_conv_cache *c = calloc(1, sizeof *c);
    if (!c) return iabn_err_set(e, IABN_ENOMEM, "out of memory for the convolution cache");
    int rc = engine_new(&c->eng, &c->stream, e);
    if (rc) {
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void iabn_conv_cache_free(iabn_conv_cache *c)
{
    if (!c) return;
    for (int i = 0; i < c->nplans; i++) iabn_dnnl_plan_destroy(&c->plans[i]);
    free(c->plans);
    dnnl_stream_destroy(c->stream);
    dnnl_engine_destroy(c->eng);
    free(c);
}

int iabn_conv_cache_size(const iabn_conv_cache *c) { return c ? c->nplans : 0; }

static int plan_key_eq(const iabn_dnnl_plan *p, const iabn_conv_geom *g, int pass, int bias,
                       int threads)
{
    int has_bias = 0;
    for (int i = 0; i < p->nio; i++)
        has_bias |= p->io[i].arg == DNNL_ARG_BIAS || p->io[i].arg == DNNL_ARG_DIFF_BIAS;
    return p->pass == pass && p->threads == threads && has_bias == bias &&
           memcmp(&p->g, g, sizeof *g) == 0;
}

static int cache_get(iabn_conv_cache *c, const iabn_conv_geom *g, int pass, int bias,
                     int threads, iabn_dnnl_plan **out, iabn_err *e)
{
    for (int i = 0; i < c->nplans; i++)
        if (plan_key_eq(&c->plans[i], g, pass, bias, threads)) {
            *out = &c->plans[i];
            return 0;
        }
    if (c->nplans == c->cap) {
        int cap = c->cap ? 2 * c->cap : 32;
        void *np = realloc(c->plans, (size_t)cap * sizeof *c->plans);
        if (!np) return iabn_err_set(e, IABN_ENOMEM, "out of memory for the oneDNN plan cache");
        c->plans = np;
        c->cap = cap;
    }
    iabn_dnnl_plan *p = &c->plans[c->nplans];
    memset(p, 0, sizeof *p);
    p->g = *g;
    p->pass = pass;
    p->threads = threads;
    int rc = iabn_dnnl_plan_build(c->eng, p, bias, 1, e);
    if (rc) {
        iabn_dnnl_plan_destroy(p);
        return rc;
    }
    c->nplans++;
    *out = p;
    return 0;
}

/* ---- sizing and running --------------------------------------------------- */

static int max_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* Builds the descriptors of g's plan for a pass (no primitives) on an
 * engine of its own, passes the plan to look() when that worked, and frees
 * it all: the sizing and the questions asked before any cache exists.
 * Returns iabn_dnnl_plan_build's status. */
static int probe(const iabn_conv_geom *g, int pass, int bias,
                 void (*look)(const iabn_dnnl_plan *p, void *arg), void *arg, iabn_err *e)
{
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    int rc = engine_new(&eng, &stream, e);
    if (rc) return rc;
    iabn_dnnl_plan p;
    memset(&p, 0, sizeof p);
    p.g = *g;
    p.pass = pass;
    rc = iabn_dnnl_plan_build(eng, &p, bias, 0, e);
    if (!rc) look(&p, arg);
    iabn_dnnl_plan_destroy(&p);
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
    return rc;
}

typedef struct sizing { size_t bytes; const char *impl; } sizing;
static void look_size(const iabn_dnnl_plan *p, void *arg)
{
    sizing *s = arg;
    s->bytes = p->total;
    s->impl = p->impl; /* a static string of the library */
}

int iabn_conv_dnnl_scratch(const iabn_conv_geom *g, iabn_conv_pass pass, int bias, int threads,
                           size_t *bytes, const char **impl, iabn_err *e)
{
    /* oneDNN sizes its scratchpad for omp_get_max_threads() threads */
    int keep = max_threads();
#ifdef _OPENMP
    if (threads > 0 && threads != keep) omp_set_num_threads(threads);
#else
    (void)threads;
#endif
    sizing s = {0, NULL};
    int rc = probe(g, pass, bias, look_size, &s, e);
    if (!rc) *bytes = s.bytes;
    if (!rc && pass == IABN_CONV_FWD && g->accumulate == 1) {
        /* the same node runs as accumulate 2 where the plan gives its sum a
         * buffer of its own (iabn_conv_fwd_add): the larger of the two */
        iabn_conv_geom g2 = *g;
        g2.accumulate = 2;
        sizing s2 = {0, NULL};
        rc = probe(&g2, pass, bias, look_size, &s2, e);
        if (!rc && s2.bytes > *bytes) *bytes = s2.bytes;
    }
    if (!rc && impl) *impl = s.impl;
#ifdef _OPENMP
    if (threads > 0 && threads != keep) omp_set_num_threads(keep);
#endif
    return rc;
}

/* The layout the forward primitive works in on one side. */
typedef struct side_kind { int y_side; iabn_layout blocked; int kind; } side_kind;
static void look_layout(const iabn_dnnl_plan *p, void *arg)
{
    side_kind *sk = arg;
    const iabn_conv_geom *g = &p->pg; /* the primitive's batch: maybe a slice */
    int y = sk->y_side;
    const dnnl_memory_desc_t *md =
        dnnl_primitive_desc_query_md(p->pd, y ? dnnl_query_dst_md : dnnl_query_src_md, 0);
    dnnl_memory_desc_t b, c;
    dnnl_dims_t d = {g->n, y ? g->c_out : g->c_in, y ? g->h_out : g->h_in,
                     y ? g->w_out : g->w_in};
    if (md && dnnl_memory_desc_init_by_tag(&b, 4, d, dnnl_f32, iabn_dnnl_act_tag(sk->blocked)) ==
                  dnnl_success &&
        dnnl_memory_desc_init_by_tag(&c, 4, d, dnnl_f32, dnnl_nchw) == dnnl_success)
        sk->kind = dnnl_memory_desc_equal(md, &b) ? 1 : dnnl_memory_desc_equal(md, &c) ? 0 : 2;
}

int iabn_conv_dnnl_blocked(const iabn_conv_geom *g, int y_side, iabn_layout blocked)
{
    side_kind sk = {y_side, blocked, 0};
    iabn_err e = {0};
    probe(g, IABN_CONV_FWD, 0, look_layout, &sk, &e);
    return sk.kind;
}

static void look_binary(const iabn_dnnl_plan *p, void *arg) { *(int *)arg = p->binary; }

int iabn_conv_dnnl_add_fused(const iabn_conv_geom *g)
{
    iabn_conv_geom g2 = *g;
    g2.accumulate = 2;
    int binary = 0;
    iabn_err e = {0};
    probe(&g2, IABN_CONV_FWD, 0, look_binary, &binary, &e);
    return binary;
}

static void look_wino(const iabn_dnnl_plan *p, void *arg)
{
    *(int *)arg = p->wino ? p->pg.n : 0;
}

int iabn_conv_dnnl_winograd(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    if (!iabn_dnnl_wino_geometry(g) || !iabn_conv_use_dnnl(g, pass)) return 0;
    int wino = 0;
    iabn_err e = {0};
    probe(g, pass, 0, look_wino, &wino, &e);
    return wino;
}

static int exec(dnnl_primitive_t prim, dnnl_stream_t stream, int n, const dnnl_exec_arg_t *a,
                const iabn_conv_geom *g, iabn_err *e)
{
    DN(dnnl_primitive_execute(prim, stream, n, a));
    DN(dnnl_stream_wait(stream));
    return 0;
}

/* Floats per image of operand `arg` (activations; 0 for the weights and
 * the bias, which every slice of the batch shares). */
static size_t image_floats(const iabn_dnnl_plan *p, int arg)
{
    const iabn_conv_geom *g = &p->pg; /* the primitive's sides (tfwd swaps them) */
    if (arg == DNNL_ARG_SRC || arg == DNNL_ARG_DIFF_SRC)
        return (size_t)g->c_in * g->h_in * g->w_in;
    if (arg == DNNL_ARG_DST || arg == DNNL_ARG_DIFF_DST)
        return (size_t)g->c_out * g->h_out * g->w_out;
    return 0;
}

/* One call of p's primitive on images [i0, i0 + p->pg.n) of the caller's
 * buffers ptr (r: the binary post-op's residual, or NULL).  Inputs go into
 * their copies first (the weights' only on the first slice: the copy stays
 * in the scratch), outputs come out of theirs after; base: the aligned
 * scratch. */
static int run_slice(iabn_dnnl_plan *p, dnnl_stream_t stream, void *const *ptr, const void *r,
                     char *base, int i0, iabn_err *e)
{
    const iabn_conv_geom *g = &p->g;
    dnnl_exec_arg_t args[MAX_IO + 2];
    int na = 0, first = i0 == 0;
    float *at[MAX_IO];
    for (int i = 0; i < p->nio; i++)
        at[i] = (float *)ptr[i] + (size_t)i0 * image_floats(p, p->io[i].arg);
    if (p->binary) {
        const float *ri = (const float *)r + (size_t)i0 * image_floats(p, DNNL_ARG_DST);
        DN(dnnl_memory_set_data_handle(p->r_m, (void *)ri));
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, p->r_m};
    }
    if (p->pad_m) {
        DN(dnnl_memory_set_data_handle(p->pad_m, base + p->pad_off));
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->pad_m};
    }
    for (int i = 0; i < p->nio; i++) {
        iabn_dnnl_io *io = &p->io[i];
        DN(dnnl_memory_set_data_handle(io->user_m, at[i]));
        if (!io->via_buf) {
            args[na++] = (dnnl_exec_arg_t){io->arg, io->user_m};
            continue;
        }
        DN(dnnl_memory_set_data_handle(io->prim_m, base + io->off));
        args[na++] = (dnnl_exec_arg_t){io->arg, io->prim_m};
        if (io->out || (!first && !image_floats(p, io->arg))) continue;
        if (io->map.mem) {
            iabn_blocked_pack(&io->map, at[i], (float *)(base + io->off));
            continue;
        }
        dnnl_exec_arg_t ra[3] = {{DNNL_ARG_FROM, io->user_m}, {DNNL_ARG_TO, io->prim_m}};
        int nr = 2;
        if (p->pad_m) ra[nr++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->pad_m};
        int rc = exec(io->reorder, stream, nr, ra, g, e);
        if (rc) return rc;
    }
    int rc = exec(p->prim, stream, na, args, g, e);
    if (rc) return rc;
    for (int i = 0; i < p->nio; i++) {
        iabn_dnnl_io *io = &p->io[i];
        if (!io->out || !io->via_buf) continue;
        if (io->map.mem) { /* an accumulating output (the weight pass) */
            iabn_blocked_unpack_add(&io->map, (const float *)(base + io->off), at[i]);
            continue;
        }
        dnnl_exec_arg_t ra[3] = {{DNNL_ARG_FROM, io->prim_m}, {DNNL_ARG_TO, io->user_m}};
        int nr = 2;
        if (p->pad_m) ra[nr++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->pad_m};
        if ((rc = exec(io->reorder, stream, nr, ra, g, e))) return rc;
    }
    return 0;
}

/* ptr[i]: the caller's buffer of io[i]; r: the residual of an accumulate 2
 * forward (else NULL).  The batch in slices of p->pg.n images (Winograd;
 * else one): the weight pass's slices each add their part to dw. */
static int plan_run(iabn_dnnl_plan *p, dnnl_stream_t stream, void *const *ptr, const void *r,
                    void *scratch, size_t scratch_bytes, iabn_err *e)
{
    const iabn_conv_geom *g = &p->g;
    if (scratch_bytes < p->total || (!scratch && p->total))
        return iabn_err_set(e, IABN_EINVAL,
                            "conv %dx%dx%dx%d -> %d (oneDNN pass %d): %zu bytes of scratch given, "
                            "%zu needed (was it planned with another thread count?)",
                            g->n, g->c_in, g->h_in, g->w_in, g->c_out, p->pass, scratch_bytes,
                            p->total);
    char *base = (char *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *mw = (float *)base, *wuser = NULL; /* the merged weights (iabn_dnnl_plan_build) */
    void *ptrs[MAX_IO];
    for (int i = 0; i < p->nio; i++) {
        ptrs[i] = ptr[i];
        if (p->merge > 1 && (p->io[i].arg == DNNL_ARG_WEIGHTS || p->io[i].arg == DNNL_ARG_DIFF_WEIGHTS)) {
            wuser = ptr[i];
            if (!p->io[i].out) iabn_dnnl_merge_weights(p, wuser, mw, 0);
            ptrs[i] = mw;
        }
    }
    if (!p->binary && p->g.accumulate == 2) /* y starts as r: y is the last operand */
        iabn_copy((size_t)g->n * g->c_out * g->h_out * g->w_out, r, ptrs[p->nio - 1]);
    int rc = 0;
    for (int i0 = 0; i0 < g->n && !rc; i0 += p->pg.n)
        rc = run_slice(p, stream, ptrs, r, base, i0, e);
    if (!rc && p->merge > 1 && p->pass == IABN_CONV_BWD_FILTER)
        iabn_dnnl_merge_weights(p, wuser, mw, 1);
    return rc;
}

/* Runs one pass with the plan from the cache, or a plan of its own. */
static int run(iabn_conv_cache *c, const iabn_conv_geom *g, int pass, int bias,
               void *const *ptr, const void *r, void *scratch, size_t scratch_bytes,
               iabn_err *e)
{
    int threads = max_threads();
    if (c) {
        iabn_dnnl_plan *p = NULL;
        int rc = cache_get(c, g, pass, bias, threads, &p, e);
        return rc ? rc : plan_run(p, c->stream, ptr, r, scratch, scratch_bytes, e);
    }
    iabn_conv_cache tmp;
    memset(&tmp, 0, sizeof tmp);
    int rc = engine_new(&tmp.eng, &tmp.stream, e);
    if (rc) return rc;
    iabn_dnnl_plan p;
    memset(&p, 0, sizeof p);
    p.g = *g;
    p.pass = pass;
    p.threads = threads;
    rc = iabn_dnnl_plan_build(tmp.eng, &p, bias, 1, e);
    if (!rc) rc = plan_run(&p, tmp.stream, ptr, r, scratch, scratch_bytes, e);
    iabn_dnnl_plan_destroy(&p);
    dnnl_stream_destroy(tmp.stream);
    dnnl_engine_destroy(tmp.eng);
    return rc;
}

int iabn_conv_dnnl_fwd(iabn_conv_cache *c, const iabn_conv_geom *g, const float *x,
                       const float *w, const float *bias, const float *r, float *y,
                       void *scratch, size_t scratch_bytes, iabn_err *e)
{
    void *ptr[4] = {(void *)x, (void *)w};
    int n = 2;
    if (bias) ptr[n++] = (void *)bias;
    ptr[n] = y;
    return run(c, g, IABN_CONV_FWD, bias != NULL, ptr, r, scratch, scratch_bytes, e);
}

int iabn_conv_dnnl_bwd_data(iabn_conv_cache *c, const iabn_conv_geom *g, const float *dy,
                            const float *w, float *dx, void *scratch, size_t scratch_bytes,
                            iabn_err *e)
{
    void *ptr[3] = {(void *)dy, (void *)w, dx};
    return run(c, g, IABN_CONV_BWD_DATA, 0, ptr, NULL, scratch, scratch_bytes, e);
}

int iabn_conv_dnnl_bwd_filter(iabn_conv_cache *c, const iabn_conv_geom *g, const float *x,
                              const float *dy, float *dw, float *dbias, void *scratch,
                              size_t scratch_bytes, iabn_err *e)
{
    void *ptr[4] = {(void *)x, (void *)dy, dw, dbias};
    return run(c, g, IABN_CONV_BWD_FILTER, dbias != NULL, ptr, NULL, scratch, scratch_bytes, e);
}

#endif
