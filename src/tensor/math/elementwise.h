/* math/elementwise.h: per-element formulas of the elementwise kernels
 * (cpu/elementwise.c, cuda/elementwise.cu): the counter-based RNG mixer and
 * the Dropout2d keep decision.  IABN_HD conventions: math/hd.h.
 */
#ifndef IABN_MATH_ELEMENTWISE_H
#define IABN_MATH_ELEMENTWISE_H

#include "tensor/math/hd.h"

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

#ifdef __cplusplus
}
#endif
#endif
