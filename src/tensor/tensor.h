/* tensor.h: the interface of src/tensor.
 *
 * What every other directory builds on: the error type every call reports
 * through (the library never exits), dtypes, the activation descriptor, the
 * counter-based RNG, and the CPU primitive kernels (raw pointers, NCHW
 * float32) that the layers call.  Kernel families live in their own headers,
 * included here so that this file stays the one interface of the directory.
 *
 * Usage:
 *     iabn_err e = {0};
 *     if (iabn_something(..., &e)) fprintf(stderr, "%s\n", e.msg);
 */
#ifndef IABN_TENSOR_H
#define IABN_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/math/act.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors -------------------------------------------------------------- */

enum {
    IABN_OK = 0,
    IABN_EINVAL = -1,   /* bad argument, shape, config value            */
    IABN_ENOMEM = -2,   /* allocation failed or a plan does not fit       */
    IABN_EIO = -3,      /* file missing, unreadable, truncated            */
    IABN_EFORMAT = -4,  /* file present but its contents are wrong        */
    IABN_EDEVICE = -5,  /* CUDA / cuDNN / cuBLAS / NCCL failure           */
    IABN_ENUM = -6,     /* NaN or Inf met where a number was needed       */
    IABN_EINTR = -7     /* stopped on request (signal)                    */
};

typedef struct iabn_err {
    int code;
    char msg[1024];
} iabn_err;

/* Records code and a printf-style message in e (which may be NULL) and returns
 * code, so that `return iabn_err_set(e, IABN_EINVAL, "...")` reads naturally. */
int iabn_err_set(iabn_err *e, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Prepends context ("while loading X: ") to an existing message. */
int iabn_err_prefix(iabn_err *e, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
const char *iabn_err_name(int code);

/* ---- dtypes -------------------------------------------------------------- */

typedef enum iabn_dtype {
    IABN_F32 = 0,
    IABN_I32 = 1,
    IABN_U8 = 2,
    IABN_I64 = 3,
    IABN_BF16 = 4  /* host copies of offloaded activations (math/bf16.h) */
} iabn_dtype;

size_t iabn_dtype_size(iabn_dtype dt);
const char *iabn_dtype_name(iabn_dtype dt);

/* ---- memory layouts of an activation ------------------------------------ */

/* An (N, C, H, W) activation is stored NCHW, or with its channels in blocks
 * of 16 or 8 (nChw16c: [N][C/16][H][W][16], oneDNN's name; nChw8c likewise),
 * which the CPU's oneDNN convolutions read and write without reorders: 16 on
 * CPUs with AVX-512, 8 on AVX2 ones (one vector register of floats).  A
 * blocked layout needs C to be a multiple of its block, so a tensor has the
 * same size in every layout.  One row per layout: enum, name, channels per
 * block. */
#define IABN_LAYOUTS(X)                   \
    X(IABN_LAYOUT_NCHW, "nchw", 1)        \
    X(IABN_LAYOUT_NCHW16C, "nChw16c", 16) \
    X(IABN_LAYOUT_NCHW8C, "nChw8c", 8)

typedef enum iabn_layout {
#define IABN_LAYOUT_ENUM(id, name, block) id,
    IABN_LAYOUTS(IABN_LAYOUT_ENUM)
#undef IABN_LAYOUT_ENUM
    IABN_LAYOUT_COUNT
} iabn_layout;

const char *iabn_layout_name(iabn_layout l);
/* Channels per block: 1 for NCHW, 16 for nChw16c, 8 for nChw8c; 0 for a value outside the list. */
int iabn_layout_block(iabn_layout l);

/* ---- activation ---------------------------------------------------------- */

/* iabn_act_kind / iabn_act and the list of activations (IABN_ACTIVATIONS:
 * names, default parameters, invertibility) are in math/act.h, shared with
 * CUDA. */

const char *iabn_act_name(iabn_act_kind k);
/* Parses an activation name or alias (case-insensitive); an unknown one is
 * IABN_EINVAL with a message naming the valid ones (e may be NULL). */
int iabn_act_parse(const char *s, iabn_act_kind *out, iabn_err *e);
/* 0, or IABN_EINVAL naming the valid activations when act.kind is not one. */
int iabn_act_check(iabn_act act, iabn_err *e);
/* Whether s equals name or one of the comma-separated aliases, ignoring
 * case: the parsers of the closed lists (activations, BN modes) share it. */
int iabn_name_matches(const char *s, const char *name, const char *aliases);

/* ---- RNG ----------------------------------------------------------------- */

/* Counter-based: the value for (seed, stream, index) is a pure function, so a
 * kernel on any backend, any thread count, any aliasing, draws the same bits. */
typedef struct iabn_rng {
    uint64_t seed;
    uint64_t counter; /* advanced by users that draw a block of values */
} iabn_rng;

uint64_t iabn_rng_u64(uint64_t seed, uint64_t stream, uint64_t index);
/* uniform in [0, 1) */
float iabn_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
/* standard normal (Box-Muller on two uniforms) */
float iabn_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);

/* ---- memory ---------------------------------------------------------------- */

/* Aligned host allocation (64 B); NULL on failure, never aborts. */
void *iabn_aligned_alloc(size_t align, size_t bytes);
void iabn_aligned_free(void *p);

/* Threads the CPU kernels use (OpenMP's max threads, 1 without OpenMP). */
int iabn_num_threads(void);
void iabn_set_num_threads(int n);

/* Seconds on the monotonic clock (profiles, progress, benchmarks). */
double iabn_now(void);

/* ---- BLAS (cpu/blas.c) ------------------------------------------------------ */

/* OpenBLAS's name for the kernels it runs ("SkylakeX", "Cooperlake",
 * "Haswell", ...): chosen when it is loaded, from the CPU or from the
 * OPENBLAS_CORETYPE environment variable (docs/CPU.md). */
const char *iabn_blas_core(void);

/* Which library computes the native paths' GEMMs (im2col and per-tap convs,
 * linear layers): oneDNN's sgemm where the build has oneDNN and OpenBLAS
 * runs narrower kernels than the CPU has (AVX2 ones on an AVX-512 CPU, as
 * OPENBLAS_CORETYPE=Haswell asks), else OpenBLAS (docs/CPU.md). */
typedef enum iabn_gemm_engine_kind { IABN_GEMM_OPENBLAS = 0, IABN_GEMM_ONEDNN } iabn_gemm_engine_kind;
iabn_gemm_engine_kind iabn_gemm_engine(void);
const char *iabn_gemm_engine_name(iabn_gemm_engine_kind k);

#ifdef __cplusplus
}
#endif

#include "tensor/cpu/conv.h"
#include "tensor/cpu/norm_act.h"
#include "tensor/cpu/ops.h"
#include "tensor/safetensors.h"

#endif
