/* comm_internal.h: the communicator's private layout, shared by comm.c (the
 * transport-independent part), cpu/comm_mpi.c (MPI) and cuda/comm_nccl.cu
 * (NCCL).  C and C++ clean. */
#ifndef IABN_COMM_INTERNAL_H
#define IABN_COMM_INTERNAL_H

#include "tensor/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { IABN_COMM_OP_ALLREDUCE = 0, IABN_COMM_OP_ALLGATHER, IABN_COMM_OP_BCAST,
       IABN_COMM_OP_BARRIER };

/* One collective handed to the MPI thread. */
typedef struct iabn_comm_op {
    int kind;
    void *buf;            /* allreduce / bcast: in place; allgather: recv */
    const void *send;     /* allgather */
    size_t count;         /* allreduce: elements; others: bytes */
    int dtype, root;
    char what[96];
    int async;            /* started by iabn_comm_iallreduce (time accounting) */
    int done, rc;         /* under the transport's lock */
    char msg[1024];
    struct iabn_comm_op *next;
} iabn_comm_op;

/* A started iabn_comm_iallreduce. */
typedef struct iabn_comm_pending {
    int used;
    iabn_comm_op op;
    const struct iabn_backend *be;   /* device pointer staged through `host` */
    void *dev, *host;
    size_t bytes;
    void *staging;                   /* iabn_comm_staging */
    size_t staging_bytes;
    int nccl;                        /* issued on NCCL */
} iabn_comm_pending;

typedef struct iabn_comm_mpi iabn_comm_mpi;
typedef struct iabn_comm_nccl iabn_comm_nccl;

/* The NCCL transport (cuda/comm_nccl.cu, libiabn_nccl.so), loaded on attach.
 * allreduce_start queues on NCCL's stream after the compute stream's work so
 * far; wait makes the compute stream wait for every NCCL collective started
 * so far, the host polling NCCL's asynchronous error state against the
 * deadline meanwhile. */
typedef struct iabn_comm_nccl_api {
    int (*init)(iabn_comm *c, void *cuda_ctx, iabn_err *e);
    void (*fini)(iabn_comm *c);
    int (*allreduce_start)(iabn_comm *c, void *buf, size_t count, int dtype, const char *what,
                           iabn_err *e);
    int (*wait)(iabn_comm *c, const char *what, iabn_err *e);
    int (*copy)(iabn_comm *c, void *dst, const void *src, size_t bytes, iabn_err *e);
} iabn_comm_nccl_api;

struct iabn_comm {
    int rank, size, local_rank, local_size;
    double timeout;
    iabn_comm_mpi *mpi;      /* NULL: one process */
    iabn_comm_nccl *nccl;    /* NULL unless attached */
    iabn_comm_nccl_api nccl_api;
    int broken;
    iabn_err fail;
    iabn_comm_pending pend[IABN_COMM_MAX_PENDING];
    double busy, blocked;    /* see iabn_comm_times */
};

/* cpu/comm_mpi.c (only in builds with MPI) */
int iabn_comm_mpi_init(iabn_comm *c, iabn_err *e);
void iabn_comm_mpi_fini(iabn_comm *c);
void iabn_comm_mpi_give_up(iabn_comm *c);
void iabn_comm_mpi_submit(iabn_comm *c, iabn_comm_op *op);
/* Blocks until op is done; returns its status (message in e). */
int iabn_comm_mpi_wait(iabn_comm *c, iabn_comm_op *op, iabn_err *e);

/* cuda/comm_nccl.cu (libiabn_nccl.so): fills the table. */
void iabn_comm_nccl_api_get(iabn_comm_nccl_api *api);

#ifdef __cplusplus
}
#endif
#endif
