/* linear.c: fully connected layer y = x w^T + b on N,C (or N,C,1,1) inputs. */
#include "layers/layer_util.h"

static int fwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(lin_p, n);
    IABN_K(linear_fwd, P.n, P.in, P.out, b->in[0], b->in[1], P.bias ? b->in[2] : NULL, b->out[0]);
    return 0;
}

/* in: dy, w  out: dx */
static int bwd_data_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(lin_p, n);
    IABN_K(linear_bwd_data, P.n, P.in, P.out, b->in[0], b->in[1], b->out[0]);
    return 0;
}

/* in: x, dy  out: dw [, db] */
static int bwd_w_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(lin_p, n);
    IABN_K(linear_bwd_weight, P.n, P.in, P.out, b->in[0], b->in[1], b->out[0],
           P.bias ? b->out[1] : NULL);
    return 0;
}

static const iabn_op_def op_bwd_data = {
    .name = "linear_bwd_data",
    .run = bwd_data_run,
};
static const iabn_op_def op_bwd_w = {
    .name = "linear_bwd_weight",
    .run = bwd_w_run,
};

static int lin_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    IABN_PARAMS(lin_p, &fw);
    (void)e;
    if (dout[0] < 0) return 0;
    if (needs_grad(g, fw.in[1])) {
        int outs[2] = {iabn_graph_param_grad(g, fw.in[1]),
                       P.bias ? iabn_graph_param_grad(g, fw.in[2]) : -1};
        int ins[2] = {fw.in[0], dout[0]};
        iabn_graph_node(g, &op_bwd_w, fw.name, 2, ins, P.bias ? 2 : 1, outs, &P, sizeof P);
    }
    if (needs_grad(g, fw.in[0])) {
        int dx = like(g, fw.in[0], "d.", "");
        int ins[2] = {dout[0], fw.in[1]};
        iabn_graph_node(g, &op_bwd_data, fw.name, 2, ins, 1, &dx, &P, sizeof P);
        din[0] = dx;
    }
    return iabn_graph_ok(g) ? 0 : -1;
}

static const iabn_op_def op_linear = {
    .name = "linear", .backward = lin_backward,
    .run = fwd_run,
};

int iabn_linear(iabn_graph *g, const char *name, int x, int out, int bias)
{
    if (x < 0 || !iabn_graph_ok(g)) return -1;
    const iabn_tensor *t = lt(g, x);
    int n, c, hw;
    nchw(t, &n, &c, &hw);
    if ((t->nd != 2 && t->nd != 4) || hw != 1 || out < 1)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: input %s must be N,C or N,C,1,1", name, t->name);
    lin_p P = {n, c, out, bias};
    int ws[2] = {out, c}, bs[1] = {out};
    int w = param(g, name, ".weight", IABN_P_WEIGHT, 2, ws);
    int b = bias ? param(g, name, ".bias", IABN_P_BIAS, 1, bs) : -1;
    int ys[2] = {n, out};
    int y = named(g, name, "", IABN_F32, 2, ys);
    int ins[3] = {x, w, b};
    return iabn_graph_node(g, &op_linear, name, bias ? 3 : 2, ins, 1, &y, &P, sizeof P) < 0 ? -1 : y;
}
