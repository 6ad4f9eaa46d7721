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

/* ---- the activations: this list is the only place they are enumerated --------
 * One row per activation: X(ENUM, lower, name, aliases, default parameter,
 * invertible); aliases are further accepted spellings, comma-separated.
 * The enum, the names, the default parameters, the invertibility the
 * in-place BN modes need, and every dispatch below and in the kernels are
 * generated from it; adding a row means writing its three element functions
 * iabn_<lower>_f / _inv / _dz further down.  The parameter is leaky_relu's
 * slope and elu's alpha; identity and relu ignore it.  ReLU is not
 * invertible (z = 0 for every y < 0), so the in-place modes refuse it. */
#define IABN_ACTIVATIONS(X)                                                              \
    X(IDENTITY, identity, "identity", "none", 0.f, 1)                                    \
    X(RELU, relu, "relu", "", 0.f, 0)                                                    \
    X(LEAKY_RELU, leaky_relu, "leaky_relu", "", 0.01f, 1)                                \
    X(ELU, elu, "elu", "", 1.f, 1)

typedef enum iabn_act_kind {
#define IABN_X_(E, l, name, alias, def, inv) IABN_ACT_##E,
    IABN_ACTIVATIONS(IABN_X_)
#undef IABN_X_
    IABN_ACT_COUNT
} iabn_act_kind;

/* The activation descriptor lives here so that CUDA code sees the same type. */
typedef struct iabn_act {
    iabn_act_kind kind;
    float param; /* leaky_relu slope, elu alpha (defaults: the list above) */
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

/* ---- element functions: z = f(p, y), y = inv(p, z), act'(y) written with z --- */

IABN_HD float iabn_identity_f(float p, float y) { return (void)p, y; }
IABN_HD float iabn_identity_inv(float p, float z) { return (void)p, z; }
IABN_HD float iabn_identity_dz(float p, float z) { return (void)p, (void)z, 1.f; }

/* No inverse exists (the list marks relu not invertible and the layers
 * refuse it where one is needed); z is returned so that the generated
 * dispatch stays total.  The derivative uses z > 0, PyTorch's subgradient. */
IABN_HD float iabn_relu_f(float p, float y) { return (void)p, y > 0.f ? y : 0.f; }
IABN_HD float iabn_relu_inv(float p, float z) { return (void)p, z; }
IABN_HD float iabn_relu_dz(float p, float z) { return (void)p, z > 0.f ? 1.f : 0.f; }

IABN_HD float iabn_leaky_relu_f(float p, float y) { return y >= 0.f ? y : p * y; }
IABN_HD float iabn_leaky_relu_inv(float p, float z) { return z >= 0.f ? z : z / p; }
IABN_HD float iabn_leaky_relu_dz(float p, float z) { return z >= 0.f ? 1.f : p; }

/* ELU's inverse: z at or below -alpha can only come from rounding;
 * iabn_log1pf_neg clamps z/alpha to -1+2^-23 (no NaN, no -inf: y >= -15.9). */
IABN_HD float iabn_elu_f(float p, float y) { return y >= 0.f ? y : p * iabn_expm1f_neg(y); }
IABN_HD float iabn_elu_inv(float p, float z) { return z >= 0.f ? z : iabn_log1pf_neg(z / p); }
IABN_HD float iabn_elu_dz(float p, float z) { return z >= 0.f ? 1.f : z + p; }

/* ---- dispatch by kind, generated from the list.  A kind outside the list
 * gives NaN (never a silent identity); the layers and the parsers refuse such
 * kinds before any kernel runs. */

IABN_HD float iabn_act_f(int kind, float p, float y)
{
    switch (kind) {
#define IABN_X_(E, l, name, alias, def, inv) case IABN_ACT_##E: return iabn_##l##_f(p, y);
        IABN_ACTIVATIONS(IABN_X_)
#undef IABN_X_
    }
    return NAN;
}

IABN_HD float iabn_act_inv(int kind, float p, float z)
{
    switch (kind) {
#define IABN_X_(E, l, name, alias, def, inv) case IABN_ACT_##E: return iabn_##l##_inv(p, z);
        IABN_ACTIVATIONS(IABN_X_)
#undef IABN_X_
    }
    return NAN;
}

IABN_HD float iabn_act_dz(int kind, float p, float z)
{
    switch (kind) {
#define IABN_X_(E, l, name, alias, def, inv) case IABN_ACT_##E: return iabn_##l##_dz(p, z);
        IABN_ACTIVATIONS(IABN_X_)
#undef IABN_X_
    }
    return NAN;
}

/* Whether the kind has an inverse (the in-place BN modes need one). */
IABN_HD int iabn_act_invertible(int kind)
{
    switch (kind) {
#define IABN_X_(E, l, name, alias, def, inv) case IABN_ACT_##E: return inv;
        IABN_ACTIVATIONS(IABN_X_)
#undef IABN_X_
    }
    return 0;
}

/* The default parameter of the kind (0 outside the list). */
IABN_HD float iabn_act_default_param(int kind)
{
    switch (kind) {
#define IABN_X_(E, l, name, alias, def, inv) case IABN_ACT_##E: return def;
        IABN_ACTIVATIONS(IABN_X_)
#undef IABN_X_
    }
    return 0.f;
}

#ifdef __cplusplus
}
#endif
#endif
