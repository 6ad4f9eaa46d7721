/* conv.c: 2-D convolution (stride, padding, dilation, groups, optional bias).
 * Forward reads x and w; the backward's filter pass reads x (that is what gets
 * saved) and the data pass reads w.  Kernels: the backend's conv_* entries
 * (src/tensor/cpu/conv.c, src/tensor/cuda/conv.cu). */
#include "layers/layer_util.h"

/* The backend's own scratch (CPU: im2col columns; CUDA: cuDNN's workspace
 * budget), a function of the shape alone. */
static size_t scratch_for(const iabn_node *n, iabn_conv_pass pass, const iabn_backend *be)
{
    IABN_PARAMS(conv_p, n);
    return be->k->conv_scratch(&P.geom, pass);
}

static size_t fwd_scratch(const iabn_graph *g, const iabn_node *n, const iabn_backend *be)
{
    (void)g;
    return scratch_for(n, IABN_CONV_FWD, be);
}
static size_t bwd_data_scratch(const iabn_graph *g, const iabn_node *n, const iabn_backend *be)
{
    (void)g;
    return scratch_for(n, IABN_CONV_BWD_DATA, be);
}
static size_t bwd_filter_scratch(const iabn_graph *g, const iabn_node *n, const iabn_backend *be)
{
    (void)g;
    return scratch_for(n, IABN_CONV_BWD_FILTER, be);
}

static int fwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(conv_p, n);
    IABN_K(conv_fwd, &P.geom, b->in[0], b->in[1], P.bias ? b->in[2] : NULL, b->out[0], b->scratch,
           b->scratch_bytes);
    return 0;
}

static int bwd_data_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(conv_p, n);
    IABN_K(conv_bwd_data, &P.geom, b->in[0], b->in[1], b->out[0], b->scratch, b->scratch_bytes);
    return 0;
}

static int bwd_filter_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(conv_p, n);
    IABN_K(conv_bwd_filter, &P.geom, b->in[0], b->in[1], b->out[0], P.bias ? b->out[1] : NULL,
           b->scratch, b->scratch_bytes);
    return 0;
}

static const iabn_op_def op_bwd_data = {
    .name = "conv2d_bwd_data", .scratch_bytes = bwd_data_scratch,
    .run = bwd_data_run,
};
static const iabn_op_def op_bwd_filter = {
    .name = "conv2d_bwd_filter", .scratch_bytes = bwd_filter_scratch,
    .run = bwd_filter_run,
};

static int conv_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node nd = *iabn_graph_n(g, node);
    IABN_PARAMS(conv_p, &nd);
    int x = nd.in[0], w = nd.in[1], dy = dout[0];
    if (dy < 0) return 0;
    if (needs_grad(g, w)) {
        int outs[2] = {iabn_graph_param_grad(g, w), P.bias ? iabn_graph_param_grad(g, nd.in[2]) : -1};
        int ins[2] = {x, dy};
        iabn_graph_node(g, &op_bwd_filter, nd.name, 2, ins, P.bias ? 2 : 1, outs, &P, sizeof P);
    }
    if (needs_grad(g, x)) {
        int dx = like(g, x, "d.", "");
        int ins[2] = {dy, w};
        iabn_graph_node(g, &op_bwd_data, nd.name, 2, ins, 1, &dx, &P, sizeof P);
        din[0] = dx;
    }
    (void)e;
    return iabn_graph_ok(g) ? 0 : -1;
}

static const iabn_op_def op_conv = {
    .name = "conv2d", .backward = conv_backward, .scratch_bytes = fwd_scratch,
    .run = fwd_run,
};

int iabn_conv2d(iabn_graph *g, const char *name, int x, int c_out, int k, int stride,
                int pad, int dil, int groups, int bias)
{
    if (x < 0 || !iabn_graph_ok(g)) return -1;
    const iabn_tensor *xt = lt(g, x);
    if (xt->nd != 4)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: input %s must be N,C,H,W", name, xt->name);
    conv_p P;
    memset(&P, 0, sizeof P);
    P.bias = bias;
    if (iabn_conv_geom_init(&P.geom, xt->shape[0], xt->shape[1], xt->shape[2], xt->shape[3],
                            c_out, k, k, stride, pad, dil, groups))
        return iabn_graph_fail(g, IABN_EINVAL,
                               "%s: impossible convolution: input %dx%dx%d, %d outputs, kernel "
                               "%d, stride %d, pad %d, dilation %d, groups %d",
                               name, xt->shape[1], xt->shape[2], xt->shape[3], c_out, k, stride,
                               pad, dil, groups);
    int wshape[4] = {c_out, xt->shape[1] / groups, k, k};
    /* before param(): adding tensors moves the array xt points into */
    int yshape[4] = {xt->shape[0], c_out, P.geom.h_out, P.geom.w_out};
    int w = param(g, name, ".weight", IABN_P_WEIGHT, 4, wshape);
    int bshape[1] = {c_out};
    int bt = bias ? param(g, name, ".bias", IABN_P_BIAS, 1, bshape) : -1;
    int y = named(g, name, "", IABN_F32, 4, yshape);
    int ins[3] = {x, w, bt};
    if (iabn_graph_node(g, &op_conv, name, bias ? 3 : 2, ins, 1, &y, &P, sizeof P) < 0) return -1;
    return y;
}
