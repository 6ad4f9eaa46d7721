/* cpu/linear.c: the fully connected layer y = x w^T + b on OpenBLAS (the
 * OpenMP build, which shares libgomp's threads with our own loops).
 * Row-major throughout: x N x I, w O x I, y N x O.  OpenBLAS splits its work
 * over the output, never over the reduction, so a fixed thread count gives
 * fixed bits.
 */
#include "tensor/tensor.h"

#include <cblas.h>

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
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.f, x, in, w, in, beta,
                y, out);
}

void iabn_linear_bwd_data(int n, int in, int out, const float *dy, const float *w, float *dx)
{
    if (n <= 0 || in <= 0) return;
    if (out <= 0) {
        iabn_fill((size_t)n * in, 0.f, dx);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.f, dy, out, w, in,
                0.f, dx, in);
}

void iabn_linear_bwd_weight(int n, int in, int out, const float *x, const float *dy,
                            float *dw, float *db)
{
    if (n <= 0 || out <= 0) return;
    if (dw && in > 0)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.f, dy, out, x, in,
                    1.f, dw, in);
    if (db) {
#pragma omp parallel for schedule(static) if ((long)n * out >= 16384)
        for (int o = 0; o < out; o++) {
            double s = 0;
            for (int i = 0; i < n; i++) s += dy[(size_t)i * out + o];
            db[o] += (float)s;
        }
    }
}
