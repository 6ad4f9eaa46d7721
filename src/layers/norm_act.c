/* norm_act.c: the BN + activation unit in every memory mode (INPLACE_ABN.md).
 *
 *   standard        BN node (x -> y, batch stats) + act node (y -> z, may be in
 *                   place); backward reads x (BN) and z (act).
 *   checkpoint      the same nodes with y and z under the RECOMPUTE policy:
 *                   only x is kept; the backward rebuilds y from x with the
 *                   saved statistics (running statistics untouched) and z.
 *   checkpoint_opt  one node x -> (z, xhat); z RECOMPUTE, rebuilt from xhat.
 *   inplace_abn(_ii) one node writing z over x (MUST); the backward reads z
 *                   and the per-channel statistics only and writes dx over dz.
 *   evaluation / frozen: one node with the running statistics.
 *   *_sync          the same nodes; the forward all-gathers every rank's
 *                   (count, mean, var) and combines them, the backward
 *                   all-reduces (count, sum dy, sum dy*xhat) after taking the
 *                   local sums for dgamma / dbeta (INPLACE_ABN.md section 3).
 * The scale is |gamma| + eps in every mode (so every mode computes the same
 * function and weights move freely between modes) unless plain_gamma asks for
 * torchvision's gamma, which the in-place modes refuse: they need g > 0 to
 * invert y -> xhat.
 */
#include "layers/layer_util.h"
#include "layers/layer_cuda.h"

#include <stdlib.h>
#include <strings.h>

const char *iabn_bn_mode_name(iabn_bn_mode m)
{
    static const char *names[IABN_BN_NMODES] = {"standard", "checkpoint", "checkpoint_opt",
                                                "inplace_abn", "inplace_abn_ii",
                                                "inplace_abn_sync", "inplace_abn_sync_i",
                                                "standard_sync"};
    return (int)m >= 0 && m < IABN_BN_NMODES ? names[m] : "?";
}

int iabn_bn_mode_parse(const char *s, iabn_bn_mode *out)
{
    static const struct { const char *name; iabn_bn_mode m; } tab[] = {
        {"standard", IABN_BN_STANDARD}, {"std", IABN_BN_STANDARD},
        {"checkpoint", IABN_BN_CHECKPOINT}, {"ckpt", IABN_BN_CHECKPOINT},
        {"checkpoint_opt", IABN_BN_CHECKPOINT_OPT}, {"inplace", IABN_BN_INPLACE},
        {"inplace_abn", IABN_BN_INPLACE}, {"iabn", IABN_BN_INPLACE},
        {"inplace_abn_i", IABN_BN_INPLACE}, {"inplace_ii", IABN_BN_INPLACE_II},
        {"inplace_abn_ii", IABN_BN_INPLACE_II}, {"iabn_ii", IABN_BN_INPLACE_II},
        {"sync", IABN_BN_INPLACE_SYNC}, {"inplace_abn_sync", IABN_BN_INPLACE_SYNC},
        {"inplace_abn_sync_ii", IABN_BN_INPLACE_SYNC}, {"inplace_sync", IABN_BN_INPLACE_SYNC},
        {"inplace_abn_sync_i", IABN_BN_INPLACE_SYNC_I}, {"inplace_sync_i", IABN_BN_INPLACE_SYNC_I},
        {"standard_sync", IABN_BN_STANDARD_SYNC}, {"sync_bn", IABN_BN_STANDARD_SYNC},
        {"syncbn", IABN_BN_STANDARD_SYNC},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcasecmp(s, tab[i].name) == 0) {
            *out = tab[i].m;
            return 0;
        }
    return IABN_EINVAL;
}

int iabn_bn_mode_is_inplace(iabn_bn_mode m)
{
    return m == IABN_BN_INPLACE || m == IABN_BN_INPLACE_II || m == IABN_BN_INPLACE_SYNC ||
           m == IABN_BN_INPLACE_SYNC_I;
}

int iabn_bn_mode_is_sync(iabn_bn_mode m)
{
    return m == IABN_BN_INPLACE_SYNC || m == IABN_BN_INPLACE_SYNC_I || m == IABN_BN_STANDARD_SYNC;
}

iabn_norm_act_cfg iabn_norm_act_defaults(iabn_bn_mode mode)
{
    iabn_norm_act_cfg c;
    memset(&c, 0, sizeof c);
    c.mode = mode;
    c.act.kind = IABN_ACT_LEAKY_RELU;
    c.act.param = 0.01f;
    c.eps = 1e-5f;
    c.momentum = 0.1f;
    return c;
}

static size_t sums_scratch(const iabn_graph *g, const iabn_node *n, iabn_device_kind dev)
{
    (void)g;
    (void)dev;
    IABN_PARAMS(na_p, n);
    return 2 * (size_t)P.c * sizeof(float);
}

/* ---- synchronisation (INPLACE_ABN.md section 3) -------------------------------- */

/* Local statistics (host arrays) -> the job's, when P->sync: each rank's
 * (count, mean, var) is all-gathered and combined in double.  *count: in the
 * local count, out the job's.  One rank: untouched. */
int iabn_na_sync_stats(const iabn_graph *g, const iabn_node *n, const na_p *P, float *mean,
                       float *var, double *count, iabn_err *e)
{
    iabn_comm *comm = iabn_graph_comm(g);
    int world = iabn_comm_size(comm);
    if (!P->sync || world == 1) return 0;
    size_t c = (size_t)P->c, rec = sizeof(double) + 2 * c * sizeof(float);
    unsigned char *buf = malloc(rec * (size_t)(world + 1));
    double *counts = malloc((size_t)world * sizeof *counts);
    float *means = malloc((size_t)world * 2 * c * sizeof *means);
    if (!buf || !counts || !means) {
        free(buf);
        free(counts);
        free(means);
        return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory gathering the statistics", n->name);
    }
    float *vars = means + (size_t)world * c;
    memcpy(buf, count, sizeof(double));
    memcpy(buf + sizeof(double), mean, c * sizeof(float));
    memcpy(buf + sizeof(double) + c * sizeof(float), var, c * sizeof(float));
    unsigned char *all = buf + rec;
    int rc = iabn_comm_allgather(comm, buf, all, rec, n->name, e);
    if (!rc) {
        *count = 0;
        for (int w = 0; w < world; w++) {
            const unsigned char *r = all + rec * (size_t)w;
            memcpy(&counts[w], r, sizeof(double));
            memcpy(means + (size_t)w * c, r + sizeof(double), c * sizeof(float));
            memcpy(vars + (size_t)w * c, r + sizeof(double) + c * sizeof(float),
                   c * sizeof(float));
            *count += counts[w];
        }
        iabn_bn_stats_combine(world, P->c, counts, means, vars, mean, var);
    }
    free(buf);
    free(counts);
    free(means);
    return rc;
}

/* Batch statistics of x, over every rank when P->sync. */
static int batch_stats(const iabn_graph *g, const iabn_node *n, const na_p *P, const float *x,
                       float *mean, float *var, double *count, iabn_err *e)
{
    iabn_bn_stats(P->n, P->c, P->hw, x, mean, var);
    *count = (double)P->n * P->hw;
    return iabn_na_sync_stats(g, n, P, mean, var, count, e);
}

/* Backward sums (host arrays) over every rank when P->sync (after the local
 * ones went into dgamma / dbeta); *count: the values behind them. */
int iabn_na_sync_sums(const iabn_graph *g, const iabn_node *n, const na_p *P, float *sum_dy,
                      float *sum_dy_xhat, double *count, iabn_err *e)
{
    *count = (double)P->n * P->hw;
    iabn_comm *comm = iabn_graph_comm(g);
    if (!P->sync || iabn_comm_size(comm) == 1) return 0;
    size_t c = (size_t)P->c;
    double *d = malloc((2 * c + 1) * sizeof *d);
    if (!d) return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory reducing the sums", n->name);
    for (size_t i = 0; i < c; i++) {
        d[i] = sum_dy[i];
        d[c + i] = sum_dy_xhat[i];
    }
    d[2 * c] = *count;
    int rc = iabn_comm_allreduce(comm, NULL, d, 2 * c + 1, IABN_COMM_F64, n->name, e);
    if (!rc) {
        for (size_t i = 0; i < c; i++) {
            sum_dy[i] = (float)d[i];
            sum_dy_xhat[i] = (float)d[c + i];
        }
        *count = d[2 * c];
    }
    free(d);
    return rc;
}

/* ---- kernels (CPU) --------------------------------------------------------------- */

/* in: x, gamma, beta, rmean, rvar   out: y, mean, var   (standard/checkpoint BN) */
static int bn_fwd_cpu(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    float *mean = b->out[1], *var = b->out[2];
    double m;
    if (batch_stats(g, n, &P, b->in[0], mean, var, &m, e)) return e->code;
    iabn_bn_update_running(P.c, m, P.momentum, mean, var, b->in[3], b->in[4]);
    iabn_act id = {IABN_ACT_IDENTITY, 0.f};
    iabn_norm_act_fwd(P.n, P.c, P.hw, b->in[0], mean, var, P.eps, b->in[1], b->in[2],
                      P.abs_gamma, id, b->out[0], NULL);
    return 0;
}

/* in: x, mean, var, gamma, beta   out: y   (recompute: saved statistics) */
static int bn_apply_cpu(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    iabn_act id = {IABN_ACT_IDENTITY, 0.f};
    iabn_norm_act_fwd(P.n, P.c, P.hw, b->in[0], b->in[1], b->in[2], P.eps, b->in[3], b->in[4],
                      P.abs_gamma, id, b->out[0], NULL);
    return 0;
}

/* in: x, dy, mean, var, gamma   out: dx [, dgamma, dbeta] */
static int bn_bwd_cpu(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    float *sum_dy = b->scratch, *sum_dy_xhat = sum_dy + P.c;
    iabn_bn_bwd_reduce(P.n, P.c, P.hw, b->in[0], b->in[1], b->in[2], b->in[3], P.eps, sum_dy,
                       sum_dy_xhat);
    if (P.grads)
        iabn_bn_param_grads(P.c, b->in[4], P.abs_gamma, sum_dy, sum_dy_xhat, b->out[1], b->out[2]);
    double m;
    if (iabn_na_sync_sums(g, n, &P, sum_dy, sum_dy_xhat, &m, e)) return e->code;
    iabn_bn_bwd_apply(P.n, P.c, P.hw, b->in[0], b->in[1], b->in[2], b->in[3], P.eps, b->in[4],
                      P.abs_gamma, sum_dy, sum_dy_xhat, m, 1, b->out[0]);
    return 0;
}

/* in: x  out: y */
static int act_fwd_cpu(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    iabn_act_fwd(iabn_graph_t(g, n->in[0])->nbytes / 4, P.act, b->in[0], b->out[0]);
    return 0;
}

/* in: y, dy  out: dx */
static int act_bwd_cpu(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    iabn_act_bwd(iabn_graph_t(g, n->in[0])->nbytes / 4, P.act, b->in[0], b->in[1], b->out[0]);
    return 0;
}

/* in: x, gamma, beta, rmean, rvar   out: z, xhat, mean, var   (checkpoint_opt) */
static int ckopt_fwd_cpu(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    float *mean = b->out[2], *var = b->out[3];
    iabn_bn_stats(P.n, P.c, P.hw, b->in[0], mean, var);
    iabn_bn_update_running(P.c, (double)P.n * P.hw, P.momentum, mean, var, b->in[3], b->in[4]);
    iabn_norm_act_fwd(P.n, P.c, P.hw, b->in[0], mean, var, P.eps, b->in[1], b->in[2],
                      P.abs_gamma, P.act, b->out[0], b->out[1]);
    return 0;
}

/* in: xhat, gamma, beta   out: z   (checkpoint_opt recompute) */
static int from_xhat_cpu(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    iabn_norm_act_from_xhat(P.n, P.c, P.hw, b->in[0], P.eps, b->in[1], b->in[2], P.abs_gamma,
                            P.act, b->out[0]);
    return 0;
}

/* in: xhat, dy, var, gamma   out: dx [, dgamma, dbeta] */
static int bn_bwd_xhat_cpu(const iabn_graph *g, const iabn_node *n, const iabn_bind *b,
                           iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    float *sum_dy = b->scratch, *sum_dy_xhat = sum_dy + P.c;
    iabn_bn_bwd_reduce_xhat(P.n, P.c, P.hw, b->in[0], b->in[1], sum_dy, sum_dy_xhat);
    if (P.grads)
        iabn_bn_param_grads(P.c, b->in[3], P.abs_gamma, sum_dy, sum_dy_xhat, b->out[1], b->out[2]);
    iabn_bn_bwd_apply_xhat(P.n, P.c, P.hw, b->in[0], b->in[1], b->in[2], P.eps, b->in[3],
                           P.abs_gamma, sum_dy, sum_dy_xhat, (double)P.n * P.hw, 1, b->out[0]);
    return 0;
}

/* in: x, gamma, beta, rmean, rvar   out: z (over x), mean, var   (in-place ABN) */
static int iabn_fwd_cpu(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    float *mean = b->out[1], *var = b->out[2];
    double m;
    if (batch_stats(g, n, &P, b->in[0], mean, var, &m, e)) return e->code;
    iabn_bn_update_running(P.c, m, P.momentum, mean, var, b->in[3], b->in[4]);
    iabn_norm_act_fwd(P.n, P.c, P.hw, b->in[0], mean, var, P.eps, b->in[1], b->in[2], 1, P.act,
                      b->out[0], NULL);
    return 0;
}

/* in: z, dz, var, gamma, beta   out: dx (over dz) [, dgamma, dbeta] */
static int iabn_bwd_cpu(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    float *sum_dy = b->scratch, *sum_dy_xhat = sum_dy + P.c;
    double m = (double)P.n * P.hw;
    if (P.training) {
        iabn_iabn_bwd_reduce(P.variant, P.n, P.c, P.hw, b->in[0], b->in[1], P.eps, b->in[3],
                             b->in[4], P.act, sum_dy, sum_dy_xhat);
        if (P.grads)
            iabn_bn_param_grads(P.c, b->in[3], P.abs_gamma, sum_dy, sum_dy_xhat, b->out[1],
                                b->out[2]);
        if (iabn_na_sync_sums(g, n, &P, sum_dy, sum_dy_xhat, &m, e)) return e->code;
    }
    iabn_iabn_bwd_apply(P.variant, P.n, P.c, P.hw, b->in[0], b->in[1], b->in[2], P.eps, b->in[3],
                        b->in[4], P.abs_gamma, P.act, sum_dy, sum_dy_xhat, m, P.training,
                        b->out[0]);
    return 0;
}

/* in: x, gamma, beta, rmean, rvar   out: z   (evaluation / frozen) */
static int eval_fwd_cpu(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    IABN_PARAMS(na_p, n);
    iabn_norm_act_fwd(P.n, P.c, P.hw, b->in[0], b->in[3], b->in[4], P.eps, b->in[1], b->in[2],
                      P.abs_gamma, P.act, b->out[0], NULL);
    return 0;
}

static const iabn_op_def op_bn_apply = {
    .name = "bn_apply",
    .run = {bn_apply_cpu, IABN_CUDA_RUN(iabn_cuda_run_bn_apply)},
};
static const iabn_op_def op_bn_bwd = {
    .name = "bn_bwd", .scratch_bytes = sums_scratch,
    .run = {bn_bwd_cpu, IABN_CUDA_RUN(iabn_cuda_run_bn_bwd)},
};
static const iabn_op_def op_act_bwd = {
    .name = "act_bwd",
    .run = {act_bwd_cpu, IABN_CUDA_RUN(iabn_cuda_run_act_bwd)},
};
static const iabn_op_def op_from_xhat = {
    .name = "norm_act_from_xhat",
    .run = {from_xhat_cpu, IABN_CUDA_RUN(iabn_cuda_run_from_xhat)},
};
static const iabn_op_def op_bn_bwd_xhat = {
    .name = "bn_bwd_xhat", .scratch_bytes = sums_scratch,
    .run = {bn_bwd_xhat_cpu, IABN_CUDA_RUN(iabn_cuda_run_bn_bwd_xhat)},
};
static const iabn_op_def op_iabn_bwd = {
    .name = "inplace_abn_bwd", .scratch_bytes = sums_scratch,
    .run = {iabn_bwd_cpu, IABN_CUDA_RUN(iabn_cuda_run_iabn_bwd)},
};

/* ---- backward builders ---------------------------------------------------------- */

static void grad_outs(iabn_graph *g, const iabn_node *fw, int gamma_in, int beta_in, int *outs,
                      na_p *P)
{
    P->grads = needs_grad(g, fw->in[gamma_in]);
    outs[1] = P->grads ? iabn_graph_param_grad(g, fw->in[gamma_in]) : -1;
    outs[2] = P->grads ? iabn_graph_param_grad(g, fw->in[beta_in]) : -1;
}

static int bn_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    IABN_PARAMS(na_p, &fw);
    int x = fw.in[0], dy = dout[0];
    if (dy < 0) return 0;
    int outs[3];
    outs[0] = like(g, x, "d.", "");
    grad_outs(g, &fw, 1, 2, outs, &P);
    int ins[5] = {x, dy, fw.out[1], fw.out[2], fw.in[1]};
    int b = iabn_graph_node(g, &op_bn_bwd, fw.name, 5, ins, P.grads ? 3 : 1, outs, &P, sizeof P);
    iabn_graph_inplace(g, b, 0, 1, 0);
    din[0] = outs[0];
    (void)e;
    return iabn_graph_ok(g) ? 0 : -1;
}

static int bn_recompute(iabn_graph *g, int node, const int *inputs, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    int y = like(g, fw.out[0], "", "'");
    int ins[5] = {inputs[0], fw.out[1], fw.out[2], inputs[1], inputs[2]};
    (void)e;
    return iabn_graph_node(g, &op_bn_apply, fw.name, 5, ins, 1, &y, fw.params, sizeof(na_p));
}

static int act_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    (void)e;
    if (dout[0] < 0) return 0;
    int ins[2] = {fw.out[0], dout[0]};
    return grad_node(g, &fw, &op_act_bwd, 2, ins, fw.params, sizeof(na_p), 1, din);
}

static int ckopt_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    IABN_PARAMS(na_p, &fw);
    if (dout[0] < 0) return 0;
    int dy = like(g, fw.in[0], "d.", ".y");
    int ins[2] = {fw.out[0], dout[0]};
    int a = iabn_graph_node(g, &op_act_bwd, fw.name, 2, ins, 1, &dy, &P, sizeof P);
    iabn_graph_inplace(g, a, 0, 1, 0);
    int outs[3];
    outs[0] = like(g, fw.in[0], "d.", "");
    grad_outs(g, &fw, 1, 2, outs, &P);
    int ins2[4] = {fw.out[1], dy, fw.out[3], fw.in[1]};
    int b = iabn_graph_node(g, &op_bn_bwd_xhat, fw.name, 4, ins2, P.grads ? 3 : 1, outs, &P,
                            sizeof P);
    iabn_graph_inplace(g, b, 0, 1, 0);
    din[0] = outs[0];
    (void)e;
    return iabn_graph_ok(g) ? 0 : -1;
}

static int ckopt_recompute(iabn_graph *g, int node, const int *inputs, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    int z = like(g, fw.out[0], "", "'");
    int ins[3] = {fw.out[1], inputs[1], inputs[2]};
    (void)e;
    return iabn_graph_node(g, &op_from_xhat, fw.name, 3, ins, 1, &z, fw.params, sizeof(na_p));
}

/* In-place and frozen/eval units share the backward: it reads z only. */
static int iabn_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    IABN_PARAMS(na_p, &fw);
    if (dout[0] < 0) return 0;
    int outs[3];
    outs[0] = like(g, fw.in[0], "d.", "");
    if (P.training) grad_outs(g, &fw, 1, 2, outs, &P);
    else P.grads = 0;
    int var = P.training ? fw.out[2] : fw.in[4];
    int ins[5] = {fw.out[0], dout[0], var, fw.in[1], fw.in[2]};
    int b = iabn_graph_node(g, &op_iabn_bwd, fw.name, 5, ins, P.grads ? 3 : 1, outs, &P, sizeof P);
    /* dx over dz: required for the in-place modes (that is the memory saving),
     * permitted for the frozen unit. */
    iabn_graph_inplace(g, b, 0, 1, P.training);
    din[0] = outs[0];
    (void)e;
    return iabn_graph_ok(g) ? 0 : -1;
}

static const iabn_op_def op_bn = {
    .name = "bn", .backward = bn_backward, .recompute = bn_recompute,
    .run = {bn_fwd_cpu, IABN_CUDA_RUN(iabn_cuda_run_bn_fwd)},
};
static const iabn_op_def op_act = {
    .name = "act", .backward = act_backward,
    .run = {act_fwd_cpu, IABN_CUDA_RUN(iabn_cuda_run_act_fwd)},
};
static const iabn_op_def op_ckopt = {
    .name = "norm_act_ckpt_opt", .backward = ckopt_backward, .recompute = ckopt_recompute,
    .run = {ckopt_fwd_cpu, IABN_CUDA_RUN(iabn_cuda_run_ckopt_fwd)},
};
static const iabn_op_def op_iabn = {
    .name = "inplace_abn", .backward = iabn_backward,
    .run = {iabn_fwd_cpu, IABN_CUDA_RUN(iabn_cuda_run_iabn_fwd)},
};
static const iabn_op_def op_eval = {
    .name = "norm_act_eval", .backward = iabn_backward,
    .run = {eval_fwd_cpu, IABN_CUDA_RUN(iabn_cuda_run_eval_fwd)},
};

int iabn_act_layer(iabn_graph *g, const char *name, int x, iabn_act act)
{
    if (x < 0 || !iabn_graph_ok(g)) return -1;
    na_p P;
    memset(&P, 0, sizeof P);
    P.act = act;
    int y = named(g, name, "", IABN_F32, lt(g, x)->nd, lt(g, x)->shape);
    int n = iabn_graph_node(g, &op_act, name, 1, &x, 1, &y, &P, sizeof P);
    iabn_graph_inplace(g, n, 0, 0, 0);
    return n < 0 ? -1 : y;
}

int iabn_norm_act(iabn_graph *g, const char *name, int x, const iabn_norm_act_cfg *cfg)
{
    if (x < 0 || !iabn_graph_ok(g)) return -1;
    const iabn_tensor *xt = lt(g, x);
    /* copies: adding tensors (param(), named()) moves the array xt points into */
    int xnd = xt->nd, xs[IABN_MAX_DIMS];
    memcpy(xs, xt->shape, sizeof xs);
    if (xt->nd != 4 && xt->nd != 2)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: input %s must be N,C,H,W or N,C", name,
                               xt->name);
    int inplace = iabn_bn_mode_is_inplace(cfg->mode);
    if (inplace && cfg->act.kind == IABN_ACT_RELU)
        return iabn_graph_fail(g, IABN_EINVAL,
                               "%s: mode %s cannot use relu: relu is not invertible, so the "
                               "input cannot be rebuilt from the output; use leaky_relu, elu or "
                               "identity, or the standard / checkpoint modes",
                               name, iabn_bn_mode_name(cfg->mode));
    if (inplace && cfg->plain_gamma)
        return iabn_graph_fail(g, IABN_EINVAL,
                               "%s: mode %s needs the |gamma|+eps scale (plain gamma may be 0 or "
                               "negative, which makes y -> xhat not invertible)",
                               name, iabn_bn_mode_name(cfg->mode));
    if (cfg->eps <= 0.f || cfg->momentum < 0.f || cfg->momentum > 1.f)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: eps must be > 0 and momentum in [0, 1]", name);
    na_p P;
    memset(&P, 0, sizeof P);
    nchw(xt, &P.n, &P.c, &P.hw);
    P.eps = cfg->eps;
    P.momentum = cfg->momentum;
    P.abs_gamma = !cfg->plain_gamma;
    P.act = cfg->act;
    P.variant = cfg->mode == IABN_BN_INPLACE || cfg->mode == IABN_BN_INPLACE_SYNC_I ? 1 : 2;
    P.sync = iabn_bn_mode_is_sync(cfg->mode);
    int training = iabn_graph_mode(g) == IABN_TRAIN && !cfg->frozen;
    P.training = training;
    if (training && (long)P.n * P.hw <= 1)
        return iabn_graph_fail(g, IABN_EINVAL,
                               "%s: one value per channel (input %s): batch statistics need at "
                               "least two values per channel in training",
                               name, xt->name);
    int cs[1] = {P.c};
    int gamma = param(g, name, ".weight", IABN_P_BN_WEIGHT, 1, cs);
    int beta = param(g, name, ".bias", IABN_P_BIAS, 1, cs);
    int rmean = param(g, name, ".running_mean", IABN_P_BUFFER, 1, cs);
    int rvar = param(g, name, ".running_var", IABN_P_BUFFER, 1, cs);
    if (!iabn_graph_ok(g)) return -1;
    if (cfg->frozen) {
        /* the store remembers it, so the optimizer leaves them alone too */
        iabn_store *st = iabn_graph_store(g);
        iabn_store_get(st, lt(g, gamma)->store_id)->frozen = 1;
        iabn_store_get(st, lt(g, beta)->store_id)->frozen = 1;
        iabn_graph_t_mut(g, gamma)->requires_grad = 0;
        iabn_graph_t_mut(g, beta)->requires_grad = 0;
    }
    int ins[5] = {x, gamma, beta, rmean, rvar};
    int z = named(g, name, "", IABN_F32, xnd, xs);
    if (!training) {
        int n = iabn_graph_node(g, &op_eval, name, 5, ins, 1, &z, &P, sizeof P);
        iabn_graph_inplace(g, n, 0, 0, 0);
        return n < 0 ? -1 : z;
    }
    int mean = named(g, name, ".mean", IABN_F32, 1, cs);
    int var = named(g, name, ".var", IABN_F32, 1, cs);
    switch (cfg->mode) {
    case IABN_BN_STANDARD:
    case IABN_BN_STANDARD_SYNC:
    case IABN_BN_CHECKPOINT: {
        int y = named(g, name, ".y", IABN_F32, xnd, xs);
        int outs[3] = {y, mean, var};
        if (iabn_graph_node(g, &op_bn, name, 5, ins, 3, outs, &P, sizeof P) < 0) return -1;
        char an[IABN_NAME_LEN];
        snprintf(an, sizeof an, "%.80s.act", name);
        int a = iabn_graph_node(g, &op_act, an, 1, &y, 1, &z, &P, sizeof P);
        iabn_graph_inplace(g, a, 0, 0, 0);
        if (cfg->mode == IABN_BN_CHECKPOINT) {
            iabn_graph_set_policy(g, y, IABN_RECOMPUTE);
            iabn_graph_set_policy(g, z, IABN_RECOMPUTE);
        }
        return a < 0 ? -1 : z;
    }
    case IABN_BN_CHECKPOINT_OPT: {
        int xhat = named(g, name, ".xhat", IABN_F32, xnd, xs);
        int outs[4] = {z, xhat, mean, var};
        if (iabn_graph_node(g, &op_ckopt, name, 5, ins, 4, outs, &P, sizeof P) < 0) return -1;
        iabn_graph_set_policy(g, z, IABN_RECOMPUTE);
        return z;
    }
    default: {
        int outs[3] = {z, mean, var};
        int n = iabn_graph_node(g, &op_iabn, name, 5, ins, 3, outs, &P, sizeof P);
        iabn_graph_inplace(g, n, 0, 0, 1);
        return n < 0 ? -1 : z;
    }
    }
}
