/* comm.h: collectives between the ranks of a data-parallel job, behind one
 * interface (issue 14).
 *
 * A communicator is a context object (no global state): the world's size,
 * this process's rank and local rank, and the transport:
 *   - one process (not started by mpirun / srun, or a build without MPI):
 *     size 1, every collective is the identity, nothing is linked in;
 *   - MPI (Open MPI), for the CPU backend and, staged through host memory,
 *     for CUDA pointers.  Every MPI call runs on the communicator's own
 *     thread, so collectives issued with iabn_comm_iallreduce progress while
 *     the caller computes (the backward overlaps the gradient all-reduce);
 *   - NCCL on the CUDA backend when the build found it (iabn_comm_nccl_attach;
 *     the NCCL id is broadcast over MPI).
 *
 * Failure detection: every collective is polled against a deadline.  While it
 * waits, each rank's communicator thread answers liveness pings from the
 * others, also while its process computes.  When a collective makes no
 * progress for `timeout` seconds the rank pings every peer; a peer that does
 * not answer within a grace period is named in the error ("rank 1 (pid 4242
 * on host) does not answer: lost"), and the collective fails.  A job whose
 * ranks all answer keeps waiting (a slow rank is not a lost one), up to
 * 10 x timeout.  Once a collective failed the communicator is broken: every
 * later call fails at once with the same message.
 *
 *     iabn_comm *c;
 *     if (iabn_comm_new(NULL, &c, &e)) ...;            // MPI_Init when launched
 *     iabn_comm_allreduce(c, be, grad, n, IABN_COMM_F32, "grads", &e);
 *     iabn_comm_free(c);                               // MPI_Finalize
 */
#ifndef IABN_COMM_H
#define IABN_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iabn_comm iabn_comm;
struct iabn_backend;

typedef enum iabn_comm_dtype { IABN_COMM_F32 = 0, IABN_COMM_F64 = 1 } iabn_comm_dtype;

typedef struct iabn_comm_opts {
    double timeout_s;   /* no progress for this long: ping the peers (default 300,
                           IABN_COMM_TIMEOUT overrides) */
    int single;         /* 1: a one-process communicator even under mpirun */
} iabn_comm_opts;

/* 1 when this process was started by mpirun / srun (Open MPI, PMI or PMIx
 * variables in the environment) and the build has MPI. */
int iabn_comm_launched(void);

/* MPI is initialised only when launched; otherwise a size-1 communicator.
 * Launched in a build without MPI: an error saying so.  opts may be NULL. */
int iabn_comm_new(const iabn_comm_opts *opts, iabn_comm **out, iabn_err *e);
/* Finalises MPI after a barrier (both skipped after a failure: a lost peer
 * would hang them). */
void iabn_comm_free(iabn_comm *c);
/* This rank gives up (an error of its own): the communicator is broken from
 * here, a collective in flight is abandoned, and iabn_comm_free skips the
 * barrier and MPI_Finalize; the launcher ends the other ranks when this
 * process exits non-zero. */
void iabn_comm_give_up(iabn_comm *c);

int iabn_comm_rank(const iabn_comm *c);
int iabn_comm_size(const iabn_comm *c);
int iabn_comm_local_rank(const iabn_comm *c);   /* rank among this host's ranks */
int iabn_comm_local_size(const iabn_comm *c);
/* "mpi", "nccl+mpi" or "single". */
const char *iabn_comm_transport(const iabn_comm *c);
/* Nonzero once a collective failed (the message is the failure's). */
int iabn_comm_broken(const iabn_comm *c);

/* ---- collectives (blocking; every rank must call them in the same order) ----
 * Pointers are on backend `be` (NULL: host memory); CUDA pointers go through
 * NCCL when attached, else through a host copy.  `what` names the operation in
 * errors. */

/* In-place sum over ranks of count values. */
int iabn_comm_allreduce(iabn_comm *c, const struct iabn_backend *be, void *buf, size_t count,
                        iabn_comm_dtype dt, const char *what, iabn_err *e);
/* recv[r*bytes ..] = rank r's send (bytes each); host memory only. */
int iabn_comm_allgather(iabn_comm *c, const void *send, void *recv, size_t bytes,
                        const char *what, iabn_err *e);
/* Host memory only. */
int iabn_comm_bcast(iabn_comm *c, void *buf, size_t bytes, int root, const char *what,
                    iabn_err *e);
int iabn_comm_barrier(iabn_comm *c, const char *what, iabn_err *e);

/* Refuses (on every rank) unless `bytes` of data hash the same on all ranks;
 * the message names `what` and the ranks that differ from rank 0. */
int iabn_comm_check_same(iabn_comm *c, const void *data, size_t bytes, const char *what,
                         iabn_err *e);
/* FNV-1a 64 of the bytes (what check_same compares). */
uint64_t iabn_comm_hash(const void *data, size_t bytes);

/* ---- non-blocking all-reduce (gradient buckets) ------------------------------
 * Starts an in-place sum of buf and returns at once; `key` (0..63) names the
 * request until iabn_comm_wait(key).  buf must stay untouched until then. */
enum { IABN_COMM_MAX_PENDING = 64 };
int iabn_comm_iallreduce(iabn_comm *c, int key, const struct iabn_backend *be, void *buf,
                         size_t count, iabn_comm_dtype dt, const char *what, iabn_err *e);
int iabn_comm_wait(iabn_comm *c, int key, iabn_err *e);

/* Time accounting for the overlap figure of `iabn bench step`, over the
 * non-blocking all-reduces (the gradient buckets) since the last reset:
 * busy_s, the seconds the communicator thread spent executing them (from the
 * start of each until the sum is complete, waiting for slower peers
 * included); blocked_s, the seconds callers spent waiting for them in
 * iabn_comm_wait.  1 - blocked / busy is the fraction hidden behind compute. */
void iabn_comm_times(const iabn_comm *c, double *busy_s, double *blocked_s);
void iabn_comm_reset_times(iabn_comm *c);

/* ---- NCCL ---------------------------------------------------------------------
 * 1 when the build has NCCL.  attach creates an NCCL communicator over the
 * same ranks on the CUDA context `cuda_ctx` (an iabn_cuda_ctx), bootstrapped
 * over this communicator; collectives on CUDA pointers then run on NCCL's own
 * stream, ordered after the compute stream with events. */
int iabn_comm_have_nccl(void);
int iabn_comm_nccl_attach(iabn_comm *c, void *cuda_ctx, iabn_err *e);
int iabn_comm_nccl_attached(const iabn_comm *c);
/* With NCCL attached: a device-to-device copy on the compute stream (packing
 * gradient buckets in device memory). */
int iabn_comm_device_copy(iabn_comm *c, void *dst, const void *src, size_t bytes, iabn_err *e);
/* A host buffer of at least `bytes` owned by request `key` (packing device
 * gradients for MPI when NCCL is not attached); NULL when out of memory. */
void *iabn_comm_staging(iabn_comm *c, int key, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
