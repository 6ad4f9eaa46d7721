/* cuda_ops.cu: the remaining op kernels on CUDA (twins of cpu_ops.c,
 * cpu_pool.c, cpu_resize.c; cpu_ops.h documents the semantics): elementwise
 * add/axpy/copy/fill/scale, broadcast add and its sum, the finite check,
 * Dropout2d (same mask bits: ops_math.h), channel concat/slice, bilinear
 * resize, max / global average pooling, the sum of squares (gradient
 * clipping) and the SGD update.
 *
 * Every backward here gathers (each output element is written by one thread
 * that sums its contributions in a fixed order), never scatters with float
 * atomics, so the results are deterministic run to run.
 */
#include <math.h>

#include "tensor/cuda_internal.h"
#include "tensor/cuda_kernels.h"
#include "tensor/ops_math.h"

#define GRID_LOOP(i, count)                                                              \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (count);          \
         i += (size_t)gridDim.x * blockDim.x)

#define LAUNCH(kernel, count, ...)                                                       \
    do {                                                                                 \
        if ((count) == 0) return 0;                                                      \
        kernel<<<iabn_cuda_grid((count), IABN_CUDA_BLOCK), IABN_CUDA_BLOCK, 0,            \
                 ctx->stream>>>(__VA_ARGS__);                                            \
        IABN_LAUNCHED(e, #kernel);                                                       \
        return 0;                                                                        \
    } while (0)

namespace {

__global__ void add_k(size_t n, const float *a, const float *b, float *y)
{
    GRID_LOOP(i, n) y[i] = a[i] + b[i];
}
__global__ void axpy_k(size_t n, float al, const float *x, float *y)
{
    GRID_LOOP(i, n) y[i] += al * x[i];
}
__global__ void fill_k(size_t n, float v, float *y)
{
    GRID_LOOP(i, n) y[i] = v;
}
__global__ void scale_k(size_t n, float s, float *x)
{
    GRID_LOOP(i, n) x[i] *= s;
}
__global__ void bcast_k(size_t n, int hw, const float *a, const float *b, float *y)
{
    GRID_LOOP(i, n) y[i] = a[i] + b[i / (size_t)hw];
}
__global__ void finite_k(size_t n, const float *x, int *flag)
{
    GRID_LOOP(i, n) if (!isfinite(x[i])) *flag = 0; /* benign race: all write 0 */
}
__global__ void dropout_k(size_t n, int hw, float p, float scale, uint64_t seed,
                          uint64_t stream, const float *x, float *y)
{
    GRID_LOOP(i, n) {
        uint64_t pl = i / (size_t)hw;
        y[i] = iabn_dropout_keep(seed, stream, pl, p) ? x[i] * scale : 0.f;
    }
}
/* copies x (N,cx,HW) into channels [off, off+cx) of y (N,cy,HW), or back */
__global__ void chan_k(size_t n, int cx, int cy, int off, int hw, const float *src, float *dst,
                       int to_y)
{
    GRID_LOOP(i, n) {
        size_t j = i % (size_t)hw, r = i / (size_t)hw;
        size_t ci = r % (size_t)cx, ni = r / (size_t)cx;
        size_t yi = (ni * (size_t)cy + (size_t)off + ci) * (size_t)hw + j;
        if (to_y) dst[yi] = src[i];
        else dst[i] = src[yi];
    }
}
__global__ void bilinear_fwd_k(size_t n, int hi, int wi, int ho, int wo, float sh, float sw,
                               const float *x, float *y)
{
    GRID_LOOP(i, n) {
        int ow = (int)(i % (size_t)wo);
        int oh = (int)((i / (size_t)wo) % (size_t)ho);
        size_t pl = i / ((size_t)wo * (size_t)ho);
        int h0, h1, w0, w1;
        float lh0, lh1, lw0, lw1;
        iabn_bilinear_src(sh, hi, oh, &h0, &h1, &lh0, &lh1);
        iabn_bilinear_src(sw, wi, ow, &w0, &w1, &lw0, &lw1);
        const float *xp = x + pl * (size_t)hi * (size_t)wi;
        y[i] = lh0 * (lw0 * xp[h0 * wi + w0] + lw1 * xp[h0 * wi + w1]) +
               lh1 * (lw0 * xp[h1 * wi + w0] + lw1 * xp[h1 * wi + w1]);
    }
}
/* Output index range whose source coordinate can touch input index i: the
 * exact test is redone per candidate, the margin only keeps it cheap. */
__device__ void bilinear_range(float scale, int in, int out, int i, int *lo, int *hi)
{
    double a = ((double)i - 1.0 + 0.5) / (double)scale - 0.5;
    double b = ((double)i + 1.0 + 0.5) / (double)scale - 0.5;
    int l = (int)floor(a) - 1, h = (int)ceil(b) + 1;
    if (i == 0) l = 0;
    if (i == in - 1) h = out - 1;
    *lo = l < 0 ? 0 : l;
    *hi = h > out - 1 ? out - 1 : h;
}
__device__ float bilinear_w(float scale, int in, int dst, int i)
{
    int i0, i1;
    float l0, l1;
    iabn_bilinear_src(scale, in, dst, &i0, &i1, &l0, &l1);
    return (i0 == i ? l0 : 0.f) + (i1 == i ? l1 : 0.f);
}
__global__ void bilinear_bwd_k(size_t n, int hi, int wi, int ho, int wo, float sh, float sw,
                               const float *dy, float *dx)
{
    GRID_LOOP(i, n) {
        int iw = (int)(i % (size_t)wi);
        int ih = (int)((i / (size_t)wi) % (size_t)hi);
        size_t pl = i / ((size_t)wi * (size_t)hi);
        int r0, r1, c0, c1;
        bilinear_range(sh, hi, ho, ih, &r0, &r1);
        bilinear_range(sw, wi, wo, iw, &c0, &c1);
        const float *dp = dy + pl * (size_t)ho * (size_t)wo;
        float s = 0.f;
        for (int oh = r0; oh <= r1; oh++) {
            float wr = bilinear_w(sh, hi, oh, ih);
            if (wr == 0.f) continue;
            for (int ow = c0; ow <= c1; ow++) {
                float wc = bilinear_w(sw, wi, ow, iw);
                if (wc != 0.f) s += wr * wc * dp[(size_t)oh * wo + ow];
            }
        }
        dx[i] = s;
    }
}
/* cpu_pool.c's scan: first maximum wins a tie, NaN wins over numbers */
__global__ void maxpool_fwd_k(size_t n, int h, int w, int k, int s, int p, int ho, int wo,
                              const float *x, float *y, int32_t *am)
{
    GRID_LOOP(i, n) {
        int ow = (int)(i % (size_t)wo);
        int oh = (int)((i / (size_t)wo) % (size_t)ho);
        size_t pl = i / ((size_t)wo * (size_t)ho);
        const float *xp = x + pl * (size_t)h * (size_t)w;
        int hs = oh * s - p, he = hs + k, ws = ow * s - p, we = ws + k;
        hs = hs < 0 ? 0 : hs;
        he = he > h ? h : he;
        ws = ws < 0 ? 0 : ws;
        we = we > w ? w : we;
        if (hs >= he || ws >= we) {
            y[i] = -INFINITY;
            am[i] = -1;
            continue;
        }
        int32_t best = hs * w + ws;
        float m = -INFINITY;
        for (int ih = hs; ih < he; ih++)
            for (int iw = ws; iw < we; iw++) {
                float v = xp[ih * w + iw];
                if (v > m || isnan(v)) {
                    m = v;
                    best = ih * w + iw;
                }
            }
        y[i] = m;
        am[i] = best;
    }
}
/* Gather: input (ih, iw) sums dy of the windows that chose it, in (oh, ow)
 * order, which is the order the CPU's serial scatter adds them in. */
__global__ void maxpool_bwd_k(size_t n, int h, int w, int k, int s, int p, int ho, int wo,
                              const float *dy, const int32_t *am, float *dx)
{
    GRID_LOOP(i, n) {
        int iw = (int)(i % (size_t)w);
        int ih = (int)((i / (size_t)w) % (size_t)h);
        size_t pl = i / ((size_t)w * (size_t)h);
        int32_t me = ih * w + iw;
        /* windows oh*s-p <= ih < oh*s-p+k */
        int oh0 = (ih + p - k + s) / s, oh1 = (ih + p) / s;
        int ow0 = (iw + p - k + s) / s, ow1 = (iw + p) / s;
        if (ih + p - k + s < 0) oh0 = 0;
        if (iw + p - k + s < 0) ow0 = 0;
        oh1 = oh1 > ho - 1 ? ho - 1 : oh1;
        ow1 = ow1 > wo - 1 ? wo - 1 : ow1;
        const float *dp = dy + pl * (size_t)ho * (size_t)wo;
        const int32_t *ap = am + pl * (size_t)ho * (size_t)wo;
        float acc = 0.f;
        for (int oh = oh0; oh <= oh1; oh++)
            for (int ow = ow0; ow <= ow1; ow++)
                if (ap[oh * wo + ow] == me) acc += dp[oh * wo + ow];
        dx[i] = acc;
    }
}
/* One warp per (n, c) plane, lanes strided (coalesced), sums in double like
 * the CPU, added in a fixed shuffle tree: deterministic.  MEAN: global
 * average pool; otherwise the plain sum (iabn_sum_hw). */
template <bool MEAN>
__global__ void plane_sum_k(size_t planes, int hw, const float *x, float *y)
{
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    int lane = (int)(threadIdx.x % 32);
    size_t nwarps = (size_t)gridDim.x * blockDim.x / 32;
    for (size_t pl = warp; pl < planes; pl += nwarps) {
        const float *xp = x + pl * (size_t)hw;
        double s = 0;
        for (int i = lane; i < hw; i += 32) s += xp[i];
        for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffffu, s, o);
        if (lane == 0) y[pl] = MEAN ? (float)(s / hw) : (float)s;
    }
}
__global__ void gap_bwd_k(size_t n, int hw, const float *dy, float *dx)
{
    GRID_LOOP(i, n) dx[i] = dy[i / (size_t)hw] / (float)hw;
}
/* Sum of squares, the device half of iabn_cuda_sumsq: SUMSQ_BLOCKS blocks
 * walk a fixed grid-stride pattern, each thread in double, each block added
 * in a fixed tree; block b leaves its partial in part[b].  The shapes depend
 * on nothing but the constants, so the result is the same bits every run. */
enum { SUMSQ_BLOCKS = 8, SUMSQ_THREADS = 1024 };
__global__ void __launch_bounds__(SUMSQ_THREADS) sumsq_k(size_t n, const float *x, double *part)
{
    __shared__ double sh[SUMSQ_THREADS];
    const int tid = (int)threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    /* four chains keep four loads in flight per thread */
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (; i + 3 * stride < n; i += 4 * stride) {
        double a = x[i], b = x[i + stride], c = x[i + 2 * stride], d = x[i + 3 * stride];
        s0 += a * a;
        s1 += b * b;
        s2 += c * c;
        s3 += d * d;
    }
    for (; i < n; i += stride) {
        double a = x[i];
        s0 += a * a;
    }
    sh[tid] = (s0 + s1) + (s2 + s3);
    __syncthreads();
    for (int h = SUMSQ_THREADS / 2; h > 0; h /= 2) {
        if (tid < h) sh[tid] += sh[tid + h];
        __syncthreads();
    }
    if (tid == 0) part[blockIdx.x] = sh[0];
}
__global__ void sgd_k(size_t n, float lr, float mom, float wd, int nesterov, int first, float *w,
                      const float *g, float *buf)
{
    GRID_LOOP(i, n) {
        float b = mom != 0.f ? buf[i] : 0.f;
        iabn_sgd_elem(lr, mom, wd, nesterov, first, &w[i], g[i], &b);
        if (mom != 0.f) buf[i] = b;
    }
}

} // namespace

extern "C" {

int iabn_cuda_add(iabn_cuda_ctx *ctx, size_t count, const float *a, const float *b, float *y,
                  iabn_err *e)
{
    LAUNCH(add_k, count, count, a, b, y);
}

int iabn_cuda_axpy(iabn_cuda_ctx *ctx, size_t count, float alpha, const float *x, float *y,
                   iabn_err *e)
{
    LAUNCH(axpy_k, count, count, alpha, x, y);
}

int iabn_cuda_copy_bytes(iabn_cuda_ctx *ctx, size_t bytes, const void *x, void *y, iabn_err *e)
{
    if (!bytes || x == y) return 0;
    IABN_CUDA_CHECK(e, cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, ctx->stream));
    return 0;
}

int iabn_cuda_fill(iabn_cuda_ctx *ctx, size_t count, float v, float *y, iabn_err *e)
{
    LAUNCH(fill_k, count, count, v, y);
}

int iabn_cuda_scale(iabn_cuda_ctx *ctx, size_t count, float s, float *x, iabn_err *e)
{
    LAUNCH(scale_k, count, count, s, x);
}

int iabn_cuda_add_bcast_hw(iabn_cuda_ctx *ctx, int n, int c, int hw, const float *a,
                           const float *b, float *y, iabn_err *e)
{
    size_t cnt = n > 0 && c > 0 && hw > 0 ? (size_t)n * c * hw : 0;
    LAUNCH(bcast_k, cnt, cnt, hw, a, b, y);
}

int iabn_cuda_sum_hw(iabn_cuda_ctx *ctx, int n, int c, int hw, const float *dy, float *db,
                     iabn_err *e)
{
    size_t planes = n > 0 && c > 0 ? (size_t)n * c : 0;
    if (!planes) return 0;
    plane_sum_k<false><<<iabn_cuda_grid(planes * 32, IABN_CUDA_BLOCK), IABN_CUDA_BLOCK, 0,
                         ctx->stream>>>(planes, hw > 0 ? hw : 0, dy, db);
    IABN_LAUNCHED(e, "plane_sum_k");
    return 0;
}

int iabn_cuda_all_finite(iabn_cuda_ctx *ctx, size_t count, const float *x, int *finite,
                         iabn_err *e)
{
    *finite = 1;
    if (!count) return 0;
    int one = 1;
    int *flag = (int *)ctx->flag_dev;
    IABN_CUDA_CHECK(e, cudaMemcpyAsync(flag, &one, sizeof one, cudaMemcpyHostToDevice,
                                       ctx->stream));
    finite_k<<<iabn_cuda_grid(count, IABN_CUDA_BLOCK), IABN_CUDA_BLOCK, 0, ctx->stream>>>(count, x,
                                                                                          flag);
    IABN_LAUNCHED(e, "finite_k");
    IABN_CUDA_CHECK(e, cudaMemcpyAsync(ctx->flag_host, flag, sizeof(int), cudaMemcpyDeviceToHost,
                                       ctx->stream));
    IABN_CUDA_CHECK(e, cudaStreamSynchronize(ctx->stream));
    *finite = *(const int *)ctx->flag_host;
    return 0;
}

int iabn_cuda_dropout2d_apply(iabn_cuda_ctx *ctx, int n, int c, int hw, float p, uint64_t seed,
                              uint64_t stream, const float *x, float *y, iabn_err *e)
{
    size_t cnt = n > 0 && c > 0 && hw > 0 ? (size_t)n * c * hw : 0;
    LAUNCH(dropout_k, cnt, cnt, hw, p, iabn_dropout_scale(p), seed, stream, x, y);
}

int iabn_cuda_copy_channels(iabn_cuda_ctx *ctx, int n, int cx, int cy, int c_off, int hw,
                            const float *x, float *y, iabn_err *e)
{
    /* already in place (a view): cpu_ops.c's copy_blocks skips the same cases */
    if (x == y + (size_t)c_off * hw && (n == 1 || cx == cy)) return 0;
    size_t cnt = n > 0 && cx > 0 && hw > 0 ? (size_t)n * cx * hw : 0;
    LAUNCH(chan_k, cnt, cnt, cx, cy, c_off, hw, x, y, 1);
}

int iabn_cuda_slice_channels(iabn_cuda_ctx *ctx, int n, int cx, int cy, int c_off, int hw,
                             const float *y, float *x, iabn_err *e)
{
    if (x == y + (size_t)c_off * hw && (n == 1 || cx == cy)) return 0;
    size_t cnt = n > 0 && cx > 0 && hw > 0 ? (size_t)n * cx * hw : 0;
    LAUNCH(chan_k, cnt, cnt, cx, cy, c_off, hw, y, x, 0);
}

int iabn_cuda_bilinear_fwd(iabn_cuda_ctx *ctx, int n, int c, int hi, int wi, int ho, int wo,
                           const float *x, float *y, iabn_err *e)
{
    size_t cnt = n > 0 && c > 0 && ho > 0 && wo > 0 ? (size_t)n * c * ho * wo : 0;
    LAUNCH(bilinear_fwd_k, cnt, cnt, hi, wi, ho, wo, iabn_bilinear_scale(hi, ho),
           iabn_bilinear_scale(wi, wo), x, y);
}

int iabn_cuda_bilinear_bwd(iabn_cuda_ctx *ctx, int n, int c, int hi, int wi, int ho, int wo,
                           const float *dy, float *dx, iabn_err *e)
{
    size_t cnt = n > 0 && c > 0 && hi > 0 && wi > 0 ? (size_t)n * c * hi * wi : 0;
    LAUNCH(bilinear_bwd_k, cnt, cnt, hi, wi, ho, wo, iabn_bilinear_scale(hi, ho),
           iabn_bilinear_scale(wi, wo), dy, dx);
}

int iabn_cuda_maxpool_fwd(iabn_cuda_ctx *ctx, int n, int c, int h, int w, int k, int s, int p,
                          int ho, int wo, const float *x, float *y, int32_t *argmax, iabn_err *e)
{
    size_t cnt = n > 0 && c > 0 && ho > 0 && wo > 0 ? (size_t)n * c * ho * wo : 0;
    LAUNCH(maxpool_fwd_k, cnt, cnt, h, w, k, s, p, ho, wo, x, y, argmax);
}

int iabn_cuda_maxpool_bwd(iabn_cuda_ctx *ctx, int n, int c, int h, int w, int k, int s, int p,
                          int ho, int wo, const float *dy, const int32_t *argmax, float *dx,
                          iabn_err *e)
{
    size_t cnt = n > 0 && c > 0 && h > 0 && w > 0 ? (size_t)n * c * h * w : 0;
    LAUNCH(maxpool_bwd_k, cnt, cnt, h, w, k, s, p, ho, wo, dy, argmax, dx);
}

int iabn_cuda_gap_fwd(iabn_cuda_ctx *ctx, int n, int c, int hw, const float *x, float *y,
                      iabn_err *e)
{
    size_t planes = n > 0 && c > 0 && hw > 0 ? (size_t)n * c : 0;
    if (!planes) return 0;
    plane_sum_k<true><<<iabn_cuda_grid(planes * 32, IABN_CUDA_BLOCK), IABN_CUDA_BLOCK, 0,
                        ctx->stream>>>(planes, hw, x, y);
    IABN_LAUNCHED(e, "plane_sum_k");
    return 0;
}

int iabn_cuda_gap_bwd(iabn_cuda_ctx *ctx, int n, int c, int hw, const float *dy, float *dx,
                      iabn_err *e)
{
    size_t cnt = n > 0 && c > 0 && hw > 0 ? (size_t)n * c * hw : 0;
    LAUNCH(gap_bwd_k, cnt, cnt, hw, dy, dx);
}

/* The partials travel in the context's 64-byte flag buffers (8 doubles, one
 * per block: hence SUMSQ_BLOCKS) and are added on the host in block order,
 * so nothing is allocated.  Eight blocks use a fraction of the device's
 * bandwidth: for clipping, read once per step, that is a millisecond or so
 * at ResNet-101's 44M parameters (an estimate: not yet measured on a GPU). */
int iabn_cuda_sumsq(iabn_cuda_ctx *ctx, size_t count, const float *x, double *out, iabn_err *e)
{
    static_assert(SUMSQ_BLOCKS * sizeof(double) <= 64, "the partials must fit the flag buffer");
    *out = 0.0;
    if (!count) return 0;
    double *part = (double *)ctx->flag_dev;
    sumsq_k<<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, ctx->stream>>>(count, x, part);
    IABN_LAUNCHED(e, "sumsq_k");
    IABN_CUDA_CHECK(e, cudaMemcpyAsync(ctx->flag_host, part, SUMSQ_BLOCKS * sizeof(double),
                                       cudaMemcpyDeviceToHost, ctx->stream));
    IABN_CUDA_CHECK(e, cudaStreamSynchronize(ctx->stream));
    const double *h = (const double *)ctx->flag_host;
    double s = 0.0;
    for (int b = 0; b < SUMSQ_BLOCKS; b++) s += h[b];
    *out = s;
    return 0;
}

int iabn_cuda_sgd_update(iabn_cuda_ctx *ctx, size_t count, float lr, float momentum, float wd,
                         int nesterov, int first_step, float *w, const float *grad, float *buf,
                         iabn_err *e)
{
    LAUNCH(sgd_k, count, count, lr, momentum, wd, nesterov, first_step, w, grad, buf);
}

} // extern "C"
