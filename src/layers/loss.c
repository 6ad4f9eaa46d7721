/* loss.c: softmax cross-entropy over channels with an ignore index and
 * optional online bootstrapping.  The forward writes the mean loss (a graph
 * output) and per-pixel weights (0 or 1/counted) that the backward uses, so
 * the backward needs the logits and labels only.
 *
 * In a data-parallel job (the graph has a communicator of several ranks) the
 * mean is over every rank's counted pixels: the forward all-reduces (loss sum,
 * count) and sets the weights to 1/global count, so each rank's gradient is
 * its share of the global mean's and the gradient all-reduce is a plain sum;
 * unequal per-rank batches (the last one of an epoch) stay exact. */
#include "layers/layer_util.h"
#include "layers/layer_cuda.h"

static size_t fwd_scratch(const iabn_graph *g, const iabn_node *n, iabn_device_kind dev)
{
    (void)g;
    IABN_PARAMS(xent_p, n);
    /* the CUDA forward keeps its keys in the weight output itself */
    if (dev != IABN_DEV_CPU) return 0;
    return iabn_xent_scratch_bytes(P.n, P.hw);
}

/* Turns the rank's mean loss and weights (1/local count) into the job's. */
int iabn_xent_global_mean(const iabn_graph *g, const iabn_node *n, const xent_p *P, float *loss,
                          float *weight, iabn_err *e)
{
    iabn_comm *comm = iabn_graph_comm(g);
    if (iabn_comm_size(comm) == 1) return 0;
    size_t m = (size_t)P->n * (size_t)P->hw, kept = 0;
    for (size_t i = 0; i < m; i++) kept += weight[i] != 0.f;
    double d[2] = {(double)*loss * (double)kept, (double)kept};
    int rc = iabn_comm_allreduce(comm, NULL, d, 2, IABN_COMM_F64, n->name, e);
    if (rc) return rc;
    float w = d[1] > 0 ? (float)(1.0 / d[1]) : 0.f;
    for (size_t i = 0; i < m; i++)
        if (weight[i] != 0.f) weight[i] = w;
    *loss = d[1] > 0 ? (float)(d[0] / d[1]) : 0.f;
    return 0;
}

/* in: logits, labels   out: loss, weight */
static int fwd_cpu(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(xent_p, n);
    long bad = -1;
    if (iabn_xent_fwd(P.n, P.k, P.hw, b->in[0], b->in[1], P.ignore, P.top_frac, b->out[0],
                      b->out[1], b->scratch, &bad)) {
        const int32_t *lab = b->in[1];
        return iabn_err_set(e, IABN_EINVAL,
                            "label %d at position %ld is outside [0, %d) and is not the ignore "
                            "index %d",
                            bad >= 0 ? lab[bad] : -1, bad, P.k, P.ignore);
    }
    return iabn_xent_global_mean(g, n, &P, b->out[0], b->out[1], e);
}

/* in: logits, labels, weight   out: dlogits */
static int bwd_cpu(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(xent_p, n);
    iabn_xent_bwd(P.n, P.k, P.hw, b->in[0], b->in[1], b->in[2], 1.0f, b->out[0]);
    return 0;
}

static const iabn_op_def op_bwd = {
    .name = "softmax_xent_bwd",
    .run = {bwd_cpu, IABN_CUDA_RUN(iabn_cuda_run_xent_bwd)},
};

static int xent_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    (void)e;
    if (dout[0] != IABN_GRAD_ONE)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: the loss must be the root of the backward",
                               fw.name);
    int dl = like(g, fw.in[0], "d.", "");
    int ins[3] = {fw.in[0], fw.in[1], fw.out[1]};
    iabn_graph_node(g, &op_bwd, fw.name, 3, ins, 1, &dl, fw.params, sizeof(xent_p));
    din[0] = dl;
    return iabn_graph_ok(g) ? 0 : -1;
}

static const iabn_op_def op_xent = {
    .name = "softmax_xent", .backward = xent_backward, .scratch_bytes = fwd_scratch,
    .run = {fwd_cpu, IABN_CUDA_RUN(iabn_cuda_run_xent_fwd)},
};

int iabn_softmax_xent(iabn_graph *g, const char *name, int logits, int labels,
                      int ignore_index, float top_frac)
{
    if (logits < 0 || labels < 0 || !iabn_graph_ok(g)) return -1;
    const iabn_tensor *l = lt(g, logits), *y = lt(g, labels);
    xent_p P;
    memset(&P, 0, sizeof P);
    nchw(l, &P.n, &P.k, &P.hw);
    P.ignore = ignore_index;
    P.top_frac = top_frac;
    size_t want = (size_t)P.n * (size_t)P.hw * 4;
    if (y->dtype != IABN_I32 || y->nbytes != want || y->shape[0] != P.n)
        return iabn_graph_fail(g, IABN_EINVAL,
                               "%s: labels %s must be int32 with one value per sample / pixel of "
                               "%s",
                               name, y->name, l->name);
    if (!(top_frac > 0.f && top_frac <= 1.f))
        return iabn_graph_fail(g, IABN_EINVAL, "%s: bootstrapping fraction %g not in (0, 1]",
                               name, (double)top_frac);
    int one[1] = {1};
    int loss = named(g, name, "", IABN_F32, 1, one);
    int wshape[1] = {P.n * P.hw};
    int w = named(g, name, ".weight", IABN_F32, 1, wshape);
    int ins[2] = {logits, labels};
    int outs[2] = {loss, w};
    if (iabn_graph_node(g, &op_xent, name, 2, ins, 2, outs, &P, sizeof P) < 0) return -1;
    iabn_graph_mark_output(g, loss);
    return loss;
}
