/* test_blas.c: the native paths' GEMM (src/tensor/cpu/blas.h).
 *
 *  - both engines, OpenBLAS and oneDNN's sgemm (where the build has it),
 *    against a double-precision reference on every transpose combination,
 *    with alpha and beta, leading dimensions wider than the matrices, and
 *    the degenerate sizes (one row, one column, k = 1);
 *  - the same call twice gives the same bits, threaded and inside a parallel
 *    region (where each runs on one thread);
 *  - the rule: oneDNN where OpenBLAS runs kernels without AVX-512 on a CPU
 *    with it (OPENBLAS_CORETYPE=Haswell), OpenBLAS elsewhere.
 */
#include "iabn_config.h"
#include "tensor/cpu/blas.h"
#include "test_util.h"

#include <omp.h>
#include <strings.h>

static float rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffff) / 32768.f - 1.f;
}

/* the element op(X)[i][j] of a row-major X with leading dimension ld */
static float at(const float *x, int trans, int ld, int i, int j)
{
    return trans ? x[(size_t)j * ld + i] : x[(size_t)i * ld + j];
}

static void one(iabn_gemm_engine_kind eng, int ta, int tb, int m, int n, int k, float alpha,
                float beta)
{
    int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 5;
    size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb,
           nc = (size_t)m * ldc;
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c = malloc(nc * sizeof *c),
          *c0 = malloc(nc * sizeof *c0), *c2 = malloc(nc * sizeof *c2);
    uint64_t s = (uint64_t)(m * 131 + n * 17 + k) | 1;
    for (size_t i = 0; i < na; i++) a[i] = rnd(&s);
    for (size_t i = 0; i < nb; i++) b[i] = rnd(&s);
    for (size_t i = 0; i < nc; i++) c0[i] = rnd(&s);
    memcpy(c, c0, nc * sizeof *c);
    memcpy(c2, c0, nc * sizeof *c);
    iabn_sgemm_on(eng, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    iabn_sgemm_on(eng, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c2, ldc);
    double worst = 0;
    int pad_ok = 1;
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double ref = beta * (double)c0[(size_t)i * ldc + j], mag = fabs(ref);
            for (int q = 0; q < k; q++) {
                double p = (double)alpha * at(a, ta, lda, i, q) * at(b, tb, ldb, q, j);
                ref += p;
                mag += fabs(p);
            }
            double err = fabs(c[(size_t)i * ldc + j] - ref) / (mag + 1e-30);
            if (err > worst) worst = err;
        }
        for (int j = n; j < ldc; j++) pad_ok &= c[(size_t)i * ldc + j] == c0[(size_t)i * ldc + j];
    }
    const char *en = iabn_gemm_engine_name(eng);
    CHECK_MSG(worst < 1e-5, "%s %c%c %dx%dx%d: error %.3g", en, ta ? 'T' : 'N', tb ? 'T' : 'N',
              m, n, k, worst);
    CHECK_MSG(pad_ok, "%s %dx%dx%d wrote past n in a row of C", en, m, n, k);
    CHECK_MSG(!memcmp(c, c2, nc * sizeof *c), "%s %dx%dx%d: two calls, different bits", en, m, n,
              k);
    free(a);
    free(b);
    free(c);
    free(c0);
    free(c2);
}

static void test_engines(void)
{
    static const int shapes[][3] = {{1, 1, 1},   {1, 37, 5},   {29, 1, 11},  {7, 9, 1},
                                    {64, 48, 96}, {130, 257, 67}, {256, 300, 512}, {4, 1000, 64}};
    for (int e = 0; e < 2; e++) {
        if (e == IABN_GEMM_ONEDNN && !IABN_HAVE_DNNL) continue;
        for (size_t q = 0; q < sizeof shapes / sizeof shapes[0]; q++)
            for (int t = 0; t < 4; t++) {
                one((iabn_gemm_engine_kind)e, t & 1, t >> 1, shapes[q][0], shapes[q][1],
                    shapes[q][2], 1.f, 0.f);
                one((iabn_gemm_engine_kind)e, t & 1, t >> 1, shapes[q][0], shapes[q][1],
                    shapes[q][2], 0.5f, 1.f);
            }
    }
}

/* Each thread of a parallel region its own GEMM: the engines run on one
 * thread there, and give the bits of the same call made alone. */
static void test_in_parallel(void)
{
    enum { M = 96, N = 200, K = 150, T = 4 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *alone = malloc(sizeof(float) * T * M * N), *par = malloc(sizeof(float) * T * M * N);
    uint64_t s = 99;
    for (int i = 0; i < M * K; i++) a[i] = rnd(&s);
    for (int i = 0; i < K * N; i++) b[i] = rnd(&s);
    for (int e = 0; e < 2; e++) {
        if (e == IABN_GEMM_ONEDNN && !IABN_HAVE_DNNL) continue;
        iabn_gemm_engine_kind eng = (iabn_gemm_engine_kind)e;
        for (int t = 0; t < T; t++)
            iabn_sgemm_on(eng, 0, 0, M, N, K, 1.f + (float)t, a, K, b, N, 0.f,
                          alone + (size_t)t * M * N, N);
#pragma omp parallel for schedule(static, 1) num_threads(2)
        for (int t = 0; t < T; t++)
            iabn_sgemm_on(eng, 0, 0, M, N, K, 1.f + (float)t, a, K, b, N, 0.f,
                          par + (size_t)t * M * N, N);
        double worst = 0;
        for (size_t i = 0; i < (size_t)T * M * N; i++) {
            double d = fabs((double)alone[i] - par[i]);
            if (d > worst) worst = d;
        }
        /* the same sums, possibly split otherwise over the threads */
        CHECK_MSG(worst < 1e-4, "%s: in a parallel region off by %.3g",
                  iabn_gemm_engine_name(eng), worst);
    }
    free(a);
    free(b);
    free(alone);
    free(par);
}

static void test_rule(void)
{
    const char *core = iabn_blas_core();
    int wide = !strcasecmp(core, "SkylakeX") || !strcasecmp(core, "Cooperlake") ||
               !strcasecmp(core, "SapphireRapids");
    int want = IABN_HAVE_DNNL && __builtin_cpu_supports("avx512f") && !wide;
    printf("  OpenBLAS core %s, GEMM engine %s\n", core, iabn_gemm_engine_name(iabn_gemm_engine()));
    CHECK_MSG((iabn_gemm_engine() == IABN_GEMM_ONEDNN) == want, "core %s: engine %s", core,
              iabn_gemm_engine_name(iabn_gemm_engine()));
}

int main(void)
{
    RUN(test_engines);
    RUN(test_in_parallel);
    RUN(test_rule);
    return TEST_END();
}
