/* loss.c: softmax cross-entropy over channels with an ignore index and
 * optional online bootstrapping, or with label smoothing (its own op).  The
 * forward writes the mean loss (a graph output) and per-pixel weights (0 or
 * 1/counted) that the backward uses, so the backward needs the logits and
 * labels only.  Also the regression
 * losses L1 and MSE (mean over all elements).
 *
 * In a data-parallel job (the graph has a communicator of several ranks) the
 * cross-entropy's mean is over every rank's counted pixels: the forward
 * all-reduces (loss sum, count) and sets the weights to 1/global count, so
 * each rank's gradient is its share of the job's mean and the gradient
 * all-reduce is a plain sum; unequal per-rank batches stay exact. */
#include "layers/layer_util.h"

#include <stdlib.h>

static size_t fwd_scratch(const iabn_graph *g, const iabn_node *n, const iabn_backend *be)
{
    (void)g;
    IABN_PARAMS(xent_p, n);
    return be->k->xent_scratch(P.n, P.hw);
}

/* A rank's mean loss and weights (1/local count, host arrays) -> the job's. */
static int global_mean_host(const iabn_graph *g, const iabn_node *n, size_t m, float *loss,
                            float *weight, iabn_err *e)
{
    size_t kept = 0;
    for (size_t i = 0; i < m; i++) kept += weight[i] != 0.f;
    double d[2] = {(double)*loss * (double)kept, (double)kept};
    int rc = iabn_comm_allreduce(iabn_graph_comm(g), NULL, d, 2, IABN_COMM_F64, n->name, e);
    if (rc) return rc;
    float w = d[1] > 0 ? (float)(1.0 / d[1]) : 0.f;
    for (size_t i = 0; i < m; i++)
        if (weight[i] != 0.f) weight[i] = w;
    *loss = d[1] > 0 ? (float)(d[0] / d[1]) : 0.f;
    return 0;
}

/* The job's mean over several ranks (nothing with one), on any backend: the
 * loss and the weights go through host memory off the CPU. */
static int global_mean(const iabn_graph *g, const iabn_node *n, const xent_p *P,
                       const iabn_bind *b, iabn_err *e)
{
    if (iabn_comm_size(iabn_graph_comm(g)) == 1) return 0;
    const iabn_backend *be = b->backend;
    size_t m = (size_t)P->n * (size_t)P->hw;
    if (be->kind == IABN_DEV_CPU) return global_mean_host(g, n, m, b->out[0], b->out[1], e);
    float *h = malloc((m + 1) * sizeof *h);
    if (!h) return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory", n->name);
    int rc = be->d2h(be->ctx, h, b->out[0], sizeof(float)) ||
                     be->d2h(be->ctx, h + 1, b->out[1], m * sizeof(float))
                 ? iabn_err_set(e, IABN_EDEVICE, "%s: copying the weights failed", n->name)
                 : global_mean_host(g, n, m, h, h + 1, e);
    if (!rc && (be->h2d(be->ctx, b->out[0], h, sizeof(float)) ||
                be->h2d(be->ctx, b->out[1], h + 1, m * sizeof(float))))
        rc = iabn_err_set(e, IABN_EDEVICE, "%s: copying the weights back failed", n->name);
    free(h);
    return rc;
}

/* in: logits, labels   out: loss, weight */
static int fwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(xent_p, n);
    long bad = -1;
    int bad_label = -1;
    int rc = b->backend->k->xent_fwd(b->backend->ctx, P.n, P.k, P.hw, b->in[0], b->in[1],
                                     P.ignore, P.top_frac, b->out[0], b->out[1], b->scratch,
                                     &bad, &bad_label, e);
    if (rc == IABN_EINVAL)
        return iabn_err_set(e, IABN_EINVAL,
                            "label %d at position %ld is outside [0, %d) and is not the ignore "
                            "index %d",
                            bad_label, bad, P.k, P.ignore);
    return rc ? rc : global_mean(g, n, &P, b, e);
}

/* in: logits, labels, weight   out: dlogits */
static int bwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(xent_p, n);
    IABN_K(xent_bwd, P.n, P.k, P.hw, b->in[0], b->in[1], b->in[2], 1.0f, b->out[0]);
    return 0;
}

static const iabn_op_def op_bwd = {
    .name = "softmax_xent_bwd",
    .run = bwd_run,
};

/* A loss is the root of the backward: its output's gradient is the implicit 1. */
static int loss_root(iabn_graph *g, const iabn_node *fw, const int *dout)
{
    if (dout[0] == IABN_GRAD_ONE) return 1;
    iabn_graph_fail(g, IABN_EINVAL, "%s: the loss must be the root of the backward", fw->name);
    return 0;
}

/* The cross-entropy ops' backward: dlogits = op(logits, labels, weight). */
static int xent_grad(iabn_graph *g, int node, const int *dout, int *din, const iabn_op_def *op)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    if (!loss_root(g, &fw, dout)) return -1;
    int ins[3] = {fw.in[0], fw.in[1], fw.out[1]};
    return grad_node(g, &fw, op, 3, ins, fw.params, sizeof(xent_p), -1, din);
}

static int xent_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    (void)e;
    return xent_grad(g, node, dout, din, &op_bwd);
}

static const iabn_op_def op_xent = {
    .name = "softmax_xent", .backward = xent_backward, .scratch_bytes = fwd_scratch,
    .run = fwd_run,
};

/* ---- label smoothing: its own op (CPU and CUDA kernels; optional in the table) ---- */

static int no_smooth_kernel(const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    return iabn_err_set(e, IABN_EINVAL, "%s: label smoothing has no kernel on the %s backend "
                        "(train without --label-smoothing there)", n->name, b->backend->name);
}

/* in: logits, labels   out: loss, weight */
static int smooth_fwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                          iabn_err *e)
{
    IABN_PARAMS(xent_p, n);
    if (!b->backend->k->xent_smooth_fwd) return no_smooth_kernel(n, b, e);
    long bad = -1;
    int bad_label = -1;
    int rc = b->backend->k->xent_smooth_fwd(b->backend->ctx, P.n, P.k, P.hw, b->in[0], b->in[1],
                                            P.ignore, P.smoothing, b->out[0], b->out[1], &bad,
                                            &bad_label, e);
    if (rc == IABN_EINVAL)
        return iabn_err_set(e, IABN_EINVAL,
                            "%s: label %d at position %ld is outside [0, %d) and is not the "
                            "ignore index %d",
                            n->name, bad_label, bad, P.k, P.ignore);
    return rc;
}

/* in: logits, labels, weight   out: dlogits */
static int smooth_bwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                          iabn_err *e)
{
    IABN_PARAMS(xent_p, n);
    if (!b->backend->k->xent_smooth_bwd) return no_smooth_kernel(n, b, e);
    IABN_K(xent_smooth_bwd, P.n, P.k, P.hw, b->in[0], b->in[1], b->in[2], P.smoothing, 1.0f,
           b->out[0]);
    return 0;
}

static const iabn_op_def op_smooth_bwd = {
    .name = "softmax_xent_smooth_bwd",
    .run = smooth_bwd_run,
};

static int smooth_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    (void)e;
    return xent_grad(g, node, dout, din, &op_smooth_bwd);
}

static const iabn_op_def op_xent_smooth = {
    .name = "softmax_xent_smooth", .backward = smooth_backward,
    .run = smooth_fwd_run,
};

/* Both cross-entropy ops: the labels checked against the logits, then the
 * node with its loss and per-pixel weight outputs. */
static int xent_node(iabn_graph *g, const iabn_op_def *op, const char *name, int logits,
                     int labels, int ignore_index, float top_frac, float eps)
{
    const iabn_tensor *l = lt(g, logits), *y = lt(g, labels);
    xent_p P;
    memset(&P, 0, sizeof P);
    nchw(l, &P.n, &P.k, &P.hw);
    P.ignore = ignore_index;
    P.top_frac = top_frac;
    P.smoothing = eps;
    size_t want = (size_t)P.n * (size_t)P.hw * 4;
    if (y->dtype != IABN_I32 || y->nbytes != want || y->shape[0] != P.n)
        return iabn_graph_fail(g, IABN_EINVAL,
                               "%s: labels %s must be int32 with one value per sample / pixel of "
                               "%s",
                               name, y->name, l->name);
    int one[1] = {1};
    int loss = named(g, name, "", IABN_F32, 1, one);
    int wshape[1] = {P.n * P.hw};
    int w = named(g, name, ".weight", IABN_F32, 1, wshape);
    int ins[2] = {logits, labels};
    int outs[2] = {loss, w};
    if (iabn_graph_node(g, op, name, 2, ins, 2, outs, &P, sizeof P) < 0) return -1;
    iabn_graph_mark_output(g, loss);
    return loss;
}

int iabn_softmax_xent(iabn_graph *g, const char *name, int logits, int labels,
                      int ignore_index, float top_frac)
{
    if (logits < 0 || labels < 0 || !iabn_graph_ok(g)) return -1;
    if (!(top_frac > 0.f && top_frac <= 1.f))
        return iabn_graph_fail(g, IABN_EINVAL, "%s: bootstrapping fraction %g not in (0, 1]",
                               name, (double)top_frac);
    return xent_node(g, &op_xent, name, logits, labels, ignore_index, top_frac, 0.f);
}

int iabn_softmax_xent_smooth(iabn_graph *g, const char *name, int logits, int labels,
                             int ignore_index, float top_frac, float eps)
{
    if (eps == 0.f) return iabn_softmax_xent(g, name, logits, labels, ignore_index, top_frac);
    if (logits < 0 || labels < 0 || !iabn_graph_ok(g)) return -1;
    if (!(eps > 0.f && eps < 1.f))
        return iabn_graph_fail(g, IABN_EINVAL, "%s: label smoothing %g not in [0, 1)", name,
                               (double)eps);
    if (top_frac != 1.f)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: label smoothing and bootstrapping (%g) "
                               "together are not supported: one or the other", name,
                               (double)top_frac);
    return xent_node(g, &op_xent_smooth, name, logits, labels, ignore_index, 1.f, eps);
}

/* ---- L1 and MSE ------------------------------------------------------------- */

typedef struct reg_p {
    size_t count;
    int mse;                 /* 0: L1, 1: MSE */
} reg_p;

/* in: pred, target   out: loss (the mean, summed in double) */
static int reg_fwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(reg_p, n);
    IABN_K(reg_loss_fwd, P.count, P.mse, b->in[0], b->in[1], b->out[0]);
    return 0;
}

/* in: pred, target   out: dpred = sign(y - t) / count (L1; 0 where equal) or
 * 2 (y - t) / count (MSE); written whether or not dpred is pred's storage */
static int reg_bwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(reg_p, n);
    IABN_K(reg_loss_bwd, P.count, P.mse, b->in[0], b->in[1], b->out[0]);
    return 0;
}

static const iabn_op_def op_reg_bwd = {.name = "regression_loss_bwd", .run = reg_bwd_run};

static int reg_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    (void)e;
    if (!loss_root(g, &fw, dout)) return -1;
    if (!needs_grad(g, fw.in[0])) return 0;
    int ins[2] = {fw.in[0], fw.in[1]};
    return grad_node(g, &fw, &op_reg_bwd, 2, ins, fw.params, sizeof(reg_p), -1, din);
}

static const iabn_op_def op_l1 = {
    .name = "l1_loss", .backward = reg_backward, .run = reg_fwd_run,
};
static const iabn_op_def op_mse = {
    .name = "mse_loss", .backward = reg_backward, .run = reg_fwd_run,
};

static int regression(iabn_graph *g, const char *name, int pred, int target, int mse)
{
    if (pred < 0 || target < 0 || !iabn_graph_ok(g)) return -1;
    const iabn_tensor *y = lt(g, pred), *t = lt(g, target);
    int same = y->dtype == IABN_F32 && t->dtype == IABN_F32 && y->nd == t->nd;
    for (int d = 0; same && d < y->nd; d++) same = y->shape[d] == t->shape[d];
    if (!same)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: target %s must be float32 shaped like %s",
                               name, t->name, y->name);
    reg_p P = {y->nbytes / sizeof(float), mse};
    int one[1] = {1};
    int loss = named(g, name, "", IABN_F32, 1, one);
    int ins[2] = {pred, target};
    if (iabn_graph_node(g, mse ? &op_mse : &op_l1, name, 2, ins, 1, &loss, &P, sizeof P) < 0)
        return -1;
    iabn_graph_mark_output(g, loss);
    return loss;
}

int iabn_l1_loss(iabn_graph *g, const char *name, int pred, int target)
{
    return regression(g, name, pred, target, 0);
}

int iabn_mse_loss(iabn_graph *g, const char *name, int pred, int target)
{
    return regression(g, name, pred, target, 1);
}
