/* comm.c: the transport-independent part of the communicator (comm.h): the
 * one-process communicator, argument checks, staging of device pointers
 * through host memory for MPI, dispatch to NCCL, the pending-request table
 * and the configuration hash.  The MPI transport is cpu/comm_mpi.c, NCCL's
 * cuda/comm_nccl.cu, a library of its own (libiabn_nccl.so, beside libiabn)
 * loaded when NCCL is attached, as the CUDA backend is (tensor/device.c). */
#define _GNU_SOURCE /* dladdr */
#include "tensor/comm_internal.h"
#include "tensor/backend.h"
#include "iabn_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if IABN_HAVE_NCCL
#include <dlfcn.h>
#endif


int iabn_comm_launched(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

int iabn_comm_new(const iabn_comm_opts *opts, iabn_comm **out, iabn_err *e)
{
    *out = NULL;
    iabn_comm *c = calloc(1, sizeof *c);
    if (!c) return iabn_err_set(e, IABN_ENOMEM, "out of memory creating the communicator");
    c->size = c->local_size = 1;
    c->timeout = opts && opts->timeout_s > 0 ? opts->timeout_s : 300.0;
    const char *env = getenv("IABN_COMM_TIMEOUT");
    if (env && *env) {
        char *end;
        double t = strtod(env, &end);
        if (*end || !(t > 0)) {
            free(c);
            return iabn_err_set(e, IABN_EINVAL,
                                "IABN_COMM_TIMEOUT=%s: expected a positive number of seconds",
                                env);
        }
        c->timeout = t;
    }
    int single = (opts && opts->single) || !iabn_comm_launched();
    if (!single) {
#if IABN_HAVE_MPI
        int rc = iabn_comm_mpi_init(c, e);
        if (rc) {
            free(c);
            return rc;
        }
#else
        free(c);
        return iabn_err_set(e, IABN_EINVAL,
                            "started by mpirun / srun, but this build has no MPI (install "
                            "libopenmpi-dev and reconfigure with -Dmpi=enabled)");
#endif
    }
    *out = c;
    return 0;
}

void iabn_comm_free(iabn_comm *c)
{
    if (!c) return;
#if IABN_HAVE_NCCL
    if (c->nccl) c->nccl_api.fini(c);
#endif
    for (int k = 0; k < IABN_COMM_MAX_PENDING; k++) {
        free(c->pend[k].host);
        free(c->pend[k].staging);
    }
#if IABN_HAVE_MPI
    if (c->mpi) iabn_comm_mpi_fini(c);
#endif
    free(c);
}

void iabn_comm_give_up(iabn_comm *c)
{
    if (!c || c->broken) return;
    c->broken = 1;
    if (!c->fail.code)
        iabn_err_set(&c->fail, IABN_EINTR, "rank %d gave up after an error of its own", c->rank);
#if IABN_HAVE_MPI
    if (c->mpi) iabn_comm_mpi_give_up(c);
#endif
}

int iabn_comm_rank(const iabn_comm *c) { return c ? c->rank : 0; }
int iabn_comm_size(const iabn_comm *c) { return c ? c->size : 1; }
int iabn_comm_local_rank(const iabn_comm *c) { return c ? c->local_rank : 0; }
int iabn_comm_local_size(const iabn_comm *c) { return c ? c->local_size : 1; }
int iabn_comm_broken(const iabn_comm *c) { return c && c->broken; }

const char *iabn_comm_transport(const iabn_comm *c)
{
    if (!c || !c->mpi) return "single";
    return c->nccl ? "nccl+mpi" : "mpi";
}

int iabn_comm_have_nccl(void) { return IABN_HAVE_NCCL; }

#if IABN_HAVE_NCCL
/* The NCCL transport's entry points into c->nccl_api, from libiabn_nccl.so
 * beside this library (or $IABN_NCCL_MODULE). */
static int load_nccl(iabn_comm *c, iabn_err *e)
{
    char path[4096];
    const char *env = getenv("IABN_NCCL_MODULE");
    Dl_info self;
    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
    } else if (dladdr((void *)load_nccl, &self) && self.dli_fname && strrchr(self.dli_fname, '/')) {
        int dir = (int)(strrchr(self.dli_fname, '/') - self.dli_fname);
        snprintf(path, sizeof path, "%.*s/libiabn_nccl.so", dir, self.dli_fname);
    } else {
        snprintf(path, sizeof path, "libiabn_nccl.so");
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) return iabn_err_set(e, IABN_EDEVICE, "the NCCL transport could not be loaded: %s", dlerror());
    void *sym = dlsym(h, "iabn_comm_nccl_api_get");
    dlclose(h);
    if (!sym)
        return iabn_err_set(e, IABN_EDEVICE, "%s is not iabn's NCCL transport", path);
    void (*get)(iabn_comm_nccl_api *);
    memcpy(&get, &sym, sizeof get);
    get(&c->nccl_api);
    return 0;
}
#endif

int iabn_comm_nccl_attach(iabn_comm *c, void *cuda_ctx, iabn_err *e)
{
#if IABN_HAVE_NCCL
    if (!c->mpi) return 0; /* one process: nothing to reduce */
    int rc = load_nccl(c, e);
    return rc ? rc : c->nccl_api.init(c, cuda_ctx, e);
#else
    (void)c;
    (void)cuda_ctx;
    return iabn_err_set(e, IABN_EINVAL, "this build has no NCCL (reconfigure with -Dnccl=enabled "
                                        "where NCCL is installed)");
#endif
}

int iabn_comm_nccl_attached(const iabn_comm *c) { return c && c->nccl; }

int iabn_comm_device_copy(iabn_comm *c, void *dst, const void *src, size_t bytes, iabn_err *e)
{
#if IABN_HAVE_NCCL
    if (c && c->nccl) return c->nccl_api.copy(c, dst, src, bytes, e);
#endif
    (void)c;
    (void)dst;
    (void)src;
    (void)bytes;
    return iabn_err_set(e, IABN_EINVAL, "device copies need an attached NCCL communicator");
}

void *iabn_comm_staging(iabn_comm *c, int key, size_t bytes)
{
    if (!c || key < 0 || key >= IABN_COMM_MAX_PENDING) return NULL;
    iabn_comm_pending *p = &c->pend[key];
    if (p->staging_bytes < bytes) {
        free(p->staging);
        p->staging_bytes = 0;
        if (!(p->staging = malloc(bytes))) return NULL;
        p->staging_bytes = bytes;
    }
    return p->staging;
}

void iabn_comm_times(const iabn_comm *c, double *busy_s, double *blocked_s)
{
    if (busy_s) *busy_s = c ? c->busy : 0;
    if (blocked_s) *blocked_s = c ? c->blocked : 0;
}

void iabn_comm_reset_times(iabn_comm *c)
{
    if (c) c->busy = c->blocked = 0;
}

static int broken(iabn_comm *c, iabn_err *e)
{
    return iabn_err_set(e, c->fail.code ? c->fail.code : IABN_EDEVICE, "%s", c->fail.msg);
}

static size_t dtype_bytes(iabn_comm_dtype dt) { return dt == IABN_COMM_F64 ? 8 : 4; }

static int is_device(const iabn_backend *be) { return be && be->kind != IABN_DEV_CPU; }

/* Runs op on the MPI thread and waits for it; marks the communicator broken
 * on failure. */
static int run_op(iabn_comm *c, iabn_comm_op *op, iabn_err *e)
{
#if IABN_HAVE_MPI
    iabn_comm_mpi_submit(c, op);
    return iabn_comm_mpi_wait(c, op, e);
#else
    (void)c;
    (void)op;
    return iabn_err_set(e, IABN_EINVAL, "no MPI in this build");
#endif
}

static void op_init(iabn_comm_op *op, int kind, const char *what)
{
    memset(op, 0, sizeof *op);
    op->kind = kind;
    snprintf(op->what, sizeof op->what, "%s", what ? what : "collective");
}

int iabn_comm_allreduce(iabn_comm *c, const iabn_backend *be, void *buf, size_t count,
                        iabn_comm_dtype dt, const char *what, iabn_err *e)
{
    if (!c || c->size == 1 || count == 0) return 0;
    if (c->broken) return broken(c, e);
    if (is_device(be) && c->nccl) {
#if IABN_HAVE_NCCL
        int rc = c->nccl_api.allreduce_start(c, buf, count, (int)dt, what, e);
        return rc ? rc : c->nccl_api.wait(c, what, e);
#endif
    }
    size_t bytes = count * dtype_bytes(dt);
    void *host = buf;
    if (is_device(be)) {
        if (!(host = malloc(bytes)))
            return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory staging %zu bytes", what,
                                bytes);
        if (be->d2h(be->ctx, host, buf, bytes)) {
            free(host);
            return iabn_err_set(e, IABN_EDEVICE, "%s: copying to the host failed", what);
        }
    }
    iabn_comm_op op;
    op_init(&op, IABN_COMM_OP_ALLREDUCE, what);
    op.buf = host;
    op.count = count;
    op.dtype = (int)dt;
    int rc = run_op(c, &op, e);
    if (!rc && host != buf && be->h2d(be->ctx, buf, host, bytes))
        rc = iabn_err_set(e, IABN_EDEVICE, "%s: copying back to the device failed", what);
    if (host != buf) free(host);
    return rc;
}

int iabn_comm_allgather(iabn_comm *c, const void *send, void *recv, size_t bytes,
                        const char *what, iabn_err *e)
{
    if (!c || c->size == 1) {
        if (bytes && recv != send) memmove(recv, send, bytes);
        return 0;
    }
    if (c->broken) return broken(c, e);
    iabn_comm_op op;
    op_init(&op, IABN_COMM_OP_ALLGATHER, what);
    op.send = send;
    op.buf = recv;
    op.count = bytes;
    return run_op(c, &op, e);
}

int iabn_comm_bcast(iabn_comm *c, void *buf, size_t bytes, int root, const char *what,
                    iabn_err *e)
{
    if (!c || c->size == 1 || bytes == 0) return 0;
    if (c->broken) return broken(c, e);
    if (root < 0 || root >= c->size)
        return iabn_err_set(e, IABN_EINVAL, "%s: root %d outside the %d ranks", what, root,
                            c->size);
    iabn_comm_op op;
    op_init(&op, IABN_COMM_OP_BCAST, what);
    op.buf = buf;
    op.count = bytes;
    op.root = root;
    return run_op(c, &op, e);
}

int iabn_comm_barrier(iabn_comm *c, const char *what, iabn_err *e)
{
    if (!c || c->size == 1) return 0;
    if (c->broken) return broken(c, e);
    iabn_comm_op op;
    op_init(&op, IABN_COMM_OP_BARRIER, what);
    return run_op(c, &op, e);
}

uint64_t iabn_comm_hash(const void *data, size_t bytes)
{
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < bytes; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

int iabn_comm_check_same(iabn_comm *c, const void *data, size_t bytes, const char *what,
                         iabn_err *e)
{
    if (!c || c->size == 1) return 0;
    uint64_t h = iabn_comm_hash(data, bytes);
    uint64_t *all = malloc((size_t)c->size * sizeof *all);
    if (!all) return iabn_err_set(e, IABN_ENOMEM, "out of memory comparing %s", what);
    int rc = iabn_comm_allgather(c, &h, all, sizeof h, what, e);
    if (!rc) {
        char list[256] = "";
        size_t len = 0;
        int bad = 0;
        for (int r = 1; r < c->size; r++)
            if (all[r] != all[0]) {
                bad++;
                if (len < sizeof list - 16)
                    len += (size_t)snprintf(list + len, sizeof list - len, "%s%d",
                                            bad > 1 ? ", " : "", r);
            }
        if (bad)
            rc = iabn_err_set(e, IABN_EINVAL,
                              "%s differs between ranks: rank(s) %s disagree with rank 0 (hash "
                              "%016llx here, rank %d); every rank must be given the same one",
                              what, list, (unsigned long long)h, c->rank);
    }
    free(all);
    return rc;
}

/* ---- non-blocking all-reduce ------------------------------------------------ */

int iabn_comm_iallreduce(iabn_comm *c, int key, const iabn_backend *be, void *buf,
                         size_t count, iabn_comm_dtype dt, const char *what, iabn_err *e)
{
    if (!c || c->size == 1 || count == 0) return 0;
    if (c->broken) return broken(c, e);
    if (key < 0 || key >= IABN_COMM_MAX_PENDING)
        return iabn_err_set(e, IABN_EINVAL, "%s: request key %d outside 0..%d", what, key,
                            IABN_COMM_MAX_PENDING - 1);
    iabn_comm_pending *p = &c->pend[key];
    if (p->used)
        return iabn_err_set(e, IABN_EINVAL, "%s: request %d is still in flight (%s)", what, key,
                            p->op.what);
    size_t bytes = count * dtype_bytes(dt);
    op_init(&p->op, IABN_COMM_OP_ALLREDUCE, what);
    p->be = be;
    p->dev = buf;
    p->nccl = 0;
    if (is_device(be) && c->nccl) {
#if IABN_HAVE_NCCL
        int rc = c->nccl_api.allreduce_start(c, buf, count, (int)dt, what, e);
        if (rc) return rc;
        p->nccl = 1;
        p->used = 1;
        return 0;
#endif
    }
    void *host = buf;
    if (is_device(be)) {
        if (p->bytes < bytes) {
            free(p->host);
            p->bytes = 0;
            if (!(p->host = malloc(bytes)))
                return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory staging %zu bytes", what,
                                    bytes);
            p->bytes = bytes;
        }
        host = p->host;
        if (be->d2h(be->ctx, host, buf, bytes))
            return iabn_err_set(e, IABN_EDEVICE, "%s: copying to the host failed", what);
    }
    p->op.buf = host;
    p->op.count = count;
    p->op.dtype = (int)dt;
    p->op.async = 1;
#if IABN_HAVE_MPI
    iabn_comm_mpi_submit(c, &p->op);
#endif
    p->used = 1;
    return 0;
}

int iabn_comm_wait(iabn_comm *c, int key, iabn_err *e)
{
    if (!c || c->size == 1) return 0;
    if (key < 0 || key >= IABN_COMM_MAX_PENDING || !c->pend[key].used) return 0;
    iabn_comm_pending *p = &c->pend[key];
    p->used = 0;
    int rc = 0;
    double t0 = iabn_now();
    if (p->nccl) {
#if IABN_HAVE_NCCL
        rc = c->nccl_api.wait(c, p->op.what, e);
#endif
    } else {
#if IABN_HAVE_MPI
        rc = iabn_comm_mpi_wait(c, &p->op, e);
#endif
        if (!rc && p->op.buf != p->dev &&
            p->be->h2d(p->be->ctx, p->dev, p->op.buf, p->op.count * dtype_bytes(p->op.dtype)))
            rc = iabn_err_set(e, IABN_EDEVICE, "%s: copying back to the device failed",
                              p->op.what);
    }
    c->blocked += iabn_now() - t0;
    return rc;
}
