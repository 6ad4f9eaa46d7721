/* cpu/elementwise.c: the memory-bound CPU kernels of cpu/ops.h: elementwise
 * add / axpy / copy / fill / scale, the broadcast add of a 1x1 map and its
 * reduction, the finite check, channel dropout (NCHW, nChw16c or nChw8c),
 * channel concat / slice and the sum of squares.
 *
 * Every loop is elementwise or reads each input element before writing the
 * same output element, so the aliasing the header allows is safe; reductions
 * use fixed blocks combined in order, so their result does not depend on the
 * thread count at all.
 */
#include "tensor/tensor.h"
#include "tensor/math/bf16.h"
#include "tensor/math/elementwise.h"

#include <string.h>

/* Below this many elements a parallel region costs more than it saves. */
#define PAR_MIN ((size_t)1 << 15)
/* Reductions split the data into this many fixed blocks. */
#define NBLK 64

static void block_bounds(size_t count, int b, size_t *lo, size_t *hi)
{
    *lo = count * (size_t)b / NBLK;
    *hi = count * (size_t)(b + 1) / NBLK;
}

void iabn_add(size_t count, const float *a, const float *b, float *y)
{
#pragma omp parallel for schedule(static) if (count >= PAR_MIN)
    for (size_t i = 0; i < count; i++) y[i] = a[i] + b[i];
}

void iabn_axpy(size_t count, float alpha, const float *x, float *y)
{
#pragma omp parallel for schedule(static) if (count >= PAR_MIN)
    for (size_t i = 0; i < count; i++) y[i] += alpha * x[i];
}

void iabn_copy(size_t count, const float *x, float *y)
{
    if (x == y || count == 0) return;
    uintptr_t xa = (uintptr_t)x, ya = (uintptr_t)y, bytes = count * sizeof *y;
    if (xa < ya + bytes && ya < xa + bytes) { /* overlapping: only memmove is defined */
        memmove(y, x, count * sizeof *y);
        return;
    }
    if (count < PAR_MIN) {
        memcpy(y, x, count * sizeof *y);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int b = 0; b < NBLK; b++) {
        size_t lo, hi;
        block_bounds(count, b, &lo, &hi);
        memcpy(y + lo, x + lo, (hi - lo) * sizeof *y);
    }
}

void iabn_fill(size_t count, float v, float *y)
{
#pragma omp parallel for schedule(static) if (count >= PAR_MIN)
    for (size_t i = 0; i < count; i++) y[i] = v;
}

void iabn_scale(size_t count, float s, float *x)
{
#pragma omp parallel for schedule(static) if (count >= PAR_MIN)
    for (size_t i = 0; i < count; i++) x[i] *= s;
}

void iabn_add_bcast_hw(int n, int c, int hw, const float *a, const float *b, float *y)
{
    long planes = (long)n * c;
    size_t total = (size_t)planes * (size_t)hw;
#pragma omp parallel for schedule(static) if (total >= PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        const float *ap = a + (size_t)pl * hw;
        float *yp = y + (size_t)pl * hw;
        float bv = b[pl];
        for (int i = 0; i < hw; i++) yp[i] = ap[i] + bv;
    }
}

void iabn_sum_hw(int n, int c, int hw, const float *dy, float *db)
{
    long planes = (long)n * c;
    size_t total = (size_t)planes * (size_t)hw;
#pragma omp parallel for schedule(static) if (total >= PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        const float *p = dy + (size_t)pl * hw;
        double s = 0;
        for (int i = 0; i < hw; i++) s += p[i];
        db[pl] = (float)s;
    }
}

int iabn_all_finite(size_t count, const float *x)
{
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (count >= PAR_MIN)
    for (size_t i = 0; i < count; i++) {
        /* Exponent bits all set = Inf or NaN; immune to -ffast-math. */
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return !bad;
}

/* Blocked, B (16 or 8, a constant) channels per block: the B channels of a
 * block side by side, channel ci of sample ni keeping or dropping by the
 * NCHW plane index ni*C + ci (= block*B + lane), and the same select as the
 * NCHW loop (a product or an exact 0): the same output bits, reordered. */
static inline __attribute__((always_inline)) void
dropout2d_blk(const int B, int n, int c, int hw, float p, uint64_t seed, uint64_t stream,
              const float *x, float *y)
{
    enum { MAX_B = 16 }; /* the widest block of the list (nChw16c) */
    long groups = (long)n * (c / B);
    size_t total = (size_t)groups * B * (size_t)hw;
    float scale = iabn_dropout_scale(p);
#pragma omp parallel for schedule(static) if (total >= PAR_MIN)
    for (long g = 0; g < groups; g++) {
        int keep[MAX_B];
        for (int l = 0; l < B; l++)
            keep[l] = iabn_dropout_keep(seed, stream, (uint64_t)(g * B + l), p);
        const float *xp = x + (size_t)g * B * hw;
        float *yp = y + (size_t)g * B * hw;
        for (int i = 0; i < hw; i++)
            for (int l = 0; l < B; l++) {
                size_t k = (size_t)i * B + l;
                yp[k] = keep[l] ? xp[k] * scale : 0.f;
            }
    }
}

void iabn_dropout2d_apply(int n, int c, int hw, iabn_layout layout, float p, uint64_t seed,
                          uint64_t stream, const float *x, float *y)
{
    int blk = iabn_layout_block(layout);
    if (blk == 16 || blk == 8) {
        if (blk == 16) dropout2d_blk(16, n, c, hw, p, seed, stream, x, y);
        else dropout2d_blk(8, n, c, hw, p, seed, stream, x, y);
        return;
    }
    long planes = (long)n * c;
    size_t total = (size_t)planes * (size_t)hw;
    float scale = iabn_dropout_scale(p);
#pragma omp parallel for schedule(static) if (total >= PAR_MIN)
    for (long pl = 0; pl < planes; pl++) {
        const float *xp = x + (size_t)pl * hw;
        float *yp = y + (size_t)pl * hw;
        if (iabn_dropout_keep(seed, stream, (uint64_t)pl, p)) {
            for (int i = 0; i < hw; i++) yp[i] = xp[i] * scale;
        } else {
            for (int i = 0; i < hw; i++) yp[i] = 0.f;
        }
    }
}

/* Moves n blocks of len floats between two channel-strided layouts.  A part
 * whose storage already is its place in the target (a single image, src ==
 * dst) needs no copy. */
static void copy_blocks(int n, size_t len, const float *src, size_t sstride, float *dst,
                        size_t dstride)
{
    if (src == dst && (n == 1 || sstride == dstride)) return;
    size_t total = (size_t)n * len;
#pragma omp parallel for schedule(static) if (total >= PAR_MIN)
    for (int i = 0; i < n; i++)
        memmove(dst + (size_t)i * dstride, src + (size_t)i * sstride, len * sizeof *dst);
}

void iabn_copy_channels(int n, int cx, int cy, int c_off, int hw, const float *x, float *y)
{
    copy_blocks(n, (size_t)cx * hw, x, (size_t)cx * hw, y + (size_t)c_off * hw,
                (size_t)cy * hw);
}

void iabn_slice_channels(int n, int cx, int cy, int c_off, int hw, const float *y, float *x)
{
    copy_blocks(n, (size_t)cx * hw, y + (size_t)c_off * hw, (size_t)cy * hw, x,
                (size_t)cx * hw);
}

/* Independent sums per block, so that the adds do not wait on each other
 * (one chain ran at one element per add latency: 25 ms for ResNeXt-101's
 * 44M gradients on two threads, against 5 ms of memory traffic); the
 * order is fixed, so the result does not depend on the thread count. */
#define SUMSQ_LANES 16

double iabn_sumsq(size_t count, const float *x)
{
    double part[NBLK];
#pragma omp parallel for schedule(static) if (count >= PAR_MIN)
    for (int b = 0; b < NBLK; b++) {
        size_t lo, hi, i;
        block_bounds(count, b, &lo, &hi);
        double acc[SUMSQ_LANES] = {0};
        for (i = lo; i + SUMSQ_LANES <= hi; i += SUMSQ_LANES)
            for (int k = 0; k < SUMSQ_LANES; k++) acc[k] += (double)x[i + k] * x[i + k];
        for (; i < hi; i++) acc[0] += (double)x[i] * x[i];
        double s = 0;
        for (int k = 0; k < SUMSQ_LANES; k++) s += acc[k];
        part[b] = s;
    }
    double s = 0;
    for (int b = 0; b < NBLK; b++) s += part[b];
    return s;
}

void iabn_to_bf16(size_t count, const float *src, uint16_t *dst)
{
    for (size_t i = 0; i < count; i++) dst[i] = iabn_f32_to_bf16(src[i]);
}

void iabn_from_bf16(size_t count, const uint16_t *src, float *dst)
{
    for (size_t i = 0; i < count; i++) dst[i] = iabn_bf16_to_f32(src[i]);
}
