/* avgpool.c: windowed average pooling, two layers over one op.
 *
 *   iabn_avgpool       k x k windows, stride s, no padding (DenseNet's
 *                      transition AvgPool2d(2, 2))
 *   iabn_avgpool_same  the reference DeepLabV3 head's evaluation-time global
 *                      branch: stride-1 windows of min(kh, H) x min(kw, W),
 *                      the pooled map replicate-padded back to H x W (left /
 *                      top pad (k - 1) / 2, the rest right / bottom)
 *
 * Both are "output (i, j) averages the window of pooled cell
 * (clamp(i - top), clamp(j - left))", one kernel-table entry (the CPU's in
 * src/tensor/cpu/pool.c sums windows separably: 84 x 84 costs O(1) a cell). */
#include "layers/layer_util.h"
#include "layers/layer_params.h"



/* in: x (fwd) or dy (bwd)   out: y or dx; the window through the kernel table */
static int avg_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, int bwd,
                   iabn_err *e)
{
    IABN_PARAMS(avg_p, n);
    const iabn_tensor *x = lt(g, bwd ? n->out[0] : n->in[0]);
    const iabn_tensor *y = lt(g, bwd ? n->in[0] : n->out[0]);
    const iabn_kernels *k = b->backend->k;
    if (!(bwd ? k->avgpool_bwd : k->avgpool_fwd))
        return iabn_err_set(e, IABN_EINVAL, "%s: windowed average pooling has no %s kernel",
                            n->name, b->backend->name);
    int win[8] = {P.kh, P.kw, P.sh, P.sw, P.ph, P.pw, P.top, P.left};
    if (bwd)
        IABN_K(avgpool_bwd, x->shape[0], x->shape[1], x->shape[2], x->shape[3], win, y->shape[2],
               y->shape[3], b->in[0], b->out[0]);
    else
        IABN_K(avgpool_fwd, x->shape[0], x->shape[1], x->shape[2], x->shape[3], win, y->shape[2],
               y->shape[3], b->in[0], b->out[0]);
    return 0;
}

static int avg_fwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    return avg_run(g, n, b, 0, e);
}

static int avg_bwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    return avg_run(g, n, b, 1, e);
}

static const iabn_op_def op_avg_bwd = {.name = "avgpool_window_bwd", .run = avg_bwd_run};

static int avg_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    (void)e;
    if (dout[0] < 0) return 0;
    return grad_node(g, &fw, &op_avg_bwd, 1, &dout[0], fw.params, sizeof(avg_p), -1, din);
}

static const iabn_op_def op_avg = {
    .name = "avgpool_window", .backward = avg_backward, .run = avg_fwd_run,
};

static int avg_node(iabn_graph *g, const char *name, int x, const avg_p *P, int oh, int ow)
{
    const iabn_tensor *t = lt(g, x);
    int shape[4] = {t->shape[0], t->shape[1], oh, ow};
    int y = named(g, name, "", IABN_F32, 4, shape);
    return iabn_graph_node(g, &op_avg, name, 1, &x, 1, &y, P, sizeof *P) < 0 ? -1 : y;
}

int iabn_avgpool(iabn_graph *g, const char *name, int x, int k, int stride)
{
    if (x < 0 || !iabn_graph_ok(g)) return -1;
    const iabn_tensor *t = lt(g, x);
    if (t->nd != 4 || k < 1 || stride < 1)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: bad average pool (kernel %d, stride %d)", name,
                               k, stride);
    if (t->shape[2] < k || t->shape[3] < k)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: input %dx%d smaller than the %dx%d window",
                               name, t->shape[2], t->shape[3], k, k);
    avg_p P = {k, k, stride, stride, (t->shape[2] - k) / stride + 1, (t->shape[3] - k) / stride + 1,
               0, 0};
    return avg_node(g, name, x, &P, P.ph, P.pw);
}

int iabn_avgpool_same(iabn_graph *g, const char *name, int x, int kh, int kw)
{
    if (x < 0 || !iabn_graph_ok(g)) return -1;
    const iabn_tensor *t = lt(g, x);
    if (t->nd != 4 || kh < 1 || kw < 1)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: bad pooling size %dx%d", name, kh, kw);
    int H = t->shape[2], W = t->shape[3];
    if (kh > H) kh = H;
    if (kw > W) kw = W;
    avg_p P = {kh, kw, 1, 1, H - kh + 1, W - kw + 1, (kh - 1) / 2, (kw - 1) / 2};
    return avg_node(g, name, x, &P, H, W);
}
