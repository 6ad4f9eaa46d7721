/* cpu/pool.c: max pooling with an int32 argmax (the index within the input
 * plane) and global average pooling, both NCHW, nChw16c or nChw8c; the
 * windowed average pool (NCHW); CPU.
 *
 * Max pooling follows PyTorch's CPU kernel: padding counts as -inf (windows
 * reaching over the border take the max of their in-bounds part), output
 * sizes in floor mode, the first maximum in scan order wins a tie and a NaN
 * wins over numbers.  The backward scatters each plane serially and runs the
 * planes in parallel, so overlapping windows add up in a fixed order.  In
 * the blocked layouts the B channels of a block (16 or 8) run side by side
 * with the same scan, rule and scatter order per channel: the same bits as
 * NCHW, reordered.  The blocked loops are instantiated per block (B a
 * constant), so that their lane loops vectorise.
 */
#include "tensor/tensor.h"
#include "tensor/math/pool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PAR_MIN ((size_t)1 << 14)
/* The widest channel block of the list (nChw16c): sizes the lane arrays. */
enum { MAX_B = 16 };

int iabn_pool_out(int in, int k, int s, int p)
{
    if (s <= 0 || k <= 0 || in + 2 * p < k) return 0;
    return (in + 2 * p - k) / s + 1;
}

/* Windows wholly inside the plane, outputs [owa, owb) of one row whose
 * window starts at input row ih0: no bounds, and no branch either (a
 * select per tap), so that the loop over outputs vectorises; the scan
 * order and the tie / NaN rule are those of the general loop below, so the
 * values and the argmax are the same bits. */
static inline __attribute__((always_inline)) void
maxpool_interior(const float *xp, int w, int ih0, int owa, int owb, int p, float *yp,
                 int32_t *ap, const int k, const int s)
{
    for (int ow = owa; ow < owb; ow++) {
        int32_t i0 = ih0 * w + ow * s - p, best = i0;
        float m = -INFINITY;
        for (int r = 0; r < k; r++)
            for (int c = 0; c < k; c++) {
                int32_t i = i0 + r * w + c;
                float v = xp[i];
                int take = (v > m) | (v != v);
                m = take ? v : m;
                best = take ? i : best;
            }
        yp[ow] = m;
        ap[ow] = best;
    }
}

/* Blocked, B (16 or 8, a constant) channels per block: a (sample, channel
 * block) holds h*w positions of B channels, y and the argmax ho*wo
 * positions of the same B.  Each output position scans its window in the
 * NCHW loop's order with B maxima side by side (branch-free selects, so the
 * lane loop vectorises): the tie and NaN rule, the start index of a window
 * and the wholly-padded case are those of the NCHW loop, so every channel
 * gets its bits and its argmax (still the index within its (n, c) plane,
 * stored in y's blocked order). */
static inline __attribute__((always_inline)) void
maxpool_fwd_blk(const int B, int n, int c, int h, int w, int k, int s, int p, int ho, int wo,
                const float *x, float *y, int32_t *argmax)
{
    long groups = (long)n * (c / B);
    size_t work = (size_t)groups * B * (size_t)ho * wo * (size_t)k * k;
#pragma omp parallel for schedule(static) if (work >= PAR_MIN)
    for (long g = 0; g < groups; g++) {
        const float *xp = x + (size_t)g * h * w * B;
        float *yp = y + (size_t)g * ho * wo * B;
        int32_t *ap = argmax + (size_t)g * ho * wo * B;
        for (int oh = 0; oh < ho; oh++) {
            int hs = oh * s - p, he = hs + k;
            if (hs < 0) hs = 0;
            if (he > h) he = h;
            for (int ow = 0; ow < wo; ow++) {
                int ws = ow * s - p, we = ws + k;
                if (ws < 0) ws = 0;
                if (we > w) we = w;
                float *yo = yp + ((size_t)oh * wo + ow) * B;
                int32_t *ao = ap + ((size_t)oh * wo + ow) * B;
                if (hs >= he || ws >= we) { /* window wholly in the padding */
                    for (int l = 0; l < B; l++) {
                        yo[l] = -INFINITY;
                        ao[l] = -1;
                    }
                    continue;
                }
                float m[MAX_B];
                int32_t best[MAX_B];
                for (int l = 0; l < B; l++) {
                    m[l] = -INFINITY;
                    best[l] = hs * w + ws;
                }
                for (int ih = hs; ih < he; ih++)
                    for (int iw = ws; iw < we; iw++) {
                        int32_t i = ih * w + iw;
                        const float *xv = xp + (size_t)i * B;
                        /* without it GCC unrolls the lanes and then fails
                         * to vectorise them (3x slower than NCHW) */
#pragma omp simd
                        for (int l = 0; l < B; l++) {
                            float v = xv[l];
                            int take = (v > m[l]) | (v != v);
                            m[l] = take ? v : m[l];
                            best[l] = take ? i : best[l];
                        }
                    }
                for (int l = 0; l < B; l++) {
                    yo[l] = m[l];
                    ao[l] = best[l];
                }
            }
        }
    }
}

/* The backward over `groups` groups of B channels side by side (1 in NCHW,
 * a plane; 16 or 8 in the blocked layouts, a sample's channel block): dx of
 * a group zeroed, then each lane's gradient scattered through its argmax in
 * output order, the same order per channel in every layout (the same
 * sums); lanes never share an address.  Inlined with B constant. */
static inline __attribute__((always_inline)) void
maxpool_bwd_groups(const int B, long groups, int h, int w, int ho, int wo, const float *dy,
                   const int32_t *argmax, float *dx)
{
    size_t work = (size_t)groups * B * ((size_t)h * w + (size_t)ho * wo);
#pragma omp parallel for schedule(static) if (work >= PAR_MIN)
    for (long g = 0; g < groups; g++) {
        float *dxp = dx + (size_t)g * h * w * B;
        const float *dyp = dy + (size_t)g * ho * wo * B;
        const int32_t *ap = argmax + (size_t)g * ho * wo * B;
        memset(dxp, 0, (size_t)h * w * B * sizeof *dxp);
        for (size_t i = 0; i < (size_t)ho * wo; i++)
            for (int l = 0; l < B; l++) {
                int32_t a = ap[i * B + l];
                if (a >= 0) dxp[(size_t)a * B + l] += dyp[i * B + l];
            }
    }
}

void iabn_maxpool_fwd(int n, int c, int h, int w, iabn_layout layout, int k, int s, int p,
                      int ho, int wo, const float *x, float *y, int32_t *argmax)
{
    int blk = iabn_layout_block(layout);
    if (blk == 16 || blk == 8) {
        if (blk == 16)
            maxpool_fwd_blk(16, n, c, h, w, k, s, p, ho, wo, x, y, argmax);
        else
            maxpool_fwd_blk(8, n, c, h, w, k, s, p, ho, wo, x, y, argmax);
        return;
    }
    long rows = (long)n * c * ho;
    size_t work = (size_t)rows * (size_t)wo * (size_t)k * (size_t)k;
    /* outputs whose window lies inside the row: ow*s >= p and ow*s - p + k <= w */
    int owa = (p + s - 1) / s, owb = w - k + p >= 0 ? (w - k + p) / s + 1 : 0;
    if (owb > wo) owb = wo;
    if (owa > owb) owa = owb;
#pragma omp parallel for schedule(static) if (work >= PAR_MIN)
    for (long r = 0; r < rows; r++) {
        long plane = r / ho;
        int oh = (int)(r % ho);
        const float *xp = x + (size_t)plane * h * w;
        float *yp = y + (size_t)r * wo;
        int32_t *ap = argmax + (size_t)r * wo;
        int hs = oh * s - p, he = hs + k;
        int inside = hs >= 0 && he <= h;
        if (hs < 0) hs = 0;
        if (he > h) he = h;
        for (int ow = 0; ow < wo; ow++) {
            if (inside && ow == owa && owa < owb) { /* the row's interior */
                if (k == 3 && s == 2)
                    maxpool_interior(xp, w, hs, owa, owb, p, yp, ap, 3, 2);
                else
                    maxpool_interior(xp, w, hs, owa, owb, p, yp, ap, k, s);
                ow = owb - 1;
                continue;
            }
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

void iabn_maxpool_bwd(int n, int c, int h, int w, iabn_layout layout, int ho, int wo,
                      const float *dy, const int32_t *argmax, float *dx)
{
    int blk = iabn_layout_block(layout);
    if (blk == 16)
        maxpool_bwd_groups(16, (long)n * (c / 16), h, w, ho, wo, dy, argmax, dx);
    else if (blk == 8)
        maxpool_bwd_groups(8, (long)n * (c / 8), h, w, ho, wo, dy, argmax, dx);
    else
        maxpool_bwd_groups(1, (long)n * c, h, w, ho, wo, dy, argmax, dx);
}

/* Global average pooling over `groups` groups of B channels side by side,
 * as in the max pool's backward: the B sums run side by side, each over its
 * channel's positions in order, so every layout gives the NCHW loop's bits. */
static inline __attribute__((always_inline)) void
gap_fwd_groups(const int B, long groups, int hw, const float *x, float *y)
{
    size_t work = (size_t)groups * B * (size_t)hw;
#pragma omp parallel for schedule(static) if (work >= PAR_MIN)
    for (long g = 0; g < groups; g++) {
        const float *xp = x + (size_t)g * B * hw;
        double s[MAX_B];
        for (int l = 0; l < B; l++) s[l] = 0;
        for (int i = 0; i < hw; i++)
            for (int l = 0; l < B; l++) s[l] += xp[(size_t)i * B + l];
        for (int l = 0; l < B; l++) y[g * B + l] = (float)(s[l] / hw);
    }
}

static inline __attribute__((always_inline)) void
gap_bwd_groups(const int B, long groups, int hw, const float *dy, float *dx)
{
    size_t work = (size_t)groups * B * (size_t)hw;
#pragma omp parallel for schedule(static) if (work >= PAR_MIN)
    for (long g = 0; g < groups; g++) {
        float gv[MAX_B];
        for (int l = 0; l < B; l++) gv[l] = dy[g * B + l] / (float)hw;
        float *dxp = dx + (size_t)g * B * hw;
        for (int i = 0; i < hw; i++)
            for (int l = 0; l < B; l++) dxp[(size_t)i * B + l] = gv[l];
    }
}

void iabn_gap_fwd(int n, int c, int hw, iabn_layout layout, const float *x, float *y)
{
    int blk = iabn_layout_block(layout);
    if (blk == 16) gap_fwd_groups(16, (long)n * (c / 16), hw, x, y);
    else if (blk == 8) gap_fwd_groups(8, (long)n * (c / 8), hw, x, y);
    else gap_fwd_groups(1, (long)n * c, hw, x, y);
}

void iabn_gap_bwd(int n, int c, int hw, iabn_layout layout, const float *dy, float *dx)
{
    int blk = iabn_layout_block(layout);
    if (blk == 16) gap_bwd_groups(16, (long)n * (c / 16), hw, dy, dx);
    else if (blk == 8) gap_bwd_groups(8, (long)n * (c / 8), hw, dy, dx);
    else gap_bwd_groups(1, (long)n * c, hw, dy, dx);
}

/* ---- windowed average (src/layers/avgpool.c) ------------------------------------
 * Separable running sums in double: a window costs O(1) per output whatever
 * its size (the DeepLabV3 head's 84 x 84), and the result does not depend on
 * the summation order.  The backward spreads each pooled cell's gradient over
 * its window with difference arrays, the transpose of the same sums. */

typedef struct avgwin {
    int kh, kw, sh, sw, ph, pw, top, left;
} avgwin;

/* one plane: x (H x W) -> y (OH x OW); buf: H*pw + max(H, W) + 1 + ph*pw doubles */
static void avg_plane(const avgwin *P, int H, int W, int OH, int OW, const float *x, float *y,
                      double *buf)
{
    double *hs = buf, *pre = hs + (size_t)H * P->pw, *pooled = pre + (H > W ? H : W) + 1;
    for (int r = 0; r < H; r++) {
        const float *xr = x + (size_t)r * W;
        pre[0] = 0;
        for (int c = 0; c < W; c++) pre[c + 1] = pre[c] + xr[c];
        for (int j = 0; j < P->pw; j++)
            hs[(size_t)r * P->pw + j] = pre[j * P->sw + P->kw] - pre[j * P->sw];
    }
    double inv = 1.0 / ((double)P->kh * P->kw);
    for (int j = 0; j < P->pw; j++) {
        pre[0] = 0;
        for (int r = 0; r < H; r++) pre[r + 1] = pre[r] + hs[(size_t)r * P->pw + j];
        for (int i = 0; i < P->ph; i++)
            pooled[(size_t)i * P->pw + j] = (pre[i * P->sh + P->kh] - pre[i * P->sh]) * inv;
    }
    for (int i = 0; i < OH; i++) {
        const double *pr = pooled + (size_t)iabn_avgwin_cell(i, P->top, P->ph) * P->pw;
        for (int j = 0; j < OW; j++)
            y[(size_t)i * OW + j] = (float)pr[iabn_avgwin_cell(j, P->left, P->pw)];
    }
}

/* one plane: dy (OH x OW) -> dx (H x W), overwritten */
static void avg_plane_bwd(const avgwin *P, int H, int W, int OH, int OW, const float *dy, float *dx,
                          double *buf)
{
    double *col = buf, *diff = col + (size_t)H * P->pw, *dp = diff + (H > W ? H : W) + 1;
    for (size_t k = 0; k < (size_t)P->ph * P->pw; k++) dp[k] = 0;
    for (int i = 0; i < OH; i++) {
        double *pr = dp + (size_t)iabn_avgwin_cell(i, P->top, P->ph) * P->pw;
        for (int j = 0; j < OW; j++)
            pr[iabn_avgwin_cell(j, P->left, P->pw)] += dy[(size_t)i * OW + j];
    }
    for (int j = 0; j < P->pw; j++) {
        for (int r = 0; r <= H; r++) diff[r] = 0;
        for (int i = 0; i < P->ph; i++) {
            diff[i * P->sh] += dp[(size_t)i * P->pw + j];
            diff[i * P->sh + P->kh] -= dp[(size_t)i * P->pw + j];
        }
        double run = 0;
        for (int r = 0; r < H; r++) col[(size_t)r * P->pw + j] = run += diff[r];
    }
    double inv = 1.0 / ((double)P->kh * P->kw);
    for (int r = 0; r < H; r++) {
        for (int c = 0; c <= W; c++) diff[c] = 0;
        for (int j = 0; j < P->pw; j++) {
            diff[j * P->sw] += col[(size_t)r * P->pw + j];
            diff[j * P->sw + P->kw] -= col[(size_t)r * P->pw + j];
        }
        double run = 0;
        for (int c = 0; c < W; c++) dx[(size_t)r * W + c] = (float)((run += diff[c]) * inv);
    }
}

int iabn_avgpool_window(int n, int c, int H, int W, const int win[8], int OH, int OW,
                        const float *src, float *dst, int bwd)
{
    avgwin P = {win[0], win[1], win[2], win[3], win[4], win[5], win[6], win[7]};
    long planes = (long)n * c;
    size_t per = (size_t)H * P.pw + (size_t)(H > W ? H : W) + 1 + (size_t)P.ph * P.pw;
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        double *buf = malloc(per * sizeof *buf);
        if (!buf) failed = 1;
#pragma omp for schedule(static)
        for (long p = 0; p < planes; p++) {
            if (!buf) continue;
            if (bwd)
                avg_plane_bwd(&P, H, W, OH, OW, src + p * OH * OW, dst + p * H * W, buf);
            else
                avg_plane(&P, H, W, OH, OW, src + p * H * W, dst + p * OH * OW, buf);
        }
        free(buf);
    }
    return failed ? -1 : 0;
}
