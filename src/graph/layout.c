/* layout.c: finalize's layout pass (graph.h, "Activation layouts").
 *
 * Tensors that must share a layout, the 4-d operands of one node whose op
 * says IABN_LAYOUT_RULE_SAME (a BN's input, output and their gradients, an
 * add's terms, a copy), are joined in one set (union-find).  A set goes
 * blocked (the backend's blocked layout: nChw16c on AVX-512 CPUs, nChw8c on
 * others) when none of its members refuses it and the
 * convolutions reading or writing its members prefer blocked more often
 * than NCHW (one whose primitive works in a third layout reorders either
 * way and counts for neither).  A member refuses when an NCHW-only op touches it, when it is
 * an input, an output, a view or viewed (the caller and the views see NCHW),
 * or when its channels are not a multiple of the block.  Tensors whose layout
 * cannot matter (not 4-d, or one value per channel and sample: H*W = 1,
 * where both layouts are the same bytes) are left out of it all.
 *
 * A node whose op can check it (layout_ok) and that has no kernel for the
 * mix its sets got sends its blocked sets back to NCHW, until all agree.
 *
 * Reorders then happen only inside the convolutions whose primitive works in
 * another layout than a tensor's (oneDNN reorders into their node scratch,
 * which add_scratch sizes after this pass); no reorder tensor is added.
 * Blocked layouts need C to be a multiple of their block and change no
 * tensor's size, so the
 * arena is planned exactly as before; only scratch sizes move.
 */
#include "graph/graph_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *iabn_layout_mode_name(iabn_layout_mode m)
{
    switch (m) {
#define X(id, name) case id: return name;
        IABN_LAYOUT_MODES(X)
#undef X
    case IABN_LAYOUT_MODE_COUNT: break;
    }
    return "?";
}

int iabn_layout_mode_parse(const char *s, iabn_layout_mode *out, iabn_err *e)
{
    for (int m = 0; m < IABN_LAYOUT_MODE_COUNT; m++)
        if (s && !strcasecmp(s, iabn_layout_mode_name((iabn_layout_mode)m))) {
            *out = (iabn_layout_mode)m;
            return 0;
        }
    return iabn_err_set(e, IABN_EINVAL, "unknown layout mode '%s' (auto or nchw)", s ? s : "");
}

void iabn_graph_set_layout_mode(iabn_graph *g, iabn_layout_mode m) { g->layout_mode = m; }


void iabn_graph_layout_stats(const iabn_graph *g, iabn_layout_stats *out)
{
    memset(out, 0, sizeof *out);
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].layout != IABN_LAYOUT_NCHW) {
            out->blocked++;
            out->blocked_bytes += g->t[t].nbytes;
        }
    out->conv_reorders = g->conv_reorders;
}

/* Whether t's layout can matter at all (see the top of the file). */
static int matters(const iabn_tensor *t)
{
    return t->nd == 4 && (t->dtype == IABN_F32 || t->dtype == IABN_BF16) &&
           (long)t->shape[2] * t->shape[3] > 1;
}

static int find(int *parent, int t)
{
    while (parent[t] != t) {
        parent[t] = parent[parent[t]];
        t = parent[t];
    }
    return t;
}

enum { SAME = 3 }; /* vote_of's answer for an op whose operands share a layout */

/* The vote of operand (out, k) of node n (graph.h, layout_vote), or SAME. */
static int vote_of(const iabn_graph *g, const iabn_node *n, const iabn_backend *be, int out,
                   int k)
{
    switch (n->op->layout) {
    case IABN_LAYOUT_RULE_NCHW: return -1;
    case IABN_LAYOUT_RULE_SAME: return SAME;
    case IABN_LAYOUT_RULE_VOTE: return n->op->layout_vote ? n->op->layout_vote(g, n, be, out, k) : -1;
    }
    return -1;
}

/* Every tensor's layout from its set's totals (at the set's root). */
static void assign(iabn_graph *g, iabn_layout blocked, int *parent, const int *veto,
                   const int *pro, const int *con)
{
    for (int t = 0; t < g->nt; t++) {
        int r = find(parent, t);
        g->t[t].layout =
            matters(&g->t[t]) && !veto[r] && pro[r] > con[r] ? blocked : IABN_LAYOUT_NCHW;
    }
}

int iabn_graph_apply_layouts(iabn_graph *g, iabn_err *e)
{
    const iabn_backend *be = iabn_store_backend(g->store);
    g->conv_reorders = 0;
    if (g->layout_mode == IABN_LAYOUT_MODE_NCHW || !be->k->conv_layout_vote) return 0;
    iabn_layout blocked = be->k->conv_blocked_layout();
    int blk = iabn_layout_block(blocked);
    if (blk < 2) return iabn_err_set(e, IABN_EINVAL, "the backend's blocked layout (%d) is not a "
                                     "blocked one of the list", (int)blocked);
    int nt = g->nt;
    int *parent = malloc(sizeof(int) * 4 * (size_t)(nt ? nt : 1));
    if (!parent) return iabn_err_set(e, IABN_ENOMEM, "out of memory in the layout pass");
    int *veto = parent + nt, *pro = veto + nt, *con = pro + nt;
    /* each operand's vote, asked once (a conv's asks oneDNN), read again
     * for the reorder count */
    enum { SLOTS = IABN_MAX_IN + IABN_MAX_OUT };
    signed char *votes = malloc((size_t)SLOTS * (size_t)(g->nn ? g->nn : 1));
    if (!votes) {
        free(parent);
        return iabn_err_set(e, IABN_ENOMEM, "out of memory in the layout pass");
    }
    for (int t = 0; t < nt; t++) {
        parent[t] = t;
        pro[t] = con[t] = 0;
        const iabn_tensor *x = &g->t[t];
        veto[t] = !matters(x) || (x->kind != IABN_T_ACT && x->kind != IABN_T_HOST) ||
                  x->shape[1] % blk || x->view_of >= 0 ||
                  x->scratch;
    }
    for (int t = 0; t < nt; t++)
        if (g->t[t].view_of >= 0) veto[g->t[t].view_of] = 1;

    /* joins and votes, node by node */
    for (int id = 0; id < g->nn; id++) {
        const iabn_node *n = &g->n[id];
        int first = -1;
        for (int s = 0; s < n->nin + n->nout; s++) {
            int out = s >= n->nin, k = out ? s - n->nin : s;
            int t = out ? n->out[k] : n->in[k];
            if (t < 0 || !matters(&g->t[t])) continue;
            int v = vote_of(g, n, be, out, k);
            votes[(size_t)id * SLOTS + s] = (signed char)v;
            if (v == SAME) {
                if (first < 0) first = t;
                else parent[find(parent, t)] = find(parent, first);
            } else if (v < 0) {
                veto[t] = 1;
            } else if (v < 2) {
                (v ? pro : con)[t]++;
            }
        }
        /* an output written over an input is that input's storage: one
         * layout (conv2d_add's sum and its residual; the SAME ops' pairs
         * are joined above anyway) */
        for (int j = 0; j < n->nout; j++) {
            int k = n->inplace[j];
            if (k < 0 || n->out[j] < 0 || n->in[k] < 0) continue;
            parent[find(parent, n->out[j])] = find(parent, n->in[k]);
        }
    }
    /* the sets' totals at their roots */
    for (int t = 0; t < nt; t++) {
        int r = find(parent, t);
        if (r == t) continue;
        veto[r] |= veto[t];
        pro[r] += pro[t];
        con[r] += con[t];
    }
    assign(g, blocked, parent, veto, pro, con);
    /* A mix the votes allowed may still have no kernel (oneDNN's copy cap
     * counts the NCHW side only): that node's blocked sets go back to NCHW,
     * and the sets are assigned again until every node takes its layouts.
     * Vetoes only grow, and all-NCHW always runs, so this ends. */
    for (int changed = 1; changed;) {
        changed = 0;
        for (int id = 0; id < g->nn; id++) {
            const iabn_node *n = &g->n[id];
            if (!n->op->layout_ok || n->op->layout_ok(g, n, be)) continue;
            for (int s = 0; s < n->nin + n->nout; s++) {
                int t = s < n->nin ? n->in[s] : n->out[s - n->nin];
                if (t < 0 || g->t[t].layout == IABN_LAYOUT_NCHW) continue;
                veto[find(parent, t)] = 1;
                changed = 1;
            }
        }
        if (changed) assign(g, blocked, parent, veto, pro, con);
    }
    /* the convolution passes left reordering an operand */
    for (int id = 0; id < g->nn; id++) {
        const iabn_node *n = &g->n[id];
        if (n->op->layout != IABN_LAYOUT_RULE_VOTE) continue;
        int reorders = 0;
        for (int s = 0; s < n->nin + n->nout; s++) {
            int out = s >= n->nin, k = out ? s - n->nin : s;
            int t = out ? n->out[k] : n->in[k];
            if (t < 0 || !matters(&g->t[t])) continue;
            int v = votes[(size_t)id * SLOTS + s];
            int b = g->t[t].layout == blocked;
            reorders |= v == 2 || (v == 1 && !b) || (v == 0 && b);
        }
        g->conv_reorders += reorders;
    }
    free(votes);
    free(parent);
    return 0;
}
