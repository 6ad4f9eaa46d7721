/* cuda_layers.cu: CUDA run functions of the remaining layers' ops (conv.c,
 * elementwise.c, pool.c, linear.c, loss.c).  Each mirrors its *_cpu twin:
 * same node inputs and outputs, launchers of tensor/cuda/kernels.h in place
 * of the CPU kernels, then iabn_cuda_node_done() (IABN_CUDA_SYNC=1). */
#include "layers/layer_cuda.h"
#include "layers/layer_util.h"
#include "tensor/cuda/kernels.h"

static size_t numel(const iabn_graph *g, int t) { return iabn_graph_t(g, t)->nbytes / 4; }

extern "C" {

/* ---- conv.c ---------------------------------------------------------------------- */

int iabn_cuda_run_conv_fwd(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                           iabn_err *e)
{
    (void)g;
    IABN_PARAMS(conv_p, n);
    TRY(iabn_cuda_conv_fwd(CTX, &P.geom, CF(b->in[0]), CF(b->in[1]),
                           P.bias ? CF(b->in[2]) : NULL, F(b->out[0]), b->scratch,
                           b->scratch_bytes, e));
    return iabn_cuda_node_done(CTX, e);
}

int iabn_cuda_run_conv_bwd_data(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                                iabn_err *e)
{
    (void)g;
    IABN_PARAMS(conv_p, n);
    TRY(iabn_cuda_conv_bwd_data(CTX, &P.geom, CF(b->in[0]), CF(b->in[1]), F(b->out[0]),
                                b->scratch, b->scratch_bytes, e));
    return iabn_cuda_node_done(CTX, e);
}

int iabn_cuda_run_conv_bwd_filter(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                                  iabn_err *e)
{
    (void)g;
    IABN_PARAMS(conv_p, n);
    TRY(iabn_cuda_conv_bwd_filter(CTX, &P.geom, CF(b->in[0]), CF(b->in[1]), F(b->out[0]),
                                  P.bias ? F(b->out[1]) : NULL, b->scratch, b->scratch_bytes,
                                  e));
    return iabn_cuda_node_done(CTX, e);
}

/* ---- elementwise.c ----------------------------------------------------------------- */

int iabn_cuda_run_add(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    TRY(iabn_cuda_add(CTX, numel(g, n->out[0]), CF(b->in[0]), CF(b->in[1]), F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

int iabn_cuda_run_copy(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    TRY(iabn_cuda_copy_bytes(CTX, iabn_graph_t(g, n->out[0])->nbytes, b->in[0], b->out[0], e));
    return iabn_cuda_node_done(CTX, e);
}

int iabn_cuda_run_add_bcast(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                            iabn_err *e)
{
    int nn, c, hw;
    nchw(lt(g, n->in[0]), &nn, &c, &hw);
    TRY(iabn_cuda_add_bcast_hw(CTX, nn, c, hw, CF(b->in[0]), CF(b->in[1]), F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

int iabn_cuda_run_sum_hw(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                         iabn_err *e)
{
    int nn, c, hw;
    nchw(lt(g, n->in[0]), &nn, &c, &hw);
    TRY(iabn_cuda_sum_hw(CTX, nn, c, hw, CF(b->in[0]), F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

/* forward and backward alike: the mask is redrawn from (seed, step, stream) */
int iabn_cuda_run_dropout2d(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                            iabn_err *e)
{
    IABN_PARAMS(drop_p, n);
    int nn, c, hw;
    nchw(lt(g, n->in[0]), &nn, &c, &hw);
    TRY(iabn_cuda_dropout2d_apply(CTX, nn, c, hw, P.p, b->seed + b->step * 0x9e3779b97f4a7c15ULL,
                                  P.stream, CF(b->in[0]), F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

int iabn_cuda_run_concat(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                         iabn_err *e)
{
    int nn, cy, hw, off = 0;
    nchw(lt(g, n->out[0]), &nn, &cy, &hw);
    for (int i = 0; i < n->nin; i++) {
        int cx = lt(g, n->in[i])->shape[1];
        TRY(iabn_cuda_copy_channels(CTX, nn, cx, cy, off, hw, CF(b->in[i]), F(b->out[0]), e));
        off += cx;
    }
    return iabn_cuda_node_done(CTX, e);
}

int iabn_cuda_run_slice_channels(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                                 iabn_err *e)
{
    IABN_PARAMS(cat_p, n);
    int nn, cy, hw;
    nchw(lt(g, n->in[0]), &nn, &cy, &hw);
    TRY(iabn_cuda_slice_channels(CTX, nn, lt(g, n->out[0])->shape[1], cy, P.c_off, hw,
                                 CF(b->in[0]), F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

int iabn_cuda_run_upsample(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                           iabn_err *e)
{
    const iabn_tensor *x = lt(g, n->in[0]), *y = lt(g, n->out[0]);
    TRY(iabn_cuda_bilinear_fwd(CTX, x->shape[0], x->shape[1], x->shape[2], x->shape[3],
                               y->shape[2], y->shape[3], CF(b->in[0]), F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

int iabn_cuda_run_upsample_bwd(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                               iabn_err *e)
{
    const iabn_tensor *dy = lt(g, n->in[0]), *dx = lt(g, n->out[0]);
    TRY(iabn_cuda_bilinear_bwd(CTX, dx->shape[0], dx->shape[1], dx->shape[2], dx->shape[3],
                               dy->shape[2], dy->shape[3], CF(b->in[0]), F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

/* ---- pool.c ---------------------------------------------------------------------- */

int iabn_cuda_run_maxpool(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                          iabn_err *e)
{
    IABN_PARAMS(pool_p, n);
    const iabn_tensor *x = lt(g, n->in[0]), *y = lt(g, n->out[0]);
    TRY(iabn_cuda_maxpool_fwd(CTX, x->shape[0], x->shape[1], x->shape[2], x->shape[3], P.k, P.s,
                              P.p, y->shape[2], y->shape[3], CF(b->in[0]), F(b->out[0]),
                              (int32_t *)b->out[1], e));
    return iabn_cuda_node_done(CTX, e);
}

/* in: dy, argmax   out: dx; the node carries the pool's k, s, p (pool.c) */
int iabn_cuda_run_maxpool_bwd(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                              iabn_err *e)
{
    IABN_PARAMS(pool_p, n);
    const iabn_tensor *dy = lt(g, n->in[0]), *dx = lt(g, n->out[0]);
    TRY(iabn_cuda_maxpool_bwd(CTX, dx->shape[0], dx->shape[1], dx->shape[2], dx->shape[3], P.k,
                              P.s, P.p, dy->shape[2], dy->shape[3], CF(b->in[0]),
                              (const int32_t *)b->in[1], F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

int iabn_cuda_run_gap(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    int nn, c, hw;
    nchw(lt(g, n->in[0]), &nn, &c, &hw);
    TRY(iabn_cuda_gap_fwd(CTX, nn, c, hw, CF(b->in[0]), F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

int iabn_cuda_run_gap_bwd(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                          iabn_err *e)
{
    int nn, c, hw;
    nchw(lt(g, n->out[0]), &nn, &c, &hw);
    TRY(iabn_cuda_gap_bwd(CTX, nn, c, hw, CF(b->in[0]), F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

/* ---- linear.c ---------------------------------------------------------------------- */

int iabn_cuda_run_linear_fwd(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                             iabn_err *e)
{
    (void)g;
    IABN_PARAMS(lin_p, n);
    TRY(iabn_cuda_linear_fwd(CTX, P.n, P.in, P.out, CF(b->in[0]), CF(b->in[1]),
                             P.bias ? CF(b->in[2]) : NULL, F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

int iabn_cuda_run_linear_bwd_data(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                                  iabn_err *e)
{
    (void)g;
    IABN_PARAMS(lin_p, n);
    TRY(iabn_cuda_linear_bwd_data(CTX, P.n, P.in, P.out, CF(b->in[0]), CF(b->in[1]),
                                  F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

int iabn_cuda_run_linear_bwd_weight(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                                    iabn_err *e)
{
    (void)g;
    IABN_PARAMS(lin_p, n);
    TRY(iabn_cuda_linear_bwd_weight(CTX, P.n, P.in, P.out, CF(b->in[0]), CF(b->in[1]),
                                    F(b->out[0]), P.bias ? F(b->out[1]) : NULL, e));
    return iabn_cuda_node_done(CTX, e);
}

/* ---- loss.c -------------------------------------------------------------------------- */

/* in: logits, labels   out: loss, weight */
int iabn_cuda_run_xent_fwd(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                           iabn_err *e)
{
    (void)g;
    IABN_PARAMS(xent_p, n);
    long bad = -1;
    int lab = -1;
    int rc = iabn_cuda_xent_fwd(CTX, P.n, P.k, P.hw, CF(b->in[0]), (const int32_t *)b->in[1],
                                P.ignore, P.top_frac, F(b->out[0]), F(b->out[1]), &bad, &lab, e);
    if (rc == IABN_EINVAL)
        return iabn_err_set(e, IABN_EINVAL,
                            "label %d at position %ld is outside [0, %d) and is not the ignore "
                            "index %d",
                            lab, bad, P.k, P.ignore);
    TRY(rc);
    if (iabn_comm_size(iabn_graph_comm(g)) > 1) {
        /* the job's mean (loss.c): through the host, weights and loss */
        const iabn_backend *be = b->backend;
        size_t m = (size_t)P.n * (size_t)P.hw;
        float *h = (float *)malloc((m + 1) * sizeof(float));
        if (!h) return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory", n->name);
        rc = be->d2h(be->ctx, h, b->out[0], sizeof(float)) ||
                     be->d2h(be->ctx, h + 1, b->out[1], m * sizeof(float))
                 ? iabn_err_set(e, IABN_EDEVICE, "%s: copying the weights failed", n->name)
                 : iabn_xent_global_mean(g, n, &P, h, h + 1, e);
        if (!rc && (be->h2d(be->ctx, b->out[0], h, sizeof(float)) ||
                    be->h2d(be->ctx, b->out[1], h + 1, m * sizeof(float))))
            rc = iabn_err_set(e, IABN_EDEVICE, "%s: copying the weights back failed", n->name);
        free(h);
        TRY(rc);
    }
    return iabn_cuda_node_done(CTX, e);
}

/* in: logits, labels, weight   out: dlogits */
int iabn_cuda_run_xent_bwd(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                           iabn_err *e)
{
    (void)g;
    IABN_PARAMS(xent_p, n);
    TRY(iabn_cuda_xent_bwd(CTX, P.n, P.k, P.hw, CF(b->in[0]), (const int32_t *)b->in[1],
                           CF(b->in[2]), 1.0f, F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

} // extern "C"
