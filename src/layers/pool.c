/* pool.c: max pooling (keeps an int32 argmax for the backward, never its
 * input) and global average pooling, both in any activation layout. */
#include "layers/layer_util.h"

/* The layout comes from x (the backward's: from dx), the larger side: the
 * layout pass leaves out the int32 argmax (not a float tensor) and any 1x1
 * map (the same memory in both layouts), whose labels then stay NCHW while
 * the kernel stores them in x's layout; only the backward reads the argmax.
 * A 1x1 x makes a 1x1 y. */
static int max_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(pool_p, n);
    const iabn_tensor *x = lt(g, n->in[0]), *y = lt(g, n->out[0]);
    IABN_K(maxpool_fwd, x->shape[0], x->shape[1], x->shape[2], x->shape[3], x->layout, P.k, P.s,
           P.p, y->shape[2], y->shape[3], b->in[0], b->out[0], b->out[1]);
    return 0;
}

/* in: dy, argmax   out: dx */
static int max_bwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(pool_p, n);
    const iabn_tensor *dy = lt(g, n->in[0]), *dx = lt(g, n->out[0]);
    IABN_K(maxpool_bwd, dx->shape[0], dx->shape[1], dx->shape[2], dx->shape[3], dx->layout, P.k,
           P.s, P.p, dy->shape[2], dy->shape[3], b->in[0], b->in[1], b->out[0]);
    return 0;
}

static const iabn_op_def op_max_bwd = {
    .name = "maxpool_bwd",
    .run = max_bwd_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};

static int max_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    (void)e;
    if (dout[0] < 0) return 0;
    int ins[2] = {dout[0], fw.out[1]};
    /* the CPU scatter needs only the argmax; the CUDA gather needs k, s, p */
    return grad_node(g, &fw, &op_max_bwd, 2, ins, fw.params, sizeof(pool_p), -1, din);
}

static const iabn_op_def op_max = {
    .name = "maxpool", .backward = max_backward,
    .run = max_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};

int iabn_maxpool(iabn_graph *g, const char *name, int x, int k, int stride, int pad)
{
    if (x < 0 || !iabn_graph_ok(g)) return -1;
    const iabn_tensor *t = lt(g, x);
    if (t->nd != 4 || k < 1 || stride < 1 || pad < 0 || 2 * pad > k)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: bad max pool (kernel %d, stride %d, pad %d)",
                               name, k, stride, pad);
    int ho = iabn_pool_out(t->shape[2], k, stride, pad), wo = iabn_pool_out(t->shape[3], k, stride, pad);
    if (ho < 1 || wo < 1)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: input %dx%d too small for the pool", name,
                               t->shape[2], t->shape[3]);
    int shape[4] = {t->shape[0], t->shape[1], ho, wo};
    int y = named(g, name, "", IABN_F32, 4, shape);
    int am = named(g, name, ".argmax", IABN_I32, 4, shape);
    pool_p P = {k, stride, pad};
    int outs[2] = {y, am};
    return iabn_graph_node(g, &op_max, name, 1, &x, 2, outs, &P, sizeof P) < 0 ? -1 : y;
}

static int gap_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    int nn, c, hw;
    nchw(lt(g, n->in[0]), &nn, &c, &hw);
    IABN_K(gap_fwd, nn, c, hw, lt(g, n->in[0])->layout, b->in[0], b->out[0]);
    return 0;
}

static int gap_bwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    int nn, c, hw;
    nchw(lt(g, n->out[0]), &nn, &c, &hw);
    /* the activation is dx; dy is (N, C, 1, 1), the same in every layout */
    IABN_K(gap_bwd, nn, c, hw, lt(g, n->out[0])->layout, b->in[0], b->out[0]);
    return 0;
}

static const iabn_op_def op_gap_bwd = {
    .name = "avgpool_bwd",
    .run = gap_bwd_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};

static int gap_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    (void)e;
    if (dout[0] < 0) return 0;
    return grad_node(g, &fw, &op_gap_bwd, 1, &dout[0], NULL, 0, -1, din);
}

static const iabn_op_def op_gap = {
    .name = "global_avgpool", .backward = gap_backward,
    .run = gap_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};

int iabn_global_avgpool(iabn_graph *g, const char *name, int x)
{
    if (x < 0 || !iabn_graph_ok(g)) return -1;
    const iabn_tensor *t = lt(g, x);
    if (t->nd != 4) return iabn_graph_fail(g, IABN_EINVAL, "%s: %s is not 4-D", name, t->name);
    int shape[4] = {t->shape[0], t->shape[1], 1, 1};
    int y = named(g, name, "", IABN_F32, 4, shape);
    return iabn_graph_node(g, &op_gap, name, 1, &x, 1, &y, NULL, 0) < 0 ? -1 : y;
}
