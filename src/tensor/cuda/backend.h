/* cuda/backend.h: the CUDA device context and its iabn_backend (C-callable).
 *
 * Everything the GPU side needs lives in one iabn_cuda_ctx: the device id,
 * a compute stream and a copy stream, cuBLAS and cuDNN handles bound to the
 * compute stream, the cuDNN algorithm cache, a small device buffer for
 * flags, and the run-time switches read once from the environment:
 *   IABN_CUDA_SYNC=1            synchronise after every node (faults then
 *                               name the node that caused them)
 *   IABN_TF32=1                 allow TF32 in cuDNN / cuBLAS (off: fp32 FMA)
 *   IABN_CUDNN_DETERMINISTIC=1  only deterministic cuDNN algorithms, chosen
 *                               by the heuristic alone (reproducible choice)
 *   IABN_CUDNN_FIND=0           the heuristic's algorithm, not the fastest
 *                               of cuDNN's timed trials (cuda/conv.cu)
 * There is no global state: two contexts on two devices are independent,
 * but kernels launch on the calling thread's current device, which
 * iabn_cuda_ctx_new() sets: a thread that drives two devices must call
 * cudaSetDevice(iabn_cuda_device(ctx)) before it runs a graph of either.
 *
 *     iabn_cuda_ctx *cu;
 *     if (iabn_cuda_ctx_new(0, &cu, &e)) ... e.msg says why (no device, ...);
 *     iabn_store *s = iabn_store_new(iabn_cuda_backend(cu), &e);
 *     ... graphs, plans, executors on s ...
 *     iabn_cuda_ctx_free(cu);   // after everything allocated through it
 *
 * This code is its own library, libiabn_cuda.so, which libiabn loads on the
 * first use of a CUDA device (src/tensor/device.c) through the one symbol
 * iabn_cuda_api_get: libiabn itself never links cudart, cuBLAS or cuDNN.
 * A program may also link libiabn_cuda and call these functions directly
 * (tests/test_cuda.c does).  The header itself needs no CUDA headers.
 */
#ifndef IABN_CUDA_BACKEND_H
#define IABN_CUDA_BACKEND_H

#include <stddef.h>

#include "tensor/backend.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iabn_cuda_ctx iabn_cuda_ctx;

/* Opens `device`.  No driver, no device or a bad id: IABN_EDEVICE with the
 * runtime's message ("no CUDA device: ..."); *out is then NULL. */
int iabn_cuda_ctx_new(int device, iabn_cuda_ctx **out, iabn_err *e);
/* How many devices the runtime sees; 0 with IABN_EDEVICE and the runtime's
 * reason ("no CUDA device: ...") when none can be used. */
int iabn_cuda_device_count(int *count, iabn_err *e);
void iabn_cuda_ctx_free(iabn_cuda_ctx *ctx);

/* The backend vtable (it lives inside ctx: valid until iabn_cuda_ctx_free).
 * Its calls report failure by return value only; the message of the last
 * failure is kept in the context (iabn_cuda_last_error). */
const iabn_backend *iabn_cuda_backend(iabn_cuda_ctx *ctx);
const iabn_err *iabn_cuda_last_error(const iabn_cuda_ctx *ctx);
int iabn_cuda_device(const iabn_cuda_ctx *ctx);

/* Pinned (page-locked) host memory for the data loader's batch buffers, in
 * the loader's allocator signature; ctx is the iabn_cuda_ctx.  NULL on
 * failure. */
void *iabn_cuda_host_alloc(size_t bytes, void *ctx);
void iabn_cuda_host_free(void *p, void *ctx);

/* Waits for all work queued on the context's streams; returns 0 or the
 * asynchronous error it reveals. */
int iabn_cuda_sync(iabn_cuda_ctx *ctx, iabn_err *e);

/* Free and total device memory (cudaMemGetInfo): the trainer's budget. */
int iabn_cuda_mem_info(iabn_cuda_ctx *ctx, size_t *free_bytes, size_t *total_bytes, iabn_err *e);
/* Whether TF32 is allowed (IABN_TF32=1 when the context was made). */
int iabn_cuda_tf32(const iabn_cuda_ctx *ctx);
/* "NVIDIA H100 80GB HBM3 (sm_90, 81559 MiB)" */
int iabn_cuda_device_name(iabn_cuda_ctx *ctx, char *buf, size_t cap, iabn_err *e);

/* A backend of kind cuda that allocates nothing and needs no device: for
 * planning on a shapes-only store (iabn_store_new_virtual), so that `iabn
 * mem --device cuda` reports the CUDA plan (cuDNN workspaces, 256-byte
 * alignment) on a machine without a GPU. */
const iabn_backend *iabn_cuda_backend_planning(void);

/* ---- the entry points libiabn loads ------------------------------------- */

#define IABN_CUDA_API_VERSION 2

typedef struct iabn_cuda_api {
    int version; /* IABN_CUDA_API_VERSION of the module */
    /* sizeof(iabn_backend) and sizeof(iabn_kernels) as the module was
     * compiled: a module built against an older backend.h (an incremental
     * build whose .cu objects missed a header change) is refused by these
     * rather than called through a shifted table */
    size_t backend_bytes, kernels_bytes;
    int (*device_count)(int *count, iabn_err *e);
    int (*ctx_new)(int device, iabn_cuda_ctx **out, iabn_err *e);
    void (*ctx_free)(iabn_cuda_ctx *ctx);
    const iabn_backend *(*backend)(iabn_cuda_ctx *ctx);
    int (*device_name)(iabn_cuda_ctx *ctx, char *buf, size_t cap, iabn_err *e);
    int (*mem_info)(iabn_cuda_ctx *ctx, size_t *free_bytes, size_t *total_bytes, iabn_err *e);
    int (*tf32)(const iabn_cuda_ctx *ctx);
    void *(*host_alloc)(size_t bytes, void *ctx);
    void (*host_free)(void *p, void *ctx);
    const iabn_backend *(*backend_planning)(void);
} iabn_cuda_api;

/* The module's table (constant). */
const iabn_cuda_api *iabn_cuda_api_get(void);

#ifdef __cplusplus
}
#endif
#endif
