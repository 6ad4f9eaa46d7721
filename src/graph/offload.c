/* offload.c: the OFFLOAD storage policy on the graph side.
 *
 * For every tensor marked OFFLOAD, finalize (iabn_graph_apply_offload)
 *  - creates its host copy (an IABN_T_HOST tensor, placed by the planner in
 *    the host pool) and an `offload` node right after the producer: the
 *    executor queues the device-to-host copy there on the copy stream, and
 *    the device buffer lives until the later of that node and the last
 *    forward reader, after which the compute stream waits for the copy;
 *  - creates a device tensor t' and a `prefetch` node placed `lookahead`
 *    backward layers before t's first backward (or recompute) reader: the
 *    host-to-device copy runs there, and t''s readers wait for it;
 *  - rewires every backward and recompute reader of t to t'.
 * So the planner needs no special case beyond the host pool: the device
 * lifetimes follow from the schedule, as for every other tensor.
 *
 * It also holds the paper's choice of what to offload (conv and pool inputs,
 * never what a normalisation backward reads) and the graph clone used by
 * the strategy search. */
#include "graph/graph_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The executor runs these two itself (exec.c); they have no kernels. */
/* Byte copies (bfloat16 ones elementwise): any layout, the tensor's own. */
const iabn_op_def iabn_op_offload = {.name = "offload", .layout = IABN_LAYOUT_RULE_SAME};
const iabn_op_def iabn_op_prefetch = {.name = "prefetch", .layout = IABN_LAYOUT_RULE_SAME};

void iabn_graph_set_offload_opts(iabn_graph *g, const iabn_offload_opts *o)
{
    g->offload = *o;
    if (g->offload.lookahead < 0) g->offload.lookahead = 0;
}

static int has_views(const iabn_graph *g, int t)
{
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].view_of == t) return 1;
    return 0;
}

int iabn_graph_offloadable(const iabn_graph *g, int t)
{
    const iabn_tensor *x = &g->t[t];
    if (x->kind != IABN_T_ACT || x->view_of >= 0 || x->scratch || x->producer < 0) return 0;
    if (g->n[x->producer].phase != IABN_PHASE_FWD) return 0;
    int read_bwd = 0;
    for (int s = 0; s < g->ns && !read_bwd; s++) {
        const iabn_node *n = &g->n[g->sched[s]];
        if (n->phase == IABN_PHASE_FWD) continue;
        for (int k = 0; k < n->nin; k++) read_bwd |= n->in[k] == t;
    }
    return read_bwd && !has_views(g, t);
}

/* A backward that reads the normalisation's input (standard BN, its
 * checkpointed variants): that input stays on the device.  The in-place
 * layer stores no input at all (it reconstructs it from its output), so its
 * output, the next convolution's input, is offloaded like any other. */
static int reads_bn_input(const char *op)
{
    return strcmp(op, "bn_bwd") == 0 || strcmp(op, "bn_bwd_xhat") == 0 || strcmp(op, "bn") == 0 ||
           strcmp(op, "norm_act_ckpt_opt") == 0;
}

static int is_conv_pool(const char *op)
{
    return strncmp(op, "conv2d", 6) == 0 || strncmp(op, "maxpool", 7) == 0 ||
           strncmp(op, "avgpool", 7) == 0 || strcmp(op, "global_avgpool") == 0;
}

int iabn_graph_offload_conv_inputs(iabn_graph *g)
{
    int nt = g->nt, marked = 0;
    unsigned char *conv = calloc((size_t)(nt ? nt : 1), 1);
    unsigned char *norm = calloc((size_t)(nt ? nt : 1), 1);
    if (!conv || !norm) {
        free(conv);
        free(norm);
        return 0;
    }
    for (int s = 0; s < g->ns; s++) {
        const iabn_node *n = &g->n[g->sched[s]];
        if (n->phase == IABN_PHASE_FWD) continue;
        /* a backward node is judged by the forward op it serves */
        const char *op = n->fwd >= 0 ? g->n[n->fwd].op->name : n->op->name;
        for (int k = 0; k < n->nin; k++) {
            conv[n->in[k]] |= is_conv_pool(op);
            norm[n->in[k]] |= reads_bn_input(n->op->name);
        }
    }
    for (int t = 0; t < nt; t++)
        if (conv[t] && !norm[t] && g->t[t].nd >= 2 && iabn_graph_offloadable(g, t)) {
            g->t[t].policy = IABN_OFFLOAD;
            marked++;
        }
    free(conv);
    free(norm);
    return marked;
}

static int sched_pos(const iabn_graph *g, int node)
{
    for (int s = 0; s < g->ns; s++)
        if (g->sched[s] == node) return s;
    return -1;
}

/* Where t's prefetch goes: at the start of the backward layer `lookahead`
 * layers before the one holding its first backward reader; -1: t has none. */
static int prefetch_pos(const iabn_graph *g, int t)
{
    int first = -1, boundary = g->ns;
    for (int s = 0; s < g->ns; s++) {
        const iabn_node *n = &g->n[g->sched[s]];
        if (n->phase == IABN_PHASE_FWD) continue;
        if (boundary == g->ns) boundary = s;
        for (int k = 0; k < n->nin && first < 0; k++)
            if (n->in[k] == t) first = s;
        if (first >= 0) break;
    }
    if (first < 0) return -1;
    int pos = first, cur = g->n[g->sched[first]].fwd, crossed = 0;
    for (int s = first - 1; s >= boundary; s--) {
        const iabn_node *n = &g->n[g->sched[s]];
        if (n->fwd != cur) {
            cur = n->fwd;
            if (++crossed > g->offload.lookahead) break;
        }
        pos = s;
    }
    return pos;
}

static int one(iabn_graph *g, int t, iabn_err *e)
{
    if (!iabn_graph_offloadable(g, t)) {
        const iabn_tensor *x = &g->t[t];
        const char *why = x->kind != IABN_T_ACT ? "it is not an arena activation"
                          : x->view_of >= 0 || has_views(g, t) ? "it is a view or has views"
                          : "it is not a forward activation that the backward reads";
        return iabn_err_set(e, IABN_EINVAL, "cannot offload %s: %s", x->name, why);
    }
    int prod = g->t[t].producer, blk = g->n[prod].block;
    int nd = g->t[t].nd, shape[IABN_MAX_DIMS];
    memcpy(shape, g->t[t].shape, sizeof shape);
    iabn_dtype dt = g->t[t].dtype;
    char name[IABN_NAME_LEN];
    snprintf(name, sizeof name, "%.80s.host", g->t[t].name);
    int h = iabn_graph_tensor(g, name, g->offload.host_bf16 && dt == IABN_F32 ? IABN_BF16 : dt,
                              nd, shape);
    snprintf(name, sizeof name, "%.80s.prefetch", g->t[t].name);
    int tp = iabn_graph_tensor(g, name, dt, nd, shape);
    if (h < 0 || tp < 0) goto fail;
    g->t[h].kind = IABN_T_HOST;
    g->t[h].block = g->t[tp].block = blk;
    g->building_fwd = prod;
    int off = iabn_graph_node(g, &iabn_op_offload, g->t[t].name, 1, &t, 1, &h, NULL, 0);
    g->building_phase = IABN_PHASE_BWD;
    int pf = iabn_graph_node(g, &iabn_op_prefetch, g->t[t].name, 1, &h, 1, &tp, NULL, 0);
    g->building_phase = IABN_PHASE_FWD;
    g->building_fwd = -1;
    if (off < 0 || pf < 0) goto fail;
    g->t[tp].requires_grad = g->t[t].requires_grad;
    /* the offload node right after the producer; the copy then overlaps the
     * forward readers */
    iabn_graph_insert_before(g, off, sched_pos(g, prod) + 1);
    for (int s = 0; s < g->ns; s++) {
        iabn_node *n = &g->n[g->sched[s]];
        if (n->phase == IABN_PHASE_FWD || g->sched[s] == pf) continue;
        for (int k = 0; k < n->nin; k++)
            if (n->in[k] == t) n->in[k] = tp;
    }
    int pos = prefetch_pos(g, tp);
    if (pos < 0) return iabn_err_set(e, IABN_EINVAL, "offload of %s: no backward reader", g->t[t].name);
    iabn_graph_insert_before(g, pf, pos);
    return 0;
fail:
    g->building_phase = IABN_PHASE_FWD;
    g->building_fwd = -1;
    *e = g->err;
    return e->code ? e->code : IABN_EINVAL;
}

int iabn_graph_apply_offload(iabn_graph *g, iabn_err *e)
{
    int nt0 = g->nt;
    for (int t = 0; t < nt0; t++) {
        if (g->t[t].policy != IABN_OFFLOAD) continue;
        int rc = one(g, t, e);
        if (rc) return rc;
    }
    return 0;
}
