/* test_session.c: the session (src/models/train/session.h): a registry
 * model planned without allocating and its memory report, the budget check
 * and the budget search, configuration errors that name the fault, and a
 * bound step built from a graph-builder callback with an MSE loss and the
 * input's gradient. */
#include "iabn.h"
#include "test_util.h"

static void test_plan_only(void)
{
    iabn_session_cfg c;
    iabn_session_cfg_defaults(&c);
    c.model = "resnext_tiny";
    c.batch = 4;
    c.height = c.width = 32;
    c.plan_only = 1;
    iabn_session s;
    iabn_err e = {0};
    CHECK_MSG(iabn_session_build(&c, &s, &e) == 0, "%s", e.msg);
    CHECK(s.exec == NULL && s.plan && s.loss >= 0 && s.labels >= 0);
    CHECK(s.mem.arena == s.plan->arena_bytes && s.mem.arena >= s.mem.lower_bound);
    CHECK(s.mem.params == 1124776);
    CHECK(s.mem.total == s.mem.arena + s.mem.io + s.mem.staging + s.mem.param_bytes +
                             s.mem.grad_bytes + s.mem.optim_bytes + s.mem.buffer_bytes);
    size_t total = s.mem.total;
    iabn_session_free(&s);
    /* the budget: exactly enough passes, one byte less is refused */
    c.budget_bytes = total;
    CHECK_MSG(iabn_session_build(&c, &s, &e) == 0, "%s", e.msg);
    iabn_session_free(&s);
    c.budget_bytes = total - 1;
    CHECK(iabn_session_build(&c, &s, &e) == IABN_ENOMEM && strstr(e.msg, "budget"));
    CHECK(s.graph == NULL);
    /* the search: batch 4 fits in its own total, the answer's successor does not */
    int best = 0;
    c.budget_bytes = 0;
    CHECK_MSG(iabn_session_largest(&c, IABN_SEARCH_BATCH, total, &best, &e) == 0, "%s", e.msg);
    CHECK(best >= 4);
    c.batch = best + 1;
    CHECK(iabn_session_build(&c, &s, &e) == 0 && s.mem.total > total);
    iabn_session_free(&s);
    c.batch = 4;
    CHECK(iabn_session_largest(&c, IABN_SEARCH_SIDE, total, &best, &e) == 0 && best >= 32 &&
          best % 8 == 0);
    CHECK(iabn_session_largest(&c, IABN_SEARCH_BATCH, 1, &best, &e) == 0 && best == 0);
}

/* The pinned host pool of offloaded copies has a limit too: a bound step
 * over it is refused before anything is allocated, the largest-batch search
 * counts it, and auto chooses within it. */
static void test_host_budget(void)
{
    iabn_session_cfg c;
    iabn_session_cfg_defaults(&c);
    c.model = "resnext_tiny";
    c.batch = 4;
    c.height = c.width = 32;
    c.storage = IABN_STORAGE_OFFLOAD;
    c.plan_only = 1;
    iabn_session s;
    iabn_err e = {0};
    CHECK_MSG(iabn_session_build(&c, &s, &e) == 0, "%s", e.msg);
    size_t host = s.mem.host, total = s.mem.total;
    CHECK(host > 0);
    iabn_session_free(&s);
    /* bound: one byte short of the pool is refused, naming the host memory */
    c.plan_only = 0;
    c.bind = 1;
    c.host_budget_bytes = host - 1;
    CHECK(iabn_session_build(&c, &s, &e) == IABN_ENOMEM && strstr(e.msg, "pinned host memory") &&
          strstr(e.msg, "host budget"));
    CHECK(s.graph == NULL && s.exec == NULL);
    c.host_budget_bytes = host;
    CHECK_MSG(iabn_session_build(&c, &s, &e) == 0, "%s", e.msg);
    iabn_session_free(&s);
    /* the search: with the pool capped at batch 4's, batch 4 is the largest
     * (the device budget alone would allow more) */
    c.plan_only = 1;
    int best = 0, capped = 0;
    c.host_budget_bytes = 0;
    CHECK_MSG(iabn_session_largest(&c, IABN_SEARCH_BATCH, 4 * total, &best, &e) == 0, "%s", e.msg);
    c.host_budget_bytes = host;
    CHECK_MSG(iabn_session_largest(&c, IABN_SEARCH_BATCH, 4 * total, &capped, &e) == 0, "%s",
              e.msg);
    CHECK_MSG(best > 4 && capped == 4, "largest batch %d, with the host capped %d", best, capped);
    /* auto aiming at offload's device bytes: it offloads, and within a host
     * budget of one byte it offloads nothing (recompute alone falls short;
     * budget_bytes 0 reports instead of refusing) */
    iabn_strategy_opts o;
    memset(&o, 0, sizeof o);
    o.allow_offload = o.allow_recompute = 1;
    o.lookahead = 1;
    o.budget = total;
    c.storage = IABN_STORAGE_AUTO;
    c.strategy = &o;
    c.host_budget_bytes = 0;
    CHECK_MSG(iabn_session_build(&c, &s, &e) == 0, "%s", e.msg);
    CHECK_MSG(s.strategy.n_offload > 0 && s.mem.host > 0, "auto offloaded %d", s.strategy.n_offload);
    iabn_session_free(&s);
    c.host_budget_bytes = 1;
    CHECK_MSG(iabn_session_build(&c, &s, &e) == 0, "%s", e.msg);
    CHECK(s.strategy.n_offload == 0 && s.mem.host == 0);
    iabn_session_free(&s);
}

static void test_errors(void)
{
    iabn_session_cfg c;
    iabn_session s;
    iabn_err e = {0};
    iabn_session_cfg_defaults(&c);
    CHECK(iabn_session_build(&c, &s, &e) == IABN_EINVAL && strstr(e.msg, "builder"));
    c.model = "no_such_net";
    CHECK(iabn_session_build(&c, &s, &e) == IABN_EINVAL && strstr(e.msg, "no_such_net"));
    c.model = "resnext_tiny";
    c.loss = IABN_LOSS_NONE;
    CHECK(iabn_session_build(&c, &s, &e) == IABN_EINVAL && strstr(e.msg, "loss"));
    c.loss = (iabn_loss_kind)9;
    CHECK(iabn_session_build(&c, &s, &e) == IABN_EINVAL && strstr(e.msg, "mse"));
}

static int tiny(iabn_graph *g, int x, void *user, int *out, iabn_err *e)
{
    *out = iabn_conv2d(g, "conv", x, *(const int *)user, 3, 1, 1, 1, 1, 1);
    return 0;
}

static void test_builder_mse_input_grad(void)
{
    int cout = 2;
    iabn_session_cfg c;
    iabn_session_cfg_defaults(&c);
    c.build = tiny;
    c.build_user = &cout;
    c.batch = 2;
    c.height = c.width = 4;
    c.loss = IABN_LOSS_MSE;
    c.input_grad = 1;
    iabn_session s;
    iabn_err e = {0};
    CHECK_MSG(iabn_session_build(&c, &s, &e) == 0, "%s", e.msg);
    if (!s.exec) return;
    CHECK(s.input_grad >= 0 && s.labels >= 0);
    CHECK(iabn_graph_t(s.graph, s.labels)->dtype == IABN_F32);
    iabn_act id = {IABN_ACT_IDENTITY, 0.f};
    CHECK(iabn_init_params(s.store, IABN_INIT_XAVIER_NORMAL, id, 1, &e) == 0);
    float x[2 * 3 * 4 * 4], t[2 * 2 * 4 * 4], dx[2 * 3 * 4 * 4];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = iabn_rng_normal(1, 0, i);
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) t[i] = iabn_rng_normal(2, 0, i);
    float loss = -1;
    CHECK(iabn_session_set_inputs(&s, x, t, &e) == 0);
    CHECK(iabn_store_zero_grads(s.store, &e) == 0);
    CHECK_MSG(iabn_session_run(&s, &e) == 0, "%s", e.msg);
    CHECK(iabn_session_loss(&s, &loss, &e) == 0 && isfinite(loss) && loss > 0);
    CHECK(iabn_session_get(&s, s.input_grad, dx, sizeof dx, &e) == 0);
    double norm = 0;
    for (size_t i = 0; i < sizeof dx / sizeof *dx; i++) norm += fabs(dx[i]);
    CHECK(norm > 0);
    iabn_session_free(&s);
    CHECK(s.graph == NULL && s.exec == NULL);
    iabn_session_free(&s); /* a freed session frees nothing twice */
}

int main(void)
{
    iabn_set_num_threads(2);
    RUN(test_plan_only);
    RUN(test_host_budget);
    RUN(test_errors);
    RUN(test_builder_mse_input_grad);
    return TEST_END();
}
