/* cuda/loss.cu: softmax cross-entropy with an ignore index and online
 * bootstrapping, or with label smoothing, on CUDA (twin of cpu/loss.c;
 * cpu/ops.h has the semantics).
 *
 * Forward, three steps:
 *  1. one thread per pixel: log-sum-exp and the pixel's loss, written into
 *     `weight` (the output is the right size and is overwritten in step 3);
 *     a label outside [0,K) that is not ignore_index lowers a device flag to
 *     its position with an integer atomicMin (so the first bad position
 *     wins, whatever the thread order) and the host reads it back.
 *  2./3. one block does the rest: counts the valid pixels, finds the
 *     kept-th largest loss key exactly by a 4 x 8-bit radix select (integer
 *     histograms in shared memory), then walks the pixels in index order,
 *     tile by tile, taking keys above the threshold and the first `ties`
 *     equal ones (warp ballots rank them), which is the CPU's choice,
 *     and writes weights 0 or 1/kept and the mean loss.  The loss is summed
 *     per thread in double and added in a fixed tree: deterministic.
 * One block is exact and simple; it reads the N*HW losses five times, a
 * fraction of a millisecond for a 512x512 batch.  The forward synchronises
 * once, to check the labels.
 */
#include <float.h>
#include <math.h>

#include "tensor/cuda/internal.h"
#include "tensor/cuda/kernels.h"
#include "tensor/math/loss.h"

namespace {

enum { SEL_BLOCK = 1024 };

__global__ void xent_pix_k(int n, int k, int hw, const float *logits, const int32_t *labels,
                           int ignore, float eps, float *loss_pix, unsigned long long *bad)
{
    size_t m = (size_t)n * (size_t)hw;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < m;
         i += (size_t)gridDim.x * blockDim.x) {
        int32_t y = labels[i];
        if (y == ignore) {
            loss_pix[i] = 0.f;
            continue;
        }
        if (y < 0 || y >= k) {
            atomicMin(bad, (unsigned long long)i);
            loss_pix[i] = 0.f;
            continue;
        }
        size_t img = i / (size_t)hw, px = i % (size_t)hw;
        const float *l = logits + img * (size_t)k * (size_t)hw + px;
        float mx = -INFINITY, s = 0.f;
        for (int ch = 0; ch < k; ch++) {
            float v = l[(size_t)ch * hw];
            mx = v > mx ? v : mx;
        }
        for (int ch = 0; ch < k; ch++) s += expf(l[(size_t)ch * hw] - mx);
        if (eps > 0.f) { /* label smoothing: the CPU's channel-order logit sum */
            float sum = 0.f;
            for (int ch = 0; ch < k; ch++) sum += l[(size_t)ch * hw];
            loss_pix[i] = iabn_xent_smooth_term(logf(s) + mx, l[(size_t)y * hw], sum, eps, k);
        } else {
            loss_pix[i] = logf(s) - (l[(size_t)y * hw] - mx);
        }
    }
}

__device__ __forceinline__ uint32_t key_of(const float *w, const int32_t *lab, int ignore,
                                           size_t i)
{
    return lab[i] == ignore ? 0u : iabn_float_key(w[i]);
}

/* kept_count() of cpu/loss.c */
__device__ unsigned long long kept_count(float top_frac, unsigned long long valid)
{
    if (!(top_frac > 0.f && top_frac < 1.f)) return valid;
    double prod = (double)top_frac * (double)valid;
    double k = ceil(prod - prod * FLT_EPSILON);
    if (k < 1) k = 1;
    if (k > (double)valid) k = (double)valid;
    return (unsigned long long)k;
}

__global__ void __launch_bounds__(SEL_BLOCK)
xent_select_k(size_t m, const int32_t *labels, int ignore, float top_frac, float *weight,
              float *loss)
{
    __shared__ unsigned long long hist[256];
    __shared__ unsigned long long cnt[SEL_BLOCK];
    __shared__ double sums[SEL_BLOCK];
    __shared__ unsigned wties[SEL_BLOCK / 32];
    __shared__ uint32_t s_prefix, s_mask;
    __shared__ unsigned long long s_rem;
    const int tid = (int)threadIdx.x;

    /* valid count */
    unsigned long long c = 0;
    for (size_t i = (size_t)tid; i < m; i += SEL_BLOCK) c += labels[i] != ignore;
    cnt[tid] = c;
    __syncthreads();
    for (int h = SEL_BLOCK / 2; h > 0; h /= 2) {
        if (tid < h) cnt[tid] += cnt[tid + h];
        __syncthreads();
    }
    const unsigned long long valid = cnt[0];
    __syncthreads();
    if (valid == 0) {
        for (size_t i = (size_t)tid; i < m; i += SEL_BLOCK) weight[i] = 0.f;
        if (tid == 0) *loss = 0.f;
        return;
    }
    const unsigned long long kept = kept_count(top_frac, valid);
    const int select = kept < valid;

    /* radix select of the kept-th largest key, 8 bits a pass from the top */
    if (tid == 0) {
        s_prefix = 0;
        s_mask = 0;
        s_rem = kept;
    }
    __syncthreads();
    for (int pass = 0; select && pass < 4; pass++) {
        int sh = 24 - 8 * pass;
        for (int b = tid; b < 256; b += SEL_BLOCK) hist[b] = 0;
        __syncthreads();
        uint32_t prefix = s_prefix, mask = s_mask;
        for (size_t i = (size_t)tid; i < m; i += SEL_BLOCK) {
            uint32_t kk = key_of(weight, labels, ignore, i);
            if ((kk & mask) == prefix) atomicAdd(&hist[(kk >> sh) & 255u], 1ull);
        }
        __syncthreads();
        if (tid == 0) {
            unsigned long long above = 0, rem = s_rem;
            int bin = 255;
            for (; bin > 0; bin--) {
                if (above + hist[bin] >= rem) break;
                above += hist[bin];
            }
            s_rem = rem - above;
            s_prefix = prefix | ((uint32_t)bin << sh);
            s_mask = mask | (255u << sh);
        }
        __syncthreads();
    }
    const uint32_t thr = s_prefix;
    const unsigned long long ties = s_rem;

    /* take in index order; a tie's rank within its tile comes from warp
     * ballots plus the tie counts of the warps before it (integers: exact) */
    const float wk = (float)(1.0 / (double)kept);
    const int lane = tid & 31, wid = tid >> 5;
    double s = 0;
    unsigned long long seen = 0;
    for (size_t base = 0; base < m; base += SEL_BLOCK) {
        size_t i = base + (size_t)tid;
        uint32_t kk = 0;
        int tie = 0;
        if (i < m) {
            kk = key_of(weight, labels, ignore, i);
            tie = select && kk == thr;
        }
        unsigned before = 0, tile_ties = 0;
        if (select) { /* uniform over the block: the barriers below are safe */
            unsigned bal = __ballot_sync(0xffffffffu, tie);
            if (lane == 0) wties[wid] = (unsigned)__popc(bal);
            __syncthreads();
            before = (unsigned)__popc(bal & ((1u << lane) - 1u));
            for (int w = 0; w < SEL_BLOCK / 32; w++) {
                if (w < wid) before += wties[w];
                tile_ties += wties[w];
            }
            __syncthreads(); /* wties is rewritten by the next tile */
        }
        if (i < m) {
            int take;
            if (select) take = kk > thr || (tie && seen + before < ties);
            else take = labels[i] != ignore;
            if (take) s += (double)weight[i];
            weight[i] = take ? wk : 0.f;
        }
        seen += tile_ties;
    }
    sums[tid] = s;
    __syncthreads();
    for (int h = SEL_BLOCK / 2; h > 0; h /= 2) {
        if (tid < h) sums[tid] += sums[tid + h];
        __syncthreads();
    }
    if (tid == 0) *loss = (float)(sums[0] / (double)kept);
}

__global__ void xent_bwd_k(int n, int k, int hw, const float *logits, const int32_t *labels,
                           const float *weight, float eps, float scale, float *dl)
{
    size_t m = (size_t)n * (size_t)hw;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < m;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t img = i / (size_t)hw, px = i % (size_t)hw;
        size_t base = img * (size_t)k * (size_t)hw + px;
        const float *l = logits + base;
        float *d = dl + base;
        float w = weight[i] * scale;
        if (w == 0.f) { /* ignored or not bootstrapped: exact zeros, no exps */
            for (int ch = 0; ch < k; ch++) d[(size_t)ch * hw] = 0.f;
            continue;
        }
        float mx = -INFINITY, s = 0.f;
        for (int ch = 0; ch < k; ch++) {
            float v = l[(size_t)ch * hw];
            mx = v > mx ? v : mx;
        }
        for (int ch = 0; ch < k; ch++) s += expf(l[(size_t)ch * hw] - mx);
        float inv = 1.f / s;
        int32_t y = labels[i];
        /* each logit is read just before its own gradient overwrites it */
        for (int ch = 0; ch < k; ch++)
            d[(size_t)ch * hw] = eps > 0.f ? iabn_xent_smooth_grad(l[(size_t)ch * hw], mx, inv,
                                                                   y == ch, eps, k, w)
                                           : iabn_xent_grad(l[(size_t)ch * hw], mx, inv, y == ch, w);
    }
}

/* L1 / MSE sum: one block walks the whole array (grid-stride in double)
 * and adds its threads in a fixed tree, so the bits do not vary run to run;
 * the mean goes straight to the loss on the device. */
enum { REG_THREADS = 1024 };
__global__ void __launch_bounds__(REG_THREADS)
    reg_fwd_k(size_t n, int mse, const float *y, const float *t, float *loss)
{
    __shared__ double sh[REG_THREADS];
    double s = 0;
    for (size_t i = threadIdx.x; i < n; i += REG_THREADS)
        s += iabn_reg_term((double)y[i] - (double)t[i], mse);
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int h = REG_THREADS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h) sh[threadIdx.x] += sh[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) *loss = n ? (float)(sh[0] / (double)n) : 0.f;
}

__global__ void reg_bwd_k(size_t n, int mse, float inv, const float *y, const float *t, float *dy)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dy[i] = iabn_reg_grad(y[i] - t[i], inv, mse);
}

} // namespace

extern "C" {

/* the plain loss (eps 0) with bootstrapping, or the smoothed one over every
 * valid pixel (top_frac 1) */
static int xent_fwd(iabn_cuda_ctx *ctx, int n, int k, int hw, const float *logits,
                    const int32_t *labels, int ignore_index, float eps, float top_frac, float *loss,
                    float *weight, long *bad, int *bad_label, iabn_err *e)
{
    size_t m = n > 0 && hw > 0 ? (size_t)n * (size_t)hw : 0;
    if (!m) {
        IABN_CUDA_CHECK(e, cudaMemsetAsync(loss, 0, sizeof(float), ctx->stream));
        return 0;
    }
    unsigned long long *flag = (unsigned long long *)ctx->flag_dev;
    IABN_CUDA_CHECK(e, cudaMemsetAsync(flag, 0xff, sizeof *flag, ctx->stream));
    xent_pix_k<<<iabn_cuda_grid(m, IABN_CUDA_BLOCK), IABN_CUDA_BLOCK, 0, ctx->stream>>>(
        n, k, hw, logits, labels, ignore_index, eps, weight, flag);
    IABN_LAUNCHED(e, "xent_pix_k");
    unsigned long long *hflag = (unsigned long long *)ctx->flag_host;
    IABN_CUDA_CHECK(e, cudaMemcpyAsync(hflag, flag, sizeof *flag, cudaMemcpyDeviceToHost,
                                       ctx->stream));
    IABN_CUDA_CHECK(e, cudaStreamSynchronize(ctx->stream));
    if (*hflag != ~0ull) {
        long pos = (long)*hflag;
        int32_t lab = -1;
        IABN_CUDA_CHECK(e, cudaMemcpyAsync(&lab, labels + pos, sizeof lab,
                                           cudaMemcpyDeviceToHost, ctx->stream));
        IABN_CUDA_CHECK(e, cudaStreamSynchronize(ctx->stream));
        if (bad) *bad = pos;
        if (bad_label) *bad_label = lab;
        return IABN_EINVAL;
    }
    xent_select_k<<<1, SEL_BLOCK, 0, ctx->stream>>>(m, labels, ignore_index, top_frac, weight,
                                                    loss);
    IABN_LAUNCHED(e, "xent_select_k");
    return 0;
}

static int xent_bwd(iabn_cuda_ctx *ctx, int n, int k, int hw, const float *logits,
                    const int32_t *labels, const float *weight, float eps, float scale,
                    float *dlogits, iabn_err *e)
{
    size_t m = n > 0 && hw > 0 ? (size_t)n * (size_t)hw : 0;
    if (!m) return 0;
    xent_bwd_k<<<iabn_cuda_grid(m, IABN_CUDA_BLOCK), IABN_CUDA_BLOCK, 0, ctx->stream>>>(
        n, k, hw, logits, labels, weight, eps, scale, dlogits);
    IABN_LAUNCHED(e, "xent_bwd_k");
    return 0;
}

int iabn_cuda_xent_fwd(iabn_cuda_ctx *ctx, int n, int k, int hw, const float *logits,
                       const int32_t *labels, int ignore_index, float top_frac, float *loss,
                       float *weight, long *bad, int *bad_label, iabn_err *e)
{
    return xent_fwd(ctx, n, k, hw, logits, labels, ignore_index, 0.f, top_frac, loss, weight, bad,
                    bad_label, e);
}

int iabn_cuda_xent_bwd(iabn_cuda_ctx *ctx, int n, int k, int hw, const float *logits,
                       const int32_t *labels, const float *weight, float scale, float *dlogits,
                       iabn_err *e)
{
    return xent_bwd(ctx, n, k, hw, logits, labels, weight, 0.f, scale, dlogits, e);
}

int iabn_cuda_xent_smooth_fwd(iabn_cuda_ctx *ctx, int n, int k, int hw, const float *logits,
                              const int32_t *labels, int ignore_index, float eps, float *loss,
                              float *weight, long *bad, int *bad_label, iabn_err *e)
{
    return xent_fwd(ctx, n, k, hw, logits, labels, ignore_index, eps, 1.f, loss, weight, bad,
                    bad_label, e);
}

int iabn_cuda_xent_smooth_bwd(iabn_cuda_ctx *ctx, int n, int k, int hw, const float *logits,
                              const int32_t *labels, const float *weight, float eps, float scale,
                              float *dlogits, iabn_err *e)
{
    return xent_bwd(ctx, n, k, hw, logits, labels, weight, eps, scale, dlogits, e);
}

int iabn_cuda_reg_loss_fwd(iabn_cuda_ctx *ctx, size_t count, int mse, const float *pred,
                           const float *target, float *loss, iabn_err *e)
{
    reg_fwd_k<<<1, REG_THREADS, 0, ctx->stream>>>(count, mse, pred, target, loss);
    IABN_LAUNCHED(e, "reg_fwd_k");
    return 0;
}

int iabn_cuda_reg_loss_bwd(iabn_cuda_ctx *ctx, size_t count, int mse, const float *pred,
                           const float *target, float *dpred, iabn_err *e)
{
    if (!count) return 0;
    reg_bwd_k<<<iabn_cuda_grid(count, IABN_CUDA_BLOCK), IABN_CUDA_BLOCK, 0, ctx->stream>>>(
        count, mse, 1.f / (float)count, pred, target, dpred);
    IABN_LAUNCHED(e, "reg_bwd_k");
    return 0;
}

} // extern "C"
