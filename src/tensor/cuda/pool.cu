/* cuda/pool.cu: max pooling with an int32 argmax, global average pooling
 * and windowed average pooling on CUDA, twins of cpu/pool.c (cpu/ops.h and
 * backend.h document the semantics; math/pool.h holds the shared window
 * arithmetic).
 * The backwards gather (each input element sums its windows in a fixed
 * order), never scatter with float atomics: deterministic run to run.
 * NCHW only: a blocked layout is refused (kernels.h).
 */
#include <math.h>

#include "tensor/cuda/internal.h"
#include "tensor/cuda/kernels.h"
#include "tensor/math/pool.h"

namespace {

/* cpu/pool.c's scan: first maximum wins a tie, NaN wins over numbers */
__global__ void maxpool_fwd_k(size_t n, int h, int w, int k, int s, int p, int ho, int wo,
                              const float *x, float *y, int32_t *am)
{
    IABN_CUDA_GRID_LOOP(i, n) {
        int ow = (int)(i % (size_t)wo);
        int oh = (int)((i / (size_t)wo) % (size_t)ho);
        size_t pl = i / ((size_t)wo * (size_t)ho);
        const float *xp = x + pl * (size_t)h * (size_t)w;
        int hs = oh * s - p, he = hs + k, ws = ow * s - p, we = ws + k;
        hs = hs < 0 ? 0 : hs;
        he = he > h ? h : he;
        ws = ws < 0 ? 0 : ws;
        we = we > w ? w : we;
        if (hs >= he || ws >= we) {
            y[i] = -INFINITY;
            am[i] = -1;
            continue;
        }
        int32_t best = hs * w + ws;
        float m = -INFINITY;
        for (int ih = hs; ih < he; ih++)
            for (int iw = ws; iw < we; iw++) {
                float v = xp[ih * w + iw];
                if (v > m || isnan(v)) {
                    m = v;
                    best = ih * w + iw;
                }
            }
        y[i] = m;
        am[i] = best;
    }
}
/* Gather: input (ih, iw) sums dy of the windows that chose it, in (oh, ow)
 * order, which is the order the CPU's serial scatter adds them in. */
__global__ void maxpool_bwd_k(size_t n, int h, int w, int k, int s, int p, int ho, int wo,
                              const float *dy, const int32_t *am, float *dx)
{
    IABN_CUDA_GRID_LOOP(i, n) {
        int iw = (int)(i % (size_t)w);
        int ih = (int)((i / (size_t)w) % (size_t)h);
        size_t pl = i / ((size_t)w * (size_t)h);
        int32_t me = ih * w + iw;
        /* windows oh*s-p <= ih < oh*s-p+k */
        int oh0 = (ih + p - k + s) / s, oh1 = (ih + p) / s;
        int ow0 = (iw + p - k + s) / s, ow1 = (iw + p) / s;
        if (ih + p - k + s < 0) oh0 = 0;
        if (iw + p - k + s < 0) ow0 = 0;
        oh1 = oh1 > ho - 1 ? ho - 1 : oh1;
        ow1 = ow1 > wo - 1 ? wo - 1 : ow1;
        const float *dp = dy + pl * (size_t)ho * (size_t)wo;
        const int32_t *ap = am + pl * (size_t)ho * (size_t)wo;
        float acc = 0.f;
        for (int oh = oh0; oh <= oh1; oh++)
            for (int ow = ow0; ow <= ow1; ow++)
                if (ap[oh * wo + ow] == me) acc += dp[oh * wo + ow];
        dx[i] = acc;
    }
}
__global__ void gap_bwd_k(size_t n, int hw, const float *dy, float *dx)
{
    IABN_CUDA_GRID_LOOP(i, n) dx[i] = dy[i / (size_t)hw] / (float)hw;
}

/* Windowed average, forward: one thread per (plane, pooled row); the window
 * slides along the row, its sum kept in double (columns entering and leaving
 * while windows overlap, a fresh sum otherwise), and each pooled value is
 * written to every output that shows it (math/pool.h). */
struct avgwin {
    int kh, kw, sh, sw, ph, pw, top, left;
};
__device__ double avg_cols(const float *xp, int w, int r0, int kh, int c0, int c1)
{
    double s = 0;
    for (int r = r0; r < r0 + kh; r++)
        for (int c = c0; c < c1; c++) s += xp[(size_t)r * w + c];
    return s;
}
__global__ void avgpool_fwd_k(size_t n, int h, int w, avgwin P, int oh, int ow, const float *x,
                              float *y)
{
    IABN_CUDA_GRID_LOOP(t, n) {
        int pi = (int)(t % (size_t)P.ph);
        size_t pl = t / (size_t)P.ph;
        const float *xp = x + pl * (size_t)h * (size_t)w;
        float *yp = y + pl * (size_t)oh * (size_t)ow;
        int r0 = pi * P.sh, i0, i1;
        iabn_avgwin_outputs(pi, P.top, P.ph, oh, &i0, &i1);
        double inv = 1.0 / ((double)P.kh * P.kw), sum = 0;
        for (int pj = 0; pj < P.pw; pj++) {
            int c0 = pj * P.sw;
            if (pj == 0 || P.sw >= P.kw)
                sum = avg_cols(xp, w, r0, P.kh, c0, c0 + P.kw);
            else
                sum += avg_cols(xp, w, r0, P.kh, c0 - P.sw + P.kw, c0 + P.kw) -
                       avg_cols(xp, w, r0, P.kh, c0 - P.sw, c0);
            float v = (float)(sum * inv);
            int j0, j1;
            iabn_avgwin_outputs(pj, P.left, P.pw, ow, &j0, &j1);
            for (int i = i0; i < i1; i++)
                for (int j = j0; j < j1; j++) yp[(size_t)i * ow + j] = v;
        }
    }
}
/* Backward, gathered: input (r, c) sums, over the pooled cells whose window
 * holds it, the dy of every output showing that cell; overwrites dx. */
__global__ void avgpool_bwd_k(size_t n, int h, int w, avgwin P, int oh, int ow, const float *dy,
                              float *dx)
{
    IABN_CUDA_GRID_LOOP(t, n) {
        int c = (int)(t % (size_t)w);
        int r = (int)((t / (size_t)w) % (size_t)h);
        size_t pl = t / ((size_t)w * (size_t)h);
        const float *dp = dy + pl * (size_t)oh * (size_t)ow;
        int pi0, pi1, pj0, pj1;
        iabn_avgwin_cells_over(r, P.kh, P.sh, P.ph, &pi0, &pi1);
        iabn_avgwin_cells_over(c, P.kw, P.sw, P.pw, &pj0, &pj1);
        double acc = 0;
        for (int pi = pi0; pi < pi1; pi++) {
            int i0, i1;
            iabn_avgwin_outputs(pi, P.top, P.ph, oh, &i0, &i1);
            for (int pj = pj0; pj < pj1; pj++) {
                int j0, j1;
                iabn_avgwin_outputs(pj, P.left, P.pw, ow, &j0, &j1);
                for (int i = i0; i < i1; i++)
                    for (int j = j0; j < j1; j++) acc += dp[(size_t)i * ow + j];
            }
        }
        dx[t] = (float)(acc / ((double)P.kh * P.kw));
    }
}

} // namespace

extern "C" {

int iabn_cuda_avgpool_fwd(iabn_cuda_ctx *ctx, int n, int c, int h, int w, const int win[8], int oh,
                          int ow, const float *x, float *y, iabn_err *e)
{
    avgwin P = {win[0], win[1], win[2], win[3], win[4], win[5], win[6], win[7]};
    size_t cnt = n > 0 && c > 0 && P.ph > 0 && P.pw > 0 ? (size_t)n * c * P.ph : 0;
    IABN_CUDA_LAUNCH(avgpool_fwd_k, cnt, cnt, h, w, P, oh, ow, x, y);
}

int iabn_cuda_avgpool_bwd(iabn_cuda_ctx *ctx, int n, int c, int h, int w, const int win[8], int oh,
                          int ow, const float *dy, float *dx, iabn_err *e)
{
    avgwin P = {win[0], win[1], win[2], win[3], win[4], win[5], win[6], win[7]};
    size_t cnt = n > 0 && c > 0 && h > 0 && w > 0 ? (size_t)n * c * h * w : 0;
    IABN_CUDA_LAUNCH(avgpool_bwd_k, cnt, cnt, h, w, P, oh, ow, dy, dx);
}


int iabn_cuda_maxpool_fwd(iabn_cuda_ctx *ctx, int n, int c, int h, int w, iabn_layout layout,
                          int k, int s, int p, int ho, int wo, const float *x, float *y,
                          int32_t *argmax, iabn_err *e)
{
    IABN_CUDA_NCHW_ONLY(layout);
    size_t cnt = n > 0 && c > 0 && ho > 0 && wo > 0 ? (size_t)n * c * ho * wo : 0;
    IABN_CUDA_LAUNCH(maxpool_fwd_k, cnt, cnt, h, w, k, s, p, ho, wo, x, y, argmax);
}

int iabn_cuda_maxpool_bwd(iabn_cuda_ctx *ctx, int n, int c, int h, int w, iabn_layout layout,
                          int k, int s, int p, int ho, int wo, const float *dy,
                          const int32_t *argmax, float *dx, iabn_err *e)
{
    IABN_CUDA_NCHW_ONLY(layout);
    size_t cnt = n > 0 && c > 0 && h > 0 && w > 0 ? (size_t)n * c * h * w : 0;
    IABN_CUDA_LAUNCH(maxpool_bwd_k, cnt, cnt, h, w, k, s, p, ho, wo, dy, argmax, dx);
}

int iabn_cuda_gap_fwd(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                      const float *x, float *y, iabn_err *e)
{
    IABN_CUDA_NCHW_ONLY(layout);
    size_t planes = n > 0 && c > 0 && hw > 0 ? (size_t)n * c : 0;
    if (!planes) return 0;
    iabn_cuda_plane_sum_k<true><<<iabn_cuda_grid(planes * 32, IABN_CUDA_BLOCK), IABN_CUDA_BLOCK, 0,
                        ctx->stream>>>(planes, hw, x, y);
    IABN_LAUNCHED(e, "iabn_cuda_plane_sum_k");
    return 0;
}

int iabn_cuda_gap_bwd(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                      const float *dy, float *dx, iabn_err *e)
{
    IABN_CUDA_NCHW_ONLY(layout);
    size_t cnt = n > 0 && c > 0 && hw > 0 ? (size_t)n * c * hw : 0;
    IABN_CUDA_LAUNCH(gap_bwd_k, cnt, cnt, hw, dy, dx);
}

} // extern "C"
