/* buckets.c: the data-parallel gradient all-reduce as nodes of the schedule
 * (issue 14, item 4).
 *
 * iabn_graph_grad_buckets() packs the trainable parameters' gradients into
 * buckets of about `bucket_bytes`, in the order the backward finishes them
 * (the schedule step of each gradient's last writer).  Each bucket gets
 *   - a buffer: an arena tensor "allreduce.bucket<k>", so the planner places
 *     it (and `iabn mem` reports it) like any activation;
 *   - a start node right after the step that writes its last gradient: it
 *     copies the gradients into the buffer and starts a non-blocking sum over
 *     the ranks (iabn_comm_iallreduce), which progresses on the
 *     communicator's thread while the rest of the backward runs;
 *   - a wait node at the end of the schedule: it waits for the sum and copies
 *     it back into the gradients.
 * The loss is normalised over the whole job (loss.c), so the sum is the
 * gradient of the job's mean loss.  With gradient accumulation over several
 * runs, iabn_graph_set_grad_sync(g, 0) turns the nodes into no-ops for all but
 * the last run of a step.  Without a communicator (or with one rank) the
 * nodes do nothing either. */
#include "graph/graph_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct bucket_p {
    int bucket;     /* index into g->buckets */
    int key;        /* communicator request key */
} bucket_p;

static int grad_ptrs_ok(const iabn_graph *g, const iabn_grad_bucket *bk, iabn_err *e)
{
    for (int i = 0; i < bk->count; i++) {
        const iabn_param *p = iabn_store_get(g->store, g->bucket_members[bk->first + i]);
        if (!p->grad) return iabn_err_set(e, IABN_EINVAL, "%s has no gradient storage", p->name);
    }
    return 0;
}

/* Where the bucket's values travel: the arena buffer itself (CPU; CUDA with
 * NCCL, packed by device copies) or a host staging buffer (CUDA over MPI). */
static int use_host(const iabn_graph *g, const iabn_bind *b)
{
    return b->backend->kind != IABN_DEV_CPU && !iabn_comm_nccl_attached(g->comm);
}

/* Copies member i of the bucket between its gradient and the bucket (to_bucket) */
static int move(const iabn_graph *g, const iabn_bind *b, float *buf, const iabn_param *p,
                size_t off, int to_bucket, int host, iabn_err *e)
{
    size_t bytes = p->count * sizeof(float);
    const iabn_backend *be = b->backend;
    if (be->kind == IABN_DEV_CPU) {
        if (to_bucket) memcpy(buf + off, p->grad, bytes);
        else memcpy(p->grad, buf + off, bytes);
        return 0;
    }
    if (!host)
        return to_bucket ? iabn_comm_device_copy(g->comm, buf + off, p->grad, bytes, e)
                         : iabn_comm_device_copy(g->comm, p->grad, buf + off, bytes, e);
    int rc = to_bucket ? be->d2h(be->ctx, buf + off, p->grad, bytes)
                       : be->h2d(be->ctx, p->grad, buf + off, bytes);
    return rc ? iabn_err_set(e, IABN_EDEVICE, "copying the gradient of %s failed", p->name) : 0;
}

/* out: bucket buffer */
static int start_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    bucket_p P;
    memcpy(&P, n->params, sizeof P);
    iabn_comm *c = g->comm;
    if (iabn_comm_size(c) == 1 || g->grad_sync_off) return 0;
    const iabn_grad_bucket *bk = &g->buckets[P.bucket];
    if (grad_ptrs_ok(g, bk, e)) return e->code;
    int host = use_host(g, b);
    float *buf = host ? iabn_comm_staging(c, P.key, bk->elems * sizeof(float)) : b->out[0];
    if (!buf) return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory staging", n->name);
    size_t off = 0;
    for (int i = 0; i < bk->count; i++) {
        const iabn_param *p = iabn_store_get(g->store, g->bucket_members[bk->first + i]);
        if (move(g, b, buf, p, off, 1, host, e)) return e->code;
        off += p->count;
    }
    return iabn_comm_iallreduce(c, P.key, host ? NULL : b->backend, buf, off, IABN_COMM_F32,
                                n->name, e);
}

/* in: bucket buffer */
static int wait_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    bucket_p P;
    memcpy(&P, n->params, sizeof P);
    iabn_comm *c = g->comm;
    if (iabn_comm_size(c) == 1 || g->grad_sync_off) return 0;
    int rc = iabn_comm_wait(c, P.key, e);
    if (rc) return rc;
    const iabn_grad_bucket *bk = &g->buckets[P.bucket];
    int host = use_host(g, b);
    float *buf = host ? iabn_comm_staging(c, P.key, bk->elems * sizeof(float)) : b->in[0];
    size_t off = 0;
    for (int i = 0; i < bk->count; i++) {
        iabn_param *p = iabn_store_get(g->store, g->bucket_members[bk->first + i]);
        if (move(g, b, buf, p, off, 0, host, e)) return e->code;
        off += p->count;
    }
    return 0;
}

/* One C function per node serves both backends: it moves bytes through the
 * backend's vtable and the communicator only. */
static const iabn_op_def op_start = {.name = "allreduce_start", .run = start_run};
static const iabn_op_def op_wait = {.name = "allreduce_wait", .run = wait_run};

typedef struct grad_pos {
    int sid, step;
} grad_pos;

static int by_step(const void *a, const void *b)
{
    const grad_pos *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return x->sid < y->sid ? -1 : x->sid > y->sid;
}

int iabn_graph_grad_buckets(iabn_graph *g, size_t bucket_bytes, iabn_err *e)
{
    if (!g->finalized)
        return iabn_err_set(e, IABN_EINVAL, "gradient buckets are added to a finalized graph");
    if (g->nbuckets) return iabn_err_set(e, IABN_EINVAL, "the graph has its buckets already");
    if (bucket_bytes < 4) bucket_bytes = 4;
    /* last writer of every trainable gradient */
    grad_pos *gp = malloc((size_t)(g->nt + 1) * sizeof *gp);
    int ng = 0;
    if (!gp) return iabn_err_set(e, IABN_ENOMEM, "out of memory planning gradient buckets");
    for (int t = 0; t < g->nt; t++) {
        if (g->t[t].kind != IABN_T_GRAD) continue;
        const iabn_param *p = iabn_store_get(g->store, g->t[t].store_id);
        if (p->frozen) continue;
        int last = -1;
        for (int s = 0; s < g->ns; s++) {
            const iabn_node *n = &g->n[g->sched[s]];
            for (int j = 0; j < n->nout; j++)
                if (n->out[j] == t) last = s;
        }
        if (last < 0) continue; /* no gradient flows to it in this graph */
        gp[ng].sid = g->t[t].store_id;
        gp[ng].step = last;
        ng++;
    }
    qsort(gp, (size_t)ng, sizeof *gp, by_step);
    g->bucket_members = malloc((size_t)(ng + 1) * sizeof *g->bucket_members);
    g->buckets = calloc((size_t)(ng + 1), sizeof *g->buckets);
    if (!g->bucket_members || !g->buckets) {
        free(gp);
        return iabn_err_set(e, IABN_ENOMEM, "out of memory planning gradient buckets");
    }
    /* greedy packing in finishing order */
    int nb = 0;
    size_t cur = 0;
    for (int i = 0; i < ng; i++) {
        const iabn_param *p = iabn_store_get(g->store, gp[i].sid);
        size_t bytes = p->count * sizeof(float);
        if (nb == 0 || (cur > 0 && cur + bytes > bucket_bytes)) {
            g->buckets[nb].first = i;
            nb++;
            cur = 0;
        }
        iabn_grad_bucket *bk = &g->buckets[nb - 1];
        g->bucket_members[i] = gp[i].sid;
        bk->count++;
        bk->elems += p->count;
        bk->ready_step = gp[i].step;
        cur += bytes;
    }
    free(gp);
    if (nb > IABN_COMM_MAX_PENDING) {
        free(g->buckets);
        free(g->bucket_members);
        g->buckets = NULL;
        g->bucket_members = NULL;
        return iabn_err_set(e, IABN_EINVAL,
                            "%d gradient buckets of %zu bytes: at most %d can be in flight; "
                            "use larger buckets",
                            nb, bucket_bytes, IABN_COMM_MAX_PENDING);
    }
    g->nbuckets = nb;
    /* nodes: starts right after their ready step (from the last bucket back,
     * so earlier positions stay valid), waits at the end in bucket order */
    iabn_phase saved = g->building_phase;
    g->building_phase = IABN_PHASE_BWD;
    int *buf = malloc((size_t)(nb + 1) * sizeof *buf);
    int *start = malloc((size_t)(nb + 1) * sizeof *start);
    if (!buf || !start) {
        free(buf);
        free(start);
        return iabn_err_set(e, IABN_ENOMEM, "out of memory adding gradient buckets");
    }
    for (int k = 0; k < nb; k++) {
        char name[IABN_NAME_LEN];
        snprintf(name, sizeof name, "allreduce.bucket%d", k);
        int shape[1] = {(int)g->buckets[k].elems};
        buf[k] = iabn_graph_tensor(g, name, IABN_F32, 1, shape);
        bucket_p P = {k, k};
        start[k] = iabn_graph_node(g, &op_start, name, 0, NULL, 1, &buf[k], &P, sizeof P);
    }
    for (int k = 0; k < nb; k++) {
        char name[IABN_NAME_LEN];
        snprintf(name, sizeof name, "allreduce.bucket%d.wait", k);
        bucket_p P = {k, k};
        iabn_graph_node(g, &op_wait, name, 1, &buf[k], 0, NULL, &P, sizeof P);
    }
    g->building_phase = saved;
    int rc = 0;
    if (!iabn_graph_ok(g)) rc = iabn_err_set(e, g->err.code, "%s", g->err.msg);
    for (int k = nb - 1; k >= 0 && !rc; k--)
        rc = iabn_graph_insert_before(g, start[k], g->buckets[k].ready_step + 1);
    if (rc && !e->code) iabn_err_set(e, rc, "reordering the gradient buckets failed");
    free(buf);
    free(start);
    return rc;
}

int iabn_graph_nbuckets(const iabn_graph *g) { return g->nbuckets; }

size_t iabn_graph_bucket_bytes(const iabn_graph *g, int k)
{
    return k >= 0 && k < g->nbuckets ? g->buckets[k].elems * sizeof(float) : 0;
}

void iabn_graph_set_grad_sync(iabn_graph *g, int on) { g->grad_sync_off = !on; }
