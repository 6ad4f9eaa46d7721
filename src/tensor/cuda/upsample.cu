/* cuda/upsample.cu: bilinear resize (align_corners = false) on CUDA, twin
 * of cpu/upsample.c; the taps come from math/upsample.h, so both agree bit
 * for bit on them.  The backward gathers: each input element sums the
 * outputs that read it in a fixed order, so it is deterministic.  NCHW
 * only: a blocked layout is refused (kernels.h).
 */
#include <math.h>

#include "tensor/cuda/internal.h"
#include "tensor/cuda/kernels.h"
#include "tensor/math/upsample.h"

namespace {

__global__ void bilinear_fwd_k(size_t n, int hi, int wi, int ho, int wo, float sh, float sw,
                               const float *x, float *y)
{
    IABN_CUDA_GRID_LOOP(i, n) {
        int ow = (int)(i % (size_t)wo);
        int oh = (int)((i / (size_t)wo) % (size_t)ho);
        size_t pl = i / ((size_t)wo * (size_t)ho);
        int h0, h1, w0, w1;
        float lh0, lh1, lw0, lw1;
        iabn_bilinear_src(sh, hi, oh, &h0, &h1, &lh0, &lh1);
        iabn_bilinear_src(sw, wi, ow, &w0, &w1, &lw0, &lw1);
        const float *xp = x + pl * (size_t)hi * (size_t)wi;
        y[i] = lh0 * (lw0 * xp[h0 * wi + w0] + lw1 * xp[h0 * wi + w1]) +
               lh1 * (lw0 * xp[h1 * wi + w0] + lw1 * xp[h1 * wi + w1]);
    }
}
/* Output index range whose source coordinate can touch input index i: the
 * exact test is redone per candidate, the margin only keeps it cheap. */
__device__ void bilinear_range(float scale, int in, int out, int i, int *lo, int *hi)
{
    double a = ((double)i - 1.0 + 0.5) / (double)scale - 0.5;
    double b = ((double)i + 1.0 + 0.5) / (double)scale - 0.5;
    int l = (int)floor(a) - 1, h = (int)ceil(b) + 1;
    if (i == 0) l = 0;
    if (i == in - 1) h = out - 1;
    *lo = l < 0 ? 0 : l;
    *hi = h > out - 1 ? out - 1 : h;
}
__device__ float bilinear_w(float scale, int in, int dst, int i)
{
    int i0, i1;
    float l0, l1;
    iabn_bilinear_src(scale, in, dst, &i0, &i1, &l0, &l1);
    return (i0 == i ? l0 : 0.f) + (i1 == i ? l1 : 0.f);
}
__global__ void bilinear_bwd_k(size_t n, int hi, int wi, int ho, int wo, float sh, float sw,
                               const float *dy, float *dx)
{
    IABN_CUDA_GRID_LOOP(i, n) {
        int iw = (int)(i % (size_t)wi);
        int ih = (int)((i / (size_t)wi) % (size_t)hi);
        size_t pl = i / ((size_t)wi * (size_t)hi);
        int r0, r1, c0, c1;
        bilinear_range(sh, hi, ho, ih, &r0, &r1);
        bilinear_range(sw, wi, wo, iw, &c0, &c1);
        const float *dp = dy + pl * (size_t)ho * (size_t)wo;
        float s = 0.f;
        for (int oh = r0; oh <= r1; oh++) {
            float wr = bilinear_w(sh, hi, oh, ih);
            if (wr == 0.f) continue;
            for (int ow = c0; ow <= c1; ow++) {
                float wc = bilinear_w(sw, wi, ow, iw);
                if (wc != 0.f) s += wr * wc * dp[(size_t)oh * wo + ow];
            }
        }
        dx[i] = s;
    }
}

} // namespace

extern "C" {

int iabn_cuda_bilinear_fwd(iabn_cuda_ctx *ctx, int n, int c, int hi, int wi, iabn_layout layout,
                           int ho, int wo, const float *x, float *y, iabn_err *e)
{
    IABN_CUDA_NCHW_ONLY(layout);
    size_t cnt = n > 0 && c > 0 && ho > 0 && wo > 0 ? (size_t)n * c * ho * wo : 0;
    IABN_CUDA_LAUNCH(bilinear_fwd_k, cnt, cnt, hi, wi, ho, wo, iabn_bilinear_scale(hi, ho),
           iabn_bilinear_scale(wi, wo), x, y);
}

int iabn_cuda_bilinear_bwd(iabn_cuda_ctx *ctx, int n, int c, int hi, int wi, iabn_layout layout,
                           int ho, int wo, const float *dy, float *dx, iabn_err *e)
{
    IABN_CUDA_NCHW_ONLY(layout);
    size_t cnt = n > 0 && c > 0 && hi > 0 && wi > 0 ? (size_t)n * c * hi * wi : 0;
    IABN_CUDA_LAUNCH(bilinear_bwd_k, cnt, cnt, hi, wi, ho, wo, iabn_bilinear_scale(hi, ho),
           iabn_bilinear_scale(wi, wo), dy, dx);
}

} // extern "C"
