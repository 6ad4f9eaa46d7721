/* test_grad.c: finite-difference gradient checks of every op through the whole
 * engine (layer builders, autograd, planner, executor), with the loss
 * sum(r * y) for a fixed random r.  Each case perturbs a sample of the
 * elements of every parameter (the input is a parameter too, so its gradient
 * is checked) and compares the central difference with the analytic value. */
#include "graph_test_util.h"

typedef int (*build_fn)(iabn_graph *g, int x, const void *ctx);

typedef struct case_cfg {
    int nd;
    int shape[4];
    double tol;
} case_cfg;

static double run_loss(t_run *t)
{
    iabn_err e = {0};
    iabn_exec_set_seed(t->ex, 1234);
    if (iabn_exec_run(t->ex, &e)) {
        fprintf(stderr, "run: %s\n", e.msg);
        return NAN;
    }
    return *(float *)iabn_exec_ptr(t->ex, t->loss);
}

static void gradcheck(const char *label, const case_cfg *c, build_fn f, const void *ctx,
                      int is_loss)
{
    t_run t = {0};
    t.s = iabn_store_new(iabn_backend_cpu(), NULL);
    t.g = iabn_graph_new(t.s, IABN_TRAIN);
    int x = iabn_graph_param(t.g, "x", IABN_P_WEIGHT, c->nd, c->shape);
    int y = f(t.g, x, ctx);
    t.loss = is_loss ? y : t_wsum(t.g, y, NULL);
    iabn_plan_opts o;
    iabn_plan_opts_default(&o);
    o.guard = 64;
    if (t_prepare(&t, &o)) {
        CHECK_MSG(0, "%s: could not build", label);
        t_free(&t);
        return;
    }
    iabn_exec_set_check(t.ex, 1);
    t_set_params_random(t.s, 11);
    /* plain-gamma units get the scale |gamma|+eps of the same draw, so that
     * every mode puts y at the same distance from the activation's kink (a
     * finite-difference step across it is no test of the gradient) */
    for (int i = 0; i < iabn_store_count(t.s); i++) {
        iabn_param *p = iabn_store_get(t.s, i);
        if (p->kind == IABN_P_BN_WEIGHT && !p->bn_abs)
            for (size_t k = 0; k < p->count; k++)
                p->data[k] = iabn_bn_scale(p->data[k], p->bn_eps, 1);
    }
    t_set_inputs_random(&t, 17);
    iabn_store_zero_grads(t.s, NULL);
    double l0 = run_loss(&t);
    CHECK_MSG(isfinite(l0), "%s: loss %g", label, l0);
    int worst_ok = 1, np = iabn_store_count(t.s);
    /* every run adds into the gradients: take them all before perturbing */
    float **ans = calloc((size_t)np, sizeof *ans);
    for (int i = 0; i < np; i++) {
        iabn_param *p = iabn_store_get(t.s, i);
        if (!p->grad) continue;
        ans[i] = malloc(p->count * sizeof(float));
        memcpy(ans[i], p->grad, p->count * sizeof(float));
    }
    for (int i = 0; i < np; i++) {
        iabn_param *p = iabn_store_get(t.s, i);
        if (!p->grad || p->frozen) {
            free(ans[i]);
            continue;
        }
        float *an = ans[i];
        size_t stride = p->count > 7 ? p->count / 7 : 1;
        for (size_t k = 0; k < p->count; k += stride) {
            float v = p->data[k];
            double h = 1e-2 * (fabs(v) > 1 ? fabs(v) : 1);
            p->data[k] = (float)(v + h);
            double lp = run_loss(&t);
            p->data[k] = (float)(v - h);
            double lm = run_loss(&t);
            p->data[k] = v;
            double fd = (lp - lm) / (2 * h);
            double err = fabs(fd - an[k]) / (c->tol + c->tol * fmax(fabs(fd), fabs(an[k])));
            if (!(err <= 1.0)) {
                if (worst_ok)
                    fprintf(stderr, "%s: %s[%zu]: analytic %.6g, finite difference %.6g\n", label,
                            p->name, k, an[k], fd);
                worst_ok = 0;
            }
        }
        free(an);
    }
    free(ans);
    CHECK_MSG(worst_ok, "%s: gradients disagree", label);
    t_free(&t);
}

/* ---- cases ------------------------------------------------------------------------ */

typedef struct conv_c {
    int c_out, k, stride, pad, dil, groups, bias;
} conv_c;

static int b_conv(iabn_graph *g, int x, const void *ctx)
{
    const conv_c *c = ctx;
    return iabn_conv2d(g, "conv", x, c->c_out, c->k, c->stride, c->pad, c->dil, c->groups, c->bias);
}

static void test_conv(void)
{
    case_cfg c = {4, {2, 4, 7, 6}, 2e-2};
    const conv_c cases[] = {
        {6, 3, 1, 1, 1, 1, 1}, {4, 3, 2, 1, 1, 2, 0}, {8, 3, 1, 2, 2, 4, 0},
        {4, 1, 1, 0, 1, 1, 1}, {4, 3, 1, 3, 3, 1, 0}, {2, 5, 2, 2, 1, 1, 1},
        {4, 3, 1, 1, 1, 4, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char label[64];
        snprintf(label, sizeof label, "conv case %zu", i);
        gradcheck(label, &c, b_conv, &cases[i], 0);
    }
}

typedef struct na_c {
    iabn_bn_mode mode;
    iabn_act_kind act;
    float param;
    int frozen;
} na_c;

static int b_norm_act(iabn_graph *g, int x, const void *ctx)
{
    const na_c *c = ctx;
    iabn_norm_act_cfg cfg = iabn_norm_act_defaults(c->mode);
    cfg.act.kind = c->act;
    cfg.act.param = c->param;
    cfg.frozen = c->frozen;
    /* a conv first so that x is an activation the in-place op may overwrite */
    int h = iabn_conv2d(g, "pre", x, 5, 3, 1, 1, 1, 1, 0);
    int z = iabn_norm_act(g, "bn", h, &cfg);
    return iabn_conv2d(g, "post", z, 3, 1, 1, 0, 1, 1, 0);
}

static void test_norm_act(void)
{
    case_cfg c = {4, {3, 3, 5, 4}, 3e-2};
    const iabn_act_kind acts[] = {IABN_ACT_IDENTITY, IABN_ACT_LEAKY_RELU, IABN_ACT_ELU,
                                  IABN_ACT_RELU};
    const float params[] = {0.f, 0.1f, 1.f, 0.f};
    for (int m = 0; m < IABN_BN_INPLACE_SYNC; m++)
        for (int a = 0; a < 4; a++) {
            if (!iabn_act_invertible(acts[a]) && iabn_bn_mode_is_inplace((iabn_bn_mode)m)) continue;
            na_c cc = {(iabn_bn_mode)m, acts[a], params[a], 0};
            char label[96];
            snprintf(label, sizeof label, "norm_act %s %s", iabn_bn_mode_name(cc.mode),
                     iabn_act_name(cc.act));
            gradcheck(label, &c, b_norm_act, &cc, 0);
        }
    na_c fz = {IABN_BN_INPLACE_II, IABN_ACT_ELU, 1.f, 1}; /* smooth: no kink in the FD step */
    gradcheck("norm_act frozen", &c, b_norm_act, &fz, 0);
    /* standard's plain gamma (random gammas include negative ones), frozen */
    na_c pg = {IABN_BN_STANDARD, IABN_ACT_ELU, 1.f, 1};
    gradcheck("norm_act frozen standard (plain gamma)", &c, b_norm_act, &pg, 0);
}

static int b_pool_linear(iabn_graph *g, int x, const void *ctx)
{
    (void)ctx;
    int y = iabn_maxpool(g, "pool", x, 3, 2, 1);
    y = iabn_global_avgpool(g, "gap", y);
    return iabn_linear(g, "fc", y, 5, 1);
}

static int b_maxpool(iabn_graph *g, int x, const void *ctx)
{
    (void)ctx;
    return iabn_maxpool(g, "pool", x, 2, 2, 0);
}

/* the windowed average pools: DenseNet's 2/2 (odd sides: the last row and
 * column are left out) and the DeepLabV3 pooling_size windows (stride 1,
 * replicate-padded, so border windows collect several outputs' gradient) */
static int b_avgpool(iabn_graph *g, int x, const void *ctx)
{
    const int *k = ctx;
    return k[0] ? iabn_avgpool_same(g, "pool", x, k[1], k[2]) : iabn_avgpool(g, "pool", x, 2, 2);
}

static void test_pool_linear(void)
{
    case_cfg c = {4, {2, 3, 7, 9}, 2e-2};
    gradcheck("maxpool 3/2/1 + gap + linear", &c, b_pool_linear, NULL, 0);
    gradcheck("maxpool 2/2/0", &c, b_maxpool, NULL, 0);
    /* linear ops: the finite differences are exact up to float32 rounding */
    case_cfg lin = {4, {2, 3, 7, 9}, 2e-3};
    static const int plain[3] = {0, 0, 0}, same[3] = {1, 4, 5}, whole[3] = {1, 84, 84};
    gradcheck("avgpool 2/2", &lin, b_avgpool, plain, 0);
    gradcheck("avgpool_same 4x5 (replicate)", &lin, b_avgpool, same, 0);
    gradcheck("avgpool_same 84x84 on 7x9 (the global mean)", &lin, b_avgpool, whole, 0);
}

static int b_residual(iabn_graph *g, int x, const void *ctx)
{
    (void)ctx;
    int a = iabn_conv2d(g, "a", x, 3, 3, 1, 1, 1, 1, 0);
    iabn_norm_act_cfg cfg = iabn_norm_act_defaults(IABN_BN_INPLACE_II);
    int z = iabn_norm_act(g, "bn", a, &cfg); /* a is read again by the add: copied */
    int b = iabn_conv2d(g, "b", z, 3, 3, 1, 1, 1, 1, 0);
    int s = iabn_add_layer(g, "add", a, b);
    int p = iabn_global_avgpool(g, "gap", s);
    int q = iabn_conv2d(g, "q", p, 3, 1, 1, 0, 1, 1, 1);
    return iabn_add_bcast(g, "bcast", s, q);
}

static int b_concat_up(iabn_graph *g, int x, const void *ctx)
{
    (void)ctx;
    int a = iabn_conv2d(g, "a", x, 2, 1, 1, 0, 1, 1, 0);
    int b = iabn_conv2d(g, "b", x, 3, 3, 1, 2, 2, 1, 0);
    int parts[2] = {a, b};
    int c = iabn_concat(g, "cat", 2, parts);
    int d = iabn_upsample_bilinear(g, "up", c, 11, 7);
    int f = iabn_dropout2d(g, "drop", d, 0.3f);
    return iabn_upsample_bilinear(g, "down", f, 4, 5);
}

static void test_elementwise(void)
{
    case_cfg c = {4, {2, 3, 6, 5}, 2e-2};
    gradcheck("residual + broadcast add", &c, b_residual, NULL, 0);
    gradcheck("concat + upsample + dropout", &c, b_concat_up, NULL, 0);
}

typedef struct xent_c {
    int seg;
    float top;
} xent_c;

static int b_xent(iabn_graph *g, int x, const void *ctx)
{
    const xent_c *c = ctx;
    const iabn_tensor *xt = iabn_graph_t(g, x);
    int n = xt->shape[0];
    int lab;
    if (c->seg) {
        int s[3] = {n, xt->shape[2], xt->shape[3]};
        lab = iabn_graph_input(g, "labels", IABN_I32, 3, s);
    } else {
        int s[1] = {n};
        lab = iabn_graph_input(g, "labels", IABN_I32, 1, s);
    }
    return iabn_softmax_xent(g, "xent", x, lab, 255, c->top);
}

static void xent_case(const char *label, const case_cfg *c, const xent_c *xc)
{
    /* labels must be set before the runs: do it through a custom check */
    t_run t = {0};
    t.s = iabn_store_new(iabn_backend_cpu(), NULL);
    t.g = iabn_graph_new(t.s, IABN_TRAIN);
    int x = iabn_graph_param(t.g, "x", IABN_P_WEIGHT, c->nd, c->shape);
    t.loss = b_xent(t.g, x, xc);
    if (t_prepare(&t, NULL)) {
        CHECK_MSG(0, "%s: build", label);
        t_free(&t);
        return;
    }
    int lab = iabn_graph_find(t.g, "labels");
    const iabn_tensor *lt = iabn_graph_t(t.g, lab);
    int32_t *l = iabn_exec_ptr(t.ex, lab);
    for (size_t i = 0; i < lt->nbytes / 4; i++) l[i] = (i % 5 == 3) ? 255 : (int32_t)((i * 7) % c->shape[1]);
    iabn_param *p = iabn_store_get(t.s, 0);
    t_fill(p->data, p->count, 5);
    for (size_t i = 0; i < p->count; i++) p->data[i] *= 3;
    iabn_store_zero_grads(t.s, NULL);
    run_loss(&t);
    float *an = malloc(p->count * sizeof(float));
    memcpy(an, p->grad, p->count * sizeof(float));
    int ok = 1;
    for (size_t k = 0; k < p->count; k += 3) {
        float v = p->data[k];
        double h = 1e-3;
        p->data[k] = (float)(v + h);
        double lp = run_loss(&t);
        p->data[k] = (float)(v - h);
        double lm = run_loss(&t);
        p->data[k] = v;
        double fd = (lp - lm) / (2 * h);
        if (!(fabs(fd - an[k]) <= 2e-3 + 2e-2 * fabs(fd))) {
            if (ok) fprintf(stderr, "%s: x[%zu] analytic %g fd %g\n", label, k, an[k], fd);
            ok = 0;
        }
    }
    CHECK_MSG(ok, "%s", label);
    free(an);
    t_free(&t);
}

static void test_xent(void)
{
    case_cfg cls = {2, {6, 5}, 0}, seg = {4, {2, 4, 5, 3}, 0};
    xent_c a = {0, 1.f}, b = {1, 1.f}, c = {1, 0.25f};
    xent_case("xent classification, ignore", &cls, &a);
    xent_case("xent per pixel, ignore", &seg, &b);
    xent_case("xent bootstrapped 25%", &seg, &c);
}

/* ---- L1 / MSE: the target is a graph input, the prediction the parameter ---- */

static int b_regression(iabn_graph *g, int x, const void *ctx)
{
    const iabn_tensor *xt = iabn_graph_t(g, x);
    int nd = xt->nd, shape[4];
    memcpy(shape, xt->shape, sizeof shape);
    int t = iabn_graph_input(g, "target", IABN_F32, nd, shape);
    return *(const int *)ctx ? iabn_mse_loss(g, "mse", x, t) : iabn_l1_loss(g, "l1", x, t);
}

static void test_regression(void)
{
    case_cfg c = {4, {2, 3, 4, 5}, 2e-2};
    int l1 = 0, mse = 1;
    gradcheck("l1 loss", &c, b_regression, &l1, 1);
    gradcheck("mse loss", &c, b_regression, &mse, 1);
    /* a target of another shape is refused, naming it */
    iabn_store *s = iabn_store_new(iabn_backend_cpu(), NULL);
    iabn_graph *g = iabn_graph_new(s, IABN_TRAIN);
    int a = iabn_graph_input(g, "pred", IABN_F32, 4, (int[]){2, 3, 4, 5});
    int b = iabn_graph_input(g, "target", IABN_F32, 4, (int[]){2, 3, 4, 4});
    CHECK(iabn_l1_loss(g, "l1", a, b) < 0);
    CHECK(strstr(iabn_graph_error(g)->msg, "target") != NULL);
    iabn_graph_free(g);
    iabn_store_free(s);
}

/* ---- the gradient of a graph input (requires_grad on an input) ---------------- */

static void test_input_grad(void)
{
    t_run t = {0};
    iabn_err e = {0};
    t.s = iabn_store_new(iabn_backend_cpu(), NULL);
    t.g = iabn_graph_new(t.s, IABN_TRAIN);
    int x = iabn_graph_input(t.g, "x", IABN_F32, 4, (int[]){2, 3, 5, 5});
    CHECK_MSG(iabn_graph_input_requires_grad(t.g, x, &e) == 0, "%s", e.msg);
    int c = iabn_conv2d(t.g, "conv", x, 3, 3, 1, 1, 1, 1, 0);
    int y = iabn_add_layer(t.g, "res", c, x); /* x read twice: its gradients add up */
    t.loss = t_wsum(t.g, y, NULL);
    /* too late now that a node reads x */
    CHECK(iabn_graph_input_requires_grad(t.g, x, &e) == IABN_EINVAL);
    if (t_prepare(&t, NULL)) {
        CHECK_MSG(0, "input grad: build");
        t_free(&t);
        return;
    }
    int dx = iabn_graph_input_grad(t.g, x);
    CHECK(dx >= 0 && iabn_graph_t(t.g, dx)->nbytes == iabn_graph_t(t.g, x)->nbytes);
    t_set_params_random(t.s, 3);
    t_set_inputs_random(&t, 5);
    iabn_store_zero_grads(t.s, NULL);
    run_loss(&t);
    size_t n = iabn_graph_t(t.g, x)->nbytes / 4;
    float *an = malloc(n * sizeof *an), *xp = iabn_exec_ptr(t.ex, x);
    CHECK(iabn_exec_get(t.ex, dx, an, n * 4, &e) == 0);
    int ok = 1;
    for (size_t k = 0; k < n; k += 7) {
        float v = xp[k];
        xp[k] = v + 1e-2f;
        double lp = run_loss(&t);
        xp[k] = v - 1e-2f;
        double lm = run_loss(&t);
        xp[k] = v;
        double fd = (lp - lm) / 2e-2;
        if (!(fabs(fd - an[k]) <= 1e-2 + 1e-2 * fabs(fd))) {
            if (ok) fprintf(stderr, "input grad: x[%zu] analytic %g fd %g\n", k, an[k], fd);
            ok = 0;
        }
    }
    /* every run overwrites it (it does not accumulate) */
    float *again = malloc(n * sizeof *again);
    run_loss(&t);
    CHECK(iabn_exec_get(t.ex, dx, again, n * 4, &e) == 0 && !memcmp(again, an, n * 4));
    free(again);
    CHECK_MSG(ok, "input gradient disagrees with finite differences");
    free(an);
    t_free(&t);
    /* an evaluation graph has no gradients to give */
    iabn_store *s = iabn_store_new(iabn_backend_cpu(), NULL);
    iabn_graph *g = iabn_graph_new(s, IABN_EVAL);
    int xe = iabn_graph_input(g, "x", IABN_F32, 4, (int[]){1, 1, 2, 2});
    CHECK(iabn_graph_input_requires_grad(g, xe, &e) == IABN_EINVAL);
    iabn_graph_free(g);
    iabn_store_free(s);
}

int main(void)
{
    iabn_set_num_threads(2);
    RUN(test_conv);
    RUN(test_norm_act);
    RUN(test_pool_linear);
    RUN(test_elementwise);
    RUN(test_xent);
    RUN(test_regression);
    RUN(test_input_grad);
    return TEST_END();
}
