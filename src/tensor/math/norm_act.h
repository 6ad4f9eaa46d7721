/* math/norm_act.h: per-element batch-norm formulas shared by the CPU
 * kernels (cpu/norm_act.c) and the CUDA kernels (cuda/norm_act.cu).
 * IABN_HD conventions: math/hd.h; the activations: math/act.h.
 */
#ifndef IABN_MATH_NORM_ACT_H
#define IABN_MATH_NORM_ACT_H

#include "tensor/math/act.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* The factor that turns sum(dy*xhat) into dgamma: d(|gamma|+eps)/dgamma for
 * the in-place modes, 1 for plain gamma.  At gamma == 0 it is +1, as in the
 * reference library (dgamma = sum(xhat*dy)), not sign(0) = 0: with 0 a gamma
 * initialised or decayed to exactly 0 (zero-init of a residual block's last
 * BN) would never move again. */
IABN_HD float iabn_bn_dgamma_factor(float gamma, int abs_gamma)
{
    return abs_gamma && gamma < 0.f ? -1.f : 1.f;
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

/* Per-channel constants of in-place ABN II (docs/INPLACE_ABN.md section 2):
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
