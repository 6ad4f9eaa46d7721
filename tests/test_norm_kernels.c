/* test_norm_kernels.c: the batch-norm + activation kernels (cpu/norm_act.h).
 *
 * A double-precision reference of docs/INPLACE_ABN.md sections 1-2 is checked by
 * finite differences, then every mode (standard, checkpoint_opt, in-place I
 * and II) is checked against it and against each other on random shapes,
 * negative gammas and every activation.  Also: aliasing (out == in gives the
 * same bits), thread-count independence, the sync-BN combine, the ELU clamp,
 * m == 1, large-mean data and evaluation mode.
 */
#include "tensor/tensor.h"
#include "test_util.h"

#include <stdint.h>

/* the layout of every kernel call here (the blocked ones: test_layout_kernels.c) */
#define NCHW IABN_LAYOUT_NCHW

#define EPS 1e-5f

static const iabn_act ACTS[] = {
    {IABN_ACT_IDENTITY, 0.f}, {IABN_ACT_LEAKY_RELU, 0.01f}, {IABN_ACT_LEAKY_RELU, 0.3f},
    {IABN_ACT_ELU, 1.0f},     {IABN_ACT_ELU, 0.5f},
};
#define NACTS ((int)(sizeof ACTS / sizeof ACTS[0]))

static float *fa(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static double *da(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

/* ---- data ---------------------------------------------------------------- */

typedef struct tcase {
    int n, c, hw;
    size_t cnt;
    iabn_act act;
    float *x, *gamma, *beta, *dz, *rmean, *rvar;
} tcase;

static float rn(uint64_t seed, uint64_t s, uint64_t i) { return iabn_rng_normal(seed, s, i); }
static float ru(uint64_t seed, uint64_t s, uint64_t i) { return iabn_rng_uniform(seed, s, i); }

/* Per-channel means in [-2,2], stds in [0.5,2]; |gamma| in [0.3,1.5] with
 * random signs (the in-place modes use |gamma|+eps, so negative gammas test
 * the sign in dgamma); beta in [-0.5,0.5]. */
static tcase make_case(uint64_t seed, int n, int c, int hw, iabn_act act)
{
    tcase t;
    t.n = n; t.c = c; t.hw = hw; t.act = act;
    t.cnt = (size_t)n * c * hw;
    t.x = fa(t.cnt); t.dz = fa(t.cnt);
    t.gamma = fa(c); t.beta = fa(c); t.rmean = fa(c); t.rvar = fa(c);
    for (int ci = 0; ci < c; ci++) {
        float g = 0.3f + 1.2f * ru(seed, 1, ci);
        t.gamma[ci] = ru(seed, 2, ci) < 0.5f ? -g : g;
        t.beta[ci] = ru(seed, 3, ci) - 0.5f;
        t.rmean[ci] = 0.5f * rn(seed, 4, ci);
        t.rvar[ci] = 0.5f + ru(seed, 5, ci);
    }
    for (size_t i = 0; i < t.cnt; i++) {
        int ci = (int)((i / hw) % c);
        float mu = 4.f * ru(seed, 6, ci) - 2.f, sd = 0.5f + 1.5f * ru(seed, 7, ci);
        t.x[i] = mu + sd * rn(seed, 8, i);
        t.dz[i] = rn(seed, 9, i);
    }
    return t;
}

static void free_case(tcase *t)
{
    free(t->x); free(t->dz); free(t->gamma); free(t->beta); free(t->rmean); free(t->rvar);
}

/* ---- double reference (docs/INPLACE_ABN.md sections 1-2) ------------------------ */

static double act_d(iabn_act a, double y)
{
    switch (a.kind) {
    case IABN_ACT_RELU: return y > 0 ? y : 0;
    case IABN_ACT_LEAKY_RELU: return y >= 0 ? y : a.param * y;
    case IABN_ACT_ELU: return y >= 0 ? y : a.param * expm1(y);
    default: return y;
    }
}

static double dact_d(iabn_act a, double y)
{
    switch (a.kind) {
    case IABN_ACT_RELU: return y > 0 ? 1 : 0;
    case IABN_ACT_LEAKY_RELU: return y >= 0 ? 1 : a.param;
    case IABN_ACT_ELU: return y >= 0 ? 1 : a.param * exp(y);
    default: return 1;
    }
}

typedef struct refout {
    double *mean, *var, *z, *dx, *dgamma, *dbeta;
    /* natural magnitudes, the yardsticks of the errors: dx can cancel to ~0
     * (m = 2 gives dx = 0 exactly), so scale it by g*invstd*|dy| instead */
    double dx_scale, pg_scale;
} refout;

/* Training mode normalises with the batch statistics, or with smean/svar
 * when given (the float statistics a kernel really used); evaluation mode
 * with t->rmean/rvar.  g = |gamma|+eps.  dz may be NULL (forward only). */
static refout ref_run_stats(const tcase *t, const float *x, const float *gamma,
                            const float *beta, const float *dz, int training,
                            const float *smean, const float *svar)
{
    int n = t->n, c = t->c, hw = t->hw;
    double m = (double)n * hw;
    refout r;
    r.mean = da(c); r.var = da(c); r.z = da(t->cnt); r.dx = da(t->cnt);
    r.dgamma = da(c); r.dbeta = da(c);
    r.dx_scale = r.pg_scale = 0;
    double *xh = da(t->cnt), *dy = da(t->cnt);
    for (int ci = 0; ci < c; ci++) {
        double s = 0, q = 0;
        for (int ni = 0; ni < n; ni++)
            for (int i = 0; i < hw; i++) s += x[((size_t)ni * c + ci) * hw + i];
        double mu = s / m;
        for (int ni = 0; ni < n; ni++)
            for (int i = 0; i < hw; i++) {
                double d = x[((size_t)ni * c + ci) * hw + i] - mu;
                q += d * d;
            }
        r.mean[ci] = mu;
        r.var[ci] = q / m;
        double mean = training ? (smean ? smean[ci] : mu) : t->rmean[ci];
        double var = training ? (svar ? svar[ci] : q / m) : t->rvar[ci];
        double invstd = 1.0 / sqrt(var + EPS), g = fabs(gamma[ci]) + EPS;
        double sdy = 0, sdyx = 0, sabs = 0;
        for (int ni = 0; ni < n; ni++)
            for (int i = 0; i < hw; i++) {
                size_t k = ((size_t)ni * c + ci) * hw + i;
                xh[k] = (x[k] - mean) * invstd;
                double y = g * xh[k] + beta[ci];
                r.z[k] = act_d(t->act, y);
                dy[k] = dz ? dz[k] * dact_d(t->act, y) : 0;
                sdy += dy[k];
                sdyx += dy[k] * xh[k];
                if (fabs(g * invstd * dy[k]) > r.dx_scale) r.dx_scale = fabs(g * invstd * dy[k]);
                sabs += fabs(dy[k]) * (fabs(xh[k]) > 1 ? fabs(xh[k]) : 1);
            }
        if (sabs > r.pg_scale) r.pg_scale = sabs;
        double sg = gamma[ci] > 0 ? 1 : gamma[ci] < 0 ? -1 : 0;
        r.dgamma[ci] = sdyx * sg;
        r.dbeta[ci] = sdy;
        for (int ni = 0; ni < n; ni++)
            for (int i = 0; i < hw; i++) {
                size_t k = ((size_t)ni * c + ci) * hw + i;
                r.dx[k] = training ? g * invstd * (dy[k] - sdy / m - xh[k] * sdyx / m)
                                   : g * invstd * dy[k];
            }
    }
    free(xh); free(dy);
    return r;
}

static refout ref_run(const tcase *t, const float *x, const float *gamma, const float *beta,
                      const float *dz, int training)
{
    return ref_run_stats(t, x, gamma, beta, dz, training, NULL, NULL);
}

static void free_ref(refout *r)
{
    free(r->mean); free(r->var); free(r->z); free(r->dx); free(r->dgamma); free(r->dbeta);
}

/* ---- the four modes in float ----------------------------------------------- */

typedef struct modeout {
    float *mean, *var, *z, *dx, *dgamma, *dbeta;
} modeout;

static modeout mode_alloc(const tcase *t)
{
    modeout o;
    o.mean = fa(t->c); o.var = fa(t->c); o.z = fa(t->cnt); o.dx = fa(t->cnt);
    o.dgamma = fa(t->c); o.dbeta = fa(t->c);
    return o;
}

static void mode_free(modeout *o)
{
    free(o->mean); free(o->var); free(o->z); free(o->dx); free(o->dgamma); free(o->dbeta);
}

enum { M_STANDARD, M_CKPT_OPT, M_IABN1, M_IABN2, NMODES };
static const char *MODE_NAME[] = {"standard", "checkpoint_opt", "inplace_I", "inplace_II"};

/* Runs one mode the way its layer will: what the backward reads is only what
 * the mode keeps (x; xhat; z), and the in-place modes overwrite x by z and dz
 * by dx.  Evaluation mode takes the running statistics. */
static modeout run_mode(const tcase *t, int mode, int training)
{
    int n = t->n, c = t->c, hw = t->hw;
    double m = (double)n * hw;
    modeout o = mode_alloc(t);
    const float *mean = o.mean, *var = o.var;
    float *sdy = fa(c), *sdyx = fa(c);
    if (training) {
        iabn_bn_stats(n, c, hw, NCHW, t->x, o.mean, o.var);
    } else {
        mean = t->rmean;
        var = t->rvar;
    }
    if (mode == M_STANDARD) {
        float *dy = fa(t->cnt);
        iabn_norm_act_fwd(n, c, hw, NCHW, t->x, mean, var, EPS, t->gamma, t->beta, 1, t->act, o.z,
                          NULL);
        iabn_act_bwd(t->cnt, t->act, o.z, t->dz, dy);
        iabn_bn_bwd_reduce(n, c, hw, NCHW, t->x, dy, mean, var, EPS, sdy, sdyx);
        iabn_bn_bwd_apply(n, c, hw, NCHW, t->x, dy, mean, var, EPS, t->gamma, 1, sdy, sdyx, m,
                          training, o.dx);
        free(dy);
    } else if (mode == M_CKPT_OPT) {
        float *xh = fa(t->cnt), *z2 = fa(t->cnt), *dy = fa(t->cnt);
        iabn_norm_act_fwd(n, c, hw, NCHW, t->x, mean, var, EPS, t->gamma, t->beta, 1, t->act, o.z,
                          xh);
        iabn_norm_act_from_xhat(n, c, hw, NCHW, xh, EPS, t->gamma, t->beta, 1, t->act, z2);
        CHECK(memcmp(z2, o.z, t->cnt * sizeof(float)) == 0);
        iabn_act_bwd(t->cnt, t->act, z2, t->dz, dy);
        iabn_bn_bwd_reduce_xhat(n, c, hw, NCHW, xh, dy, sdy, sdyx);
        iabn_bn_bwd_apply_xhat(n, c, hw, NCHW, xh, dy, var, EPS, t->gamma, 1, sdy, sdyx, m,
                               training, o.dx);
        free(xh); free(z2); free(dy);
    } else {
        int variant = mode == M_IABN1 ? 1 : 2;
        memcpy(o.z, t->x, t->cnt * sizeof(float));
        iabn_norm_act_fwd(n, c, hw, NCHW, o.z, mean, var, EPS, t->gamma, t->beta, 1, t->act, o.z,
                          NULL);
        memcpy(o.dx, t->dz, t->cnt * sizeof(float));
        iabn_iabn_bwd_reduce(variant, n, c, hw, NCHW, o.z, o.dx, EPS, t->gamma, t->beta, t->act,
                             sdy, sdyx);
        iabn_iabn_bwd_apply(variant, n, c, hw, NCHW, o.z, o.dx, var, EPS, t->gamma, t->beta, 1,
                            t->act, sdy, sdyx, m, training, o.dx);
    }
    iabn_bn_param_grads(c, t->gamma, 1, sdy, sdyx, o.dgamma, o.dbeta);
    free(sdy); free(sdyx);
    return o;
}

/* Largest |a-b| over an array, scaled by the reference's largest magnitude
 * or by `scale` if that is larger. */
static double rel_err_d(const float *a, const double *ref, size_t n, double scale)
{
    double worst = 0;
    if (!(scale > 1e-30)) scale = 1e-30;
    for (size_t i = 0; i < n; i++)
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= worst)) worst = d;
    }
    return worst / scale;
}

/* ---- tests ----------------------------------------------------------------- */

/* The reference's gradient formulas against central differences of its own
 * forward, in double: it is the yardstick for everything below. */
static void test_reference_finite_differences(void)
{
    for (int a = 0; a < NACTS; a++) {
        tcase t = make_case(100 + a, 2, 3, 5, ACTS[a]);
        refout r = ref_run(&t, t.x, t.gamma, t.beta, t.dz, 1);
        /* loss = sum(dz * z): its gradient is the backward of dz */
        float *xp = fa(t.cnt), *gp = fa(t.c), *bp = fa(t.c);
        double worst = 0;
        for (int k = 0; k < (int)t.cnt + 2 * t.c; k++) {
            memcpy(xp, t.x, t.cnt * sizeof(float));
            memcpy(gp, t.gamma, t.c * sizeof(float));
            memcpy(bp, t.beta, t.c * sizeof(float));
            float *v = k < (int)t.cnt ? &xp[k] : k < (int)t.cnt + t.c ? &gp[k - t.cnt]
                                                                    : &bp[k - t.cnt - t.c];
            /* a float perturbation: the reference reads float inputs */
            float v0 = *v, h = 1e-4f * (fabsf(v0) > 1.f ? fabsf(v0) : 1.f);
            double loss[2];
            for (int s = 0; s < 2; s++) {
                *v = s ? v0 - h : v0 + h;
                refout q = ref_run(&t, xp, gp, bp, NULL, 1);
                loss[s] = 0;
                for (size_t i = 0; i < t.cnt; i++) loss[s] += t.dz[i] * q.z[i];
                free_ref(&q);
            }
            double hh = (double)(v0 + h) - (double)(v0 - h);
            double fd = (loss[0] - loss[1]) / hh;
            double an = k < (int)t.cnt ? r.dx[k] : k < (int)t.cnt + t.c ? r.dgamma[k - t.cnt]
                                                                        : r.dbeta[k - t.cnt - t.c];
            double err = fabs(fd - an) / (1e-3 + 1e-3 * fabs(an));
            if (err > worst) worst = err;
        }
        CHECK_MSG(worst <= 1.0, "act %d: finite differences off by %.3g x tolerance", a, worst);
        free(xp); free(gp); free(bp);
        free_ref(&r);
        free_case(&t);
    }
}

/* The float kernels' forward, differentiated numerically, against the
 * in-place II backward: closes the loop without the reference.  Smooth
 * activations only (identity, ELU with alpha 1), because a finite step of
 * 1e-2 in float would straddle the kink of leaky_relu. */
static void test_kernel_finite_differences(void)
{
    const iabn_act acts[] = {{IABN_ACT_IDENTITY, 0.f}, {IABN_ACT_ELU, 1.f}};
    for (int a = 0; a < 2; a++) {
        tcase t = make_case(200 + a, 2, 2, 9, acts[a]);
        modeout o = run_mode(&t, M_IABN2, 1);
        float *xp = fa(t.cnt), *z = fa(t.cnt), *mean = fa(t.c), *var = fa(t.c);
        double worst = 0;
        for (size_t k = 0; k < t.cnt; k++) {
            double loss[2];
            for (int s = 0; s < 2; s++) {
                memcpy(xp, t.x, t.cnt * sizeof(float));
                xp[k] += s ? -1e-2f : 1e-2f;
                iabn_bn_stats(t.n, t.c, t.hw, NCHW, xp, mean, var);
                iabn_norm_act_fwd(t.n, t.c, t.hw, NCHW, xp, mean, var, EPS, t.gamma, t.beta, 1,
                                  t.act, z, NULL);
                loss[s] = 0;
                for (size_t i = 0; i < t.cnt; i++) loss[s] += (double)t.dz[i] * z[i];
            }
            double hh = (double)(t.x[k] + 1e-2f) - (double)(t.x[k] - 1e-2f);
            double fd = (loss[0] - loss[1]) / hh;
            double err = fabs(fd - o.dx[k]) / (2e-3 + 1e-2 * fabs(fd));
            if (err > worst) worst = err;
        }
        CHECK_MSG(worst <= 1.0, "act %d: kernel finite differences off by %.3g x tolerance", a,
                  worst);
        free(xp); free(z); free(mean); free(var);
        mode_free(&o);
        free_case(&t);
    }
}

/* Tolerances, relative to each output's natural magnitude (refout).  All
 * modes stay within a few float roundings (worst seen: 3.2e-7; the test
 * prints the worst per mode).  The in-place modes rebuild y from z, and the
 * ELU inverse log1p(z/alpha) loses about 6e-8/(1+z/alpha) relative, 2e-5 at
 * y = -6, which is why in-place ELU gets the wider bound. */
/* worst error seen per mode, [in-place ELU or not], z/dx/dgamma/dbeta: printed
 * so that the log shows the margin under each tolerance */
static double worst_err[4][2][4];

static void check_against_ref(const tcase *t, const modeout *o, const refout *r, int mode,
                              int training, const char *what)
{
    int elu = t->act.kind == IABN_ACT_ELU && (mode == M_IABN1 || mode == M_IABN2);
    double tz = 1e-6, tdx = elu ? 5e-5 : 1e-5, tdg = tdx;
    double ez = rel_err_d(o->z, r->z, t->cnt, 1.0);
    double edx = rel_err_d(o->dx, r->dx, t->cnt, r->dx_scale);
    double edg = rel_err_d(o->dgamma, r->dgamma, t->c, r->pg_scale);
    double edb = rel_err_d(o->dbeta, r->dbeta, t->c, r->pg_scale);
    double *w = worst_err[mode][elu];
    if (ez > w[0]) w[0] = ez;
    if (edx > w[1]) w[1] = edx;
    if (edg > w[2]) w[2] = edg;
    if (edb > w[3]) w[3] = edb;
    CHECK_MSG(ez <= tz && edx <= tdx && edg <= tdg && edb <= tdg,
              "%s %s act %d/%g n%d c%d hw%d training %d: z %.2g dx %.2g dgamma %.2g dbeta %.2g",
              what, MODE_NAME[mode], t->act.kind, t->act.param, t->n, t->c, t->hw, training, ez,
              edx, edg, edb);
    if (training) {
        for (int ci = 0; ci < t->c; ci++) {
            CHECK_CLOSE(o->mean[ci], r->mean[ci], 1e-6, 1e-6);
            CHECK_CLOSE(o->var[ci], r->var[ci], 1e-7, 2e-6);
        }
    }
}

/* Every mode computes the same function on random shapes (odd sizes, c=1,
 * hw=1, more than one unit per plane), every activation, both training and
 * evaluation mode; standard and checkpoint_opt agree bit for bit. */
static void test_modes_agree(void)
{
    const int shapes[][3] = {{1, 1, 2},  {1, 3, 1},  {2, 1, 1},  {4, 33, 50}, {3, 7, 49},
                             {2, 16, 13}, {1, 5, 4099}, {4, 2, 17}, {2, 33, 1}, {3, 9, 31}};
    int nsh = (int)(sizeof shapes / sizeof shapes[0]);
    for (int s = 0; s < nsh; s++)
        for (int a = -1; a < NACTS; a++) {
            iabn_act act = a < 0 ? (iabn_act){IABN_ACT_RELU, 0.f} : ACTS[a];
            tcase t = make_case(1000 + 17 * s + a, shapes[s][0], shapes[s][1], shapes[s][2], act);
            for (int training = 1; training >= 0; training--) {
                if (training && (double)t.n * t.hw < 2) continue;
                /* normalised with the float statistics every mode shares, so
                 * that a near-degenerate channel (m = 2, two close values)
                 * does not blow the mean's rounding up by invstd; the
                 * statistics themselves are checked against exact ones */
                float *fm = fa(t.c), *fv = fa(t.c);
                iabn_bn_stats(t.n, t.c, t.hw, NCHW, t.x, fm, fv);
                refout r = ref_run_stats(&t, t.x, t.gamma, t.beta, t.dz, training, fm, fv);
                free(fm); free(fv);
                modeout o[NMODES];
                int nmodes = act.kind == IABN_ACT_RELU ? M_IABN1 : NMODES;
                for (int m = 0; m < nmodes; m++) {
                    o[m] = run_mode(&t, m, training);
                    check_against_ref(&t, &o[m], &r, m, training, "vs reference:");
                }
                size_t zb = t.cnt * sizeof(float), cb = t.c * sizeof(float);
                CHECK(memcmp(o[M_STANDARD].z, o[M_CKPT_OPT].z, zb) == 0);
                CHECK(memcmp(o[M_STANDARD].dx, o[M_CKPT_OPT].dx, zb) == 0);
                CHECK(memcmp(o[M_STANDARD].dgamma, o[M_CKPT_OPT].dgamma, cb) == 0);
                CHECK(memcmp(o[M_STANDARD].dbeta, o[M_CKPT_OPT].dbeta, cb) == 0);
                for (int m = nmodes; m-- > 0;) {
                    if (m >= M_IABN1) CHECK(memcmp(o[M_STANDARD].z, o[m].z, zb) == 0);
                    mode_free(&o[m]);
                }
                free_ref(&r);
            }
            free_case(&t);
        }
    for (int m = 0; m < NMODES; m++)
        for (int e = 0; e < 2; e++)
            if (worst_err[m][e][1] > 0)
                fprintf(stderr, "  %-14s%s worst error: z %.2g dx %.2g dgamma %.2g dbeta %.2g\n",
                        MODE_NAME[m], e ? " (elu)" : "", worst_err[m][e][0], worst_err[m][e][1],
                        worst_err[m][e][2], worst_err[m][e][3]);
}

static void test_running_stats(void)
{
    tcase t = make_case(7, 3, 5, 11, ACTS[0]);
    float *mean = fa(t.c), *var = fa(t.c);
    iabn_bn_stats(t.n, t.c, t.hw, NCHW, t.x, mean, var);
    refout r = ref_run(&t, t.x, t.gamma, t.beta, NULL, 1);
    double m = (double)t.n * t.hw;
    float *rm = fa(t.c), *rv = fa(t.c);
    memcpy(rm, t.rmean, t.c * sizeof(float));
    memcpy(rv, t.rvar, t.c * sizeof(float));
    iabn_bn_update_running(t.c, m, 0.1f, mean, var, rm, rv);
    for (int ci = 0; ci < t.c; ci++) {
        CHECK_CLOSE(rm[ci], 0.9 * t.rmean[ci] + 0.1 * r.mean[ci], 1e-6, 1e-6);
        CHECK_CLOSE(rv[ci], 0.9 * t.rvar[ci] + 0.1 * r.var[ci] * m / (m - 1), 1e-6, 1e-6);
    }
    /* m == 1 is the caller's error; the kernel still writes finite values */
    iabn_bn_update_running(t.c, 1.0, 0.1f, mean, var, rm, rv);
    for (int ci = 0; ci < t.c; ci++) CHECK(isfinite(rm[ci]) && isfinite(rv[ci]));
    float one = 3.5f, mu, v;
    iabn_bn_stats(1, 1, 1, NCHW, &one, &mu, &v);
    CHECK(mu == 3.5f && v == 0.f);
    free(mean); free(var); free(rm); free(rv);
    free_ref(&r);
    free_case(&t);
}

/* Mean 1e4, std 1: a naive sum of squares in float would lose every digit.
 * The statistics must be accurate; the rest is compared with a reference that
 * normalises with the kernel's float mean, because that mean is itself off
 * by up to half an ulp of 1e4 (5e-4 std), an error no float BN can avoid. */
static void test_large_mean(void)
{
    tcase t = make_case(11, 4, 3, 500, ACTS[1]);
    for (size_t i = 0; i < t.cnt; i++) t.x[i] = 1e4f + (float)((i / t.hw) % t.c) + rn(11, 20, i);
    refout r = ref_run(&t, t.x, t.gamma, t.beta, t.dz, 1);
    for (int m = 0; m < NMODES; m++) {
        modeout o = run_mode(&t, m, 1);
        for (int ci = 0; ci < t.c; ci++) {
            CHECK_CLOSE(o.mean[ci], r.mean[ci], 0, 1e-7);
            CHECK_CLOSE(o.var[ci], r.var[ci], 0, 1e-5);
        }
        refout rf = ref_run_stats(&t, t.x, t.gamma, t.beta, t.dz, 1, o.mean, o.var);
        check_against_ref(&t, &o, &rf, m, 0, "large mean:");
        free_ref(&rf);
        mode_free(&o);
    }
    free_ref(&r);
    free_case(&t);
}

/* z at or below -alpha can only come from rounding, and must not give NaN. */
static void test_elu_clamp(void)
{
    const float alphas[] = {1.f, 0.5f};
    for (int a = 0; a < 2; a++) {
        float al = alphas[a];
        const float zs[] = {-al, nextafterf(-al, -2.f * al), -al * (1.f + 1e-6f), -al - 1.f,
                            nextafterf(-al, 0.f), -0.999f * al};
        for (int i = 0; i < 6; i++) {
            float y = iabn_act_inv(IABN_ACT_ELU, al, zs[i]);
            CHECK_MSG(isfinite(y) && y < -5.f, "alpha %g z %.9g -> y %g", al, zs[i], y);
        }
        /* the whole in-place backward on such a z stays finite */
        iabn_act act = {IABN_ACT_ELU, al};
        float z[6], dz[6] = {1, -1, 0.5f, 2, -0.25f, 1}, g = -0.7f, b = 0.1f, var = 0.8f, sdy,
                    sdyx;
        memcpy(z, zs, sizeof z);
        for (int v = 1; v <= 2; v++) {
            float dx[6];
            memcpy(dx, dz, sizeof dx);
            iabn_iabn_bwd_reduce(v, 1, 1, 6, NCHW, z, dx, EPS, &g, &b, act, &sdy, &sdyx);
            iabn_iabn_bwd_apply(v, 1, 1, 6, NCHW, z, dx, &var, EPS, &g, &b, 1, act, &sdy, &sdyx,
                                6, 1, dx);
            CHECK(isfinite(sdy) && isfinite(sdyx));
            for (int i = 0; i < 6; i++) CHECK(isfinite(dx[i]));
        }
    }
}

static double ulp_of(double v)
{
    float a = fabsf((float)v);
    return (double)nextafterf(a, INFINITY) - a;
}

/* The branch-free expm1/log1p of math/act.h (ELU forward and inverse) stay
 * within 1 ulp over their whole domain: a sweep over the float bit patterns
 * (every 101st), the ends, and NaN. */
static void test_elu_math(void)
{
    double we = 0, wl = 0;
    for (uint32_t u = 0x80000000u; u <= iabn_float_to_bits(-30.f); u += 101) {
        float y = iabn_bits_to_float(u);
        double ref = expm1((double)y);
        double e = fabs(iabn_expm1f_neg(y) - ref) / ulp_of(ref);
        if (!(e <= we)) we = e;
    }
    for (uint32_t u = 0x80000000u; u <= iabn_float_to_bits(-1.f + 1.1920929e-7f); u += 101) {
        float r = iabn_bits_to_float(u);
        double ref = log1p((double)r);
        double e = fabs(iabn_log1pf_neg(r) - ref) / ulp_of(ref);
        if (!(e <= wl)) wl = e;
    }
    CHECK_MSG(we <= 1.0, "expm1: %.3g ulp", we);
    CHECK_MSG(wl <= 1.0, "log1p: %.3g ulp", wl);
    CHECK(iabn_expm1f_neg(0.f) == 0.f && iabn_expm1f_neg(-1e-30f) == -1e-30f);
    CHECK(iabn_expm1f_neg(-100.f) == -1.f && iabn_expm1f_neg(-INFINITY) == -1.f);
    CHECK(iabn_log1pf_neg(0.f) == 0.f && iabn_log1pf_neg(-1e-30f) == -1e-30f);
    CHECK(isnan(iabn_expm1f_neg(NAN)) && isnan(iabn_log1pf_neg(NAN)));
    CHECK(isnan(iabn_act_f(IABN_ACT_ELU, 1.f, NAN)) && isnan(iabn_act_inv(IABN_ACT_ELU, 1.f, NAN)));
    /* forward then inverse returns y (to the conditioning of log1p near -1) */
    for (float y = -8.f; y <= 2.f; y += 0.01f) {
        float z = iabn_act_f(IABN_ACT_ELU, 0.7f, y);
        CHECK_CLOSE(iabn_act_inv(IABN_ACT_ELU, 0.7f, z), y, 1e-6 * (y < 0 ? exp(-y) : 1.0), 1e-6);
    }
}

/* The in-place kernels with relu are the caller's error (the layer refuses
 * it); they must still not crash nor write NaN. */
static void test_relu_inplace_no_crash(void)
{
    tcase t = make_case(12, 2, 3, 10, (iabn_act){IABN_ACT_RELU, 0.f});
    for (int m = M_IABN1; m <= M_IABN2; m++) {
        modeout o = run_mode(&t, m, 1);
        for (size_t i = 0; i < t.cnt; i++) CHECK(isfinite(o.dx[i]));
        mode_free(&o);
    }
    free_case(&t);
}

/* Runs f with out != in, then with out == in: same bits. */
static void test_aliasing(void)
{
    tcase t = make_case(13, 3, 5, 37, ACTS[2]);
    int n = t.n, c = t.c, hw = t.hw;
    size_t zb = t.cnt * sizeof(float);
    double m = (double)n * hw;
    float *mean = fa(c), *var = fa(c), *sdy = fa(c), *sdyx = fa(c);
    float *out = fa(t.cnt), *io = fa(t.cnt), *xh = fa(t.cnt), *z = fa(t.cnt);
    iabn_bn_stats(n, c, hw, NCHW, t.x, mean, var);
    iabn_norm_act_fwd(n, c, hw, NCHW, t.x, mean, var, EPS, t.gamma, t.beta, 1, t.act, z, xh);
    iabn_iabn_bwd_reduce(2, n, c, hw, NCHW, z, t.dz, EPS, t.gamma, t.beta, t.act, sdy, sdyx);
    for (int k = 0; k < 12; k++) {
        for (int pass = 0; pass < 2; pass++) {
            float *o = pass ? io : out;
            /* the aliased input: x (forward), xhat, or dz / dy (backward) */
            const float *src = k == 0 || k == 2 ? t.x : k == 1 ? xh : t.dz;
            memcpy(io, src, zb);
            const float *in = pass ? io : src;
            switch (k) {
            case 0: iabn_norm_act_fwd(n, c, hw, NCHW, in, mean, var, EPS, t.gamma, t.beta, 1,
                                      t.act, o, NULL); break;
            case 1: iabn_norm_act_from_xhat(n, c, hw, NCHW, in, EPS, t.gamma, t.beta, 1, t.act,
                                            o); break;
            case 2: iabn_act_fwd(t.cnt, t.act, in, o); break;
            case 3: iabn_act_bwd(t.cnt, t.act, z, in, o); break;
            case 4: iabn_bn_bwd_apply(n, c, hw, NCHW, t.x, in, mean, var, EPS, t.gamma, 1, sdy,
                                      sdyx, m, 1, o); break;
            case 5: iabn_bn_bwd_apply(n, c, hw, NCHW, t.x, in, mean, var, EPS, t.gamma, 0, sdy,
                                      sdyx, m, 0, o); break;
            case 6: iabn_bn_bwd_apply_xhat(n, c, hw, NCHW, xh, in, var, EPS, t.gamma, 1, sdy,
                                           sdyx, m, 1, o); break;
            case 7: iabn_bn_bwd_apply_xhat(n, c, hw, NCHW, xh, in, var, EPS, t.gamma, 1, sdy,
                                           sdyx, m, 0, o); break;
            case 8: iabn_iabn_bwd_apply(1, n, c, hw, NCHW, z, in, var, EPS, t.gamma, t.beta, 1,
                                        t.act, sdy, sdyx, m, 1, o); break;
            case 9: iabn_iabn_bwd_apply(2, n, c, hw, NCHW, z, in, var, EPS, t.gamma, t.beta, 1,
                                        t.act, sdy, sdyx, m, 1, o); break;
            case 10: iabn_iabn_bwd_apply(2, n, c, hw, NCHW, z, in, var, EPS, t.gamma, t.beta, 1,
                                         t.act, sdy, sdyx, m, 0, o); break;
            default: iabn_norm_act_fwd(n, c, hw, NCHW, in, mean, var, EPS, t.gamma, t.beta, 0,
                                       t.act, o, NULL); break;
            }
        }
        CHECK_MSG(memcmp(out, io, zb) == 0, "kernel %d differs when out == in", k);
    }
    free(mean); free(var); free(sdy); free(sdyx); free(out); free(io); free(xh); free(z);
    free_case(&t);
}

/* Same bits for 1, 2 and 3 threads, on shapes that take both reduction paths
 * (channels in parallel; units in parallel for few channels). */
static void test_thread_count_independent(void)
{
    const int shapes[][3] = {{4, 3, 5000}, {2, 64, 300}, {8, 1, 4096}};
    int saved = iabn_num_threads();
    for (int s = 0; s < 3; s++) {
        tcase t = make_case(14 + s, shapes[s][0], shapes[s][1], shapes[s][2], ACTS[3]);
        float *res[3];
        for (int th = 1; th <= 3; th++) {
            iabn_set_num_threads(th);
            float *r = res[th - 1] = fa(8 * (size_t)t.c + t.cnt);
            float *mean = r, *var = r + t.c, *a = r + 2 * t.c, *b = r + 3 * t.c, *e = r + 4 * t.c,
                  *f = r + 5 * t.c, *g = r + 6 * t.c, *h = r + 7 * t.c, *dx = r + 8 * t.c;
            float *z = fa(t.cnt);
            iabn_bn_stats(t.n, t.c, t.hw, NCHW, t.x, mean, var);
            iabn_norm_act_fwd(t.n, t.c, t.hw, NCHW, t.x, mean, var, EPS, t.gamma, t.beta, 1,
                              t.act, z, NULL);
            iabn_bn_bwd_reduce(t.n, t.c, t.hw, NCHW, t.x, t.dz, mean, var, EPS, a, b);
            iabn_iabn_bwd_reduce(1, t.n, t.c, t.hw, NCHW, z, t.dz, EPS, t.gamma, t.beta, t.act,
                                 e, f);
            iabn_iabn_bwd_reduce(2, t.n, t.c, t.hw, NCHW, z, t.dz, EPS, t.gamma, t.beta, t.act,
                                 g, h);
            iabn_iabn_bwd_apply(2, t.n, t.c, t.hw, NCHW, z, t.dz, var, EPS, t.gamma, t.beta, 1,
                                t.act, g, h, (double)t.n * t.hw, 1, dx);
            free(z);
        }
        size_t bytes = (8 * (size_t)t.c + t.cnt) * sizeof(float);
        CHECK_MSG(memcmp(res[0], res[1], bytes) == 0, "shape %d: 1 vs 2 threads", s);
        CHECK_MSG(memcmp(res[0], res[2], bytes) == 0, "shape %d: 1 vs 3 threads", s);
        for (int i = 0; i < 3; i++) free(res[i]);
        free_case(&t);
    }
    iabn_set_num_threads(saved);
}

/* Sync BN: 3 workers with 1, 2 and 3 samples.  Combined statistics equal the
 * whole batch's; backward sums added over workers with the global count give
 * the whole batch's dx (in-place II). */
static void test_sync_combine(void)
{
    const int parts[3] = {1, 2, 3};
    tcase t = make_case(21, 6, 5, 23, ACTS[1]);
    int c = t.c, hw = t.hw;
    size_t plane = (size_t)c * hw;
    double counts[3];
    float *means = fa(3 * (size_t)c), *vars = fa(3 * (size_t)c), *mean = fa(c), *var = fa(c);
    for (int w = 0, n0 = 0; w < 3; n0 += parts[w], w++) {
        iabn_bn_stats(parts[w], c, hw, NCHW, t.x + n0 * plane, means + w * c, vars + w * c);
        counts[w] = (double)parts[w] * hw;
    }
    iabn_bn_stats_combine(3, c, counts, means, vars, mean, var);
    refout r = ref_run(&t, t.x, t.gamma, t.beta, t.dz, 1);
    for (int ci = 0; ci < c; ci++) {
        CHECK_CLOSE(mean[ci], r.mean[ci], 1e-6, 1e-6);
        CHECK_CLOSE(var[ci], r.var[ci], 1e-6, 1e-6);
    }
    /* backward: local sums, all-reduced (added), then the global count */
    float *z = fa(t.cnt), *dx = fa(t.cnt), *sdy = fa(c), *sdyx = fa(c), *ldy = fa(c),
          *ldyx = fa(c);
    iabn_norm_act_fwd(t.n, c, hw, NCHW, t.x, mean, var, EPS, t.gamma, t.beta, 1, t.act, z, NULL);
    memcpy(dx, t.dz, t.cnt * sizeof(float));
    for (int w = 0, n0 = 0; w < 3; n0 += parts[w], w++) {
        iabn_iabn_bwd_reduce(2, parts[w], c, hw, NCHW, z + n0 * plane, dx + n0 * plane, EPS,
                             t.gamma, t.beta, t.act, ldy, ldyx);
        for (int ci = 0; ci < c; ci++) {
            sdy[ci] += ldy[ci];
            sdyx[ci] += ldyx[ci];
        }
    }
    for (int w = 0, n0 = 0; w < 3; n0 += parts[w], w++)
        iabn_iabn_bwd_apply(2, parts[w], c, hw, NCHW, z + n0 * plane, dx + n0 * plane, var, EPS,
                            t.gamma, t.beta, 1, t.act, sdy, sdyx, (double)t.n * hw, 1,
                            dx + n0 * plane);
    double ex = rel_err_d(dx, r.dx, t.cnt, r.dx_scale);
    CHECK_MSG(ex <= 2e-5, "sync dx err %.3g", ex);
    /* a worker with no data contributes nothing; no data at all gives zeros */
    double c0[2] = {0, counts[0]};
    float mv[2 * 5], vv[2 * 5], m2[5], v2[5];
    for (int ci = 0; ci < c; ci++) {
        mv[ci] = 123.f; vv[ci] = 456.f;
        mv[c + ci] = means[ci]; vv[c + ci] = vars[ci];
    }
    iabn_bn_stats_combine(2, c, c0, mv, vv, m2, v2);
    for (int ci = 0; ci < c; ci++) CHECK(m2[ci] == means[ci] && v2[ci] == vars[ci]);
    c0[1] = 0;
    iabn_bn_stats_combine(2, c, c0, mv, vv, m2, v2);
    for (int ci = 0; ci < c; ci++) CHECK(m2[ci] == 0.f && v2[ci] == 0.f);
    free(means); free(vars); free(mean); free(var); free(z); free(dx); free(sdy); free(sdyx);
    free(ldy); free(ldyx);
    free_ref(&r);
    free_case(&t);
}

/* dgamma through |gamma|: the sign of gamma, +1 at 0 (issue 16.2: the
 * reference's dgamma = sum(xhat*dy) there, so a zero gamma trains); plain
 * gamma: factor 1; accumulates.  The factor is the iabn_math.h function the
 * CUDA kernel calls too. */
static void test_param_grads(void)
{
    float gamma[4] = {-2.f, 0.f, 3.f, -0.f}, sdy[4] = {1, 2, 3, 4}, sdyx[4] = {4, 5, 6, 7};
    float dg[4] = {1, 1, 1, 1}, db[4] = {0, 0, 0, 0};
    iabn_bn_param_grads(4, gamma, 1, sdy, sdyx, dg, db);
    CHECK_MSG(dg[0] == -3.f && dg[1] == 6.f && dg[2] == 7.f && dg[3] == 8.f,
              "dgamma %g %g %g %g, expected -3 6 7 8", dg[0], dg[1], dg[2], dg[3]);
    CHECK(db[0] == 1.f && db[1] == 2.f && db[2] == 3.f && db[3] == 4.f);
    iabn_bn_param_grads(4, gamma, 0, sdy, sdyx, dg, db);
    CHECK(dg[0] == 1.f && dg[1] == 11.f && dg[2] == 13.f && dg[3] == 15.f);
    CHECK(iabn_bn_dgamma_factor(0.f, 1) == 1.f && iabn_bn_dgamma_factor(-0.f, 1) == 1.f);
    CHECK(iabn_bn_dgamma_factor(-1e-30f, 1) == -1.f && iabn_bn_dgamma_factor(-5.f, 0) == 1.f);
}

int main(void)
{
    RUN(test_reference_finite_differences);
    RUN(test_kernel_finite_differences);
    RUN(test_modes_agree);
    RUN(test_running_stats);
    RUN(test_large_mean);
    RUN(test_elu_clamp);
    RUN(test_elu_math);
    RUN(test_relu_inplace_no_crash);
    RUN(test_aliasing);
    RUN(test_thread_count_independent);
    RUN(test_sync_combine);
    RUN(test_param_grads);
    return TEST_END();
}
