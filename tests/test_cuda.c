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
 * Kernel-level cases follow for what a small graph cannot reach: odd sizes
 * and in-place aliasing of the BN kernels, the refusal of a blocked layout,
 * exact ties in the bootstrapped loss, the sum of squares, and counts above
 * 2^31 (skipped, saying so, where the device has too little memory).
 *
 * Without a CUDA device the test prints "SKIP: ..." and exits 77.
 */
#include "iabn.h"
#include "tensor/cuda/backend.h"
#include "tensor/cuda/kernels.h"
#include "test_util.h"

/* the layout of every kernel call here (test_layout_kernels.c covers nChw16c) */
#define NCHW IABN_LAYOUT_NCHW

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
    memset(&c, 0, sizeof c); /* side_free must see NULLs if a build stops early */
    memset(&g, 0, sizeof g);
    int ok = side_build(&c, iabn_backend_cpu(), sp) == 0 &&
             side_build(&g, iabn_cuda_backend(cu), sp) == 0 && side_params(&c) == 0 &&
             side_params(&g) == 0;
    CHECK_MSG(ok, "%s: setup failed", sp->name);
    /* these graphs exist to run the copy node the in-place rules insert */
    if (ok && (strstr(sp->name, "residual") || strstr(sp->name, "segnet")))
        CHECK_MSG(iabn_graph_copies(g.g) > 0, "%s: no copy node inserted", sp->name);
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

/* An in-place unit whose input a later add still reads: the graph inserts a
 * copy node before it (the residual shortcut). */
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

/* ---- kernel level --------------------------------------------------------------------- */

static float *dev_up(const float *h, size_t n)
{
    const iabn_backend *be = iabn_cuda_backend(cu);
    float *d = be->alloc(be->ctx, n * sizeof *d);
    if (d && h && be->h2d(be->ctx, d, h, n * sizeof *d)) {
        be->free(be->ctx, d);
        d = NULL;
    }
    CHECK_MSG(d != NULL, "device buffer of %zu floats", n);
    return d;
}

static void dev_free(void *d)
{
    const iabn_backend *be = iabn_cuda_backend(cu);
    be->free(be->ctx, d);
}

/* compare() of a device array with a host reference */
static void dev_cmp(const char *what, const char *name, const float *d, const float *ref,
                    size_t n)
{
    const iabn_backend *be = iabn_cuda_backend(cu);
    float *h = malloc(n * sizeof *h);
    CHECK(h != NULL);
    if (!h) return;
    if (be->d2h(be->ctx, h, d, n * sizeof *h) == 0) compare(what, name, h, ref, n);
    else CHECK_MSG(0, "%s: reading %s back", what, name);
    free(h);
}

static void test_all_finite(void)
{
    const iabn_backend *be = iabn_cuda_backend(cu);
    float h[4] = {1.f, 2.f, 3.f, 4.f};
    float *d = dev_up(h, 4);
    if (!d) return;
    int fin = 0;
    CHECK_OK(iabn_cuda_all_finite(cu, 4, d, &fin, &e_));
    CHECK(fin == 1);
    h[2] = NAN;
    CHECK_OK(be->h2d(be->ctx, d, h, sizeof h));
    CHECK_OK(iabn_cuda_all_finite(cu, 4, d, &fin, &e_));
    CHECK(fin == 0);
    dev_free(d);
}

static void test_sumsq(void)
{
    static const size_t sizes[] = {0, 1, 7, 4099, ((size_t)1 << 20) + 13};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        float *h = malloc((n ? n : 1) * sizeof *h);
        CHECK(h != NULL);
        if (!h) return;
        h[0] = 0.f;
        t_fill(h, n, 31u + (unsigned)k);
        for (size_t i = 0; i < n; i++) h[i] *= 1.f + (float)(i % 97); /* a spread of sizes */
        float *d = dev_up(h, n ? n : 1);
        double got = -1, again = -2, ref = iabn_sumsq(n, h);
        if (d) {
            CHECK_OK(iabn_cuda_sumsq(cu, n, d, &got, &e_));
            CHECK_OK(iabn_cuda_sumsq(cu, n, d, &again, &e_));
            CHECK_CLOSE(got, ref, 1e-300, 1e-10);
            CHECK(memcmp(&got, &again, sizeof got) == 0); /* deterministic: same bits */
            dev_free(d);
        }
        free(h);
    }
}

/* BN kernels at an odd size (4551 values per channel, planes of 1517), every
 * output written over its input as the in-place modes do, against the CPU. */
enum { NK = 3, CK = 5, HWK = 1517 };

static void norm_kernels(const float *x, const float *dy, const float *gam, const float *bet,
                         float *z, float *dx, float *const *d)
{
    const size_t cnt = (size_t)NK * CK * HWK;
    const double m = (double)NK * HWK;
    const float eps = 1e-5f;
    const iabn_backend *be = iabn_cuda_backend(cu);
    float mean[CK], var[CK], s0[CK], s1[CK], dg[CK], db[CK];
    float *dx_ = d[0], *ddy = d[1], *dga = d[2], *dbe = d[3], *dm = d[4], *dv = d[5];
    float *ds0 = d[6], *ds1 = d[7], *dz = d[8], *dgg = d[9], *dbb = d[10];
    iabn_bn_stats(NK, CK, HWK, NCHW, x, mean, var);
    CHECK_OK(iabn_cuda_bn_stats(cu, NK, CK, HWK, NCHW, dx_, dm, dv, &e_));
    dev_cmp("bn_stats", "mean", dm, mean, CK);
    dev_cmp("bn_stats", "var", dv, var, CK);
    /* standard backward, dx over dy; parameter gradients accumulate */
    iabn_bn_bwd_reduce(NK, CK, HWK, NCHW, x, dy, mean, var, eps, s0, s1);
    iabn_bn_bwd_apply(NK, CK, HWK, NCHW, x, dy, mean, var, eps, gam, 0, s0, s1, m, 1, dx);
    CHECK_OK(iabn_cuda_bn_bwd_reduce(cu, NK, CK, HWK, NCHW, dx_, ddy, dm, dv, eps, ds0, ds1, &e_));
    dev_cmp("bn_bwd_reduce", "sum_dy", ds0, s0, CK);
    dev_cmp("bn_bwd_reduce", "sum_dy_xhat", ds1, s1, CK);
    CHECK_OK(iabn_cuda_bn_bwd_apply(cu, NK, CK, HWK, NCHW, dx_, ddy, dm, dv, eps, dga, 0, ds0,
                                    ds1, m, 1, ddy, &e_));
    dev_cmp("bn_bwd_apply", "dx over dy", ddy, dx, cnt);
    for (int c = 0; c < CK; c++) dg[c] = db[c] = 0.5f;
    CHECK_OK(be->h2d(be->ctx, dgg, dg, sizeof dg));
    CHECK_OK(be->h2d(be->ctx, dbb, db, sizeof db));
    iabn_bn_param_grads(CK, gam, 1, s0, s1, dg, db);
    CHECK_OK(iabn_cuda_bn_param_grads(cu, CK, dga, 1, ds0, ds1, dgg, dbb, &e_));
    dev_cmp("bn_param_grads", "dgamma", dgg, dg, CK);
    dev_cmp("bn_param_grads", "dbeta", dbb, db, CK);
    /* a gamma of exactly 0 (either sign) trains: dgamma = sum(dy*xhat) */
    float gz[CK];
    for (int c = 0; c < CK; c++) {
        gz[c] = c == 0 ? 0.f : c == 1 ? -0.f : gam[c];
        dg[c] = 0.f;
    }
    CHECK_OK(be->h2d(be->ctx, dga, gz, sizeof gz));
    CHECK_OK(be->h2d(be->ctx, dgg, dg, sizeof dg));
    iabn_bn_param_grads(CK, gz, 1, s0, s1, dg, db);
    CHECK(dg[0] == s1[0] && dg[1] == s1[1] && s1[0] != 0.f);
    CHECK_OK(iabn_cuda_bn_param_grads(cu, CK, dga, 1, ds0, ds1, dgg, dbb, &e_));
    dev_cmp("bn_param_grads", "dgamma at gamma 0", dgg, dg, CK);
    CHECK_OK(be->h2d(be->ctx, dga, gam, sizeof gz));
    /* in-place ABN: z over x forward; I and II backward with dx over dz, and
     * the evaluation backward, from the CPU's z so that only the kernel differs */
    static const iabn_act acts[] = {{IABN_ACT_LEAKY_RELU, 0.01f}, {IABN_ACT_ELU, 1.f},
                                    {IABN_ACT_IDENTITY, 0.f}};
    for (int a = 0; a < 3; a++) {
        iabn_norm_act_fwd(NK, CK, HWK, NCHW, x, mean, var, eps, gam, bet, 1, acts[a], z, NULL);
        CHECK_OK(be->h2d(be->ctx, dz, x, cnt * 4));
        CHECK_OK(iabn_cuda_norm_act_fwd(cu, NK, CK, HWK, NCHW, dz, dm, dv, eps, dga, dbe, 1,
                                        acts[a], dz, NULL, &e_));
        dev_cmp("norm_act_fwd", "z over x", dz, z, cnt);
        for (int v = 0; v <= 2; v++) { /* v = 0: evaluation (variant II's sums unused) */
            int var_ = v ? v : 2, tr = v != 0;
            iabn_iabn_bwd_reduce(var_, NK, CK, HWK, NCHW, z, dy, eps, gam, bet, acts[a], s0, s1);
            iabn_iabn_bwd_apply(var_, NK, CK, HWK, NCHW, z, dy, var, eps, gam, bet, 1, acts[a],
                                s0, s1, m, tr, dx);
            CHECK_OK(be->h2d(be->ctx, dz, z, cnt * 4));
            CHECK_OK(be->h2d(be->ctx, ddy, dy, cnt * 4));
            CHECK_OK(iabn_cuda_iabn_bwd_reduce(cu, var_, NK, CK, HWK, NCHW, dz, ddy, eps, dga, dbe,
                                               acts[a], ds0, ds1, &e_));
            dev_cmp("iabn_bwd_reduce", "sum_dy", ds0, s0, CK);
            dev_cmp("iabn_bwd_reduce", "sum_dy_xhat", ds1, s1, CK);
            CHECK_OK(iabn_cuda_iabn_bwd_apply(cu, var_, NK, CK, HWK, NCHW, dz, ddy, dv, eps, dga,
                                              dbe, 1, acts[a], ds0, ds1, m, tr, ddy, &e_));
            dev_cmp("iabn_bwd_apply", "dx over dz", ddy, dx, cnt);
        }
    }
}

static void test_norm_kernels(void)
{
    const size_t cnt = (size_t)NK * CK * HWK;
    float *x = malloc(cnt * 4), *dy = malloc(cnt * 4), *z = malloc(cnt * 4), *dx = malloc(cnt * 4);
    float gam[CK], bet[CK];
    float *d[11] = {0};
    int ok = x && dy && z && dx;
    CHECK(ok);
    if (ok) {
        t_fill(x, cnt, 3u);
        for (size_t i = 0; i < cnt; i++) x[i] = 3.f + 2.f * x[i]; /* |mean| > std: the shift */
        t_fill(dy, cnt, 4u);
        t_fill(gam, CK, 5u);
        t_fill(bet, CK, 6u);
        d[0] = dev_up(x, cnt), d[1] = dev_up(dy, cnt), d[2] = dev_up(gam, CK);
        d[3] = dev_up(bet, CK), d[8] = dev_up(NULL, cnt);
        for (int i = 4; i < 11; i++)
            if (i != 8) d[i] = dev_up(NULL, CK);
        for (int i = 0; i < 11; i++) ok = ok && d[i];
    }
    if (ok) norm_kernels(x, dy, gam, bet, z, dx, d);
    for (int i = 0; i < 11; i++)
        if (d[i]) dev_free(d[i]);
    free(x), free(dy), free(z), free(dx);
}

/* CUDA runs NCHW only: nChw16c is refused by name (BN, dropout, max pool,
 * resize). */
static void test_layouts(void)
{
    const iabn_backend *be = iabn_cuda_backend(cu);
    const iabn_layout B = IABN_LAYOUT_NCHW16C;
    float h[96];
    t_fill(h, 96, 9u);
    float *x = dev_up(h, 96), *y = dev_up(NULL, 96);
    iabn_err e = {0};
    if (x && y) {
        CHECK(be->k->bn_stats(be->ctx, 2, 16, 3, B, x, y, y + 16, &e) == IABN_EINVAL);
        CHECK_MSG(strstr(e.msg, "nChw16c layout: not supported on the CUDA backend"), "%s", e.msg);
        CHECK(iabn_cuda_dropout2d_apply(cu, 2, 16, 3, B, 0.5f, 1, 1, x, y, &e) == IABN_EINVAL);
        CHECK(be->k->maxpool_fwd(be->ctx, 2, 16, 1, 3, B, 1, 1, 0, 1, 3, x, y, (int32_t *)y + 48,
                                 &e) == IABN_EINVAL &&
              be->k->bilinear_bwd(be->ctx, 2, 16, 1, 3, B, 1, 3, x, y, &e) == IABN_EINVAL);
    }
    dev_free(x), dev_free(y);
}

/* Logits from four patterns, so that pixels sharing a pattern and a label
 * have bit-identical losses on either side: the bootstrapped choice among
 * ties (lower index first, across 1024-pixel tiles) must be the CPU's exactly. */
static void test_xent_kernel(void)
{
    enum { N = 3, K = 5, HW = 1500 };
    static const float pat[4][K] = {
        {0, 1, 2, 3, 4}, {2, 2, 2, 2, 2}, {-1, 3, .5f, 0, 1}, {4, 0, 0, 0, -2}};
    const size_t m = (size_t)N * HW, nl = m * K;
    float *lg = malloc(nl * 4), *wc = malloc(m * 4), *wg = malloc(m * 4), *dl = malloc(nl * 4);
    int32_t *lab = malloc(m * 4);
    void *scr = malloc(iabn_xent_scratch_bytes(N, HW));
    const iabn_backend *be = iabn_cuda_backend(cu);
    CHECK(lg && wc && wg && dl && lab && scr);
    if (!lg || !wc || !wg || !dl || !lab || !scr) goto out;
    unsigned r = 7u;
    for (size_t i = 0; i < m; i++) {
        r = r * 1103515245u + 12345u;
        unsigned v = r >> 8;
        lab[i] = v % 10u == 0 ? 255 : (int32_t)((v / 10u) % K);
        for (int ch = 0; ch < K; ch++)
            lg[(i / HW * K + (size_t)ch) * HW + i % HW] = pat[(v / 50u) % 4u][ch];
    }
    float *dlg = dev_up(lg, nl), *dt = dev_up(NULL, nl), *dw = dev_up(NULL, m),
          *dloss = dev_up(NULL, 1), *dlab = dev_up((const float *)lab, m);
    if (dlg && dt && dw && dloss && dlab) {
        static const float tops[] = {1.f, .5f, .37f, .1f, .001f};
        for (int t = 0; t < 5; t++) {
            float lc = 0, lgpu = -1;
            long bad = -1;
            int bl = 0;
            CHECK(iabn_xent_fwd(N, K, HW, lg, lab, 255, tops[t], &lc, wc, scr, &bad) == 0);
            CHECK_OK(iabn_cuda_xent_fwd(cu, N, K, HW, dlg, (const int32_t *)dlab, 255, tops[t],
                                        dloss, dw, &bad, &bl, &e_));
            CHECK_OK(be->d2h(be->ctx, wg, dw, m * 4) || be->d2h(be->ctx, &lgpu, dloss, 4));
            CHECK_MSG(memcmp(wc, wg, m * 4) == 0, "bootstrap %g: another choice of pixels",
                      (double)tops[t]);
            CHECK_CLOSE(lgpu, lc, 1e-6, 1e-5);
            /* the gradient, written over a copy of the logits */
            iabn_xent_bwd(N, K, HW, lg, lab, wc, 0.5f, dl);
            CHECK_OK(iabn_cuda_copy_bytes(cu, nl * 4, dlg, dt, &e_));
            CHECK_OK(iabn_cuda_xent_bwd(cu, N, K, HW, dt, (const int32_t *)dlab, dw, 0.5f, dt,
                                        &e_));
            dev_cmp("xent_bwd", "dlogits over logits", dt, dl, nl);
        }
        /* label smoothing: every valid pixel weighted alike, loss and gradient
         * as the CPU's (the gradient again over the logits) */
        {
            float lc = 0, lgpu = -1;
            long bad = -1;
            int bl = 0;
            CHECK(iabn_xent_smooth_fwd(N, K, HW, lg, lab, 255, 0.1f, &lc, wc, &bad) == 0);
            CHECK_OK(iabn_cuda_xent_smooth_fwd(cu, N, K, HW, dlg, (const int32_t *)dlab, 255,
                                               0.1f, dloss, dw, &bad, &bl, &e_));
            CHECK_OK(be->d2h(be->ctx, wg, dw, m * 4) || be->d2h(be->ctx, &lgpu, dloss, 4));
            CHECK_MSG(memcmp(wc, wg, m * 4) == 0, "label smoothing: other pixel weights");
            CHECK_CLOSE(lgpu, lc, 1e-6, 1e-5);
            iabn_xent_smooth_bwd(N, K, HW, lg, lab, wc, 0.1f, 0.5f, dl);
            CHECK_OK(iabn_cuda_copy_bytes(cu, nl * 4, dlg, dt, &e_));
            CHECK_OK(iabn_cuda_xent_smooth_bwd(cu, N, K, HW, dt, (const int32_t *)dlab, dw, 0.1f,
                                               0.5f, dt, &e_));
            dev_cmp("xent_smooth_bwd", "dlogits over logits", dt, dl, nl);
        }
        /* a label outside [0, K): the first bad position and its value */
        lab[777] = 7;
        lab[2100] = -3;
        CHECK_OK(be->h2d(be->ctx, dlab, lab, m * 4));
        long bad = -1;
        int bl = 0;
        iabn_err e = {0};
        CHECK(iabn_cuda_xent_fwd(cu, N, K, HW, dlg, (const int32_t *)dlab, 255, 1.f, dloss, dw,
                                 &bad, &bl, &e) == IABN_EINVAL);
        CHECK(bad == 777 && bl == 7);
    }
    float *ds[5] = {dlg, dt, dw, dloss, dlab};
    for (int i = 0; i < 5; i++)
        if (ds[i]) dev_free(ds[i]);
out:
    free(lg), free(wc), free(wg), free(dl), free(lab), free(scr);
}

/* L1 and MSE kernels against the CPU's, with dy written over y. */
static void test_reg_loss_kernel(void)
{
    enum { M = 5003 };
    float *y = malloc(M * sizeof *y), *t = malloc(M * sizeof *t), *dy = malloc(M * sizeof *dy);
    CHECK(y && t && dy);
    if (!y || !t || !dy) goto out;
    for (int i = 0; i < M; i++) {
        y[i] = iabn_rng_normal(5, 0, (uint64_t)i);
        t[i] = i % 7 ? iabn_rng_normal(5, 1, (uint64_t)i) : y[i]; /* some exact ties */
    }
    for (int mse = 0; mse <= 1; mse++) {
        float loss = 0;
        iabn_reg_loss_fwd(M, mse, y, t, &loss);
        iabn_reg_loss_bwd(M, mse, y, t, dy);
        float *dyd = dev_up(y, M), *dt = dev_up(t, M), *dl = dev_up(NULL, 1);
        if (dyd && dt && dl) {
            CHECK_OK(iabn_cuda_reg_loss_fwd(cu, M, mse, dyd, dt, dl, &e_));
            dev_cmp("reg_loss_fwd", mse ? "mse" : "l1", dl, &loss, 1);
            CHECK_OK(iabn_cuda_reg_loss_bwd(cu, M, mse, dyd, dt, dyd, &e_));
            dev_cmp("reg_loss_bwd", mse ? "dmse over y" : "dl1 over y", dyd, dy, M);
        }
        if (dyd) dev_free(dyd);
        if (dt) dev_free(dt);
        if (dl) dev_free(dl);
    }
out:
    free(y);
    free(t);
    free(dy);
}

static float dev_at(const float *d, size_t i)
{
    const iabn_backend *be = iabn_cuda_backend(cu);
    float v = NAN;
    CHECK_OK(be->d2h(be->ctx, &v, d + i, sizeof v));
    return v;
}

/* Counts above 2^31 (8 GiB of floats): every index must be 64-bit. */
static void test_big_counts(void)
{
    const iabn_backend *be = iabn_cuda_backend(cu);
    const size_t n = ((size_t)1 << 31) + 4096, hw = n / 2;
    float *d = be->alloc(be->ctx, n * sizeof *d);
    float *s = dev_up(NULL, 8);
    if (!d || !s) {
        fprintf(stderr, "note: test_big_counts skipped: no room for %zu floats\n", n);
        if (d) dev_free(d);
        if (s) dev_free(s);
        return;
    }
    const float three = 3.f, one = 1.f, zero = 0.f;
    CHECK_OK(iabn_cuda_fill(cu, n, 1.f, d, &e_));
    CHECK_OK(be->h2d(be->ctx, d, &three, 4) || be->h2d(be->ctx, d + n - 1, &three, 4));
    double q = 0;
    CHECK_OK(iabn_cuda_sumsq(cu, n, d, &q, &e_));
    CHECK(q == (double)(n - 2) + 18.0);
    int fin = 0;
    CHECK_OK(iabn_cuda_all_finite(cu, n, d, &fin, &e_));
    CHECK(fin == 1);
    /* one channel of 2 x (2^30 + 2048): statistics, then z over x */
    float *mean = s, *var = s + 1, *gam = s + 2, *bet = s + 3;
    CHECK_OK(be->h2d(be->ctx, gam, &one, 4) || be->h2d(be->ctx, bet, &zero, 4));
    CHECK_OK(iabn_cuda_bn_stats(cu, 2, 1, (int)hw, NCHW, d, mean, var, &e_));
    double mu = ((double)n + 4.0) / (double)n, v = (8.0 * (double)n - 16.0) / ((double)n * n);
    float fm = dev_at(mean, 0), fv = dev_at(var, 0);
    CHECK_CLOSE(fm, mu, 0, 1e-6);
    CHECK_CLOSE(fv, v, 0, 1e-3);
    const iabn_act id = {IABN_ACT_IDENTITY, 0.f};
    CHECK_OK(iabn_cuda_norm_act_fwd(cu, 2, 1, (int)hw, NCHW, d, mean, var, 1e-5f, gam, bet, 0, id,
                                    d, NULL, &e_));
    float is = iabn_invstd(fv, 1e-5f);
    CHECK(dev_at(d, n - 1) == iabn_bn_xhat(3.f, fm, is));
    CHECK(dev_at(d, hw) == iabn_bn_xhat(1.f, fm, is));
    CHECK_OK(iabn_cuda_scale(cu, n, 2.f, d, &e_));
    CHECK(dev_at(d, n - 1) == 2.f * iabn_bn_xhat(3.f, fm, is));
    dev_free(d);
    dev_free(s);
}

int main(void)
{
    iabn_err e = {0};
    if (iabn_cuda_ctx_new(0, &cu, &e)) TEST_SKIP("no CUDA device (%s)", e.msg);
    RUN(test_all_finite);
    RUN(test_sumsq);
    RUN(test_norm_kernels);
    RUN(test_layouts);
    RUN(test_xent_kernel);
    RUN(test_reg_loss_kernel);
    RUN(test_big_counts);
    RUN(test_conv);
    RUN(test_norm_act);
    RUN(test_pool_linear);
    RUN(test_dropout_resize_concat);
    RUN(test_xent);
    RUN(test_train_steps);
    iabn_cuda_ctx_free(cu);
    return TEST_END();
}
