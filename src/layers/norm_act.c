/* norm_act.c: the BN + activation unit in every memory mode (docs/INPLACE_ABN.md).
 *
 *   standard        BN node (x -> y, batch stats) + act node (y -> z, may be in
 *                   place); backward reads x (BN) and z (act).
 *   checkpoint      the same nodes with y and z under the RECOMPUTE policy:
 *                   only x is kept; the backward rebuilds y from x with the
 *                   saved statistics (running statistics untouched) and z.
 *   checkpoint_opt  one node x -> (z, xhat); z RECOMPUTE, rebuilt from xhat.
 *   inplace_abn(_ii) one node writing z over x (MUST); the backward reads z
 *                   and the per-channel statistics only and writes dx over dz.
 *   evaluation / frozen: one node with the running statistics.
 *   *_sync          the same nodes; the forward all-gathers every rank's
 *                   (count, mean, var) and combines them, the backward
 *                   all-reduces (count, sum dy, sum dy*xhat) after taking the
 *                   local sums for dgamma / dbeta (docs/INPLACE_ABN.md section 3).
 * The scale is gamma itself in standard, checkpoint and checkpoint_opt (the
 * reference's plain BN, so its checkpoints load as they are) and |gamma| + eps
 * in the in-place modes, which need g > 0 to invert y -> xhat.  The gamma
 * tensor in the store records which (iabn_param.bn_abs), so that weight files
 * convert between the two (bn_gamma.c).
 */
#include "layers/layer_util.h"

#include <stdlib.h>
#include <strings.h>

const char *iabn_bn_mode_name(iabn_bn_mode m)
{
    switch (m) {
#define X(E, name, aliases, variant, sync) case IABN_BN_##E: return name;
        IABN_BN_MODES(X)
#undef X
    case IABN_BN_NMODES: break;
    }
    return "?";
}

/* The backward variant of the list (0: the mode keeps its input). */
static int bn_mode_variant(iabn_bn_mode m)
{
    switch (m) {
#define X(E, name, aliases, variant, sync) case IABN_BN_##E: return variant;
        IABN_BN_MODES(X)
#undef X
    case IABN_BN_NMODES: break;
    }
    return 0;
}

static int bn_mode_unknown(iabn_err *e, const char *what)
{
    char valid[256] = "";
#define X(E, name, aliases, variant, sync) strcat(valid, *valid ? ", " name : name);
    IABN_BN_MODES(X)
#undef X
    return iabn_err_set(e, IABN_EINVAL, "unknown BN mode %s (valid: %s)", what, valid);
}

int iabn_bn_mode_parse(const char *s, iabn_bn_mode *out, iabn_err *e)
{
#define X(E, name, aliases, variant, sync)                                                       \
    if (iabn_name_matches(s, name, aliases)) {                                             \
        *out = IABN_BN_##E;                                                                \
        return 0;                                                                          \
    }
    IABN_BN_MODES(X)
#undef X
    char what[80];
    snprintf(what, sizeof what, "'%.60s'", s);
    return bn_mode_unknown(e, what);
}

int iabn_bn_mode_check(iabn_bn_mode m, iabn_err *e)
{
    if ((int)m >= 0 && m < IABN_BN_NMODES) return 0;
    char what[32];
    snprintf(what, sizeof what, "%d", (int)m);
    return bn_mode_unknown(e, what);
}

int iabn_bn_mode_is_inplace(iabn_bn_mode m) { return bn_mode_variant(m) != 0; }

int iabn_bn_mode_is_sync(iabn_bn_mode m)
{
    switch (m) {
#define X(E, name, aliases, variant, sync) case IABN_BN_##E: return sync;
        IABN_BN_MODES(X)
#undef X
    case IABN_BN_NMODES: break;
    }
    return 0;
}
int iabn_bn_mode_abs_gamma(iabn_bn_mode m) { return iabn_bn_mode_is_inplace(m); }

iabn_norm_act_cfg iabn_norm_act_defaults(iabn_bn_mode mode)
{
    iabn_norm_act_cfg c;
    memset(&c, 0, sizeof c);
    c.mode = mode;
    c.act.kind = IABN_ACT_LEAKY_RELU;
    c.act.param = iabn_act_default_param(IABN_ACT_LEAKY_RELU);
    c.eps = 1e-5f;
    c.momentum = 0.1f;
    return c;
}

static size_t sums_scratch(const iabn_graph *g, const iabn_node *n, const iabn_backend *be)
{
    (void)g;
    (void)be;
    IABN_PARAMS(na_p, n);
    return 2 * (size_t)P.c * sizeof(float);
}

/* ---- synchronisation (docs/INPLACE_ABN.md section 3) -------------------------------- */

/* Every rank's (count, mean, var), all-gathered and combined in double into
 * the job's statistics; host arrays; *count: the local count in, the job's
 * out. */
static int combine_stats(const iabn_graph *g, const iabn_node *n, const na_p *P, float *mean,
                         float *var, double *count, iabn_err *e)
{
    iabn_comm *comm = iabn_graph_comm(g);
    int world = iabn_comm_size(comm);
    size_t c = (size_t)P->c, rec = sizeof(double) + 2 * c * sizeof(float);
    unsigned char *buf = malloc(rec * (size_t)(world + 1));
    double *counts = malloc((size_t)world * sizeof *counts);
    float *means = malloc((size_t)world * 2 * c * sizeof *means);
    if (!buf || !counts || !means) {
        free(buf);
        free(counts);
        free(means);
        return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory gathering the statistics", n->name);
    }
    float *vars = means + (size_t)world * c;
    memcpy(buf, count, sizeof(double));
    memcpy(buf + sizeof(double), mean, c * sizeof(float));
    memcpy(buf + sizeof(double) + c * sizeof(float), var, c * sizeof(float));
    unsigned char *all = buf + rec;
    int rc = iabn_comm_allgather(comm, buf, all, rec, n->name, e);
    if (!rc) {
        *count = 0;
        for (int w = 0; w < world; w++) {
            const unsigned char *r = all + rec * (size_t)w;
            memcpy(&counts[w], r, sizeof(double));
            memcpy(means + (size_t)w * c, r + sizeof(double), c * sizeof(float));
            memcpy(vars + (size_t)w * c, r + sizeof(double) + c * sizeof(float),
                   c * sizeof(float));
            *count += counts[w];
        }
        iabn_bn_stats_combine(world, P->c, counts, means, vars, mean, var);
    }
    free(buf);
    free(counts);
    free(means);
    return rc;
}

/* The backward's (count, sum dy, sum dy*xhat) summed over the ranks; host
 * arrays. */
static int reduce_sums(const iabn_graph *g, const iabn_node *n, const na_p *P, float *sum_dy,
                       float *sum_dy_xhat, double *count, iabn_err *e)
{
    size_t c = (size_t)P->c;
    double *d = malloc((2 * c + 1) * sizeof *d);
    if (!d) return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory reducing the sums", n->name);
    for (size_t i = 0; i < c; i++) {
        d[i] = sum_dy[i];
        d[c + i] = sum_dy_xhat[i];
    }
    d[2 * c] = *count;
    int rc = iabn_comm_allreduce(iabn_graph_comm(g), NULL, d, 2 * c + 1, IABN_COMM_F64, n->name, e);
    if (!rc) {
        for (size_t i = 0; i < c; i++) {
            sum_dy[i] = (float)d[i];
            sum_dy_xhat[i] = (float)d[c + i];
        }
        *count = d[2 * c];
    }
    free(d);
    return rc;
}

/* When P->sync and the graph's communicator has several ranks: two
 * per-channel arrays on the node's backend (the statistics when stats, else
 * the backward sums) become the job's, through host memory (they are C
 * floats each); *count: the local count in, the job's out.  Otherwise nothing
 * changes: one rank is exactly the unsynchronised layer. */
static int synchronised(const iabn_graph *g, const na_p *P)
{
    return P->sync && iabn_comm_size(iabn_graph_comm(g)) > 1;
}

static int sync_pair(const iabn_graph *g, const iabn_node *n, const na_p *P, const iabn_bind *b,
                     float *a0, float *a1, double *count, int stats, iabn_err *e)
{
    if (!synchronised(g, P)) return 0;
    const iabn_backend *be = b->backend;
    size_t bytes = (size_t)P->c * sizeof(float);
    float *h0 = a0, *h1 = a1, *tmp = NULL;
    if (be->kind != IABN_DEV_CPU) {
        if (!(tmp = malloc(2 * bytes)))
            return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory for the exchange", n->name);
        h0 = tmp;
        h1 = tmp + P->c;
        if (be->d2h(be->ctx, h0, a0, bytes) || be->d2h(be->ctx, h1, a1, bytes)) {
            free(tmp);
            return iabn_err_set(e, IABN_EDEVICE, "%s: copying the per-channel sums failed",
                                n->name);
        }
    }
    int rc = stats ? combine_stats(g, n, P, h0, h1, count, e)
                   : reduce_sums(g, n, P, h0, h1, count, e);
    if (!rc && tmp && (be->h2d(be->ctx, a0, h0, bytes) || be->h2d(be->ctx, a1, h1, bytes)))
        rc = iabn_err_set(e, IABN_EDEVICE, "%s: copying the job's sums back failed", n->name);
    free(tmp);
    return rc;
}

/* The layout of the node's activations: its first input's (x, xhat or z),
 * which every activation of a BN node shares. */
static iabn_layout act_layout(const iabn_graph *g, const iabn_node *n)
{
    return lt(g, n->in[0])->layout;
}

/* Batch statistics (the job's when synchronised), z = act(BN(x)) with them
 * (abs_gamma: the in-place modes' |gamma| + eps), then the running update.
 * Unsynchronised, one backend call where it has one (bn_fwd_train). */
static int train_fwd(const iabn_graph *g, const iabn_node *n, const na_p *P, const iabn_bind *b,
                     int abs_gamma, iabn_act act, float *mean, float *var, float *z,
                     iabn_err *e)
{
    iabn_layout L = act_layout(g, n);
    double m = (double)P->n * P->hw;
    if (!synchronised(g, P) && b->backend->k->bn_fwd_train) {
        IABN_K(bn_fwd_train, P->n, P->c, P->hw, L, b->in[0], P->eps, b->in[1], b->in[2],
               abs_gamma, act, mean, var, z);
    } else {
        IABN_K(bn_stats, P->n, P->c, P->hw, L, b->in[0], mean, var);
        int rc = sync_pair(g, n, P, b, mean, var, &m, 1, e);
        if (rc) return rc;
        IABN_K(norm_act_fwd, P->n, P->c, P->hw, L, b->in[0], mean, var, P->eps, b->in[1],
               b->in[2], abs_gamma, act, z, NULL);
    }
    IABN_K(bn_update_running, P->c, m, P->momentum, mean, var, b->in[3], b->in[4]);
    return 0;
}

/* ---- run functions: the backend's kernels (b->backend->k) -------------------------- */


static const iabn_op_def op_act, op_act_bwd; /* defined with the other ops, below */

/* The activation of an act or act_bwd node the executor lets a BN node
 * absorb (graph.h iabn_op_def.absorb), or the identity without one.
 * Forward: standard BN's y, then the act node that follows it in place; one
 * pass writes act(y) where the act would have, the same bits (the kernel's
 * act of the affine value is the act kernel's of the stored y).  Backward:
 * act_bwd, then BN's backward, which alone reads act_bwd's dy: BN's two
 * passes take dz*act'(z) where they read dy, the same bits again. */
static iabn_act absorbed_act(const iabn_node *a)
{
    iabn_act act = {IABN_ACT_IDENTITY, 0.f};
    if (a) {
        na_p A;
        memcpy(&A, a->params, sizeof A);
        act = A.act;
    }
    return act;
}

static int bn_absorb(const iabn_graph *g, const iabn_node *n, const iabn_node *next)
{
    return next->op == &op_act;
}

/* Whether tensor t is a copy of another in another dtype: the prefetch of
 * an activation offloaded in bfloat16 (--offload-bf16), whose values are
 * the forward's rounded. */
static int rounded_copy(const iabn_graph *g, int t)
{
    const iabn_tensor *x = iabn_graph_t(g, t);
    if (x->producer < 0) return 0;
    const iabn_node *p = iabn_graph_n(g, x->producer);
    return p->nin == 1 && iabn_graph_t(g, p->in[0])->dtype != x->dtype;
}

/* BN's backward rebuilds z from x (bn_bwd_run): where x or z comes back
 * rounded from a bfloat16 host copy, that z would not be the one act_bwd
 * reads, so the pair stays two steps and keeps act_bwd's bits. */
static int bn_bwd_absorb_prev(const iabn_graph *g, const iabn_node *n, const iabn_node *prev)
{
    const iabn_kernels *k = iabn_store_backend(iabn_graph_store(g))->k;
    return prev->op == &op_act_bwd && n->in[1] == prev->out[0] && k->bn_act_bwd_reduce &&
           k->bn_act_bwd_apply && !rounded_copy(g, n->in[0]) && !rounded_copy(g, prev->in[0]);
}

/* in: x, gamma, beta, rmean, rvar   out: y, mean, var   (standard/checkpoint BN) */
static int bn_fwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    return train_fwd(g, n, &P, b, P.abs_gamma, absorbed_act(b->next), b->out[1], b->out[2],
                     b->out[0], e);
}

/* in: x, mean, var, gamma, beta   out: y   (recompute: saved statistics) */
static int bn_apply_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    iabn_layout L = act_layout(g, n);
    IABN_K(norm_act_fwd, P.n, P.c, P.hw, L, b->in[0], b->in[1], b->in[2], P.eps, b->in[3],
           b->in[4], P.abs_gamma, absorbed_act(b->next), b->out[0], NULL);
    return 0;
}

/* in: x, dy, mean, var, gamma, beta   out: dx [, dgamma, dbeta]
 * With b->prev (the act_bwd before it, absorbed: bn_bwd_absorb_prev), dy is
 * never written: the kernels take dz*act'(z) from the act's dz and a z they
 * rebuild from x, gamma and beta with the forward's formulas (the act's
 * input is this BN's output, so those are z's bits), one tensor fewer to
 * read in both passes than act_bwd's z would be. */
static int bn_bwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    iabn_layout L = act_layout(g, n);
    float *sum_dy = b->scratch, *sum_dy_xhat = sum_dy + P.c;
    const float *dz = b->prev ? b->prev_in[1] : NULL;
    iabn_act act = absorbed_act(b->prev);
    int one_call = !synchronised(g, &P) && b->backend->k->bn_act_bwd_train;
    if (one_call) /* without an absorbed act, the identity's: dy itself, the same bits */
        IABN_K(bn_act_bwd_train, P.n, P.c, P.hw, L, b->in[0], b->prev ? dz : b->in[1], act,
               b->in[2], b->in[3], P.eps, b->in[4], b->in[5], P.abs_gamma, sum_dy, sum_dy_xhat,
               b->out[0]);
    else if (b->prev)
        IABN_K(bn_act_bwd_reduce, P.n, P.c, P.hw, L, b->in[0], dz, act, b->in[2], b->in[3],
               P.eps, b->in[4], b->in[5], P.abs_gamma, sum_dy, sum_dy_xhat);
    else
        IABN_K(bn_bwd_reduce, P.n, P.c, P.hw, L, b->in[0], b->in[1], b->in[2], b->in[3], P.eps,
               sum_dy, sum_dy_xhat);
    if (P.grads)
        IABN_K(bn_param_grads, P.c, b->in[4], P.abs_gamma, sum_dy, sum_dy_xhat, b->out[1], b->out[2]);
    if (one_call) return 0;
    double m = (double)P.n * P.hw;
    int rc = sync_pair(g, n, &P, b, sum_dy, sum_dy_xhat, &m, 0, e);
    if (rc) return rc;
    if (b->prev)
        IABN_K(bn_act_bwd_apply, P.n, P.c, P.hw, L, b->in[0], dz, act, b->in[2], b->in[3],
               P.eps, b->in[4], b->in[5], P.abs_gamma, sum_dy, sum_dy_xhat, m, b->out[0]);
    else
        IABN_K(bn_bwd_apply, P.n, P.c, P.hw, L, b->in[0], b->in[1], b->in[2], b->in[3], P.eps,
               b->in[4], P.abs_gamma, sum_dy, sum_dy_xhat, m, 1, b->out[0]);
    return 0;
}

/* in: x  out: y */
static int act_fwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    IABN_K(act_fwd, iabn_graph_t(g, n->in[0])->nbytes / 4, P.act, b->in[0], b->out[0]);
    return 0;
}

/* in: y, dy  out: dx */
static int act_bwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    IABN_K(act_bwd, iabn_graph_t(g, n->in[0])->nbytes / 4, P.act, b->in[0], b->in[1], b->out[0]);
    return 0;
}

/* in: x, gamma, beta, rmean, rvar   out: z, xhat, mean, var   (checkpoint_opt) */
static int ckopt_fwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    iabn_layout L = act_layout(g, n);
    float *mean = b->out[2], *var = b->out[3];
    IABN_K(bn_stats, P.n, P.c, P.hw, L, b->in[0], mean, var);
    IABN_K(bn_update_running, P.c, (double)P.n * P.hw, P.momentum, mean, var, b->in[3], b->in[4]);
    IABN_K(norm_act_fwd, P.n, P.c, P.hw, L, b->in[0], mean, var, P.eps, b->in[1], b->in[2],
           P.abs_gamma, P.act, b->out[0], b->out[1]);
    return 0;
}

/* in: xhat, gamma, beta   out: z   (checkpoint_opt recompute) */
static int from_xhat_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    IABN_K(norm_act_from_xhat, P.n, P.c, P.hw, act_layout(g, n), b->in[0], P.eps, b->in[1],
           b->in[2], P.abs_gamma, P.act, b->out[0]);
    return 0;
}

/* in: xhat, dy, var, gamma   out: dx [, dgamma, dbeta] */
static int bn_bwd_xhat_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    iabn_layout L = act_layout(g, n);
    float *sum_dy = b->scratch, *sum_dy_xhat = sum_dy + P.c;
    IABN_K(bn_bwd_reduce_xhat, P.n, P.c, P.hw, L, b->in[0], b->in[1], sum_dy, sum_dy_xhat);
    if (P.grads)
        IABN_K(bn_param_grads, P.c, b->in[3], P.abs_gamma, sum_dy, sum_dy_xhat, b->out[1], b->out[2]);
    IABN_K(bn_bwd_apply_xhat, P.n, P.c, P.hw, L, b->in[0], b->in[1], b->in[2], P.eps, b->in[3],
           P.abs_gamma, sum_dy, sum_dy_xhat, (double)P.n * P.hw, 1, b->out[0]);
    return 0;
}

/* in: x, gamma, beta, rmean, rvar   out: z (over x), mean, var   (in-place ABN) */
static int iabn_fwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    return train_fwd(g, n, &P, b, 1, P.act, b->out[1], b->out[2], b->out[0], e);
}

/* in: z, dz, var, gamma, beta   out: dx (over dz) [, dgamma, dbeta] */
static int iabn_bwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    iabn_layout L = act_layout(g, n);
    float *sum_dy = b->scratch, *sum_dy_xhat = sum_dy + P.c;
    double m = (double)P.n * P.hw;
    int one_call = P.training && !synchronised(g, &P) && b->backend->k->iabn_bwd_train;
    if (one_call)
        IABN_K(iabn_bwd_train, P.variant, P.n, P.c, P.hw, L, b->in[0], b->in[1], b->in[2], P.eps,
               b->in[3], b->in[4], P.abs_gamma, P.act, sum_dy, sum_dy_xhat, b->out[0]);
    else if (P.training)
        IABN_K(iabn_bwd_reduce, P.variant, P.n, P.c, P.hw, L, b->in[0], b->in[1], P.eps,
               b->in[3], b->in[4], P.act, sum_dy, sum_dy_xhat);
    if (P.training && P.grads)
        IABN_K(bn_param_grads, P.c, b->in[3], P.abs_gamma, sum_dy, sum_dy_xhat, b->out[1],
               b->out[2]);
    if (one_call) return 0;
    if (P.training) {
        int rc = sync_pair(g, n, &P, b, sum_dy, sum_dy_xhat, &m, 0, e);
        if (rc) return rc;
    }
    IABN_K(iabn_bwd_apply, P.variant, P.n, P.c, P.hw, L, b->in[0], b->in[1], b->in[2], P.eps,
           b->in[3], b->in[4], P.abs_gamma, P.act, sum_dy, sum_dy_xhat, m, P.training,
           b->out[0]);
    return 0;
}

/* in: x, gamma, beta, rmean, rvar   out: z   (evaluation / frozen) */
static int eval_fwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    IABN_K(norm_act_fwd, P.n, P.c, P.hw, act_layout(g, n), b->in[0], b->in[3], b->in[4], P.eps,
           b->in[1], b->in[2], P.abs_gamma, P.act, b->out[0], NULL);
    return 0;
}

static const iabn_op_def op_bn_apply = {
    .name = "bn_apply",
    .run = bn_apply_run,
    .layout = IABN_LAYOUT_RULE_SAME,
    .absorb = bn_absorb,
};
static const iabn_op_def op_bn_bwd = {
    .name = "bn_bwd", .scratch_bytes = sums_scratch,
    .run = bn_bwd_run,
    .layout = IABN_LAYOUT_RULE_SAME,
    .absorb_prev = bn_bwd_absorb_prev,
};
static const iabn_op_def op_act_bwd = {
    .name = "act_bwd",
    .run = act_bwd_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};
static const iabn_op_def op_from_xhat = {
    .name = "norm_act_from_xhat",
    .run = from_xhat_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};
static const iabn_op_def op_bn_bwd_xhat = {
    .name = "bn_bwd_xhat", .scratch_bytes = sums_scratch,
    .run = bn_bwd_xhat_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};
static const iabn_op_def op_iabn_bwd = {
    .name = "inplace_abn_bwd", .scratch_bytes = sums_scratch,
    .run = iabn_bwd_run,
    .layout = IABN_LAYOUT_RULE_SAME,
    .own_buffer = 1,
};

/* ---- backward builders ---------------------------------------------------------- */

static void grad_outs(iabn_graph *g, const iabn_node *fw, int gamma_in, int beta_in, int *outs,
                      na_p *P)
{
    P->grads = needs_grad(g, fw->in[gamma_in]);
    outs[1] = P->grads ? iabn_graph_param_grad(g, fw->in[gamma_in]) : -1;
    outs[2] = P->grads ? iabn_graph_param_grad(g, fw->in[beta_in]) : -1;
}

static int bn_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    IABN_PARAMS(na_p, &fw);
    int x = fw.in[0], dy = dout[0];
    if (dy < 0) return 0;
    int outs[3];
    outs[0] = like(g, x, "d.", "");
    grad_outs(g, &fw, 1, 2, outs, &P);
    int ins[6] = {x, dy, fw.out[1], fw.out[2], fw.in[1], fw.in[2]};
    int b = iabn_graph_node(g, &op_bn_bwd, fw.name, 6, ins, P.grads ? 3 : 1, outs, &P, sizeof P);
    iabn_graph_inplace(g, b, 0, 1, 0);
    din[0] = outs[0];
    (void)e;
    return iabn_graph_ok(g) ? 0 : -1;
}

static int bn_recompute(iabn_graph *g, int node, const int *inputs, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    int y = like(g, fw.out[0], "", "'");
    int ins[5] = {inputs[0], fw.out[1], fw.out[2], inputs[1], inputs[2]};
    (void)e;
    return iabn_graph_node(g, &op_bn_apply, fw.name, 5, ins, 1, &y, fw.params, sizeof(na_p));
}

static int act_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    (void)e;
    if (dout[0] < 0) return 0;
    int ins[2] = {fw.out[0], dout[0]};
    return grad_node(g, &fw, &op_act_bwd, 2, ins, fw.params, sizeof(na_p), 1, din);
}

static int ckopt_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    IABN_PARAMS(na_p, &fw);
    if (dout[0] < 0) return 0;
    int dy = like(g, fw.in[0], "d.", ".y");
    int ins[2] = {fw.out[0], dout[0]};
    int a = iabn_graph_node(g, &op_act_bwd, fw.name, 2, ins, 1, &dy, &P, sizeof P);
    iabn_graph_inplace(g, a, 0, 1, 0);
    int outs[3];
    outs[0] = like(g, fw.in[0], "d.", "");
    grad_outs(g, &fw, 1, 2, outs, &P);
    int ins2[4] = {fw.out[1], dy, fw.out[3], fw.in[1]};
    int b = iabn_graph_node(g, &op_bn_bwd_xhat, fw.name, 4, ins2, P.grads ? 3 : 1, outs, &P,
                            sizeof P);
    iabn_graph_inplace(g, b, 0, 1, 0);
    din[0] = outs[0];
    (void)e;
    return iabn_graph_ok(g) ? 0 : -1;
}

static int ckopt_recompute(iabn_graph *g, int node, const int *inputs, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    int z = like(g, fw.out[0], "", "'");
    int ins[3] = {fw.out[1], inputs[1], inputs[2]};
    (void)e;
    return iabn_graph_node(g, &op_from_xhat, fw.name, 3, ins, 1, &z, fw.params, sizeof(na_p));
}

/* In-place and frozen/eval units share the backward: it reads z only. */
static int iabn_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    IABN_PARAMS(na_p, &fw);
    if (dout[0] < 0) return 0;
    int outs[3];
    outs[0] = like(g, fw.in[0], "d.", "");
    if (P.training) grad_outs(g, &fw, 1, 2, outs, &P);
    else P.grads = 0;
    int var = P.training ? fw.out[2] : fw.in[4];
    int ins[5] = {fw.out[0], dout[0], var, fw.in[1], fw.in[2]};
    int b = iabn_graph_node(g, &op_iabn_bwd, fw.name, 5, ins, P.grads ? 3 : 1, outs, &P, sizeof P);
    /* dx over dz: required for the in-place modes (that is the memory saving),
     * permitted for the frozen unit. */
    iabn_graph_inplace(g, b, 0, 1, P.training);
    din[0] = outs[0];
    (void)e;
    return iabn_graph_ok(g) ? 0 : -1;
}

static const iabn_op_def op_bn = {
    .name = "bn", .backward = bn_backward, .recompute = bn_recompute,
    .run = bn_fwd_run,
    .layout = IABN_LAYOUT_RULE_SAME,
    .absorb = bn_absorb,
};
static const iabn_op_def op_act = {
    .name = "act", .backward = act_backward,
    .run = act_fwd_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};
static const iabn_op_def op_ckopt = {
    .name = "norm_act_ckpt_opt", .backward = ckopt_backward, .recompute = ckopt_recompute,
    .run = ckopt_fwd_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};
/* own_buffer: where x is still needed afterwards (a residual shortcut), z
 * goes to a buffer of its own instead of over a copy of x (graph.h). */
static const iabn_op_def op_iabn = {
    .name = "inplace_abn", .backward = iabn_backward,
    .run = iabn_fwd_run,
    .layout = IABN_LAYOUT_RULE_SAME,
    .own_buffer = 1,
};
static const iabn_op_def op_eval = {
    .name = "norm_act_eval", .backward = iabn_backward,
    .run = eval_fwd_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};

int iabn_act_layer(iabn_graph *g, const char *name, int x, iabn_act act)
{
    if (x < 0 || !iabn_graph_ok(g)) return -1;
    iabn_err bad = {0};
    if (iabn_act_check(act, &bad)) return iabn_graph_fail(g, bad.code, "%s: %s", name, bad.msg);
    na_p P;
    memset(&P, 0, sizeof P);
    P.act = act;
    int y = named(g, name, "", IABN_F32, lt(g, x)->nd, lt(g, x)->shape);
    int n = iabn_graph_node(g, &op_act, name, 1, &x, 1, &y, &P, sizeof P);
    iabn_graph_inplace(g, n, 0, 0, 0);
    return n < 0 ? -1 : y;
}

int iabn_norm_act(iabn_graph *g, const char *name, int x, const iabn_norm_act_cfg *cfg)
{
    if (x < 0 || !iabn_graph_ok(g)) return -1;
    const iabn_tensor *xt = lt(g, x);
    /* copies: adding tensors (param(), named()) moves the array xt points into */
    int xnd = xt->nd, xs[IABN_MAX_DIMS];
    memcpy(xs, xt->shape, sizeof xs);
    if (xt->nd != 4 && xt->nd != 2)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: input %s must be N,C,H,W or N,C", name,
                               xt->name);
    iabn_err bad = {0};
    if (iabn_bn_mode_check(cfg->mode, &bad) || iabn_act_check(cfg->act, &bad))
        return iabn_graph_fail(g, bad.code, "%s: %s", name, bad.msg);
    int inplace = iabn_bn_mode_is_inplace(cfg->mode);
    if (inplace && !iabn_act_invertible(cfg->act.kind))
        return iabn_graph_fail(g, IABN_EINVAL,
                               "%s: mode %s cannot use %s: %s is not invertible, so the "
                               "input cannot be rebuilt from the output; use an invertible "
                               "activation (leaky_relu, elu, identity) or a mode that keeps "
                               "its input (standard, checkpoint, checkpoint_opt)",
                               name, iabn_bn_mode_name(cfg->mode), iabn_act_name(cfg->act.kind),
                               iabn_act_name(cfg->act.kind));
    if (cfg->eps <= 0.f || cfg->momentum < 0.f || cfg->momentum > 1.f)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: eps must be > 0 and momentum in [0, 1]", name);
    na_p P;
    memset(&P, 0, sizeof P);
    nchw(xt, &P.n, &P.c, &P.hw);
    P.eps = cfg->eps;
    P.momentum = cfg->momentum;
    P.abs_gamma = iabn_bn_mode_abs_gamma(cfg->mode);
    P.act = cfg->act;
    P.variant = bn_mode_variant(cfg->mode);
    P.sync = iabn_bn_mode_is_sync(cfg->mode);
    int training = iabn_graph_mode(g) == IABN_TRAIN && !cfg->frozen;
    P.training = training;
    if (training && (long)P.n * P.hw <= 1)
        return iabn_graph_fail(g, IABN_EINVAL,
                               "%s: one value per channel (input %s): batch statistics need at "
                               "least two values per channel in training",
                               name, xt->name);
    int cs[1] = {P.c};
    int gamma = param(g, name, ".weight", IABN_P_BN_WEIGHT, 1, cs);
    int beta = param(g, name, ".bias", IABN_P_BIAS, 1, cs);
    int rmean = param(g, name, ".running_mean", IABN_P_BUFFER, 1, cs);
    int rvar = param(g, name, ".running_var", IABN_P_BUFFER, 1, cs);
    if (!iabn_graph_ok(g)) return -1;
    /* the store keeps the convention with the weight, for the weight files */
    iabn_param *gp = iabn_store_get(iabn_graph_store(g), lt(g, gamma)->store_id);
    gp->bn_abs = P.abs_gamma;
    gp->bn_eps = cfg->eps;
    if (cfg->frozen) {
        /* the store remembers it, so the optimizer leaves them alone too */
        iabn_store *st = iabn_graph_store(g);
        iabn_store_get(st, lt(g, gamma)->store_id)->frozen = 1;
        iabn_store_get(st, lt(g, beta)->store_id)->frozen = 1;
        iabn_graph_t_mut(g, gamma)->requires_grad = 0;
        iabn_graph_t_mut(g, beta)->requires_grad = 0;
    }
    int ins[5] = {x, gamma, beta, rmean, rvar};
    int z = named(g, name, "", IABN_F32, xnd, xs);
    if (!training) {
        int n = iabn_graph_node(g, &op_eval, name, 5, ins, 1, &z, &P, sizeof P);
        iabn_graph_inplace(g, n, 0, 0, 0);
        return n < 0 ? -1 : z;
    }
    int mean = named(g, name, ".mean", IABN_F32, 1, cs);
    int var = named(g, name, ".var", IABN_F32, 1, cs);
    switch (cfg->mode) {
    case IABN_BN_STANDARD:
    case IABN_BN_STANDARD_SYNC:
    case IABN_BN_CHECKPOINT: {
        int y = named(g, name, ".y", IABN_F32, xnd, xs);
        int outs[3] = {y, mean, var};
        if (iabn_graph_node(g, &op_bn, name, 5, ins, 3, outs, &P, sizeof P) < 0) return -1;
        char an[IABN_NAME_LEN];
        snprintf(an, sizeof an, "%.80s.act", name);
        int a = iabn_graph_node(g, &op_act, an, 1, &y, 1, &z, &P, sizeof P);
        iabn_graph_inplace(g, a, 0, 0, 0);
        if (cfg->mode == IABN_BN_CHECKPOINT) {
            iabn_graph_set_policy(g, y, IABN_RECOMPUTE);
            iabn_graph_set_policy(g, z, IABN_RECOMPUTE);
        }
        return a < 0 ? -1 : z;
    }
    case IABN_BN_CHECKPOINT_OPT: {
        int xhat = named(g, name, ".xhat", IABN_F32, xnd, xs);
        int outs[4] = {z, xhat, mean, var};
        if (iabn_graph_node(g, &op_ckopt, name, 5, ins, 4, outs, &P, sizeof P) < 0) return -1;
        iabn_graph_set_policy(g, z, IABN_RECOMPUTE);
        return z;
    }
    case IABN_BN_INPLACE:
    case IABN_BN_INPLACE_II:
    case IABN_BN_INPLACE_SYNC:
    case IABN_BN_INPLACE_SYNC_I:
    case IABN_BN_NMODES: /* refused above */
        break;
    }
    /* the in-place modes: one node writing z over x */
    int outs[3] = {z, mean, var};
    int n = iabn_graph_node(g, &op_iabn, name, 5, ins, 3, outs, &P, sizeof P);
    iabn_graph_inplace(g, n, 0, 0, 1);
    return n < 0 ? -1 : z;
}
