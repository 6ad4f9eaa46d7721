/* cuda/conv.cu: convolution through cuDNN (twin of cpu/conv.c).
 *
 * Convolution: descriptors and algorithms are set up once per (geometry,
 * pass, workspace budget) and cached in the context (no global state).  The
 * workspace is the node's planned scratch, sized by
 * iabn_cuda_conv_workspace_bytes() from the geometry alone because the
 * planner runs before any handle exists.  The algorithm: first the first of
 * cuDNN's heuristic ranking (cudnnGet*_v7) whose workspace, asked of cuDNN
 * for that algorithm and math type, fits that budget (deterministic ones
 * only when IABN_CUDNN_DETERMINISTIC=1); then, at the plan's first call,
 * the fastest admissible one of cuDNN's timed trials (cudnnFind*Ex), run on
 * that call's own buffers and planned workspace, so nothing is allocated
 * outside the plan (PyTorch's cudnn.benchmark, within the plan).  Timings
 * vary run to run, and with them the choice and its rounding:
 * IABN_CUDNN_FIND=0, or IABN_CUDNN_DETERMINISTIC=1, keeps the heuristic's.
 * Math: FMA (no TF32) unless IABN_TF32=1.  Batches whose tensors exceed
 * cuDNN's 2^31-element descriptors run in sub-batches.  Bias add and bias
 * gradient are our own kernels (deterministic, any size).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/cuda/internal.h"
#include "tensor/cuda/kernels.h"

struct iabn_cuda_conv_plan {
    iabn_conv_geom g;
    int pass;
    size_t budget;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    int algo;          /* cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t */
    cudnnMathType_t math; /* the descriptor's, the algorithm's entry's */
    size_t ws;         /* bytes the algorithm needs (<= budget) */
    int timed;         /* the timed trials ran (or could not) */
};

static void plan_destroy(iabn_cuda_conv_plan *p)
{
    if (p->xd) (void)cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd) (void)cudnnDestroyTensorDescriptor(p->yd);
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

/* The bytes of the geometry's weight (OIHW, c_in / groups per output). */
static size_t weight_bytes(const iabn_conv_geom *g)
{
    return (size_t)g->c_out * (g->c_in / g->groups) * g->kh * g->kw * sizeof(float);
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
    size_t wb = weight_bytes(g);
    size_t m = xb > yb ? xb : yb;
    m = m > wb ? m : wb;
    m *= 2;
    const size_t lo = (size_t)8 << 20, hi = (size_t)512 << 20;
    return m < lo ? lo : m > hi ? hi : m;
}

/* One entry of cuDNN's ranking, whichever pass it came from. */
struct cand {
    int algo;
    cudnnStatus_t status;
    cudnnDeterminism_t det;
    cudnnMathType_t math;
};

/* Enough for every (algorithm, math type) pair cuDNN 9 ranks. */
enum { MAX_CANDS = 64 };

template <typename Perf>
static int to_cands(const Perf *perf, int got, cand *c)
{
    for (int i = 0; i < got; i++) {
        c[i].algo = (int)perf[i].algo;
        c[i].status = perf[i].status;
        c[i].det = perf[i].determinism;
        c[i].math = perf[i].mathType;
    }
    return got;
}

/* cuDNN's heuristic ranking for the plan's pass, best first.  The request
 * is the library's own maximum (...MaxCount): since cuDNN 7.5 the list holds
 * one entry per (algorithm, math type), so a request of the algorithm count
 * can cut off exactly the deterministic or FMA entries we need. */
static int ranking(iabn_cuda_ctx *ctx, const iabn_cuda_conv_plan *p, cand *c, int *nc,
                   iabn_err *e)
{
    int maxc = 0, got = 0;
    if (p->pass == IABN_CONV_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[MAX_CANDS];
        IABN_CUDNN_CHECK(e, cudnnGetConvolutionForwardAlgorithmMaxCount(ctx->cudnn, &maxc));
        maxc = maxc < 1 ? 1 : maxc > MAX_CANDS ? MAX_CANDS : maxc;
        IABN_CUDNN_CHECK(e, cudnnGetConvolutionForwardAlgorithm_v7(
                                ctx->cudnn, p->xd, p->wd, p->cd, p->yd, maxc, &got, perf));
        *nc = to_cands(perf, got, c);
    } else if (p->pass == IABN_CONV_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[MAX_CANDS];
        IABN_CUDNN_CHECK(e, cudnnGetConvolutionBackwardDataAlgorithmMaxCount(ctx->cudnn, &maxc));
        maxc = maxc < 1 ? 1 : maxc > MAX_CANDS ? MAX_CANDS : maxc;
        IABN_CUDNN_CHECK(e, cudnnGetConvolutionBackwardDataAlgorithm_v7(
                                ctx->cudnn, p->wd, p->yd, p->cd, p->xd, maxc, &got, perf));
        *nc = to_cands(perf, got, c);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[MAX_CANDS];
        IABN_CUDNN_CHECK(e,
                         cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(ctx->cudnn, &maxc));
        maxc = maxc < 1 ? 1 : maxc > MAX_CANDS ? MAX_CANDS : maxc;
        IABN_CUDNN_CHECK(e, cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                                ctx->cudnn, p->xd, p->yd, p->cd, p->wd, maxc, &got, perf));
        *nc = to_cands(perf, got, c);
    }
    return 0;
}

/* The workspace `algo` needs under the descriptor's current math type.  The
 * ranking's own `memory` field is not used: cuDNN documents it loosely for
 * the heuristic (_v7) queries, and a workspace larger than the plan gave
 * would be written out of bounds. */
static cudnnStatus_t ws_size(iabn_cuda_ctx *ctx, const iabn_cuda_conv_plan *p, int algo,
                             size_t *bytes)
{
    if (p->pass == IABN_CONV_FWD)
        return cudnnGetConvolutionForwardWorkspaceSize(ctx->cudnn, p->xd, p->wd, p->cd, p->yd,
                                                       (cudnnConvolutionFwdAlgo_t)algo, bytes);
    if (p->pass == IABN_CONV_BWD_DATA)
        return cudnnGetConvolutionBackwardDataWorkspaceSize(
            ctx->cudnn, p->wd, p->yd, p->cd, p->xd, (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(
        ctx->cudnn, p->xd, p->yd, p->cd, p->wd, (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
}

/* Takes the first entry of c (best first) that the context admits (FMA math
 * unless TF32 is allowed, deterministic when asked) and whose workspace fits
 * `room`: the plan's algorithm, math type and workspace.  0: taken; 1: none
 * fits (the descriptor's math type then is the last tried); < 0: error. */
static int first_admissible(iabn_cuda_ctx *ctx, iabn_cuda_conv_plan *p, const cand *c, int nc,
                            size_t room, iabn_err *e)
{
    for (int i = 0; i < nc; i++) {
        if (c[i].status != CUDNN_STATUS_SUCCESS) continue;
        if (ctx->deterministic && c[i].det != CUDNN_DETERMINISTIC) continue;
        cudnnMathType_t m = c[i].math;
        if (!ctx->tf32) {
            /* tensor-op entries would round fp32 inputs to TF32 */
            if (m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
            m = CUDNN_FMA_MATH;
        }
        /* the call runs with the descriptor's math type: it must be the entry's */
        IABN_CUDNN_CHECK(e, cudnnSetConvolutionMathType(p->cd, m));
        size_t bytes = 0;
        if (ws_size(ctx, p, c[i].algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
        if (bytes > room) continue;
        p->algo = c[i].algo;
        p->math = m;
        p->ws = bytes;
        return 0;
    }
    return 1;
}

static int plan_build(iabn_cuda_ctx *ctx, iabn_cuda_conv_plan *p, iabn_err *e)
{
    const iabn_conv_geom *g = &p->g;
    IABN_CUDNN_CHECK(e, cudnnCreateTensorDescriptor(&p->xd));
    IABN_CUDNN_CHECK(e, cudnnCreateTensorDescriptor(&p->yd));
    IABN_CUDNN_CHECK(e, cudnnCreateFilterDescriptor(&p->wd));
    IABN_CUDNN_CHECK(e, cudnnCreateConvolutionDescriptor(&p->cd));
    IABN_CUDNN_CHECK(e, cudnnSetTensor4dDescriptor(p->xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                   g->n, g->c_in, g->h_in, g->w_in));
    IABN_CUDNN_CHECK(e, cudnnSetTensor4dDescriptor(p->yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                   g->n, g->c_out, g->h_out, g->w_out));
    IABN_CUDNN_CHECK(e, cudnnSetFilter4dDescriptor(p->wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                   g->c_out, g->c_in / g->groups, g->kh, g->kw));
    IABN_CUDNN_CHECK(e, cudnnSetConvolution2dDescriptor(p->cd, g->pad, g->pad, g->stride,
                                                        g->stride, g->dil, g->dil,
                                                        CUDNN_CROSS_CORRELATION,
                                                        CUDNN_DATA_FLOAT));
    IABN_CUDNN_CHECK(e, cudnnSetConvolutionGroupCount(p->cd, g->groups));
    /* FMA math forbids TF32 (cuDNN 8+: DEFAULT lets fp32 run on TF32 tensor cores) */
    const cudnnMathType_t base = ctx->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    IABN_CUDNN_CHECK(e, cudnnSetConvolutionMathType(p->cd, base));
    /* the geometry and cuDNN must agree on the output, or y would be misread */
    int on = 0, oc = 0, oh = 0, ow = 0;
    IABN_CUDNN_CHECK(e, cudnnGetConvolution2dForwardOutputDim(p->cd, p->xd, p->wd, &on, &oc, &oh,
                                                              &ow));
    if (on != g->n || oc != g->c_out || oh != g->h_out || ow != g->w_out)
        return iabn_err_set(e, IABN_EINVAL,
                            "cuDNN computes a %dx%dx%dx%d output where the layer expects "
                            "%dx%dx%dx%d",
                            on, oc, oh, ow, g->n, g->c_out, g->h_out, g->w_out);
    cand c[MAX_CANDS];
    int nc = 0;
    int rc = ranking(ctx, p, c, &nc, e);
    if (rc) return rc;
    if ((rc = first_admissible(ctx, p, c, nc, p->budget, e)) <= 0) return rc;
    return iabn_err_set(e, IABN_EDEVICE,
                        "cuDNN offers no %s%salgorithm for conv pass %d (%dx%dx%dx%d -> %d, "
                        "k %dx%d, s %d, p %d, d %d, g %d) within %zu bytes of workspace",
                        ctx->deterministic ? "deterministic " : "", ctx->tf32 ? "" : "FMA ",
                        p->pass, g->n, g->c_in, g->h_in, g->w_in, g->c_out, g->kh, g->kw,
                        g->stride, g->pad, g->dil, g->groups, p->budget);
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

/* The timed trials (cudnnFind*AlgorithmEx), once per plan at its first call,
 * on that call's buffers: `a`, `b` its inputs (x, w / w, dy / x, dy) and
 * `out` its output, `ws` its planned workspace of ws_bytes.  The fastest
 * admissible entry whose workspace fits replaces the heuristic's choice.
 * The forward and data passes overwrite their output (beta 0), so the trials
 * may write it; the filter pass adds into dw (beta 1), so its trials write
 * into the workspace's tail instead and the rest is offered as workspace.
 * A trial cuDNN cannot run leaves the heuristic's choice. */
static int time_plan(iabn_cuda_ctx *ctx, iabn_cuda_conv_plan *p, const void *a, const void *b,
                     void *out, void *ws, size_t ws_bytes, iabn_err *e)
{
    p->timed = 1;
    if (!ctx->timed || (p->pass == IABN_CONV_FWD && p->g.accumulate)) return 0;
    const iabn_conv_geom *g = &p->g;
    if (p->pass == IABN_CONV_BWD_FILTER) {
        /* dW's stand-in at a 256-byte boundary (the workspace starts at one) */
        size_t wb = weight_bytes(g);
        if (!ws || wb > ws_bytes) return 0;
        ws_bytes = (ws_bytes - wb) & ~(size_t)255;
        out = (char *)ws + ws_bytes;
    }
    if (!ws) ws_bytes = 0;
    const iabn_cuda_conv_plan keep = *p;
    const cudnnMathType_t base = ctx->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    IABN_CUDNN_CHECK(e, cudnnSetConvolutionMathType(p->cd, base));
    cand c[MAX_CANDS];
    int maxc = MAX_CANDS, got = 0;
    cudnnStatus_t st;
    if (p->pass == IABN_CONV_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[MAX_CANDS];
        st = cudnnFindConvolutionForwardAlgorithmEx(ctx->cudnn, p->xd, a, p->wd, b, p->cd, p->yd,
                                                    out, maxc, &got, perf, ws, ws_bytes);
        if (st == CUDNN_STATUS_SUCCESS) got = to_cands(perf, got, c);
    } else if (p->pass == IABN_CONV_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[MAX_CANDS];
        st = cudnnFindConvolutionBackwardDataAlgorithmEx(ctx->cudnn, p->wd, a, p->yd, b, p->cd,
                                                         p->xd, out, maxc, &got, perf, ws,
                                                         ws_bytes);
        if (st == CUDNN_STATUS_SUCCESS) got = to_cands(perf, got, c);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[MAX_CANDS];
        st = cudnnFindConvolutionBackwardFilterAlgorithmEx(ctx->cudnn, p->xd, a, p->yd, b, p->cd,
                                                           p->wd, out, maxc, &got, perf, ws,
                                                           ws_bytes);
        if (st == CUDNN_STATUS_SUCCESS) got = to_cands(perf, got, c);
    }
    int rc = st == CUDNN_STATUS_SUCCESS ? first_admissible(ctx, p, c, got, ws_bytes, e) : 1;
    if (rc < 0) return rc;
    if (rc == 1) { /* nothing timed fits: the heuristic's choice stands */
        p->algo = keep.algo;
        p->math = keep.math;
        p->ws = keep.ws;
        IABN_CUDNN_CHECK(e, cudnnSetConvolutionMathType(p->cd, p->math));
    }
    return 0;
}

namespace {

/* cuDNN's 4-d descriptors hold at most INT_MAX elements (cudnnSetTensor4d-
 * Descriptor refuses more), so a batch whose input or output is bigger runs
 * as sub-batches of this many samples, each with its own plan.  The filter
 * pass accumulates across them through beta = 1 like across micro-batches. */
int sub_batch(const iabn_conv_geom *g)
{
    size_t px = (size_t)g->c_in * g->h_in * g->w_in;
    size_t py = (size_t)g->c_out * g->h_out * g->w_out;
    size_t per = px > py ? px : py;
    size_t nb = per ? (size_t)INT_MAX / per : (size_t)g->n;
    if (nb < 1) nb = 1; /* one sample over the limit: cuDNN's error will say so */
    return nb < (size_t)g->n ? (int)nb : g->n;
}

/* y[n, c, :] += b[c] over the whole output (not per sub-batch) */
__global__ void bias_add_k(size_t total, int c, size_t hw, const float *b, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += b[(i / hw) % (size_t)c];
}

/* db[c] += sum over n and hw of dy[n, c, :]: one block per channel, double
 * per thread, a fixed tree (cpu/conv.c sums in double too).  Our own kernel
 * rather than cudnnConvolutionBackwardBias, whose determinism cuDNN does not
 * document, so IABN_CUDNN_DETERMINISTIC=1 covers the bias as well. */
__global__ void __launch_bounds__(IABN_CUDA_RED_BLOCK)
bias_grad_k(int n, int c, size_t hw, const float *dy, float *db)
{
    __shared__ double sh[IABN_CUDA_RED_BLOCK];
    const int tid = (int)threadIdx.x, nt = (int)blockDim.x;
    const size_t total = (size_t)n * hw;
    for (int co = (int)blockIdx.x; co < c; co += (int)gridDim.x) {
        double s = 0;
        /* (ni, j) follow k = ni*hw + j incrementally: one division per wrap */
        size_t ni = (size_t)tid / hw, j = (size_t)tid % hw;
        for (size_t k = (size_t)tid; k < total; k += (size_t)nt) {
            s += dy[(ni * (size_t)c + (size_t)co) * hw + j];
            j += (size_t)nt;
            if (j >= hw) {
                ni += j / hw;
                j %= hw;
            }
        }
        sh[tid] = s;
        __syncthreads();
        for (int h = nt / 2; h > 0; h /= 2) {
            if (tid < h) sh[tid] += sh[tid + h];
            __syncthreads();
        }
        if (tid == 0) db[co] += (float)sh[0];
        __syncthreads(); /* sh is reused by the next channel */
    }
}

} // namespace

extern "C" {

int iabn_cuda_conv_fwd(iabn_cuda_ctx *ctx, const iabn_conv_geom *g, const float *x,
                       const float *w, const float *bias, float *y, void *ws, size_t ws_bytes,
                       iabn_err *e)
{
    const float one = 1.f, zero = 0.f;
    const size_t px = (size_t)g->c_in * g->h_in * g->w_in;
    const size_t py = (size_t)g->c_out * g->h_out * g->w_out;
    const int nb = sub_batch(g);
    /* beta 1 for an accumulating forward (cpu/conv.h: y += conv); the
     * graph does not ask for one on this backend yet (no conv_accumulates
     * hook: not measured on a GPU), but the flag means the same here */
    const float *beta = g->accumulate ? &one : &zero;
    for (int n0 = 0; n0 < g->n; n0 += nb) {
        iabn_conv_geom gs = *g;
        gs.n = g->n - n0 < nb ? g->n - n0 : nb;
        iabn_cuda_conv_plan *p = NULL;
        int rc = get_plan(ctx, &gs, IABN_CONV_FWD, ws_bytes, &p, e);
        if (!rc && !p->timed)
            rc = time_plan(ctx, p, x + (size_t)n0 * px, w, y + (size_t)n0 * py, ws, ws_bytes, e);
        if (rc) return rc;
        IABN_CUDNN_CHECK(e, cudnnConvolutionForward(ctx->cudnn, &one, p->xd, x + (size_t)n0 * px,
                                                    p->wd, w, p->cd,
                                                    (cudnnConvolutionFwdAlgo_t)p->algo, ws,
                                                    p->ws, beta, p->yd, y + (size_t)n0 * py));
    }
    if (bias) {
        size_t total = (size_t)g->n * py, hw = (size_t)g->h_out * g->w_out;
        bias_add_k<<<iabn_cuda_grid(total, IABN_CUDA_BLOCK), IABN_CUDA_BLOCK, 0, ctx->stream>>>(
            total, g->c_out, hw, bias, y);
        IABN_LAUNCHED(e, "bias_add_k");
    }
    return 0;
}

int iabn_cuda_conv_bwd_data(iabn_cuda_ctx *ctx, const iabn_conv_geom *g, const float *dy,
                            const float *w, float *dx, void *ws, size_t ws_bytes, iabn_err *e)
{
    const float one = 1.f, zero = 0.f;
    const size_t px = (size_t)g->c_in * g->h_in * g->w_in;
    const size_t py = (size_t)g->c_out * g->h_out * g->w_out;
    const int nb = sub_batch(g);
    for (int n0 = 0; n0 < g->n; n0 += nb) {
        iabn_conv_geom gs = *g;
        gs.n = g->n - n0 < nb ? g->n - n0 : nb;
        iabn_cuda_conv_plan *p = NULL;
        int rc = get_plan(ctx, &gs, IABN_CONV_BWD_DATA, ws_bytes, &p, e);
        if (!rc && !p->timed)
            rc = time_plan(ctx, p, w, dy + (size_t)n0 * py, dx + (size_t)n0 * px, ws, ws_bytes,
                           e);
        if (rc) return rc;
        /* beta = 0: dx is overwritten, as on the CPU */
        IABN_CUDNN_CHECK(e, cudnnConvolutionBackwardData(
                                ctx->cudnn, &one, p->wd, w, p->yd, dy + (size_t)n0 * py, p->cd,
                                (cudnnConvolutionBwdDataAlgo_t)p->algo, ws, p->ws, &zero, p->xd,
                                dx + (size_t)n0 * px));
    }
    return 0;
}

int iabn_cuda_conv_bwd_filter(iabn_cuda_ctx *ctx, const iabn_conv_geom *g, const float *x,
                              const float *dy, float *dw, float *dbias, void *ws,
                              size_t ws_bytes, iabn_err *e)
{
    const float one = 1.f;
    const size_t px = (size_t)g->c_in * g->h_in * g->w_in;
    const size_t py = (size_t)g->c_out * g->h_out * g->w_out;
    const int nb = sub_batch(g);
    for (int n0 = 0; n0 < g->n; n0 += nb) {
        iabn_conv_geom gs = *g;
        gs.n = g->n - n0 < nb ? g->n - n0 : nb;
        iabn_cuda_conv_plan *p = NULL;
        int rc = get_plan(ctx, &gs, IABN_CONV_BWD_FILTER, ws_bytes, &p, e);
        if (!rc && !p->timed)
            rc = time_plan(ctx, p, x + (size_t)n0 * px, dy + (size_t)n0 * py, dw, ws, ws_bytes, e);
        if (rc) return rc;
        /* beta = 1: gradients accumulate, as on the CPU */
        IABN_CUDNN_CHECK(e, cudnnConvolutionBackwardFilter(
                                ctx->cudnn, &one, p->xd, x + (size_t)n0 * px, p->yd,
                                dy + (size_t)n0 * py, p->cd,
                                (cudnnConvolutionBwdFilterAlgo_t)p->algo, ws, p->ws, &one, p->wd,
                                dw));
    }
    if (dbias) {
        unsigned grid = (unsigned)(g->c_out < 65535 * 32 ? g->c_out : 65535 * 32);
        bias_grad_k<<<grid, IABN_CUDA_RED_BLOCK, 0, ctx->stream>>>(
            g->n, g->c_out, (size_t)g->h_out * g->w_out, dy, dbias);
        IABN_LAUNCHED(e, "bias_grad_k");
    }
    return 0;
}

} // extern "C"
