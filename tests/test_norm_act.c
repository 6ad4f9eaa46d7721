/* test_norm_act.c: the BN+activation unit through the engine.
 *  - every mode computes the same function: output, dx, dgamma, dbeta and the
 *    running statistics agree with the standard mode to float32 rounding, on
 *    random shapes, negative gammas, each activation;
 *  - stored buffers, counted by the planner: BN+ACT+CONV keeps 2 (standard)
 *    and 1 (checkpoint, checkpoint_opt, inplace_abn, inplace_abn_ii); the
 *    pre-activation bottleneck residual unit of the paper's Fig. 1 keeps 6
 *    (standard) versus 3 (in place);
 *  - the errors: relu or plain gamma with an in-place mode, one value per
 *    channel in training. */
#include "graph_test_util.h"

typedef struct outcome {
    float y[2 * 6 * 5 * 7];
    float dx[2 * 6 * 5 * 7];
    float dgamma[6], dbeta[6], rmean[6], rvar[6];
} outcome;

static int run_mode(iabn_bn_mode mode, iabn_act act, const int *shape, outcome *o)
{
    t_run t = {0};
    t.s = iabn_store_new(iabn_backend_cpu(), NULL);
    t.g = iabn_graph_new(t.s, IABN_TRAIN);
    int xp = iabn_graph_param(t.g, "x", IABN_P_WEIGHT, 4, shape);
    /* x enters through a copy so that the in-place modes may overwrite it */
    int one = iabn_graph_tensor(t.g, "x.act", IABN_F32, 4, shape);
    iabn_graph_node(t.g, &iabn_op_copy, "x.act", 1, &xp, 1, &one, NULL, 0);
    iabn_norm_act_cfg cfg = iabn_norm_act_defaults(mode);
    cfg.act = act;
    int y = iabn_norm_act(t.g, "bn", one, &cfg);
    /* the loss reads a copy: the unit's output itself must stay what the
     * backward of the in-place modes needs */
    int yc = iabn_graph_tensor(t.g, "y.copy", IABN_F32, 4, shape);
    iabn_graph_node(t.g, &iabn_op_copy, "y.copy", 1, &y, 1, &yc, NULL, 0);
    t.loss = t_wsum(t.g, yc, NULL);
    iabn_graph_mark_output(t.g, yc);
    if (t_prepare(&t, NULL)) {
        t_free(&t);
        return -1;
    }
    t_set_params_random(t.s, 3);
    iabn_param *gam = iabn_store_get(t.s, iabn_store_find(t.s, "bn.weight"));
    for (size_t i = 0; i < gam->count; i++) gam->data[i] = (i % 2 ? -1.f : 1.f) * (0.5f + 0.1f * (float)i);
    t_set_inputs_random(&t, 5);
    iabn_store_zero_grads(t.s, NULL);
    iabn_err e = {0};
    int rc = iabn_exec_run(t.ex, &e);
    if (rc) fprintf(stderr, "%s\n", e.msg);
    size_t n = (size_t)shape[0] * shape[1] * shape[2] * shape[3];
    memcpy(o->y, iabn_exec_ptr(t.ex, yc), n * 4);
    memcpy(o->dx, iabn_store_get(t.s, iabn_store_find(t.s, "x"))->grad, n * 4);
    memcpy(o->dgamma, gam->grad, (size_t)shape[1] * 4);
    memcpy(o->dbeta, iabn_store_get(t.s, iabn_store_find(t.s, "bn.bias"))->grad, (size_t)shape[1] * 4);
    memcpy(o->rmean, iabn_store_get(t.s, iabn_store_find(t.s, "bn.running_mean"))->data, (size_t)shape[1] * 4);
    memcpy(o->rvar, iabn_store_get(t.s, iabn_store_find(t.s, "bn.running_var"))->data, (size_t)shape[1] * 4);
    t_free(&t);
    return rc;
}

static void test_modes_agree(void)
{
    const int shapes[][4] = {{2, 6, 5, 7}, {1, 3, 4, 1}, {2, 5, 1, 3}};
    const iabn_act acts[] = {{IABN_ACT_IDENTITY, 0}, {IABN_ACT_LEAKY_RELU, 0.01f},
                             {IABN_ACT_LEAKY_RELU, 0.3f}, {IABN_ACT_ELU, 1.f}, {IABN_ACT_ELU, 0.5f}};
    for (size_t si = 0; si < 3; si++)
        for (size_t ai = 0; ai < sizeof acts / sizeof acts[0]; ai++) {
            static outcome ref, o;
            const int *sh = shapes[si];
            size_t n = (size_t)sh[0] * sh[1] * sh[2] * sh[3];
            CHECK(run_mode(IABN_BN_STANDARD, acts[ai], sh, &ref) == 0);
            for (int m = 1; m < IABN_BN_INPLACE_SYNC; m++) {
                CHECK(run_mode((iabn_bn_mode)m, acts[ai], sh, &o) == 0);
                double ey = t_max_err(o.y, ref.y, n, 1e-5, 1e-5);
                double edx = t_max_err(o.dx, ref.dx, n, 1e-4, 1e-4);
                double eg = t_max_err(o.dgamma, ref.dgamma, (size_t)sh[1], 1e-4, 1e-4);
                double eb = t_max_err(o.dbeta, ref.dbeta, (size_t)sh[1], 1e-4, 1e-4);
                double erm = t_max_err(o.rmean, ref.rmean, (size_t)sh[1], 1e-6, 1e-6);
                double erv = t_max_err(o.rvar, ref.rvar, (size_t)sh[1], 1e-6, 1e-6);
                CHECK_MSG(ey <= 1 && edx <= 1 && eg <= 1 && eb <= 1 && erm <= 1 && erv <= 1,
                          "%s %s shape %zu: y %.2g dx %.2g dgamma %.2g dbeta %.2g rmean %.2g "
                          "rvar %.2g (<= 1 is within tolerance)",
                          iabn_bn_mode_name((iabn_bn_mode)m), iabn_act_name(acts[ai].kind), si, ey,
                          edx, eg, eb, erm, erv);
            }
        }
}

/* kept buffers of block "unit" for a graph built by fn */
static int kept_buffers(iabn_bn_mode mode, int bottleneck_unit, int *copies)
{
    iabn_store *s = iabn_store_new(iabn_backend_cpu(), NULL);
    iabn_graph *g = iabn_graph_new(s, IABN_TRAIN);
    int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){2, 8, 6, 6});
    int lab = iabn_graph_input(g, "labels", IABN_I32, 3, (int[]){2, 6, 6});
    int h = iabn_conv2d(g, "stem", x, 8, 3, 1, 1, 1, 1, 0);
    iabn_graph_begin_block(g, "unit");
    iabn_norm_act_cfg bn = iabn_norm_act_defaults(mode);
    int out;
    if (bottleneck_unit) {
        int z = iabn_norm_act(g, "bn1", h, &bn);
        z = iabn_conv2d(g, "conv1", z, 4, 1, 1, 0, 1, 1, 0);
        z = iabn_norm_act(g, "bn2", z, &bn);
        z = iabn_conv2d(g, "conv2", z, 4, 3, 1, 1, 1, 2, 0);
        z = iabn_norm_act(g, "bn3", z, &bn);
        z = iabn_conv2d(g, "conv3", z, 8, 1, 1, 0, 1, 1, 0);
        out = iabn_add_layer(g, "add", z, h);
    } else {
        int z = iabn_norm_act(g, "bn", h, &bn);
        out = iabn_conv2d(g, "conv", z, 8, 3, 1, 1, 1, 1, 0);
    }
    iabn_graph_begin_block(g, "head");
    int loss = iabn_softmax_xent(g, "loss", out, lab, 255, 1.f);
    iabn_err e = {0};
    iabn_plan *p = NULL;
    int kept = -1;
    if (iabn_graph_backward(g, loss, &e) == 0 && iabn_graph_finalize(g, &e) == 0 &&
        iabn_plan_build(g, NULL, &p, &e) == 0) {
        iabn_block_mem rows[2];
        iabn_plan_blocks(g, p, rows);
        kept = rows[0].kept_buffers;
        *copies = rows[0].copies;
    } else {
        fprintf(stderr, "%s\n", e.msg);
    }
    iabn_plan_free(p);
    iabn_graph_free(g);
    iabn_store_free(s);
    return kept;
}

static void test_stored_buffers(void)
{
    const int expect_block[] = {2, 1, 1, 1, 1};
    for (int m = 0; m < IABN_BN_INPLACE_SYNC; m++) {
        int copies = 0;
        int k = kept_buffers((iabn_bn_mode)m, 0, &copies);
        CHECK_MSG(k == expect_block[m], "BN+ACT+CONV %s keeps %d buffers, expected %d",
                  iabn_bn_mode_name((iabn_bn_mode)m), k, expect_block[m]);
    }
    int copies = -1;
    int k_std = kept_buffers(IABN_BN_STANDARD, 1, &copies);
    CHECK_MSG(k_std == 6, "residual unit, standard: %d buffers, expected 6", k_std);
    CHECK(copies == 0);
    int k_ip = kept_buffers(IABN_BN_INPLACE_II, 1, &copies);
    CHECK_MSG(k_ip == 3, "residual unit, in place: %d buffers, expected 3", k_ip);
    CHECK_MSG(copies == 1, "residual unit, in place: %d copies (the shortcut needs 1)", copies);
}

static void test_errors(void)
{
    iabn_store *s = iabn_store_new(iabn_backend_cpu(), NULL);
    iabn_graph *g = iabn_graph_new(s, IABN_TRAIN);
    int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){2, 4, 3, 3});
    iabn_norm_act_cfg bn = iabn_norm_act_defaults(IABN_BN_INPLACE);
    bn.act.kind = IABN_ACT_RELU;
    CHECK(iabn_norm_act(g, "bn", x, &bn) < 0);
    CHECK(strstr(iabn_graph_error(g)->msg, "relu is not invertible") != NULL);
    iabn_graph_free(g);

    g = iabn_graph_new(s, IABN_TRAIN);
    x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){2, 4, 3, 3});
    bn = iabn_norm_act_defaults(IABN_BN_STANDARD);
    bn.act.kind = IABN_ACT_RELU;
    CHECK(iabn_norm_act(g, "bn2", x, &bn) >= 0); /* relu is fine without in-place */
    bn = iabn_norm_act_defaults(IABN_BN_INPLACE_II);
    bn.plain_gamma = 1;
    CHECK(iabn_norm_act(g, "bn3", x, &bn) < 0);
    iabn_graph_free(g);

    g = iabn_graph_new(s, IABN_TRAIN);
    x = iabn_graph_input(g, "input", IABN_F32, 2, (int[]){1, 4});
    bn = iabn_norm_act_defaults(IABN_BN_STANDARD);
    CHECK(iabn_norm_act(g, "bn4", x, &bn) < 0);
    CHECK(strstr(iabn_graph_error(g)->msg, "one value per channel") != NULL);
    iabn_graph_free(g);
    g = iabn_graph_new(s, IABN_EVAL); /* evaluation uses running statistics: fine */
    x = iabn_graph_input(g, "input", IABN_F32, 2, (int[]){1, 4});
    CHECK(iabn_norm_act(g, "bn4", x, &bn) >= 0);
    iabn_graph_free(g);
    iabn_store_free(s);
}

/* The closed lists: every name and alias parses back to its value, and an
 * unknown name (or a value outside the list) is refused with every valid
 * name in the message, never mapped to a fallback. */
static void test_closed_lists(void)
{
    iabn_err e = {0};
    for (int m = 0; m < IABN_BN_NMODES; m++) {
        iabn_bn_mode got = IABN_BN_NMODES;
        CHECK(iabn_bn_mode_parse(iabn_bn_mode_name((iabn_bn_mode)m), &got, &e) == 0 && (int)got == m);
    }
    iabn_bn_mode bm = IABN_BN_STANDARD;
    CHECK(iabn_bn_mode_parse("INPLACE", &bm, &e) == 0 && bm == IABN_BN_INPLACE);
    CHECK(iabn_bn_mode_parse("sync", &bm, &e) == 0 && bm == IABN_BN_INPLACE_SYNC);
    bm = IABN_BN_CHECKPOINT;
    CHECK(iabn_bn_mode_parse("inplace_abn_iii", &bm, &e) == IABN_EINVAL);
    CHECK(bm == IABN_BN_CHECKPOINT);
    CHECK_MSG(strstr(e.msg, "inplace_abn_iii") != NULL, "%s", e.msg);
    for (int m = 0; m < IABN_BN_NMODES; m++)
        CHECK_MSG(strstr(e.msg, iabn_bn_mode_name((iabn_bn_mode)m)) != NULL, "%s", e.msg);
    CHECK(iabn_bn_mode_check((iabn_bn_mode)42, &e) == IABN_EINVAL);

    for (int k = 0; k < IABN_ACT_COUNT; k++) {
        iabn_act_kind got = IABN_ACT_COUNT;
        CHECK(iabn_act_parse(iabn_act_name((iabn_act_kind)k), &got, &e) == 0 && (int)got == k);
    }
    iabn_act_kind ak = IABN_ACT_ELU;
    CHECK(iabn_act_parse("none", &ak, &e) == 0 && ak == IABN_ACT_IDENTITY);
    ak = IABN_ACT_ELU;
    CHECK(iabn_act_parse("gelu", &ak, &e) == IABN_EINVAL && ak == IABN_ACT_ELU);
    for (int k = 0; k < IABN_ACT_COUNT; k++)
        CHECK_MSG(strstr(e.msg, iabn_act_name((iabn_act_kind)k)) != NULL, "%s", e.msg);
    CHECK(!iabn_act_invertible(IABN_ACT_RELU) && iabn_act_invertible(IABN_ACT_LEAKY_RELU));
    CHECK(iabn_act_default_param(IABN_ACT_LEAKY_RELU) == 0.01f);
    CHECK(isnan(iabn_act_f(IABN_ACT_COUNT, 0.f, 1.f))); /* no silent identity */

    /* a layer refuses a kind outside the lists, naming the valid ones */
    iabn_store *s = iabn_store_new(iabn_backend_cpu(), NULL);
    iabn_graph *g = iabn_graph_new(s, IABN_TRAIN);
    int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){2, 4, 3, 3});
    iabn_norm_act_cfg bn = iabn_norm_act_defaults(IABN_BN_STANDARD);
    bn.act.kind = (iabn_act_kind)7;
    CHECK(iabn_norm_act(g, "bn", x, &bn) < 0);
    CHECK_MSG(strstr(iabn_graph_error(g)->msg, "leaky_relu") != NULL, "%s",
              iabn_graph_error(g)->msg);
    iabn_graph_free(g);
    g = iabn_graph_new(s, IABN_TRAIN);
    x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){2, 4, 3, 3});
    bn = iabn_norm_act_defaults((iabn_bn_mode)9);
    CHECK(iabn_norm_act(g, "bn", x, &bn) < 0);
    CHECK_MSG(strstr(iabn_graph_error(g)->msg, "checkpoint_opt") != NULL, "%s",
              iabn_graph_error(g)->msg);
    iabn_graph_free(g);
    iabn_store_free(s);
}

int main(void)
{
    iabn_set_num_threads(2);
    RUN(test_modes_agree);
    RUN(test_stored_buffers);
    RUN(test_errors);
    RUN(test_closed_lists);
    return TEST_END();
}
