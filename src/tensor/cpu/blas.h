/* cpu/blas.h: the single-precision GEMM of the native CPU paths (im2col and
 * per-tap convolutions, linear layers), cpu/blas.c.
 *
 * Row-major, as cblas_sgemm with CblasRowMajor: C = alpha op(A) op(B) +
 * beta C, op transposing where trans_* is set, A m x k, B k x n after op.
 * Two engines compute it: OpenBLAS, and oneDNN's sgemm where the build has
 * oneDNN.  iabn_sgemm takes the one iabn_gemm_engine() names (tensor.h);
 * iabn_sgemm_on runs a given one (the tests compare them).
 */
#ifndef IABN_CPU_BLAS_H
#define IABN_CPU_BLAS_H

#include "tensor/tensor.h"

void iabn_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                int lda, const float *b, int ldb, float beta, float *c, int ldc);
void iabn_sgemm_on(iabn_gemm_engine_kind engine, int trans_a, int trans_b, int m, int n, int k,
                   float alpha, const float *a, int lda, const float *b, int ldb, float beta,
                   float *c, int ldc);

#endif
