/* math/loss.h: the softmax cross-entropy gradient per logit, the
 * order-preserving float key of the bootstrapping selection and the L1 / MSE
 * terms, shared by
 * cpu/loss.c and cuda/loss.cu.  IABN_HD conventions: math/hd.h.
 */
#ifndef IABN_MATH_LOSS_H
#define IABN_MATH_LOSS_H

#include "tensor/math/hd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- softmax cross-entropy --------------------------------------------------
 * d loss / d logit for one logit of one pixel: w * (softmax - onehot), where
 * the softmax is exp(logit - max) * inv_sum (max and inv_sum = 1/sum exp of
 * the pixel, from the forward's log-sum-exp) and w already holds the pixel
 * weight times the loss scale.  w == 0 (ignored or not bootstrapped) gives an
 * exact 0 whatever the logits. */
IABN_HD float iabn_xent_grad(float logit, float max, float inv_sum, int is_label, float w)
{
    if (w == 0.f) return 0.f;
    float p = expf(logit - max) * inv_sum;
    return w * (p - (is_label ? 1.f : 0.f));
}

/* ---- label smoothing (eps) ---------------------------------------------------
 * The target is (1 - eps) one-hot + eps uniform: a pixel's loss is
 * lse - (1 - eps) logit_y - eps * (sum of its k logits) / k, and the gradient
 * of one logit w * (softmax - (1 - eps) [label] - eps / k), w as above. */
IABN_HD float iabn_xent_smooth_term(float lse, float logit_y, float logit_sum, float eps, int k)
{
    return lse - (1.f - eps) * logit_y - eps * logit_sum / (float)k;
}

IABN_HD float iabn_xent_smooth_grad(float logit, float max, float inv_sum, int is_label, float eps,
                                    int k, float w)
{
    if (w == 0.f) return 0.f;
    float p = expf(logit - max) * inv_sum;
    return w * (p - (is_label ? 1.f - eps : 0.f) - eps / (float)k);
}

/* ---- L1 / MSE ----------------------------------------------------------------
 * d = pred - target.  The loss is the mean of the terms (summed in double);
 * the gradient of one element is sign(d) / count (0 where equal) for L1 and
 * 2 d / count for MSE, inv = 1 / count. */
IABN_HD double iabn_reg_term(double d, int mse)
{
    return mse ? d * d : fabs(d);
}

IABN_HD float iabn_reg_grad(float d, float inv, int mse)
{
    return mse ? 2.f * d * inv : (d > 0.f ? inv : d < 0.f ? -inv : 0.f);
}

/* Order-preserving map of a float to an unsigned key (larger float, larger
 * key); the bootstrapping selection ranks per-pixel losses on it. */
IABN_HD uint32_t iabn_float_key(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

#ifdef __cplusplus
}
#endif
#endif
