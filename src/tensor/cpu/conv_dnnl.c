/* cpu/conv_dnnl.c: the oneDNN path of the CPU convolution (dense convs,
 * cpu/conv_impl.h says which): oneDNN 2.x's C API, primitives that choose
 * their own blocked layouts (format_tag_any; direct, or Winograd where the
 * geometry's flag asks, wino_geometry() agrees and the CPU has the kernel),
 * and reorders between those and the tensors the graph keeps: OIHW
 * weights, activations in the layouts of
 * the geometry (NCHW, or nChw16c where the graph's layout pass blocked them,
 * and then no reorder when the primitive chose nChw16c too); 1x1 convs on
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

#include "tensor/cpu/blocked_map.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <string.h>

#define MAX_IO 4

/* One operand of the convolution as the caller holds it (the geometry's
 * layout) and as the primitive wants it. */
typedef struct op_io {
    int arg;            /* DNNL_ARG_* of the convolution                     */
    int out;            /* written by the convolution                        */
    int accumulate;     /* output added to the caller's (sum post-op)        */
    int via_buf;        /* passes through a scratch copy (reorder)           */
    size_t off;         /* the copy's offset in the aligned scratch          */
    dnnl_memory_desc_t user_md, prim_md;
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t reorder;   /* oneDNN's reorder, or                        */
    iabn_blocked_map map;       /* when map.mem, the map's addition (an
                                 * accumulating output) or copy (a 1x1 conv's
                                 * weights going in): cpu/blocked_map.h        */
    dnnl_memory_t user_m, prim_m;
} op_io;

typedef struct op_plan {
    iabn_conv_geom g;          /* the caller's geometry (the cache's key)   */
    iabn_conv_geom pg;         /* the primitive's: g, or g with groups merged */
    int merge;                 /* groups of g per group of pg (1: none); the
                                * merged OIHW weights (or their gradient)
                                * then open the aligned scratch             */
    int pass, threads;
    int wino;                  /* runs oneDNN's Winograd kernels            */
    int sum_post;              /* an accumulating forward (g.accumulate)
                                * whose primitive writes y as the caller
                                * holds it: its sum post-op adds to y;
                                * else y passes through a scratch copy
                                * that is added to it                       */
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    op_io io[MAX_IO];
    int nio;
    size_t pad_off, pad_bytes; /* scratchpad: offset and size              */
    dnnl_memory_t pad_m;
    size_t total;              /* bytes of caller scratch the plan needs    */
    const char *impl;          /* oneDNN's implementation name              */
} op_plan;

struct iabn_conv_cache {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    op_plan *plans;
    int nplans, cap;
};

static const char *status_name(dnnl_status_t s)
{
    switch (s) {
    case dnnl_success: return "success";
    case dnnl_out_of_memory: return "out of memory";
    case dnnl_invalid_arguments: return "invalid arguments";
    case dnnl_unimplemented: return "unimplemented";
    case dnnl_iterator_ends: return "iterator ends";
    case dnnl_runtime_error: return "runtime error";
    case dnnl_not_required: return "not required";
    }
    return "unknown status";
}

static int fail(iabn_err *e, const char *call, dnnl_status_t s, const iabn_conv_geom *g)
{
    return iabn_err_set(e, s == dnnl_out_of_memory ? IABN_ENOMEM : IABN_EDEVICE,
                        "oneDNN %s failed (%s) for conv %dx%dx%dx%d -> %d, k %dx%d, s %d, p %d, "
                        "d %d, g %d",
                        call, status_name(s), g->n, g->c_in, g->h_in, g->w_in, g->c_out, g->kh,
                        g->kw, g->stride, g->pad, g->dil, g->groups);
}

#define DN(call)                                                                         \
    do {                                                                                 \
        dnnl_status_t st_ = (call);                                                      \
        if (st_ != dnnl_success) return fail(e, #call, st_, g);                          \
    } while (0)

static size_t align64(size_t b) { return (b + 63) & ~(size_t)63; }

static void plan_destroy(op_plan *p)
{
    for (int i = 0; i < p->nio; i++) {
        op_io *io = &p->io[i];
        if (io->reorder) dnnl_primitive_destroy(io->reorder);
        if (io->rpd) dnnl_primitive_desc_destroy(io->rpd);
        if (io->user_m) dnnl_memory_destroy(io->user_m);
        if (io->prim_m) dnnl_memory_destroy(io->prim_m);
        iabn_blocked_map_free(&io->map);
    }
    if (p->pad_m) dnnl_memory_destroy(p->pad_m);
    if (p->prim) dnnl_primitive_destroy(p->prim);
    if (p->pd) dnnl_primitive_desc_destroy(p->pd);
    memset(p, 0, sizeof *p);
}

static int user_scratchpad_attr(dnnl_primitive_attr_t *attr, int sum, const iabn_conv_geom *g,
                                iabn_err *e)
{
    DN(dnnl_primitive_attr_create(attr));
    dnnl_status_t s = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
    if (s == dnnl_success && sum) {
        dnnl_post_ops_t po;
        s = dnnl_post_ops_create(&po);
        if (s == dnnl_success) {
            s = dnnl_post_ops_append_sum(po, 1.0f);
            if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(*attr, po);
            dnnl_post_ops_destroy(po);
        }
    }
    if (s != dnnl_success) {
        dnnl_primitive_attr_destroy(*attr);
        *attr = NULL;
        return fail(e, "attribute setup", s, g);
    }
    return 0;
}

/* oneDNN's tag of an activation layout of the graph. */
static dnnl_format_tag_t act_tag(iabn_layout l)
{
    return l == IABN_LAYOUT_NCHW16C ? dnnl_nChw16c : dnnl_nchw;
}

/* The caller's descriptor of x (x_side) or y: its dims in its layout. */
static dnnl_status_t act_md(const iabn_conv_geom *g, int x_side, dnnl_memory_desc_t *md)
{
    dnnl_dims_t d = {g->n, x_side ? g->c_in : g->c_out, x_side ? g->h_in : g->h_out,
                     x_side ? g->w_in : g->w_out};
    return dnnl_memory_desc_init_by_tag(md, 4, d, dnnl_f32,
                                        act_tag(x_side ? g->x_layout : g->y_layout));
}

/* The weights' descriptor: `any` for the primitive, or the store's layout
 * (oihw; grouped goihw, groups outermost: [c_out][c_in/groups][kh][kw]). */
static int weight_md(const iabn_conv_geom *g, int any, dnnl_memory_desc_t *md, iabn_err *e)
{
    int G = g->groups;
    dnnl_dims_t d4 = {g->c_out, g->c_in, g->kh, g->kw};
    dnnl_dims_t d5 = {G, g->c_out / G, g->c_in / G, g->kh, g->kw};
    dnnl_format_tag_t tag = any ? dnnl_format_tag_any : G > 1 ? dnnl_goihw : dnnl_oihw;
    DN(dnnl_memory_desc_init_by_tag(md, G > 1 ? 5 : 4, G > 1 ? d5 : d4, dnnl_f32, tag));
    return 0;
}

/* The convolution descriptor of a pass: activations in NCHW where the rule
 * says so (iabn_conv_dnnl_plain: the same for the planner's sizing and the
 * run), else `any` (oneDNN's choice); weights always `any`. */
static int conv_desc(const iabn_conv_geom *g, int pass, int bias, int wino,
                     dnnl_convolution_desc_t *cd, iabn_err *e)
{
    dnnl_alg_kind_t alg = wino ? dnnl_convolution_winograd : dnnl_convolution_direct;
    dnnl_memory_desc_t src, wei, dst, b;
    dnnl_dims_t sd = {g->n, g->c_in, g->h_in, g->w_in};
    dnnl_dims_t dd = {g->n, g->c_out, g->h_out, g->w_out};
    dnnl_dims_t bd = {g->c_out};
    dnnl_format_tag_t act = iabn_conv_dnnl_plain(g) ? dnnl_nchw : dnnl_format_tag_any;
    DN(dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, act));
    int rc = weight_md(g, 1, &wei, e);
    if (rc) return rc;
    DN(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, act));
    DN(dnnl_memory_desc_init_by_tag(&b, 1, bd, dnnl_f32, dnnl_x));
    dnnl_dims_t strides = {g->stride, g->stride}, dil = {g->dil - 1, g->dil - 1};
    /* right padding so that the output extent is exactly h_out x w_out */
    dnnl_dims_t pl = {g->pad, g->pad};
    dnnl_dims_t pr = {(dnnl_dim_t)(g->h_out - 1) * g->stride + (dnnl_dim_t)(g->kh - 1) * g->dil +
                          1 - g->h_in - g->pad,
                      (dnnl_dim_t)(g->w_out - 1) * g->stride + (dnnl_dim_t)(g->kw - 1) * g->dil +
                          1 - g->w_in - g->pad};
    switch (pass) {
    case IABN_CONV_FWD:
        DN(dnnl_dilated_convolution_forward_desc_init(cd, dnnl_forward_training,
                                                      alg, &src, &wei,
                                                      bias ? &b : NULL, &dst, strides, dil, pl,
                                                      pr));
        break;
    case IABN_CONV_BWD_DATA:
        DN(dnnl_dilated_convolution_backward_data_desc_init(cd, alg, &src,
                                                            &wei, &dst, strides, dil, pl, pr));
        break;
    default:
        DN(dnnl_dilated_convolution_backward_weights_desc_init(cd, alg, &src,
                                                               &wei, bias ? &b : NULL, &dst,
                                                               strides, dil, pl, pr));
        break;
    }
    return 0;
}

/* ---- merged groups ----------------------------------------------------------
 * A grouped conv with 8 channels per group (in and out) runs as one with 16:
 * pairs of groups side by side, the weights block-diagonal (zeros across
 * the pair).  Twice the FLOPs, but oneDNN's 16-per-group kernels work in
 * nChw16c and run at 2.5x the rate of its 8-per-group ones, which also want
 * nChw8c activations: a reorder of the input and output per pass.  On
 * ResNeXt-101's mod4 (4x512x14x14, 64 groups) the three passes take 0.92 ms
 * merged against 1.27 ms (docs/LAYOUTS.md).  The plan expands the OIHW
 * weights into a merged OIHW copy in its scratch (forward and data passes)
 * or takes the merged gradient there and adds its diagonal blocks to dw.
 * The zeros multiply the partner group's input: an infinity there makes
 * NaN where the unmerged conv would give a finite value, in a step that the
 * infinity has already made non-finite. */
static int merge_factor(const iabn_conv_geom *g)
{
    int G = g->groups;
    return G > 1 && G % 2 == 0 && g->c_in / G == 8 && g->c_out / G == 8 ? 2 : 1;
}

static size_t merged_weight_count(const iabn_conv_geom *pg)
{
    return (size_t)pg->c_out * (pg->c_in / pg->groups) * pg->kh * pg->kw;
}

/* mw (merged, pg) <- w (g), zeros off the diagonal blocks; or, with `back`,
 * w += the diagonal blocks of mw. */
static void merge_weights(const op_plan *p, float *w, float *mw, int back)
{
    const iabn_conv_geom *g = &p->g;
    size_t ci = (size_t)g->c_in / g->groups, co = (size_t)g->c_out / g->groups;
    size_t taps = (size_t)g->kh * g->kw, k = (size_t)p->merge;
    if (!back) memset(mw, 0, merged_weight_count(&p->pg) * sizeof *mw);
    for (size_t gr = 0; gr < (size_t)g->groups; gr++)
        for (size_t o = 0; o < co; o++) {
            /* row (gr / k, (gr % k) * co + o) of mw, columns from (gr % k) * ci */
            size_t mrow = (gr / k) * k * co + (gr % k) * co + o;
            float *m = mw + (mrow * k * ci + (gr % k) * ci) * taps;
            float *v = w + (gr * co + o) * ci * taps;
            for (size_t i = 0; i < ci * taps; i++) {
                if (back) v[i] += m[i];
                else m[i] = v[i];
            }
        }
}

/* Adds operand `arg` with the caller's layout; a reorder and a scratch copy
 * when the primitive wants another layout, or when an output accumulates. */
static int add_io(dnnl_engine_t eng, op_plan *p, int arg, dnnl_query_t q, int qi, int out,
                  int accumulate, size_t *off, size_t *pad, iabn_err *e)
{
    const iabn_conv_geom *g = &p->pg;
    op_io *io = &p->io[p->nio++];
    io->arg = arg;
    io->out = out;
    io->accumulate = accumulate;
    const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(p->pd, q, qi);
    if (!want) return fail(e, "query of an operand's layout", dnnl_runtime_error, g);
    io->prim_md = *want;
    int plain = 1; /* the caller's layout is dense in dims order (the map's) */
    if (want->ndims == 1) {
        dnnl_dims_t bd = {g->c_out};
        DN(dnnl_memory_desc_init_by_tag(&io->user_md, 1, bd, dnnl_f32, dnnl_x));
    } else if (arg == DNNL_ARG_WEIGHTS || arg == DNNL_ARG_DIFF_WEIGHTS) {
        int rc = weight_md(g, 0, &io->user_md, e);
        if (rc) return rc;
    } else {
        int x = arg == DNNL_ARG_SRC || arg == DNNL_ARG_DIFF_SRC;
        DN(act_md(g, x, &io->user_md));
        plain = (x ? g->x_layout : g->y_layout) == IABN_LAYOUT_NCHW;
    }
    io->via_buf = accumulate || !dnnl_memory_desc_equal(&io->user_md, &io->prim_md);
    DN(dnnl_memory_create(&io->user_m, &io->user_md, eng, DNNL_MEMORY_NONE));
    if (!io->via_buf) return 0;
    io->off = *off;
    *off += align64(dnnl_memory_desc_get_size(&io->prim_md));
    DN(dnnl_memory_create(&io->prim_m, &io->prim_md, eng, DNNL_MEMORY_NONE));
    /* the layout map (cpu/blocked_map.h): the addition of an accumulating
     * output wherever it can express the layout, the copy of the weights
     * going in where it moves 16 x 16 blocks (a 1x1 conv's) */
    if ((accumulate && plain) || (!out && arg == DNNL_ARG_WEIGHTS)) {
        int m = iabn_blocked_map_from_dnnl(&io->map, &io->prim_md);
        if (m < 0) return iabn_err_set(e, IABN_ENOMEM, "out of memory for a weight layout map");
        if (m == 0 && (out || io->map.tile16 || io->map.rows16)) return 0;
        iabn_blocked_map_free(&io->map);
    }
    dnnl_primitive_attr_t attr;
    int rc = user_scratchpad_attr(&attr, accumulate, g, e);
    if (rc) return rc;
    dnnl_status_t s = out ? dnnl_reorder_primitive_desc_create(&io->rpd, &io->prim_md, eng,
                                                               &io->user_md, eng, attr)
                          : dnnl_reorder_primitive_desc_create(&io->rpd, &io->user_md, eng,
                                                               &io->prim_md, eng, attr);
    dnnl_primitive_attr_destroy(attr);
    if (s != dnnl_success) return fail(e, "reorder creation", s, g);
    const dnnl_memory_desc_t *spm = dnnl_primitive_desc_query_md(io->rpd, dnnl_query_scratchpad_md, 0);
    size_t sp = spm ? dnnl_memory_desc_get_size(spm) : 0;
    if (sp > *pad) *pad = sp;
    return 0;
}

/* The geometries that run Winograd when the flag asks: those oneDNN's
 * Winograd kernels take (F(4x4, 3x3) on 16-channel blocks, oneDNN 2.x's
 * jit_wino_4x3 for avx512_core): a dense 3x3, stride 1, not dilated,
 * padding at most 1, channels in multiples of 16; and maps of 14x14 and
 * more, where they win.  Measured at batch 4, 2 threads (docs/CPU.md):
 * 1.2x-2.6x faster from 14x14 to 112x112 in all three passes, 0.7x on 7x7
 * (4x4 output tiles cover a 7x7 map with 8x8). */
static int wino_geometry(const iabn_conv_geom *g)
{
    return g->winograd && g->groups == 1 && g->kh == 3 && g->kw == 3 && g->stride == 1 &&
           g->dil == 1 && g->pad <= 1 && g->c_in % 16 == 0 && g->c_out % 16 == 0 &&
           (long)g->h_out * g->w_out >= 14 * 14;
}

/* The primitive descriptor of a pass with Winograd (wino) or direct. */
static int prim_desc(dnnl_engine_t eng, op_plan *p, int bias, int wino, dnnl_status_t *s,
                     iabn_err *e)
{
    const iabn_conv_geom *g = &p->pg;
    dnnl_convolution_desc_t cd;
    int rc = conv_desc(g, p->pass, bias, wino, &cd, e);
    if (rc) return rc;
    dnnl_primitive_attr_t attr;
    if ((rc = user_scratchpad_attr(&attr, p->sum_post, g, e))) return rc;
    dnnl_primitive_desc_t hint = NULL;
    *s = dnnl_success;
    if (p->pass != IABN_CONV_FWD) {
        /* the backward passes need the forward's descriptor as a hint */
        dnnl_convolution_desc_t fd;
        rc = conv_desc(g, IABN_CONV_FWD, 0, wino, &fd, e);
        if (!rc) *s = dnnl_primitive_desc_create(&hint, &fd, attr, eng, NULL);
    }
    if (!rc && *s == dnnl_success) *s = dnnl_primitive_desc_create(&p->pd, &cd, attr, eng, hint);
    if (hint) dnnl_primitive_desc_destroy(hint);
    dnnl_primitive_attr_destroy(attr);
    return rc;
}

/* The pass's primitive descriptor: Winograd where asked and oneDNN has it
 * for this CPU, else direct; p->sum_post as it asks, or 0 where neither
 * takes the sum post-op. */
static int make_pd(dnnl_engine_t eng, op_plan *p, int bias, iabn_err *e)
{
    const iabn_conv_geom *g = &p->pg;
    for (;;) {
        dnnl_status_t s = dnnl_unimplemented;
        int rc = 0;
        p->wino = wino_geometry(g);
        if (p->wino) rc = prim_desc(eng, p, bias, 1, &s, e);
        if (!rc && s != dnnl_success) {
            p->wino = 0;
            rc = prim_desc(eng, p, bias, 0, &s, e);
        }
        if (rc || s == dnnl_success) return rc;
        if (!p->sum_post) return fail(e, "convolution descriptor", s, g);
        p->sum_post = 0;
    }
}

/* Whether the forward primitive writes y in the caller's layout (its sum
 * post-op then reads the caller's y). */
static int dst_as_user(const op_plan *p)
{
    dnnl_memory_desc_t user;
    const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(p->pd, dnnl_query_dst_md, 0);
    return want && act_md(&p->g, 0, &user) == dnnl_success && dnnl_memory_desc_equal(&user, want);
}

/* Builds the descriptors (and, with `prims`, the primitives) of a plan. */
static int plan_build(dnnl_engine_t eng, op_plan *p, int bias, int prims, iabn_err *e)
{
    p->merge = merge_factor(&p->g);
    p->pg = p->g;
    p->pg.groups /= p->merge;
    const iabn_conv_geom *g = &p->pg;
    p->sum_post = p->pass == IABN_CONV_FWD && p->g.accumulate;
    int rc = make_pd(eng, p, bias, e);
    if (!rc && p->sum_post && !dst_as_user(p)) { /* y through a copy: no sum post-op */
        dnnl_primitive_desc_destroy(p->pd);
        p->pd = NULL;
        p->sum_post = 0;
        rc = make_pd(eng, p, bias, e);
    }
    if (rc) return rc;
    DN(dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, &p->impl));

    size_t off = 0, pad = 0;
    if (p->merge > 1) /* the merged weights first */
        off = align64(merged_weight_count(&p->pg) * sizeof(float));
    const dnnl_memory_desc_t *spm = dnnl_primitive_desc_query_md(p->pd, dnnl_query_scratchpad_md, 0);
    pad = spm ? dnnl_memory_desc_get_size(spm) : 0;
    switch (p->pass) {
    case IABN_CONV_FWD:
        rc = add_io(eng, p, DNNL_ARG_SRC, dnnl_query_src_md, 0, 0, 0, &off, &pad, e);
        if (!rc) rc = add_io(eng, p, DNNL_ARG_WEIGHTS, dnnl_query_weights_md, 0, 0, 0, &off, &pad, e);
        if (!rc && bias)
            rc = add_io(eng, p, DNNL_ARG_BIAS, dnnl_query_weights_md, 1, 0, 0, &off, &pad, e);
        if (!rc)
            rc = add_io(eng, p, DNNL_ARG_DST, dnnl_query_dst_md, 0, 1,
                        p->g.accumulate && !p->sum_post, &off, &pad, e);
        break;
    case IABN_CONV_BWD_DATA:
        rc = add_io(eng, p, DNNL_ARG_DIFF_DST, dnnl_query_diff_dst_md, 0, 0, 0, &off, &pad, e);
        if (!rc) rc = add_io(eng, p, DNNL_ARG_WEIGHTS, dnnl_query_weights_md, 0, 0, 0, &off, &pad, e);
        if (!rc) rc = add_io(eng, p, DNNL_ARG_DIFF_SRC, dnnl_query_diff_src_md, 0, 1, 0, &off, &pad, e);
        break;
    default:
        rc = add_io(eng, p, DNNL_ARG_SRC, dnnl_query_src_md, 0, 0, 0, &off, &pad, e);
        if (!rc) rc = add_io(eng, p, DNNL_ARG_DIFF_DST, dnnl_query_diff_dst_md, 0, 0, 0, &off, &pad, e);
        if (!rc)
            rc = add_io(eng, p, DNNL_ARG_DIFF_WEIGHTS, dnnl_query_diff_weights_md, 0, 1,
                        p->merge == 1, &off, &pad, e);
        if (!rc && bias)
            rc = add_io(eng, p, DNNL_ARG_DIFF_BIAS, dnnl_query_diff_weights_md, 1, 1, 1, &off,
                        &pad, e);
        break;
    }
    if (rc) return rc;
    p->pad_off = off;
    p->pad_bytes = pad;
    p->total = 64 + off + align64(pad);
    if (!prims) return 0;
    DN(dnnl_primitive_create(&p->prim, p->pd));
    for (int i = 0; i < p->nio; i++)
        if (p->io[i].rpd) DN(dnnl_primitive_create(&p->io[i].reorder, p->io[i].rpd));
    if (pad) {
        dnnl_dims_t pd = {(dnnl_dim_t)pad};
        dnnl_memory_desc_t md;
        DN(dnnl_memory_desc_init_by_tag(&md, 1, pd, dnnl_u8, dnnl_x));
        DN(dnnl_memory_create(&p->pad_m, &md, eng, DNNL_MEMORY_NONE));
    }
    return 0;
}

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
                            "oneDNN: cannot open the CPU engine (%s)", status_name(s));
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
    for (int i = 0; i < c->nplans; i++) plan_destroy(&c->plans[i]);
    free(c->plans);
    dnnl_stream_destroy(c->stream);
    dnnl_engine_destroy(c->eng);
    free(c);
}

int iabn_conv_cache_size(const iabn_conv_cache *c) { return c ? c->nplans : 0; }

static int plan_key_eq(const op_plan *p, const iabn_conv_geom *g, int pass, int bias,
                       int threads)
{
    int has_bias = 0;
    for (int i = 0; i < p->nio; i++)
        has_bias |= p->io[i].arg == DNNL_ARG_BIAS || p->io[i].arg == DNNL_ARG_DIFF_BIAS;
    return p->pass == pass && p->threads == threads && has_bias == bias &&
           memcmp(&p->g, g, sizeof *g) == 0;
}

static int cache_get(iabn_conv_cache *c, const iabn_conv_geom *g, int pass, int bias,
                     int threads, op_plan **out, iabn_err *e)
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
    op_plan *p = &c->plans[c->nplans];
    memset(p, 0, sizeof *p);
    p->g = *g;
    p->pass = pass;
    p->threads = threads;
    int rc = plan_build(c->eng, p, bias, 1, e);
    if (rc) {
        plan_destroy(p);
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
 * Returns plan_build's status. */
static int probe(const iabn_conv_geom *g, int pass, int bias,
                 void (*look)(const op_plan *p, void *arg), void *arg, iabn_err *e)
{
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    int rc = engine_new(&eng, &stream, e);
    if (rc) return rc;
    op_plan p;
    memset(&p, 0, sizeof p);
    p.g = *g;
    p.pass = pass;
    rc = plan_build(eng, &p, bias, 0, e);
    if (!rc) look(&p, arg);
    plan_destroy(&p);
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
    return rc;
}

typedef struct sizing { size_t bytes; const char *impl; } sizing;
static void look_size(const op_plan *p, void *arg)
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
    if (!rc && impl) *impl = s.impl;
#ifdef _OPENMP
    if (threads > 0 && threads != keep) omp_set_num_threads(keep);
#endif
    return rc;
}

/* The layout the forward primitive works in on one side. */
typedef struct side_kind { int y_side, kind; } side_kind;
static void look_layout(const op_plan *p, void *arg)
{
    side_kind *sk = arg;
    const iabn_conv_geom *g = &p->g;
    int y = sk->y_side;
    const dnnl_memory_desc_t *md =
        dnnl_primitive_desc_query_md(p->pd, y ? dnnl_query_dst_md : dnnl_query_src_md, 0);
    dnnl_memory_desc_t b, c;
    dnnl_dims_t d = {g->n, y ? g->c_out : g->c_in, y ? g->h_out : g->h_in,
                     y ? g->w_out : g->w_in};
    if (md && dnnl_memory_desc_init_by_tag(&b, 4, d, dnnl_f32, dnnl_nChw16c) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&c, 4, d, dnnl_f32, dnnl_nchw) == dnnl_success)
        sk->kind = dnnl_memory_desc_equal(md, &b) ? 1 : dnnl_memory_desc_equal(md, &c) ? 0 : 2;
}

int iabn_conv_dnnl_blocked(const iabn_conv_geom *g, int y_side)
{
    side_kind sk = {y_side, 0};
    iabn_err e = {0};
    probe(g, IABN_CONV_FWD, 0, look_layout, &sk, &e);
    return sk.kind;
}

static void look_wino(const op_plan *p, void *arg) { *(int *)arg = p->wino; }

int iabn_conv_winograd(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    if (!wino_geometry(g) || !iabn_conv_use_dnnl(g, pass)) return 0;
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

/* ptr[i]: the caller's buffer of io[i]. */
static int plan_run(op_plan *p, dnnl_stream_t stream, void *const *ptr, void *scratch,
                    size_t scratch_bytes, iabn_err *e)
{
    const iabn_conv_geom *g = &p->g;
    if (scratch_bytes < p->total || (!scratch && p->total))
        return iabn_err_set(e, IABN_EINVAL,
                            "conv %dx%dx%dx%d -> %d (oneDNN pass %d): %zu bytes of scratch given, "
                            "%zu needed (was it planned with another thread count?)",
                            g->n, g->c_in, g->h_in, g->w_in, g->c_out, p->pass, scratch_bytes,
                            p->total);
    char *base = (char *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *mw = (float *)base, *wuser = NULL; /* the merged weights (plan_build) */
    void *ptrs[MAX_IO];
    for (int i = 0; i < p->nio; i++) {
        ptrs[i] = ptr[i];
        if (p->merge > 1 && (p->io[i].arg == DNNL_ARG_WEIGHTS || p->io[i].arg == DNNL_ARG_DIFF_WEIGHTS)) {
            wuser = ptr[i];
            if (!p->io[i].out) merge_weights(p, wuser, mw, 0);
            ptrs[i] = mw;
        }
    }
    ptr = ptrs;
    dnnl_exec_arg_t args[MAX_IO + 1];
    int na = 0;
    if (p->pad_m) {
        DN(dnnl_memory_set_data_handle(p->pad_m, base + p->pad_off));
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->pad_m};
    }
    for (int i = 0; i < p->nio; i++) {
        op_io *io = &p->io[i];
        DN(dnnl_memory_set_data_handle(io->user_m, ptr[i]));
        if (!io->via_buf) {
            args[na++] = (dnnl_exec_arg_t){io->arg, io->user_m};
            continue;
        }
        DN(dnnl_memory_set_data_handle(io->prim_m, base + io->off));
        args[na++] = (dnnl_exec_arg_t){io->arg, io->prim_m};
        if (io->out) continue;
        if (io->map.mem) {
            iabn_blocked_pack(&io->map, ptr[i], (float *)(base + io->off));
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
        op_io *io = &p->io[i];
        if (!io->out || !io->via_buf) continue;
        if (io->map.mem) { /* an accumulating output (the weight pass) */
            iabn_blocked_unpack_add(&io->map, (const float *)(base + io->off), ptr[i]);
            continue;
        }
        dnnl_exec_arg_t ra[3] = {{DNNL_ARG_FROM, io->prim_m}, {DNNL_ARG_TO, io->user_m}};
        int nr = 2;
        if (p->pad_m) ra[nr++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->pad_m};
        if ((rc = exec(io->reorder, stream, nr, ra, g, e))) return rc;
    }
    if (p->merge > 1 && p->pass == IABN_CONV_BWD_FILTER) merge_weights(p, wuser, mw, 1);
    return 0;
}

/* Runs one pass with the plan from the cache, or a plan of its own. */
static int run(iabn_conv_cache *c, const iabn_conv_geom *g, int pass, int bias,
               void *const *ptr, void *scratch, size_t scratch_bytes, iabn_err *e)
{
    int threads = max_threads();
    if (c) {
        op_plan *p = NULL;
        int rc = cache_get(c, g, pass, bias, threads, &p, e);
        return rc ? rc : plan_run(p, c->stream, ptr, scratch, scratch_bytes, e);
    }
    iabn_conv_cache tmp;
    memset(&tmp, 0, sizeof tmp);
    int rc = engine_new(&tmp.eng, &tmp.stream, e);
    if (rc) return rc;
    op_plan p;
    memset(&p, 0, sizeof p);
    p.g = *g;
    p.pass = pass;
    p.threads = threads;
    rc = plan_build(tmp.eng, &p, bias, 1, e);
    if (!rc) rc = plan_run(&p, tmp.stream, ptr, scratch, scratch_bytes, e);
    plan_destroy(&p);
    dnnl_stream_destroy(tmp.stream);
    dnnl_engine_destroy(tmp.eng);
    return rc;
}

int iabn_conv_dnnl_fwd(iabn_conv_cache *c, const iabn_conv_geom *g, const float *x,
                       const float *w, const float *bias, float *y, void *scratch,
                       size_t scratch_bytes, iabn_err *e)
{
    void *ptr[4] = {(void *)x, (void *)w};
    int n = 2;
    if (bias) ptr[n++] = (void *)bias;
    ptr[n] = y;
    return run(c, g, IABN_CONV_FWD, bias != NULL, ptr, scratch, scratch_bytes, e);
}

int iabn_conv_dnnl_bwd_data(iabn_conv_cache *c, const iabn_conv_geom *g, const float *dy,
                            const float *w, float *dx, void *scratch, size_t scratch_bytes,
                            iabn_err *e)
{
    void *ptr[3] = {(void *)dy, (void *)w, dx};
    return run(c, g, IABN_CONV_BWD_DATA, 0, ptr, scratch, scratch_bytes, e);
}

int iabn_conv_dnnl_bwd_filter(iabn_conv_cache *c, const iabn_conv_geom *g, const float *x,
                              const float *dy, float *dw, float *dbias, void *scratch,
                              size_t scratch_bytes, iabn_err *e)
{
    void *ptr[4] = {(void *)x, (void *)dy, dw, dbias};
    return run(c, g, IABN_CONV_BWD_FILTER, dbias != NULL, ptr, scratch, scratch_bytes, e);
}

#endif
