/* train_tiny.c: a small network trained through libiabn's installed header
 * only: a graph-builder callback defines the network, one session call
 * builds the planned, bound training step, and SGD runs on it.  The task:
 * tell which of two colour channels is brighter in an 8x8 image.  Prints the
 * loss every 10 steps and "loss fell: yes" at the end when it did.
 *
 *     cc train_tiny.c $(pkg-config --cflags --libs iabn) -o train_tiny
 */
#include <stdio.h>
#include <stdlib.h>

#include "iabn.h"

#define BATCH 16
#define SIDE 8
#define STEPS 60

/* conv 3x3 -> BN + leaky ReLU -> global average pool -> linear to 2 classes */
static int tiny_net(iabn_graph *g, int x, void *user, int *out, iabn_err *e)
{
    (void)user;
    (void)e;
    iabn_norm_act_cfg bn = iabn_norm_act_defaults(IABN_BN_INPLACE_II);
    int h = iabn_conv2d(g, "conv", x, 8, 3, 1, 1, 1, 1, 0);
    h = iabn_norm_act(g, "bn", h, &bn);
    h = iabn_global_avgpool(g, "pool", h);
    *out = iabn_linear(g, "fc", h, 2, 1);
    return iabn_graph_ok(g) ? 0 : -1;
}

/* A batch: noise, plus a brighter channel 0 (class 0) or 1 (class 1). */
static void make_batch(unsigned step, float *x, int32_t *y)
{
    for (int n = 0; n < BATCH; n++) {
        int cls = (int)((step * 7u + (unsigned)n * 3u) % 2u);
        y[n] = cls;
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < SIDE * SIDE; i++) {
                size_t k = (((size_t)n * 3 + (size_t)c) * SIDE * SIDE) + (size_t)i;
                float v = iabn_rng_normal(step + 1, 0, k);
                x[k] = v + (c == cls ? 0.8f : 0.f);
            }
    }
}

int main(void)
{
    iabn_err e = {0};
    iabn_session_cfg c;
    iabn_session_cfg_defaults(&c);
    c.build = tiny_net;
    c.batch = BATCH;
    c.height = c.width = SIDE;
    c.labels = IABN_LABELS_PER_IMAGE;
    iabn_session s;
    if (iabn_session_build(&c, &s, &e)) {
        fprintf(stderr, "train_tiny: %s\n", e.msg);
        return 1;
    }
    printf("step planned: arena %zu bytes, whole step %zu bytes\n", s.mem.arena, s.mem.total);
    iabn_act act = {IABN_ACT_LEAKY_RELU, 0.01f};
    int rc = iabn_init_params(s.store, IABN_INIT_KAIMING_NORMAL, act, 1, &e);
    /* the store's gradients start at zero; each SGD step zeroes them again */
    iabn_sgd_opts sgd = {.lr = {0.1f, 0.1f}, .momentum = 0.9f, .grad_scale = 1.f};
    static float x[BATCH * 3 * SIDE * SIDE];
    static int32_t y[BATCH];
    double first = 0, last = 0;
    for (int step = 0; step < STEPS && !rc; step++) {
        make_batch((unsigned)step, x, y);
        float loss = 0;
        rc = iabn_session_set_inputs(&s, x, y, &e);
        if (!rc) rc = iabn_session_run(&s, &e);
        if (!rc) rc = iabn_session_loss(&s, &loss, &e);
        if (!rc) rc = iabn_store_sgd_step(s.store, &sgd, NULL, &e);
        /* the mean of 10 steps, so that one lucky batch does not decide */
        if (step < 10) first += loss / 10.0;
        if (step >= STEPS - 10) last += loss / 10.0;
        if (!rc && step % 10 == 0) printf("step %2d  loss %.4f\n", step, loss);
    }
    iabn_session_free(&s);
    if (rc) {
        fprintf(stderr, "train_tiny: %s\n", e.msg);
        return 1;
    }
    printf("mean loss of the first 10 steps %.4f, of the last 10 %.4f; loss fell: %s\n", first,
           last, last < 0.7 * first ? "yes" : "no");
    return last < 0.7 * first ? 0 : 1;
}
