/* test_learn.c: a small CNN (conv / BN / leaky relu / pool / linear) reaches
 * 100% training accuracy on a generated separable data set within seconds, in
 * every BN mode; the loss must fall by more than half. */
#include "graph_test_util.h"

#define N 32
#define K 4
#define S 12

/* class k: a bright 4x4 square in quadrant k of channel k % 3, plus noise */
static void make_data(float *x, int32_t *y, unsigned seed)
{
    t_fill(x, (size_t)N * 3 * S * S, seed);
    for (size_t i = 0; i < (size_t)N * 3 * S * S; i++) x[i] *= 0.3f;
    for (int n = 0; n < N; n++) {
        int k = n % K;
        y[n] = k;
        int oy = (k / 2) * 6 + 1, ox = (k % 2) * 6 + 1;
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++) x[(((size_t)n * 3 + k % 3) * S + oy + a) * S + ox + b] += 2.f;
    }
}

static void train_mode(iabn_bn_mode mode)
{
    t_run t = {0};
    t.s = iabn_store_new(iabn_backend_cpu(), NULL);
    t.g = iabn_graph_new(t.s, IABN_TRAIN);
    iabn_graph *g = t.g;
    int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){N, 3, S, S});
    int lab = iabn_graph_input(g, "labels", IABN_I32, 1, (int[]){N});
    iabn_norm_act_cfg bn = iabn_norm_act_defaults(mode);
    int h = iabn_conv2d(g, "conv1", x, 8, 3, 1, 1, 1, 1, 0);
    h = iabn_norm_act(g, "bn1", h, &bn);
    h = iabn_maxpool(g, "pool1", h, 2, 2, 0);
    h = iabn_conv2d(g, "conv2", h, 16, 3, 1, 1, 1, 1, 0);
    h = iabn_norm_act(g, "bn2", h, &bn);
    h = iabn_global_avgpool(g, "gap", h);
    int logits = iabn_linear(g, "fc", h, K, 1);
    iabn_graph_mark_output(g, logits);
    t.loss = iabn_softmax_xent(g, "loss", logits, lab, 255, 1.f);
    if (t_prepare(&t, NULL)) {
        CHECK_MSG(0, "build %s", iabn_bn_mode_name(mode));
        t_free(&t);
        return;
    }
    iabn_init_params(t.s, IABN_INIT_XAVIER_NORMAL, bn.act, 1, NULL);
    make_data(iabn_exec_ptr(t.ex, x), iabn_exec_ptr(t.ex, lab), 3);
    float first = 0, last = 0;
    long correct = 0;
    for (int step = 0; step < 60; step++) {
        iabn_err e = {0};
        iabn_store_zero_grads(t.s, NULL);
        if (iabn_exec_run(t.ex, &e)) {
            CHECK_MSG(0, "run: %s", e.msg);
            break;
        }
        last = *(float *)iabn_exec_ptr(t.ex, t.loss);
        if (step == 0) first = last;
        long c5;
        iabn_topk_correct(N, K, iabn_exec_ptr(t.ex, logits), iabn_exec_ptr(t.ex, lab), 1, &correct, &c5);
        for (int i = 0; i < iabn_store_count(t.s); i++) {
            iabn_param *p = iabn_store_get(t.s, i);
            if (!p->grad) continue;
            if (!p->mom) p->mom = calloc(p->count, sizeof(float));
            iabn_sgd_update(p->count, 0.1f, 0.9f, 1e-4f, 1, step == 0, p->data, p->grad, p->mom);
        }
    }
    CHECK_MSG(correct == N, "%s: %ld/%d correct after 60 steps", iabn_bn_mode_name(mode), correct, N);
    CHECK_MSG(last < 0.5f * first, "%s: loss %.4f -> %.4f", iabn_bn_mode_name(mode), first, last);
    fprintf(stderr, "  %-16s loss %.4f -> %.4f, %ld/%d correct\n", iabn_bn_mode_name(mode), first,
            last, correct, N);
    t_free(&t);
}

static void test_learns(void)
{
    for (int m = 0; m < IABN_BN_INPLACE_SYNC; m++) train_mode((iabn_bn_mode)m);
}

int main(void)
{
    iabn_set_num_threads(2);
    RUN(test_learns);
    return TEST_END();
}
