/* math/hd.h: the IABN_HD convention of the per-element math headers
 * (src/tensor/math/<family>.h), shared by the CPU and the CUDA kernels.
 *
 * Everything in those headers is `static inline` and, under nvcc,
 * `__host__ __device__`, so the CPU tests exercise the very formulas the GPU
 * runs.  C/C++-clean: no designated initialisers, no compound literals.
 * Float bit casts live here because several families use them.
 */
#ifndef IABN_MATH_HD_H
#define IABN_MATH_HD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define IABN_HD __host__ __device__ __forceinline__
#else
#define IABN_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

IABN_HD float iabn_bits_to_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

IABN_HD uint32_t iabn_float_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

#ifdef __cplusplus
}
#endif
#endif
