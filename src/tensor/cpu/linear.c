/* cpu/linear.c: the fully connected layer y = x w^T + b on the native GEMM
 * (cpu/blas.h: OpenBLAS's OpenMP build or oneDNN, both on libgomp's threads
 * like our own loops).  Row-major throughout: x N x I, w O x I, y N x O.  A
 * fixed thread count gives fixed bits (test_blas).
 */
#include "tensor/cpu/blas.h"
#include "tensor/tensor.h"


void iabn_linear_fwd(int n, int in, int out, const float *x, const float *w,
                     const float *b, float *y)
{
    if (n <= 0 || out <= 0) return;
    float beta = 0.f;
    if (b) {
        /* Seed y with the bias so that one GEMM with beta = 1 adds the rest. */
#pragma omp parallel for schedule(static) if ((long)n * out >= 16384)
        for (int i = 0; i < n; i++)
            for (int o = 0; o < out; o++) y[(size_t)i * out + o] = b[o];
        beta = 1.f;
    }
    if (in <= 0) {
        if (!b) iabn_fill((size_t)n * out, 0.f, y);
        return;
    }
    iabn_sgemm(0, 1, n, out, in, 1.f, x, in, w, in, beta, y, out);
}

void iabn_linear_bwd_data(int n, int in, int out, const float *dy, const float *w, float *dx)
{
    if (n <= 0 || in <= 0) return;
    if (out <= 0) {
        iabn_fill((size_t)n * in, 0.f, dx);
        return;
    }
    iabn_sgemm(0, 0, n, in, out, 1.f, dy, out, w, in, 0.f, dx, in);
}

void iabn_linear_bwd_weight(int n, int in, int out, const float *x, const float *dy,
                            float *dw, float *db)
{
    if (n <= 0 || out <= 0) return;
    if (dw && in > 0)
        iabn_sgemm(1, 0, out, in, n, 1.f, dy, out, x, in, 1.f, dw, in);
    if (db) {
#pragma omp parallel for schedule(static) if ((long)n * out >= 16384)
        for (int o = 0; o < out; o++) {
            double s = 0;
            for (int i = 0; i < n; i++) s += dy[(size_t)i * out + o];
            db[o] += (float)s;
        }
    }
}
