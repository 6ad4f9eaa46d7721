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
 * clamp so that log1p never sees -1 or less (no NaN, no -inf). */
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

#ifdef __cplusplus
}
#endif
#endif
