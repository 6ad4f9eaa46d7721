/* cuda_norm_act.cu: CUDA run functions of the BN + activation ops of
 * norm_act.c.  Each mirrors its *_cpu twin line for line (same inputs, same
 * outputs, same order of kernel calls), with the launchers of
 * tensor/cuda/kernels.h in place of the CPU kernels; norm_act.c documents
 * the nodes' inputs and outputs. */
#include "layers/layer_cuda.h"
#include "layers/layer_util.h"
#include "tensor/cuda/kernels.h"

static const iabn_act act_id = {IABN_ACT_IDENTITY, 0.f};

/* Synchronised BN: two per-channel device arrays (statistics or backward
 * sums) through the host exchange of norm_act.c; *count becomes the job's. */
static int sync_pair(const iabn_graph *g, const iabn_node *n, const na_p &P, const iabn_bind *b,
                     float *d0, float *d1, double *count, int stats, iabn_err *e)
{
    if (!P.sync || iabn_comm_size(iabn_graph_comm(g)) == 1) return 0;
    const iabn_backend *be = b->backend;
    size_t bytes = (size_t)P.c * sizeof(float);
    float *h = (float *)malloc(2 * bytes);
    if (!h) return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory for the exchange", n->name);
    int rc = 0;
    if (be->d2h(be->ctx, h, d0, bytes) || be->d2h(be->ctx, h + P.c, d1, bytes))
        rc = iabn_err_set(e, IABN_EDEVICE, "%s: copying the per-channel sums to the host failed",
                          n->name);
    if (!rc)
        rc = stats ? iabn_na_sync_stats(g, n, &P, h, h + P.c, count, e)
                   : iabn_na_sync_sums(g, n, &P, h, h + P.c, count, e);
    if (!rc && (be->h2d(be->ctx, d0, h, bytes) || be->h2d(be->ctx, d1, h + P.c, bytes)))
        rc = iabn_err_set(e, IABN_EDEVICE, "%s: copying the job's sums back failed", n->name);
    free(h);
    return rc;
}

/* statistics (the job's when synchronised), then the running update
 * (mirrors the CPU forward) */
static int stats_and_running(const iabn_graph *g, const iabn_node *n, iabn_cuda_ctx *ctx,
                             const na_p &P, const iabn_bind *b, float *mean, float *var,
                             iabn_err *e)
{
    TRY(iabn_cuda_bn_stats(ctx, P.n, P.c, P.hw, CF(b->in[0]), mean, var, e));
    double m = (double)P.n * P.hw;
    TRY(sync_pair(g, n, P, b, mean, var, &m, 1, e));
    return iabn_cuda_bn_update_running(ctx, P.c, m, P.momentum, mean, var, F(b->in[3]),
                                       F(b->in[4]), e);
}

extern "C" {

/* in: x, gamma, beta, rmean, rvar   out: y, mean, var */
int iabn_cuda_run_bn_fwd(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    (void)g;
    IABN_PARAMS(na_p, n);
    float *mean = F(b->out[1]), *var = F(b->out[2]);
    TRY(stats_and_running(g, n, CTX, P, b, mean, var, e));
    TRY(iabn_cuda_norm_act_fwd(CTX, P.n, P.c, P.hw, CF(b->in[0]), mean, var, P.eps, CF(b->in[1]),
                               CF(b->in[2]), P.abs_gamma, act_id, F(b->out[0]), NULL, e));
    return iabn_cuda_node_done(CTX, e);
}

/* in: x, mean, var, gamma, beta   out: y */
int iabn_cuda_run_bn_apply(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                           iabn_err *e)
{
    (void)g;
    IABN_PARAMS(na_p, n);
    TRY(iabn_cuda_norm_act_fwd(CTX, P.n, P.c, P.hw, CF(b->in[0]), CF(b->in[1]), CF(b->in[2]),
                               P.eps, CF(b->in[3]), CF(b->in[4]), P.abs_gamma, act_id,
                               F(b->out[0]), NULL, e));
    return iabn_cuda_node_done(CTX, e);
}

/* in: x, dy, mean, var, gamma   out: dx [, dgamma, dbeta] */
int iabn_cuda_run_bn_bwd(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    (void)g;
    IABN_PARAMS(na_p, n);
    float *sum_dy = F(b->scratch), *sum_dy_xhat = sum_dy + P.c;
    TRY(iabn_cuda_bn_bwd_reduce(CTX, P.n, P.c, P.hw, CF(b->in[0]), CF(b->in[1]), CF(b->in[2]),
                                CF(b->in[3]), P.eps, sum_dy, sum_dy_xhat, e));
    if (P.grads)
        TRY(iabn_cuda_bn_param_grads(CTX, P.c, CF(b->in[4]), P.abs_gamma, sum_dy, sum_dy_xhat,
                                     F(b->out[1]), F(b->out[2]), e));
    double m = (double)P.n * P.hw;
    TRY(sync_pair(g, n, P, b, sum_dy, sum_dy_xhat, &m, 0, e));
    TRY(iabn_cuda_bn_bwd_apply(CTX, P.n, P.c, P.hw, CF(b->in[0]), CF(b->in[1]), CF(b->in[2]),
                               CF(b->in[3]), P.eps, CF(b->in[4]), P.abs_gamma, sum_dy,
                               sum_dy_xhat, m, 1, F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

/* in: x  out: y */
int iabn_cuda_run_act_fwd(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                          iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    TRY(iabn_cuda_act_fwd(CTX, iabn_graph_t(g, n->in[0])->nbytes / 4, P.act, CF(b->in[0]),
                          F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

/* in: y, dy  out: dx */
int iabn_cuda_run_act_bwd(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                          iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    TRY(iabn_cuda_act_bwd(CTX, iabn_graph_t(g, n->in[0])->nbytes / 4, P.act, CF(b->in[0]),
                          CF(b->in[1]), F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

/* in: x, gamma, beta, rmean, rvar   out: z, xhat, mean, var */
int iabn_cuda_run_ckopt_fwd(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                            iabn_err *e)
{
    (void)g;
    IABN_PARAMS(na_p, n);
    float *mean = F(b->out[2]), *var = F(b->out[3]);
    TRY(stats_and_running(g, n, CTX, P, b, mean, var, e));
    TRY(iabn_cuda_norm_act_fwd(CTX, P.n, P.c, P.hw, CF(b->in[0]), mean, var, P.eps, CF(b->in[1]),
                               CF(b->in[2]), P.abs_gamma, P.act, F(b->out[0]), F(b->out[1]), e));
    return iabn_cuda_node_done(CTX, e);
}

/* in: xhat, gamma, beta   out: z */
int iabn_cuda_run_from_xhat(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                            iabn_err *e)
{
    (void)g;
    IABN_PARAMS(na_p, n);
    TRY(iabn_cuda_norm_act_from_xhat(CTX, P.n, P.c, P.hw, CF(b->in[0]), P.eps, CF(b->in[1]),
                                     CF(b->in[2]), P.abs_gamma, P.act, F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

/* in: xhat, dy, var, gamma   out: dx [, dgamma, dbeta] */
int iabn_cuda_run_bn_bwd_xhat(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                              iabn_err *e)
{
    (void)g;
    IABN_PARAMS(na_p, n);
    float *sum_dy = F(b->scratch), *sum_dy_xhat = sum_dy + P.c;
    TRY(iabn_cuda_bn_bwd_reduce_xhat(CTX, P.n, P.c, P.hw, CF(b->in[0]), CF(b->in[1]), sum_dy,
                                     sum_dy_xhat, e));
    if (P.grads)
        TRY(iabn_cuda_bn_param_grads(CTX, P.c, CF(b->in[3]), P.abs_gamma, sum_dy, sum_dy_xhat,
                                     F(b->out[1]), F(b->out[2]), e));
    TRY(iabn_cuda_bn_bwd_apply_xhat(CTX, P.n, P.c, P.hw, CF(b->in[0]), CF(b->in[1]),
                                    CF(b->in[2]), P.eps, CF(b->in[3]), P.abs_gamma, sum_dy,
                                    sum_dy_xhat, (double)P.n * P.hw, 1, F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

/* in: x, gamma, beta, rmean, rvar   out: z (over x), mean, var */
int iabn_cuda_run_iabn_fwd(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                           iabn_err *e)
{
    (void)g;
    IABN_PARAMS(na_p, n);
    float *mean = F(b->out[1]), *var = F(b->out[2]);
    TRY(stats_and_running(g, n, CTX, P, b, mean, var, e));
    TRY(iabn_cuda_norm_act_fwd(CTX, P.n, P.c, P.hw, CF(b->in[0]), mean, var, P.eps, CF(b->in[1]),
                               CF(b->in[2]), 1, P.act, F(b->out[0]), NULL, e));
    return iabn_cuda_node_done(CTX, e);
}

/* in: z, dz, var, gamma, beta   out: dx (over dz) [, dgamma, dbeta] */
int iabn_cuda_run_iabn_bwd(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                           iabn_err *e)
{
    (void)g;
    IABN_PARAMS(na_p, n);
    float *sum_dy = F(b->scratch), *sum_dy_xhat = sum_dy + P.c;
    double m = (double)P.n * P.hw;
    if (P.training) {
        TRY(iabn_cuda_iabn_bwd_reduce(CTX, P.variant, P.n, P.c, P.hw, CF(b->in[0]), CF(b->in[1]),
                                      P.eps, CF(b->in[3]), CF(b->in[4]), P.act, sum_dy,
                                      sum_dy_xhat, e));
        if (P.grads)
            TRY(iabn_cuda_bn_param_grads(CTX, P.c, CF(b->in[3]), P.abs_gamma, sum_dy,
                                         sum_dy_xhat, F(b->out[1]), F(b->out[2]), e));
        TRY(sync_pair(g, n, P, b, sum_dy, sum_dy_xhat, &m, 0, e));
    }
    TRY(iabn_cuda_iabn_bwd_apply(CTX, P.variant, P.n, P.c, P.hw, CF(b->in[0]), CF(b->in[1]),
                                 CF(b->in[2]), P.eps, CF(b->in[3]), CF(b->in[4]), P.abs_gamma, P.act, sum_dy,
                                 sum_dy_xhat, m, P.training, F(b->out[0]), e));
    return iabn_cuda_node_done(CTX, e);
}

/* in: x, gamma, beta, rmean, rvar   out: z */
int iabn_cuda_run_eval_fwd(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                           iabn_err *e)
{
    (void)g;
    IABN_PARAMS(na_p, n);
    TRY(iabn_cuda_norm_act_fwd(CTX, P.n, P.c, P.hw, CF(b->in[0]), CF(b->in[3]), CF(b->in[4]),
                               P.eps, CF(b->in[1]), CF(b->in[2]), P.abs_gamma, P.act,
                               F(b->out[0]), NULL, e));
    return iabn_cuda_node_done(CTX, e);
}

} // extern "C"
