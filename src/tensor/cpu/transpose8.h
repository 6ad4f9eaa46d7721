/* cpu/transpose8.h (internal): the transpose of an 8 x 8 square of floats
 * between two strided matrices, in registers with AVX (a local array
 * without it), so that every access to memory is 32 contiguous bytes.  The
 * layout reorder (cpu/layout.c) and the weight layout map
 * (cpu/blocked_map.c) move their 16 x 16 tiles with it.
 */
#ifndef IABN_CPU_TRANSPOSE8_H
#define IABN_CPU_TRANSPOSE8_H

#include <stddef.h>
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

/* dst[j * ds + i] = src[i * ss + j] for an 8 x 8 square.  With AVX each
 * register takes 4 values of row i in its low half and 4 of row i + 4 in its
 * high half (two 16-byte loads: the cross-half part of the transpose done by
 * the loads), and a 4 x 4 transpose per half (unpack, shuffle) leaves whole
 * columns for eight 32-byte stores: 16 shuffles per square, where a
 * transpose in registers alone takes 24 (the shuffles bound its speed). */
#if defined(__AVX__)
static inline __m256 iabn_tr8_load2(const float *lo, const float *hi)
{
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(lo)), _mm_loadu_ps(hi), 1);
}

/* columns 4k .. 4k + 3 of the square (k = 0, 1) */
static inline void iabn_tr8_half(const float *src, size_t ss, float *dst, size_t ds, int k)
{
    const float *s = src + 4 * k;
    __m256 r0 = iabn_tr8_load2(s, s + 4 * ss), r1 = iabn_tr8_load2(s + ss, s + 5 * ss);
    __m256 r2 = iabn_tr8_load2(s + 2 * ss, s + 6 * ss), r3 = iabn_tr8_load2(s + 3 * ss, s + 7 * ss);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    float *d = dst + 4 * k * ds;
    _mm256_storeu_ps(d, _mm256_shuffle_ps(t0, t2, 0x44));
    _mm256_storeu_ps(d + ds, _mm256_shuffle_ps(t0, t2, 0xee));
    _mm256_storeu_ps(d + 2 * ds, _mm256_shuffle_ps(t1, t3, 0x44));
    _mm256_storeu_ps(d + 3 * ds, _mm256_shuffle_ps(t1, t3, 0xee));
}

static inline void iabn_tr8(const float *src, size_t ss, float *dst, size_t ds)
{
    iabn_tr8_half(src, ss, dst, ds, 0);
    iabn_tr8_half(src, ss, dst, ds, 1);
}
#else
static inline void iabn_tr8(const float *src, size_t ss, float *dst, size_t ds)
{
    float t[8][8];
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) t[j][i] = src[i * ss + j];
    for (int j = 0; j < 8; j++) memcpy(dst + j * ds, t[j], sizeof t[j]);
}
#endif

#endif
