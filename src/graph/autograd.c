/* autograd.c: backward construction and graph finalisation.
 *
 * iabn_graph_backward() walks the forward schedule in reverse and lets each
 * op emit its backward nodes; those nodes list the forward tensors they read,
 * which is all "saving" means here.  Gradient fan-in becomes add nodes.
 *
 * iabn_graph_finalize() then applies, in order:
 *  1. the RECOMPUTE storage policy: each such tensor read by the backward is
 *     rebuilt by a clone of its producer placed right before its first
 *     backward reader, and the backward reads the clone (recursively for
 *     recomputed inputs); the original dies after its last forward reader;
 *  2. the OFFLOAD storage policy (offload.c): a copy to the host after the
 *     producer, a prefetch before the first backward reader;
 *  3. copies before MUST in-place nodes whose input is still needed later (a
 *     residual shortcut) or is persistent: the copy is what gets overwritten;
 *     an op whose kernel can write elsewhere (in-place ABN) writes its output
 *     to a buffer of its own instead, the same memory in one pass fewer;
 *  4. the Winograd mode on's flags (winograd.c), then the layout pass
 *     (layout.c): which activations stay blocked;
 *  5. per-node scratch tensors (im2col buffers, workspaces), sized for those
 *     layouts;
 *  6. the Winograd mode auto's choice (winograd.c), which plans the graph
 *     and resizes the scratch of the nodes it gives the flag.
 */
#include "graph/graph_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int accumulate(iabn_graph *g, int *grad, int t, int c)
{
    if (g->t[t].view_of >= 0) {
        int base = g->t[t].view_of;
        char name[IABN_NAME_LEN];
        snprintf(name, sizeof name, "d.%.80s", g->t[base].name);
        int v = iabn_graph_view(g, c, name, g->t[base].nd, g->t[base].shape);
        if (v < 0) return -1;
        return accumulate(g, grad, base, v);
    }
    if (grad[t] < 0) {
        grad[t] = c;
        return 0;
    }
    char name[IABN_NAME_LEN];
    snprintf(name, sizeof name, "d.%.80s+", g->t[t].name);
    int s = iabn_graph_tensor(g, name, IABN_F32, g->t[t].nd, g->t[t].shape);
    int in[2] = {grad[t], c};
    int n = iabn_graph_node(g, &iabn_op_add, "grad_accumulate", 2, in, 1, &s, NULL, 0);
    if (n < 0) return -1;
    iabn_graph_inplace(g, n, 0, 0, 0);
    grad[t] = s;
    return 0;
}

int iabn_graph_backward(iabn_graph *g, int loss, iabn_err *e)
{
    if (g->err.code) {
        *e = g->err;
        return e->code;
    }
    if (g->mode != IABN_TRAIN)
        return iabn_err_set(e, IABN_EINVAL, "backward asked of a graph built for evaluation");
    if (g->has_backward)
        return iabn_err_set(e, IABN_EINVAL, "backward already built for this graph");
    if (loss < 0 || loss >= g->nt || g->t[loss].producer < 0)
        return iabn_err_set(e, IABN_EINVAL, "the loss is not a computed tensor");
    int nt0 = g->nt, nfwd = g->ns;
    int *grad = malloc((size_t)nt0 * sizeof *grad);
    int *fsched = malloc((size_t)nfwd * sizeof *fsched);
    if (!grad || !fsched) {
        free(grad);
        free(fsched);
        return iabn_err_set(e, IABN_ENOMEM, "out of memory building the backward");
    }
    for (int i = 0; i < nt0; i++) grad[i] = -1;
    memcpy(fsched, g->sched, (size_t)nfwd * sizeof *fsched);
    grad[loss] = IABN_GRAD_ONE;
    g->building_phase = IABN_PHASE_BWD;
    int rc = 0; /* e may hold an old message: only rc says whether this call failed */
    for (int s = nfwd - 1; s >= 0 && !g->err.code && !rc; s--) {
        int id = fsched[s];
        iabn_node n = g->n[id]; /* a copy: adding nodes may move the array */
        int any = 0, needs = 0;
        int dout[IABN_MAX_OUT], din[IABN_MAX_IN];
        for (int j = 0; j < n.nout; j++) {
            dout[j] = n.out[j] < nt0 ? grad[n.out[j]] : -1;
            any |= dout[j] != -1;
        }
        for (int k = 0; k < n.nin; k++) {
            din[k] = -1;
            needs |= g->t[n.in[k]].requires_grad;
        }
        if (!any || !needs || !n.op->backward) continue;
        g->building_fwd = id;
        if ((rc = n.op->backward(g, id, dout, din, e))) break;
        for (int k = 0; k < n.nin; k++) {
            if (din[k] < 0) continue;
            iabn_tkind kind = g->t[n.in[k]].kind;
            if (kind == IABN_T_ACT || kind == IABN_T_OUTPUT || kind == IABN_T_INPUT) {
                if ((rc = accumulate(g, grad, n.in[k], din[k]))) break;
            } else if (g->t[n.in[k]].kind == IABN_T_PARAM) {
                /* a parameter used as data (tests, adversarial inputs): its
                 * gradient is added into the store like any other. */
                int gt = iabn_graph_param_grad(g, n.in[k]);
                int ins[2] = {gt, din[k]};
                if ((rc = (iabn_graph_node(g, &iabn_op_add, "grad_accumulate", 2, ins, 1, &gt, NULL, 0) < 0)))
                    break;
            }
        }
    }
    /* gradients of the inputs that asked for one: graph outputs, so that they
     * live to the end of the run; a view or a tensor already output is
     * copied out first (its storage belongs to another tensor) */
    for (int t = 0; t < nt0 && !rc && !g->err.code; t++) {
        if (g->t[t].kind != IABN_T_INPUT || !g->t[t].requires_grad || grad[t] < 0) continue;
        int d = grad[t];
        if (g->t[d].kind != IABN_T_ACT || g->t[d].view_of >= 0) {
            char name[IABN_NAME_LEN];
            snprintf(name, sizeof name, "d.%.80s", g->t[t].name);
            int c = iabn_graph_tensor(g, name, IABN_F32, g->t[t].nd, g->t[t].shape);
            if (iabn_graph_node(g, &iabn_op_copy, name, 1, &d, 1, &c, NULL, 0) < 0) break;
            d = c;
        }
        iabn_graph_mark_output(g, d);
        g->t[t].grad = d;
    }
    g->building_phase = IABN_PHASE_FWD;
    g->building_fwd = -1;
    free(grad);
    free(fsched);
    if (g->err.code) {
        *e = g->err; /* the graph's record names the layer */
        return e->code;
    }
    if (rc) return iabn_err_set(e, rc < 0 ? rc : IABN_EINVAL, "%s", e->msg[0] ? e->msg : "backward failed");
    g->has_backward = 1;
    return 0;
}

/* ---- recompute ----------------------------------------------------------------- */

typedef struct rc_state {
    int *memo;       /* tensor -> recomputed tensor, -1 */
    int *created;    /* nodes created by the current rebuild, in order */
    int ncreated;
} rc_state;

static int rebuild(iabn_graph *g, rc_state *st, int t, iabn_err *e)
{
    if (st->memo[t] >= 0) return st->memo[t];
    int p = g->t[t].producer;
    if (p < 0) return iabn_err_set(e, IABN_EINVAL, "cannot recompute %s: no producer", g->t[t].name);
    iabn_node pn = g->n[p];
    int ins[IABN_MAX_IN];
    for (int k = 0; k < pn.nin; k++) {
        int x = pn.in[k];
        ins[k] = x;
        if (g->t[x].policy == IABN_RECOMPUTE) {
            ins[k] = rebuild(g, st, x, e);
            if (ins[k] < 0) return -1;
        }
    }
    g->building_phase = IABN_PHASE_RECOMPUTE;
    g->building_fwd = p;
    int c;
    if (pn.op->recompute) {
        c = pn.op->recompute(g, p, ins, e);
    } else {
        int outs[IABN_MAX_OUT];
        for (int j = 0; j < pn.nout; j++) {
            const iabn_tensor *o = &g->t[pn.out[j]];
            char name[IABN_NAME_LEN];
            snprintf(name, sizeof name, "%.80s'", o->name);
            outs[j] = iabn_graph_tensor(g, name, o->dtype, o->nd, o->shape);
        }
        c = iabn_graph_node(g, pn.op, pn.name, pn.nin, ins, pn.nout, outs, pn.params,
                            sizeof pn.params);
        if (c >= 0)
            for (int j = 0; j < pn.nout; j++) {
                g->n[c].inplace[j] = pn.inplace[j];
                g->n[c].must[j] = pn.must[j];
            }
    }
    g->building_phase = IABN_PHASE_FWD;
    g->building_fwd = -1;
    if (c < 0) {
        if (g->err.code) *e = g->err;
        return -1;
    }
    st->created[st->ncreated++] = c;
    for (int j = 0; j < g->n[c].nout && j < pn.nout; j++) st->memo[pn.out[j]] = g->n[c].out[j];
    if (st->memo[t] < 0)
        return iabn_err_set(e, IABN_EINVAL, "recompute of %s did not rebuild it", g->t[t].name);
    return st->memo[t];
}

static int apply_recompute(iabn_graph *g, iabn_err *e)
{
    int nt0 = g->nt;
    int *first_bwd = malloc((size_t)nt0 * sizeof(int));
    rc_state st = {malloc((size_t)nt0 * sizeof(int)), NULL, 0};
    if (!first_bwd || !st.memo) {
        free(first_bwd);
        free(st.memo);
        return iabn_err_set(e, IABN_ENOMEM, "out of memory applying recompute");
    }
    /* memo is indexed by forward tensors only (< nt0): recompute is asked of
     * them, and a rebuild reads forward tensors or their memoised copies */
    for (int i = 0; i < nt0; i++) first_bwd[i] = st.memo[i] = -1;
    for (int s = 0; s < g->ns; s++) {
        const iabn_node *n = &g->n[g->sched[s]];
        if (n->phase != IABN_PHASE_BWD) continue;
        for (int k = 0; k < n->nin; k++) {
            int x = n->in[k];
            if (x < nt0 && g->t[x].policy == IABN_RECOMPUTE && first_bwd[x] < 0) first_bwd[x] = s;
        }
    }
    int rc = 0;
    for (;;) {
        /* the pending tensor whose first backward reader comes first */
        int t = -1;
        for (int i = 0; i < nt0; i++)
            if (first_bwd[i] >= 0 && st.memo[i] < 0 && (t < 0 || first_bwd[i] < first_bwd[t])) t = i;
        if (t < 0) break;
        int cap = g->nn + 64;
        st.created = malloc((size_t)cap * sizeof(int));
        st.ncreated = 0;
        if (!st.created) {
            rc = iabn_err_set(e, IABN_ENOMEM, "out of memory applying recompute");
            break;
        }
        int pos = -1;
        for (int s = 0; s < g->ns; s++) {
            const iabn_node *n = &g->n[g->sched[s]];
            if (n->phase != IABN_PHASE_BWD) continue;
            for (int k = 0; k < n->nin && pos < 0; k++)
                if (n->in[k] == t) pos = s;
            if (pos >= 0) break;
        }
        if (rebuild(g, &st, t, e) < 0) {
            free(st.created);
            rc = e->code ? e->code : IABN_EINVAL;
            if (g->err.code) *e = g->err;
            break;
        }
        for (int i = 0; i < st.ncreated; i++) iabn_graph_insert_before(g, st.created[i], pos + i);
        free(st.created);
        st.created = NULL;
        /* the backward reads the rebuilt tensors */
        for (int s = 0; s < g->ns; s++) {
            iabn_node *n = &g->n[g->sched[s]];
            if (n->phase != IABN_PHASE_BWD) continue;
            for (int k = 0; k < n->nin; k++)
                if (n->in[k] < nt0 && st.memo[n->in[k]] >= 0 &&
                    g->t[n->in[k]].policy == IABN_RECOMPUTE)
                    n->in[k] = st.memo[n->in[k]];
        }
    }
    free(first_bwd);
    free(st.memo);
    return rc;
}

/* ---- copies (or own buffers) for MUST in-place ops ------------------------------ */

static int base_of(const iabn_graph *g, int t)
{
    return g->t[t].view_of >= 0 ? g->t[t].view_of : t;
}

static int read_after(const iabn_graph *g, int t, int step)
{
    int bt = base_of(g, t);
    for (int s = step + 1; s < g->ns; s++) {
        const iabn_node *n = &g->n[g->sched[s]];
        for (int k = 0; k < n->nin; k++)
            if (base_of(g, n->in[k]) == bt) return s;
    }
    return -1;
}

static int insert_copies(iabn_graph *g, iabn_err *e)
{
    for (int s = 0; s < g->ns; s++) {
        int id = g->sched[s];
        for (int j = 0; j < g->n[id].nout; j++) {
            if (!g->n[id].must[j] || g->n[id].inplace[j] < 0) continue;
            int k = g->n[id].inplace[j];
            int x = g->n[id].in[k];
            int later = read_after(g, x, s);
            int pinned = g->t[x].kind != IABN_T_ACT;
            int twice = 0;
            for (int m = 0; m < g->n[id].nin; m++) twice |= m != k && g->n[id].in[m] == x;
            if (later < 0 && !pinned && !twice) continue;
            g->ncopies++;
            if (g->n[id].op->own_buffer) { /* the copy fused into the op */
                g->n[id].inplace[j] = -1;
                g->n[id].must[j] = 0;
                g->n[id].own_buffer = 1;
                continue;
            }
            char name[IABN_NAME_LEN];
            snprintf(name, sizeof name, "%.80s.copy", g->t[x].name);
            const iabn_tensor *xt = &g->t[x];
            int nd = xt->nd, shape[IABN_MAX_DIMS];
            memcpy(shape, xt->shape, sizeof shape);
            g->building_phase = g->n[id].phase;
            g->building_fwd = g->n[id].fwd;
            int c = iabn_graph_tensor(g, name, xt->dtype, nd, shape);
            int cn = iabn_graph_node(g, &iabn_op_copy, name, 1, &x, 1, &c, NULL, 0);
            g->building_phase = IABN_PHASE_FWD;
            g->building_fwd = -1;
            if (cn < 0) {
                *e = g->err;
                return e->code;
            }
            g->n[cn].block = g->n[id].block;
            g->t[c].block = g->n[id].block;
            iabn_graph_insert_before(g, cn, s);
            s++; /* the in-place node moved one step later */
            g->n[id].in[k] = c;
        }
    }
    return 0;
}

int iabn_graph_size_scratch(iabn_graph *g, int id, size_t bytes, iabn_err *e)
{
    iabn_node *n = &g->n[id];
    if (bytes == 0) {
        if (n->scratch >= 0) g->t[n->scratch].nbytes = 0; /* planned as nothing */
        return 0;
    }
    /* whole KiB, as a 2-d U8 tensor (its shape says the size in a dump) */
    int shape[2] = {(int)((bytes + 1023) / 1024), 1024};
    if (n->scratch >= 0) {
        iabn_tensor *t = &g->t[n->scratch];
        t->shape[0] = shape[0];
        t->nbytes = (size_t)shape[0] * 1024;
        return 0;
    }
    char name[IABN_NAME_LEN];
    snprintf(name, sizeof name, "%.80s.scratch", n->name);
    int t = iabn_graph_tensor(g, name, IABN_U8, 2, shape);
    if (t < 0) {
        *e = g->err;
        return e->code;
    }
    g->t[t].scratch = 1;
    g->t[t].producer = id;
    g->t[t].block = g->n[id].block;
    g->n[id].scratch = t;
    return 0;
}

static int add_scratch(iabn_graph *g, iabn_err *e)
{
    const iabn_backend *be = iabn_store_backend(g->store);
    for (int id = 0; id < g->nn; id++) {
        if (!g->n[id].op->scratch_bytes) continue;
        int rc = iabn_graph_size_scratch(g, id, g->n[id].op->scratch_bytes(g, &g->n[id], be), e);
        if (rc) return rc;
    }
    return 0;
}

int iabn_graph_finalize(iabn_graph *g, iabn_err *e)
{
    if (g->err.code) {
        *e = g->err;
        return e->code;
    }
    if (g->finalized) return 0;
    int rc = apply_recompute(g, e);
    if (!rc) rc = iabn_graph_apply_offload(g, e);
    if (!rc) rc = insert_copies(g, e);
    if (!rc) iabn_graph_winograd_all(g);
    if (!rc) rc = iabn_graph_apply_layouts(g, e);
    if (!rc) rc = add_scratch(g, e);
    if (!rc && g->err.code) {
        *e = g->err;
        rc = e->code;
    }
    if (!rc) g->finalized = 1;
    /* the auto mode plans the graph to choose, so it comes last */
    if (!rc) rc = iabn_graph_winograd_choose(g, e);
    if (rc) g->finalized = 0;
    return rc;
}
