/* cpu/layout.c: the reorder of an activation between the layouts of
 * tensor.h (cpu/ops.h's iabn_reorder): NCHW <-> nChw16c.
 *
 * One (sample, channel block) is 16 channel planes of hw values in NCHW and
 * hw positions of 16 channels in nChw16c, at the same offset in both: the
 * reorder is a transpose of a 16 x hw tile per block, run in parallel over
 * the blocks.  The tile moves in 8 x 8 squares transposed in registers
 * (AVX; a local array without it), so that every access to memory is 32
 * contiguous bytes: a memory-bound pass at about copy speed.
 */
#include "tensor/tensor.h"

#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

enum { BLK = 16, PAR_MIN = 1 << 15 };

/* dst[j * ds + i] = src[i * ss + j] for an 8 x 8 square.  With AVX each
 * register takes 4 values of row i in its low half and 4 of row i + 4 in its
 * high half (two 16-byte loads: the cross-half part of the transpose done by
 * the loads), and a 4 x 4 transpose per half (unpack, shuffle) leaves whole
 * columns for eight 32-byte stores: 16 shuffles per square, where a
 * transpose in registers alone takes 24 (the shuffles bound its speed). */
#if defined(__AVX__)
static inline __m256 load2(const float *lo, const float *hi)
{
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(lo)), _mm_loadu_ps(hi), 1);
}

/* columns 4k .. 4k + 3 of the square (k = 0, 1) */
static inline void tr8_half(const float *src, size_t ss, float *dst, size_t ds, int k)
{
    const float *s = src + 4 * k;
    __m256 r0 = load2(s, s + 4 * ss), r1 = load2(s + ss, s + 5 * ss);
    __m256 r2 = load2(s + 2 * ss, s + 6 * ss), r3 = load2(s + 3 * ss, s + 7 * ss);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    float *d = dst + 4 * k * ds;
    _mm256_storeu_ps(d, _mm256_shuffle_ps(t0, t2, 0x44));
    _mm256_storeu_ps(d + ds, _mm256_shuffle_ps(t0, t2, 0xee));
    _mm256_storeu_ps(d + 2 * ds, _mm256_shuffle_ps(t1, t3, 0x44));
    _mm256_storeu_ps(d + 3 * ds, _mm256_shuffle_ps(t1, t3, 0xee));
}

static inline void tr8(const float *src, size_t ss, float *dst, size_t ds)
{
    tr8_half(src, ss, dst, ds, 0);
    tr8_half(src, ss, dst, ds, 1);
}
#else
static inline void tr8(const float *src, size_t ss, float *dst, size_t ds)
{
    float t[8][8];
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) t[j][i] = src[i * ss + j];
    for (int j = 0; j < 8; j++) memcpy(dst + j * ds, t[j], sizeof t[j]);
}
#endif

/* One (sample, channel block): to_blocked, 16 planes of hw values (plane
 * stride hw) become hw rows of 16; otherwise the reverse.  Squares of 8
 * positions x 8 channels, then the positions left over one by one. */
static void tile(int hw, int to_blocked, const float *src, float *dst)
{
    size_t h = (size_t)hw;
    int p = 0;
    for (; p + 8 <= hw; p += 8)
        for (int l = 0; l < BLK; l += 8) {
            if (to_blocked)
                tr8(src + l * h + p, h, dst + (size_t)p * BLK + l, BLK);
            else
                tr8(src + (size_t)p * BLK + l, BLK, dst + l * h + p, h);
        }
    for (; p < hw; p++)
        for (int l = 0; l < BLK; l++) {
            if (to_blocked)
                dst[(size_t)p * BLK + l] = src[l * h + p];
            else
                dst[l * h + p] = src[(size_t)p * BLK + l];
        }
}

int iabn_reorder(int n, int c, int hw, iabn_layout from, iabn_layout to, const float *x,
                 float *y, iabn_err *e)
{
    int bf = iabn_layout_block(from), bt = iabn_layout_block(to);
    if (!bf || !bt)
        return iabn_err_set(e, IABN_EINVAL, "reorder: layout %d is not one of the list",
                            bf ? (int)to : (int)from);
    if (n < 0 || c < 0 || hw < 0)
        return iabn_err_set(e, IABN_EINVAL, "reorder: bad shape (%d, %d, %d)", n, c, hw);
    if (c % bf || c % bt)
        return iabn_err_set(e, IABN_EINVAL,
                            "reorder %s -> %s: %d channels are not a multiple of the block of %d",
                            iabn_layout_name(from), iabn_layout_name(to), c, c % bf ? bf : bt);
    size_t total = (size_t)n * (size_t)c * (size_t)hw;
    if (!total) return 0;
    if (from == to) {
        iabn_copy(total, x, y);
        return 0;
    }
    /* one side NCHW, the other blocked by the tiles' 16 (the list has no
     * other pair) */
    int blocked_in = bf > 1;
    if ((bf > 1) == (bt > 1) || (blocked_in ? bf : bt) != BLK)
        return iabn_err_set(e, IABN_EINVAL, "reorder %s -> %s: no such reorder",
                            iabn_layout_name(from), iabn_layout_name(to));
    long tiles = (long)n * (c / BLK);
    #pragma omp parallel for schedule(static) if (total >= PAR_MIN)
    for (long g = 0; g < tiles; g++) {
        size_t off = (size_t)g * BLK * (size_t)hw;
        tile(hw, !blocked_in, x + off, y + off);
    }
    return 0;
}
