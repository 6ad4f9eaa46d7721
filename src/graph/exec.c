/* exec.c: the executor.  Binds one arena of exactly the planned size, one io
 * region, and the store's persistent tensors, then walks the schedule calling
 * each node's kernel for the store's backend.
 *
 * Staged inputs (iabn_exec_stage) are double-buffered on backends with a copy
 * stream, so the next batch's upload overlaps this batch's compute.
 *
 * Offloaded tensors (OFFLOAD policy, offload.c): on a backend with a copy
 * stream the offload node queues the device-to-host copy after an event
 * recorded on the compute stream, and the compute stream waits for that copy
 * at the end of the last step of the tensor's device buffer (the planner's
 * lifetime), so the slot is never reused under a copy in flight; a prefetch
 * queues the copy back, and the first node reading the prefetched tensor
 * waits for it.  Elsewhere both are plain copies.  The host pool (pinned on
 * CUDA) is allocated here once, at the size the plan gives.
 *
 * Absorbed steps (iabn_op_def.absorb, absorb_prev): where the graph's fusion
 * flag is on, a node whose next step reads its first output only to write
 * over it in place (standard BN, then its activation) may do that step's
 * work in its own pass; and a node may do the work of the step before it
 * where it alone reads that step's output (standard BN's backward, the
 * activation's before it).  The absorbed step then runs nothing.  Decided
 * here, from the plan's buffers, so the graph and its plan are the same
 * either way; check mode runs every node on its own.
 *
 * Check mode (iabn_exec_set_check, or IABN_CHECK=1): after every node, the
 * guard bytes of every live buffer are verified and float outputs are scanned
 * for NaN/Inf, so a fault is reported at the node that caused it. */
#include "graph/graph_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD_BYTE 0xA5
#define MAX_STAGED 4

/* A double-buffered input: buf[cur] is bound, buf[1 - cur] receives the next
 * run's bytes.  freed[i] is recorded on the compute stream after each run
 * that bound buf[i], so a copy into it waits for that run only, never for
 * the run in flight. */
typedef struct staged {
    int t;
    void *buf[2];
    int cur;
    void *freed[2];
    void *ready;          /* recorded by the copy stream when the bytes landed */
    int pending;          /* a copy waits to be swapped in by the next run   */
} staged;

struct iabn_exec {
    iabn_graph *g;
    const iabn_plan *p;
    const iabn_backend *be;
    unsigned char *arena;
    unsigned char *io;
    void **ptr;
    uint64_t seed, step;
    int check;
    double *times;       /* per schedule step, seconds, when profiling */
    staged st[MAX_STAGED];
    int nst;
    size_t staging_bytes;
    /* offload */
    unsigned char *host;  /* host pool */
    int async;            /* the backend has a copy stream */
    void **ev_after;      /* per step: compute-stream mark the copy waits for */
    void **ev_done;       /* per step: the copy queued there has landed       */
    int *wait_off;        /* CSR: after step s, wait for the offload copies    */
    int *wait_idx;        /*   queued at steps wait_idx[wait_off[s] .. s+1)    */
    int *pf_pending;      /* tensor -> prefetch step + 1 whose copy is unwaited */
    int noffload;
    int dirty;            /* a run failed midway: copies may be in flight      */
    /* per step: ABSORB_NEXT / ABSORB_PREV its node does that neighbour's
     * work too, ABSORBED its work is done by a neighbour (NULL: none) */
    unsigned char *absorb;
    int nabsorbed;
};

enum { ABSORB_NEXT = 1, ABSORBED, ABSORB_PREV };

/* Whether buffers a and b of the arena are apart, or (same_ok) the same. */
static int apart(const iabn_exec *ex, int a, int b, int same_ok)
{
    const iabn_tensor *ta = &ex->g->t[a], *tb = &ex->g->t[b];
    if (ta->kind != IABN_T_ACT || tb->kind != IABN_T_ACT) return 1;
    const unsigned char *pa = ex->ptr[a], *pb = ex->ptr[b];
    if (same_ok && pa == pb && ta->nbytes == tb->nbytes) return 1;
    return pa + ta->nbytes <= pb || pb + tb->nbytes <= pa;
}

/* Whether n can do the work of nx, the step after it, in its own run: nx
 * reads only n's first output and writes its own first output over it. */
static int can_absorb_next(const iabn_exec *ex, const iabn_node *n, const iabn_node *nx)
{
    return n->op->absorb && nx->nin == 1 && nx->nout >= 1 && nx->in[0] == n->out[0] &&
           nx->inplace[0] == 0 && ex->ptr[nx->out[0]] == ex->ptr[n->out[0]] &&
           n->op->absorb(ex->g, n, nx);
}

/* Whether n (the step after prev) can do prev's work in its own run: it
 * alone reads prev's only output, and none of its outputs or its scratch
 * overlaps prev's inputs, which it reads in prev's place, other than
 * exactly. */
static int can_absorb_prev(const iabn_exec *ex, const iabn_node *n, const iabn_node *prev)
{
    const iabn_graph *g = ex->g;
    int y = prev->out[0];
    if (!n->op->absorb_prev || prev->nout != 1 || g->t[y].kind != IABN_T_ACT ||
        !n->op->absorb_prev(g, n, prev))
        return 0;
    for (int q = 0; q < g->ns; q++) {
        const iabn_node *r = &g->n[g->sched[q]];
        for (int k = 0; k < r->nin; k++)
            if (r->in[k] == y && r != n) return 0;
    }
    for (int k = 0; k < prev->nin; k++) {
        for (int j = 0; j < n->nout; j++)
            if (!apart(ex, n->out[j], prev->in[k], 1)) return 0;
        if (n->scratch >= 0 && !apart(ex, n->scratch, prev->in[k], 0)) return 0;
    }
    return 1;
}

/* The pairs of steps where one node does both's work: the first absorbs the
 * next (can_absorb_next), or the second the one before it
 * (can_absorb_prev). */
static int absorb_setup(iabn_exec *ex, iabn_err *e)
{
    const iabn_graph *g = ex->g;
    if (!iabn_graph_fusion(g)) return 0;
    for (int s = 0; s + 1 < g->ns; s++) {
        const iabn_node *n = &g->n[g->sched[s]], *nx = &g->n[g->sched[s + 1]];
        if (ex->absorb && ex->absorb[s]) continue;
        int next = can_absorb_next(ex, n, nx);
        if (!next && !can_absorb_prev(ex, nx, n)) continue;
        if (!ex->absorb && !(ex->absorb = calloc((size_t)g->ns, 1)))
            return iabn_err_set(e, IABN_ENOMEM, "out of memory creating the executor");
        ex->absorb[s] = next ? ABSORB_NEXT : ABSORBED;
        ex->absorb[s + 1] = next ? ABSORBED : ABSORB_PREV;
        ex->nabsorbed++;
    }
    return 0;
}

static int offload_setup(iabn_exec *ex, iabn_err *e)
{
    const iabn_graph *g = ex->g;
    const iabn_plan *p = ex->p;
    const iabn_backend *be = ex->be;
    int ns = g->ns;
    for (int s = 0; s < ns; s++) {
        const iabn_op_def *op = g->n[g->sched[s]].op;
        ex->noffload += op == &iabn_op_offload || op == &iabn_op_prefetch;
    }
    if (!ex->noffload) return 0;
    ex->async = be->d2h_async && be->h2d_async && be->event_new;
    for (int s = 0; s < ns; s++) {
        const iabn_node *n = &g->n[g->sched[s]];
        if (n->op == &iabn_op_offload && g->t[n->out[0]].dtype == IABN_BF16 &&
            !(be->d2h_bf16 && be->h2d_bf16))
            return iabn_err_set(e, IABN_EINVAL, "%s: the %s backend has no bfloat16 host copies",
                                n->name, be->name);
    }
    size_t hb = p->host_bytes ? p->host_bytes : 1;
    ex->host = be->host_alloc ? be->host_alloc(be->ctx, hb) : iabn_aligned_alloc(256, hb);
    if (!ex->host)
        return iabn_err_set(e, IABN_ENOMEM, "cannot allocate the host pool for offloaded "
                                            "activations (%zu bytes) on %s",
                            p->host_bytes, be->name);
    ex->ev_after = calloc((size_t)ns, sizeof *ex->ev_after);
    ex->ev_done = calloc((size_t)ns, sizeof *ex->ev_done);
    ex->wait_off = calloc((size_t)ns + 2, sizeof *ex->wait_off);
    ex->wait_idx = calloc((size_t)ns + 1, sizeof *ex->wait_idx);
    ex->pf_pending = calloc((size_t)g->nt, sizeof *ex->pf_pending);
    if (!ex->ev_after || !ex->ev_done || !ex->wait_off || !ex->wait_idx || !ex->pf_pending)
        return iabn_err_set(e, IABN_ENOMEM, "out of memory setting up offload");
    /* wait step of an offload queued at s: the last step of its device buffer */
    for (int s = 0; s < ns; s++)
        if (g->n[g->sched[s]].op == &iabn_op_offload)
            ex->wait_off[p->last[p->group[g->n[g->sched[s]].in[0]]] + 1]++;
    for (int s = 0; s < ns; s++) ex->wait_off[s + 1] += ex->wait_off[s];
    int *fill = calloc((size_t)ns + 1, sizeof *fill);
    if (!fill) return iabn_err_set(e, IABN_ENOMEM, "out of memory setting up offload");
    for (int s = 0; s < ns; s++) {
        const iabn_node *n = &g->n[g->sched[s]];
        if (n->op != &iabn_op_offload && n->op != &iabn_op_prefetch) continue;
        if (n->op == &iabn_op_offload) {
            int w = p->last[p->group[n->in[0]]];
            ex->wait_idx[ex->wait_off[w] + fill[w]++] = s;
        }
        if (!ex->async) continue;
        ex->ev_after[s] = be->event_new(be->ctx);
        ex->ev_done[s] = be->event_new(be->ctx);
        if (!ex->ev_after[s] || !ex->ev_done[s]) {
            free(fill);
            return iabn_err_set(e, IABN_EDEVICE, "cannot create the copy events of %s on %s",
                                n->name, be->name);
        }
    }
    free(fill);
    return 0;
}

static void offload_free(iabn_exec *ex)
{
    const iabn_backend *be = ex->be;
    if (!ex->noffload) return;
    be->sync(be->ctx); /* no copy may still touch what is freed */
    for (int s = 0; ex->ev_after && s < ex->g->ns; s++) {
        if (ex->ev_after[s]) be->event_free(be->ctx, ex->ev_after[s]);
        if (ex->ev_done[s]) be->event_free(be->ctx, ex->ev_done[s]);
    }
    if (ex->host) {
        if (be->host_alloc) be->host_free(be->ctx, ex->host);
        else iabn_aligned_free(ex->host);
    }
    free(ex->ev_after);
    free(ex->ev_done);
    free(ex->wait_off);
    free(ex->wait_idx);
    free(ex->pf_pending);
}

/* Runs an offload or prefetch node at step s. */
static int offload_step(iabn_exec *ex, int s, const iabn_node *n, iabn_err *e)
{
    const iabn_backend *be = ex->be;
    int x = n->in[0], y = n->out[0];
    size_t bytes = ex->g->t[x].nbytes;
    int out = n->op == &iabn_op_offload;
    if (ex->g->t[out ? y : x].dtype == IABN_BF16) { /* float32 <-> bfloat16 on the way */
        int rc = 0;
        size_t count = ex->g->t[y].nbytes / (out ? 2 : 4);
        if (ex->async && be->record(be->ctx, ex->ev_after[s])) rc = 1;
        void *after = ex->async ? ex->ev_after[s] : NULL, *done = ex->async ? ex->ev_done[s] : NULL;
        if (!rc) rc = out ? be->d2h_bf16(be->ctx, ex->ptr[y], ex->ptr[x], count, after, done)
                          : be->h2d_bf16(be->ctx, ex->ptr[y], ex->ptr[x], count, after, done);
        if (rc)
            return iabn_err_set(e, IABN_EDEVICE, "copying %s %s (bfloat16) failed",
                                ex->g->t[x].name, out ? "to the host" : "back to the device");
        if (!out && ex->async) ex->pf_pending[y] = s + 1;
        return 0;
    }
    if (!ex->async) {
        int rc = out ? be->d2h(be->ctx, ex->ptr[y], ex->ptr[x], bytes)
                     : be->h2d(be->ctx, ex->ptr[y], ex->ptr[x], bytes);
        return rc ? iabn_err_set(e, IABN_EDEVICE, "copying %s %s failed", ex->g->t[x].name,
                                 out ? "to the host" : "back to the device")
                  : 0;
    }
    if (be->record(be->ctx, ex->ev_after[s]))
        return iabn_err_set(e, IABN_EDEVICE, "recording the event before copying %s failed",
                            ex->g->t[x].name);
    int rc = out ? be->d2h_async(be->ctx, ex->ptr[y], ex->ptr[x], bytes, ex->ev_after[s],
                                 ex->ev_done[s])
                 : be->h2d_async(be->ctx, ex->ptr[y], ex->ptr[x], bytes, ex->ev_after[s],
                                 ex->ev_done[s]);
    if (rc)
        return iabn_err_set(e, IABN_EDEVICE, "queueing the copy of %s %s failed",
                            ex->g->t[x].name, out ? "to the host" : "back to the device");
    if (!out) ex->pf_pending[y] = s + 1;
    return 0;
}

/* Before a node: prefetched inputs must have landed. */
static int offload_wait_inputs(iabn_exec *ex, const iabn_node *n, iabn_err *e)
{
    for (int k = 0; k < n->nin; k++) {
        int x = n->in[k], s = ex->pf_pending[x] - 1;
        if (s < 0) continue;
        ex->pf_pending[x] = 0;
        if (ex->be->wait(ex->be->ctx, ex->ev_done[s]))
            return iabn_err_set(e, IABN_EDEVICE, "the copy of %s back to the device failed",
                                ex->g->t[x].name);
    }
    return 0;
}

/* After step s: device buffers whose life ends here wait for their copy out. */
static int offload_wait_after(iabn_exec *ex, int s, iabn_err *e)
{
    if (!ex->async) return 0;
    for (int i = ex->wait_off[s]; i < ex->wait_off[s + 1]; i++) {
        int q = ex->wait_idx[i];
        if (ex->be->wait(ex->be->ctx, ex->ev_done[q]))
            return iabn_err_set(e, IABN_EDEVICE, "the copy of %s to the host failed",
                                ex->g->t[ex->g->n[ex->g->sched[q]].in[0]].name);
    }
    return 0;
}

int iabn_exec_new(iabn_graph *g, const iabn_plan *p, iabn_exec **out, iabn_err *e)
{
    if (iabn_store_is_virtual(g->store))
        return iabn_err_set(e, IABN_EINVAL, "the graph's store holds shapes only (planning); "
                                            "an executor needs a real store");
    iabn_exec *ex = calloc(1, sizeof *ex);
    if (!ex) return iabn_err_set(e, IABN_ENOMEM, "out of memory creating the executor");
    ex->g = g;
    ex->p = p;
    ex->be = iabn_store_backend(g->store);
    ex->ptr = calloc((size_t)g->nt, sizeof *ex->ptr);
    const char *chk = getenv("IABN_CHECK");
    ex->check = chk && chk[0] == '1';
    if (!ex->ptr) {
        free(ex);
        return iabn_err_set(e, IABN_ENOMEM, "out of memory creating the executor");
    }
    ex->arena = ex->be->alloc(ex->be->ctx, p->arena_bytes ? p->arena_bytes : 1);
    ex->io = ex->be->alloc(ex->be->ctx, p->io_bytes ? p->io_bytes : 1);
    if (!ex->arena || !ex->io) {
        size_t need = p->arena_bytes + p->io_bytes;
        iabn_exec_free(ex);
        return iabn_err_set(e, IABN_ENOMEM,
                            "cannot allocate the planned arena (%zu bytes) and io (%zu bytes) "
                            "on %s: %zu bytes needed",
                            p->arena_bytes, p->io_bytes, ex->be->name, need);
    }
    /* Uninitialised reads must show: NaN bytes, never zeros that hide them. */
    ex->be->fill(ex->be->ctx, ex->arena, 0xFF, p->arena_bytes);
    ex->be->fill(ex->be->ctx, ex->io, 0, p->io_bytes);
    for (int t = 0; t < g->nt; t++) {
        const iabn_tensor *tt = &g->t[t];
        iabn_param *par = tt->store_id >= 0 ? iabn_store_get(g->store, tt->store_id) : NULL;
        switch (tt->kind) {
        case IABN_T_ACT: ex->ptr[t] = ex->arena + p->offset[t]; break;
        case IABN_T_PARAM:
        case IABN_T_STATE: ex->ptr[t] = par->data; break;
        case IABN_T_GRAD: ex->ptr[t] = par->grad; break;
        case IABN_T_INPUT:
        case IABN_T_OUTPUT: ex->ptr[t] = ex->io + p->io_offset[t]; break;
        case IABN_T_HOST: break;
        }
        if (tt->kind == IABN_T_GRAD && !par->grad) {
            iabn_exec_free(ex);
            return iabn_err_set(e, IABN_EINVAL, "%s has no gradient storage", tt->name);
        }
    }
    int rc = offload_setup(ex, e);
    if (rc) {
        iabn_exec_free(ex);
        return rc;
    }
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].kind == IABN_T_HOST) ex->ptr[t] = ex->host + p->host_offset[t];
    if ((rc = absorb_setup(ex, e))) {
        iabn_exec_free(ex);
        return rc;
    }
    *out = ex;
    return 0;
}

void iabn_exec_free(iabn_exec *ex)
{
    if (!ex) return;
    if (ex->nst) ex->be->sync(ex->be->ctx); /* no copy may still land in what is freed */
    for (int i = 0; i < ex->nst; i++) {
        staged *st = &ex->st[i];
        /* buf[0] / buf[1]: one is the io slot, the other our allocation */
        void *io_slot = ex->io + ex->p->io_offset[st->t];
        for (int k = 0; k < 2; k++) {
            if (st->buf[k] && st->buf[k] != io_slot) ex->be->free(ex->be->ctx, st->buf[k]);
            if (st->freed[k]) ex->be->event_free(ex->be->ctx, st->freed[k]);
        }
        if (st->ready) ex->be->event_free(ex->be->ctx, st->ready);
    }
    offload_free(ex);
    if (ex->arena) ex->be->free(ex->be->ctx, ex->arena);
    if (ex->io) ex->be->free(ex->be->ctx, ex->io);
    free(ex->ptr);
    free(ex->times);
    free(ex->absorb);
    free(ex);
}

int iabn_exec_absorbed(const iabn_exec *ex) { return ex->check ? 0 : ex->nabsorbed; }

int iabn_exec_profile(iabn_exec *ex, int on)
{
    free(ex->times);
    ex->times = NULL;
    if (on) {
        ex->times = calloc((size_t)ex->g->ns, sizeof *ex->times);
        if (!ex->times) return IABN_ENOMEM;
    }
    return 0;
}

const double *iabn_exec_step_times(const iabn_exec *ex) { return ex->times; }

void *iabn_exec_ptr(iabn_exec *ex, int t) { return ex->ptr[t]; }
void iabn_exec_set_seed(iabn_exec *ex, uint64_t seed)
{
    ex->seed = seed;
    ex->step = 0;
}

void iabn_exec_set_step(iabn_exec *ex, uint64_t step) { ex->step = step; }
uint64_t iabn_exec_step(const iabn_exec *ex) { return ex->step; }
size_t iabn_exec_arena_bytes(const iabn_exec *ex) { return ex->p->arena_bytes; }
void iabn_exec_set_check(iabn_exec *ex, int on) { ex->check = on; }

int iabn_exec_set(iabn_exec *ex, int t, const void *host, size_t bytes, iabn_err *e)
{
    if (bytes != ex->g->t[t].nbytes)
        return iabn_err_set(e, IABN_EINVAL, "%s holds %zu bytes, %zu given", ex->g->t[t].name,
                            ex->g->t[t].nbytes, bytes);
    if (ex->be->h2d(ex->be->ctx, ex->ptr[t], host, bytes))
        return iabn_err_set(e, IABN_EDEVICE, "copying %s to the device failed", ex->g->t[t].name);
    return 0;
}

int iabn_exec_get(iabn_exec *ex, int t, void *host, size_t bytes, iabn_err *e)
{
    if (bytes != ex->g->t[t].nbytes)
        return iabn_err_set(e, IABN_EINVAL, "%s holds %zu bytes, %zu asked", ex->g->t[t].name,
                            ex->g->t[t].nbytes, bytes);
    if (ex->be->d2h(ex->be->ctx, host, ex->ptr[t], bytes))
        return iabn_err_set(e, IABN_EDEVICE, "copying %s from the device failed",
                            ex->g->t[t].name);
    return 0;
}

static int stage_fail(iabn_exec *ex, int t, const char *what, iabn_err *e)
{
    return iabn_err_set(e, IABN_EDEVICE, "staging %s: %s", ex->g->t[t].name, what);
}

/* The staging entry of input t, created on first use. */
static int stage_entry(iabn_exec *ex, int t, staged **out, iabn_err *e)
{
    for (int i = 0; i < ex->nst; i++)
        if (ex->st[i].t == t) return *out = &ex->st[i], 0;
    if (ex->nst == MAX_STAGED)
        return iabn_err_set(e, IABN_EINVAL, "staging %s: at most %d inputs can be staged",
                            ex->g->t[t].name, MAX_STAGED);
    const iabn_backend *be = ex->be;
    staged *st = &ex->st[ex->nst];
    memset(st, 0, sizeof *st);
    st->t = t;
    st->buf[0] = ex->ptr[t];
    st->buf[1] = be->alloc(be->ctx, ex->g->t[t].nbytes);
    st->freed[0] = be->event_new(be->ctx);
    st->freed[1] = be->event_new(be->ctx);
    st->ready = be->event_new(be->ctx);
    ex->nst++; /* from here iabn_exec_free releases whatever was made */
    if (!st->buf[1])
        return iabn_err_set(e, IABN_ENOMEM, "staging %s: cannot allocate its second buffer "
                                            "(%zu bytes)", ex->g->t[t].name, ex->g->t[t].nbytes);
    if (!st->freed[0] || !st->freed[1] || !st->ready)
        return stage_fail(ex, t, "cannot create its events", e);
    ex->staging_bytes += ex->g->t[t].nbytes;
    *out = st;
    return 0;
}

int iabn_exec_stage(iabn_exec *ex, int t, const void *host, size_t bytes, iabn_err *e)
{
    const iabn_backend *be = ex->be;
    const iabn_tensor *tt = &ex->g->t[t];
    if (tt->kind != IABN_T_INPUT)
        return iabn_err_set(e, IABN_EINVAL, "staging %s: only graph inputs can be staged",
                            tt->name);
    if (!be->h2d_async) return iabn_exec_set(ex, t, host, bytes, e);
    if (bytes != tt->nbytes)
        return iabn_err_set(e, IABN_EINVAL, "%s holds %zu bytes, %zu given", tt->name, tt->nbytes,
                            bytes);
    staged *st = NULL;
    int rc = stage_entry(ex, t, &st, e);
    if (rc) return rc;
    if (st->pending)
        return iabn_err_set(e, IABN_EINVAL, "staging %s: the input staged before has not been "
                                            "consumed by a run yet", tt->name);
    int k = 1 - st->cur;
    if (be->h2d_async(be->ctx, st->buf[k], host, bytes, st->freed[k], st->ready))
        return stage_fail(ex, t, "the asynchronous copy failed", e);
    st->pending = 1;
    return 0;
}

size_t iabn_exec_staging_bytes(const iabn_exec *ex) { return ex->staging_bytes; }

/* Before a run: staged inputs whose copy was queued are swapped in (the
 * compute stream waits for their copy). */
static int stage_swap_in(iabn_exec *ex, iabn_err *e)
{
    for (int i = 0; i < ex->nst; i++) {
        staged *st = &ex->st[i];
        if (!st->pending) continue;
        if (ex->be->wait(ex->be->ctx, st->ready))
            return stage_fail(ex, st->t, "waiting for its copy failed", e);
        st->cur = 1 - st->cur;
        ex->ptr[st->t] = st->buf[st->cur];
        st->pending = 0;
    }
    return 0;
}

/* After a run: the buffers it bound are free once the compute stream passes here. */
static int stage_mark_used(iabn_exec *ex, iabn_err *e)
{
    for (int i = 0; i < ex->nst; i++) {
        staged *st = &ex->st[i];
        if (ex->be->record(ex->be->ctx, st->freed[st->cur]))
            return stage_fail(ex, st->t, "recording its release failed", e);
    }
    return 0;
}

/* Guard bytes of groups starting at step s are (re)armed before the step:
 * earlier groups that shared the address range may have written over them. */
static void arm_guards(iabn_exec *ex, int s)
{
    const iabn_plan *p = ex->p;
    for (int t = 0; t < p->ntensors; t++)
        if (p->group[t] == t && p->first[t] == s)
            ex->be->fill(ex->be->ctx, ex->arena + p->offset[t] + ex->g->t[t].nbytes, GUARD_BYTE,
                         p->opts.guard);
}

static int check_step(iabn_exec *ex, int s, const iabn_node *n, iabn_err *e)
{
    const iabn_plan *p = ex->p;
    const iabn_graph *g = ex->g;
    unsigned char *buf = NULL;
    size_t cap = 0;
    int rc = 0;
    for (int t = 0; t < p->ntensors && p->opts.guard && !rc; t++) {
        if (p->group[t] != t || p->first[t] > s || p->last[t] < s) continue;
        size_t gb = p->opts.guard;
        if (gb > cap) {
            free(buf);
            buf = malloc(gb);
            cap = gb;
        }
        if (!buf) return iabn_err_set(e, IABN_ENOMEM, "out of memory checking guards");
        size_t nb = g->t[t].nbytes;
        for (int m = 0; m < p->ntensors; m++)
            if (p->group[m] == t && g->t[m].nbytes > nb) nb = g->t[m].nbytes;
        ex->be->d2h(ex->be->ctx, buf, ex->arena + p->offset[t] + nb, gb);
        for (size_t i = 0; i < gb; i++)
            if (buf[i] != GUARD_BYTE) {
                rc = iabn_err_set(e, IABN_EINVAL,
                                  "step %d (%s): guard bytes after %s overwritten at +%zu", s,
                                  n->name, g->t[t].name, i);
                break;
            }
    }
    for (int j = 0; j < n->nout && !rc; j++) {
        const iabn_tensor *o = &g->t[n->out[j]];
        if (o->dtype != IABN_F32) continue;
        size_t nb = o->nbytes;
        if (nb > cap) {
            free(buf);
            buf = malloc(nb);
            cap = nb;
        }
        if (!buf) return iabn_err_set(e, IABN_ENOMEM, "out of memory checking outputs");
        ex->be->d2h(ex->be->ctx, buf, ex->ptr[n->out[j]], nb);
        if (!iabn_all_finite(nb / 4, (const float *)buf))
            rc = iabn_err_set(e, IABN_ENUM, "step %d (%s): NaN or Inf in output %s", s, n->name,
                              o->name);
    }
    free(buf);
    return rc;
}

int iabn_exec_run(iabn_exec *ex, iabn_err *e)
{
    const iabn_graph *g = ex->g;
    if (ex->nst && stage_swap_in(ex, e)) return e->code;
    if (ex->noffload) {
        if (ex->dirty && ex->be->sync(ex->be->ctx))
            return iabn_err_set(e, IABN_EDEVICE, "%s: a copy of the failed run is still failing",
                                ex->be->name);
        memset(ex->pf_pending, 0, (size_t)g->nt * sizeof *ex->pf_pending);
        ex->dirty = 1; /* cleared when the run completes */
    }
    for (int s = 0; s < g->ns; s++) {
        const iabn_node *n = &g->n[g->sched[s]];
        if (ex->p->opts.guard) arm_guards(ex, s);
        if (ex->noffload) {
            int rc = 0;
            if (n->op == &iabn_op_offload || n->op == &iabn_op_prefetch) {
                double t0 = ex->times ? iabn_now() : 0;
                rc = offload_step(ex, s, n, e);
                if (ex->times) ex->times[s] = iabn_now() - t0;
            }
            if (!rc) rc = offload_wait_inputs(ex, n, e);
            if (!rc && (n->op == &iabn_op_offload || n->op == &iabn_op_prefetch))
                rc = offload_wait_after(ex, s, e);
            if (rc) return iabn_err_prefix(e, "step %d (%s): ", s, n->name);
            if (n->op == &iabn_op_offload || n->op == &iabn_op_prefetch) continue;
        }
        iabn_bind b;
        memset(&b, 0, sizeof b);
        for (int k = 0; k < n->nin; k++) b.in[k] = ex->ptr[n->in[k]];
        for (int j = 0; j < n->nout; j++) b.out[j] = ex->ptr[n->out[j]];
        if (n->scratch >= 0) {
            b.scratch = ex->ptr[n->scratch];
            b.scratch_bytes = g->t[n->scratch].nbytes;
        }
        b.backend = ex->be;
        b.seed = ex->seed;
        b.step = ex->step;
        int how = ex->absorb && !ex->check ? ex->absorb[s] : 0;
        int absorbed = how == ABSORBED; /* done by a neighbouring step */
        if (how == ABSORB_NEXT) b.next = &g->n[g->sched[s + 1]];
        if (how == ABSORB_PREV) {
            b.prev = &g->n[g->sched[s - 1]];
            for (int k = 0; k < b.prev->nin; k++) b.prev_in[k] = ex->ptr[b.prev->in[k]];
        }
        double t0 = ex->times ? iabn_now() : 0;
        int rc = absorbed ? 0 : n->op->run(g, n, &b, e);
        if (!rc && !absorbed && ex->be->node_done) rc = ex->be->node_done(ex->be->ctx, e);
        if (ex->times) {
            ex->be->sync(ex->be->ctx);
            ex->times[s] = absorbed ? 0 : iabn_now() - t0;
        }
        if (rc) return iabn_err_prefix(e, "step %d (%s): ", s, n->name);
        if (ex->noffload && offload_wait_after(ex, s, e))
            return iabn_err_prefix(e, "step %d (%s): ", s, n->name);
        if (ex->check && check_step(ex, s, n, e)) return e->code;
    }
    ex->dirty = 0;
    if (ex->nst && stage_mark_used(ex, e)) return e->code;
    ex->step++;
    return 0;
}
