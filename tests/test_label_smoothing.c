/* test_label_smoothing.c: the label-smoothed cross-entropy (torchvision's
 * --label-smoothing): its value against the formula, eps 0 against the plain
 * cross-entropy, its gradient by central finite differences, in place, with
 * ignored pixels, and the graph op's refusals (bootstrapping together with
 * smoothing, eps outside [0, 1)). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "iabn.h"
#include "tensor/cpu/ops.h"
#include "test_util.h"

#define N 3
#define K 5
#define HW 4

static float logits[N * K * HW];
static int32_t labels[N * HW];

static void setup(void)
{
    for (int i = 0; i < N * K * HW; i++) logits[i] = (float)sin(1.7 * i + 0.3) * 2.f;
    for (int i = 0; i < N * HW; i++) labels[i] = i % 7 == 5 ? 255 : (i * 3) % K;
}

/* The loss by its definition, in double. */
static double reference(const float *l, double eps)
{
    double total = 0;
    int counted = 0;
    for (int img = 0; img < N; img++)
        for (int p = 0; p < HW; p++) {
            int y = labels[img * HW + p];
            if (y == 255) continue;
            double mx = -1e30, s = 0, mean = 0;
            for (int c = 0; c < K; c++) mx = fmax(mx, l[(img * K + c) * HW + p]);
            for (int c = 0; c < K; c++) {
                double v = l[(img * K + c) * HW + p];
                s += exp(v - mx);
                mean += v / K;
            }
            double lse = log(s) + mx;
            total += (1 - eps) * (lse - l[(img * K + y) * HW + p]) + eps * (lse - mean);
            counted++;
        }
    return total / counted;
}

static void test_value(void)
{
    float loss, w[N * HW], loss0, w0[N * HW];
    long bad = -1;
    CHECK(iabn_xent_smooth_fwd(N, K, HW, logits, labels, 255, 0.1f, &loss, w, &bad) == 0);
    CHECK_CLOSE(loss, reference(logits, 0.1), 1e-5, 1e-5);
    /* eps 0 is the plain cross-entropy */
    CHECK(iabn_xent_smooth_fwd(N, K, HW, logits, labels, 255, 0.f, &loss, w, &bad) == 0);
    static uint32_t scratch[N * HW];
    CHECK(iabn_xent_fwd(N, K, HW, logits, labels, 255, 1.f, &loss0, w0, scratch, &bad) == 0);
    CHECK_CLOSE(loss, loss0, 1e-6, 1e-5);
    for (int i = 0; i < N * HW; i++) CHECK_CLOSE(w[i], w0[i], 0, 0);
    /* a label out of range names its position */
    labels[6] = K;
    CHECK(iabn_xent_smooth_fwd(N, K, HW, logits, labels, 255, 0.1f, &loss, w, &bad) == IABN_EINVAL);
    CHECK(bad == 6);
    labels[6] = 1;
}

static void test_gradient(void)
{
    const float eps = 0.2f;
    float loss, w[N * HW], g[N * K * HW], gin[N * K * HW];
    CHECK(iabn_xent_smooth_fwd(N, K, HW, logits, labels, 255, eps, &loss, w, NULL) == 0);
    iabn_xent_smooth_bwd(N, K, HW, logits, labels, w, eps, 1.f, g);
    float l2[N * K * HW];
    for (int i = 0; i < N * K * HW; i++) {
        memcpy(l2, logits, sizeof l2);
        const double h = 1e-2;
        l2[i] = logits[i] + (float)h;
        double up = reference(l2, eps);
        l2[i] = logits[i] - (float)h;
        double dn = reference(l2, eps);
        CHECK_CLOSE(g[i], (up - dn) / (2 * h), 2e-4, 1e-2);
    }
    /* ignored pixels get an exact 0; in place gives the same gradient */
    for (int img = 0; img < N; img++)
        for (int p = 0; p < HW; p++)
            if (labels[img * HW + p] == 255)
                for (int c = 0; c < K; c++) CHECK(g[(img * K + c) * HW + p] == 0.f);
    memcpy(gin, logits, sizeof gin);
    iabn_xent_smooth_bwd(N, K, HW, gin, labels, w, eps, 1.f, gin);
    for (int i = 0; i < N * K * HW; i++) CHECK(gin[i] == g[i]);
}

static void test_graph(void)
{
    iabn_err e = {0};
    iabn_store *s = iabn_store_new(iabn_backend_cpu(), &e);
    iabn_graph *g = iabn_graph_new(s, IABN_TRAIN);
    int xs[2] = {4, K}, ys[1] = {4};
    int x = iabn_graph_param(g, "x", IABN_P_WEIGHT, 2, xs);
    int y = iabn_graph_input(g, "labels", IABN_I32, 1, ys);
    CHECK(iabn_softmax_xent_smooth(g, "loss", x, y, 255, 1.f, 0.1f) >= 0);
    CHECK(iabn_graph_backward(g, iabn_graph_find(g, "loss"), &e) == 0);
    iabn_graph_free(g);
    g = iabn_graph_new(s, IABN_TRAIN);
    x = iabn_graph_input(g, "x", IABN_F32, 2, xs);
    y = iabn_graph_input(g, "labels", IABN_I32, 1, ys);
    CHECK(iabn_softmax_xent_smooth(g, "loss", x, y, 255, 0.25f, 0.1f) < 0); /* with OHEM */
    iabn_graph_free(g);
    g = iabn_graph_new(s, IABN_TRAIN);
    x = iabn_graph_input(g, "x", IABN_F32, 2, xs);
    y = iabn_graph_input(g, "labels", IABN_I32, 1, ys);
    CHECK(iabn_softmax_xent_smooth(g, "loss", x, y, 255, 1.f, 1.f) < 0); /* eps 1 */
    iabn_graph_free(g);
    iabn_store_free(s);
}

int main(void)
{
    setup();
    RUN(test_value);
    RUN(test_gradient);
    RUN(test_graph);
    return TEST_END();
}
