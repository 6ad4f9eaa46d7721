/* cuda/internal.h: what the .cu files of the library share (C++ only, never
 * installed): the context's layout, the checking macros and launch helpers.
 *
 * Checking: every runtime, cuBLAS and cuDNN call goes through one of the
 * IABN_*_CHECK macros, which turn a failure into IABN_EDEVICE with the call's
 * text, the library's message and file:line, and return it from the calling
 * function (which must take `iabn_err *e` and return int).  The executor
 * prefixes the node's name.  IABN_LAUNCHED checks a kernel launch
 * (cudaGetLastError) right after it.  Errors of earlier asynchronous work
 * surface at the next checked call; IABN_CUDA_SYNC=1 synchronises after every
 * node (iabn_cuda_node_done) so that they surface at the node that caused them.
 */
#ifndef IABN_CUDA_INTERNAL_H
#define IABN_CUDA_INTERNAL_H

#ifndef __CUDACC__
#error "cuda/internal.h is for .cu files"
#endif

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/cuda/backend.h"

/* One cached cuDNN convolution setup (descriptors and chosen algorithms),
 * keyed by geometry, pass and workspace budget. */
struct iabn_cuda_conv_plan;

/* The partial sums one sumsq round trip brings back (256 KiB): 512 arrays
 * of up to 64 blocks' partials, more than ResNeXt-101's 300-odd parameters. */
enum { IABN_CUDA_SUMS = 32768 };

struct iabn_cuda_ctx {
    int device;
    cudaStream_t stream;        /* compute: kernels, cuDNN, cuBLAS, copies */
    cudaStream_t copy_stream;   /* offload / prefetch traffic              */
    cudaEvent_t ev_copy;        /* orders the copy stream after compute    */
    cublasHandle_t cublas;
    cudnnHandle_t cudnn;
    int sync_each;              /* IABN_CUDA_SYNC=1                        */
    int tf32;                   /* IABN_TF32=1                             */
    int deterministic;          /* IABN_CUDNN_DETERMINISTIC=1              */
    int timed;                  /* cuDNN's algorithms timed (IABN_CUDNN_FIND) */
    void *flag_dev;             /* 64 bytes of device scratch for flags    */
    void *flag_host;            /* 64 pinned bytes to read them back       */
    double *sums_dev;           /* IABN_CUDA_SUMS doubles: sumsq's partials */
    double *sums_host;          /* pinned, the same size, to read them back */
    struct iabn_cuda_conv_plan *plans;
    int nplans, cap_plans;
    iabn_backend be;            /* what iabn_cuda_backend() returns        */
    iabn_err last;              /* message of the last failed vtable call  */
};

/* Records a failed call in e and returns IABN_EDEVICE. */
int iabn_cuda_fail(iabn_err *e, const char *call, const char *what, const char *file,
                   int line);

#define IABN_CUDA_CHECK(e, call)                                                         \
    do {                                                                                 \
        cudaError_t st_ = (call);                                                        \
        if (st_ != cudaSuccess)                                                          \
            return iabn_cuda_fail((e), #call, cudaGetErrorString(st_), __FILE__, __LINE__); \
    } while (0)

#define IABN_CUBLAS_CHECK(e, call)                                                       \
    do {                                                                                 \
        cublasStatus_t st_ = (call);                                                     \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                \
            return iabn_cuda_fail((e), #call, cublasGetStatusString(st_), __FILE__,       \
                                  __LINE__);                                             \
    } while (0)

#define IABN_CUDNN_CHECK(e, call)                                                        \
    do {                                                                                 \
        cudnnStatus_t st_ = (call);                                                      \
        if (st_ != CUDNN_STATUS_SUCCESS)                                                 \
            return iabn_cuda_fail((e), #call, cudnnGetErrorString(st_), __FILE__, __LINE__); \
    } while (0)

/* After every <<<>>>: launch-configuration errors show here, at once. */
#define IABN_LAUNCHED(e, what)                                                           \
    do {                                                                                 \
        cudaError_t st_ = cudaGetLastError();                                            \
        if (st_ != cudaSuccess)                                                          \
            return iabn_cuda_fail((e), "launch of " what, cudaGetErrorString(st_),        \
                                  __FILE__, __LINE__);                                   \
    } while (0)

/* The CUDA kernels read and write NCHW only (backend.h): any other layout
 * is refused, by name. */
static inline int iabn_cuda_nchw_only(iabn_layout layout, iabn_err *e)
{
    if (layout == IABN_LAYOUT_NCHW) return 0;
    return iabn_err_set(e, IABN_EINVAL, "%s layout: not supported on the CUDA backend",
                        iabn_layout_name(layout));
}
#define IABN_CUDA_NCHW_ONLY(layout)                                                      \
    do {                                                                                 \
        int rc_ = iabn_cuda_nchw_only((layout), e);                                      \
        if (rc_) return rc_;                                                             \
    } while (0)

/* Threads per block of the elementwise and reduction kernels. */
enum { IABN_CUDA_BLOCK = 256, IABN_CUDA_RED_BLOCK = 512 };

/* Blocks for a grid-stride loop over `count` items: enough to fill the GPU,
 * capped so that the grid stays within the x-dimension limit. */
static inline unsigned iabn_cuda_grid(size_t count, unsigned block)
{
    size_t b = (count + block - 1) / block;
    if (b < 1) b = 1;
    if (b > 65535u * 32u) b = 65535u * 32u;
    return (unsigned)b;
}

/* A grid-stride loop over `count` items, and the launch of such a kernel on
 * the context's compute stream from a launcher taking (ctx, ..., e). */
#define IABN_CUDA_GRID_LOOP(i, count)                                                              \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (count);          \
         i += (size_t)gridDim.x * blockDim.x)

#define IABN_CUDA_LAUNCH(kernel, count, ...)                                                       \
    do {                                                                                 \
        if ((count) == 0) return 0;                                                      \
        kernel<<<iabn_cuda_grid((count), IABN_CUDA_BLOCK), IABN_CUDA_BLOCK, 0,            \
                 ctx->stream>>>(__VA_ARGS__);                                            \
        IABN_LAUNCHED(e, #kernel);                                                       \
        return 0;                                                                        \
    } while (0)

/* One warp per (n, c) plane, lanes strided (coalesced), sums in double like
 * the CPU, added in a fixed shuffle tree: deterministic.  MEAN: global
 * average pool; otherwise the plain sum (iabn_sum_hw). */
template <bool MEAN>
__global__ void iabn_cuda_plane_sum_k(size_t planes, int hw, const float *x, float *y)
{
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    int lane = (int)(threadIdx.x % 32);
    size_t nwarps = (size_t)gridDim.x * blockDim.x / 32;
    for (size_t pl = warp; pl < planes; pl += nwarps) {
        const float *xp = x + pl * (size_t)hw;
        double s = 0;
        for (int i = lane; i < hw; i += 32) s += xp[i];
        for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffffu, s, o);
        if (lane == 0) y[pl] = MEAN ? (float)(s / hw) : (float)s;
    }
}

#endif
