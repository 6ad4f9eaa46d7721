/* cuda/backend.cu: the CUDA context (device, streams, library handles) and
 * the backend vtable the store and the executor allocate and copy through.
 *
 * The vtable's calls return 0 / -1 (graph.h fixes that shape); their error
 * text goes into ctx->last so that a caller that sees -1 can still say why.
 * All copies run on the compute stream, so they are ordered after the
 * kernels that produce their source without any event.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/cuda/internal.h"
#include "tensor/cuda/kernels.h"
#include "tensor/math/bf16.h"

int iabn_cuda_fail(iabn_err *e, const char *call, const char *what, const char *file, int line)
{
    return iabn_err_set(e, IABN_EDEVICE, "%s failed: %s (%s:%d)", call, what ? what : "?", file,
                        line);
}

static int env_on(const char *name)
{
    const char *v = getenv(name);
    return v && v[0] && strcmp(v, "0") != 0;
}

/* ---- vtable ------------------------------------------------------------------ */

static void *be_alloc(void *c, size_t bytes)
{
    iabn_cuda_ctx *ctx = (iabn_cuda_ctx *)c;
    void *p = NULL;
    /* cudaMalloc(0) may return NULL, which callers read as failure */
    cudaError_t st = cudaMalloc(&p, bytes ? bytes : 1);
    if (st != cudaSuccess) {
        iabn_err_set(&ctx->last, IABN_ENOMEM, "cudaMalloc(%zu bytes) failed: %s", bytes,
                     cudaGetErrorString(st));
        (void)cudaGetLastError(); /* an allocation failure is not sticky; clear it */
        return NULL;
    }
    return p;
}

static void be_free(void *c, void *p)
{
    (void)c;
    /* cudaFree synchronises the device: no kernel can still be using p */
    if (p) (void)cudaFree(p);
}

/* Returns -1 with ctx->last set when `st` failed. */
static int be_status(iabn_cuda_ctx *ctx, cudaError_t st, const char *call)
{
    if (st == cudaSuccess) return 0;
    iabn_cuda_fail(&ctx->last, call, cudaGetErrorString(st), __FILE__, __LINE__);
    return -1;
}

/* Synchronous from the caller's point of view: the host buffer may be reused
 * or freed as soon as this returns, pinned or not (an async copy from pinned
 * memory would otherwise still be reading it). */
static int be_h2d(void *c, void *dst, const void *src, size_t bytes)
{
    iabn_cuda_ctx *ctx = (iabn_cuda_ctx *)c;
    if (!bytes) return 0;
    if (be_status(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream),
                  "cudaMemcpyAsync(h2d)"))
        return -1;
    return be_status(ctx, cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize(h2d)");
}

static int be_d2h(void *c, void *dst, const void *src, size_t bytes)
{
    iabn_cuda_ctx *ctx = (iabn_cuda_ctx *)c;
    if (!bytes) return 0;
    if (be_status(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream),
                  "cudaMemcpyAsync(d2h)"))
        return -1;
    return be_status(ctx, cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize(d2h)");
}

static int be_fill(void *c, void *dst, int byte, size_t bytes)
{
    iabn_cuda_ctx *ctx = (iabn_cuda_ctx *)c;
    if (!bytes) return 0;
    return be_status(ctx, cudaMemsetAsync(dst, byte, bytes, ctx->stream), "cudaMemsetAsync");
}

static int be_sync(void *c)
{
    iabn_cuda_ctx *ctx = (iabn_cuda_ctx *)c;
    if (be_status(ctx, cudaStreamSynchronize(ctx->copy_stream), "cudaStreamSynchronize(copy)"))
        return -1;
    return be_status(ctx, cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize");
}

/* Events are created without timing (cheaper to record and wait on). */
static void *be_event_new(void *c)
{
    iabn_cuda_ctx *ctx = (iabn_cuda_ctx *)c;
    cudaEvent_t ev = NULL;
    if (be_status(ctx, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                  "cudaEventCreateWithFlags"))
        return NULL;
    return (void *)ev;
}

static void be_event_free(void *c, void *ev)
{
    (void)c;
    if (ev) (void)cudaEventDestroy((cudaEvent_t)ev);
}

static int be_record(void *c, void *ev)
{
    iabn_cuda_ctx *ctx = (iabn_cuda_ctx *)c;
    return be_status(ctx, cudaEventRecord((cudaEvent_t)ev, ctx->stream), "cudaEventRecord");
}

static int be_wait(void *c, void *ev)
{
    iabn_cuda_ctx *ctx = (iabn_cuda_ctx *)c;
    return be_status(ctx, cudaStreamWaitEvent(ctx->stream, (cudaEvent_t)ev, 0),
                     "cudaStreamWaitEvent(compute)");
}

/* The copy stream waits for `after` (the compute stream's release of dst),
 * copies, and records `done` for the compute stream to wait on.  From pinned
 * memory the copy runs while the compute stream works; from pageable memory
 * CUDA stages it through its own buffer and the call returns later. */
static int be_h2d_async(void *c, void *dst, const void *src, size_t bytes, void *after,
                        void *done)
{
    iabn_cuda_ctx *ctx = (iabn_cuda_ctx *)c;
    if (after && be_status(ctx, cudaStreamWaitEvent(ctx->copy_stream, (cudaEvent_t)after, 0),
                           "cudaStreamWaitEvent(copy)"))
        return -1;
    if (bytes && be_status(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                                ctx->copy_stream),
                           "cudaMemcpyAsync(h2d, copy stream)"))
        return -1;
    return be_status(ctx, cudaEventRecord((cudaEvent_t)done, ctx->copy_stream),
                     "cudaEventRecord(copy)");
}

/* Offloaded activations: the mirror copy on the copy stream, and the pinned
 * host pool they go to (allocated once per executor, at the planned size). */
static int be_d2h_async(void *c, void *dst, const void *src, size_t bytes, void *after,
                        void *done)
{
    iabn_cuda_ctx *ctx = (iabn_cuda_ctx *)c;
    if (after && be_status(ctx, cudaStreamWaitEvent(ctx->copy_stream, (cudaEvent_t)after, 0),
                           "cudaStreamWaitEvent(copy)"))
        return -1;
    if (bytes && be_status(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                                                ctx->copy_stream),
                           "cudaMemcpyAsync(d2h, copy stream)"))
        return -1;
    return be_status(ctx, cudaEventRecord((cudaEvent_t)done, ctx->copy_stream),
                     "cudaEventRecord(copy)");
}

/* Half-size host copies: a conversion kernel on the copy stream reads the
 * device's float32 and writes bfloat16 straight into the pinned host pool,
 * or the other way.  Under unified addressing (every 64-bit platform CUDA
 * supports) memory from cudaHostAlloc is reachable from kernels at its host
 * address, so the kernel's loads or stores are the PCIe transfer. */
__global__ void to_bf16_k(size_t n, const float *src, uint16_t *dst)
{
    IABN_CUDA_GRID_LOOP(i, n) dst[i] = iabn_f32_to_bf16(src[i]);
}
__global__ void from_bf16_k(size_t n, const uint16_t *src, float *dst)
{
    IABN_CUDA_GRID_LOOP(i, n) dst[i] = iabn_bf16_to_f32(src[i]);
}

static int be_bf16(iabn_cuda_ctx *ctx, int out, void *dst, const void *src, size_t count,
                   void *after, void *done)
{
    if (after && be_status(ctx, cudaStreamWaitEvent(ctx->copy_stream, (cudaEvent_t)after, 0),
                           "cudaStreamWaitEvent(copy)"))
        return -1;
    if (count) {
        unsigned grid = iabn_cuda_grid(count, IABN_CUDA_BLOCK);
        if (out)
            to_bf16_k<<<grid, IABN_CUDA_BLOCK, 0, ctx->copy_stream>>>(
                count, (const float *)src, (uint16_t *)dst);
        else
            from_bf16_k<<<grid, IABN_CUDA_BLOCK, 0, ctx->copy_stream>>>(
                count, (const uint16_t *)src, (float *)dst);
        if (be_status(ctx, cudaGetLastError(), out ? "to_bf16_k" : "from_bf16_k")) return -1;
    }
    return be_status(ctx, cudaEventRecord((cudaEvent_t)done, ctx->copy_stream),
                     "cudaEventRecord(copy)");
}

static int be_d2h_bf16(void *c, uint16_t *dst, const float *src, size_t count, void *after,
                       void *done)
{
    return be_bf16((iabn_cuda_ctx *)c, 1, dst, src, count, after, done);
}

static int be_h2d_bf16(void *c, float *dst, const uint16_t *src, size_t count, void *after,
                       void *done)
{
    return be_bf16((iabn_cuda_ctx *)c, 0, dst, src, count, after, done);
}

static void *be_host_alloc(void *c, size_t bytes)
{
    iabn_cuda_ctx *ctx = (iabn_cuda_ctx *)c;
    void *p = NULL;
    if (be_status(ctx, cudaHostAlloc(&p, bytes, cudaHostAllocDefault), "cudaHostAlloc"))
        return NULL;
    return p;
}

static void be_host_free(void *c, void *p)
{
    (void)c;
    if (p) (void)cudaFreeHost(p);
}

/* ---- context ------------------------------------------------------------------ */

/* Builds everything; on failure the caller frees the partial context. */
int iabn_cuda_device_count(int *count, iabn_err *e)
{
    *count = 0;
    cudaError_t st = cudaGetDeviceCount(count);
    if (st != cudaSuccess) {
        (void)cudaGetLastError();
        *count = 0;
        return iabn_err_set(e, IABN_EDEVICE, "no CUDA device: %s", cudaGetErrorString(st));
    }
    if (*count < 1) return iabn_err_set(e, IABN_EDEVICE, "no CUDA device: none found");
    return 0;
}

static int ctx_init(iabn_cuda_ctx *ctx, int device, iabn_err *e)
{
    int count = 0;
    int rc = iabn_cuda_device_count(&count, e);
    if (rc) return rc;
    if (device < 0 || device >= count)
        return iabn_err_set(e, IABN_EDEVICE, "no CUDA device %d (%d present)", device, count);
    ctx->device = device;
    IABN_CUDA_CHECK(e, cudaSetDevice(device));
    /* non-blocking: the legacy default stream must not serialise us */
    IABN_CUDA_CHECK(e, cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    IABN_CUDA_CHECK(e, cudaStreamCreateWithFlags(&ctx->copy_stream, cudaStreamNonBlocking));
    IABN_CUDA_CHECK(e, cudaEventCreateWithFlags(&ctx->ev_copy, cudaEventDisableTiming));
    IABN_CUBLAS_CHECK(e, cublasCreate(&ctx->cublas));
    IABN_CUBLAS_CHECK(e, cublasSetStream(ctx->cublas, ctx->stream));
    /* TF32 off unless asked: the CPU comparisons and the paper's numbers are fp32 */
    IABN_CUBLAS_CHECK(e, cublasSetMathMode(ctx->cublas, ctx->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                  : CUBLAS_DEFAULT_MATH));
    IABN_CUDNN_CHECK(e, cudnnCreate(&ctx->cudnn));
    IABN_CUDNN_CHECK(e, cudnnSetStream(ctx->cudnn, ctx->stream));
    IABN_CUDA_CHECK(e, cudaMalloc(&ctx->flag_dev, 64));
    IABN_CUDA_CHECK(e, cudaMallocHost(&ctx->flag_host, 64));
    IABN_CUDA_CHECK(e, cudaMalloc(&ctx->sums_dev, IABN_CUDA_SUMS * sizeof(double)));
    IABN_CUDA_CHECK(e, cudaMallocHost(&ctx->sums_host, IABN_CUDA_SUMS * sizeof(double)));
    /* a round trip copies whole slots, of which small arrays fill a part:
     * the rest must be defined bytes (compute-sanitizer's initcheck) */
    IABN_CUDA_CHECK(e, cudaMemset(ctx->sums_dev, 0, IABN_CUDA_SUMS * sizeof(double)));
    return 0;
}

/* ---- the kernel table -------------------------------------------------------------
 * Each entry is a launcher of cuda/kernels.h seen through the table's
 * context-as-void* signature: k_entry<F>::call casts the context and calls F,
 * and the assignment to the table member checks F's other parameters
 * against the table's at compile time. */

template <typename F, F f> struct k_entry;
template <typename... A, int (*f)(iabn_cuda_ctx *, A...)>
struct k_entry<int (*)(iabn_cuda_ctx *, A...), f> {
    static int call(void *ctx, A... a) { return f((iabn_cuda_ctx *)ctx, a...); }
};
#define K_ENTRY(fn) (&k_entry<decltype(&fn), &fn>::call)

/* The forward keeps its selection keys in the weight output itself. */
static size_t k_xent_scratch(int n, int hw)
{
    (void)n, (void)hw;
    return 0;
}
static int k_xent_fwd(void *ctx, int n, int k, int hw, const float *logits, const int32_t *labels,
                      int ignore_index, float top_frac, float *loss, float *weight, void *scratch,
                      long *bad, int *bad_label, iabn_err *e)
{
    (void)scratch;
    return iabn_cuda_xent_fwd((iabn_cuda_ctx *)ctx, n, k, hw, logits, labels, ignore_index,
                              top_frac, loss, weight, bad, bad_label, e);
}

static iabn_kernels make_kernels()
{
    iabn_kernels k;
    memset(&k, 0, sizeof k);
    k.conv_scratch = iabn_cuda_conv_workspace_bytes;
    k.conv_fwd = K_ENTRY(iabn_cuda_conv_fwd);
    k.conv_bwd_data = K_ENTRY(iabn_cuda_conv_bwd_data);
    k.conv_bwd_filter = K_ENTRY(iabn_cuda_conv_bwd_filter);
    k.bn_stats = K_ENTRY(iabn_cuda_bn_stats);
    k.bn_update_running = K_ENTRY(iabn_cuda_bn_update_running);
    k.norm_act_fwd = K_ENTRY(iabn_cuda_norm_act_fwd);
    k.norm_act_from_xhat = K_ENTRY(iabn_cuda_norm_act_from_xhat);
    k.act_fwd = K_ENTRY(iabn_cuda_act_fwd);
    k.act_bwd = K_ENTRY(iabn_cuda_act_bwd);
    k.bn_bwd_reduce = K_ENTRY(iabn_cuda_bn_bwd_reduce);
    k.bn_bwd_apply = K_ENTRY(iabn_cuda_bn_bwd_apply);
    k.bn_bwd_reduce_xhat = K_ENTRY(iabn_cuda_bn_bwd_reduce_xhat);
    k.bn_bwd_apply_xhat = K_ENTRY(iabn_cuda_bn_bwd_apply_xhat);
    k.bn_param_grads = K_ENTRY(iabn_cuda_bn_param_grads);
    k.iabn_bwd_reduce = K_ENTRY(iabn_cuda_iabn_bwd_reduce);
    k.iabn_bwd_apply = K_ENTRY(iabn_cuda_iabn_bwd_apply);
    k.add = K_ENTRY(iabn_cuda_add);
    k.copy_bytes = K_ENTRY(iabn_cuda_copy_bytes);
    k.scale = K_ENTRY(iabn_cuda_scale);
    k.sumsq = K_ENTRY(iabn_cuda_sumsq);
    k.add_bcast_hw = K_ENTRY(iabn_cuda_add_bcast_hw);
    k.sum_hw = K_ENTRY(iabn_cuda_sum_hw);
    k.dropout2d_apply = K_ENTRY(iabn_cuda_dropout2d_apply);
    k.copy_channels = K_ENTRY(iabn_cuda_copy_channels);
    k.slice_channels = K_ENTRY(iabn_cuda_slice_channels);
    k.bilinear_fwd = K_ENTRY(iabn_cuda_bilinear_fwd);
    k.bilinear_bwd = K_ENTRY(iabn_cuda_bilinear_bwd);
    k.maxpool_fwd = K_ENTRY(iabn_cuda_maxpool_fwd);
    k.maxpool_bwd = K_ENTRY(iabn_cuda_maxpool_bwd);
    k.gap_fwd = K_ENTRY(iabn_cuda_gap_fwd);
    k.gap_bwd = K_ENTRY(iabn_cuda_gap_bwd);
    k.avgpool_fwd = K_ENTRY(iabn_cuda_avgpool_fwd);
    k.avgpool_bwd = K_ENTRY(iabn_cuda_avgpool_bwd);
    k.linear_fwd = K_ENTRY(iabn_cuda_linear_fwd);
    k.linear_bwd_data = K_ENTRY(iabn_cuda_linear_bwd_data);
    k.linear_bwd_weight = K_ENTRY(iabn_cuda_linear_bwd_weight);
    k.xent_scratch = k_xent_scratch;
    k.xent_fwd = k_xent_fwd;
    k.xent_bwd = K_ENTRY(iabn_cuda_xent_bwd);
    k.xent_smooth_fwd = K_ENTRY(iabn_cuda_xent_smooth_fwd);
    k.xent_smooth_bwd = K_ENTRY(iabn_cuda_xent_smooth_bwd);
    k.reg_loss_fwd = K_ENTRY(iabn_cuda_reg_loss_fwd);
    k.reg_loss_bwd = K_ENTRY(iabn_cuda_reg_loss_bwd);
    k.sgd_update = K_ENTRY(iabn_cuda_sgd_update);
    return k;
}
static const iabn_kernels cuda_kernels = make_kernels();

static int be_node_done(void *c, iabn_err *e) { return iabn_cuda_node_done((iabn_cuda_ctx *)c, e); }

int iabn_cuda_ctx_new(int device, iabn_cuda_ctx **out, iabn_err *e)
{
    *out = NULL;
    iabn_cuda_ctx *ctx = (iabn_cuda_ctx *)calloc(1, sizeof *ctx);
    if (!ctx) return iabn_err_set(e, IABN_ENOMEM, "out of memory for the CUDA context");
    ctx->device = -1;
    ctx->sync_each = env_on("IABN_CUDA_SYNC");
    ctx->tf32 = env_on("IABN_TF32");
    ctx->deterministic = env_on("IABN_CUDNN_DETERMINISTIC");
    /* on unless IABN_CUDNN_FIND=0; deterministic runs keep the heuristic's
     * choice, which does not depend on timings (cuda/conv.cu) */
    const char *find = getenv("IABN_CUDNN_FIND");
    ctx->timed = !ctx->deterministic && !(find && strcmp(find, "0") == 0);
    int rc = ctx_init(ctx, device, e);
    if (rc) {
        iabn_cuda_ctx_free(ctx);
        return rc;
    }
    ctx->be.kind = IABN_DEV_CUDA;
    ctx->be.name = "cuda";
    ctx->be.align = 256; /* cudaMalloc's alignment; keeps every kernel's loads aligned */
    ctx->be.ctx = ctx;
    ctx->be.alloc = be_alloc;
    ctx->be.free = be_free;
    ctx->be.h2d = be_h2d;
    ctx->be.d2h = be_d2h;
    ctx->be.fill = be_fill;
    ctx->be.sync = be_sync;
    ctx->be.event_new = be_event_new;
    ctx->be.event_free = be_event_free;
    ctx->be.record = be_record;
    ctx->be.wait = be_wait;
    ctx->be.h2d_async = be_h2d_async;
    ctx->be.d2h_async = be_d2h_async;
    ctx->be.d2h_bf16 = be_d2h_bf16;
    ctx->be.h2d_bf16 = be_h2d_bf16;
    ctx->be.host_alloc = be_host_alloc;
    ctx->be.host_free = be_host_free;
    ctx->be.node_done = be_node_done;
    ctx->be.k = &cuda_kernels;
    *out = ctx;
    return 0;
}

void iabn_cuda_ctx_free(iabn_cuda_ctx *ctx)
{
    if (!ctx) return;
    if (ctx->device >= 0) (void)cudaSetDevice(ctx->device);
    if (ctx->stream) (void)cudaStreamSynchronize(ctx->stream);
    if (ctx->copy_stream) (void)cudaStreamSynchronize(ctx->copy_stream);
    iabn_cuda_conv_plans_free(ctx);
    if (ctx->cudnn) (void)cudnnDestroy(ctx->cudnn);
    if (ctx->cublas) (void)cublasDestroy(ctx->cublas);
    if (ctx->flag_dev) (void)cudaFree(ctx->flag_dev);
    if (ctx->flag_host) (void)cudaFreeHost(ctx->flag_host);
    if (ctx->sums_dev) (void)cudaFree(ctx->sums_dev);
    if (ctx->sums_host) (void)cudaFreeHost(ctx->sums_host);
    if (ctx->ev_copy) (void)cudaEventDestroy(ctx->ev_copy);
    if (ctx->copy_stream) (void)cudaStreamDestroy(ctx->copy_stream);
    if (ctx->stream) (void)cudaStreamDestroy(ctx->stream);
    free(ctx);
}

const iabn_backend *iabn_cuda_backend(iabn_cuda_ctx *ctx) { return &ctx->be; }
const iabn_err *iabn_cuda_last_error(const iabn_cuda_ctx *ctx) { return &ctx->last; }
int iabn_cuda_device(const iabn_cuda_ctx *ctx) { return ctx->device; }
int iabn_cuda_tf32(const iabn_cuda_ctx *ctx) { return ctx->tf32; }

void *iabn_cuda_host_alloc(size_t bytes, void *c)
{
    iabn_cuda_ctx *ctx = (iabn_cuda_ctx *)c;
    void *p = NULL;
    if (ctx && ctx->device >= 0 && cudaSetDevice(ctx->device) != cudaSuccess) return NULL;
    cudaError_t st = cudaMallocHost(&p, bytes ? bytes : 1);
    if (st != cudaSuccess) {
        if (ctx) iabn_err_set(&ctx->last, IABN_ENOMEM, "cudaMallocHost(%zu bytes) failed: %s",
                              bytes, cudaGetErrorString(st));
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

void iabn_cuda_host_free(void *p, void *c)
{
    (void)c;
    if (p) (void)cudaFreeHost(p);
}

int iabn_cuda_sync(iabn_cuda_ctx *ctx, iabn_err *e)
{
    IABN_CUDA_CHECK(e, cudaStreamSynchronize(ctx->copy_stream));
    IABN_CUDA_CHECK(e, cudaStreamSynchronize(ctx->stream));
    return 0;
}

int iabn_cuda_node_done(iabn_cuda_ctx *ctx, iabn_err *e)
{
    if (!ctx->sync_each) return 0;
    IABN_CUDA_CHECK(e, cudaStreamSynchronize(ctx->stream));
    IABN_CUDA_CHECK(e, cudaGetLastError());
    return 0;
}

int iabn_cuda_mem_info(iabn_cuda_ctx *ctx, size_t *free_bytes, size_t *total_bytes, iabn_err *e)
{
    IABN_CUDA_CHECK(e, cudaSetDevice(ctx->device));
    IABN_CUDA_CHECK(e, cudaMemGetInfo(free_bytes, total_bytes));
    return 0;
}

int iabn_cuda_device_name(iabn_cuda_ctx *ctx, char *buf, size_t cap, iabn_err *e)
{
    cudaDeviceProp prop;
    IABN_CUDA_CHECK(e, cudaGetDeviceProperties(&prop, ctx->device));
    snprintf(buf, cap, "%s (sm_%d%d, %zu MiB)", prop.name, prop.major, prop.minor,
             prop.totalGlobalMem >> 20);
    return 0;
}

/* What the planner needs of the CUDA backend when nothing is allocated: its
 * kind (cuDNN workspaces as scratch) and alignment.  No device is touched. */
static void *virt_alloc(void *c, size_t bytes)
{
    (void)c;
    (void)bytes;
    return NULL;
}
static void virt_free(void *c, void *p)
{
    (void)c;
    (void)p;
}
static int virt_copy(void *c, void *dst, const void *src, size_t bytes)
{
    (void)c, (void)dst, (void)src, (void)bytes;
    return -1;
}
static int virt_fill(void *c, void *dst, int byte, size_t bytes)
{
    (void)c, (void)dst, (void)byte, (void)bytes;
    return -1;
}
static int virt_sync(void *c)
{
    (void)c;
    return 0;
}

/* Both tables are filled field by field (C++17 has no designated
 * initialisers): a member added to iabn_backend or iabn_cuda_api then
 * stays NULL here rather than shifting the ones after it. */
static iabn_backend make_planning()
{
    iabn_backend b;
    memset(&b, 0, sizeof b);
    b.kind = IABN_DEV_CUDA;
    b.name = "cuda";
    b.align = 256;
    b.alloc = virt_alloc;
    b.free = virt_free;
    b.h2d = virt_copy;
    b.d2h = virt_copy;
    b.fill = virt_fill;
    b.sync = virt_sync;
    b.k = &cuda_kernels;
    return b;
}
static const iabn_backend planning_backend = make_planning();

const iabn_backend *iabn_cuda_backend_planning(void) { return &planning_backend; }

static iabn_cuda_api make_api()
{
    iabn_cuda_api a;
    memset(&a, 0, sizeof a);
    a.version = IABN_CUDA_API_VERSION;
    a.backend_bytes = sizeof(iabn_backend);
    a.kernels_bytes = sizeof(iabn_kernels);
    a.device_count = iabn_cuda_device_count;
    a.ctx_new = iabn_cuda_ctx_new;
    a.ctx_free = iabn_cuda_ctx_free;
    a.backend = iabn_cuda_backend;
    a.device_name = iabn_cuda_device_name;
    a.mem_info = iabn_cuda_mem_info;
    a.tf32 = iabn_cuda_tf32;
    a.host_alloc = iabn_cuda_host_alloc;
    a.host_free = iabn_cuda_host_free;
    a.backend_planning = iabn_cuda_backend_planning;
    return a;
}
static const iabn_cuda_api cuda_api_table = make_api();

const iabn_cuda_api *iabn_cuda_api_get(void) { return &cuda_api_table; }
