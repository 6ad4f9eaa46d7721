/* test_cuda.c: the CUDA backend against the CPU backend on graphs (suite
 * 'cuda'; test_cuda_kernels.c has the kernel-level cases).
 *
 * Every case builds the same graph twice, on a CPU store and on a CUDA store,
 * with the same parameters, inputs, labels and dropout seed, runs forward and
 * backward, and compares the op's output, the loss, every parameter and
 * every parameter gradient (running statistics included).  The loss is the
 * softmax cross-entropy over the op's output channels, which has CUDA
 * kernels itself; ops without parameters sit behind a convolution, whose
 * weight gradient then checks their backward.  Tolerance: cuda_test_util.h.
 *
 * Without a CUDA device the test prints "SKIP: ..." and exits 77.
 */
#include "cuda_test_util.h"

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
    int eval;              /* evaluation graph: forward only */
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
    sd->g = iabn_graph_new(sd->s, sp->eval ? IABN_EVAL : IABN_TRAIN);
    sd->x = iabn_graph_input(sd->g, "x", IABN_F32, 4, sp->shape);
    sd->y = sp->build(sd->g, sd->x, sp->arg);
    if (sd->y < 0) return fprintf(stderr, "build: %s\n", iabn_graph_error(sd->g)->msg), -1;
    iabn_graph_mark_output(sd->g, sd->y);
    const iabn_tensor *yt = iabn_graph_t(sd->g, sd->y);
    int ls[3] = {yt->shape[0], yt->nd == 4 ? yt->shape[2] : 1, yt->nd == 4 ? yt->shape[3] : 1};
    sd->labels = iabn_graph_input(sd->g, "labels", IABN_I32, yt->nd == 4 ? 3 : 1, ls);
    sd->loss = iabn_softmax_xent(sd->g, "loss", sd->y, sd->labels, sp->ignore, sp->top_frac);
    if (sd->loss < 0) return fprintf(stderr, "loss: %s\n", iabn_graph_error(sd->g)->msg), -1;
    if ((!sp->eval && iabn_graph_backward(sd->g, sd->loss, &e)) || iabn_graph_finalize(sd->g, &e) ||
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


static void run_spec(const spec *sp)
{
    side c, g;
    iabn_err e = {0};
    memset(&c, 0, sizeof c); /* side_free must see NULLs if a build stops early */
    memset(&g, 0, sizeof g);
    int ok = side_build(&c, iabn_backend_cpu(), sp) == 0 &&
             side_build(&g, iabn_cuda_backend(cu), sp) == 0 && side_params(&c) == 0 &&
             side_params(&g) == 0;
    CHECK_MSG(ok, "%s: setup failed", sp->name);
    /* these graphs exist to run what the in-place rules do when an input is
     * still needed: in-place ABN writing a buffer of its own */
    if (ok && (strstr(sp->name, "residual") || strstr(sp->name, "segnet")))
        CHECK_MSG(iabn_graph_copies(g.g) > 0, "%s: in-place rules not exercised", sp->name);
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

/* windowed average: DenseNet's transition pool, and the DeepLabV3 head's
 * evaluation-time pool with its replicated border */
static int b_avgpool(iabn_graph *g, int x, const void *arg)
{
    (void)arg;
    return iabn_avgpool(g, "pool", pre(g, x, 5), 2, 2);
}

static int b_avgpool_same(iabn_graph *g, int x, const void *arg)
{
    (void)arg;
    return iabn_avgpool_same(g, "pool", pre(g, x, 5), 4, 3);
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

/* An in-place unit whose input a later add still reads (the residual
 * shortcut): it writes its output to a buffer of its own. */
static int b_residual(iabn_graph *g, int x, const void *arg)
{
    iabn_norm_act_cfg bn = iabn_norm_act_defaults(*(const iabn_bn_mode *)arg);
    int y = pre(g, x, 6);
    int z = iabn_norm_act(g, "bn", y, &bn);
    return iabn_add_layer(g, "res", z, y);
}

/* A small segmentation net touching every op and BN mode on its way:
 * strided / grouped / dilated convs, in-place I and II (one with a copied
 * input), checkpoint, checkpoint_opt, dropout, broadcast add of a pooled
 * branch, upsampling, concat, a biased 1x1 classifier. */
static int b_segnet(iabn_graph *g, int x, const void *arg)
{
    (void)arg;
    iabn_norm_act_cfg bn = iabn_norm_act_defaults(IABN_BN_INPLACE);
    int c1 = iabn_conv2d(g, "c1", x, 8, 3, 2, 1, 1, 1, 0);
    int b1 = iabn_norm_act(g, "bn1", c1, &bn);
    int c2 = iabn_conv2d(g, "c2", b1, 8, 3, 1, 2, 2, 2, 0);
    bn.mode = IABN_BN_CHECKPOINT;
    bn.act.kind = IABN_ACT_RELU;
    int r = iabn_add_layer(g, "r", iabn_norm_act(g, "bn2", c2, &bn), b1);
    bn.mode = IABN_BN_INPLACE_II;
    bn.act.kind = IABN_ACT_ELU;
    bn.act.param = 1.f;
    int s = iabn_add_layer(g, "s", iabn_norm_act(g, "bn3", r, &bn), r);
    int d = iabn_dropout2d(g, "drop", s, 0.2f);
    int p = iabn_conv2d(g, "pc", iabn_global_avgpool(g, "gp", d), 8, 1, 1, 0, 1, 1, 0);
    bn.mode = IABN_BN_CHECKPOINT_OPT;
    int b4 = iabn_norm_act(g, "bn4", iabn_add_bcast(g, "bc", d, p), &bn);
    int h = iabn_graph_t(g, x)->shape[2], w = iabn_graph_t(g, x)->shape[3];
    int up = iabn_upsample_bilinear(g, "up", b4, h, w);
    int parts[2] = {up, iabn_conv2d(g, "skip", x, 3, 1, 1, 0, 1, 1, 0)};
    return iabn_conv2d(g, "cls", iabn_concat(g, "cat", 2, parts), 4, 1, 1, 0, 1, 1, 1);
}

/* ---- tests -------------------------------------------------------------------------- */

static void run(const char *name, int n, int c, int h, int w, build_fn b, const void *arg,
                int ignore, float top_frac, int steps, int eval)
{
    spec sp = {name, {n, c, h, w}, b, arg, ignore, top_frac, steps, eval};
    run_spec(&sp);
}

static void test_conv(void)
{
    static const conv_arg cases[] = {
        {12, 3, 2, 2, 2, 4, 1},   /* grouped, strided, dilated, bias */
        {6, 1, 1, 0, 1, 1, 0},    /* 1x1 */
        {8, 3, 1, 1, 1, 8, 0},    /* depthwise */
        {5, 5, 1, 4, 2, 1, 1},    /* dilated 5x5 */
        {16, 7, 2, 3, 1, 1, 1},   /* stem: 7x7 stride 2 */
        {8, 1, 2, 0, 1, 1, 0},    /* strided 1x1 (projection shortcut) */
        {8, 3, 1, 2, 2, 8, 1},    /* depthwise dilated with bias */
        {16, 3, 1, 1, 1, 2, 0},   /* two groups */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run("conv", 2, 8, 9, 11, b_conv, &cases[i], -1, 1.f, 1, 0);
}

static void test_norm_act(void)
{
    static const iabn_act_kind acts[] = {IABN_ACT_IDENTITY, IABN_ACT_RELU, IABN_ACT_LEAKY_RELU,
                                         IABN_ACT_ELU};
    for (int m = 0; m <= IABN_BN_INPLACE_II; m++)
        for (int a = 0; a < 4; a++) {
            int inplace = iabn_bn_mode_is_inplace((iabn_bn_mode)m);
            if (inplace && !iabn_act_invertible(acts[a])) continue;
            iabn_norm_act_cfg cfg = iabn_norm_act_defaults((iabn_bn_mode)m);
            cfg.act.kind = acts[a];
            cfg.act.param = iabn_act_default_param(acts[a]);
            const char *nm = iabn_bn_mode_name((iabn_bn_mode)m);
            run(nm, 3, 4, 7, 5, b_norm_act, &cfg, -1, 1.f, 1, 0);
            /* planes wider than a block, channels not a multiple of it */
            if (acts[a] != IABN_ACT_IDENTITY) run(nm, 3, 4, 37, 41, b_norm_act, &cfg, -1, 1.f, 1, 0);
            /* frozen (running statistics, backward to x only) and evaluation */
            cfg.frozen = 1;
            run("frozen", 3, 4, 7, 5, b_norm_act, &cfg, -1, 1.f, 1, 0);
            cfg.frozen = 0;
            run("eval", 3, 4, 7, 5, b_norm_act, &cfg, -1, 1.f, 1, 1);
        }
    static const iabn_bn_mode res[] = {IABN_BN_INPLACE, IABN_BN_INPLACE_II};
    for (int i = 0; i < 2; i++) run("residual_copy", 2, 3, 6, 7, b_residual, &res[i], -1, 1.f, 1, 0);
}

static void test_pool_linear(void)
{
    run("maxpool", 2, 3, 9, 8, b_maxpool, NULL, -1, 1.f, 1, 0);
    run("maxpool_odd", 3, 2, 17, 13, b_maxpool, NULL, -1, 1.f, 1, 0);
    run("gap_linear", 4, 3, 6, 6, b_gap_linear, NULL, -1, 1.f, 1, 0);
    run("avgpool", 2, 3, 9, 8, b_avgpool, NULL, -1, 1.f, 1, 0);
    run("avgpool_same", 2, 3, 9, 11, b_avgpool_same, NULL, -1, 1.f, 1, 0);
}

static void test_dropout_resize_concat(void)
{
    run("dropout", 4, 3, 5, 5, b_dropout, NULL, -1, 1.f, 1, 0);
    static const int up[2] = {13, 17}, down[2] = {4, 3}, up8[2] = {40, 48};
    run("upsample", 2, 3, 6, 7, b_resize, up, -1, 1.f, 1, 0);
    run("upsample_x8", 2, 3, 5, 6, b_resize, up8, -1, 1.f, 1, 0);
    run("downsample", 2, 3, 9, 7, b_resize, down, -1, 1.f, 1, 0);
    run("concat_add", 2, 3, 6, 5, b_concat_add, NULL, -1, 1.f, 1, 0);
}

static void test_xent(void)
{
    run("xent_ignore", 2, 3, 8, 8, b_logits, NULL, 255, 1.f, 1, 0);
    run("xent_bootstrap", 2, 3, 8, 8, b_logits, NULL, 255, 0.25f, 1, 0);
    /* several 1024-pixel tiles in the selection */
    run("xent_bootstrap_big", 2, 3, 40, 36, b_logits, NULL, 255, 0.3f, 1, 0);
}

static void test_train_steps(void)
{
    run("cnn_train", 4, 3, 12, 12, b_cnn, NULL, -1, 1.f, 4, 0);
    run("segnet_train", 2, 3, 16, 16, b_segnet, NULL, 255, 1.f, 4, 0);
}

int main(void)
{
    iabn_err e = {0};
    if (iabn_cuda_ctx_new(0, &cu, &e)) TEST_SKIP("no CUDA device (%s)", e.msg);
    RUN(test_conv);
    RUN(test_norm_act);
    RUN(test_pool_linear);
    RUN(test_dropout_resize_concat);
    RUN(test_xent);
    RUN(test_train_steps);
    iabn_cuda_ctx_free(cu);
    return TEST_END();
}
