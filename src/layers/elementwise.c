/* elementwise.c: add (also the graph's gradient accumulation), copy (what the
 * graph inserts before a MUST in-place op whose input is still needed),
 * broadcast add, channel dropout, channel concat and bilinear upsampling;
 * all but the broadcast add run in any activation layout. */
#include "layers/layer_util.h"

static size_t numel(const iabn_graph *g, int t) { return lt(g, t)->nbytes / 4; }

/* ---- add ------------------------------------------------------------------------- */

static int add_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_K(add, numel(g, n->out[0]), b->in[0], b->in[1], b->out[0]);
    return 0;
}

static int add_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    (void)g; (void)node; (void)e;
    din[0] = dout[0];
    din[1] = dout[0];
    return 0;
}

const iabn_op_def iabn_op_add = {
    .name = "add", .backward = add_backward,
    .run = add_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};

int iabn_add_layer(iabn_graph *g, const char *name, int a, int b)
{
    if (a < 0 || b < 0 || !iabn_graph_ok(g)) return -1;
    const iabn_tensor *at = lt(g, a), *bt = lt(g, b);
    if (at->nbytes != bt->nbytes || at->nd != bt->nd ||
        memcmp(at->shape, bt->shape, (size_t)at->nd * sizeof(int)))
        return iabn_graph_fail(g, IABN_EINVAL, "%s: %s and %s differ in shape", name, at->name,
                               bt->name);
    int y = named(g, name, "", IABN_F32, at->nd, at->shape);
    int ins[2] = {a, b};
    int n = iabn_graph_node(g, &iabn_op_add, name, 2, ins, 1, &y, NULL, 0);
    iabn_graph_inplace(g, n, 0, 0, 0);
    return n < 0 ? -1 : y;
}

/* ---- copy ------------------------------------------------------------------------ */

static int copy_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_K(copy_bytes, lt(g, n->out[0])->nbytes, b->in[0], b->out[0]);
    return 0;
}

static int copy_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    (void)g; (void)node; (void)e;
    din[0] = dout[0];
    return 0;
}

const iabn_op_def iabn_op_copy = {
    .name = "copy", .backward = copy_backward,
    .run = copy_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};

/* ---- broadcast add: a (N,C,H,W) + b (N,C,1,1) -------------------------------------- */

static int bcast_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    int nn, c, hw;
    nchw(lt(g, n->in[0]), &nn, &c, &hw);
    IABN_K(add_bcast_hw, nn, c, hw, b->in[0], b->in[1], b->out[0]);
    return 0;
}

static int sum_hw_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    int nn, c, hw;
    nchw(lt(g, n->in[0]), &nn, &c, &hw);
    IABN_K(sum_hw, nn, c, hw, b->in[0], b->out[0]);
    return 0;
}

static const iabn_op_def op_sum_hw = {
    .name = "sum_hw",
    .run = sum_hw_run,
};

static int bcast_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    (void)e;
    if (dout[0] < 0) return 0;
    din[0] = dout[0];
    if (needs_grad(g, fw.in[1])) {
        int db = like(g, fw.in[1], "d.", "");
        iabn_graph_node(g, &op_sum_hw, fw.name, 1, &dout[0], 1, &db, NULL, 0);
        din[1] = db;
    }
    return iabn_graph_ok(g) ? 0 : -1;
}

static const iabn_op_def op_bcast = {
    .name = "add_bcast", .backward = bcast_backward,
    .run = bcast_run,
};

int iabn_add_bcast(iabn_graph *g, const char *name, int a, int b)
{
    if (a < 0 || b < 0 || !iabn_graph_ok(g)) return -1;
    const iabn_tensor *at = lt(g, a), *bt = lt(g, b);
    if (at->nd != 4 || bt->nd != 4 || bt->shape[0] != at->shape[0] ||
        bt->shape[1] != at->shape[1] || bt->shape[2] != 1 || bt->shape[3] != 1)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: %s must be N,C,1,1 matching %s", name,
                               bt->name, at->name);
    int y = named(g, name, "", IABN_F32, 4, at->shape);
    int ins[2] = {a, b};
    int n = iabn_graph_node(g, &op_bcast, name, 2, ins, 1, &y, NULL, 0);
    iabn_graph_inplace(g, n, 0, 0, 0);
    return n < 0 ? -1 : y;
}

/* ---- channel dropout ----------------------------------------------------------------
 * The mask is redrawn from (run seed, node stream, step) by the backward, so
 * nothing but the output is kept. */

static int drop_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(drop_p, n);
    int nn, c, hw;
    nchw(lt(g, n->in[0]), &nn, &c, &hw);
    IABN_K(dropout2d_apply, nn, c, hw, lt(g, n->in[0])->layout, P.p,
           b->seed + b->step * 0x9e3779b97f4a7c15ULL, P.stream, b->in[0], b->out[0]);
    return 0;
}

static const iabn_op_def op_drop_bwd = {
    .name = "dropout2d_bwd",
    .run = drop_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};

static int drop_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    (void)e;
    if (dout[0] < 0) return 0;
    return grad_node(g, &fw, &op_drop_bwd, 1, &dout[0], fw.params, sizeof(drop_p), 0, din);
}

static const iabn_op_def op_drop = {
    .name = "dropout2d", .backward = drop_backward,
    .run = drop_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};

int iabn_dropout2d(iabn_graph *g, const char *name, int x, float p)
{
    if (x < 0 || !iabn_graph_ok(g)) return -1;
    if (!(p >= 0.f && p < 1.f))
        return iabn_graph_fail(g, IABN_EINVAL, "%s: dropout probability %g not in [0, 1)", name,
                               (double)p);
    if (iabn_graph_mode(g) != IABN_TRAIN || p == 0.f) return x;
    drop_p P = {p, (uint64_t)iabn_graph_nnodes(g)};
    int y = named(g, name, "", IABN_F32, lt(g, x)->nd, lt(g, x)->shape);
    int n = iabn_graph_node(g, &op_drop, name, 1, &x, 1, &y, &P, sizeof P);
    iabn_graph_inplace(g, n, 0, 0, 0);
    return n < 0 ? -1 : y;
}

/* ---- concat over channels ---------------------------------------------------------- */

static int cat_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    int nn, cy, hw, off = 0;
    nchw(lt(g, n->out[0]), &nn, &cy, &hw);
    for (int i = 0; i < n->nin; i++) {
        int cx = lt(g, n->in[i])->shape[1];
        IABN_K(copy_channels, nn, cx, cy, off, hw, b->in[i], b->out[0]);
        off += cx;
    }
    return 0;
}

static int slice_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(cat_p, n);
    int nn, cy, hw;
    nchw(lt(g, n->in[0]), &nn, &cy, &hw);
    IABN_K(slice_channels, nn, lt(g, n->out[0])->shape[1], cy, P.c_off, hw, b->in[0], b->out[0]);
    return 0;
}

/* Concat and slice take any layout with no layout argument: the layout
 * pass blocks only tensors whose channels are multiples of the block B (16
 * or 8), and joins all of a concat's (a slice's) operands in one set, so in
 * a blocked layout every part's channel count and offset is a multiple of
 * B; the per-sample block copies of copy_channels / slice_channels then
 * move the same bytes as in NCHW (a sample's channel blocks are contiguous,
 * block c_off/B starts at float c_off*hw). */
static const iabn_op_def op_slice = {
    .name = "slice_channels",
    .run = slice_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};

static int cat_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    (void)e;
    if (dout[0] < 0) return 0;
    cat_p P = {0};
    for (int i = 0; i < fw.nin; i++) {
        if (needs_grad(g, fw.in[i])) {
            int dx = like(g, fw.in[i], "d.", "");
            iabn_graph_node(g, &op_slice, fw.name, 1, &dout[0], 1, &dx, &P, sizeof P);
            din[i] = dx;
        }
        P.c_off += lt(g, fw.in[i])->shape[1];
    }
    return iabn_graph_ok(g) ? 0 : -1;
}

static const iabn_op_def op_cat = { /* any layout: see op_slice */
    .name = "concat", .backward = cat_backward,
    .run = cat_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};

int iabn_concat(iabn_graph *g, const char *name, int n, const int *xs)
{
    if (!iabn_graph_ok(g)) return -1;
    if (n < 1 || n > IABN_MAX_IN)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: %d inputs (1..%d)", name, n, IABN_MAX_IN);
    int shape[4];
    for (int i = 0; i < n; i++) {
        if (xs[i] < 0) return -1;
        const iabn_tensor *t = lt(g, xs[i]);
        if (t->nd != 4) return iabn_graph_fail(g, IABN_EINVAL, "%s: %s is not 4-D", name, t->name);
        if (i == 0) memcpy(shape, t->shape, sizeof shape);
        else if (t->shape[0] != shape[0] || t->shape[2] != shape[2] || t->shape[3] != shape[3])
            return iabn_graph_fail(g, IABN_EINVAL, "%s: %s differs in N, H or W", name, t->name);
        else shape[1] += t->shape[1];
    }
    int y = named(g, name, "", IABN_F32, 4, shape);
    return iabn_graph_node(g, &op_cat, name, n, xs, 1, &y, NULL, 0) < 0 ? -1 : y;
}

/* ---- bilinear upsampling (align_corners = false) -------------------------------------- */

/* The layout of a resize's two sides: that of the blocked one, if any.  A
 * 1x1 map (DeepLab's image pooling branch, upsampled to the feature size)
 * is left out of the layout pass and keeps the label NCHW, but is the same
 * memory in every blocked layout; the other side then says which layout
 * runs. */
static iabn_layout up_layout(const iabn_tensor *a, const iabn_tensor *b)
{
    return a->layout != IABN_LAYOUT_NCHW ? a->layout : b->layout;
}

static int up_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    const iabn_tensor *x = lt(g, n->in[0]), *y = lt(g, n->out[0]);
    IABN_K(bilinear_fwd, x->shape[0], x->shape[1], x->shape[2], x->shape[3], up_layout(x, y),
           y->shape[2], y->shape[3], b->in[0], b->out[0]);
    return 0;
}

static int up_bwd_run(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    const iabn_tensor *dy = lt(g, n->in[0]), *dx = lt(g, n->out[0]);
    IABN_K(bilinear_bwd, dx->shape[0], dx->shape[1], dx->shape[2], dx->shape[3],
           up_layout(dx, dy), dy->shape[2], dy->shape[3], b->in[0], b->out[0]);
    return 0;
}

static const iabn_op_def op_up_bwd = {
    .name = "upsample_bwd",
    .run = up_bwd_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};

static int up_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    (void)e;
    if (dout[0] < 0) return 0;
    return grad_node(g, &fw, &op_up_bwd, 1, &dout[0], NULL, 0, -1, din);
}

static const iabn_op_def op_up = {
    .name = "upsample_bilinear", .backward = up_backward,
    .run = up_run,
    .layout = IABN_LAYOUT_RULE_SAME,
};

int iabn_upsample_bilinear(iabn_graph *g, const char *name, int x, int h, int w)
{
    if (x < 0 || !iabn_graph_ok(g)) return -1;
    const iabn_tensor *t = lt(g, x);
    if (t->nd != 4 || h <= 0 || w <= 0)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: cannot resize %s to %dx%d", name, t->name, h, w);
    int shape[4] = {t->shape[0], t->shape[1], h, w};
    int y = named(g, name, "", IABN_F32, 4, shape);
    return iabn_graph_node(g, &op_up, name, 1, &x, 1, &y, NULL, 0) < 0 ? -1 : y;
}
