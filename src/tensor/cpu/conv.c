/* cpu/conv.c: the CPU convolution entry points, the choice of path for a
 * geometry (the plan, which also sizes the scratch), and the im2col + sgemm
 * path used for grouped convolutions with many channels per group and small
 * dilated ones (dense ones go to oneDNN: cpu/conv_dnnl.c).
 *
 * Threading: a call runs in the caller's thread and opens its own OpenMP
 * regions.  Either the (image, group) items are spread over the threads, each
 * with its own column buffer and a single-threaded sgemm (cpu/blas.h: both
 * OpenBLAS's OpenMP build and oneDNN run sequentially inside a parallel
 * region), or the items run one after another with a threaded im2col and a
 * threaded sgemm.  Every region uses a static schedule and a fixed reduction
 * order, so results depend only on the thread count.
 */
#include "tensor/cpu/blas.h"
#include "tensor/cpu/conv_impl.h"
#include "tensor/cpu/ops.h"

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
     * in nChw16c need no reorder: those run the blocked kernel. */
    return g->groups == 1 && g->kh == 1 && g->kw == 1 && (long)g->h_out * g->w_out >= 28 * 28 &&
           g->x_layout == IABN_LAYOUT_NCHW && g->y_layout == IABN_LAYOUT_NCHW;
}

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
     * (docs/CPU.md).  The 14x14 case holds for its 16-lane AVX-512 kernels:
     * on an AVX2 CPU (jit:avx2, 8 lanes) the direct kernels run it 1.1x to
     * 1.4x faster in every pass. */
    if (g->groups != 1) {
        int cpg = g->c_in / g->groups < g->c_out / g->groups ? g->c_in / g->groups
                                                             : g->c_out / g->groups;
        if (cpg < 8 || (cpg < 16 && (g->dil != 1 || (long)g->h_out * g->w_out > 14 * 14 ||
                                     !iabn_conv_direct_avx512())))
            return 0;
        /* Without AVX-512 oneDNN runs the forward and weight passes of
         * dilated grouped convs on its GEMM kernel (x64:gemm:jit): the
         * direct kernels ran DeepLabV3-ResNeXt-101's (16 per group,
         * dilation 4, 32x32) 3.5x and 3.9x faster.  Its data pass is a JIT
         * kernel (jit:avx2) and stays. */
        if (g->dil != 1 && pass != IABN_CONV_BWD_DATA && !iabn_conv_direct_avx512()) return 0;
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
    if (g->c_in < 16 || g->c_out < 16) return 0;
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

/* Whether g's activations had better be nChw16c for the blocked direct
 * kernels (cpu/conv_blocked.c): grouped convs with up to 4 channels per
 * group, and 8 on maps larger than 14x14 (smaller ones run faster on
 * oneDNN, pairs of groups merged), on a CPU with AVX-512 (elsewhere they
 * run the portable build, for tests only).  docs/CPU.md has the figures. */
static int blocked_fast(const iabn_conv_geom *g)
{
    int cpg = g->c_in / g->groups;
    return iabn_conv_blocked_takes(g) && iabn_conv_direct_avx512() &&
           (cpg <= 4 || (cpg == 8 && (long)g->h_out * g->w_out > 14 * 14));
}

/* The path of a pass whose activations are laid out as g says. */
static iabn_conv_path choose_path(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    int blocked = g->x_layout != IABN_LAYOUT_NCHW || g->y_layout != IABN_LAYOUT_NCHW;
    if (blocked && blocked_fast(g)) return IABN_CONV_PATH_BLOCKED;
    if (iabn_conv_use_dnnl(g, pass)) return IABN_CONV_PATH_DNNL;
    if (blocked && iabn_conv_blocked_takes(g)) return IABN_CONV_PATH_BLOCKED;
    return IABN_CONV_PATH_IM2COL; /* a native one, or none (blocked) */
}

int iabn_conv_layouts_ok(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    if (g->x_layout == IABN_LAYOUT_NCHW && g->y_layout == IABN_LAYOUT_NCHW) return 1;
    iabn_conv_path p = choose_path(g, pass);
    return p == IABN_CONV_PATH_DNNL || p == IABN_CONV_PATH_BLOCKED;
}

int iabn_conv_layout_vote(const iabn_conv_geom *g, iabn_conv_pass pass, int y_side)
{
    iabn_conv_geom p = *g;
    p.x_layout = p.y_layout = IABN_LAYOUT_NCHW;
    if (blocked_fast(&p)) return 1;
    /* oneDNN with both sides blocked: its copy cap counts only NCHW
     * operands, so this holds wherever oneDNN takes any mix, and also for a
     * conv too large for the cap on NCHW (the native kernels run it there).
     * A mix with no kernel (one side blocked, the other over the cap) is
     * sent back to NCHW by the layout pass (iabn_conv_layouts_ok). */
    iabn_conv_geom b = p;
    b.x_layout = b.y_layout = IABN_LAYOUT_NCHW16C;
    if (!iabn_conv_use_dnnl(&b, pass)) return -1;
    if ((y_side ? p.c_out : p.c_in) % 16) return 0;
    /* 1x1 convs on large maps run NCHW operands on NCHW (no copies), and
     * nChw16c ones on oneDNN's blocked 1x1 kernel, about as fast
     * (docs/CPU.md): they vote as that kernel does, so that a run of
     * grouped or 3x3 convs between them stays blocked end to end. */
    if (iabn_conv_dnnl_plain(&p)) p.x_layout = p.y_layout = IABN_LAYOUT_NCHW16C;
    return iabn_conv_dnnl_blocked(&p, y_side);
}

int iabn_conv_accumulates(const iabn_conv_geom *g)
{
    iabn_conv_geom p = *g;
    p.accumulate = 1;
    for (int l = 0; l < 2; l++) { /* whatever layouts the graph gives it */
        p.x_layout = p.y_layout = l ? IABN_LAYOUT_NCHW16C : IABN_LAYOUT_NCHW;
        if (choose_path(&p, IABN_CONV_FWD) != IABN_CONV_PATH_DNNL) return 0;
    }
    return 1;
}

/* Floats of the blocked copies of g's NCHW operands (the blocked path
 * reorders them into its scratch, after the kernels' own part). */
static size_t blocked_copies(const iabn_conv_geom *g, size_t *xc)
{
    size_t x = g->x_layout == IABN_LAYOUT_NCHW ? (size_t)g->n * g->c_in * g->h_in * g->w_in : 0;
    size_t y = g->y_layout == IABN_LAYOUT_NCHW ? (size_t)g->n * g->c_out * g->h_out * g->w_out : 0;
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
 * gained 5-8% for more scratch, and stay.  Planning and running ask this
 * alike (no oneDNN query). */
static int native_weights(const iabn_conv_geom *g, iabn_conv_pass pass, int threads,
                          iabn_conv_plan *n)
{
    if (pass != IABN_CONV_BWD_FILTER || g->groups != 1 || g->kh * g->kw == 1 ||
        g->x_layout != IABN_LAYOUT_NCHW || g->y_layout != IABN_LAYOUT_NCHW ||
        iabn_conv_direct_avx512())
        return 0;
    iabn_conv_plan_make_native(g, pass, threads, n);
    return n->total * sizeof(float) <= IABN_DNNL_COPY_MAX;
}

void iabn_conv_plan_make(const iabn_conv_geom *g, iabn_conv_pass pass, int threads,
                         iabn_conv_plan *p)
{
    iabn_conv_path path = choose_path(g, pass);
    if (path == IABN_CONV_PATH_BLOCKED) {
        memset(p, 0, sizeof *p);
        p->path = path;
        p->threads = threads < 1 ? 1 : threads;
        size_t xc;
        p->col = iabn_conv_blocked_scratch(g, pass, p->threads);
        p->total = iabn_conv_round16(p->col) + blocked_copies(g, &xc);
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

/* ---- im2col / col2im ------------------------------------------------------ */

/* col[(ci*kh + r)*kw + s][oy*wo + ox] = src[ci][oy*S + r*d - pt][ox*S + s*d - pl], 0 outside. */
static void im2col(const iabn_conv_gd *c, const float *src, int channels, float *col, int par)
{
    int T = c->kh * c->kw;
    long rows = (long)channels * T;
    size_t hwi = (size_t)c->hi * c->wi, hwo = (size_t)c->ho * c->wo;
#pragma omp parallel for schedule(static) if (par)
    for (long q = 0; q < rows; q++) {
        int ci = (int)(q / T), t = (int)(q % T), r = t / c->kw, s = t % c->kw;
        float *dst = col + (size_t)q * hwo;
        const float *sp = src + (size_t)ci * hwi;
        int lo, hi;
        iabn_conv_tap_range(c->wo, c->wi, s, c->s, c->pl, c->d, &lo, &hi);
        long coff = (long)s * c->d - c->pl;
        for (int oy = 0; oy < c->ho; oy++) {
            float *drow = dst + (size_t)oy * c->wo;
            long iy = (long)oy * c->s + (long)r * c->d - c->pt;
            if (iy < 0 || iy >= c->hi || lo >= hi) {
                memset(drow, 0, sizeof(float) * c->wo);
                continue;
            }
            const float *srow = sp + iy * c->wi;
            for (int ox = 0; ox < lo; ox++) drow[ox] = 0;
            if (c->s == 1) {
                memcpy(drow + lo, srow + lo + coff, sizeof(float) * (hi - lo));
            } else {
                for (int ox = lo; ox < hi; ox++) drow[ox] = srow[(long)ox * c->s + coff];
            }
            for (int ox = hi; ox < c->wo; ox++) drow[ox] = 0;
        }
    }
}

/* dst[ci] = sum over taps of col rows scattered back (dst overwritten). */
static void col2im(const iabn_conv_gd *c, const float *col, int channels, float *dst, int par)
{
    int T = c->kh * c->kw;
    size_t hwi = (size_t)c->hi * c->wi, hwo = (size_t)c->ho * c->wo;
#pragma omp parallel for schedule(static) if (par)
    for (int ci = 0; ci < channels; ci++) {
        float *dp = dst + (size_t)ci * hwi;
        memset(dp, 0, sizeof(float) * hwi);
        for (int r = 0; r < c->kh; r++) {
            for (int s = 0; s < c->kw; s++) {
                const float *sp = col + ((size_t)ci * T + (size_t)r * c->kw + s) * hwo;
                int lo, hi;
                iabn_conv_tap_range(c->wo, c->wi, s, c->s, c->pl, c->d, &lo, &hi);
                long coff = (long)s * c->d - c->pl;
                for (int oy = 0; oy < c->ho; oy++) {
                    long iy = (long)oy * c->s + (long)r * c->d - c->pt;
                    if (iy < 0 || iy >= c->hi) continue;
                    float *drow = dp + iy * c->wi;
                    const float *srow = sp + (size_t)oy * c->wo;
                    for (int ox = lo; ox < hi; ox++) drow[(long)ox * c->s + coff] += srow[ox];
                }
            }
        }
    }
}

/* ---- im2col path ---------------------------------------------------------- */

static void add_bias(float *y, const float *bias, int channels, size_t hw, int par)
{
#pragma omp parallel for schedule(static) if (par)
    for (int co = 0; co < channels; co++) {
        float b = bias[co], *yp = y + (size_t)co * hw;
        for (size_t i = 0; i < hw; i++) yp[i] += b;
    }
}

static void fwd_item(const iabn_conv_gd *c, int no_col, int it, const float *x,
                     const float *w, const float *bias, float *y, float *col, int par)
{
    int n = it / c->G, g0 = it % c->G, T = c->kh * c->kw, k = c->cin * T;
    size_t hwi = (size_t)c->hi * c->wi, hwo = (size_t)c->ho * c->wo;
    const float *xin = x + ((size_t)n * c->G + g0) * c->cin * hwi;
    float *yout = y + ((size_t)n * c->G + g0) * c->cout * hwo;
    const float *b = xin;
    if (!no_col) {
        im2col(c, xin, c->cin, col, par);
        b = col;
    }
    iabn_sgemm(0, 0, c->cout, (int)hwo, k, 1.0f, w + (size_t)g0 * c->cout * k, k, b, (int)hwo, 0.0f,
               yout, (int)hwo);
    if (bias) add_bias(yout, bias + (size_t)g0 * c->cout, c->cout, hwo, par);
}

static void im2col_fwd(const iabn_conv_gd *c, const iabn_conv_plan *p, const float *x,
                       const float *w, const float *bias, float *y, float *cols)
{
    int items = c->n * c->G;
    if (p->items_parallel) {
#pragma omp parallel num_threads(p->threads)
        {
            float *col = cols + p->col * (size_t)iabn_conv_tid();
#pragma omp for schedule(static)
            for (int it = 0; it < items; it++) fwd_item(c, p->no_col, it, x, w, bias, y, col, 0);
        }
    } else {
        for (int it = 0; it < items; it++) fwd_item(c, p->no_col, it, x, w, bias, y, cols, 1);
    }
}

static void bwd_data_item(const iabn_conv_gd *c, int no_col, int it, const float *dy,
                          const float *w, float *dx, float *col, int par)
{
    int n = it / c->G, g0 = it % c->G, T = c->kh * c->kw, k = c->cin * T;
    size_t hwi = (size_t)c->hi * c->wi, hwo = (size_t)c->ho * c->wo;
    const float *dyp = dy + ((size_t)n * c->G + g0) * c->cout * hwo;
    float *dxp = dx + ((size_t)n * c->G + g0) * c->cin * hwi;
    const float *wg = w + (size_t)g0 * c->cout * k;
    if (no_col) {
        iabn_sgemm(1, 0, c->cin, (int)hwo, c->cout, 1.0f, wg, k, dyp, (int)hwo, 0.0f, dxp,
                   (int)hwo);
        return;
    }
    iabn_sgemm(1, 0, k, (int)hwo, c->cout, 1.0f, wg, k, dyp, (int)hwo, 0.0f, col, (int)hwo);
    col2im(c, col, c->cin, dxp, par);
}

/* For stride 1, dx is the forward conv of dy with w'[ci][co][t] =
 * w[co][ci][T-1-t] and padding d*(k-1) - p: its im2col GEMM is as deep as the
 * forward one, and col2im's scattered read-modify-write goes away. */
static void flip_weights(const iabn_conv_gd *c, const float *w, float *w2, int threads)
{
    int T = c->kh * c->kw;
    long rows = (long)c->G * c->cin;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long q = 0; q < rows; q++) {
        int g0 = (int)(q / c->cin), ci = (int)(q % c->cin);
        float *dst = w2 + (size_t)q * c->cout * T;
        for (int co = 0; co < c->cout; co++) {
            const float *src = w + (((size_t)g0 * c->cout + co) * c->cin + ci) * T;
            for (int t = 0; t < T; t++) dst[(size_t)co * T + t] = src[T - 1 - t];
        }
    }
}

static void im2col_bwd_data(const iabn_conv_gd *c, const iabn_conv_plan *p, const float *dy,
                            const float *w, float *dx, float *scr)
{
    if (p->flip) {
        iabn_conv_gd f = *c;
        f.cin = c->cout; f.cout = c->cin;
        f.hi = c->ho; f.wi = c->wo; f.ho = c->hi; f.wo = c->wi;
        f.pt = c->d * (c->kh - 1) - c->pt;
        f.pl = c->d * (c->kw - 1) - c->pl;
        flip_weights(c, w, scr, p->threads);
        im2col_fwd(&f, p, dy, scr, NULL, dx, scr + p->wbuf);
        return;
    }
    int items = c->n * c->G;
    if (p->items_parallel) {
#pragma omp parallel num_threads(p->threads)
        {
            float *col = scr + p->wbuf + p->col * (size_t)iabn_conv_tid();
#pragma omp for schedule(static)
            for (int it = 0; it < items; it++) bwd_data_item(c, p->no_col, it, dy, w, dx, col, 0);
        }
    } else {
        for (int it = 0; it < items; it++)
            bwd_data_item(c, p->no_col, it, dy, w, dx, scr + p->wbuf, 1);
    }
}

/* dwg += dy[n, g0] * col^T for one item. */
static void bwd_filter_item(const iabn_conv_gd *c, int no_col, int n, int g0, const float *x,
                            const float *dy, float *dwg, float *col, int par)
{
    int T = c->kh * c->kw, k = c->cin * T;
    size_t hwi = (size_t)c->hi * c->wi, hwo = (size_t)c->ho * c->wo;
    const float *xin = x + ((size_t)n * c->G + g0) * c->cin * hwi;
    const float *dyp = dy + ((size_t)n * c->G + g0) * c->cout * hwo;
    const float *b = xin;
    if (!no_col) {
        im2col(c, xin, c->cin, col, par);
        b = col;
    }
    iabn_sgemm(0, 1, c->cout, k, (int)hwo, 1.0f, dyp, (int)hwo, b, (int)hwo, 1.0f, dwg, k);
}

static void im2col_bwd_filter(const iabn_conv_gd *c, const iabn_conv_plan *p, const float *x,
                              const float *dy, float *dw, float *scr)
{
    int T = c->kh * c->kw, k = c->cin * T, G = c->G;
    size_t wg = (size_t)c->cout * k;
    if (!p->items_parallel) {
        for (int n = 0; n < c->n; n++)
            for (int g0 = 0; g0 < G; g0++)
                bwd_filter_item(c, p->no_col, n, g0, x, dy, dw + g0 * wg, scr, 1);
        return;
    }
    if (!p->partials) {
        /* Each group's dw slice belongs to one thread: no reduction needed. */
#pragma omp parallel num_threads(p->threads)
        {
            float *col = scr + p->col * (size_t)iabn_conv_tid();
#pragma omp for schedule(static)
            for (int g0 = 0; g0 < G; g0++)
                for (int n = 0; n < c->n; n++)
                    bwd_filter_item(c, p->no_col, n, g0, x, dy, dw + g0 * wg, col, 0);
        }
        return;
    }
    float *parts = scr + p->col * (size_t)p->ncol;
    size_t total = wg * G;
    int team = 1;
    int items = c->n * G;
#pragma omp parallel num_threads(p->threads)
    {
        int tid = iabn_conv_tid();
        float *col = scr + p->col * (size_t)tid, *part = parts + p->part * (size_t)tid;
#pragma omp single
        team = iabn_conv_team();
        memset(part, 0, sizeof(float) * total);
#pragma omp for schedule(static)
        for (int it = 0; it < items; it++)
            bwd_filter_item(c, p->no_col, it / G, it % G, x, dy, part + (it % G) * wg, col, 0);
    }
#pragma omp parallel for schedule(static) num_threads(p->threads)
    for (size_t i = 0; i < total; i++) {
        float s = 0;
        for (int t = 0; t < team; t++) s += parts[p->part * (size_t)t + i];
        dw[i] += s;
    }
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

static int too_little_scratch(const iabn_conv_plan *p, const iabn_conv_geom *g,
                              iabn_conv_pass pass, size_t scratch_bytes, iabn_err *e)
{
    return iabn_err_set(e, IABN_EINVAL,
                        "conv %dx%dx%dx%d -> %d (pass %d): %zu bytes of scratch given, %zu "
                        "needed (was it planned with another thread count?)",
                        g->n, g->c_in, g->h_in, g->w_in, g->c_out, (int)pass, scratch_bytes,
                        p->total * sizeof(float));
}

/* The blocked path: NCHW operands go through blocked copies in the scratch
 * (after the kernels' part, p->col floats). */
static int run_blocked(const iabn_conv_plan *p, const iabn_conv_geom *g, iabn_conv_pass pass,
                       const float *a, const float *b, const float *bias, float *out,
                       float *dbias, void *scratch, size_t scratch_bytes, iabn_err *e)
{
    if (scratch_bytes < p->total * sizeof(float) || !scratch)
        return too_little_scratch(p, g, pass, scratch_bytes, e);
    float *scr = scratch, *xcopy = scr + iabn_conv_round16(p->col);
    size_t xc;
    blocked_copies(g, &xc);
    float *ycopy = xcopy + xc;
    int hwi = g->h_in * g->w_in, hwo = g->h_out * g->w_out, rc = 0;
    int xn = g->x_layout == IABN_LAYOUT_NCHW, yn = g->y_layout == IABN_LAYOUT_NCHW;
    const iabn_layout B = IABN_LAYOUT_NCHW16C, N = IABN_LAYOUT_NCHW;
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
        iabn_conv_blocked_bwd_filter(g, p->threads, xn ? xcopy : a, yn ? ycopy : b, out, dbias,
                                     scr);
        break;
    }
    return rc;
}

int iabn_conv_run_plan(iabn_conv_cache *c, const iabn_conv_plan *p, const iabn_conv_geom *g,
                       iabn_conv_pass pass, const float *a, const float *b, const float *bias,
                       float *out, float *dbias, void *scratch, size_t scratch_bytes,
                       iabn_err *e)
{
    if (p->path == IABN_CONV_PATH_BLOCKED)
        return run_blocked(p, g, pass, a, b, bias, out, dbias, scratch, scratch_bytes, e);
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
        else im2col_fwd(&cd, p, a, b, bias, out, scr);
        break;
    case IABN_CONV_BWD_DATA:
        if (p->path == IABN_CONV_PATH_DIRECT) iabn_conv_direct_bwd_data(g, p->threads, a, b, out, scr);
        else if (p->path == IABN_CONV_PATH_TAPS) iabn_conv_taps_bwd_data(&cd, p, a, b, out, scr);
        else im2col_bwd_data(&cd, p, a, b, out, scr);
        break;
    default:
        if (p->path == IABN_CONV_PATH_DIRECT) iabn_conv_direct_bwd_filter(g, p->threads, a, b, out, scr);
        else if (p->path == IABN_CONV_PATH_TAPS) iabn_conv_taps_bwd_filter(&cd, p, a, b, out, scr);
        else im2col_bwd_filter(&cd, p, a, b, out, scr);
        if (dbias) iabn_conv_bias_grad(g->n, g->c_out, (size_t)g->h_out * g->w_out, b, dbias);
        break;
    }
    return 0;
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
    if (g->accumulate && (pass != IABN_CONV_FWD || path != IABN_CONV_PATH_DNNL))
        return iabn_err_set(e, IABN_EINVAL,
                            "conv %dx%dx%dx%d -> %d, k %dx%d, g %d: an accumulating output (a "
                            "residual add fused into the convolution) is for the forward on the "
                            "oneDNN path (iabn_conv_accumulates), not this one",
                            g->n, g->c_in, g->h_in, g->w_in, g->c_out, g->kh, g->kw, g->groups);
    if (path == IABN_CONV_PATH_DNNL) {
        if (!native_weights(g, pass, call_threads(), &p)) {
            memset(&p, 0, sizeof p);
            p.path = IABN_CONV_PATH_DNNL;
        }
    } else if (path == IABN_CONV_PATH_BLOCKED) {
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
    if (g->accumulate != 1 || choose_path(g, IABN_CONV_FWD) != IABN_CONV_PATH_DNNL)
        return iabn_err_set(e, IABN_EINVAL,
                            "conv %dx%dx%dx%d -> %d, k %dx%d, g %d: a residual added apart "
                            "(iabn_conv_fwd_add) needs the accumulate flag and the oneDNN path "
                            "(iabn_conv_accumulates)",
                            g->n, g->c_in, g->h_in, g->w_in, g->c_out, g->kh, g->kw, g->groups);
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
