/* device.h: opening a device by name (cpu | cuda | cuda:N): its backend
 * for stores, the memory it offers, pinned host memory for batch buffers,
 * and the backend the planner uses for reports. */
#ifndef IABN_TENSOR_DEVICE_H
#define IABN_TENSOR_DEVICE_H

#include <stddef.h>

#include "tensor/backend.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#ifdef __cplusplus
}
#endif
#endif

struct iabn_cuda_api;

typedef struct iabn_device {
    const iabn_backend *be;
    void *cuda;               /* iabn_cuda_ctx, NULL on the CPU */
    const struct iabn_cuda_api *cuda_api; /* the loaded CUDA backend's entry points */
    char name[160];           /* "cpu" or "cuda:0 NVIDIA H100 ... " */
} iabn_device;

/* Whether backends of this kind can be opened here: 1, or 0 with the reason
 * in why (may be NULL): the build has no such backend, its library
 * (libiabn_cuda.so, or $IABN_CUDA_MODULE) cannot be loaded, or the machine
 * has no usable device ("no CUDA device: ..." with the runtime's words).
 * The one query programs use instead of build flags.  The CUDA libraries
 * are loaded by this query, by iabn_device_open and by
 * iabn_device_planning_backend for a CUDA spec, and by nothing else. */
int iabn_backend_available(iabn_device_kind kind, iabn_err *why);
/* The kinds' names, for listings ("cpu", "cuda"); NULL past the last. */
const char *iabn_device_kind_name(int kind);

/* Parses "cpu", "cuda" or "cuda:N" into *kind and *index; -1 when malformed. */
int iabn_device_parse(const char *spec, iabn_device_kind *kind, int *index);
/* Opens the device (NULL spec: cpu).  A CUDA spec in a build without CUDA,
 * or without a usable GPU, is an error that says which. */
int iabn_device_open(const char *spec, iabn_device *d, iabn_err *e);
/* iabn_device_open for one of `ranks` processes of a job: a bare "cuda"
 * under several ranks is the rank's own GPU, cuda:<local_rank> (one process
 * per GPU on each node); any other spec is opened as given. */
int iabn_device_open_rank(const char *spec, int local_rank, int ranks, iabn_device *d,
                          iabn_err *e);
void iabn_device_close(iabn_device *d);
/* Bytes a step may use: free device memory on a GPU; the machine's
 * available memory on the CPU. */
size_t iabn_device_available(const iabn_device *d);
/* Host memory the machine has available now (Linux MemAvailable; 1 TiB
 * when unreadable): the default limit of the pinned pool of offloaded
 * activations. */
size_t iabn_host_available(void);
/* Device memory in use (total - free, as the driver counts it: every
 * process and the context itself); 0 on the CPU.  Its growth across a run is
 * what the run allocated, to set beside the plan. */
size_t iabn_device_used(const iabn_device *d);
/* Whether the GPU's math may use TF32 (IABN_TF32=1 when it was opened). */
int iabn_device_tf32(const iabn_device *d);
/* The second buffers of the staged inputs (iabn_exec_stage) that a backend
 * allocates: the CUDA backend and its planning twin copy on a copy stream;
 * the CPU stages in place. */
size_t iabn_device_staging_bytes(const iabn_backend *be, size_t input_bytes);
/* Pinned host memory on a GPU (copies from it to the device run
 * asynchronously), in the data loader's allocator signature with `user` set
 * to *user_out; on the CPU all three are set to NULL (plain host memory). */
void iabn_device_host_allocator(const iabn_device *d, void *(**alloc)(size_t bytes, void *user),
                                void (**release)(void *ptr, void *user), void **user_out);
/* The backend to plan with for a spec, with no device needed (iabn mem). */
int iabn_device_planning_backend(const char *spec, const iabn_backend **be, iabn_err *e);

#ifdef __cplusplus
}
#endif
#endif
