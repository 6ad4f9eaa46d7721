/* cuda_conv.cu: convolution through cuDNN and the linear layer through
 * cuBLAS (twins of cpu_conv.c and cpu_linear.c).
 *
 * Convolution: descriptors and algorithms are set up once per (geometry,
 * pass, workspace budget) and cached in the context (no global state).  The
 * workspace is the node's planned scratch, sized by
 * iabn_cuda_conv_workspace_bytes() from the geometry alone because the
 * planner runs before any handle exists; the algorithm is the first of
 * cuDNN's heuristic ranking (cudnnGet*_v7) that fits that budget, and that is
 * deterministic when IABN_CUDNN_DETERMINISTIC=1.  The heuristic is used
 * rather than cudnnFind*: Find times every algorithm on the real buffers,
 * which would allocate outside the plan and make the choice vary run to run.
 * Math: FMA (no TF32) unless IABN_TF32=1.
 *
 * Linear: row-major y[N,O] = x[N,I] w[O,I]^T is, read column-major,
 * y^T (O x N) = w x^T with w read as its transpose; each call spells out
 * its mapping.
 */
#include <stdlib.h>
#include <string.h>

#include "tensor/cuda_internal.h"
#include "tensor/cuda_kernels.h"

struct iabn_cuda_conv_plan {
    iabn_conv_geom g;
    int pass;
    size_t budget;
    cudnnTensorDescriptor_t xd, yd, bd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    int algo;          /* cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t */
    size_t ws;         /* bytes the algorithm needs (<= budget) */
};

static void plan_destroy(iabn_cuda_conv_plan *p)
{
    if (p->xd) (void)cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd) (void)cudnnDestroyTensorDescriptor(p->yd);
    if (p->bd) (void)cudnnDestroyTensorDescriptor(p->bd);
    if (p->wd) (void)cudnnDestroyFilterDescriptor(p->wd);
    if (p->cd) (void)cudnnDestroyConvolutionDescriptor(p->cd);
    memset(p, 0, sizeof *p);
}

extern "C" void iabn_cuda_conv_plans_free(iabn_cuda_ctx *ctx)
{
    for (int i = 0; i < ctx->nplans; i++) plan_destroy(&ctx->plans[i]);
    free(ctx->plans);
    ctx->plans = NULL;
    ctx->nplans = ctx->cap_plans = 0;
}

/* Budget policy (a pure function of the shape, so plans are reproducible):
 * twice the largest of input, output and weight, at least 8 MiB (what the
 * implicit-GEMM and winograd paths of small layers ask) and at most 512 MiB.
 * Every pass has a zero-workspace algorithm, so a too-small budget only
 * costs speed, never correctness. */
extern "C" size_t iabn_cuda_conv_workspace_bytes(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    (void)pass;
    size_t xb = (size_t)g->n * g->c_in * g->h_in * g->w_in * sizeof(float);
    size_t yb = (size_t)g->n * g->c_out * g->h_out * g->w_out * sizeof(float);
    size_t wb = (size_t)g->c_out * (g->c_in / g->groups) * g->kh * g->kw * sizeof(float);
    size_t m = xb > yb ? xb : yb;
    m = m > wb ? m : wb;
    m *= 2;
    const size_t lo = (size_t)8 << 20, hi = (size_t)512 << 20;
    return m < lo ? lo : m > hi ? hi : m;
}

/* cudnn*AlgoPerf_t differ only in the algo type: one chooser for all three. */
template <typename Perf>
static int pick(const Perf *perf, int count, size_t budget, int deterministic, int *algo,
                size_t *ws)
{
    for (int i = 0; i < count; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > budget) continue;
        if (deterministic && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
        *algo = (int)perf[i].algo;
        *ws = perf[i].memory;
        return 0;
    }
    return -1;
}

static int plan_build(iabn_cuda_ctx *ctx, iabn_cuda_conv_plan *p, iabn_err *e)
{
    const iabn_conv_geom *g = &p->g;
    IABN_CUDNN_CHECK(e, cudnnCreateTensorDescriptor(&p->xd));
    IABN_CUDNN_CHECK(e, cudnnCreateTensorDescriptor(&p->yd));
    IABN_CUDNN_CHECK(e, cudnnCreateTensorDescriptor(&p->bd));
    IABN_CUDNN_CHECK(e, cudnnCreateFilterDescriptor(&p->wd));
    IABN_CUDNN_CHECK(e, cudnnCreateConvolutionDescriptor(&p->cd));
    IABN_CUDNN_CHECK(e, cudnnSetTensor4dDescriptor(p->xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                   g->n, g->c_in, g->h_in, g->w_in));
    IABN_CUDNN_CHECK(e, cudnnSetTensor4dDescriptor(p->yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                   g->n, g->c_out, g->h_out, g->w_out));
    IABN_CUDNN_CHECK(e, cudnnSetTensor4dDescriptor(p->bd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                                   g->c_out, 1, 1));
    IABN_CUDNN_CHECK(e, cudnnSetFilter4dDescriptor(p->wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                   g->c_out, g->c_in / g->groups, g->kh, g->kw));
    IABN_CUDNN_CHECK(e, cudnnSetConvolution2dDescriptor(p->cd, g->pad, g->pad, g->stride,
                                                        g->stride, g->dil, g->dil,
                                                        CUDNN_CROSS_CORRELATION,
                                                        CUDNN_DATA_FLOAT));
    IABN_CUDNN_CHECK(e, cudnnSetConvolutionGroupCount(p->cd, g->groups));
    IABN_CUDNN_CHECK(e, cudnnSetConvolutionMathType(p->cd, ctx->tf32 ? CUDNN_DEFAULT_MATH
                                                                     : CUDNN_FMA_MATH));
    int got = 0, rc = -1;
    if (p->pass == IABN_CONV_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        IABN_CUDNN_CHECK(e, cudnnGetConvolutionForwardAlgorithm_v7(
                                ctx->cudnn, p->xd, p->wd, p->cd, p->yd,
                                CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
        rc = pick(perf, got, p->budget, ctx->deterministic, &p->algo, &p->ws);
    } else if (p->pass == IABN_CONV_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        IABN_CUDNN_CHECK(e, cudnnGetConvolutionBackwardDataAlgorithm_v7(
                                ctx->cudnn, p->wd, p->yd, p->cd, p->xd,
                                CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
        rc = pick(perf, got, p->budget, ctx->deterministic, &p->algo, &p->ws);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        IABN_CUDNN_CHECK(e, cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                                ctx->cudnn, p->xd, p->yd, p->cd, p->wd,
                                CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf));
        rc = pick(perf, got, p->budget, ctx->deterministic, &p->algo, &p->ws);
    }
    if (rc)
        return iabn_err_set(e, IABN_EDEVICE,
                            "cuDNN offers no %salgorithm for conv pass %d (%dx%dx%dx%d -> %d, "
                            "k %d, s %d, p %d, d %d, g %d) within %zu bytes of workspace",
                            ctx->deterministic ? "deterministic " : "", p->pass, g->n, g->c_in,
                            g->h_in, g->w_in, g->c_out, g->kh, g->stride, g->pad, g->dil,
                            g->groups, p->budget);
    return 0;
}

static int get_plan(iabn_cuda_ctx *ctx, const iabn_conv_geom *g, int pass, size_t budget,
                    iabn_cuda_conv_plan **out, iabn_err *e)
{
    for (int i = 0; i < ctx->nplans; i++) {
        iabn_cuda_conv_plan *p = &ctx->plans[i];
        if (p->pass == pass && p->budget == budget && memcmp(&p->g, g, sizeof *g) == 0) {
            *out = p;
            return 0;
        }
    }
    if (ctx->nplans == ctx->cap_plans) {
        int cap = ctx->cap_plans ? 2 * ctx->cap_plans : 32;
        void *np = realloc(ctx->plans, (size_t)cap * sizeof *ctx->plans);
        if (!np) return iabn_err_set(e, IABN_ENOMEM, "out of memory for the cuDNN plan cache");
        ctx->plans = (iabn_cuda_conv_plan *)np;
        ctx->cap_plans = cap;
    }
    iabn_cuda_conv_plan *p = &ctx->plans[ctx->nplans];
    memset(p, 0, sizeof *p);
    p->g = *g;
    p->pass = pass;
    p->budget = budget;
    int rc = plan_build(ctx, p, e);
    if (rc) {
        plan_destroy(p);
        return rc;
    }
    ctx->nplans++;
    *out = p;
    return 0;
}

extern "C" {

int iabn_cuda_conv_fwd(iabn_cuda_ctx *ctx, const iabn_conv_geom *g, const float *x,
                       const float *w, const float *bias, float *y, void *ws, size_t ws_bytes,
                       iabn_err *e)
{
    iabn_cuda_conv_plan *p;
    int rc = get_plan(ctx, g, IABN_CONV_FWD, ws_bytes, &p, e);
    if (rc) return rc;
    const float one = 1.f, zero = 0.f;
    IABN_CUDNN_CHECK(e, cudnnConvolutionForward(ctx->cudnn, &one, p->xd, x, p->wd, w, p->cd,
                                                (cudnnConvolutionFwdAlgo_t)p->algo, ws, p->ws,
                                                &zero, p->yd, y));
    if (bias) IABN_CUDNN_CHECK(e, cudnnAddTensor(ctx->cudnn, &one, p->bd, bias, &one, p->yd, y));
    return 0;
}

int iabn_cuda_conv_bwd_data(iabn_cuda_ctx *ctx, const iabn_conv_geom *g, const float *dy,
                            const float *w, float *dx, void *ws, size_t ws_bytes, iabn_err *e)
{
    iabn_cuda_conv_plan *p;
    int rc = get_plan(ctx, g, IABN_CONV_BWD_DATA, ws_bytes, &p, e);
    if (rc) return rc;
    const float one = 1.f, zero = 0.f;
    IABN_CUDNN_CHECK(e, cudnnConvolutionBackwardData(ctx->cudnn, &one, p->wd, w, p->yd, dy,
                                                     p->cd,
                                                     (cudnnConvolutionBwdDataAlgo_t)p->algo, ws,
                                                     p->ws, &zero, p->xd, dx));
    return 0;
}

int iabn_cuda_conv_bwd_filter(iabn_cuda_ctx *ctx, const iabn_conv_geom *g, const float *x,
                              const float *dy, float *dw, float *dbias, void *ws,
                              size_t ws_bytes, iabn_err *e)
{
    iabn_cuda_conv_plan *p;
    int rc = get_plan(ctx, g, IABN_CONV_BWD_FILTER, ws_bytes, &p, e);
    if (rc) return rc;
    const float one = 1.f;
    /* beta = 1: gradients accumulate, as on the CPU */
    IABN_CUDNN_CHECK(e, cudnnConvolutionBackwardFilter(ctx->cudnn, &one, p->xd, x, p->yd, dy,
                                                       p->cd,
                                                       (cudnnConvolutionBwdFilterAlgo_t)p->algo,
                                                       ws, p->ws, &one, p->wd, dw));
    if (dbias)
        IABN_CUDNN_CHECK(e, cudnnConvolutionBackwardBias(ctx->cudnn, &one, p->yd, dy, &one,
                                                         p->bd, dbias));
    return 0;
}

} // extern "C"

/* ---- linear ------------------------------------------------------------------------- */

namespace {

__global__ void bias_rows_k(int n, int out, const float *b, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)n * out;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = b[i % (size_t)out];
}

/* db[o] += sum over n of dy[n, o], one thread per o, fixed order */
__global__ void bias_grad_k(int n, int out, const float *dy, float *db)
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
    float beta = 0.f;
    if (b) {
        size_t cnt = (size_t)n * out;
        bias_rows_k<<<iabn_cuda_grid(cnt, IABN_CUDA_BLOCK), IABN_CUDA_BLOCK, 0, ctx->stream>>>(
            n, out, b, y);
        IABN_LAUNCHED(e, "bias_rows_k");
        beta = 1.f;
    }
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
    const float one = 1.f, zero = 0.f;
    /* dx^T (I x N, ld I) = w^T (I x O: w col-major, ld I) * dy^T (O x N, ld O) */
    IABN_CUBLAS_CHECK(e, cublasSgemm(ctx->cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, w,
                                     in, dy, out, &zero, dx, in));
    return 0;
}

int iabn_cuda_linear_bwd_weight(iabn_cuda_ctx *ctx, int n, int in, int out, const float *x,
                                const float *dy, float *dw, float *db, iabn_err *e)
{
    if (in <= 0 || out <= 0) return 0;
    const float one = 1.f;
    /* dw^T (I x O, ld I) += x^T (I x N, ld I) * dy (N x O = op_T of dy^T O x N, ld O) */
    IABN_CUBLAS_CHECK(e, cublasSgemm(ctx->cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x,
                                     in, dy, out, &one, dw, in));
    if (db) {
        bias_grad_k<<<(unsigned)((out + IABN_CUDA_BLOCK - 1) / IABN_CUDA_BLOCK), IABN_CUDA_BLOCK,
                      0, ctx->stream>>>(n, out, dy, db);
        IABN_LAUNCHED(e, "bias_grad_k");
    }
    return 0;
}

} // extern "C"
