/* test_norm_fixtures.c: the batch-norm + activation kernels against PyTorch 1.13.
 *
 * tests/fixtures/make_norm_fixtures.py wrote norm_act.safetensors: per case,
 * torch's batch_norm (training, weight |gamma|+eps) followed by the activation,
 * its autograd gradients (dgamma through abs) and one running-statistics
 * update.  Here the standard path (stats, norm_act_fwd, act_bwd, bn backward)
 * and the in-place II path (z over x, dx over dz, reading only z) reproduce
 * them; relu cases take the standard path only (not invertible).
 * Usage: test_norm_fixtures [norm_act.safetensors]
 */
#include "tensor/tensor.h"
#include "test_util.h"

/* the layout of every kernel call here (test_layout_kernels.c covers nChw16c) */
#define NCHW IABN_LAYOUT_NCHW

#ifndef NORM_FIXTURE
#define NORM_FIXTURE "tests/fixtures/norm_act.safetensors"
#endif

static iabn_st_file *fx;

/* The named float tensor, its element count in *count; NULL if missing. */
static const float *getf(const char *key, const char *field, size_t *count,
                         const iabn_st_tensor **tp)
{
    char name[64];
    snprintf(name, sizeof name, "%s%s", key, field);
    const iabn_st_tensor *t = iabn_st_find(fx, name);
    CHECK_MSG(t != NULL && t->dtype == IABN_F32, "%s missing or not F32", name);
    if (!t || t->dtype != IABN_F32) return NULL;
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    if (count) *count = n;
    if (tp) *tp = t;
    return t->data;
}

static void compare(const char *key, const char *what, const float *got, const float *want,
                    size_t n, double atol, double rtol)
{
    double e = t_max_err(got, want, n, atol, rtol);
    CHECK_MSG(e <= 1.0, "%s%s: worst error ratio %g", key, what, e);
}

/* Runs case `key` through one path; returns 0 if the case is absent. */
static int run_case(const char *key, int inplace)
{
    char mk[64];
    snprintf(mk, sizeof mk, "%sact", key);
    const char *kind = iabn_st_meta(fx, mk);
    if (!kind) return 0;
    snprintf(mk, sizeof mk, "%sparam", key);
    const char *param = iabn_st_meta(fx, mk);
    const char *eps_s = iabn_st_meta(fx, "eps"), *mom_s = iabn_st_meta(fx, "momentum");
    CHECK(param && eps_s && mom_s);
    if (!param || !eps_s || !mom_s) return 0;
    iabn_act act;
    iabn_act_kind k;
    CHECK(iabn_act_parse(kind, &k, NULL) == 0);
    act.kind = k;
    act.param = strtof(param, NULL);
    float eps = strtof(eps_s, NULL), momentum = strtof(mom_s, NULL);
    if (inplace && !iabn_act_invertible(k)) return 1;

    const iabn_st_tensor *tx;
    size_t cnt = 0, c = 0;
    const float *x = getf(key, "x", &cnt, &tx), *gamma = getf(key, "gamma", &c, NULL);
    const float *beta = getf(key, "beta", NULL, NULL), *dz = getf(key, "dz", NULL, NULL);
    const float *zr = getf(key, "z", NULL, NULL), *dxr = getf(key, "dx", NULL, NULL);
    const float *dgr = getf(key, "dgamma", NULL, NULL), *dbr = getf(key, "dbeta", NULL, NULL);
    const float *rm0 = getf(key, "rmean0", NULL, NULL), *rv0 = getf(key, "rvar0", NULL, NULL);
    const float *rmr = getf(key, "rmean", NULL, NULL), *rvr = getf(key, "rvar", NULL, NULL);
    if (!x || !gamma || !beta || !dz || !zr || !dxr || !dgr || !dbr || !rm0 || !rv0 || !rmr ||
        !rvr)
        return 1;
    CHECK(tx->ndim == 4);
    int n = (int)tx->shape[0], hw = (int)(tx->shape[2] * tx->shape[3]);
    CHECK((size_t)tx->shape[1] == c);
    double m = (double)n * hw;

    float *mean = calloc(c, 4), *var = calloc(c, 4), *rm = calloc(c, 4), *rv = calloc(c, 4);
    float *sdy = calloc(c, 4), *sdyx = calloc(c, 4), *dg = calloc(c, 4), *db = calloc(c, 4);
    float *z = calloc(cnt, 4), *dx = calloc(cnt, 4);
    iabn_bn_stats(n, (int)c, hw, NCHW, x, mean, var);
    memcpy(rm, rm0, c * 4);
    memcpy(rv, rv0, c * 4);
    iabn_bn_update_running((int)c, m, momentum, mean, var, rm, rv);
    if (inplace) {
        memcpy(z, x, cnt * 4);
        iabn_norm_act_fwd(n, (int)c, hw, NCHW, z, mean, var, eps, gamma, beta, 1, act, z, NULL);
        memcpy(dx, dz, cnt * 4);
        iabn_iabn_bwd_reduce(2, n, (int)c, hw, NCHW, z, dx, eps, gamma, beta, act, sdy, sdyx);
        iabn_iabn_bwd_apply(2, n, (int)c, hw, NCHW, z, dx, var, eps, gamma, beta, 1, act, sdy,
                            sdyx, m, 1, dx);
    } else {
        float *dy = calloc(cnt, 4);
        iabn_norm_act_fwd(n, (int)c, hw, NCHW, x, mean, var, eps, gamma, beta, 1, act, z, NULL);
        iabn_act_bwd(cnt, act, z, dz, dy);
        iabn_bn_bwd_reduce(n, (int)c, hw, NCHW, x, dy, mean, var, eps, sdy, sdyx);
        iabn_bn_bwd_apply(n, (int)c, hw, NCHW, x, dy, mean, var, eps, gamma, 1, sdy, sdyx, m, 1,
                          dx);
        free(dy);
    }
    iabn_bn_param_grads((int)c, gamma, 1, sdy, sdyx, dg, db);

    /* float32 kernels against a float64 autograd: a few float roundings on
     * values of order 1 (the worst seen is 4e-7); ELU's inverse loses digits
     * for y far below 0 (see test_norm_kernels), hence its wider bound */
    double tol = inplace && k == IABN_ACT_ELU ? 3e-5 : 1e-5;
    compare(key, "z", z, zr, cnt, 1e-5, 1e-5);
    compare(key, "dx", dx, dxr, cnt, tol, tol);
    compare(key, "dgamma", dg, dgr, c, tol, tol);
    compare(key, "dbeta", db, dbr, c, 1e-5, 1e-5);
    compare(key, "running_mean", rm, rmr, c, 1e-6, 1e-5);
    compare(key, "running_var", rv, rvr, c, 1e-6, 1e-5);
    free(mean); free(var); free(rm); free(rv); free(sdy); free(sdyx); free(dg); free(db);
    free(z); free(dx);
    return 1;
}

static void run_all(int inplace)
{
    int cases = 0;
    for (int i = 0; i < 100; i++) {
        char key[32];
        snprintf(key, sizeof key, "case%d.", i);
        if (!run_case(key, inplace)) break;
        cases++;
    }
    CHECK_MSG(cases >= 5, "only %d cases in the fixture", cases);
}

static void test_standard(void) { run_all(0); }
static void test_inplace_ii(void) { run_all(1); }

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : NORM_FIXTURE;
    iabn_err e = {0};
    if (iabn_st_load(path, &fx, &e) != 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    RUN(test_standard);
    RUN(test_inplace_ii);
    iabn_st_free(fx);
    return TEST_END();
}
