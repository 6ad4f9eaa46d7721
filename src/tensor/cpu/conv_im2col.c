/* cpu/conv_im2col.c: the im2col + sgemm path of the CPU convolution
 * (cpu/conv_impl.h), for grouped convolutions with many channels per group
 * and small dilated ones, planned by cpu/conv.c (iabn_conv_plan_make_native).
 *
 * Threading: either the (image, group) items are spread over the threads,
 * each with its own column buffer and a single-threaded sgemm (cpu/blas.h:
 * OpenBLAS's OpenMP build runs sequentially inside a parallel region), or the
 * items run one after another with a threaded im2col and a threaded sgemm.
 * Every region uses a static schedule and a fixed reduction order, so
 * results depend only on the thread count.
 */
#include "tensor/cpu/blas.h"
#include "tensor/cpu/conv_impl.h"

#include <string.h>

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

void iabn_conv_im2col_fwd(const iabn_conv_gd *c, const iabn_conv_plan *p, const float *x,
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

void iabn_conv_im2col_bwd_data(const iabn_conv_gd *c, const iabn_conv_plan *p,
                               const float *dy,
                            const float *w, float *dx, float *scr)
{
    if (p->flip) {
        iabn_conv_gd f = *c;
        f.cin = c->cout; f.cout = c->cin;
        f.hi = c->ho; f.wi = c->wo; f.ho = c->hi; f.wo = c->wi;
        f.pt = c->d * (c->kh - 1) - c->pt;
        f.pl = c->d * (c->kw - 1) - c->pl;
        flip_weights(c, w, scr, p->threads);
        iabn_conv_im2col_fwd(&f, p, dy, scr, NULL, dx, scr + p->wbuf);
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

void iabn_conv_im2col_bwd_filter(const iabn_conv_gd *c, const iabn_conv_plan *p,
                                 const float *x,
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
