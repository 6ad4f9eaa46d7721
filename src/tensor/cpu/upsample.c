/* cpu/upsample.c: bilinear resize with align_corners = false, forward and
 * backward, CPU, NCHW, nChw16c or nChw8c.
 *
 * The source index and weights come from iabn_bilinear_src (math/<family>.h), the
 * formula of PyTorch's F.interpolate, so the CUDA kernel and this one agree
 * bit for bit on the taps.  Column taps are computed once per chunk of
 * output columns and reused down the rows.  The backward scatters each
 * (n, c) plane serially in a fixed order and runs the planes in parallel:
 * deterministic without atomics, and independent of the thread count.
 * The blocked layouts run the B channels of a block (16 or 8) side by side
 * with the same taps, the same expression and, per channel, the same
 * scatter order: the same bits as NCHW, reordered.
 */
#include "tensor/tensor.h"
#include "tensor/math/upsample.h"

#include <string.h>

#define PAR_MIN ((size_t)1 << 14)
/* Output columns per work item: their taps are computed once and reused for
 * every row of the plane. */
#define COLS 256

typedef struct {
    int i0[COLS], i1[COLS];
    float l0[COLS], l1[COLS];
} col_taps;

static int col_chunks(int wo) { return (wo + COLS - 1) / COLS; }

/* Taps of output columns [c0, c0 + cnt). */
static void taps_for(float scale, int in, int c0, int cnt, col_taps *t)
{
    for (int j = 0; j < cnt; j++)
        iabn_bilinear_src(scale, in, c0 + j, &t->i0[j], &t->i1[j], &t->l0[j], &t->l1[j]);
}

/* The forward over `groups` work groups of B channels side by side: B = 1 in
 * NCHW (a group is a plane), 16 or 8 in nChw16c / nChw8c (a group is a
 * sample's channel block, its lanes contiguous, so the lane loop
 * vectorises).  Work items are (group, column chunk).  Inlined with B
 * constant, one body serves every layout with the same expression per
 * element. */
static inline __attribute__((always_inline)) void
fwd_groups(const int B, long groups, int hi, int wi, int ho, int wo, const float *x, float *y)
{
    long chunks = col_chunks(wo);
    float sh = iabn_bilinear_scale(hi, ho), sw = iabn_bilinear_scale(wi, wo);
#pragma omp parallel for schedule(static) if ((size_t)groups * B * ho * wo >= PAR_MIN)
    for (long item = 0; item < groups * chunks; item++) {
        long g = item / chunks;
        int c0 = (int)(item % chunks) * COLS, cnt = wo - c0 < COLS ? wo - c0 : COLS;
        const float *xp = x + (size_t)g * hi * wi * B;
        col_taps t;
        taps_for(sw, wi, c0, cnt, &t);
        for (int oh = 0; oh < ho; oh++) {
            int h0, h1;
            float hl0, hl1;
            iabn_bilinear_src(sh, hi, oh, &h0, &h1, &hl0, &hl1);
            const float *r0 = xp + (size_t)h0 * wi * B, *r1 = xp + (size_t)h1 * wi * B;
            float *yp = y + (((size_t)g * ho + oh) * wo + c0) * B;
            for (int j = 0; j < cnt; j++) {
                const float *a0 = r0 + (size_t)t.i0[j] * B, *a1 = r0 + (size_t)t.i1[j] * B;
                const float *b0 = r1 + (size_t)t.i0[j] * B, *b1 = r1 + (size_t)t.i1[j] * B;
                float l0 = t.l0[j], l1 = t.l1[j];
                for (int l = 0; l < B; l++)
                    yp[(size_t)j * B + l] = hl0 * (l0 * a0[l] + l1 * a1[l]) +
                                            hl1 * (l0 * b0[l] + l1 * b1[l]);
            }
        }
    }
}

/* The backward, groups as above, one work item per group: its dx zeroed,
 * then chunks, rows, columns and the four taps in PyTorch's order (h0 w0,
 * h0 w1, h1 w0, h1 w1) with the lanes innermost, so each channel adds into
 * each of its dx elements in the same order in every layout. */
static inline __attribute__((always_inline)) void
bwd_groups(const int B, long groups, int hi, int wi, int ho, int wo, const float *dy, float *dx)
{
    int chunks = col_chunks(wo);
    float sh = iabn_bilinear_scale(hi, ho), sw = iabn_bilinear_scale(wi, wo);
#pragma omp parallel for schedule(static) if ((size_t)groups * B * ho * wo >= PAR_MIN)
    for (long g = 0; g < groups; g++) {
        float *dxp = dx + (size_t)g * hi * wi * B;
        const float *dyp = dy + (size_t)g * ho * wo * B;
        memset(dxp, 0, (size_t)hi * wi * B * sizeof *dxp);
        for (int ch = 0; ch < chunks; ch++) {
            int c0 = ch * COLS, cnt = wo - c0 < COLS ? wo - c0 : COLS;
            col_taps t;
            taps_for(sw, wi, c0, cnt, &t);
            for (int oh = 0; oh < ho; oh++) {
                int h0, h1;
                float hl0, hl1;
                iabn_bilinear_src(sh, hi, oh, &h0, &h1, &hl0, &hl1);
                float *r0 = dxp + (size_t)h0 * wi * B, *r1 = dxp + (size_t)h1 * wi * B;
                const float *gp = dyp + ((size_t)oh * wo + c0) * B;
                for (int j = 0; j < cnt; j++) {
                    float *a0 = r0 + (size_t)t.i0[j] * B, *a1 = r0 + (size_t)t.i1[j] * B;
                    float *b0 = r1 + (size_t)t.i0[j] * B, *b1 = r1 + (size_t)t.i1[j] * B;
                    const float *gr = gp + (size_t)j * B;
                    float l0 = t.l0[j], l1 = t.l1[j];
                    /* the taps may coincide (a clamped border): one tap at a
                     * time over the lanes keeps each element's order */
                    for (int l = 0; l < B; l++) a0[l] += hl0 * l0 * gr[l];
                    for (int l = 0; l < B; l++) a1[l] += hl0 * l1 * gr[l];
                    for (int l = 0; l < B; l++) b0[l] += hl1 * l0 * gr[l];
                    for (int l = 0; l < B; l++) b1[l] += hl1 * l1 * gr[l];
                }
            }
        }
    }
}

void iabn_bilinear_fwd(int n, int c, int hi, int wi, iabn_layout layout, int ho, int wo,
                       const float *x, float *y)
{
    int blk = iabn_layout_block(layout);
    if (blk == 16) fwd_groups(16, (long)n * (c / 16), hi, wi, ho, wo, x, y);
    else if (blk == 8) fwd_groups(8, (long)n * (c / 8), hi, wi, ho, wo, x, y);
    else fwd_groups(1, (long)n * c, hi, wi, ho, wo, x, y);
}

void iabn_bilinear_bwd(int n, int c, int hi, int wi, iabn_layout layout, int ho, int wo,
                       const float *dy, float *dx)
{
    int blk = iabn_layout_block(layout);
    if (blk == 16) bwd_groups(16, (long)n * (c / 16), hi, wi, ho, wo, dy, dx);
    else if (blk == 8) bwd_groups(8, (long)n * (c / 8), hi, wi, ho, wo, dy, dx);
    else bwd_groups(1, (long)n * c, hi, wi, ho, wo, dy, dx);
}
