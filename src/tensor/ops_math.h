/* ops_math.h: per-element formulas of the op kernels (cpu_ops.h) that the CUDA
 * kernels share: the counter-based RNG mixer, the Dropout2d keep decision,
 * PyTorch's bilinear source index (align_corners = false), the softmax
 * cross-entropy gradient per logit and the SGD update per element.
 *
 * Same conventions as iabn_math.h: IABN_HD functions only, C/C++-clean, so
 * that the CPU tests exercise the bits the GPU computes.
 */
#ifndef IABN_OPS_MATH_H
#define IABN_OPS_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tensor/iabn_math.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- RNG ------------------------------------------------------------------
 * SplitMix64 finaliser over a mix of the three coordinates: a well-tested
 * bijective mixer, cheap enough per element, identical on every backend.
 * iabn_rng_u64 / iabn_rng_uniform (common.c) are these functions. */
IABN_HD uint64_t iabn_rng_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

IABN_HD uint64_t iabn_rng_bits(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint64_t z = iabn_rng_mix64(seed + 0x9e3779b97f4a7c15ULL);
    z = iabn_rng_mix64(z ^ (stream * 0xd1b54a32d192ed03ULL + 0x632be59bd9b4e019ULL));
    return iabn_rng_mix64(z ^ (index + 0x9e3779b97f4a7c15ULL * (stream + 1)));
}

/* 24 bits so that every value is exact in float and the result stays < 1. */
IABN_HD float iabn_rng_unit(uint64_t bits)
{
    return (float)(bits >> 40) * (1.0f / 16777216.0f);
}

/* ---- Dropout2d -------------------------------------------------------------
 * Map `index` (= n*C + c) is kept when its uniform draw is >= p, so p = 0
 * keeps everything and p = 1 drops everything. */
IABN_HD int iabn_dropout_keep(uint64_t seed, uint64_t stream, uint64_t index, float p)
{
    return iabn_rng_unit(iabn_rng_bits(seed, stream, index)) >= p;
}

/* 1/(1-p), but 0 for p >= 1: every map is dropped then, and 0 * inf would
 * turn the zeros into NaN. */
IABN_HD float iabn_dropout_scale(float p)
{
    return p < 1.f ? 1.f / (1.f - p) : 0.f;
}

/* ---- bilinear, align_corners = false ---------------------------------------
 * PyTorch's CPU formula (area_pixel_compute_scale / _source_index): the scale
 * in/out is a float, but the source coordinate scale*(dst+0.5)-0.5 is
 * evaluated in double (dst + 0.5 is a double expression there) and the
 * weight is taken from it before rounding to float.  Computing it in float
 * instead moves weights by an ulp of the coordinate (~1e-6 at 16), which
 * shows at 1e-5 against F.interpolate.  Negative coordinates clamp to 0
 * (border pixels copy the edge); the second tap repeats the first on the last
 * row/column.  The cost is per output row/column, not per element. */
IABN_HD float iabn_bilinear_scale(int in, int out)
{
    return (float)in / (float)out;
}

IABN_HD void iabn_bilinear_src(float scale, int in, int dst, int *i0, int *i1, float *l0,
                               float *l1)
{
    double src = (double)scale * ((double)dst + 0.5) - 0.5;
    if (src < 0.0) src = 0.0;
    int i = (int)src;
    if (i > in - 1) i = in - 1;
    double lambda = src - (double)i;
    if (lambda > 1.0) lambda = 1.0;
    *i0 = i;
    *i1 = i + (i < in - 1 ? 1 : 0);
    *l1 = (float)lambda;
    *l0 = 1.f - (float)lambda;
}

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

/* Order-preserving map of a float to an unsigned key (larger float, larger
 * key); the bootstrapping selection ranks per-pixel losses on it. */
IABN_HD uint32_t iabn_float_key(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* ---- SGD ---------------------------------------------------------------------
 * PyTorch's torch.optim.SGD (dampening 0) for one element:
 *   g = grad + wd*w; buf = first ? g : momentum*buf + g;
 *   step = nesterov ? g + momentum*buf : buf; w -= lr*step.
 * momentum == 0 leaves buf untouched (it may point anywhere then). */
IABN_HD void iabn_sgd_elem(float lr, float momentum, float wd, int nesterov, int first,
                           float *w, float grad, float *buf)
{
    float g = grad + wd * *w;
    float step = g;
    if (momentum != 0.f) {
        float b = first ? g : momentum * *buf + g;
        *buf = b;
        step = nesterov ? g + momentum * b : b;
    }
    *w = *w - lr * step;
}

#ifdef __cplusplus
}
#endif
#endif
