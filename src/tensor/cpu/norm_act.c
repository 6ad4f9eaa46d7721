/* cpu/norm_act.c: batch normalisation + activation kernels, every mode
 * (cpu/norm_act.h), in NCHW, nChw16c and nChw8c.
 *
 * Each kernel fills in a job of the engine (norm_act_engine.c,
 * cpu/norm_act_impl.h) and runs it: the per-channel reductions and the
 * elementwise passes, their summation order and their aliasing rules are the
 * engine's.  What is here: argument conventions (empty shapes, evaluation
 * mode), the sync-BN combine and the running-statistics update.
 */
#include "tensor/cpu/norm_act_impl.h"

static int empty(int n, int c, int hw) { return n <= 0 || c <= 0 || hw <= 0; }

/* ======================================================================== */
/* statistics                                                                */

static iabn_red_job stats_job(int n, int c, int hw, iabn_layout layout, const float *x,
                              float *mean, float *var)
{
    iabn_red_job j = iabn_red_job_init(RED_STATS, n, c, hw, layout, x, NULL);
    j.o0 = mean;
    j.o1 = var;
    return j;
}

void iabn_bn_stats(int n, int c, int hw, iabn_layout layout, const float *x, float *mean,
                   float *var)
{
    if (c <= 0) return;
    if (n <= 0 || hw <= 0) {
        for (int ci = 0; ci < c; ci++) mean[ci] = var[ci] = 0.f;
        return;
    }
    iabn_red_job j = stats_job(n, c, hw, layout, x, mean, var);
    iabn_red_run(&j);
}

void iabn_bn_stats_combine(int workers, int c, const double *counts, const float *means,
                           const float *vars, float *mean, float *var)
{
    for (int ci = 0; ci < c; ci++) {
        double n = 0.0, s = 0.0;
        for (int w = 0; w < workers; w++) {
            n += counts[w];
            s += counts[w] * (double)means[(size_t)w * c + ci];
        }
        if (!(n > 0.0)) {
            mean[ci] = var[ci] = 0.f;
            continue;
        }
        double mu = s / n, q = 0.0;
        for (int w = 0; w < workers; w++) {
            double d = (double)means[(size_t)w * c + ci] - mu;
            q += counts[w] * ((double)vars[(size_t)w * c + ci] + d * d);
        }
        mean[ci] = (float)mu;
        var[ci] = (float)(q / n);
    }
}

void iabn_bn_update_running(int c, double m, float momentum, const float *mean,
                            const float *var, float *running_mean, float *running_var)
{
    double unbias = m > 1.0 ? m / (m - 1.0) : 1.0;
    double mo = momentum;
    for (int ci = 0; ci < c; ci++) {
        running_mean[ci] = (float)((1.0 - mo) * running_mean[ci] + mo * mean[ci]);
        running_var[ci] = (float)((1.0 - mo) * running_var[ci] + mo * var[ci] * unbias);
    }
}

/* ======================================================================== */
/* forward                                                                   */

static iabn_ew_job fwd_job(int n, int c, int hw, iabn_layout layout, const float *x,
                           const float *mean, const float *var, float eps, const float *gamma,
                           const float *beta, int abs_gamma, iabn_act act, float *z)
{
    iabn_ew_job j = iabn_ew_job_init(EW_FWD, n, c, hw, layout, x, NULL, z);
    j.act = act.kind;
    j.p = act.param;
    j.mean = mean;
    j.var = var;
    j.eps = eps;
    j.gamma = gamma;
    j.beta = beta;
    j.abs_gamma = abs_gamma;
    return j;
}

void iabn_norm_act_fwd(int n, int c, int hw, iabn_layout layout, const float *x,
                       const float *mean, const float *var, float eps, const float *gamma,
                       const float *beta, int abs_gamma, iabn_act act, float *z, float *xhat)
{
    if (empty(n, c, hw)) return;
    iabn_ew_job j = fwd_job(n, c, hw, layout, x, mean, var, eps, gamma, beta, abs_gamma, act, z);
    j.o2 = xhat;
    iabn_ew_run(&j);
}

void iabn_norm_act_from_xhat(int n, int c, int hw, iabn_layout layout, const float *xhat,
                             float eps, const float *gamma, const float *beta, int abs_gamma,
                             iabn_act act, float *z)
{
    if (empty(n, c, hw)) return;
    iabn_ew_job j = iabn_ew_job_init(EW_FROM_XHAT, n, c, hw, layout, xhat, NULL, z);
    j.act = act.kind;
    j.p = act.param;
    j.eps = eps;
    j.gamma = gamma;
    j.beta = beta;
    j.abs_gamma = abs_gamma;
    iabn_ew_run(&j);
}

void iabn_act_fwd(size_t count, iabn_act act, const float *x, float *y)
{
    iabn_act_run(EW_ACT_FWD, count, act, x, NULL, y);
}

void iabn_act_bwd(size_t count, iabn_act act, const float *y, const float *dy, float *dx)
{
    iabn_act_run(EW_ACT_BWD, count, act, y, dy, dx);
}

/* ======================================================================== */
/* standard / checkpoint_opt backward                                        */

/* BN's backward sums from x, of dy itself (kind RED_BN_X) or of dy =
 * dz*act'(z) with z rebuilt from x, gamma and beta (RED_BN_X_ACT): the
 * plain kernel and the one with the activation folded in. */
static iabn_red_job bn_x_red_job(int kind, int n, int c, int hw, iabn_layout layout,
                                 const float *x, const float *dy, iabn_act act,
                                 const float *mean, const float *var, float eps,
                                 const float *gamma, const float *beta, int abs_gamma,
                                 float *sum_dy, float *sum_dy_xhat)
{
    iabn_red_job j = iabn_red_job_init(kind, n > 0 && hw > 0 ? n : 0, c, hw > 0 ? hw : 0,
                                       layout, x, dy);
    j.gamma = gamma;
    j.beta = beta;
    j.abs_gamma = abs_gamma;
    j.act = act.kind;
    j.p = act.param;
    j.mean = mean;
    j.var = var;
    j.eps = eps;
    j.o0 = sum_dy;
    j.o1 = sum_dy_xhat;
    return j;
}

static void bn_x_reduce(int kind, int n, int c, int hw, iabn_layout layout, const float *x,
                        const float *dy, iabn_act act, const float *mean,
                        const float *var, float eps, const float *gamma, const float *beta,
                        int abs_gamma, float *sum_dy, float *sum_dy_xhat)
{
    if (c <= 0) return;
    iabn_red_job j = bn_x_red_job(kind, n, c, hw, layout, x, dy, act, mean, var, eps, gamma,
                                  beta, abs_gamma, sum_dy, sum_dy_xhat);
    iabn_red_run(&j);
}

/* Its dx pass, the same way (kind EW_BN_X, EW_SCALE or EW_BN_X_ACT). */
static iabn_ew_job bn_x_ew_job(int kind, int n, int c, int hw, iabn_layout layout,
                               const float *x, const float *dy, iabn_act act,
                               const float *mean, const float *var, float eps,
                               const float *gamma, const float *beta, int abs_gamma,
                               const float *sum_dy, const float *sum_dy_xhat, double count,
                               float *dx)
{
    iabn_ew_job j = iabn_ew_job_init(kind, n, c, hw, layout, x, dy, dx);
    j.beta = beta;
    j.act = act.kind;
    j.p = act.param;
    j.mean = mean;
    j.var = var;
    j.eps = eps;
    j.gamma = gamma;
    j.abs_gamma = abs_gamma;
    j.sum_dy = kind == EW_SCALE ? NULL : sum_dy;
    j.sum_dy_xhat = kind == EW_SCALE ? NULL : sum_dy_xhat;
    j.count = count;
    return j;
}

static void bn_x_apply(int kind, int n, int c, int hw, iabn_layout layout, const float *x,
                       const float *dy, iabn_act act, const float *mean,
                       const float *var, float eps, const float *gamma, const float *beta,
                       int abs_gamma, const float *sum_dy, const float *sum_dy_xhat,
                       double count, float *dx)
{
    if (empty(n, c, hw)) return;
    iabn_ew_job j = bn_x_ew_job(kind, n, c, hw, layout, x, dy, act, mean, var, eps, gamma, beta,
                                abs_gamma, sum_dy, sum_dy_xhat, count, dx);
    iabn_ew_run(&j);
}

static const iabn_act no_act = {IABN_ACT_IDENTITY, 0.f};

void iabn_bn_bwd_reduce(int n, int c, int hw, iabn_layout layout, const float *x,
                        const float *dy, const float *mean, const float *var, float eps,
                        float *sum_dy, float *sum_dy_xhat)
{
    bn_x_reduce(RED_BN_X, n, c, hw, layout, x, dy, no_act, mean, var, eps, NULL, NULL, 0,
                sum_dy, sum_dy_xhat);
}

void iabn_bn_act_bwd_reduce(int n, int c, int hw, iabn_layout layout, const float *x,
                            const float *dz, iabn_act act, const float *mean,
                            const float *var, float eps, const float *gamma, const float *beta,
                            int abs_gamma, float *sum_dy, float *sum_dy_xhat)
{
    bn_x_reduce(RED_BN_X_ACT, n, c, hw, layout, x, dz, act, mean, var, eps, gamma, beta,
                abs_gamma, sum_dy, sum_dy_xhat);
}

void iabn_bn_bwd_apply(int n, int c, int hw, iabn_layout layout, const float *x,
                       const float *dy, const float *mean, const float *var, float eps,
                       const float *gamma, int abs_gamma, const float *sum_dy,
                       const float *sum_dy_xhat, double count, int training, float *dx)
{
    bn_x_apply(training ? EW_BN_X : EW_SCALE, n, c, hw, layout, x, dy, no_act, mean, var,
               eps, gamma, NULL, abs_gamma, sum_dy, sum_dy_xhat, count, dx);
}

void iabn_bn_act_bwd_apply(int n, int c, int hw, iabn_layout layout, const float *x,
                           const float *dz, iabn_act act, const float *mean, const float *var,
                           float eps, const float *gamma, const float *beta, int abs_gamma,
                           const float *sum_dy, const float *sum_dy_xhat, double count,
                           float *dx)
{
    bn_x_apply(EW_BN_X_ACT, n, c, hw, layout, x, dz, act, mean, var, eps, gamma, beta, abs_gamma,
               sum_dy, sum_dy_xhat, count, dx);
}

void iabn_bn_bwd_reduce_xhat(int n, int c, int hw, iabn_layout layout, const float *xhat,
                             const float *dy, float *sum_dy, float *sum_dy_xhat)
{
    if (c <= 0) return;
    iabn_red_job j = iabn_red_job_init(RED_BN_XHAT, n > 0 && hw > 0 ? n : 0, c,
                                       hw > 0 ? hw : 0, layout, xhat, dy);
    j.o0 = sum_dy;
    j.o1 = sum_dy_xhat;
    iabn_red_run(&j);
}

void iabn_bn_bwd_apply_xhat(int n, int c, int hw, iabn_layout layout, const float *xhat,
                            const float *dy, const float *var, float eps, const float *gamma,
                            int abs_gamma, const float *sum_dy, const float *sum_dy_xhat,
                            double count, int training, float *dx)
{
    if (empty(n, c, hw)) return;
    iabn_ew_job j = iabn_ew_job_init(training ? EW_BN_XHAT : EW_SCALE, n, c, hw, layout, xhat,
                                     dy, dx);
    j.var = var;
    j.eps = eps;
    j.gamma = gamma;
    j.abs_gamma = abs_gamma;
    j.sum_dy = training ? sum_dy : NULL;
    j.sum_dy_xhat = training ? sum_dy_xhat : NULL;
    j.count = count;
    iabn_ew_run(&j);
}

void iabn_bn_param_grads(int c, const float *gamma, int abs_gamma, const float *sum_dy,
                         const float *sum_dy_xhat, float *dgamma, float *dbeta)
{
    for (int ci = 0; ci < c; ci++) {
        float s = iabn_bn_dgamma_factor(gamma[ci], abs_gamma);
        dgamma[ci] += sum_dy_xhat[ci] * s;
        dbeta[ci] += sum_dy[ci];
    }
}

/* ======================================================================== */
/* in-place ABN backward                                                     */

static iabn_red_job iabn_red_job_of(int variant, int n, int c, int hw, iabn_layout layout,
                                    const float *z, const float *dz, float eps,
                                    const float *gamma, const float *beta, iabn_act act,
                                    float *sum_dy, float *sum_dy_xhat)
{
    iabn_red_job j = iabn_red_job_init(variant == 1 ? RED_IABN1 : RED_IABN2,
                                       n > 0 && hw > 0 ? n : 0, c, hw > 0 ? hw : 0, layout, z,
                                       dz);
    j.act = act.kind;
    j.p = act.param;
    j.gamma = gamma;
    j.beta = beta;
    j.eps = eps;
    j.o0 = sum_dy;
    j.o1 = sum_dy_xhat;
    return j;
}

static iabn_ew_job iabn_ew_job_of(int variant, int n, int c, int hw, iabn_layout layout,
                                  const float *z, const float *dz, const float *var, float eps,
                                  const float *gamma, const float *beta, int abs_gamma,
                                  iabn_act act, const float *sum_dy, const float *sum_dy_xhat,
                                  double count, int training, float *dx)
{
    int kind = !training ? EW_IABN_EVAL : variant == 1 ? EW_IABN1 : EW_IABN2;
    iabn_ew_job j = iabn_ew_job_init(kind, n, c, hw, layout, z, dz, dx);
    j.act = act.kind;
    j.p = act.param;
    j.var = var;
    j.eps = eps;
    j.gamma = gamma;
    j.beta = beta;
    j.abs_gamma = abs_gamma; /* 0 only in evaluation: in-place modes refuse plain gamma */
    j.sum_dy = training ? sum_dy : NULL;
    j.sum_dy_xhat = training ? sum_dy_xhat : NULL;
    j.count = count;
    return j;
}

void iabn_iabn_bwd_reduce(int variant, int n, int c, int hw, iabn_layout layout, const float *z,
                          const float *dz, float eps, const float *gamma,
                          const float *beta, iabn_act act, float *sum_dy,
                          float *sum_dy_xhat)
{
    if (c <= 0) return;
    iabn_red_job j = iabn_red_job_of(variant, n, c, hw, layout, z, dz, eps, gamma, beta, act,
                                     sum_dy, sum_dy_xhat);
    iabn_red_run(&j);
}

void iabn_iabn_bwd_apply(int variant, int n, int c, int hw, iabn_layout layout, const float *z,
                         const float *dz, const float *var, float eps,
                         const float *gamma, const float *beta, int abs_gamma, iabn_act act,
                         const float *sum_dy, const float *sum_dy_xhat, double count,
                         int training, float *dx)
{
    if (empty(n, c, hw)) return;
    iabn_ew_job j = iabn_ew_job_of(variant, n, c, hw, layout, z, dz, var, eps, gamma, beta,
                                   abs_gamma, act, sum_dy, sum_dy_xhat, count, training, dx);
    iabn_ew_run(&j);
}

/* ======================================================================== */
/* a training pass's two halves in one call (norm_act.h)                    */

static int both(const iabn_red_job *r, const iabn_ew_job *w)
{
    if (iabn_red_ew_run(r, w)) return 1;
    iabn_red_run(r);
    iabn_ew_run(w);
    return 0;
}

int iabn_bn_fwd_train(int n, int c, int hw, iabn_layout layout, const float *x, float eps,
                      const float *gamma, const float *beta, int abs_gamma, iabn_act act,
                      float *mean, float *var, float *z)
{
    if (empty(n, c, hw)) {
        iabn_bn_stats(n, c, hw, layout, x, mean, var);
        return 0;
    }
    iabn_red_job r = stats_job(n, c, hw, layout, x, mean, var);
    iabn_ew_job w = fwd_job(n, c, hw, layout, x, mean, var, eps, gamma, beta, abs_gamma, act, z);
    return both(&r, &w);
}

int iabn_bn_act_bwd_train(int n, int c, int hw, iabn_layout layout, const float *x,
                          const float *dz, iabn_act act, const float *mean, const float *var,
                          float eps, const float *gamma, const float *beta, int abs_gamma,
                          float *sum_dy, float *sum_dy_xhat, float *dx)
{
    if (c <= 0) return 0;
    iabn_red_job r = bn_x_red_job(RED_BN_X_ACT, n, c, hw, layout, x, dz, act, mean, var, eps,
                                  gamma, beta, abs_gamma, sum_dy, sum_dy_xhat);
    if (empty(n, c, hw)) {
        iabn_red_run(&r);
        return 0;
    }
    iabn_ew_job w = bn_x_ew_job(EW_BN_X_ACT, n, c, hw, layout, x, dz, act, mean, var, eps, gamma,
                                beta, abs_gamma, sum_dy, sum_dy_xhat, (double)n * hw, dx);
    return both(&r, &w);
}

int iabn_iabn_bwd_train(int variant, int n, int c, int hw, iabn_layout layout, const float *z,
                        const float *dz, const float *var, float eps, const float *gamma,
                        const float *beta, int abs_gamma, iabn_act act, float *sum_dy,
                        float *sum_dy_xhat, float *dx)
{
    if (c <= 0) return 0;
    iabn_red_job r = iabn_red_job_of(variant, n, c, hw, layout, z, dz, eps, gamma, beta, act,
                                     sum_dy, sum_dy_xhat);
    if (empty(n, c, hw)) {
        iabn_red_run(&r);
        return 0;
    }
    iabn_ew_job w = iabn_ew_job_of(variant, n, c, hw, layout, z, dz, var, eps, gamma, beta,
                                   abs_gamma, act, sum_dy, sum_dy_xhat, (double)n * hw, 1, dx);
    return both(&r, &w);
}
