/* cuda/linear.cu: the fully connected layer through cuBLAS (twin of
 * cpu/linear.c).  Row-major y[N,O] = x[N,I] w[O,I]^T is, read column-major,
 * y^T (O x N) = w x^T with w read as its transpose; each call spells out
 * its mapping.  Bias and bias gradient are our own kernels (fixed order).
 */
#include "tensor/cuda/internal.h"
#include "tensor/cuda/kernels.h"

namespace {

__global__ void bias_rows_k(int n, int out, const float *b, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)n * out;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = b[i % (size_t)out];
}

/* db[o] += sum over n of dy[n, o], one thread per o, fixed order */
__global__ void row_bias_grad_k(int n, int out, const float *dy, float *db)
{
    int o = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (o >= out) return;
    double s = 0;
    for (int i = 0; i < n; i++) s += dy[(size_t)i * out + o];
    db[o] += (float)s;
}

} // namespace

extern "C" {

int iabn_cuda_linear_fwd(iabn_cuda_ctx *ctx, int n, int in, int out, const float *x,
                         const float *w, const float *b, float *y, iabn_err *e)
{
    if (n <= 0 || out <= 0) return 0;
    /* no inputs: y = b, or 0 (cuBLAS rejects k = 0 with a leading dimension of 0) */
    if (in <= 0 && !b) {
        IABN_CUDA_CHECK(e, cudaMemsetAsync(y, 0, (size_t)n * out * sizeof(float), ctx->stream));
        return 0;
    }
    float beta = 0.f;
    if (b) {
        size_t cnt = (size_t)n * out;
        bias_rows_k<<<iabn_cuda_grid(cnt, IABN_CUDA_BLOCK), IABN_CUDA_BLOCK, 0, ctx->stream>>>(
            n, out, b, y);
        IABN_LAUNCHED(e, "bias_rows_k");
        beta = 1.f;
    }
    if (in <= 0) return 0;
    const float one = 1.f;
    /* column-major: y^T (O x N, ld O) = op(w: I x O col-major, ld I)^T * x^T (I x N, ld I) */
    IABN_CUBLAS_CHECK(e, cublasSgemm(ctx->cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w,
                                     in, x, in, &beta, y, out));
    return 0;
}

int iabn_cuda_linear_bwd_data(iabn_cuda_ctx *ctx, int n, int in, int out, const float *dy,
                              const float *w, float *dx, iabn_err *e)
{
    if (n <= 0 || in <= 0) return 0;
    if (out <= 0) {
        IABN_CUDA_CHECK(e, cudaMemsetAsync(dx, 0, (size_t)n * in * sizeof(float), ctx->stream));
        return 0;
    }
    const float one = 1.f, zero = 0.f;
    /* dx^T (I x N, ld I) = w^T (I x O: w col-major, ld I) * dy^T (O x N, ld O) */
    IABN_CUBLAS_CHECK(e, cublasSgemm(ctx->cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, w,
                                     in, dy, out, &zero, dx, in));
    return 0;
}

int iabn_cuda_linear_bwd_weight(iabn_cuda_ctx *ctx, int n, int in, int out, const float *x,
                                const float *dy, float *dw, float *db, iabn_err *e)
{
    if (n <= 0 || out <= 0) return 0;
    const float one = 1.f;
    /* dw^T (I x O, ld I) += x^T (I x N, ld I) * dy (N x O = op_T of dy^T O x N, ld O);
     * beta = 1: accumulates like the CPU */
    if (dw && in > 0)
        IABN_CUBLAS_CHECK(e, cublasSgemm(ctx->cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one,
                                         x, in, dy, out, &one, dw, in));
    if (db) {
        row_bias_grad_k<<<(unsigned)((out + IABN_CUDA_BLOCK - 1) / IABN_CUDA_BLOCK),
                          IABN_CUDA_BLOCK,
                          0, ctx->stream>>>(n, out, dy, db);
        IABN_LAUNCHED(e, "row_bias_grad_k");
    }
    return 0;
}

} // extern "C"
