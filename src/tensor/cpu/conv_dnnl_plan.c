/* cpu/conv_dnnl_plan.c: the plans of the CPU convolution's oneDNN path
 * (cpu/conv_dnnl_impl.h): the convolution descriptor of a pass, the
 * primitive (Winograd or direct; the sum post-op of an accumulating
 * forward, the binary one of a residual added apart), and per operand the
 * copy or reorder between the caller's layout and the primitive's.  What a
 * plan holds and why: cpu/conv_dnnl.c's opening comment. */
#include "tensor/cpu/conv_impl.h"

#include "iabn_config.h"

#if IABN_HAVE_DNNL

#include "tensor/cpu/conv_dnnl_impl.h"

#include <string.h>

const char *iabn_dnnl_status_name(dnnl_status_t s)
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

int iabn_dnnl_fail(iabn_err *e, const char *call, dnnl_status_t s, const iabn_conv_geom *g)
{
    return iabn_err_set(e, s == dnnl_out_of_memory ? IABN_ENOMEM : IABN_EDEVICE,
                        "oneDNN %s failed (%s) for conv %dx%dx%dx%d -> %d, k %dx%d, s %d, p %d, "
                        "d %d, g %d",
                        call, iabn_dnnl_status_name(s), g->n, g->c_in, g->h_in, g->w_in,
                        g->c_out, g->kh, g->kw, g->stride, g->pad, g->dil, g->groups);
}


void iabn_dnnl_plan_destroy(iabn_dnnl_plan *p)
{
    for (int i = 0; i < p->nio; i++) {
        iabn_dnnl_io *io = &p->io[i];
        if (io->reorder) dnnl_primitive_destroy(io->reorder);
        if (io->rpd) dnnl_primitive_desc_destroy(io->rpd);
        if (io->user_m) dnnl_memory_destroy(io->user_m);
        if (io->prim_m) dnnl_memory_destroy(io->prim_m);
        iabn_blocked_map_free(&io->map);
    }
    if (p->pad_m) dnnl_memory_destroy(p->pad_m);
    if (p->r_m) dnnl_memory_destroy(p->r_m);
    if (p->prim) dnnl_primitive_destroy(p->prim);
    if (p->pd) dnnl_primitive_desc_destroy(p->pd);
    memset(p, 0, sizeof *p);
}

/* A user-managed scratchpad, and with `sum` the sum post-op (y += conv),
 * or with `add` the binary post-op y = conv + r, r described by *add. */
static int user_scratchpad_attr(dnnl_primitive_attr_t *attr, int sum,
                                const dnnl_memory_desc_t *add, const iabn_conv_geom *g,
                                iabn_err *e)
{
    DN(dnnl_primitive_attr_create(attr));
    dnnl_status_t s = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
    if (s == dnnl_success && (sum || add)) {
        dnnl_post_ops_t po;
        s = dnnl_post_ops_create(&po);
        if (s == dnnl_success) {
            s = add ? dnnl_post_ops_append_binary(po, dnnl_binary_add, add)
                    : dnnl_post_ops_append_sum(po, 1.0f);
            if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(*attr, po);
            dnnl_post_ops_destroy(po);
        }
    }
    if (s != dnnl_success) {
        dnnl_primitive_attr_destroy(*attr);
        *attr = NULL;
        return iabn_dnnl_fail(e, "attribute setup", s, g);
    }
    return 0;
}

dnnl_format_tag_t iabn_dnnl_act_tag(iabn_layout l)
{
    switch (l) {
    case IABN_LAYOUT_NCHW16C: return dnnl_nChw16c;
    case IABN_LAYOUT_NCHW8C: return dnnl_nChw8c;
    case IABN_LAYOUT_NCHW:
    case IABN_LAYOUT_COUNT: break;
    }
    return dnnl_nchw;
}

/* The caller's descriptor of x (x_side) or y: its dims in its layout. */
static dnnl_status_t act_md(const iabn_conv_geom *g, int x_side, dnnl_memory_desc_t *md)
{
    dnnl_dims_t d = {g->n, x_side ? g->c_in : g->c_out, x_side ? g->h_in : g->h_out,
                     x_side ? g->w_in : g->w_out};
    return dnnl_memory_desc_init_by_tag(md, 4, d, dnnl_f32,
                                        iabn_dnnl_act_tag(x_side ? g->x_layout : g->y_layout));
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
    return G > 1 && G % 2 == 0 && g->c_in / G == 8 && g->c_out / G == 8 &&
                   iabn_conv_blocked_layout() == IABN_LAYOUT_NCHW16C
               ? 2
               : 1;
}

static size_t merged_weight_count(const iabn_conv_geom *pg)
{
    return (size_t)pg->c_out * (pg->c_in / pg->groups) * pg->kh * pg->kw;
}

/* mw (merged, pg) <- w (g), zeros off the diagonal blocks; or, with `back`,
 * w += the diagonal blocks of mw. */
void iabn_dnnl_merge_weights(const iabn_dnnl_plan *p, float *w, float *mw, int back)
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

/* The pass p's primitive runs: its own, or the forward for a transposed
 * data pass (transposed_fwd below). */
static int prim_pass(const iabn_dnnl_plan *p) { return p->tfwd ? IABN_CONV_FWD : p->pass; }

/* Adds operand `arg` with the caller's layout; a reorder and a scratch copy
 * when the primitive wants another layout, or when an output accumulates. */
static int add_io(dnnl_engine_t eng, iabn_dnnl_plan *p, int arg, dnnl_query_t q, int qi, int out,
                  int accumulate, size_t *off, size_t *pad, iabn_err *e)
{
    const iabn_conv_geom *g = &p->pg;
    iabn_dnnl_io *io = &p->io[p->nio++];
    io->arg = arg;
    io->out = out;
    io->accumulate = accumulate;
    const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(p->pd, q, qi);
    if (!want) return iabn_dnnl_fail(e, "query of an operand's layout", dnnl_runtime_error, g);
    io->prim_md = *want;
    int plain = 1; /* the caller's layout is dense in dims order (the map's) */
    if (want->ndims == 1) {
        dnnl_dims_t bd = {g->c_out};
        DN(dnnl_memory_desc_init_by_tag(&io->user_md, 1, bd, dnnl_f32, dnnl_x));
    } else if (p->tfwd && arg == DNNL_ARG_WEIGHTS) {
        /* the caller's OIHW weights of g, read as pg's (O = g's c_in) */
        dnnl_dims_t d = {g->c_out, g->c_in, 1, 1};
        DN(dnnl_memory_desc_init_by_tag(&io->user_md, 4, d, dnnl_f32, dnnl_iohw));
        plain = 0; /* not in pg's dims order: oneDNN's reorder, not the map */
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
    *off += iabn_dnnl_align64(dnnl_memory_desc_get_size(&io->prim_md));
    DN(dnnl_memory_create(&io->prim_m, &io->prim_md, eng, DNNL_MEMORY_NONE));
    /* the layout map (cpu/blocked_map.h): the addition of an accumulating
     * output wherever it can express the layout, the copy of the weights
     * going in where it moves 16 x 16 blocks (a 1x1 conv's) */
    if ((accumulate && plain) || (!out && arg == DNNL_ARG_WEIGHTS && plain)) {
        int m = iabn_blocked_map_from_dnnl(&io->map, &io->prim_md);
        if (m < 0) return iabn_err_set(e, IABN_ENOMEM, "out of memory for a weight layout map");
        if (m == 0 && (out || io->map.tile16 || io->map.rows16)) return 0;
        iabn_blocked_map_free(&io->map);
    }
    dnnl_primitive_attr_t attr;
    int rc = user_scratchpad_attr(&attr, accumulate, NULL, g, e);
    if (rc) return rc;
    dnnl_status_t s = out ? dnnl_reorder_primitive_desc_create(&io->rpd, &io->prim_md, eng,
                                                               &io->user_md, eng, attr)
                          : dnnl_reorder_primitive_desc_create(&io->rpd, &io->user_md, eng,
                                                               &io->prim_md, eng, attr);
    dnnl_primitive_attr_destroy(attr);
    if (s != dnnl_success) return iabn_dnnl_fail(e, "reorder creation", s, g);
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
int iabn_dnnl_wino_geometry(const iabn_conv_geom *g)
{
    return g->winograd && g->groups == 1 && g->kh == 3 && g->kw == 3 && g->stride == 1 &&
           g->dil == 1 && g->pad <= 1 && g->c_in % 16 == 0 && g->c_out % 16 == 0 &&
           (long)g->h_out * g->w_out >= 14 * 14;
}

/* The primitive descriptor of a pass with Winograd (wino) or direct. */
static int prim_desc(dnnl_engine_t eng, iabn_dnnl_plan *p, int bias, int wino, dnnl_status_t *s,
                     iabn_err *e)
{
    const iabn_conv_geom *g = &p->pg;
    dnnl_convolution_desc_t cd;
    int pass = prim_pass(p);
    int rc = conv_desc(g, pass, bias, wino, &cd, e);
    if (rc) return rc;
    dnnl_memory_desc_t r_md;
    if (p->binary) DN(act_md(g, 0, &r_md));
    dnnl_primitive_attr_t attr;
    if ((rc = user_scratchpad_attr(&attr, p->sum_post, p->binary ? &r_md : NULL, g, e)))
        return rc;
    dnnl_primitive_desc_t hint = NULL;
    *s = dnnl_success;
    if (pass != IABN_CONV_FWD) {
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

/* Images per call of a Winograd pass: the fewest that divide the batch
 * and give at least WINO_SLICE_TILES output tiles (4x4 each), or with
 * g->wino_images the most up to that many that give WINO_MIN_TILES.
 * oneDNN's Winograd scratchpad holds the transformed input and output of
 * every tile of the call, 450 MiB for WideResNet-38's 128-channel convs at
 * 112x112 and batch 16, and that held Winograd out of the plan where the
 * arena had no room for it (winograd.c).  Each call transforms the weights
 * again (the weight pass: transforms its result back), a cost that grows
 * with the channels as the work does, so what matters is the tiles per
 * call: at 784 the passes ran as fast as on the whole batch (within the
 * host's noise of about 10%); at 392 they lost 5-15%, at 196 15-20%, at 49
 * 40-60%, where the direct kernels catch up (docs/CPU.md "Winograd on
 * slices of the batch"). */
#define WINO_SLICE_TILES 784
#define WINO_MIN_TILES 196
static int wino_slice(const iabn_conv_geom *g)
{
    long tiles = (long)((g->h_out + 3) / 4) * ((g->w_out + 3) / 4);
    int fast = g->n, least = g->n;
    for (int s = g->n; s >= 1; s--) {
        if (g->n % s) continue;
        if (s * tiles >= WINO_SLICE_TILES) fast = s;
        if (s * tiles >= WINO_MIN_TILES) least = s;
    }
    if (g->wino_images <= 0 || g->wino_images >= fast) return fast;
    for (int s = g->wino_images; s > least; s--)
        if (g->n % s == 0) return s;
    return least;
}

/* The pass's primitive descriptor: Winograd where asked and oneDNN has it
 * for this CPU (on a slice of the batch: p->pg.n), else direct; p->sum_post
 * and p->binary as they ask, or 0 where neither takes the post-op. */
static int make_pd(dnnl_engine_t eng, iabn_dnnl_plan *p, int bias, iabn_err *e)
{
    const iabn_conv_geom *g = &p->pg;
    for (;;) {
        dnnl_status_t s = dnnl_unimplemented;
        int rc = 0;
        p->wino = iabn_dnnl_wino_geometry(g);
        p->pg.n = p->wino ? wino_slice(&p->g) : p->g.n;
        if (p->wino) rc = prim_desc(eng, p, bias, 1, &s, e);
        if (!rc && s != dnnl_success) {
            p->wino = 0;
            p->pg.n = p->g.n;
            rc = prim_desc(eng, p, bias, 0, &s, e);
        }
        if (rc || s == dnnl_success) return rc;
        if (!p->sum_post && !p->binary) return iabn_dnnl_fail(e, "convolution descriptor", s, g);
        p->sum_post = p->binary = 0;
    }
}

/* Whether the forward primitive writes y in the caller's layout (its sum
 * post-op then reads the caller's y). */
static int dst_as_user(const iabn_dnnl_plan *p)
{
    dnnl_memory_desc_t user;
    const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(p->pd, dnnl_query_dst_md, 0);
    return want && act_md(&p->pg, 0, &user) == dnnl_success && dnnl_memory_desc_equal(&user, want);
}

/* Whether a kernel generates a binary post-op into its output loop.
 * oneDNN's GEMM convolutions (`x64:gemm:jit`: the 1x1 convs on NCHW, which
 * an AVX2 CPU keeps there) and its reference ones apply it one element at a
 * time after the GEMM: 25x the convolution's own time on ResNeXt-101's 1x1
 * convs at 56x56 (docs/CPU.md), where copying r into y and the GEMM's
 * accumulating sum post-op cost next to nothing. */
static int binary_fused(const char *impl)
{
    return !strstr(impl, "gemm") && !strstr(impl, "ref");
}

/* Whether two primitives run the same kernel on the same operand layouts. */
static int same_kernel(dnnl_primitive_desc_t a, dnnl_primitive_desc_t b)
{
    const char *ia = NULL, *ib = NULL;
    if (dnnl_primitive_desc_query(a, dnnl_query_impl_info_str, 0, &ia) != dnnl_success ||
        dnnl_primitive_desc_query(b, dnnl_query_impl_info_str, 0, &ib) != dnnl_success ||
        strcmp(ia, ib) != 0 || !binary_fused(ia))
        return 0;
    static const dnnl_query_t q[] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md};
    for (size_t i = 0; i < sizeof q / sizeof *q; i++) {
        const dnnl_memory_desc_t *ma = dnnl_primitive_desc_query_md(a, q[i], 0);
        const dnnl_memory_desc_t *mb = dnnl_primitive_desc_query_md(b, q[i], 0);
        if (!ma || !mb || !dnnl_memory_desc_equal(ma, mb)) return 0;
    }
    return 1;
}

/* An accumulate 2 forward (y = r + conv, r apart): p->pd with the binary
 * post-op (p->binary 1) where the primitive is the one the convolution
 * alone runs, writing y in the caller's layout, on a kernel that fuses it
 * (binary_fused): the kernel is the same, and the addition after its last
 * product gives the bits of the convolution and then the add.  Elsewhere
 * p->binary stays 0 and p->pd NULL. */
static int try_binary(dnnl_engine_t eng, iabn_dnnl_plan *p, int bias, iabn_err *e)
{
    int rc = make_pd(eng, p, bias, e), ok = 0;
    if (!rc && dst_as_user(p)) {
        dnnl_primitive_desc_t alone = p->pd;
        p->pd = NULL;
        p->binary = 1;
        rc = make_pd(eng, p, bias, e);
        ok = !rc && p->binary && same_kernel(alone, p->pd);
        dnnl_primitive_desc_destroy(alone);
    }
    if (ok) return 0;
    if (p->pd) dnnl_primitive_desc_destroy(p->pd);
    p->pd = NULL;
    p->binary = 0;
    return rc;
}

/* Whether the data pass of g runs as the forward of g transposed.  The
 * data pass of a 1x1 conv (stride 1, no padding) is dx = W^T dy: the
 * forward of a conv from c_out to c_in whose weights are W's transpose,
 * which oneDNN's reorder reads from the caller's OIHW (as IOHW).  On AVX2
 * (jit_1x1:avx2, nChw8c) that ran ResNeXt's 1x1 data passes at 14x14 and
 * more 1.04x-1.07x faster on average, at 7x7 (batch 4) 0.82x-0.91x: the
 * transposing reorder of the weights costs about as much as the straight
 * one on 196 output pixels (docs/CPU.md "AVX2 CPUs").  Hence at least 784
 * pixels in the batch (4 x 14 x 14).  Unmeasured with AVX-512, where the
 * data pass stays; not for the NCHW GEMM convs (iabn_conv_dnnl_plain). */
#define TFWD_MIN_PIXELS 784
static int transposed_fwd(const iabn_conv_geom *g, int pass)
{
    return pass == IABN_CONV_BWD_DATA && g->groups == 1 && g->kh == 1 && g->kw == 1 &&
           g->stride == 1 && g->pad == 0 && g->dil == 1 && !iabn_conv_dnnl_plain(g) &&
           (long)g->n * g->h_out * g->w_out >= TFWD_MIN_PIXELS &&
           iabn_conv_blocked_layout() == IABN_LAYOUT_NCHW8C;
}

/* Builds the descriptors (and, with `prims`, the primitives) of a plan. */
int iabn_dnnl_plan_build(dnnl_engine_t eng, iabn_dnnl_plan *p, int bias, int prims, iabn_err *e)
{
    p->merge = merge_factor(&p->g);
    p->pg = p->g;
    p->pg.groups /= p->merge;
    p->tfwd = transposed_fwd(&p->g, p->pass);
    if (p->tfwd) {
        iabn_conv_geom *t = &p->pg;
        t->c_in = p->g.c_out;
        t->c_out = p->g.c_in;
        t->x_layout = p->g.y_layout;
        t->y_layout = p->g.x_layout;
    }
    const iabn_conv_geom *g = &p->pg;
    int acc = p->pass == IABN_CONV_FWD ? p->g.accumulate : 0;
    p->sum_post = p->binary = 0;
    int rc = acc == 2 ? try_binary(eng, p, bias, e) : 0;
    if (!rc && !p->binary) { /* r, where apart, is copied into y first */
        p->sum_post = acc != 0;
        rc = make_pd(eng, p, bias, e);
        if (!rc && p->sum_post && !dst_as_user(p)) { /* y through a copy, added to y */
            dnnl_primitive_desc_destroy(p->pd);
            p->pd = NULL;
            p->sum_post = 0;
            rc = make_pd(eng, p, bias, e);
        }
    }
    if (rc) return rc;
    DN(dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, &p->impl));

    size_t off = 0, pad = 0;
    if (p->merge > 1) /* the merged weights first */
        off = iabn_dnnl_align64(merged_weight_count(&p->pg) * sizeof(float));
    const dnnl_memory_desc_t *spm = dnnl_primitive_desc_query_md(p->pd, dnnl_query_scratchpad_md, 0);
    pad = spm ? dnnl_memory_desc_get_size(spm) : 0;
    switch (prim_pass(p)) {
    case IABN_CONV_FWD: /* or the transposed data pass: dy, w, dx */
        rc = add_io(eng, p, DNNL_ARG_SRC, dnnl_query_src_md, 0, 0, 0, &off, &pad, e);
        if (!rc) rc = add_io(eng, p, DNNL_ARG_WEIGHTS, dnnl_query_weights_md, 0, 0, 0, &off, &pad, e);
        if (!rc && bias)
            rc = add_io(eng, p, DNNL_ARG_BIAS, dnnl_query_weights_md, 1, 0, 0, &off, &pad, e);
        if (!rc)
            rc = add_io(eng, p, DNNL_ARG_DST, dnnl_query_dst_md, 0, 1,
                        acc && !p->sum_post && !p->binary, &off, &pad, e);
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
    p->total = 64 + off + iabn_dnnl_align64(pad);
    if (!prims) return 0;
    DN(dnnl_primitive_create(&p->prim, p->pd));
    if (p->binary) {
        dnnl_memory_desc_t r_md;
        DN(act_md(g, 0, &r_md));
        DN(dnnl_memory_create(&p->r_m, &r_md, eng, DNNL_MEMORY_NONE));
    }
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

#endif
