/* iabn_math.h: per-element math shared by the CPU kernels and the CUDA kernels.
 *
 * Everything here is `static inline` and, under nvcc, `__host__ __device__`, so
 * the CPU tests exercise the very formulas the GPU runs.  C/C++-clean: no
 * designated initialisers, no compound literals.
 */
#ifndef IABN_MATH_H
#define IABN_MATH_H

#include <math.h>

#ifdef __CUDACC__
#define IABN_HD __host__ __device__ __forceinline__
#else
#define IABN_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif


/* The activation descriptor lives here so that CUDA code sees the same type. */
typedef enum iabn_act_kind {
    IABN_ACT_IDENTITY = 0,
    IABN_ACT_RELU = 1,
    IABN_ACT_LEAKY_RELU = 2,
    IABN_ACT_ELU = 3
} iabn_act_kind;

typedef struct iabn_act {
    iabn_act_kind kind;
    float param; /* leaky_relu slope (default 0.01), elu alpha (default 1) */
} iabn_act;

/* z = act(y) */
IABN_HD float iabn_act_f(int kind, float p, float y)
{
    switch (kind) {
    case IABN_ACT_RELU: return y > 0.f ? y : 0.f;
    case IABN_ACT_LEAKY_RELU: return y >= 0.f ? y : p * y;
    case IABN_ACT_ELU: return y >= 0.f ? y : p * expm1f(y);
    default: return y;
    }
}

/* y = act^-1(z).  ELU: z at or below -alpha can only come from rounding;
 * clamp so that log1p never sees -1 or less (no NaN, no -inf).  ReLU has no
 * inverse: it falls through to z (finite, wrong for y < 0), which is why the
 * layers refuse relu in the in-place modes. */
IABN_HD float iabn_act_inv(int kind, float p, float z)
{
    switch (kind) {
    case IABN_ACT_LEAKY_RELU: return z >= 0.f ? z : z / p;
    case IABN_ACT_ELU: {
        if (z >= 0.f) return z;
        float r = z / p;
        const float lo = -1.f + 1e-7f;
        return log1pf(r > lo ? r : lo);
    }
    default: return z;
    }
}

/* act'(y) written with the output z (valid for every invertible act; relu
 * uses z > 0, which is the subgradient choice of PyTorch). */
IABN_HD float iabn_act_dz(int kind, float p, float z)
{
    switch (kind) {
    case IABN_ACT_RELU: return z > 0.f ? 1.f : 0.f;
    case IABN_ACT_LEAKY_RELU: return z >= 0.f ? 1.f : p;
    case IABN_ACT_ELU: return z >= 0.f ? 1.f : z + p;
    default: return 1.f;
    }
}

/* The scale the in-place modes use: |gamma| + eps (always > 0, so y -> xhat
 * is invertible); the plain modes use gamma itself. */
IABN_HD float iabn_bn_scale(float gamma, float eps, int abs_gamma)
{
    return abs_gamma ? fabsf(gamma) + eps : gamma;
}

IABN_HD float iabn_invstd(float var, float eps)
{
    return 1.f / sqrtf(var + eps);
}

/* d|gamma|/dgamma; 0 at 0 like PyTorch's abs backward. */
IABN_HD float iabn_sign(float v)
{
    return v > 0.f ? 1.f : (v < 0.f ? -1.f : 0.f);
}

/* ---- batch-norm element formulas ------------------------------------------
 * Every mode normalises through xhat with the same two formulas below, so the
 * z of standard, checkpoint and checkpoint_opt are bit-identical and the
 * backward reductions from x and from a kept xhat agree bit for bit. */

IABN_HD float iabn_bn_xhat(float x, float mean, float invstd)
{
    return (x - mean) * invstd;
}

/* y = g * xhat + beta */
IABN_HD float iabn_bn_affine(float xhat, float g, float beta)
{
    return g * xhat + beta;
}

/* The in-place modes' inverse of the affine step; inv_g = 1/g. */
IABN_HD float iabn_bn_xhat_from_y(float y, float beta, float inv_g)
{
    return (y - beta) * inv_g;
}

/* dx = a * (dy - mean_dy - xhat * mean_dy_xhat), a = g*invstd,
 * mean_dy = sum_dy/m, mean_dy_xhat = sum_dy_xhat/m (training mode). */
IABN_HD float iabn_bn_bwd_elem(float dy, float xhat, float a, float mean_dy,
                               float mean_dy_xhat)
{
    return a * (dy - mean_dy - xhat * mean_dy_xhat);
}

/* In-place ABN II reduces sum(dy*y) instead of sum(dy*xhat); since
 * xhat = (y-beta)/g this converts exactly (in double, to keep the
 * cancellation of beta*sum_dy harmless). */
IABN_HD double iabn_iabn2_sum_dy_xhat(double sum_dy_y, double sum_dy, double beta, double g)
{
    return (sum_dy_y - beta * sum_dy) / g;
}

/* Per-channel constants of in-place ABN II (INPLACE_ABN.md section 2):
 * dx = A*dy + B*y + C folds the whole BN backward written in y.
 *   A = g*invstd
 *   B = -invstd * sum_dy_xhat / m
 *   C = -g*invstd*sum_dy/m + invstd*beta*sum_dy_xhat/m
 * Evaluation mode has no batch-statistics terms: B = C = 0. */
IABN_HD void iabn_iabn2_coeffs(float g, float invstd, float beta, double sum_dy,
                               double sum_dy_xhat, double m, int training,
                               float *A, float *B, float *C)
{
    double gi = (double)g * (double)invstd;
    *A = (float)gi;
    if (!training) {
        *B = 0.f;
        *C = 0.f;
        return;
    }
    double mdx = sum_dy_xhat / m;
    *B = (float)(-(double)invstd * mdx);
    *C = (float)(-gi * (sum_dy / m) + (double)invstd * (double)beta * mdx);
}

IABN_HD float iabn_iabn2_elem(float A, float B, float C, float dy, float y)
{
    return A * dy + B * y + C;
}

#ifdef __cplusplus
}
#endif
#endif
