/* math/bf16.h: float32 <-> bfloat16 (the upper 16 bits of a float32), the
 * format of offloaded activations' host copies when they are kept at half
 * size (docs/OFFLOAD.md), shared by the CPU, the simulated device's copy
 * thread and the CUDA conversion kernels (IABN_HD, math/hd.h).
 *
 * To bfloat16 rounds to nearest, ties to even, as a float32 rounds; a NaN
 * stays a NaN (quieted, sign kept) and never rounds into an infinity;
 * values beyond the largest bfloat16 become infinities, as float32 overflow
 * does.  Back to float32 is exact. */
#ifndef IABN_MATH_BF16_H
#define IABN_MATH_BF16_H

#include "tensor/math/hd.h"

#ifdef __cplusplus
extern "C" {
#endif

IABN_HD uint16_t iabn_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

IABN_HD float iabn_bf16_to_f32(uint16_t h)
{
    return iabn_bits_to_float((uint32_t)h << 16);
}

#ifdef __cplusplus
}
#endif
#endif
