/* test_util.h: the minimal harness every test program uses.
 *
 * A test program is a set of `static void test_x(void)` functions run by
 * RUN(test_x) from main(); CHECK* record failures with file:line and go on.
 * main() ends with `return TEST_END();` which prints "N checks, M failed" and
 * returns 0 or 1 (77 = skipped, for meson, via TEST_SKIP).
 */
#ifndef IABN_TEST_UTIL_H
#define IABN_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_checks, t_failed;

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        t_checks++;                                                                      \
        if (!(cond)) {                                                                   \
            t_failed++;                                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);     \
        }                                                                                \
    } while (0)

#define CHECK_MSG(cond, ...)                                                             \
    do {                                                                                 \
        t_checks++;                                                                      \
        if (!(cond)) {                                                                   \
            t_failed++;                                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
        }                                                                                \
    } while (0)

/* |a-b| <= atol + rtol*|b| */
#define CHECK_CLOSE(a, b, atol, rtol)                                                    \
    do {                                                                                 \
        double ta_ = (double)(a), tb_ = (double)(b);                                     \
        t_checks++;                                                                      \
        if (!(fabs(ta_ - tb_) <= (atol) + (rtol) * fabs(tb_))) {                         \
            t_failed++;                                                                  \
            fprintf(stderr, "%s:%d: %s = %.9g, %s = %.9g\n", __FILE__, __LINE__, #a,     \
                    ta_, #b, tb_);                                                       \
        }                                                                                \
    } while (0)

#define CHECK_OK(call)                                                                   \
    do {                                                                                 \
        iabn_err e_ = {0};                                                               \
        (void)e_;                                                                        \
        int rc_ = (call);                                                                \
        t_checks++;                                                                      \
        if (rc_ != 0) {                                                                  \
            t_failed++;                                                                  \
            fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call, rc_);  \
        }                                                                                \
    } while (0)

#define RUN(fn)                                                                          \
    do {                                                                                 \
        int before_ = t_failed;                                                          \
        fn();                                                                            \
        fprintf(stderr, "%-40s %s\n", #fn, t_failed == before_ ? "ok" : "FAILED");      \
    } while (0)

#define TEST_SKIP(...)                                                                   \
    do {                                                                                 \
        fprintf(stderr, "SKIP: ");                                                       \
        fprintf(stderr, __VA_ARGS__);                                                    \
        fputc('\n', stderr);                                                             \
        return 77;                                                                       \
    } while (0)

#define TEST_END() (fprintf(stderr, "%d checks, %d failed\n", t_checks, t_failed), t_failed ? 1 : 0)

/* Largest |a-b| / (atol + rtol*|b|) over two arrays (<= 1 means close). */
static inline double t_max_err(const float *a, const float *b, size_t n, double atol, double rtol)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / (atol + rtol * fabs((double)b[i]));
        if (!(d <= worst)) worst = d; /* NaN propagates as worst */
    }
    return worst;
}

/* Deterministic fill in [-1, 1) (xorshift), for test data. */
static inline void t_fill(float *x, size_t n, unsigned seed)
{
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 17; s ^= s << 5;
        x[i] = (float)((s >> 8) * (1.0 / 8388608.0)) - 1.0f;
    }
}

/* n floats followed by T_CANARY guard values; t_canary_ok says whether
 * anything wrote past the n. */
#define T_CANARY 64
#define T_CANARY_VAL (-777.25f)
static inline float *t_alloc_canary(size_t n)
{
    float *p = (float *)malloc((n + T_CANARY) * sizeof(float));
    if (p)
        for (size_t i = 0; i < T_CANARY; i++) p[n + i] = T_CANARY_VAL;
    return p;
}
static inline int t_canary_ok(const float *p, size_t n)
{
    for (size_t i = 0; i < T_CANARY; i++)
        if (p[n + i] != T_CANARY_VAL) return 0;
    return 1;
}

/* The CPU has what oneDNN's avx512_core kernels need (its Winograd
 * convolutions among them): AVX-512 F, BW, VL and DQ. */
static inline int t_cpu_avx512_core(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
    return 0;
#endif
}

/* max |a - b| / max |b| (a NaN in a counts as the largest difference) */
static inline double t_rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - b[i]);
        if (!(x <= d)) d = x;
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return d / m;
}

/* NCHW x -> blocked y with blk channels per block (back 0), or blocked x ->
 * NCHW y (back 1), straight from the layout's definition: element (i, k, s)
 * of a blocked layout sits at ((i*(c/blk) + k/blk)*hw + s)*blk + k%blk.
 * c a multiple of blk, hw values per plane. */
static inline void t_nchw_blk(int n, int c, int hw, int blk, const float *x, float *y, int back)
{
    for (int i = 0; i < n; i++)
        for (int k = 0; k < c; k++)
            for (int s = 0; s < hw; s++) {
                size_t pl = ((size_t)i * c + k) * hw + s;
                size_t bl = (((size_t)i * (c / blk) + k / blk) * hw + s) * blk + k % blk;
                if (back) y[pl] = x[bl];
                else y[bl] = x[pl];
            }
}

/* The same for nChw16c (c a multiple of 16). */
static inline void t_nchw16c(int n, int c, int hw, const float *x, float *y, int back)
{
    t_nchw_blk(n, c, hw, 16, x, y, back);
}

#endif
