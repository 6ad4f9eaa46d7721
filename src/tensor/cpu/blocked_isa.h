/* cpu/blocked_isa.h: what a file of the blocked grouped kernels
 * (conv_blocked.c, conv_blocked_rot.c, conv_rows.c) is built as.  Each
 * builds three times: BLK lanes (IABN_BLOCKED_LANES, 16 unless the build
 * says 8), its vectors from cpu/simd.h at that width, and ISA(name) the
 * suffix of the build's entry points: _8c (8 lanes: AVX2 in release
 * builds, else portable), _avx512 (16 lanes with IABN_DIRECT_AVX512) or
 * _portable (16 lanes, the main library).  Included once, after
 * conv_impl.h. */
#ifndef IABN_CPU_BLOCKED_ISA_H
#define IABN_CPU_BLOCKED_ISA_H

#ifndef IABN_BLOCKED_LANES
#define IABN_BLOCKED_LANES 16
#endif
#define BLK IABN_BLOCKED_LANES

#define SIMD_LANES BLK
#include "tensor/cpu/simd.h"

#if BLK == 8
#define ISA(name) name##_8c
#elif defined(IABN_DIRECT_AVX512)
#define ISA(name) name##_avx512
#else
#define ISA(name) name##_portable
#endif

#endif
