/* cpu/blas.c: the native paths' GEMM (cpu/blas.h) and which kernels run it
 * (tensor.h).
 *
 * Debian's OpenBLAS is built for every x86 core it knows and picks its
 * kernels when it is loaded, from the CPU or from OPENBLAS_CORETYPE.  With
 * its AVX2 kernels on an AVX-512 CPU (OPENBLAS_CORETYPE=Haswell, as the
 * machines this project is measured on set) it runs the native paths'
 * shapes at 150-185 GFLOP/s on a 2-core Zen 5, where oneDNN's sgemm, which
 * picks its own JIT kernels from the CPU, runs them at 200-340 (the forward
 * shapes about 1.9x).  With OpenBLAS's AVX-512 kernels the two are within
 * 10-25% of each other either way, so OpenBLAS keeps them there (docs/CPU.md
 * has the table).  At a fixed thread count each gives the same bits from
 * run to run (test_blas).  `iabn version` and `iabn bench conv` print what
 * runs.
 */
#include "tensor/cpu/blas.h"

#include "iabn_config.h"

#include <cblas.h>
#include <strings.h>
#if IABN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

const char *iabn_blas_core(void)
{
    const char *c = openblas_get_corename();
    return c && *c ? c : "unknown";
}

#if IABN_HAVE_DNNL && defined(__x86_64__)
/* OpenBLAS's cores with AVX-512 kernels (0.3.21's names). */
static int core_has_avx512(const char *core)
{
    static const char *const wide[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++)
        if (!strcasecmp(core, wide[i])) return 1;
    return 0;
}
#endif

iabn_gemm_engine_kind iabn_gemm_engine(void)
{
#if IABN_HAVE_DNNL && defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f") && !core_has_avx512(iabn_blas_core()))
        return IABN_GEMM_ONEDNN;
#endif
    return IABN_GEMM_OPENBLAS;
}

const char *iabn_gemm_engine_name(iabn_gemm_engine_kind k)
{
    return k == IABN_GEMM_ONEDNN ? "oneDNN" : "OpenBLAS";
}

void iabn_sgemm_on(iabn_gemm_engine_kind engine, int trans_a, int trans_b, int m, int n, int k,
                   float alpha, const float *a, int lda, const float *b, int ldb, float beta,
                   float *c, int ldc)
{
#if IABN_HAVE_DNNL
    /* its only failures are arguments it refuses; OpenBLAS then computes it */
    if (engine == IABN_GEMM_ONEDNN &&
        dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb,
                   beta, c, ldc) == dnnl_success)
        return;
#else
    (void)engine;
#endif
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void iabn_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    iabn_sgemm_on(iabn_gemm_engine(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                  ldc);
}
