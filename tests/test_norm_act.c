/* test_norm_act.c: the BN+activation unit through the engine.
 *  - every mode computes the same function at the same scale (plain gamma =
 *    |gamma|+eps of the in-place modes): output, dx, dgamma (times the sign
 *    of gamma), dbeta and the running statistics agree with the standard mode
 *    to float32 rounding, on random shapes, negative gammas, each activation;
 *  - a gamma of 0 trains; weight files convert between the conventions;
 *  - stored buffers, counted by the planner: BN+ACT+CONV keeps 2 (standard)
 *    and 1 (checkpoint, checkpoint_opt, inplace_abn, inplace_abn_ii); the
 *    pre-activation bottleneck residual unit of the paper's Fig. 1 keeps 6
 *    (standard) versus 3 (in place), and its shortcut costs the in-place
 *    modes one buffer that bn1 writes in its own pass (no copy node);
 *  - the errors: relu with an in-place mode, one value per channel in
 *    training. */
#include "graph_test_util.h"

typedef struct outcome {
    float y[2 * 6 * 5 * 7];
    float dx[2 * 6 * 5 * 7];
    float dgamma[6], dbeta[6], rmean[6], rvar[6];
} outcome;

/* gamma: shape[1] values for bn.weight */
static int run_mode(iabn_bn_mode mode, iabn_act act, const int *shape, const float *gamma,
                    outcome *o)
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
    memcpy(gam->data, gamma, gam->count * sizeof(float));
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
            /* gamma for |gamma|+eps (both signs) and the plain gamma of the
             * same scale; dgamma differs by the sign of the former */
            float ga[6], gp[6];
            for (int i = 0; i < sh[1]; i++) {
                ga[i] = (i % 2 ? -1.f : 1.f) * (0.5f + 0.1f * (float)i);
                gp[i] = iabn_bn_scale(ga[i], 1e-5f, 1);
            }
            CHECK(run_mode(IABN_BN_STANDARD, acts[ai], sh, gp, &ref) == 0);
            for (int m = 1; m < IABN_BN_INPLACE_SYNC; m++) {
                int ab = iabn_bn_mode_abs_gamma((iabn_bn_mode)m);
                CHECK(run_mode((iabn_bn_mode)m, acts[ai], sh, ab ? ga : gp, &o) == 0);
                for (int i = 0; ab && i < sh[1]; i++) o.dgamma[i] *= iabn_bn_dgamma_factor(ga[i], 1);
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

/* What the planner keeps of block "unit", and what the in-place rules cost:
 * copies (the report's count), copy nodes in the schedule, and whether bn1's
 * output shares its input's buffer. */
typedef struct unit_mem {
    int kept, copies, copy_nodes, bn1_shares;
} unit_mem;

static int kept_buffers(iabn_bn_mode mode, int bottleneck_unit, unit_mem *u)
{
    iabn_store *s = iabn_store_new(iabn_backend_cpu(), NULL);
    iabn_graph *g = iabn_graph_new(s, IABN_TRAIN);
    int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){2, 8, 6, 6});
    int lab = iabn_graph_input(g, "labels", IABN_I32, 3, (int[]){2, 6, 6});
    int h = iabn_conv2d(g, "stem", x, 8, 3, 1, 1, 1, 1, 0);
    iabn_graph_begin_block(g, "unit");
    iabn_norm_act_cfg bn = iabn_norm_act_defaults(mode);
    int out;
    int z1 = -1;
    if (bottleneck_unit) {
        int z = z1 = iabn_norm_act(g, "bn1", h, &bn);
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
        kept = u->kept = rows[0].kept_buffers;
        u->copies = rows[0].copies;
        u->copy_nodes = 0;
        for (int i = 0; i < iabn_graph_schedule_len(g); i++)
            u->copy_nodes += iabn_graph_n(g, iabn_graph_schedule(g)[i])->op == &iabn_op_copy;
        u->bn1_shares = z1 >= 0 && p->group[z1] >= 0 && p->group[z1] == p->group[h];
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
        unit_mem u = {-1, -1, -1, -1};
        int k = kept_buffers((iabn_bn_mode)m, 0, &u);
        CHECK_MSG(k == expect_block[m], "BN+ACT+CONV %s keeps %d buffers, expected %d",
                  iabn_bn_mode_name((iabn_bn_mode)m), k, expect_block[m]);
    }
    unit_mem u = {-1, -1, -1, -1};
    int k_std = kept_buffers(IABN_BN_STANDARD, 1, &u);
    CHECK_MSG(k_std == 6, "residual unit, standard: %d buffers, expected 6", k_std);
    CHECK(u.copies == 0);
    int k_ip = kept_buffers(IABN_BN_INPLACE_II, 1, &u);
    CHECK_MSG(k_ip == 3, "residual unit, in place: %d buffers, expected 3", k_ip);
    CHECK_MSG(u.copies == 1, "residual unit, in place: %d copies (the shortcut needs 1)",
              u.copies);
    /* That copy is bn1 writing z to a buffer of its own, in the same pass
     * (iabn_op_def.own_buffer): no copy node runs, and bn1's input and output
     * are two buffers.  In the standard mode bn1 is never in place. */
    for (int m = IABN_BN_INPLACE; m <= IABN_BN_INPLACE_II; m++) {
        unit_mem v = {-1, -1, -1, -1};
        k_ip = kept_buffers((iabn_bn_mode)m, 1, &v);
        CHECK_MSG(k_ip == 3 && v.copies == 1 && v.copy_nodes == 0 && v.bn1_shares == 0,
                  "residual unit, %s: %d buffers, %d copies, %d copy nodes, bn1 shares x: %d",
                  iabn_bn_mode_name((iabn_bn_mode)m), k_ip, v.copies, v.copy_nodes,
                  v.bn1_shares);
    }
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

/* Issue 16.2: a gamma of exactly 0 trains in the in-place modes: dgamma is
 * sum(dy*xhat), as standard BN gives at the same scale (plain gamma = eps). */
static void test_zero_gamma_trains(void)
{
    const int sh[4] = {2, 6, 5, 7};
    const iabn_act ident = {IABN_ACT_IDENTITY, 0.f};
    float gz[6] = {0}, ge[6];
    for (int i = 0; i < 6; i++) ge[i] = 1e-5f;
    static outcome ref, o;
    CHECK(run_mode(IABN_BN_STANDARD, ident, sh, ge, &ref) == 0);
    const iabn_bn_mode ms[2] = {IABN_BN_INPLACE, IABN_BN_INPLACE_II};
    for (int m = 0; m < 2; m++) {
        CHECK(run_mode(ms[m], ident, sh, gz, &o) == 0);
        /* tolerance: at scale eps the in-place modes rebuild xhat = (y-beta)/g
         * from y ~ beta, which costs ~|beta|/(g*|xhat|) float roundings */
        double eg = t_max_err(o.dgamma, ref.dgamma, 6, 3e-2, 3e-2);
        CHECK_MSG(eg <= 1 && o.dgamma[0] != 0.f,
                  "%s, gamma 0: dgamma[0] %g, standard at the same scale %g (err %.2g)",
                  iabn_bn_mode_name(ms[m]), o.dgamma[0], ref.dgamma[0], eg);
    }
}

/* Issue 16.3: a weight file records its BN convention; loading converts
 * exactly across conventions and refuses plain negative gammas for the
 * in-place modes, naming the layer. */
static iabn_store *unit_store(iabn_bn_mode mode, const char *name)
{
    iabn_store *s = iabn_store_new(iabn_backend_cpu(), NULL);
    iabn_graph *g = iabn_graph_new(s, IABN_EVAL);
    int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){2, 4, 3, 3});
    iabn_norm_act_cfg bn = iabn_norm_act_defaults(mode);
    CHECK(iabn_norm_act(g, name, x, &bn) >= 0);
    iabn_graph_free(g);
    return s;
}

static void test_gamma_files(void)
{
    const char *path = "test_norm_act_gamma.safetensors";
    iabn_err e = {0};
    /* standard with a negative gamma -> in-place: refused, naming the layer */
    iabn_store *a = unit_store(IABN_BN_STANDARD, "layer1.bn");
    iabn_param *ga = iabn_store_get(a, iabn_store_find(a, "layer1.bn.weight"));
    const float gv[4] = {1.5f, -0.25f, 1e-5f, 3.f};
    memcpy(ga->data, gv, sizeof gv);
    CHECK_MSG(iabn_weights_save(a, path, NULL, &e) == 0, "%s", e.msg);
    iabn_store *b = unit_store(IABN_BN_INPLACE_II, "layer1.bn");
    iabn_param *gb = iabn_store_get(b, iabn_store_find(b, "layer1.bn.weight"));
    gb->data[0] = 7.f;
    CHECK(iabn_weights_load(b, path, 1, &e) == IABN_EFORMAT);
    CHECK_MSG(strstr(e.msg, "layer1.bn.weight") && strstr(e.msg, "plain gamma"), "%s", e.msg);
    CHECK(gb->data[0] == 7.f); /* nothing written */
    /* all gamma >= eps: converts, and the scale is the same float */
    ga->data[1] = 0.25f;
    CHECK_MSG(iabn_weights_save(a, path, NULL, &e) == 0, "%s", e.msg);
    CHECK_MSG(iabn_weights_load(b, path, 1, &e) == 0, "%s", e.msg);
    for (int i = 0; i < 4; i++)
        CHECK_MSG(iabn_bn_scale(gb->data[i], 1e-5f, 1) == ga->data[i] && gb->data[i] >= 0.f,
                  "channel %d: %.9g -> %.9g", i, ga->data[i], gb->data[i]);
    /* in-place (negative gamma) -> standard: gamma' = |gamma| + eps */
    gb->data[1] = -2.f;
    CHECK_MSG(iabn_weights_save(b, path, NULL, &e) == 0, "%s", e.msg);
    CHECK_MSG(iabn_weights_load(a, path, 1, &e) == 0, "%s", e.msg);
    for (int i = 0; i < 4; i++) CHECK(ga->data[i] == iabn_bn_scale(gb->data[i], 1e-5f, 1));
    /* same convention: the values as they are, sign included */
    iabn_store *c = unit_store(IABN_BN_INPLACE, "layer1.bn");
    CHECK_MSG(iabn_weights_load(c, path, 1, &e) == 0, "%s", e.msg);
    CHECK(iabn_store_get(c, iabn_store_find(c, "layer1.bn.weight"))->data[1] == -2.f);
    /* a file without the metadata (a reference state dict) loads as it is */
    iabn_st_writer *w = iabn_st_writer_new();
    int64_t four = 4;
    const float neg[4] = {-1.f, 2.f, 3.f, 4.f}, zero[4] = {0}, var[4] = {1.f, 2.f, 3.f, 4.f};
    iabn_st_writer_add(w, "layer1.bn.weight", IABN_F32, 1, &four, neg, &e);
    iabn_st_writer_add(w, "layer1.bn.bias", IABN_F32, 1, &four, zero, &e);
    iabn_st_writer_add(w, "layer1.bn.running_mean", IABN_F32, 1, &four, zero, &e);
    iabn_st_writer_add(w, "layer1.bn.running_var", IABN_F32, 1, &four, var, &e);
    CHECK_MSG(iabn_st_writer_save(w, path, &e) == 0, "%s", e.msg);
    iabn_st_writer_free(w);
    CHECK_MSG(iabn_weights_load(a, path, 1, &e) == 0, "%s", e.msg);
    CHECK(ga->data[0] == -1.f);
    CHECK_MSG(iabn_weights_load(c, path, 1, &e) == 0, "%s", e.msg);
    remove(path);
    iabn_store_free(a);
    iabn_store_free(b);
    iabn_store_free(c);
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
    RUN(test_zero_gamma_trains);
    RUN(test_gamma_files);
    RUN(test_closed_lists);
    return TEST_END();
}
