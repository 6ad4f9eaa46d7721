/* conv.c: 2-D convolution (stride, padding, dilation, groups, optional bias).
 * Forward reads x and w; the backward's filter pass reads x (that is what gets
 * saved) and the data pass reads w.  Kernels: the backend's conv_* entries
 * (src/tensor/cpu/conv.c, src/tensor/cuda/conv.cu).  Each pass votes on its
 * activations' layouts (graph/layout.c) through the backend, and runs with
 * the layouts the pass chose: x / dx on the geometry's x side, y / dy on its
 * y side.  conv2d_add is the same op with a residual input that its output
 * overwrites where the plan allows: the forward adds the convolution to it
 * (the geometry's accumulate flag; the backend's conv_fwd_add where the sum
 * has a buffer of its own), the backward hands dy to it as an add would. */
#include "layers/layer_util.h"

/* Which side of the geometry an operand is on, per pass: x side 0, y side
 * 1, -1 for the weights, bias and their gradients.  conv2d_add's residual
 * input (k == residual) is y's storage: the y side. */
static int side_of(iabn_conv_pass pass, int out, int k, int residual)
{
    if (pass == IABN_CONV_FWD && !out && residual && k == residual) return 1;
    if (k != 0 && !(pass == IABN_CONV_BWD_FILTER && !out && k == 1)) return -1;
    switch (pass) {
    case IABN_CONV_FWD: return out;            /* x -> y */
    case IABN_CONV_BWD_DATA: return !out;      /* dy -> dx */
    default: return out ? -1 : k;              /* x, dy -> dw */
    }
}

/* The node's geometry as the graph sets it: its shape, NCHW layouts and the
 * node's winograd flag and images per call (what the layout votes ask
 * about). */
static iabn_conv_geom base_geom(const iabn_node *n)
{
    IABN_PARAMS(conv_p, n);
    iabn_conv_geom geo = P.geom;
    geo.winograd = n->winograd;
    geo.wino_images = n->wino_images;
    return geo;
}

/* The node's geometry with the layouts of its activation tensors (and,
 * for conv2d_add's forward, the accumulating output). */
static iabn_conv_geom geom_of(const iabn_graph *g, const iabn_node *n, iabn_conv_pass pass)
{
    IABN_PARAMS(conv_p, n);
    iabn_conv_geom geo = base_geom(n);
    geo.accumulate = pass == IABN_CONV_FWD && P.residual;
    for (int s = 0; s < n->nin + n->nout; s++) {
        int out = s >= n->nin, k = out ? s - n->nin : s;
        int side = side_of(pass, out, k, P.residual), t = out ? n->out[k] : n->in[k];
        if (side < 0 || t < 0) continue;
        if (side) geo.y_layout = lt(g, t)->layout;
        else geo.x_layout = lt(g, t)->layout;
    }
    return geo;
}

static int vote(const iabn_graph *g, const iabn_node *n, const iabn_backend *be, int out, int k,
                iabn_conv_pass pass)
{
    IABN_PARAMS(conv_p, n);
    iabn_conv_geom geo = base_geom(n);
    int side = side_of(pass, out, k, P.residual);
    return side < 0 ? -1 : be->k->conv_layout_vote(&geo, pass, side);
}

/* The backend's own scratch (CPU: im2col columns or oneDNN's reorder copies
 * and scratchpad; CUDA: cuDNN's workspace budget), a function of the shape
 * and layouts alone. */
static size_t scratch_for(const iabn_graph *g, const iabn_node *n, iabn_conv_pass pass,
                          const iabn_backend *be)
{
    iabn_conv_geom geo = geom_of(g, n, pass);
    return be->k->conv_scratch(&geo, pass);
}

static int fwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(conv_p, n);
    iabn_conv_geom geo = geom_of(g, n, IABN_CONV_FWD);
    const float *bias = P.bias ? b->in[2] : NULL;
    /* conv2d_add: y overwrites the residual where the plan put them
     * together; where the residual is read again later (the shortcut of
     * standard BN, bn1's saved input) or the plan keeps in-place outputs
     * apart (plan.c's noinplace), the sum has a buffer of its own */
    if (P.residual && b->out[0] != b->in[P.residual]) {
        IABN_K(conv_fwd_add, &geo, b->in[0], b->in[1], bias, b->in[P.residual], b->out[0],
               b->scratch, b->scratch_bytes);
        return 0;
    }
    IABN_K(conv_fwd, &geo, b->in[0], b->in[1], bias, b->out[0], b->scratch, b->scratch_bytes);
    return 0;
}

static int bwd_data_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    iabn_conv_geom geo = geom_of(g, n, IABN_CONV_BWD_DATA);
    IABN_K(conv_bwd_data, &geo, b->in[0], b->in[1], b->out[0], b->scratch, b->scratch_bytes);
    return 0;
}

static int bwd_filter_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(conv_p, n);
    iabn_conv_geom geo = geom_of(g, n, IABN_CONV_BWD_FILTER);
    IABN_K(conv_bwd_filter, &geo, b->in[0], b->in[1], b->out[0], P.bias ? b->out[1] : NULL,
           b->scratch, b->scratch_bytes);
    return 0;
}

/* The backend's answer about the pass's geometry (winograd, layouts_ok:
 * graph.h), or dflt where the backend has no such hook. */
static int ask_backend(const iabn_graph *g, const iabn_node *n, iabn_conv_pass pass,
                       int (*hook)(const iabn_conv_geom *, iabn_conv_pass), int dflt)
{
    if (!hook) return dflt;
    iabn_conv_geom geo = geom_of(g, n, pass);
    return hook(&geo, pass);
}

/* Each pass's entries of its op: its votes, its scratch, its Winograd, its
 * layout check. */
#define PASS_HOOKS(pre, pass)                                                              \
    static int pre##_vote(const iabn_graph *g, const iabn_node *n, const iabn_backend *be, \
                          int out, int k)                                                  \
    {                                                                                      \
        return vote(g, n, be, out, k, pass);                                               \
    }                                                                                      \
    static size_t pre##_scratch(const iabn_graph *g, const iabn_node *n,                   \
                                const iabn_backend *be)                                    \
    {                                                                                      \
        return scratch_for(g, n, pass, be);                                                \
    }                                                                                      \
    static int pre##_winograd(const iabn_graph *g, const iabn_node *n,                     \
                              const iabn_backend *be)                                      \
    {                                                                                      \
        return ask_backend(g, n, pass, be->k->conv_winograd, 0);                           \
    }                                                                                      \
    static int pre##_layouts_ok(const iabn_graph *g, const iabn_node *n,                   \
                                const iabn_backend *be)                                    \
    {                                                                                      \
        return ask_backend(g, n, pass, be->k->conv_layouts_ok, 1);                         \
    }
PASS_HOOKS(fwd, IABN_CONV_FWD)
PASS_HOOKS(bwd_data, IABN_CONV_BWD_DATA)
PASS_HOOKS(bwd_filter, IABN_CONV_BWD_FILTER)
#undef PASS_HOOKS

static const iabn_op_def op_bwd_data = {
    .name = "conv2d_bwd_data", .scratch_bytes = bwd_data_scratch,
    .run = bwd_data_run, .layout = IABN_LAYOUT_RULE_VOTE, .layout_vote = bwd_data_vote,
    .winograd = bwd_data_winograd, .layout_ok = bwd_data_layouts_ok,
};
static const iabn_op_def op_bwd_filter = {
    .name = "conv2d_bwd_filter", .scratch_bytes = bwd_filter_scratch,
    .run = bwd_filter_run, .layout = IABN_LAYOUT_RULE_VOTE, .layout_vote = bwd_filter_vote,
    .winograd = bwd_filter_winograd, .layout_ok = bwd_filter_layouts_ok,
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
    if (P.residual) din[P.residual] = dy; /* conv2d_add: d(x + r) / dr */
    (void)e;
    return iabn_graph_ok(g) ? 0 : -1;
}

static const iabn_op_def op_conv = {
    .name = "conv2d", .backward = conv_backward, .scratch_bytes = fwd_scratch,
    .run = fwd_run, .layout = IABN_LAYOUT_RULE_VOTE, .layout_vote = fwd_vote,
    .winograd = fwd_winograd, .layout_ok = fwd_layouts_ok,
};
/* conv2d + add in one node (iabn_conv2d_add): the same entries, the
 * residual an input more; not rerun by the storage strategy (its output
 * overwrote that input). */
static const iabn_op_def op_conv_add = {
    .name = "conv2d_add", .backward = conv_backward, .scratch_bytes = fwd_scratch,
    .run = fwd_run, .layout = IABN_LAYOUT_RULE_VOTE, .layout_vote = fwd_vote,
    .winograd = fwd_winograd, .layout_ok = fwd_layouts_ok,
};

/* conv2d, or with r >= 0 conv2d_add where the backend fuses it (else
 * conv2d and then add): the layer entries below. */
static int conv_layer(iabn_graph *g, const char *name, const char *out_name, int x, int r,
                      int c_out, int k, int stride, int pad, int dil, int groups, int bias)
{
    if (x < 0 || (out_name && r < 0) || !iabn_graph_ok(g)) return -1;
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
    if (out_name) {
        const iabn_tensor *rt = lt(g, r);
        if (rt->nd != 4 || memcmp(rt->shape, yshape, sizeof yshape))
            return iabn_graph_fail(g, IABN_EINVAL,
                                   "%s: the residual %s is not the convolution's %dx%dx%dx%d",
                                   out_name, rt->name, yshape[0], yshape[1], yshape[2],
                                   yshape[3]);
        const iabn_backend *be = iabn_store_backend(iabn_graph_store(g));
        if (!iabn_graph_fusion(g) || !be->k->conv_accumulates || !be->k->conv_fwd_add ||
            !be->k->conv_accumulates(&P.geom)) /* apart: conv2d, then add */
            return iabn_add_layer(g, out_name,
                                  conv_layer(g, name, NULL, x, -1, c_out, k, stride, pad, dil,
                                             groups, bias),
                                  r);
    }
    int w = param(g, name, ".weight", IABN_P_WEIGHT, 4, wshape);
    int bshape[1] = {c_out};
    int bt = bias ? param(g, name, ".bias", IABN_P_BIAS, 1, bshape) : -1;
    int y = named(g, out_name ? out_name : name, "", IABN_F32, 4, yshape);
    int ins[4] = {x, w, bt, -1}, nin = bias ? 3 : 2;
    if (out_name) {
        P.residual = nin;
        ins[nin++] = r;
    }
    int n = iabn_graph_node(g, out_name ? &op_conv_add : &op_conv, name, nin, ins, 1, &y, &P,
                            sizeof P);
    if (n < 0) return -1;
    /* permitted, not required: where the residual is read later the sum
     * takes a buffer of its own (fwd_run), which costs no copy */
    if (out_name) iabn_graph_inplace(g, n, 0, P.residual, 0);
    return y;
}

int iabn_conv2d(iabn_graph *g, const char *name, int x, int c_out, int k, int stride,
                int pad, int dil, int groups, int bias)
{
    return conv_layer(g, name, NULL, x, -1, c_out, k, stride, pad, dil, groups, bias);
}

int iabn_conv2d_add(iabn_graph *g, const char *name, const char *out_name, int x, int r,
                    int c_out, int k, int stride, int pad, int dil, int groups, int bias)
{
    if (!out_name)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: conv2d_add needs a name for its sum", name);
    return conv_layer(g, name, out_name, x, r, c_out, k, stride, pad, dil, groups, bias);
}
