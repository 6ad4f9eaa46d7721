/* cpu/pool.c: max pooling with an int32 argmax (the index within the input
 * plane) and global average pooling, CPU, NCHW.
 *
 * Max pooling follows PyTorch's CPU kernel: padding counts as -inf (windows
 * reaching over the border take the max of their in-bounds part), output
 * sizes in floor mode, the first maximum in scan order wins a tie and a NaN
 * wins over numbers.  The backward scatters each plane serially and runs the
 * planes in parallel, so overlapping windows add up in a fixed order.
 */
#include "tensor/tensor.h"

#include <math.h>
#include <string.h>

#define PAR_MIN ((size_t)1 << 14)

int iabn_pool_out(int in, int k, int s, int p)
{
    if (s <= 0 || k <= 0 || in + 2 * p < k) return 0;
    return (in + 2 * p - k) / s + 1;
}

void iabn_maxpool_fwd(int n, int c, int h, int w, int k, int s, int p, int ho, int wo,
                      const float *x, float *y, int32_t *argmax)
{
    long rows = (long)n * c * ho;
    size_t work = (size_t)rows * (size_t)wo * (size_t)k * (size_t)k;
#pragma omp parallel for schedule(static) if (work >= PAR_MIN)
    for (long r = 0; r < rows; r++) {
        long plane = r / ho;
        int oh = (int)(r % ho);
        const float *xp = x + (size_t)plane * h * w;
        float *yp = y + (size_t)r * wo;
        int32_t *ap = argmax + (size_t)r * wo;
        int hs = oh * s - p, he = hs + k;
        if (hs < 0) hs = 0;
        if (he > h) he = h;
        for (int ow = 0; ow < wo; ow++) {
            int ws = ow * s - p, we = ws + k;
            if (ws < 0) ws = 0;
            if (we > w) we = w;
            if (hs >= he || ws >= we) { /* window wholly in the padding */
                yp[ow] = -INFINITY;
                ap[ow] = -1;
                continue;
            }
            int32_t best = hs * w + ws;
            float m = -INFINITY;
            for (int ih = hs; ih < he; ih++) {
                for (int iw = ws; iw < we; iw++) {
                    float v = xp[ih * w + iw];
                    if (v > m || isnan(v)) {
                        m = v;
                        best = ih * w + iw;
                    }
                }
            }
            yp[ow] = m;
            ap[ow] = best;
        }
    }
}

void iabn_maxpool_bwd(int n, int c, int h, int w, int ho, int wo, const float *dy,
                      const int32_t *argmax, float *dx)
{
    long planes = (long)n * c;
    size_t work = (size_t)planes * ((size_t)h * w + (size_t)ho * wo);
#pragma omp parallel for schedule(static) if (work >= PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        float *dxp = dx + (size_t)pl * h * w;
        const float *dyp = dy + (size_t)pl * ho * wo;
        const int32_t *ap = argmax + (size_t)pl * ho * wo;
        memset(dxp, 0, (size_t)h * w * sizeof *dxp);
        for (long i = 0; i < (long)ho * wo; i++)
            if (ap[i] >= 0) dxp[ap[i]] += dyp[i];
    }
}

void iabn_gap_fwd(int n, int c, int hw, const float *x, float *y)
{
    long planes = (long)n * c;
    size_t work = (size_t)planes * (size_t)hw;
#pragma omp parallel for schedule(static) if (work >= PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        const float *xp = x + (size_t)pl * hw;
        double s = 0;
        for (int i = 0; i < hw; i++) s += xp[i];
        y[pl] = (float)(s / hw);
    }
}

void iabn_gap_bwd(int n, int c, int hw, const float *dy, float *dx)
{
    long planes = (long)n * c;
    size_t work = (size_t)planes * (size_t)hw;
#pragma omp parallel for schedule(static) if (work >= PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        float g = dy[pl] / (float)hw;
        float *dxp = dx + (size_t)pl * hw;
        for (int i = 0; i < hw; i++) dxp[i] = g;
    }
}
