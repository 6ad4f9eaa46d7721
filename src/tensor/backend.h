/* backend.h: the interface of a device backend (src/tensor/cpu/,
 * src/tensor/cuda/): what a store, an executor and an optimizer need of the
 * device their tensors live on.  A backend is a constant vtable plus an
 * opaque context; the graph layer (src/graph) sees devices only through it.
 */
#ifndef IABN_TENSOR_BACKEND_H
#define IABN_TENSOR_BACKEND_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum iabn_device_kind { IABN_DEV_CPU = 0, IABN_DEV_CUDA = 1 } iabn_device_kind;

/* Memory operations of a device; kernels are dispatched per op (iabn_op_def). */
typedef struct iabn_backend {
    iabn_device_kind kind;
    const char *name;
    size_t align;                                   /* arena alignment */
    void *ctx;                                      /* cuda: iabn_cuda_ctx */
    void *(*alloc)(void *ctx, size_t bytes);        /* NULL on failure */
    void (*free)(void *ctx, void *p);
    int (*h2d)(void *ctx, void *dst, const void *src, size_t bytes);
    int (*d2h)(void *ctx, void *dst, const void *src, size_t bytes);
    int (*fill)(void *ctx, void *dst, int byte, size_t bytes);
    int (*sync)(void *ctx);
    /* Overlapped input copies (optional: NULL on the CPU, where copies are
     * plain memcpy).  Events order the compute stream and the copy stream:
     * h2d_async queues a copy on the copy stream that starts once `after`
     * (an event of the compute stream, or NULL; one never recorded counts as
     * passed, as CUDA's do) has passed, and
     * records `done` when it has landed; wait makes the compute stream wait
     * for an event; record records one on the compute stream. */
    void *(*event_new)(void *ctx);
    void (*event_free)(void *ctx, void *ev);
    int (*record)(void *ctx, void *ev);
    int (*wait)(void *ctx, void *ev);
    int (*h2d_async)(void *ctx, void *dst, const void *src, size_t bytes, void *after, void *done);
} iabn_backend;

/* The CPU backend: a constant vtable, no state. */
const iabn_backend *iabn_backend_cpu(void);

#ifdef __cplusplus
}
#endif
#endif
