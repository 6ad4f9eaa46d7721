/* test_cuda.c: the CUDA backend against the CPU backend (suite 'cuda').
 *
 * Every case builds the same graph twice, on a CPU store and on a CUDA store,
 * with the same parameters, inputs, labels and dropout seed, runs forward and
 * backward, and compares the op's output, the loss, every parameter and
 * every parameter gradient (running statistics included).  The loss is the
 * softmax cross-entropy over the op's output channels, which has CUDA
 * kernels itself; ops without parameters sit behind a convolution, whose
 * weight gradient then checks their backward.  TF32 is off (the default), so
 * fp32 agreement is expected up to summation order: tolerance 1e-4 of the
 * array's largest magnitude plus 1e-3 relative.
 *
 * Without a CUDA device the test prints "SKIP: ..." and exits 77.
 */
#include "iabn.h"
#include "tensor/cuda_backend.h"
#include "tensor/cuda_kernels.h"
#include "test_util.h"

static iabn_cuda_ctx *cu;

typedef int (*build_fn)(iabn_graph *g, int x, const void *arg);

typedef struct side {
    iabn_store *s;
    iabn_graph *g;
    iabn_plan *p;
    iabn_exec *ex;
    int x, y, labels, loss;
} side;

typedef struct spec {
    const char *name;
    int shape[4];          /* input */
    build_fn build;
    const void *arg;
    int ignore;            /* -1: no ignored labels */
    float top_frac;
    int steps;             /* > 1: SGD steps between runs (training test) */
} spec;

static void side_free(side *sd)
{
    iabn_exec_free(sd->ex);
    iabn_plan_free(sd->p);
    iabn_graph_free(sd->g);
    iabn_store_free(sd->s);
    memset(sd, 0, sizeof *sd);
}

static int side_build(side *sd, const iabn_backend *be, const spec *sp)
{
    iabn_err e = {0};
    memset(sd, 0, sizeof *sd);
    sd->s = iabn_store_new(be, &e);
    if (!sd->s) return fprintf(stderr, "store: %s\n", e.msg), -1;
    sd->g = iabn_graph_new(sd->s, IABN_TRAIN);
    sd->x = iabn_graph_input(sd->g, "x", IABN_F32, 4, sp->shape);
    sd->y = sp->build(sd->g, sd->x, sp->arg);
    if (sd->y < 0) return fprintf(stderr, "build: %s\n", iabn_graph_error(sd->g)->msg), -1;
    iabn_graph_mark_output(sd->g, sd->y);
    const iabn_tensor *yt = iabn_graph_t(sd->g, sd->y);
    int ls[3] = {yt->shape[0], yt->nd == 4 ? yt->shape[2] : 1, yt->nd == 4 ? yt->shape[3] : 1};
    sd->labels = iabn_graph_input(sd->g, "labels", IABN_I32, yt->nd == 4 ? 3 : 1, ls);
    sd->loss = iabn_softmax_xent(sd->g, "loss", sd->y, sd->labels, sp->ignore, sp->top_frac);
    if (sd->loss < 0) return fprintf(stderr, "loss: %s\n", iabn_graph_error(sd->g)->msg), -1;
    if (iabn_graph_backward(sd->g, sd->loss, &e) || iabn_graph_finalize(sd->g, &e) ||
        iabn_plan_build(sd->g, NULL, &sd->p, &e) || iabn_exec_new(sd->g, sd->p, &sd->ex, &e))
        return fprintf(stderr, "prepare: %s\n", e.msg), -1;
    iabn_exec_set_seed(sd->ex, 1234);
    return 0;
}

/* Same values on both sides: parameters uniform in [-1, 1) (negative gammas
 * included), running variances in [0.5, 1.5). */
static int side_params(side *sd)
{
    iabn_err e = {0};
    for (int i = 0; i < iabn_store_count(sd->s); i++) {
        iabn_param *p = iabn_store_get(sd->s, i);
        float *h = malloc(p->count * sizeof *h);
        if (!h) return -1;
        t_fill(h, p->count, 77u + (unsigned)i * 104729u);
        if (strstr(p->name, "running_var"))
            for (size_t k = 0; k < p->count; k++) h[k] = 1.0f + 0.5f * h[k];
        int rc = iabn_store_write(sd->s, i, h, &e);
        free(h);
        if (rc) return fprintf(stderr, "params: %s\n", e.msg), -1;
    }
    return iabn_store_zero_grads(sd->s, &e);
}

static int side_inputs(side *sd, const spec *sp, int step)
{
    iabn_err e = {0};
    const iabn_tensor *xt = iabn_graph_t(sd->g, sd->x), *lt = iabn_graph_t(sd->g, sd->labels);
    const iabn_tensor *yt = iabn_graph_t(sd->g, sd->y);
    int k = yt->shape[1];
    float *x = malloc(xt->nbytes);
    int32_t *lab = malloc(lt->nbytes);
    if (!x || !lab) return free(x), free(lab), -1;
    t_fill(x, xt->nbytes / 4, 5u + (unsigned)step);
    unsigned s = 99u + (unsigned)step;
    for (size_t i = 0; i < lt->nbytes / 4; i++) {
        s = s * 1103515245u + 12345u;
        unsigned r = (s >> 8) % 1000u;
        lab[i] = sp->ignore >= 0 && r < 100 ? sp->ignore : (int32_t)(r % (unsigned)k);
    }
    int rc = iabn_exec_set(sd->ex, sd->x, x, xt->nbytes, &e) ||
             iabn_exec_set(sd->ex, sd->labels, lab, lt->nbytes, &e);
    free(x);
    free(lab);
    if (rc) fprintf(stderr, "inputs: %s\n", e.msg);
    return rc ? -1 : 0;
}

/* SGD with momentum on every trainable parameter, CPU or CUDA kernel. */
static int side_sgd(side *sd, int cuda, int first)
{
    iabn_err e = {0};
    for (int i = 0; i < iabn_store_count(sd->s); i++) {
        iabn_param *p = iabn_store_get(sd->s, i);
        if (!p->grad) continue;
        if (!p->mom) {
            const iabn_backend *be = iabn_store_backend(sd->s);
            p->mom = be->alloc(be->ctx, p->count * sizeof(float));
            if (!p->mom || be->fill(be->ctx, p->mom, 0, p->count * sizeof(float))) return -1;
        }
        if (cuda) {
            if (iabn_cuda_sgd_update(cu, p->count, 0.05f, 0.9f, 1e-4f, 0, first, p->data, p->grad,
                                     p->mom, &e))
                return fprintf(stderr, "sgd: %s\n", e.msg), -1;
        } else {
            iabn_sgd_update(p->count, 0.05f, 0.9f, 1e-4f, 0, first, p->data, p->grad, p->mom);
        }
    }
    return iabn_store_zero_grads(sd->s, &e);
}

static double compare(const char *what, const char *name, const float *got, const float *ref,
                      size_t n)
{
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
    double err = t_max_err(got, ref, n, 1e-4 * mx + 1e-6, 1e-3);
    CHECK_MSG(err <= 1.0, "%s: %s %s differs (error %.3g of tolerance, max |ref| %.3g)", what,
              name, "cuda vs cpu", err, mx);
    return err;
}

static void run_spec(const spec *sp)
{
    side c, g;
    iabn_err e = {0};
    int ok = side_build(&c, iabn_backend_cpu(), sp) == 0 &&
             side_build(&g, iabn_cuda_backend(cu), sp) == 0 && side_params(&c) == 0 &&
             side_params(&g) == 0;
    CHECK_MSG(ok, "%s: setup failed", sp->name);
    int steps = sp->steps > 0 ? sp->steps : 1;
    for (int st = 0; ok && st < steps; st++) {
        ok = side_inputs(&c, sp, st) == 0 && side_inputs(&g, sp, st) == 0;
        CHECK_OK(iabn_exec_run(c.ex, &e_) ? (fprintf(stderr, "cpu: %s\n", e_.msg), 1) : 0);
        int rc = iabn_exec_run(g.ex, &e);
        CHECK_MSG(rc == 0, "%s: cuda run: %s", sp->name, e.msg);
        if (rc) ok = 0;
        if (ok && st + 1 < steps)
            ok = side_sgd(&c, 0, st == 0) == 0 && side_sgd(&g, 1, st == 0) == 0;
    }
    if (!ok) goto done;
    {
        const iabn_tensor *yt = iabn_graph_t(c.g, c.y);
        float *a = malloc(yt->nbytes), *b = malloc(yt->nbytes);
        float la = 0, lb = 0;
        if (a && b && !iabn_exec_get(c.ex, c.y, a, yt->nbytes, &e) &&
            !iabn_exec_get(g.ex, g.y, b, yt->nbytes, &e)) {
            compare(sp->name, "output", b, a, yt->nbytes / 4);
            CHECK(!iabn_exec_get(c.ex, c.loss, &la, 4, &e) &&
                  !iabn_exec_get(g.ex, g.loss, &lb, 4, &e));
            compare(sp->name, "loss", &lb, &la, 1);
        } else {
            CHECK_MSG(0, "%s: reading the output: %s", sp->name, e.msg);
        }
        free(a);
        free(b);
    }
    for (int i = 0; i < iabn_store_count(c.s); i++) {
        iabn_param *p = iabn_store_get(c.s, i);
        float *a = malloc(p->count * 4), *b = malloc(p->count * 4);
        int j = iabn_store_find(g.s, p->name);
        if (a && b && j >= 0 && !iabn_store_read(c.s, i, a, &e) && !iabn_store_read(g.s, j, b, &e))
            compare(sp->name, p->name, b, a, p->count);
        if (a && b && j >= 0 && p->grad && !iabn_store_read_grad(c.s, i, a, &e) &&
            !iabn_store_read_grad(g.s, j, b, &e)) {
            char nm[IABN_NAME_LEN + 8];
            snprintf(nm, sizeof nm, "d.%s", p->name);
            compare(sp->name, nm, b, a, p->count);
        }
        free(a);
        free(b);
    }
done:
    side_free(&c);
    side_free(&g);
}

/* ---- graphs ------------------------------------------------------------------------ */

typedef struct conv_arg {
    int c_out, k, stride, pad, dil, groups, bias;
} conv_arg;

static int b_conv(iabn_graph *g, int x, const void *arg)
{
    const conv_arg *a = arg;
    return iabn_conv2d(g, "conv", x, a->c_out, a->k, a->stride, a->pad, a->dil, a->groups,
                       a->bias);
}

/* a 3x3 conv with bias in front of parameter-free ops: its gradients check theirs */
static int pre(iabn_graph *g, int x, int c)
{
    return iabn_conv2d(g, "pre", x, c, 3, 1, 1, 1, 1, 1);
}

static int b_norm_act(iabn_graph *g, int x, const void *arg)
{
    return iabn_norm_act(g, "bn", pre(g, x, 6), arg);
}

static int b_maxpool(iabn_graph *g, int x, const void *arg)
{
    (void)arg;
    return iabn_maxpool(g, "pool", pre(g, x, 5), 3, 2, 1);
}

static int b_gap_linear(iabn_graph *g, int x, const void *arg)
{
    (void)arg;
    return iabn_linear(g, "fc", iabn_global_avgpool(g, "gap", pre(g, x, 7)), 10, 1);
}

static int b_dropout(iabn_graph *g, int x, const void *arg)
{
    (void)arg;
    return iabn_dropout2d(g, "drop", pre(g, x, 6), 0.3f);
}

static int b_resize(iabn_graph *g, int x, const void *arg)
{
    const int *hw = arg;
    return iabn_upsample_bilinear(g, "up", pre(g, x, 4), hw[0], hw[1]);
}

static int b_concat_add(iabn_graph *g, int x, const void *arg)
{
    (void)arg;
    int a = iabn_conv2d(g, "a", x, 3, 3, 1, 1, 1, 1, 0);
    int b = iabn_conv2d(g, "b", x, 3, 1, 1, 0, 1, 1, 0);
    int s = iabn_add_layer(g, "sum", a, b);
    int p = iabn_add_bcast(g, "bc", s, iabn_global_avgpool(g, "gp", b));
    int parts[3] = {a, s, p};
    return iabn_concat(g, "cat", 3, parts);
}

static int b_logits(iabn_graph *g, int x, const void *arg)
{
    (void)arg;
    return pre(g, x, 9);
}

static int b_cnn(iabn_graph *g, int x, const void *arg)
{
    (void)arg;
    iabn_norm_act_cfg bn = iabn_norm_act_defaults(IABN_BN_INPLACE_II);
    int y = iabn_conv2d(g, "c1", x, 8, 3, 1, 1, 1, 1, 0);
    y = iabn_norm_act(g, "bn1", y, &bn);
    y = iabn_maxpool(g, "pool", y, 3, 2, 1);
    y = iabn_conv2d(g, "c2", y, 16, 3, 1, 2, 2, 2, 0);
    bn.mode = IABN_BN_STANDARD;
    y = iabn_norm_act(g, "bn2", y, &bn);
    y = iabn_global_avgpool(g, "gap", y);
    return iabn_linear(g, "fc", y, 5, 1);
}

/* ---- tests -------------------------------------------------------------------------- */

static void test_conv(void)
{
    static const conv_arg cases[] = {
        {12, 3, 2, 2, 2, 4, 1},   /* grouped, strided, dilated, bias */
        {6, 1, 1, 0, 1, 1, 0},    /* 1x1 */
        {8, 3, 1, 1, 1, 8, 0},    /* depthwise */
        {5, 5, 1, 4, 2, 1, 1},    /* dilated 5x5 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        spec sp = {"conv", {2, 8, 9, 11}, b_conv, &cases[i], -1, 1.f, 1};
        run_spec(&sp);
    }
}

static void test_norm_act(void)
{
    static const iabn_act_kind acts[] = {IABN_ACT_IDENTITY, IABN_ACT_RELU, IABN_ACT_LEAKY_RELU,
                                         IABN_ACT_ELU};
    for (int m = 0; m <= IABN_BN_INPLACE_II; m++)
        for (int a = 0; a < 4; a++) {
            if (iabn_bn_mode_is_inplace((iabn_bn_mode)m) && acts[a] == IABN_ACT_RELU) continue;
            iabn_norm_act_cfg cfg = iabn_norm_act_defaults((iabn_bn_mode)m);
            cfg.act.kind = acts[a];
            cfg.act.param = acts[a] == IABN_ACT_ELU ? 1.f : 0.01f;
            spec sp = {iabn_bn_mode_name((iabn_bn_mode)m), {3, 4, 7, 5}, b_norm_act, &cfg, -1,
                       1.f, 1};
            run_spec(&sp);
        }
    iabn_norm_act_cfg fr = iabn_norm_act_defaults(IABN_BN_INPLACE_II);
    fr.frozen = 1;
    spec sp = {"frozen", {3, 4, 7, 5}, b_norm_act, &fr, -1, 1.f, 1};
    run_spec(&sp);
}

static void test_pool_linear(void)
{
    spec a = {"maxpool", {2, 3, 9, 8}, b_maxpool, NULL, -1, 1.f, 1};
    run_spec(&a);
    spec b = {"gap_linear", {4, 3, 6, 6}, b_gap_linear, NULL, -1, 1.f, 1};
    run_spec(&b);
}

static void test_dropout_resize_concat(void)
{
    spec a = {"dropout", {4, 3, 5, 5}, b_dropout, NULL, -1, 1.f, 1};
    run_spec(&a);
    static const int up[2] = {13, 17}, down[2] = {4, 3};
    spec b = {"upsample", {2, 3, 6, 7}, b_resize, up, -1, 1.f, 1};
    run_spec(&b);
    spec c = {"downsample", {2, 3, 9, 7}, b_resize, down, -1, 1.f, 1};
    run_spec(&c);
    spec d = {"concat_add", {2, 3, 6, 5}, b_concat_add, NULL, -1, 1.f, 1};
    run_spec(&d);
}

static void test_xent(void)
{
    spec a = {"xent_ignore", {2, 3, 8, 8}, b_logits, NULL, 255, 1.f, 1};
    run_spec(&a);
    spec b = {"xent_bootstrap", {2, 3, 8, 8}, b_logits, NULL, 255, 0.25f, 1};
    run_spec(&b);
}

static void test_train_steps(void)
{
    spec a = {"cnn_train", {4, 3, 12, 12}, b_cnn, NULL, -1, 1.f, 3};
    run_spec(&a);
}

static void test_all_finite(void)
{
    const iabn_backend *be = iabn_cuda_backend(cu);
    float h[4] = {1.f, 2.f, 3.f, 4.f};
    float *d = be->alloc(be->ctx, sizeof h);
    CHECK(d != NULL);
    if (!d) return;
    int fin = 0;
    CHECK_OK(be->h2d(be->ctx, d, h, sizeof h));
    CHECK_OK(iabn_cuda_all_finite(cu, 4, d, &fin, &e_));
    CHECK(fin == 1);
    h[2] = NAN;
    CHECK_OK(be->h2d(be->ctx, d, h, sizeof h));
    CHECK_OK(iabn_cuda_all_finite(cu, 4, d, &fin, &e_));
    CHECK(fin == 0);
    be->free(be->ctx, d);
}

int main(void)
{
    iabn_err e = {0};
    if (iabn_cuda_ctx_new(0, &cu, &e)) TEST_SKIP("no CUDA device (%s)", e.msg);
    RUN(test_all_finite);
    RUN(test_conv);
    RUN(test_norm_act);
    RUN(test_pool_linear);
    RUN(test_dropout_resize_concat);
    RUN(test_xent);
    RUN(test_train_steps);
    iabn_cuda_ctx_free(cu);
    return TEST_END();
}
