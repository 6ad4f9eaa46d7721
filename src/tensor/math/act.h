/* math/act.h: the activations, shared by the CPU and CUDA kernels (the
 * norm_act family applies them after batch norm; the elementwise activation
 * op alone).  IABN_HD conventions: math/hd.h.
 */
#ifndef IABN_MATH_ACT_H
#define IABN_MATH_ACT_H

#include "tensor/math/hd.h"

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

/* ---- ELU's transcendental halves -------------------------------------------
 * Branch-free, so that a CPU loop over them vectorises (libm's expm1f/log1pf
 * are calls, which keep ELU ten times slower than leaky_relu), and the same
 * code runs on the GPU.  Both are within 1 ulp of the exact result on their
 * whole domain (tests/test_norm_kernels.c sweeps it); NaN stays NaN. */

/* expm1(y) for y <= 0 (positive y is read as 0, y < -30 as -30, where the
 * float result is -1 already): y = k*ln2 + r with |r| <= ln2/2, expm1(r) by
 * its Taylor series to r^7 (truncation < 0.3 ulp), then
 * expm1(y) = 2^k*expm1(r) + (2^k - 1), which has no cancellation. */
IABN_HD float iabn_expm1f_neg(float y)
{
    float t = y >= -30.f ? y : -30.f;
    t = t <= 0.f ? t : 0.f;
    float k = floorf(t * 1.44269504f + 0.5f);
    /* ln2 split so that k*ln2_hi is exact for |k| < 256 */
    float r = (t - k * 0.693145751953125f) - k * 1.428606765330187e-06f;
    float q = 1.f / 5040.f;
    q = q * r + 1.f / 720.f;
    q = q * r + 1.f / 120.f;
    q = q * r + 1.f / 24.f;
    q = q * r + 1.f / 6.f;
    q = q * r + 0.5f;
    float e = r + r * r * q;
    float s = iabn_bits_to_float((uint32_t)((int)k + 127) << 23);
    float res = s * e + (s - 1.f);
    return y == y ? res : y;
}

/* log1p(r) for -1 < r <= 0 (r is clamped into [-1+2^-23, 0], see
 * iabn_act_inv): u = 1+r = 2^k*m with m in [sqrt(2)/2, sqrt(2)), log(m) by
 * the classic fdlibm/musl logf series in s = f/(2+f), f = m-1, plus the
 * rounding error of 1+r as c/u. */
IABN_HD float iabn_log1pf_neg(float r)
{
    const float lo = -1.f + 1.1920929e-7f; /* -1 + 2^-23 */
    float t = r > lo ? r : lo;
    t = t < 0.f ? t : 0.f;
    float u = 1.f + t;
    float c = (t - (u - 1.f)) / u;
    uint32_t iu = iabn_float_to_bits(u) + (0x3f800000u - 0x3f3504f3u);
    int k = (int)(iu >> 23) - 127;
    float f = iabn_bits_to_float((iu & 0x007fffffu) + 0x3f3504f3u) - 1.f;
    float sf = f / (2.f + f), z = sf * sf, w = z * z;
    float R = z * (0.66666662693f + w * 0.28498786688f) + w * (0.40000972152f + w * 0.24279078841f);
    float hfsq = 0.5f * f * f, dk = (float)k;
    float res = sf * (hfsq + R) + (dk * 9.0580006145e-06f + c) - hfsq + f + dk * 6.9313812256e-01f;
    return r == r ? res : r;
}

/* z = act(y) */
IABN_HD float iabn_act_f(int kind, float p, float y)
{
    switch (kind) {
    case IABN_ACT_RELU: return y > 0.f ? y : 0.f;
    case IABN_ACT_LEAKY_RELU: return y >= 0.f ? y : p * y;
    case IABN_ACT_ELU: return y >= 0.f ? y : p * iabn_expm1f_neg(y);
    default: return y;
    }
}

/* y = act^-1(z).  ELU: z at or below -alpha can only come from rounding;
 * iabn_log1pf_neg clamps z/alpha to -1+2^-23 (no NaN, no -inf: y >= -15.9).
 * ReLU has no inverse: it falls through to z (finite, wrong for y < 0), which
 * is why the layers refuse relu in the in-place modes. */
IABN_HD float iabn_act_inv(int kind, float p, float z)
{
    switch (kind) {
    case IABN_ACT_LEAKY_RELU: return z >= 0.f ? z : z / p;
    case IABN_ACT_ELU: return z >= 0.f ? z : iabn_log1pf_neg(z / p);
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

#ifdef __cplusplus
}
#endif
#endif
