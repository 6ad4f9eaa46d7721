/* cpu/conv.c: the CPU convolution entry points and the choice of path for
 * a geometry and its activation layouts (the plan, which also sizes the
 * scratch): oneDNN (cpu/conv_dnnl.c), Winograd F(2x2, 3x3) on nChw8c
 * (cpu/conv_wino.c), the blocked grouped kernels (cpu/conv_blocked.c), the
 * hand-written dense weight and 1x1 data passes (cpu/conv_wgrad.c,
 * cpu/conv_dgrad.c), the direct kernels (cpu/conv_direct.c), the per-tap
 * GEMMs (cpu/conv_taps.c) or im2col + sgemm (cpu/conv_im2col.c).
 *
 * A call runs in the caller's thread and opens its own OpenMP regions; every
 * path's results depend only on the thread count.
 */
#include "tensor/cpu/conv_impl.h"
#include "tensor/cpu/ops.h"

#include "iabn_config.h"

#include <string.h>

/* Largest per-thread dw partial (floats) before bwd-filter falls back to a
 * sequential item loop with a threaded sgemm. */
#define PARTIAL_MAX ((size_t)1 << 22)
/* Floats of one gathered tap window (taps path): images are batched into a
 * GEMM up to this size, which keeps the window within the L3 cache. */
#define TAPS_COL_MAX ((size_t)1 << 22)

int iabn_conv_geom_init(iabn_conv_geom *g, int n, int c_in, int h_in, int w_in, int c_out,
                        int kh, int kw, int stride, int pad, int dil, int groups)
{
    if (!g || n < 1 || c_in < 1 || h_in < 1 || w_in < 1 || c_out < 1 || kh < 1 || kw < 1 ||
        stride < 1 || pad < 0 || dil < 1 || groups < 1 || c_in % groups || c_out % groups)
        return -1;
    long ho = ((long)h_in + 2L * pad - (long)dil * (kh - 1) - 1) / stride + 1;
    long wo = ((long)w_in + 2L * pad - (long)dil * (kw - 1) - 1) / stride + 1;
    /* C division truncates toward zero, so a negative numerator above -stride
     * would still give 1: check the extent itself. */
    if ((long)h_in + 2L * pad < (long)dil * (kh - 1) + 1 ||
        (long)w_in + 2L * pad < (long)dil * (kw - 1) + 1 || ho < 1 || wo < 1)
        return -1;
    g->n = n; g->c_in = c_in; g->h_in = h_in; g->w_in = w_in;
    g->c_out = c_out; g->h_out = (int)ho; g->w_out = (int)wo;
    g->kh = kh; g->kw = kw; g->stride = stride; g->pad = pad; g->dil = dil;
    g->groups = groups;
    g->x_layout = g->y_layout = IABN_LAYOUT_NCHW;
    g->winograd = 0;
    g->wino_images = 0;
    g->accumulate = 0;
    return 0;
}

void iabn_conv_tap_range(int out, int in, int k, int stride, int pad, int dil, int *lo,
                         int *hi)
{
    long off = (long)k * dil - pad;
    /* o*stride + off in [0, in)  <=>  o in [ceil(-off/stride), floor((in-1-off)/stride)] */
    long a = -off > 0 ? (-off + stride - 1) / stride : -((off) / stride);
    long top = (long)in - 1 - off;
    long b = top >= 0 ? top / stride + 1 : -((-top + stride - 1) / stride) + 1;
    if (a < 0) a = 0;
    if (b > out) b = out;
    if (b < a) b = a;
    *lo = (int)a;
    *hi = (int)b;
}

/* Fraction of the nominal multiply-adds whose input lies inside the image. */
static double valid_fraction(const iabn_conv_geom *g)
{
    double rows = 0, cols = 0;
    for (int r = 0; r < g->kh; r++) {
        int lo, hi;
        iabn_conv_tap_range(g->h_out, g->h_in, r, g->stride, g->pad, g->dil, &lo, &hi);
        rows += hi - lo;
    }
    for (int s = 0; s < g->kw; s++) {
        int lo, hi;
        iabn_conv_tap_range(g->w_out, g->w_in, s, g->stride, g->pad, g->dil, &lo, &hi);
        cols += hi - lo;
    }
    return rows * cols / ((double)g->kh * g->kw * g->h_out * g->w_out);
}

int iabn_conv_dnnl_plain(const iabn_conv_geom *g)
{
    /* oneDNN's GEMM kernel for NCHW 1x1 convs (x64:gemm:jit) runs at
     * 90-97% of peak forward and backward-data on maps of 28x28 and more;
     * its blocked 1x1 kernel is as fast but the reorders of the whole batch
     * around each call cost 10-30% there.  On smaller maps the blocked
     * kernel wins even with them (docs/CPU.md).  Operands the graph keeps
     * blocked need no reorder: those run the blocked kernel. */
    return g->groups == 1 && g->kh == 1 && g->kw == 1 && (long)g->h_out * g->w_out >= 28 * 28 &&
           g->x_layout == IABN_LAYOUT_NCHW && g->y_layout == IABN_LAYOUT_NCHW;
}

/* A stem conv writing a blocked y: fewer input channels than a block (an
 * image's 3), which no blocked layout holds, so x stays NCHW.  oneDNN's
 * "flat" kernels read such an x as it is and write y blocked, with no copies
 * (its forward, and with 3 channels its weight pass; docs/CPU.md "The
 * stem"): the conv's y and the BN after it stay blocked, and the next
 * conv reads them without reordering. */
static int stem_blocked(const iabn_conv_geom *g)
{
    return g->groups == 1 && g->kh * g->kw > 1 && g->dil == 1 && g->x_layout == IABN_LAYOUT_NCHW &&
           g->y_layout != IABN_LAYOUT_NCHW && g->c_in < iabn_layout_block(g->y_layout) &&
           g->c_out >= 16 && g->c_out % iabn_layout_block(g->y_layout) == 0;
}

/* The rule's boundaries between oneDNN and the native kernels follow
 * oneDNN's kernels, so they ask the CPU (iabn_cpu_avx512), not whether this
 * build has its own AVX-512 kernels (iabn_conv_direct_avx512: release
 * builds only; a sanitizer build on an AVX-512 CPU once took the AVX2
 * boundaries here while oneDNN ran its AVX-512 kernels). */
int iabn_conv_use_dnnl(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    if (!iabn_conv_have_dnnl()) return 0;
    /* Grouped convs: oneDNN's JIT kernels run 16 or more channels per group
     * 1.5x to 4x faster than the direct kernels (and than im2col + GEMM),
     * dilated ones (DeepLab on ResNeXt) 2x; 8 per group on maps up to 14x14
     * (run as 16 per group, pairs of groups merged: cpu/conv_dnnl.c) 1.2x
     * faster, 8 per group on larger maps 0.7x (0.85x merged on 56x56), and
     * dilated with 8 per group its weight pass falls back to a GEMM at 26
     * GFLOP/s; with 4 per group oneDNN's grouped path is 2.5x slower
     * (docs/CPU.md).  The 14x14 case holds for its 16-lane AVX-512 kernels.
     * On an AVX2 CPU (jit:avx2, 8 lanes) 8 per group is one channel block:
     * unmerged, on nChw8c operands, oneDNN ran ResNeXt-101's mod4 conv
     * (4x512x14x14, 64 groups) as fast as the direct kernels forward, 1.3x-
     * 1.6x faster backward-data and 2x-2.2x faster backward-weights, and
     * 8 per group at 28x28 and 56x56 1.0x / 1.2x / 1.05x-1.3x; on NCHW
     * operands (reordered) it wins only up to 14x14 (docs/LAYOUTS.md
     * "nChw8c"). */
    if (g->groups != 1) {
        int cpg = g->c_in / g->groups < g->c_out / g->groups ? g->c_in / g->groups
                                                             : g->c_out / g->groups;
        long hw = (long)g->h_out * g->w_out;
        int blocked = g->x_layout != IABN_LAYOUT_NCHW || g->y_layout != IABN_LAYOUT_NCHW;
        if (cpg < 8) return 0;
        if (cpg < 16 && iabn_cpu_avx512() && (g->dil != 1 || hw > 14 * 14)) return 0;
        if (cpg < 16 && !iabn_cpu_avx512() &&
            (cpg != 8 || g->dil != 1 || (!blocked && hw > 14 * 14)))
            return 0;
        /* Without AVX-512 oneDNN runs the forward and weight passes of
         * dilated grouped convs on its GEMM kernel (x64:gemm:jit): the
         * direct kernels ran DeepLabV3-ResNeXt-101's (16 per group,
         * dilation 4, 32x32) 3.5x and 3.9x faster.  Its data pass is a JIT
         * kernel (jit:avx2) and stays. */
        if (g->dil != 1 && pass != IABN_CONV_BWD_DATA && !iabn_cpu_avx512()) return 0;
    }
#if defined(IABN_CONV_DNNL_ALL) && IABN_CONV_DNNL_ALL
    return 1;
#else
    /* oneDNN blocks channels by 16: narrower convs pad its layouts (and
     * the reorder copies in the scratch) and are the direct kernels' job.
     * Its JIT kernels skip the taps that read padding, but for the forward
     * and data passes of dilated convs it falls back to a plain GEMM that
     * computes them: those stay on the per-tap path when most taps read
     * padding (docs/CPU.md: on ASPP d=12 the per-tap path ties or wins
     * there, and oneDNN's weight pass is 1.5x faster). */
    if ((g->c_in < 16 || g->c_out < 16) && !stem_blocked(g)) return 0;
    /* oneDNN reorders the whole batch's input and output into blocked
     * copies in the node scratch; the native paths need a column buffer per
     * image at most.  Above IABN_DNNL_COPY_MAX those copies would raise the
     * step's planned memory (VGG19 at batch 32, 128x128: the largest scratch
     * 37 -> 256 MiB, the offload arena's lower bound 392 -> 640 MiB), and
     * memory comes first here: the native kernels run (docs/CPU.md).
     * Convs that oneDNN runs on NCHW directly make no copies, nor do the
     * operands the graph keeps blocked (x_layout / y_layout). */
    double copies = 4.0 * ((g->x_layout == IABN_LAYOUT_NCHW
                                ? (double)g->n * g->c_in * g->h_in * g->w_in : 0.0) +
                           (g->y_layout == IABN_LAYOUT_NCHW
                                ? (double)g->n * g->c_out * g->h_out * g->w_out : 0.0));
    if (!iabn_conv_dnnl_plain(g) && copies > (double)IABN_DNNL_COPY_MAX) return 0;
    return g->dil == 1 || pass == IABN_CONV_BWD_FILTER || valid_fraction(g) >= 0.8;
#endif
}

/* The blocked layout of g's operands where the blocked grouped kernels read
 * them: nChw16c or nChw8c on one side, the same or NCHW on the other (NCHW
 * copied through their scratch); else NCHW (both NCHW, or a mix). */
static iabn_layout blocked_operands(const iabn_conv_geom *g)
{
    const iabn_layout N = IABN_LAYOUT_NCHW;
    iabn_layout L = g->x_layout != N ? g->x_layout : g->y_layout;
    if (L != IABN_LAYOUT_NCHW16C && L != IABN_LAYOUT_NCHW8C) return N;
    return (g->x_layout == N || g->x_layout == L) && (g->y_layout == N || g->y_layout == L) ? L
                                                                                           : N;
}

/* Whether g's activations had better be laid out as L for the blocked
 * direct kernels (cpu/conv_blocked.c).  nChw16c on a CPU with AVX-512:
 * grouped convs with up to 4 channels per group, and 8 on maps larger than
 * 14x14 or where the input-side rotation (cpu/conv_blocked_rot.c: forward
 * and data) or the rows (cpu/conv_rows.c: the weight pass) take them
 * (oneDNN, pairs of groups merged, runs the others faster, and 16 per
 * group: 84-98% of peak at 14x14 against the rotation's 73-81%, 102-107%
 * at 7x7 against 69-96%, by nominal FLOPs).  nChw8c where the 8-lane
 * build is AVX2: up to 4 per group, and the forward and data passes of 8
 * per group where the rows take them (8 per group is one block there;
 * oneDNN's kernels run the rest, and that weight pass, faster).  Elsewhere
 * they run portable builds, for tests only.  docs/CPU.md has the figures. */
static int blocked_fast(const iabn_conv_geom *g, iabn_conv_pass pass, iabn_layout L)
{
    int cpg = g->c_in / g->groups;
    if (!iabn_conv_blocked_takes(g, L)) return 0;
    if (L == IABN_LAYOUT_NCHW8C)
        return iabn_conv_blocked_native_8c() &&
               (cpg <= 4 || iabn_conv_rows_takes(g, pass, 8));
    return iabn_conv_direct_avx512() &&
           (cpg <= 4 || (cpg == 8 && ((long)g->h_out * g->w_out > 14 * 14 ||
                                      iabn_conv_blocked_rot_takes(g, pass, 16) ||
                                      iabn_conv_rows_takes(g, pass, 16))));
}

/* The paths whose forward adds into y (g->accumulate): oneDNN's sum or
 * binary post-op, Winograd's output transform. */
static int adds_into_y(iabn_conv_path p)
{
    return p == IABN_CONV_PATH_DNNL || p == IABN_CONV_PATH_WINO;
}

/* The geometry the hand-written weight pass (cpu/conv_wgrad.c) runs for g:
 * g itself, or with its NCHW operands as the nChw16c copies the scratch
 * holds (run_blocked).  0 where it does not run g's pass.  The copies: for a
 * conv with taps whose weight pass oneDNN would run on NCHW operands, it
 * reorders them into the same copies and keeps blocked weight gradients
 * and a scratchpad besides; the kernel needs neither (DeepLabV3's ASPP at
 * 32x32: 4x faster, its scratch 324 -> 36 MiB; docs/CPU.md). */
static int wgrad_geom(const iabn_conv_geom *g, iabn_conv_pass pass, iabn_conv_geom *b)
{
    *b = *g;
    if (iabn_conv_wgrad_takes(g, pass)) return 1;
    if (blocked_operands(g) == IABN_LAYOUT_NCHW8C || g->kh * g->kw == 1) return 0;
    b->x_layout = b->y_layout = IABN_LAYOUT_NCHW16C;
    return iabn_conv_wgrad_takes(b, pass) && iabn_conv_use_dnnl(g, pass);
}

/* The path of a pass whose activations are laid out as g says. */
static iabn_conv_path choose_path(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    iabn_layout L = blocked_operands(g);
    int blocked = L != IABN_LAYOUT_NCHW;
    iabn_conv_geom wg;
    if (iabn_conv_wino_takes(g, pass)) return IABN_CONV_PATH_WINO;
    if (blocked && blocked_fast(g, pass, L)) return IABN_CONV_PATH_BLOCKED;
    if (wgrad_geom(g, pass, &wg)) return IABN_CONV_PATH_WGRAD;
    if (iabn_conv_dgrad_takes(g, pass)) return IABN_CONV_PATH_DGRAD;
    if (iabn_conv_use_dnnl(g, pass)) return IABN_CONV_PATH_DNNL;
    if (blocked && iabn_conv_blocked_takes(g, L)) return IABN_CONV_PATH_BLOCKED;
    return IABN_CONV_PATH_IM2COL; /* a native one, or none (blocked) */
}

int iabn_conv_layouts_ok(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    if (g->x_layout == IABN_LAYOUT_NCHW && g->y_layout == IABN_LAYOUT_NCHW) return 1;
    iabn_conv_path p = choose_path(g, pass);
    return p == IABN_CONV_PATH_DNNL || p == IABN_CONV_PATH_BLOCKED || p == IABN_CONV_PATH_WINO ||
           p == IABN_CONV_PATH_WGRAD || p == IABN_CONV_PATH_DGRAD;
}

int iabn_conv_winograd(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    return iabn_conv_wino_takes(g, pass) || iabn_conv_dnnl_winograd(g, pass);
}

static int call_threads(void);
static int native_weights(const iabn_conv_geom *g, iabn_conv_pass pass, int threads,
                          iabn_conv_plan *n);

iabn_layout iabn_conv_blocked_layout(void)
{
    return __builtin_cpu_supports("avx512f") ? IABN_LAYOUT_NCHW16C : IABN_LAYOUT_NCHW8C;
}

int iabn_conv_layout_vote(const iabn_conv_geom *g, iabn_conv_pass pass, int y_side)
{
    iabn_conv_geom p = *g;
    iabn_layout L = iabn_conv_blocked_layout();
    p.x_layout = p.y_layout = IABN_LAYOUT_NCHW;
    if (blocked_fast(&p, pass, L)) return 1;
    /* oneDNN with both sides blocked: its copy cap counts only NCHW
     * operands, so this holds wherever oneDNN takes any mix, and also for a
     * conv too large for the cap on NCHW (the native kernels run it there).
     * A mix with no kernel (one side blocked, the other over the cap) is
     * sent back to NCHW by the layout pass (iabn_conv_layouts_ok). */
    iabn_conv_geom b = p;
    b.x_layout = b.y_layout = L;
    /* Winograd F(2x2, 3x3) where the flag asks (nChw8c) needs both sides
     * blocked */
    if (iabn_conv_wino_takes(&b, pass)) return 1;
    /* the hand-written 1x1 weight pass (cpu/conv_wgrad.c) on nChw8c.  Its
     * k x k one votes as oneDNN's does below: it runs where the others'
     * votes keep the operands blocked, or through copies (a dilated conv
     * whose per-tap GEMMs read NCHW stays NCHW: voting for blocked there
     * cost DeepLabV3's ASPP reorders around its forward and data passes) */
    if (b.kh * b.kw == 1 && iabn_conv_wgrad_takes(&b, pass)) return 1;
    /* a stem: x NCHW, y as oneDNN's flat kernel writes it */
    iabn_conv_geom s = p;
    s.y_layout = L;
    if (stem_blocked(&s)) {
        if (!y_side) return 0;
        return iabn_conv_use_dnnl(&s, pass) ? iabn_conv_dnnl_blocked(&s, 1, L) : -1;
    }
    if (!iabn_conv_use_dnnl(&b, pass)) return -1;
    if ((y_side ? p.c_out : p.c_in) % iabn_layout_block(L)) return 0;
    /* A weight pass the native kernels run reads NCHW, blocked operands
     * through copies in its scratch: a memory pass beside its FLOPs, so it
     * counts for neither layout (a vote of 0 tipped the gradient of a conv
     * read by the global pooling, whose only other vote is its data pass's,
     * to NCHW, and that mix has no kernel over the copy cap). */
    iabn_conv_plan nw;
    if (native_weights(&b, pass, call_threads(), &nw)) return 2;
    /* 1x1 convs on large maps run NCHW operands on NCHW (no copies), and
     * blocked ones on oneDNN's blocked 1x1 kernel, about as fast
     * (docs/CPU.md): they vote as that kernel does, so that a run of
     * grouped or 3x3 convs between them stays blocked end to end. */
    if (iabn_conv_dnnl_plain(&p)) p.x_layout = p.y_layout = L;
    return iabn_conv_dnnl_blocked(&p, y_side, L);
}

int iabn_conv_accumulates(const iabn_conv_geom *g)
{
    iabn_conv_geom p = *g;
    p.accumulate = 1;
    for (int l = 0; l < 2; l++) { /* whatever layouts the graph gives it */
        p.x_layout = p.y_layout = l ? iabn_conv_blocked_layout() : IABN_LAYOUT_NCHW;
        if (!adds_into_y(choose_path(&p, IABN_CONV_FWD))) return 0;
    }
    return 1;
}

/* Floats of the copies of g's operands that are NCHW (of_nchw 1: the blocked
 * path reorders them into its scratch, after the kernels' own part) or
 * blocked (of_nchw 0: the native weight pass copies them to NCHW); *xc of
 * them are x's. */
static size_t copies(const iabn_conv_geom *g, int of_nchw, size_t *xc)
{
    int cx = (g->x_layout == IABN_LAYOUT_NCHW) == of_nchw;
    int cy = (g->y_layout == IABN_LAYOUT_NCHW) == of_nchw;
    size_t x = cx ? (size_t)g->n * g->c_in * g->h_in * g->w_in : 0;
    size_t y = cy ? (size_t)g->n * g->c_out * g->h_out * g->w_out : 0;
    *xc = iabn_conv_round16(x);
    return *xc + iabn_conv_round16(y);
}

/* Whether the native kernels run g's weight pass although oneDNN takes it;
 * n gets their plan for `threads` where the geometry qualifies.  Without AVX-512,
 * oneDNN's weight pass of dense convs with taps ran 1.2x-2.3x slower than
 * the native kernels on NCHW (jit:avx2, with the reorders of x and dy into
 * nChw8c and of dw back): WideResNet-38's weight gradients took 4.5-4.8 s
 * of a 10 s step.  Dilated ones fall back to its GEMM kernel there, which
 * computes the taps that read padding and keeps a large scratchpad: the
 * per-tap path ran DeepLab's ASPP 3.5x faster, and DeepLabV3-WRN38's arena
 * fell by a third (docs/CPU.md "AVX2 CPUs").  Native column buffers grow
 * with the threads: only where they fit oneDNN's copy cap.  1x1 convs
 * gained 5-8% for more scratch, and stay.  Blocked (nChw8c) operands are
 * reordered into NCHW copies after the native scratch: oneDNN's weight pass
 * on them, without reorders, still ran 1.2x-1.6x slower (bench conv's dense
 * cases), and a reorder is a memory pass beside a dense conv's FLOPs.
 * Planning and running ask this alike (no oneDNN query). */
static int native_weights(const iabn_conv_geom *g, iabn_conv_pass pass, int threads,
                          iabn_conv_plan *n)
{
    if (pass != IABN_CONV_BWD_FILTER || g->groups != 1 || g->kh * g->kw == 1 ||
        iabn_cpu_avx512() || stem_blocked(g))
        return 0;
    iabn_conv_geom p = *g;
    p.x_layout = p.y_layout = IABN_LAYOUT_NCHW;
    iabn_conv_plan_make_native(&p, pass, threads, n);
    int fits = n->total * sizeof(float) <= IABN_DNNL_COPY_MAX;
    size_t xc;
    n->total = iabn_conv_round16(n->total) + copies(g, 0, &xc);
    return fits;
}

void iabn_conv_plan_make(const iabn_conv_geom *g, iabn_conv_pass pass, int threads,
                         iabn_conv_plan *p)
{
    iabn_conv_path path = choose_path(g, pass);
    if (path == IABN_CONV_PATH_WINO) {
        memset(p, 0, sizeof *p);
        p->path = path;
        p->threads = threads < 1 ? 1 : threads;
        p->total = iabn_conv_wino_scratch(g, pass, p->threads);
        return;
    }
    if (path == IABN_CONV_PATH_DGRAD) { /* no scratch */
        memset(p, 0, sizeof *p);
        p->path = path;
        p->threads = threads < 1 ? 1 : threads;
        return;
    }
    if (path == IABN_CONV_PATH_WGRAD) {
        memset(p, 0, sizeof *p);
        p->path = path;
        p->threads = threads < 1 ? 1 : threads;
        iabn_conv_geom b;
        size_t xc;
        wgrad_geom(g, pass, &b);
        p->col = iabn_conv_wgrad_scratch(&b, p->threads);
        p->total = iabn_conv_round16(p->col) + copies(g, 1, &xc); /* none where blocked */
        return;
    }
    if (path == IABN_CONV_PATH_BLOCKED) {
        memset(p, 0, sizeof *p);
        p->path = path;
        p->threads = threads < 1 ? 1 : threads;
        size_t xc;
        p->col = iabn_conv_blocked_scratch(g, pass, p->threads);
        p->total = iabn_conv_round16(p->col) + copies(g, 1, &xc);
        return;
    }
    if (path == IABN_CONV_PATH_DNNL) {
        if (native_weights(g, pass, threads, p)) return;
        memset(p, 0, sizeof *p);
        p->threads = threads < 1 ? 1 : threads;
        /* the layer's scratch is a function of the geometry: the larger of
         * the plans with and without bias (bwd-data has none) */
        size_t b0 = 0, b1 = 0;
        iabn_err e = {0};
        int rc = iabn_conv_dnnl_scratch(g, pass, 0, p->threads, &b0, NULL, &e);
        if (!rc && pass != IABN_CONV_BWD_DATA)
            rc = iabn_conv_dnnl_scratch(g, pass, 1, p->threads, &b1, NULL, &e);
        if (!rc) {
            p->path = IABN_CONV_PATH_DNNL;
            p->total = ((b0 > b1 ? b0 : b1) + sizeof(float) - 1) / sizeof(float);
            return;
        }
        /* oneDNN cannot plan it here: the call will say why */
    }
    iabn_conv_plan_make_native(g, pass, threads, p);
}

void iabn_conv_plan_make_native(const iabn_conv_geom *g, iabn_conv_pass pass, int threads,
                                iabn_conv_plan *p)
{
    memset(p, 0, sizeof *p);
    if (threads < 1) threads = 1;
    p->threads = threads;
    int G = g->groups, cpi = g->c_in / G, cpo = g->c_out / G, T = g->kh * g->kw;
    size_t hwi = (size_t)g->h_in * g->w_in, hwo = (size_t)g->h_out * g->w_out;

    /* Narrow groups have no GEMM worth the name.  Convs up to 64 channels
     * per group (ResNet's first stage, stems, ResNeXt's last stage) also run
     * better direct: a GEMM that thin spends much of its time packing the
     * im2col matrix.  Not when most taps read padding (the direct kernel
     * computes them), nor for their strided bwd-data (the direct kernel runs
     * it on a zero-upsampled dy, stride^2 times the work). */
    double vf = valid_fraction(g);
    int direct = T <= IABN_CONV_DIRECT_MAX_TAPS &&
                 ((G > 1 && cpi <= IABN_CONV_DIRECT_MAX_CPG && cpo <= IABN_CONV_DIRECT_MAX_CPG) ||
                  (T > 1 && cpi <= IABN_CONV_DENSE_DIRECT_MAX &&
                   cpo <= IABN_CONV_DENSE_DIRECT_MAX && vf >= 0.8 &&
                   !(pass == IABN_CONV_BWD_DATA && g->stride > 1)));
    if (direct) {
        p->path = IABN_CONV_PATH_DIRECT;
        p->total = iabn_conv_direct_scratch(g, pass, threads);
        return;
    }
    p->no_col = g->kh == 1 && g->kw == 1 && g->stride == 1 && g->pad == 0;

    /* Dilated convs on small maps read mostly padding: a GEMM per tap over
     * the window where it reads the image does only the useful work, and it
     * pays off once the per-tap GEMMs are deep enough. */
    if (!p->no_col && T > 1 && cpi >= 64 && cpo >= 32 && vf < 0.8) {
        p->path = IABN_CONV_PATH_TAPS;
        size_t per_img = (size_t)(cpi > cpo ? cpi : cpo) * hwo;
        size_t nb = TAPS_COL_MAX / per_img;
        if (nb < 1) nb = 1;
        if (nb > (size_t)g->n) nb = (size_t)g->n;
        p->nb = (int)nb;
        size_t wsz = iabn_conv_round16((size_t)g->c_out * T * cpi);
        p->wbuf = pass == IABN_CONV_BWD_FILTER ? 0 : wsz;
        p->dwbuf = pass == IABN_CONV_BWD_FILTER ? wsz : 0;
        p->col = iabn_conv_round16((size_t)cpi * nb * hwo);
        p->col2 = iabn_conv_round16((size_t)cpo * nb * hwo);
        p->total = p->wbuf + p->dwbuf + p->col + p->col2;
        return;
    }

    p->path = IABN_CONV_PATH_IM2COL;
    int items = g->n * G;
    p->items_parallel = threads > 1 && items >= threads &&
                        (items % threads == 0 || items >= 4 * threads);
    size_t k = (size_t)cpi * T;
    size_t col = k * hwo;
    if (pass == IABN_CONV_BWD_DATA && g->stride == 1 && !p->no_col) {
        p->flip = 1;
        p->wbuf = iabn_conv_round16((size_t)g->c_in * cpo * T);
        col = (size_t)cpo * T * hwi;
    }
    if (pass == IABN_CONV_BWD_FILTER && p->items_parallel && G < threads) {
        if ((size_t)g->c_out * k <= PARTIAL_MAX) {
            p->partials = 1;
            p->part = iabn_conv_round16((size_t)g->c_out * k);
        } else {
            p->items_parallel = 0;
        }
    }
    p->col = p->no_col ? 0 : iabn_conv_round16(col);
    p->ncol = p->items_parallel ? threads : 1;
    p->total = p->wbuf + p->col * p->ncol + (p->partials ? p->part * threads : 0);
}

size_t iabn_conv_scratch_bytes(const iabn_conv_geom *g, iabn_conv_pass pass, int threads)
{
    iabn_conv_plan p;
    iabn_conv_plan_make(g, pass, threads, &p);
    return p.total * sizeof(float);
}

static int call_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* ---- entry points --------------------------------------------------------- */

static void gd_from_geom(const iabn_conv_geom *g, iabn_conv_gd *c)
{
    c->n = g->n; c->G = g->groups;
    c->cin = g->c_in / g->groups; c->cout = g->c_out / g->groups;
    c->hi = g->h_in; c->wi = g->w_in; c->ho = g->h_out; c->wo = g->w_out;
    c->kh = g->kh; c->kw = g->kw; c->s = g->stride; c->d = g->dil;
    c->pt = g->pad; c->pl = g->pad;
}

void iabn_conv_bias_grad(int n, int c, size_t hw, const float *dy, float *dbias)
{
#pragma omp parallel for schedule(static)
    for (int co = 0; co < c; co++) {
        double s = 0;
        for (int i = 0; i < n; i++) {
            const float *p = dy + ((size_t)i * c + co) * hw;
            float part = 0;
            for (size_t j = 0; j < hw; j++) part += p[j];
            s += part;
        }
        dbias[co] += (float)s;
    }
}

void iabn_conv_bias_grad_blocked(int n, int c, size_t hw, int blk, const float *dy,
                                 float *dbias, int ob0, int ob1)
{
    for (int ob = ob0; ob < ob1; ob++) {
        double s[16] = {0};
        for (int i = 0; i < n; i++) {
            const float *p = dy + ((size_t)i * (c / blk) + ob) * hw * blk;
            float part[16] = {0};
            for (size_t j = 0; j < hw; j++)
                for (int l = 0; l < blk; l++) part[l] += p[j * blk + l];
            for (int l = 0; l < blk; l++) s[l] += part[l];
        }
        for (int l = 0; l < blk; l++) dbias[ob * blk + l] += (float)s[l];
    }
}

static int too_little_scratch(const iabn_conv_plan *p, const iabn_conv_geom *g,
                              iabn_conv_pass pass, size_t scratch_bytes, iabn_err *e)
{
    return iabn_err_set(e, IABN_EINVAL,
                        "conv %dx%dx%dx%d -> %d (pass %d): %zu bytes of scratch given, %zu "
                        "needed (was it planned with another thread count?)",
                        g->n, g->c_in, g->h_in, g->w_in, g->c_out, (int)pass, scratch_bytes,
                        p->total * sizeof(float));
}

/* The blocked path and the hand-written weight pass: NCHW operands go
 * through blocked copies in the scratch (after the kernels' part, p->col
 * floats); the weight pass's are nChw16c where both sides are NCHW (an
 * ASPP branch: wgrad_geom). */
static int run_blocked(const iabn_conv_plan *p, const iabn_conv_geom *g, iabn_conv_pass pass,
                       const float *a, const float *b, const float *bias, float *out,
                       float *dbias, void *scratch, size_t scratch_bytes, iabn_err *e)
{
    int wgrad = p->path == IABN_CONV_PATH_WGRAD; /* its 1x1 stride-1 pass needs no scratch */
    if (scratch_bytes < p->total * sizeof(float) || (!scratch && (p->total || !wgrad)))
        return too_little_scratch(p, g, pass, scratch_bytes, e);
    size_t xc;
    float *scr = scratch, *xcopy = copies(g, 1, &xc) ? scr + iabn_conv_round16(p->col) : NULL;
    float *ycopy = xcopy ? xcopy + xc : NULL;
    int hwi = g->h_in * g->w_in, hwo = g->h_out * g->w_out, rc = 0;
    int xn = g->x_layout == IABN_LAYOUT_NCHW, yn = g->y_layout == IABN_LAYOUT_NCHW;
    const iabn_layout N = IABN_LAYOUT_NCHW;
    iabn_layout B = blocked_operands(g);
    if (B == N) B = IABN_LAYOUT_NCHW16C; /* both NCHW: the weight pass's copies */
    switch (pass) {
    case IABN_CONV_FWD:
        if (xn && (rc = iabn_reorder(g->n, g->c_in, hwi, N, B, a, xcopy, e))) return rc;
        iabn_conv_blocked_fwd(g, p->threads, xn ? xcopy : a, b, bias, yn ? ycopy : out, scr);
        if (yn) rc = iabn_reorder(g->n, g->c_out, hwo, B, N, ycopy, out, e);
        break;
    case IABN_CONV_BWD_DATA:
        if (yn && (rc = iabn_reorder(g->n, g->c_out, hwo, N, B, a, ycopy, e))) return rc;
        iabn_conv_blocked_bwd_data(g, p->threads, yn ? ycopy : a, b, xn ? xcopy : out, scr);
        if (xn) rc = iabn_reorder(g->n, g->c_in, hwi, B, N, xcopy, out, e);
        break;
    default:
        if (xn && (rc = iabn_reorder(g->n, g->c_in, hwi, N, B, a, xcopy, e))) return rc;
        if (yn && (rc = iabn_reorder(g->n, g->c_out, hwo, N, B, b, ycopy, e))) return rc;
        if (wgrad) {
            iabn_conv_geom wg = *g; /* the kernel's view: both sides as the copies */
            wg.x_layout = wg.y_layout = B;
            iabn_conv_wgrad_bwd_filter(&wg, p->threads, xn ? xcopy : a, yn ? ycopy : b, out,
                                       dbias, scr);
        } else {
            iabn_conv_blocked_bwd_filter(g, p->threads, xn ? xcopy : a, yn ? ycopy : b, out,
                                         dbias, scr);
        }
        break;
    }
    return rc;
}

int iabn_conv_run_plan(iabn_conv_cache *c, const iabn_conv_plan *p, const iabn_conv_geom *g,
                       iabn_conv_pass pass, const float *a, const float *b, const float *bias,
                       float *out, float *dbias, void *scratch, size_t scratch_bytes,
                       iabn_err *e)
{
    if (p->path == IABN_CONV_PATH_BLOCKED || p->path == IABN_CONV_PATH_WGRAD)
        return run_blocked(p, g, pass, a, b, bias, out, dbias, scratch, scratch_bytes, e);
#if IABN_HAVE_DIRECT_AVX512
    if (p->path == IABN_CONV_PATH_DGRAD) { /* chosen for this geometry and pass only */
        iabn_conv_dgrad_bwd_data_avx512(g, p->threads, a, b, out);
        return 0;
    }
#endif
    if (p->path == IABN_CONV_PATH_WINO) {
        if (scratch_bytes < p->total * sizeof(float) || !scratch)
            return too_little_scratch(p, g, pass, scratch_bytes, e);
        if (pass == IABN_CONV_FWD) /* an accumulating forward adds y's own values */
            iabn_conv_wino_fwd(g, p->threads, a, b, bias, g->accumulate ? out : NULL, out,
                               scratch);
        else if (pass == IABN_CONV_BWD_DATA)
            iabn_conv_wino_bwd_data(g, p->threads, a, b, out, scratch);
        else
            iabn_conv_wino_bwd_filter(g, p->threads, a, b, out, dbias, scratch);
        return 0;
    }
    if (p->path == IABN_CONV_PATH_DNNL) {
        switch (pass) {
        case IABN_CONV_FWD:
            return iabn_conv_dnnl_fwd(c, g, a, b, bias, NULL, out, scratch, scratch_bytes, e);
        case IABN_CONV_BWD_DATA:
            return iabn_conv_dnnl_bwd_data(c, g, a, b, out, scratch, scratch_bytes, e);
        default:
            return iabn_conv_dnnl_bwd_filter(c, g, a, b, out, dbias, scratch, scratch_bytes, e);
        }
    }
    if (scratch_bytes < p->total * sizeof(float))
        return too_little_scratch(p, g, pass, scratch_bytes, e);
    iabn_conv_gd cd;
    gd_from_geom(g, &cd);
    float none[16]; /* stands in for a NULL scratch when none is needed */
    float *scr = scratch ? (float *)scratch : none;
    switch (pass) {
    case IABN_CONV_FWD:
        if (p->path == IABN_CONV_PATH_DIRECT) iabn_conv_direct_fwd(g, p->threads, a, b, bias, out, scr);
        else if (p->path == IABN_CONV_PATH_TAPS) iabn_conv_taps_fwd(&cd, p, a, b, bias, out, scr);
        else iabn_conv_im2col_fwd(&cd, p, a, b, bias, out, scr);
        break;
    case IABN_CONV_BWD_DATA:
        if (p->path == IABN_CONV_PATH_DIRECT) iabn_conv_direct_bwd_data(g, p->threads, a, b, out, scr);
        else if (p->path == IABN_CONV_PATH_TAPS) iabn_conv_taps_bwd_data(&cd, p, a, b, out, scr);
        else iabn_conv_im2col_bwd_data(&cd, p, a, b, out, scr);
        break;
    default:
        if (p->path == IABN_CONV_PATH_DIRECT) iabn_conv_direct_bwd_filter(g, p->threads, a, b, out, scr);
        else if (p->path == IABN_CONV_PATH_TAPS) iabn_conv_taps_bwd_filter(&cd, p, a, b, out, scr);
        else iabn_conv_im2col_bwd_filter(&cd, p, a, b, out, scr);
        if (dbias) iabn_conv_bias_grad(g->n, g->c_out, (size_t)g->h_out * g->w_out, b, dbias);
        break;
    }
    return 0;
}

/* The native weight pass of blocked operands (native_weights): x and dy
 * reordered into NCHW copies at the end of the plan's scratch. */
static int native_weights_blocked(iabn_conv_cache *c, const iabn_conv_plan *p,
                                  const iabn_conv_geom *g, const float *x, const float *dy,
                                  float *dw, float *dbias, void *scratch, size_t scratch_bytes,
                                  iabn_err *e)
{
    if (scratch_bytes < p->total * sizeof(float) || !scratch)
        return too_little_scratch(p, g, IABN_CONV_BWD_FILTER, scratch_bytes, e);
    size_t xc, nc = copies(g, 0, &xc);
    float *xcopy = (float *)scratch + (p->total - nc), *ycopy = xcopy + xc;
    int hwi = g->h_in * g->w_in, hwo = g->h_out * g->w_out, rc;
    iabn_conv_geom n = *g;
    n.x_layout = n.y_layout = IABN_LAYOUT_NCHW;
    if (g->x_layout != IABN_LAYOUT_NCHW) {
        if ((rc = iabn_reorder(g->n, g->c_in, hwi, g->x_layout, IABN_LAYOUT_NCHW, x, xcopy, e)))
            return rc;
        x = xcopy;
    }
    if (g->y_layout != IABN_LAYOUT_NCHW) {
        if ((rc = iabn_reorder(g->n, g->c_out, hwo, g->y_layout, IABN_LAYOUT_NCHW, dy, ycopy, e)))
            return rc;
        dy = ycopy;
    }
    return iabn_conv_run_plan(c, p, &n, IABN_CONV_BWD_FILTER, x, dy, NULL, dw, dbias, scratch,
                              scratch_bytes, e);
}

/* The oneDNN path plans inside conv_dnnl.c (its cache): only the others
 * need the plan here. */
static int run_pass(iabn_conv_cache *c, const iabn_conv_geom *g, iabn_conv_pass pass,
                    const float *a, const float *b, const float *bias, float *out, float *dbias,
                    void *scratch, size_t scratch_bytes, iabn_err *e)
{
    iabn_conv_plan p;
    iabn_conv_path path = choose_path(g, pass);
    if (g->accumulate != 0 && g->accumulate != 1) /* 2 is iabn_conv_fwd_add's, inside */
        return iabn_err_set(e, IABN_EINVAL,
                            "conv %dx%dx%dx%d -> %d: accumulate must be 0 or 1, not %d (a "
                            "residual apart from y goes through iabn_conv_fwd_add)",
                            g->n, g->c_in, g->h_in, g->w_in, g->c_out, g->accumulate);
    if (g->accumulate && (pass != IABN_CONV_FWD || !adds_into_y(path)))
        return iabn_err_set(e, IABN_EINVAL,
                            "conv %dx%dx%dx%d -> %d, k %dx%d, g %d: an accumulating output (a "
                            "residual add fused into the convolution) is for the forward on the "
                            "oneDNN or Winograd path (iabn_conv_accumulates), not this one",
                            g->n, g->c_in, g->h_in, g->w_in, g->c_out, g->kh, g->kw, g->groups);
    if (path == IABN_CONV_PATH_DNNL) {
        if (!native_weights(g, pass, call_threads(), &p)) {
            memset(&p, 0, sizeof p);
            p.path = IABN_CONV_PATH_DNNL;
        } else if (g->x_layout != IABN_LAYOUT_NCHW || g->y_layout != IABN_LAYOUT_NCHW) {
            return native_weights_blocked(c, &p, g, a, b, out, dbias, scratch, scratch_bytes, e);
        }
    } else if (path == IABN_CONV_PATH_BLOCKED || path == IABN_CONV_PATH_WINO ||
               path == IABN_CONV_PATH_WGRAD || path == IABN_CONV_PATH_DGRAD) {
        iabn_conv_plan_make(g, pass, call_threads(), &p);
    } else if (g->x_layout != IABN_LAYOUT_NCHW || g->y_layout != IABN_LAYOUT_NCHW) {
        return iabn_err_set(e, IABN_EINVAL,
                            "conv %dx%dx%dx%d -> %d, k %dx%d, g %d: %s / %s activations need the "
                            "oneDNN path or the blocked grouped kernels, which this conv does not "
                            "take",
                            g->n, g->c_in, g->h_in, g->w_in, g->c_out, g->kh, g->kw, g->groups,
                            iabn_layout_name(g->x_layout), iabn_layout_name(g->y_layout));
    } else {
        iabn_conv_plan_make_native(g, pass, call_threads(), &p);
    }
    return iabn_conv_run_plan(c, &p, g, pass, a, b, bias, out, dbias, scratch, scratch_bytes, e);
}

int iabn_conv_fwd(iabn_conv_cache *c, const iabn_conv_geom *g, const float *x, const float *w,
                  const float *bias, float *y, void *scratch, size_t scratch_bytes, iabn_err *e)
{
    return run_pass(c, g, IABN_CONV_FWD, x, w, bias, y, NULL, scratch, scratch_bytes, e);
}

int iabn_conv_fwd_add(iabn_conv_cache *c, const iabn_conv_geom *g, const float *x,
                      const float *w, const float *bias, const float *r, float *y,
                      void *scratch, size_t scratch_bytes, iabn_err *e)
{
    if (r == y) return iabn_conv_fwd(c, g, x, w, bias, y, scratch, scratch_bytes, e);
    iabn_conv_path path = choose_path(g, IABN_CONV_FWD);
    if (g->accumulate != 1 || !adds_into_y(path))
        return iabn_err_set(e, IABN_EINVAL,
                            "conv %dx%dx%dx%d -> %d, k %dx%d, g %d: a residual added apart "
                            "(iabn_conv_fwd_add) needs the accumulate flag and the oneDNN or "
                            "Winograd path (iabn_conv_accumulates)",
                            g->n, g->c_in, g->h_in, g->w_in, g->c_out, g->kh, g->kw, g->groups);
    if (path == IABN_CONV_PATH_WINO) {
        iabn_conv_plan p;
        iabn_conv_plan_make(g, IABN_CONV_FWD, call_threads(), &p);
        if (scratch_bytes < p.total * sizeof(float) || !scratch)
            return too_little_scratch(&p, g, IABN_CONV_FWD, scratch_bytes, e);
        iabn_conv_wino_fwd(g, p.threads, x, w, bias, r, y, scratch);
        return 0;
    }
    iabn_conv_geom g2 = *g;
    g2.accumulate = 2;
    return iabn_conv_dnnl_fwd(c, &g2, x, w, bias, r, y, scratch, scratch_bytes, e);
}

int iabn_conv_bwd_data(iabn_conv_cache *c, const iabn_conv_geom *g, const float *dy,
                       const float *w, float *dx, void *scratch, size_t scratch_bytes,
                       iabn_err *e)
{
    return run_pass(c, g, IABN_CONV_BWD_DATA, dy, w, NULL, dx, NULL, scratch, scratch_bytes, e);
}

int iabn_conv_bwd_filter(iabn_conv_cache *c, const iabn_conv_geom *g, const float *x,
                         const float *dy, float *dw, float *dbias, void *scratch,
                         size_t scratch_bytes, iabn_err *e)
{
    return run_pass(c, g, IABN_CONV_BWD_FILTER, x, dy, NULL, dw, dbias, scratch, scratch_bytes,
                    e);
}
