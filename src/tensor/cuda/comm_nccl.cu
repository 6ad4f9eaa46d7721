/* comm_nccl.cu: the NCCL transport of the communicator (comm.h), built when
 * meson finds NCCL next to the CUDA backend and MPI.
 *
 * Rank 0 creates the NCCL id, MPI broadcasts it (iabn_comm_bcast), every rank
 * joins with ncclCommInitRank on its CUDA context's device.  Collectives run
 * on NCCL's own stream: an event recorded on the compute stream orders them
 * after the kernels that produced the data, and waiting records an event on
 * NCCL's stream that the compute stream waits for.  While it waits the host
 * polls that event and ncclCommGetAsyncError against the communicator's
 * deadline; past it the NCCL communicator is aborted and the error says which
 * collective stalled on which rank.  A library of its own (libiabn_nccl.so),
 * which comm.c loads when NCCL is attached, so that nothing else maps NCCL. */
#include "tensor/comm_internal.h"
#include "tensor/cuda/internal.h"

#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct iabn_comm_nccl {
    ncclComm_t comm;
    cudaStream_t stream;
    cudaEvent_t ready, done;
    iabn_cuda_ctx *ctx;
};

static int nccl_fail(iabn_comm *c, iabn_err *e, const char *what, const char *call,
                     ncclResult_t r)
{
    c->broken = 1;
    iabn_err_set(&c->fail, IABN_EDEVICE, "%s on rank %d: %s failed: %s", what, c->rank, call,
                 ncclGetErrorString(r));
    return iabn_err_set(e, IABN_EDEVICE, "%s", c->fail.msg);
}

#define CUDA_TRY(e, call)                                                                \
    do {                                                                                 \
        cudaError_t st_ = (call);                                                        \
        if (st_ != cudaSuccess)                                                          \
            return iabn_err_set((e), IABN_EDEVICE, "%s failed: %s", #call,               \
                                cudaGetErrorString(st_));                                \
    } while (0)

#define NCCL_TRY(c, e, what, call)                                                       \
    do {                                                                                 \
        ncclResult_t r_ = (call);                                                        \
        if (r_ != ncclSuccess) return nccl_fail((c), (e), (what), #call, r_);            \
    } while (0)

static int nccl_init(iabn_comm *c, void *cuda_ctx, iabn_err *e)
{
    iabn_cuda_ctx *ctx = (iabn_cuda_ctx *)cuda_ctx;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (c->rank == 0) NCCL_TRY(c, e, "creating the NCCL id", ncclGetUniqueId(&id));
    int rc = iabn_comm_bcast(c, &id, sizeof id, 0, "broadcasting the NCCL id", e);
    if (rc) return rc;
    iabn_comm_nccl *n = (iabn_comm_nccl *)calloc(1, sizeof *n);
    if (!n) return iabn_err_set(e, IABN_ENOMEM, "out of memory creating the NCCL communicator");
    n->ctx = ctx;
    cudaError_t st = cudaSetDevice(ctx->device);
    if (st == cudaSuccess) st = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking);
    if (st == cudaSuccess) st = cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming);
    if (st == cudaSuccess) st = cudaEventCreateWithFlags(&n->done, cudaEventDisableTiming);
    if (st != cudaSuccess) {
        free(n);
        return iabn_err_set(e, IABN_EDEVICE, "creating NCCL's stream on cuda:%d: %s",
                            ctx->device, cudaGetErrorString(st));
    }
    ncclResult_t r = ncclCommInitRank(&n->comm, c->size, id, c->rank);
    if (r != ncclSuccess) {
        cudaEventDestroy(n->ready);
        cudaEventDestroy(n->done);
        cudaStreamDestroy(n->stream);
        free(n);
        return nccl_fail(c, e, "joining the NCCL communicator", "ncclCommInitRank", r);
    }
    c->nccl = n;
    return 0;
}

static void nccl_fini(iabn_comm *c)
{
    iabn_comm_nccl *n = c->nccl;
    if (!n) return;
    if (c->broken) ncclCommAbort(n->comm);
    else ncclCommDestroy(n->comm);
    cudaEventDestroy(n->ready);
    cudaEventDestroy(n->done);
    cudaStreamDestroy(n->stream);
    free(n);
    c->nccl = NULL;
}

static int nccl_allreduce_start(iabn_comm *c, void *buf, size_t count, int dtype,
                                const char *what, iabn_err *e)
{
    iabn_comm_nccl *n = c->nccl;
    CUDA_TRY(e, cudaEventRecord(n->ready, n->ctx->stream));
    CUDA_TRY(e, cudaStreamWaitEvent(n->stream, n->ready, 0));
    ncclDataType_t t = dtype == IABN_COMM_F64 ? ncclFloat64 : ncclFloat32;
    NCCL_TRY(c, e, what, ncclAllReduce(buf, buf, count, t, ncclSum, n->comm, n->stream));
    return 0;
}

static int nccl_wait(iabn_comm *c, const char *what, iabn_err *e)
{
    iabn_comm_nccl *n = c->nccl;
    CUDA_TRY(e, cudaEventRecord(n->done, n->stream));
    double t0 = iabn_now();
    for (;;) {
        cudaError_t st = cudaEventQuery(n->done);
        if (st == cudaSuccess) break;
        if (st != cudaErrorNotReady)
            return iabn_err_set(e, IABN_EDEVICE, "%s on rank %d: %s", what, c->rank,
                                cudaGetErrorString(st));
        ncclResult_t async = ncclSuccess;
        NCCL_TRY(c, e, what, ncclCommGetAsyncError(n->comm, &async));
        if (async != ncclSuccess) return nccl_fail(c, e, what, "an NCCL collective", async);
        if (iabn_now() - t0 > c->timeout) {
            c->broken = 1;
            iabn_err_set(&c->fail, IABN_EDEVICE,
                         "%s: NCCL made no progress for %.0f s on rank %d: a peer rank is lost "
                         "or stuck",
                         what, iabn_now() - t0, c->rank);
            return iabn_err_set(e, IABN_EDEVICE, "%s", c->fail.msg);
        }
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
    CUDA_TRY(e, cudaStreamWaitEvent(n->ctx->stream, n->done, 0));
    return 0;
}

static int nccl_copy(iabn_comm *c, void *dst, const void *src, size_t bytes, iabn_err *e)
{
    CUDA_TRY(e, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                       c->nccl->ctx->stream));
    return 0;
}

extern "C" void iabn_comm_nccl_api_get(iabn_comm_nccl_api *api)
{
    api->init = nccl_init;
    api->fini = nccl_fini;
    api->allreduce_start = nccl_allreduce_start;
    api->wait = nccl_wait;
    api->copy = nccl_copy;
}
