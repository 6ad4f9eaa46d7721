/* cuda/norm_act.cu: batch normalisation + activation kernels, every mode, CUDA
 * (the twins of cpu/norm_act.c; cpu/norm_act.h documents the semantics).
 *
 * Two kernel shapes, as on the CPU:
 *  - per-channel reductions: one block per channel walks the channel's
 *    n*hw values with a block-stride loop, accumulates the pair (f, f*s) of
 *    cpu/norm_act.c in double per thread, then adds the threads in a fixed tree.
 *    The order depends on the shape only: deterministic, no atomics.  (Few
 *    channels with huge planes leave SMs idle; correctness first.)
 *  - elementwise passes: a block takes a run of (sample, channel) planes of
 *    about 2048 elements, computes each plane's channel constants exactly as
 *    ew_consts() does, then its threads walk the run (in float4s where the
 *    planes allow).  Every element is read and written by one thread, so z
 *    over x and dx over dz are safe.
 */
#include "tensor/cuda/internal.h"
#include "tensor/cuda/kernels.h"

namespace {

enum { RED_STATS, RED_BN_X, RED_BN_XHAT, RED_IABN1, RED_IABN2 };
enum { EW_FWD, EW_FROM_XHAT, EW_BN_X, EW_BN_XHAT, EW_SCALE, EW_IABN1, EW_IABN2, EW_IABN_EVAL };

/* The reduction's per-element pair; see red_pair() in cpu/norm_act.c. */
template <int KIND, int ACT>
__device__ __forceinline__ void red_pair(float a, float b, float k0, float k1, float p, float *f,
                                         float *s)
{
    if (KIND == RED_STATS) {
        float d = a - k0;
        *f = d;
        *s = d;
    } else if (KIND == RED_BN_X) {
        *f = b;
        *s = iabn_bn_xhat(a, k0, k1);
    } else if (KIND == RED_BN_XHAT) {
        *f = b;
        *s = a;
    } else if (KIND == RED_IABN1) {
        *f = b * iabn_act_dz(ACT, p, a);
        *s = iabn_bn_xhat_from_y(iabn_act_inv(ACT, p, a), k0, k1);
    } else {
        *f = b * iabn_act_dz(ACT, p, a);
        *s = iabn_act_inv(ACT, p, a);
    }
}

struct red_args {
    int n, c, hw;
    const float *a, *b, *mean, *var, *gamma, *beta;
    float eps, p;
    float *o0, *o1;
};

enum { UNROLL = 4 };

__device__ __forceinline__ size_t red_index(const red_args &r, int ni, int ci, int j)
{
    return ((size_t)ni * (size_t)r.c + (size_t)ci) * (size_t)r.hw + (size_t)j;
}

template <int KIND, int ACT>
__global__ void __launch_bounds__(IABN_CUDA_RED_BLOCK) red_kernel(red_args r)
{
    __shared__ double su[IABN_CUDA_RED_BLOCK], sv[IABN_CUDA_RED_BLOCK];
    const int tid = (int)threadIdx.x, nt = (int)blockDim.x;
    const size_t total = (size_t)r.n * (size_t)r.hw;
    for (int ci = (int)blockIdx.x; ci < r.c; ci += (int)gridDim.x) {
        float k0 = 0.f, k1 = 0.f;
        if (KIND == RED_STATS) {
            k0 = total ? r.a[(size_t)ci * (size_t)r.hw] : 0.f;
        } else if (KIND == RED_BN_X) {
            k0 = r.mean[ci];
            k1 = iabn_invstd(r.var[ci], r.eps);
        } else if (KIND == RED_IABN1) {
            float g = iabn_bn_scale(r.gamma[ci], r.eps, 1);
            k0 = r.beta[ci];
            k1 = 1.f / g;
        }
        double u = 0.0, v = 0.0;
        /* The thread takes k = tid, tid+nt, tid+2nt, ... of the channel's
         * n*hw values (k = ni*hw + j), four per step: the four loads are
         * issued before the dependent adds, so four are in flight at once
         * (one block per channel leaves few warps per SM to hide latency).
         * Each of the four (ni, j) trackers moves by 4*nt: one division per
         * plane wrap, none per element.  The adds keep k's order. */
        int ni[UNROLL], jj[UNROLL];
        for (int q = 0; q < UNROLL; q++) {
            int k0q = tid + q * nt;
            ni[q] = r.hw > 0 ? k0q / r.hw : 0;
            jj[q] = r.hw > 0 ? k0q % r.hw : 0;
        }
        const size_t step = (size_t)UNROLL * (size_t)nt;
        size_t k = (size_t)tid;
        for (; k + (size_t)(UNROLL - 1) * (size_t)nt < total; k += step) {
            float av[UNROLL], bv[UNROLL];
#pragma unroll
            for (int q = 0; q < UNROLL; q++) {
                size_t idx = red_index(r, ni[q], ci, jj[q]);
                av[q] = r.a[idx];
                bv[q] = r.b ? r.b[idx] : 0.f;
            }
#pragma unroll
            for (int q = 0; q < UNROLL; q++) {
                float f, s;
                red_pair<KIND, ACT>(av[q], bv[q], k0, k1, r.p, &f, &s);
                u += (double)f;
                v += (double)(f * s);
                jj[q] += UNROLL * nt;
                if (jj[q] >= r.hw) {
                    ni[q] += jj[q] / r.hw;
                    jj[q] %= r.hw;
                }
            }
        }
        /* the tail: fewer than UNROLL values left, at the trackers' places */
        for (int q = 0; q < UNROLL && k + (size_t)q * (size_t)nt < total; q++) {
            size_t idx = red_index(r, ni[q], ci, jj[q]);
            float f, s;
            red_pair<KIND, ACT>(r.a[idx], r.b ? r.b[idx] : 0.f, k0, k1, r.p, &f, &s);
            u += (double)f;
            v += (double)(f * s);
        }
        su[tid] = u;
        sv[tid] = v;
        __syncthreads();
        for (int h = nt / 2; h > 0; h /= 2) {
            if (tid < h) {
                su[tid] += su[tid + h];
                sv[tid] += sv[tid + h];
            }
            __syncthreads();
        }
        if (tid == 0) {
            u = su[0];
            v = sv[0];
            if (KIND == RED_STATS) {
                if (total == 0) {
                    r.o0[ci] = 0.f;
                    r.o1[ci] = 0.f;
                } else {
                    double m = (double)total;
                    double d = u / m;
                    double var = v / m - d * d;
                    r.o0[ci] = (float)((double)k0 + d);
                    r.o1[ci] = (float)(var > 0.0 ? var : 0.0);
                }
            } else if (KIND == RED_IABN2) {
                double g = iabn_bn_scale(r.gamma[ci], r.eps, 1);
                r.o0[ci] = (float)u;
                r.o1[ci] = (float)iabn_iabn2_sum_dy_xhat(v, u, r.beta[ci], g);
            } else {
                r.o0[ci] = (float)u;
                r.o1[ci] = (float)v;
            }
        }
        __syncthreads(); /* su/sv are reused by the next channel */
    }
}

template <int KIND>
int red_launch_act(iabn_cuda_ctx *ctx, int act, const red_args &r, iabn_err *e)
{
    /* the tree needs a power-of-two block */
    unsigned grid = (unsigned)(r.c < 65535 * 32 ? r.c : 65535 * 32);
    switch (act) {
#define X(E, l, name, alias, def, inv)                                                     \
    case IABN_ACT_##E:                                                                     \
        red_kernel<KIND, IABN_ACT_##E><<<grid, IABN_CUDA_RED_BLOCK, 0, ctx->stream>>>(r);                    \
        break;
        IABN_ACTIVATIONS(X)
#undef X
    default:
        return iabn_act_check(iabn_act{(iabn_act_kind)act, 0.f}, e);
    }    IABN_LAUNCHED(e, "red_kernel");
    return 0;
}

red_args red_init(int n, int c, int hw, const float *a, const float *b)
{
    red_args r;
    r.n = n > 0 && hw > 0 ? n : 0;
    r.c = c;
    r.hw = hw > 0 ? hw : 0;
    r.a = a;
    r.b = b;
    r.mean = r.var = r.gamma = r.beta = NULL;
    r.eps = 0.f;
    r.p = 0.f;
    r.o0 = r.o1 = NULL;
    return r;
}

/* ---- elementwise ----------------------------------------------------------------- */

struct ew_args {
    int n, c, hw;
    const float *a, *b;
    float *o, *o2;
    const float *mean, *var, *gamma, *beta, *sum_dy, *sum_dy_xhat;
    float eps, p;
    int abs_gamma;
    double count;
};

/* ew_consts() of cpu/norm_act.c, the same operations in the same order. */
template <int KIND>
__device__ __forceinline__ void ew_consts(const ew_args &j, int ci, float k[5])
{
    float g = j.gamma ? iabn_bn_scale(j.gamma[ci], j.eps, j.abs_gamma) : 1.f;
    float invstd = j.var ? iabn_invstd(j.var[ci], j.eps) : 1.f;
    double inv_m = j.count > 0.0 ? 1.0 / j.count : 0.0;
    float mdy = j.sum_dy ? (float)((double)j.sum_dy[ci] * inv_m) : 0.f;
    float mdx = j.sum_dy_xhat ? (float)((double)j.sum_dy_xhat[ci] * inv_m) : 0.f;
    k[0] = k[1] = k[2] = k[3] = k[4] = 0.f;
    if (KIND == EW_FWD) {
        k[0] = j.mean[ci]; k[1] = invstd; k[2] = g; k[3] = j.beta[ci];
    } else if (KIND == EW_FROM_XHAT) {
        k[0] = g; k[1] = j.beta[ci];
    } else if (KIND == EW_BN_X) {
        k[0] = j.mean[ci]; k[1] = invstd; k[2] = g * invstd; k[3] = mdy; k[4] = mdx;
    } else if (KIND == EW_BN_XHAT) {
        k[0] = g * invstd; k[1] = mdy; k[2] = mdx;
    } else if (KIND == EW_SCALE || KIND == EW_IABN_EVAL) {
        k[0] = g * invstd;
    } else if (KIND == EW_IABN1) {
        k[0] = j.beta[ci]; k[1] = 1.f / g; k[2] = g * invstd; k[3] = mdy; k[4] = mdx;
    } else if (KIND == EW_IABN2) {
        iabn_iabn2_coeffs(g, invstd, j.beta[ci], (double)j.sum_dy[ci], (double)j.sum_dy_xhat[ci],
                          j.count, 1, &k[0], &k[1], &k[2]);
    }
}

/* One element of an elementwise pass: the output for input a (and b), the
 * plane's constants k; *xh receives x-hat where EW_FWD keeps it. */
template <int KIND, int ACT>
__device__ __forceinline__ float ew_elem(const float k[5], float p, float a, float b, float *xh)
{
    if (KIND == EW_FWD) {
        *xh = iabn_bn_xhat(a, k[0], k[1]);
        return iabn_act_f(ACT, p, iabn_bn_affine(*xh, k[2], k[3]));
    } else if (KIND == EW_FROM_XHAT) {
        return iabn_act_f(ACT, p, iabn_bn_affine(a, k[0], k[1]));
    } else if (KIND == EW_BN_X) {
        return iabn_bn_bwd_elem(b, iabn_bn_xhat(a, k[0], k[1]), k[2], k[3], k[4]);
    } else if (KIND == EW_BN_XHAT) {
        return iabn_bn_bwd_elem(b, a, k[0], k[1], k[2]);
    } else if (KIND == EW_SCALE) {
        return k[0] * b;
    } else if (KIND == EW_IABN1) {
        float dy = b * iabn_act_dz(ACT, p, a);
        float x = iabn_bn_xhat_from_y(iabn_act_inv(ACT, p, a), k[0], k[1]);
        return iabn_bn_bwd_elem(dy, x, k[2], k[3], k[4]);
    } else if (KIND == EW_IABN2) {
        float dy = b * iabn_act_dz(ACT, p, a);
        return iabn_iabn2_elem(k[0], k[1], k[2], dy, iabn_act_inv(ACT, p, a));
    } else {
        return k[0] * (b * iabn_act_dz(ACT, p, a));
    }
}

/* A block walks `ppb` consecutive (sample, channel) planes as one flat range
 * of about EW_SPAN elements: one block per 7x7 or 14x14 plane left most of
 * its threads idle and spent more time starting blocks than moving data.
 * The planes' constants are computed once each, into shared memory.  With
 * VEC, hw is a multiple of 4 and every pointer 16-byte aligned, so a thread
 * moves float4s that never cross a plane.  Every element is still read and
 * written by one thread: z over x and dx over dz stay safe. */
enum { EW_BLOCK = 256, EW_SPAN = 2048, EW_MAX_PPB = 64 };

template <int KIND, int ACT, int VEC>
__global__ void __launch_bounds__(EW_BLOCK) ew_kernel(ew_args j, int ppb)
{
    __shared__ float ks[EW_MAX_PPB][5];
    const long planes = (long)j.n * (long)j.c;
    const float p = j.p;
    for (long p0 = (long)blockIdx.x * ppb; p0 < planes; p0 += (long)gridDim.x * ppb) {
        const int np = planes - p0 < ppb ? (int)(planes - p0) : ppb;
        __syncthreads(); /* the last round's readers of ks are done */
        for (int q = (int)threadIdx.x; q < np; q += (int)blockDim.x)
            ew_consts<KIND>(j, (int)((p0 + q) % j.c), ks[q]);
        __syncthreads();
        const size_t base = (size_t)p0 * (size_t)j.hw;
        const float *a = j.a + base;
        const float *b = j.b ? j.b + base : NULL;
        float *o = j.o + base, *o2 = j.o2 ? j.o2 + base : NULL;
        /* an int: one plane (ppb 1) or ppb * hw < EW_SPAN + hw */
        const int span = np * j.hw;
        if (VEC) {
            for (int f = 4 * (int)threadIdx.x; f < span; f += 4 * (int)blockDim.x) {
                const float *k = ks[f / j.hw];
                float4 av = *(const float4 *)(a + f), bv = make_float4(0.f, 0.f, 0.f, 0.f), r, x;
                if (b) bv = *(const float4 *)(b + f);
                r.x = ew_elem<KIND, ACT>(k, p, av.x, bv.x, &x.x);
                r.y = ew_elem<KIND, ACT>(k, p, av.y, bv.y, &x.y);
                r.z = ew_elem<KIND, ACT>(k, p, av.z, bv.z, &x.z);
                r.w = ew_elem<KIND, ACT>(k, p, av.w, bv.w, &x.w);
                if (KIND == EW_FWD && o2) *(float4 *)(o2 + f) = x;
                *(float4 *)(o + f) = r;
            }
        } else {
            for (int f = (int)threadIdx.x; f < span; f += (int)blockDim.x) {
                float x;
                float r = ew_elem<KIND, ACT>(ks[f / j.hw], p, a[f], b ? b[f] : 0.f, &x);
                if (KIND == EW_FWD && o2) o2[f] = x;
                o[f] = r;
            }
        }
    }
}

int aligned16(const void *ptr) { return ((uintptr_t)ptr & 15) == 0; }

template <int KIND>
int ew_launch(iabn_cuda_ctx *ctx, int act, const ew_args &j, iabn_err *e)
{
    long planes = (long)j.n * (long)j.c;
    if (j.n <= 0 || j.c <= 0 || j.hw <= 0) return 0;
    int ppb = j.hw >= EW_SPAN / 2 ? 1 : EW_SPAN / j.hw;
    if (ppb > EW_MAX_PPB) ppb = EW_MAX_PPB;
    long blocks = (planes + ppb - 1) / ppb;
    unsigned grid = (unsigned)(blocks < 65535L * 512L ? blocks : 65535L * 512L);
    const int vec = j.hw % 4 == 0 && aligned16(j.a) && (!j.b || aligned16(j.b)) &&
                    aligned16(j.o) && (!j.o2 || aligned16(j.o2));
    switch (act) {
#define X(E, l, name, alias, def, inv)                                                     \
    case IABN_ACT_##E:                                                                     \
        if (vec)                                                                           \
            ew_kernel<KIND, IABN_ACT_##E, 1><<<grid, EW_BLOCK, 0, ctx->stream>>>(j, ppb);  \
        else                                                                               \
            ew_kernel<KIND, IABN_ACT_##E, 0><<<grid, EW_BLOCK, 0, ctx->stream>>>(j, ppb);  \
        break;
        IABN_ACTIVATIONS(X)
#undef X
    default:
        return iabn_act_check(iabn_act{(iabn_act_kind)act, 0.f}, e);
    }
    IABN_LAUNCHED(e, "ew_kernel");
    return 0;
}

ew_args ew_init(int n, int c, int hw, const float *a, const float *b, float *o)
{
    ew_args j;
    j.n = n;
    j.c = c;
    j.hw = hw;
    j.a = a;
    j.b = b;
    j.o = o;
    j.o2 = NULL;
    j.mean = j.var = j.gamma = j.beta = j.sum_dy = j.sum_dy_xhat = NULL;
    j.eps = 0.f;
    j.p = 0.f;
    j.abs_gamma = 0;
    j.count = 0.0;
    return j;
}

/* ---- small per-channel and flat kernels --------------------------------------------- */

__global__ void running_kernel(int c, double unbias, double mo, const float *mean,
                               const float *var, float *rm, float *rv)
{
    int ci = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (ci >= c) return;
    rm[ci] = (float)((1.0 - mo) * rm[ci] + mo * mean[ci]);
    rv[ci] = (float)((1.0 - mo) * rv[ci] + mo * var[ci] * unbias);
}

__global__ void param_grads_kernel(int c, const float *gamma, int abs_gamma, const float *sum_dy,
                                   const float *sum_dy_xhat, float *dgamma, float *dbeta)
{
    int ci = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (ci >= c) return;
    float s = iabn_bn_dgamma_factor(gamma[ci], abs_gamma);
    dgamma[ci] += sum_dy_xhat[ci] * s;
    dbeta[ci] += sum_dy[ci];
}

template <int ACT, int BWD>
__global__ void act_kernel(size_t count, float p, const float *a, const float *b, float *o)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        o[i] = BWD ? b[i] * iabn_act_dz(ACT, p, a[i]) : iabn_act_f(ACT, p, a[i]);
}

template <int BWD>
int act_launch(iabn_cuda_ctx *ctx, size_t count, iabn_act act, const float *a, const float *b,
               float *o, iabn_err *e)
{
    if (!count) return 0;
    const unsigned grid = iabn_cuda_grid(count, IABN_CUDA_BLOCK), bl = IABN_CUDA_BLOCK;
    const float p = act.param;
    switch (act.kind) {
#define X(E, l, name, alias, def, inv)                                                     \
    case IABN_ACT_##E:                                                                     \
        act_kernel<IABN_ACT_##E, BWD><<<grid, bl, 0, ctx->stream>>>(count, p, a, b, o);                    \
        break;
        IABN_ACTIVATIONS(X)
#undef X
    default:
        return iabn_act_check(act, e);
    }    IABN_LAUNCHED(e, "act_kernel");
    return 0;
}

} // namespace

/* ======================================================================== */

extern "C" {

int iabn_cuda_bn_stats(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                       const float *x, float *mean, float *var, iabn_err *e)
{
    IABN_CUDA_NCHW_ONLY(layout);
    if (c <= 0) return 0;
    red_args r = red_init(n, c, hw, x, NULL);
    r.o0 = mean;
    r.o1 = var;
    return red_launch_act<RED_STATS>(ctx, IABN_ACT_IDENTITY, r, e);
}

int iabn_cuda_bn_update_running(iabn_cuda_ctx *ctx, int c, double m, float momentum,
                                const float *mean, const float *var, float *running_mean,
                                float *running_var, iabn_err *e)
{
    if (c <= 0) return 0;
    double unbias = m > 1.0 ? m / (m - 1.0) : 1.0;
    unsigned grid = (unsigned)((c + IABN_CUDA_BLOCK - 1) / IABN_CUDA_BLOCK);
    running_kernel<<<grid, IABN_CUDA_BLOCK, 0, ctx->stream>>>(c, unbias, (double)momentum, mean,
                                                              var, running_mean, running_var);
    IABN_LAUNCHED(e, "running_kernel");
    return 0;
}

int iabn_cuda_norm_act_fwd(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                           const float *x, const float *mean, const float *var, float eps,
                           const float *gamma, const float *beta, int abs_gamma, iabn_act act,
                           float *z, float *xhat, iabn_err *e)
{
    IABN_CUDA_NCHW_ONLY(layout);
    ew_args j = ew_init(n, c, hw, x, NULL, z);
    j.p = act.param;
    j.o2 = xhat;
    j.mean = mean;
    j.var = var;
    j.eps = eps;
    j.gamma = gamma;
    j.beta = beta;
    j.abs_gamma = abs_gamma;
    return ew_launch<EW_FWD>(ctx, act.kind, j, e);
}

int iabn_cuda_norm_act_from_xhat(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                                 const float *xhat, float eps, const float *gamma,
                                 const float *beta, int abs_gamma, iabn_act act, float *z,
                                 iabn_err *e)
{
    IABN_CUDA_NCHW_ONLY(layout);
    ew_args j = ew_init(n, c, hw, xhat, NULL, z);
    j.p = act.param;
    j.eps = eps;
    j.gamma = gamma;
    j.beta = beta;
    j.abs_gamma = abs_gamma;
    return ew_launch<EW_FROM_XHAT>(ctx, act.kind, j, e);
}

int iabn_cuda_act_fwd(iabn_cuda_ctx *ctx, size_t count, iabn_act act, const float *x, float *y,
                      iabn_err *e)
{
    return act_launch<0>(ctx, count, act, x, NULL, y, e);
}

int iabn_cuda_act_bwd(iabn_cuda_ctx *ctx, size_t count, iabn_act act, const float *y,
                      const float *dy, float *dx, iabn_err *e)
{
    return act_launch<1>(ctx, count, act, y, dy, dx, e);
}

int iabn_cuda_bn_bwd_reduce(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                            const float *x, const float *dy, const float *mean, const float *var,
                            float eps, float *sum_dy, float *sum_dy_xhat, iabn_err *e)
{
    IABN_CUDA_NCHW_ONLY(layout);
    if (c <= 0) return 0;
    red_args r = red_init(n, c, hw, x, dy);
    r.mean = mean;
    r.var = var;
    r.eps = eps;
    r.o0 = sum_dy;
    r.o1 = sum_dy_xhat;
    return red_launch_act<RED_BN_X>(ctx, IABN_ACT_IDENTITY, r, e);
}

int iabn_cuda_bn_bwd_reduce_xhat(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                                 const float *xhat, const float *dy, float *sum_dy,
                                 float *sum_dy_xhat, iabn_err *e)
{
    IABN_CUDA_NCHW_ONLY(layout);
    if (c <= 0) return 0;
    red_args r = red_init(n, c, hw, xhat, dy);
    r.o0 = sum_dy;
    r.o1 = sum_dy_xhat;
    return red_launch_act<RED_BN_XHAT>(ctx, IABN_ACT_IDENTITY, r, e);
}

int iabn_cuda_bn_bwd_apply(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                           const float *x, const float *dy, const float *mean, const float *var,
                           float eps, const float *gamma, int abs_gamma, const float *sum_dy,
                           const float *sum_dy_xhat, double count, int training, float *dx,
                           iabn_err *e)
{
    IABN_CUDA_NCHW_ONLY(layout);
    ew_args j = ew_init(n, c, hw, x, dy, dx);
    j.mean = mean;
    j.var = var;
    j.eps = eps;
    j.gamma = gamma;
    j.abs_gamma = abs_gamma;
    j.sum_dy = training ? sum_dy : NULL;
    j.sum_dy_xhat = training ? sum_dy_xhat : NULL;
    j.count = count;
    if (training) return ew_launch<EW_BN_X>(ctx, IABN_ACT_IDENTITY, j, e);
    return ew_launch<EW_SCALE>(ctx, IABN_ACT_IDENTITY, j, e);
}

int iabn_cuda_bn_bwd_apply_xhat(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                                const float *xhat, const float *dy, const float *var, float eps,
                                const float *gamma, int abs_gamma, const float *sum_dy,
                                const float *sum_dy_xhat, double count, int training, float *dx,
                                iabn_err *e)
{
    IABN_CUDA_NCHW_ONLY(layout);
    ew_args j = ew_init(n, c, hw, xhat, dy, dx);
    j.var = var;
    j.eps = eps;
    j.gamma = gamma;
    j.abs_gamma = abs_gamma;
    j.sum_dy = training ? sum_dy : NULL;
    j.sum_dy_xhat = training ? sum_dy_xhat : NULL;
    j.count = count;
    if (training) return ew_launch<EW_BN_XHAT>(ctx, IABN_ACT_IDENTITY, j, e);
    return ew_launch<EW_SCALE>(ctx, IABN_ACT_IDENTITY, j, e);
}

int iabn_cuda_bn_param_grads(iabn_cuda_ctx *ctx, int c, const float *gamma, int abs_gamma,
                             const float *sum_dy, const float *sum_dy_xhat, float *dgamma,
                             float *dbeta, iabn_err *e)
{
    if (c <= 0) return 0;
    unsigned grid = (unsigned)((c + IABN_CUDA_BLOCK - 1) / IABN_CUDA_BLOCK);
    param_grads_kernel<<<grid, IABN_CUDA_BLOCK, 0, ctx->stream>>>(c, gamma, abs_gamma, sum_dy,
                                                                  sum_dy_xhat, dgamma, dbeta);
    IABN_LAUNCHED(e, "param_grads_kernel");
    return 0;
}

int iabn_cuda_iabn_bwd_reduce(iabn_cuda_ctx *ctx, int variant, int n, int c, int hw,
                              iabn_layout layout, const float *z, const float *dz, float eps,
                              const float *gamma, const float *beta, iabn_act act,
                              float *sum_dy, float *sum_dy_xhat, iabn_err *e)
{
    IABN_CUDA_NCHW_ONLY(layout);
    if (c <= 0) return 0;
    red_args r = red_init(n, c, hw, z, dz);
    r.gamma = gamma;
    r.beta = beta;
    r.eps = eps;
    r.p = act.param;
    r.o0 = sum_dy;
    r.o1 = sum_dy_xhat;
    if (variant == 1) return red_launch_act<RED_IABN1>(ctx, act.kind, r, e);
    return red_launch_act<RED_IABN2>(ctx, act.kind, r, e);
}

int iabn_cuda_iabn_bwd_apply(iabn_cuda_ctx *ctx, int variant, int n, int c, int hw,
                             iabn_layout layout, const float *z, const float *dz,
                             const float *var, float eps, const float *gamma, const float *beta,
                             int abs_gamma, iabn_act act, const float *sum_dy,
                             const float *sum_dy_xhat, double count, int training, float *dx,
                             iabn_err *e)
{
    IABN_CUDA_NCHW_ONLY(layout);
    ew_args j = ew_init(n, c, hw, z, dz, dx);
    j.p = act.param;
    j.var = var;
    j.eps = eps;
    j.gamma = gamma;
    j.beta = beta;
    j.abs_gamma = abs_gamma;
    j.sum_dy = training ? sum_dy : NULL;
    j.sum_dy_xhat = training ? sum_dy_xhat : NULL;
    j.count = count;
    if (!training) return ew_launch<EW_IABN_EVAL>(ctx, act.kind, j, e);
    if (variant == 1) return ew_launch<EW_IABN1>(ctx, act.kind, j, e);
    return ew_launch<EW_IABN2>(ctx, act.kind, j, e);
}

} // extern "C"
