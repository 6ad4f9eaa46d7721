/* cpu/simd.h: a vector of SIMD_LANES floats (8 or 16; the includer defines
 * it) for the hand-written blocked kernels (cpu/conv_blocked.c: 16 lanes
 * for nChw16c, 8 for nChw8c; cpu/conv_wino.c: 8; cpu/conv_direct.c: 16 in
 * its AVX-512 build, else 8).
 *
 * Native where the translation unit is compiled for it: 16 lanes with
 * AVX-512, 8 with AVX2 + FMA (SIMD_NATIVE 1).  Otherwise a struct of floats
 * whose multiply-adds are fmaf (SIMD_NATIVE 0): the same operations in the
 * same order, so a kernel gives the same bits in both, and the portable one
 * runs everywhere (the sanitizer build, CPUs without the instructions).
 *
 *   vzero, vld, vst (unaligned), vbcast (one float to every lane), vfma
 *   (a * b + c, fused), vadd, vsub, vmul; vidx_make / vperm: lane l of the
 *   result takes lane idx[l]; vgather(p, idx): lane l takes p[idx[l]];
 *   vld_n / vst_n: the first n lanes only (the rest read as 0, not read,
 *   not written); vst_nt: a streaming store where p is aligned to the vector
 *   (outputs larger than the cache would only evict the inputs still to be
 *   read), vfence after a run of them; VKEEP(v): keeps a loaded vector in
 *   its register (without it GCC folds the load into each FMA that reads
 *   it, and a loop that reuses one source vector runs out of load ports);
 *   UNROLL(n): unroll the next loop where native.
 */
#ifndef IABN_CPU_SIMD_H
#define IABN_CPU_SIMD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if !defined(SIMD_LANES) || (SIMD_LANES != 8 && SIMD_LANES != 16)
#error "define SIMD_LANES as 8 or 16 before including cpu/simd.h"
#endif

#if SIMD_LANES == 16 && defined(__AVX512F__)
#define SIMD_NATIVE 1
#include <immintrin.h>
typedef __m512 vf;
typedef __m512i vidx;
static inline vf vzero(void) { return _mm512_setzero_ps(); }
static inline vf vld(const float *p) { return _mm512_loadu_ps(p); }
static inline void vst(float *p, vf a) { _mm512_storeu_ps(p, a); }
static inline vf vbcast(const float *p) { return _mm512_set1_ps(*p); }
static inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vidx vidx_make(const int *lanes) { return _mm512_loadu_si512(lanes); }
static inline vf vperm(vidx i, vf a) { return _mm512_permutexvar_ps(i, a); }
static inline vf vgather(const float *p, vidx i) { return _mm512_i32gather_ps(i, p, 4); }
static inline void vst_nt(float *p, vf a)
{
    if (((uintptr_t)p & 63) == 0)
        _mm512_stream_ps(p, a);
    else
        _mm512_storeu_ps(p, a);
}
static inline void vfence(void) { _mm_sfence(); }
static inline __mmask16 vmask_n(int n) { return (__mmask16)((1u << n) - 1u); }
static inline vf vld_n(const float *p, int n) { return _mm512_maskz_loadu_ps(vmask_n(n), p); }
static inline void vst_n(float *p, vf a, int n)
{
    if (n == SIMD_LANES)
        _mm512_storeu_ps(p, a);
    else
        _mm512_mask_storeu_ps(p, vmask_n(n), a);
}
#define VKEEP(v) __asm__("" : "+v"(v))
#elif SIMD_LANES == 8 && defined(__AVX2__) && defined(__FMA__)
#define SIMD_NATIVE 1
#include <immintrin.h>
typedef __m256 vf;
typedef __m256i vidx;
static inline vf vzero(void) { return _mm256_setzero_ps(); }
static inline vf vld(const float *p) { return _mm256_loadu_ps(p); }
static inline void vst(float *p, vf a) { _mm256_storeu_ps(p, a); }
static inline vf vbcast(const float *p) { return _mm256_broadcast_ss(p); }
static inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vidx vidx_make(const int *lanes)
{
    return _mm256_loadu_si256((const __m256i *)(const void *)lanes);
}
static inline vf vperm(vidx i, vf a) { return _mm256_permutevar8x32_ps(a, i); }
static inline vf vgather(const float *p, vidx i) { return _mm256_i32gather_ps(p, i, 4); }
static inline void vst_nt(float *p, vf a)
{
    if (((uintptr_t)p & 31) == 0)
        _mm256_stream_ps(p, a);
    else
        _mm256_storeu_ps(p, a);
}
static inline void vfence(void) { _mm_sfence(); }
static const int vmask_lanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
static inline __m256i vmask_n(int n)
{
    return _mm256_loadu_si256((const __m256i *)(const void *)(vmask_lanes + SIMD_LANES - n));
}
static inline vf vld_n(const float *p, int n) { return _mm256_maskload_ps(p, vmask_n(n)); }
static inline void vst_n(float *p, vf a, int n)
{
    if (n == SIMD_LANES)
        _mm256_storeu_ps(p, a);
    else
        _mm256_maskstore_ps(p, vmask_n(n), a);
}
#define VKEEP(v) __asm__("" : "+x"(v))
#else
#define SIMD_NATIVE 0
typedef struct vf { float f[SIMD_LANES]; } vf;
typedef struct vidx { int i[SIMD_LANES]; } vidx;
static inline vf vzero(void) { vf r; memset(&r, 0, sizeof r); return r; }
static inline vf vld(const float *p) { vf r; memcpy(r.f, p, sizeof r.f); return r; }
static inline void vst(float *p, vf a) { memcpy(p, a.f, sizeof a.f); }
static inline vf vbcast(const float *p)
{
    vf r;
    for (int l = 0; l < SIMD_LANES; l++) r.f[l] = *p;
    return r;
}
static inline vf vfma(vf a, vf b, vf c)
{
    for (int l = 0; l < SIMD_LANES; l++) c.f[l] = fmaf(a.f[l], b.f[l], c.f[l]);
    return c;
}
static inline vf vadd(vf a, vf b)
{
    for (int l = 0; l < SIMD_LANES; l++) a.f[l] += b.f[l];
    return a;
}
static inline vf vsub(vf a, vf b)
{
    for (int l = 0; l < SIMD_LANES; l++) a.f[l] -= b.f[l];
    return a;
}
static inline vf vmul(vf a, vf b)
{
    for (int l = 0; l < SIMD_LANES; l++) a.f[l] *= b.f[l];
    return a;
}
static inline vidx vidx_make(const int *lanes) { vidx r; memcpy(r.i, lanes, sizeof r.i); return r; }
static inline vf vperm(vidx i, vf a)
{
    vf r;
    for (int l = 0; l < SIMD_LANES; l++) r.f[l] = a.f[i.i[l]];
    return r;
}
static inline vf vgather(const float *p, vidx i)
{
    vf r;
    for (int l = 0; l < SIMD_LANES; l++) r.f[l] = p[i.i[l]];
    return r;
}
static inline void vst_nt(float *p, vf a) { vst(p, a); }
static inline void vfence(void) {}
static inline vf vld_n(const float *p, int n)
{
    vf r = vzero();
    memcpy(r.f, p, sizeof(float) * n);
    return r;
}
static inline void vst_n(float *p, vf a, int n) { memcpy(p, a.f, sizeof(float) * n); }
#define VKEEP(v) ((void)0)
#endif

#if SIMD_NATIVE
#define SIMD_PRAGMA(x) _Pragma(#x)
#define UNROLL(n) SIMD_PRAGMA(GCC unroll n)
#else
#define UNROLL(n)
#endif

#endif
