/* test_offload.c: the OFFLOAD storage policy and the automatic strategy.
 *  - losses and gradients bit-identical with offload on and off, for every
 *    BN mode, with the paper's choice and with every saved tensor offloaded;
 *  - the strategy `auto` under a range of budgets: the plan fits when it
 *    says so, and every choice it makes trains bit-identically;
 *  - on a small graph, auto's estimated time is within 5% of the exhaustive
 *    optimum over keep / recompute / offload per saved tensor;
 *  - a plan over budget is refused before anything is allocated;
 *  - the choice is fast on a deep network;
 *  - bfloat16 host copies: half the host pool, the same forward, gradients
 *    within bfloat16 rounding, on the CPU and through the sim's copy thread;
 *    the conversion rounds to nearest even and keeps NaN and infinities. */
#include "graph_test_util.h"
#include "tensor/math/hd.h"

#include <math.h>

enum { POL_KEEP, POL_PAPER, POL_ALL, POL_AUTO, POL_PAPER_BF16, POL_ALL_BF16 };

/* What test_bf16_absorbed varies: the executor's fusion and the activation
 * (the mode's default where elu is 0). */
static int fusion_off, use_elu;

static void build_cnn(iabn_graph *g, iabn_bn_mode mode, int batch, int *loss)
{
    int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){batch, 3, 12, 12});
    int lab = iabn_graph_input(g, "labels", IABN_I32, 1, (int[]){batch});
    iabn_norm_act_cfg bn = iabn_norm_act_defaults(mode);
    if (use_elu) bn.act = (iabn_act){IABN_ACT_ELU, 1.f};
    int h = iabn_conv2d(g, "c1", x, 8, 3, 1, 1, 1, 1, 0);
    h = iabn_norm_act(g, "bn1", h, &bn);
    int sc = iabn_maxpool(g, "pool", h, 3, 2, 1);
    h = iabn_norm_act(g, "bn2", sc, &bn);
    h = iabn_conv2d(g, "c2", h, 8, 3, 1, 1, 1, 4, 0);
    h = iabn_add_layer(g, "add", h, sc);
    h = iabn_norm_act(g, "bn3", h, &bn);
    h = iabn_conv2d(g, "c3", h, 8, 3, 1, 1, 1, 1, 0);
    h = iabn_dropout2d(g, "drop", h, 0.2f);
    h = iabn_global_avgpool(g, "gap", h);
    h = iabn_linear(g, "fc", h, 5, 1);
    *loss = iabn_softmax_xent(g, "loss", h, lab, 255, 1.f);
}

static void fixed_cost(iabn_cost_model *m)
{
    m->flops_per_s = 20e9;
    m->bytes_per_s = 5e9;
    m->copy_bytes_per_s = 2e9;
}

/* Two training steps; out gets the losses and every gradient of both. */
static int run_case(iabn_bn_mode mode, int how, size_t budget, const iabn_backend *be,
                    float *out, size_t cap, size_t *n, iabn_strategy_result *res,
                    size_t *arena, int *noffload)
{
    iabn_err e = {0};
    t_run t = {0};
    t.s = iabn_store_new(be, &e);
    t.g = iabn_graph_new(t.s, IABN_TRAIN);
    iabn_graph_set_fusion(t.g, !fusion_off);
    build_cnn(t.g, mode, 4, &t.loss);
    int rc = -1;
    if (!iabn_graph_ok(t.g) || iabn_graph_backward(t.g, t.loss, &e)) goto done;
    int marked = 0;
    if (how == POL_PAPER_BF16 || how == POL_ALL_BF16)
        iabn_graph_set_offload_opts(t.g, &(iabn_offload_opts){.lookahead = 1, .host_bf16 = 1});
    if (how == POL_PAPER || how == POL_PAPER_BF16) marked = iabn_graph_offload_conv_inputs(t.g);
    if (how == POL_ALL || how == POL_ALL_BF16)
        for (int i = 0; i < iabn_graph_ntensors(t.g); i++)
            if (iabn_graph_t(t.g, i)->policy == IABN_KEEP && iabn_graph_offloadable(t.g, i)) {
                iabn_graph_set_policy(t.g, i, IABN_OFFLOAD);
                marked++;
            }
    if (how == POL_AUTO) {
        iabn_strategy_opts o = {.budget = budget, .allow_offload = 1, .allow_recompute = 1,
                                .lookahead = 1};
        fixed_cost(&o.cost);
        o.fixed_bytes = iabn_graph_fixed_bytes(t.g);
        if (iabn_strategy_auto(t.g, &o, res, &e)) goto done;
        marked = res->n_offload;
    }
    if (noffload) *noffload = marked;
    iabn_plan_opts po;
    iabn_plan_opts_default(&po);
    if (iabn_graph_finalize(t.g, &e) || iabn_plan_build(t.g, &po, &t.p, &e) ||
        iabn_plan_validate(t.g, t.p, &e) || iabn_exec_new(t.g, t.p, &t.ex, &e))
        goto done;
    if (arena) *arena = t.p->arena_bytes;
    iabn_init_params(t.s, IABN_INIT_XAVIER_NORMAL, (iabn_act){IABN_ACT_LEAKY_RELU, 0.01f}, 3,
                     NULL);
    int x = iabn_graph_find(t.g, "input"), lab = iabn_graph_find(t.g, "labels");
    float xin[4 * 3 * 12 * 12];
    t_fill(xin, 4 * 3 * 12 * 12, 9);
    int32_t l[4] = {0, 1, 2, 3};
    if (iabn_exec_set(t.ex, x, xin, sizeof xin, &e) || iabn_exec_set(t.ex, lab, l, sizeof l, &e))
        goto done;
    iabn_exec_set_seed(t.ex, 77);
    *n = 0;
    for (int step = 0; step < 2; step++) {
        iabn_store_zero_grads(t.s, NULL);
        if (iabn_exec_run(t.ex, &e)) goto done;
        float loss;
        if (iabn_exec_get(t.ex, t.loss, &loss, sizeof loss, &e)) goto done;
        out[(*n)++] = loss;
        for (int i = 0; i < iabn_store_count(t.s); i++) {
            iabn_param *p = iabn_store_get(t.s, i);
            if (!p->grad) continue;
            if (*n + 2 * p->count > cap) goto done;
            iabn_store_read_grad(t.s, i, out + *n, &e);
            iabn_store_read(t.s, i, out + *n + p->count, &e);
            for (size_t k = 0; k < p->count; k++)
                out[*n + p->count + k] -= 0.1f * out[*n + k];
            iabn_store_write(t.s, i, out + *n + p->count, &e);
            *n += p->count;
        }
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "run_case (mode %s, policy %d): %s\n", iabn_bn_mode_name(mode), how,
                    e.msg);
    t_free(&t);
    return rc;
}

#define CAP 200000

static void test_offload_bit_identical(void)
{
    float *ref = malloc(CAP * sizeof(float)), *got = malloc(CAP * sizeof(float));
    for (int mode = 0; mode < IABN_BN_INPLACE_SYNC; mode++) {
        size_t nr = 0, ng = 0, a_keep = 0, a_off = 0;
        int marked = 0;
        CHECK_OK(run_case(mode, POL_KEEP, 0, iabn_backend_cpu(), ref, CAP, &nr, NULL, &a_keep, NULL));
        for (int how = POL_PAPER; how <= POL_ALL; how++) {
            CHECK_OK(run_case(mode, how, 0, iabn_backend_cpu(), got, CAP, &ng, NULL, &a_off,
                              &marked));
            CHECK_MSG(marked > 0, "mode %s policy %d: nothing offloaded", iabn_bn_mode_name(mode),
                      how);
            CHECK_MSG(ng == nr && memcmp(ref, got, nr * sizeof(float)) == 0,
                      "mode %s policy %d: results differ with offload", iabn_bn_mode_name(mode),
                      how);
            if (how == POL_ALL)
                CHECK_MSG(a_off < a_keep, "mode %s: offloading everything left the arena at %zu "
                                          "(keep %zu)", iabn_bn_mode_name(mode), a_off, a_keep);
        }
    }
    free(ref);
    free(got);
}

/* The keep-everything arena of the CNN in a mode, planned on a virtual store. */
static size_t keep_arena(iabn_bn_mode mode, size_t *fixed)
{
    iabn_err e = {0};
    iabn_store *s = iabn_store_new_virtual(iabn_backend_cpu(), &e);
    iabn_graph *g = iabn_graph_new(s, IABN_TRAIN);
    int loss;
    build_cnn(g, mode, 4, &loss);
    iabn_plan *p = NULL;
    size_t a = 0;
    if (!iabn_graph_backward(g, loss, &e) && !iabn_graph_finalize(g, &e) &&
        !iabn_plan_build(g, NULL, &p, &e))
        a = p->arena_bytes;
    *fixed = iabn_graph_fixed_bytes(g);
    iabn_plan_free(p);
    iabn_graph_free(g);
    iabn_store_free(s);
    return a;
}

static void test_auto_bit_identical(void)
{
    float *ref = malloc(CAP * sizeof(float)), *got = malloc(CAP * sizeof(float));
    int modes[2] = {IABN_BN_STANDARD, IABN_BN_INPLACE_II};
    for (int mi = 0; mi < 2; mi++) {
        size_t nr = 0, fixed = 0, keep = keep_arena(modes[mi], &fixed);
        CHECK(keep > 0);
        CHECK_OK(run_case(modes[mi], POL_KEEP, 0, iabn_backend_cpu(), ref, CAP, &nr, NULL, NULL,
                          NULL));
        int fitted = 0, some_rc = 0, some_off = 0;
        for (int pct = 100; pct >= 40; pct -= 10) {
            size_t budget = fixed + keep * (size_t)pct / 100, ng = 0, arena = 0;
            iabn_strategy_result r;
            CHECK_OK(run_case(modes[mi], POL_AUTO, budget, iabn_backend_cpu(), got, CAP, &ng, &r,
                              &arena, NULL));
            CHECK_MSG(ng == nr && memcmp(ref, got, nr * sizeof(float)) == 0,
                      "mode %s budget %d%%: results differ under auto (%d recompute, %d offload)",
                      iabn_bn_mode_name(modes[mi]), pct, r.n_recompute, r.n_offload);
            CHECK_MSG(!r.fits || arena + fixed <= budget,
                      "budget %d%%: said it fits, arena %zu + %zu > %zu", pct, arena, fixed, budget);
            CHECK_MSG(r.arena_bytes == arena, "strategy's plan %zu, the real one %zu",
                      r.arena_bytes, arena);
            CHECK(r.est_time >= r.base_time * 0.999);
            if (getenv("T_VERBOSE"))
                fprintf(stderr, "%s %d%%: fits %d rc %d off %d arena %zu keep %zu est %.3g/%.3g\n",
                        iabn_bn_mode_name(modes[mi]), pct, r.fits, r.n_recompute, r.n_offload,
                        arena, keep, r.est_time, r.base_time);
            fitted += r.fits;
            some_rc += r.n_recompute > 0;
            some_off += r.n_offload > 0;
        }
        CHECK_MSG(fitted >= 3, "mode %s: auto fitted only %d of 7 budgets",
                  iabn_bn_mode_name(modes[mi]), fitted);
        CHECK_MSG(some_off > 0, "mode %s: auto never offloaded", iabn_bn_mode_name(modes[mi]));
        if (modes[mi] == IABN_BN_STANDARD)
            CHECK_MSG(some_rc > 0, "standard BN: auto never recomputed");
    }
    free(ref);
    free(got);
}

/* Exhaustive search over keep / recompute / offload on the CNN's saved
 * tensors, under budgets; auto's estimate within 5% of the best that fits. */
static void test_auto_near_optimum(void)
{
    iabn_err e = {0};
    iabn_bn_mode mode = IABN_BN_STANDARD;
    size_t fixed = 0, keep = keep_arena(mode, &fixed);
    iabn_store *s = iabn_store_new_virtual(iabn_backend_cpu(), &e);
    iabn_graph *g = iabn_graph_new(s, IABN_TRAIN);
    int loss;
    build_cnn(g, mode, 4, &loss);
    CHECK_OK(iabn_graph_backward(g, loss, &e));
    int cand[16], nc = 0;
    for (int t = 0; t < iabn_graph_ntensors(g) && nc < 9; t++)
        if (iabn_graph_t(g, t)->policy == IABN_KEEP && iabn_graph_offloadable(g, t) &&
            iabn_graph_t(g, t)->nd >= 2)
            cand[nc++] = t;
    CHECK_MSG(nc >= 4, "only %d candidates", nc);
    int total = 1;
    for (int i = 0; i < nc; i++) total *= 3;
    double *tm = malloc((size_t)total * sizeof *tm);
    size_t *ar = malloc((size_t)total * sizeof *ar);
    iabn_cost_model cm;
    fixed_cost(&cm);
    for (int code = 0; code < total; code++) {
        iabn_graph *c = iabn_graph_clone(g);
        int v = code;
        for (int i = 0; i < nc; i++, v /= 3)
            iabn_graph_set_policy(c, cand[i], v % 3 == 0 ? IABN_KEEP : v % 3 == 1 ? IABN_RECOMPUTE
                                                                                   : IABN_OFFLOAD);
        iabn_plan *p = NULL;
        iabn_err ce = {0};
        tm[code] = -1;
        if (!iabn_graph_finalize(c, &ce) && !iabn_plan_build(c, NULL, &p, &ce)) {
            tm[code] = iabn_strategy_estimate(c, p, &cm);
            ar[code] = p->arena_bytes;
        }
        iabn_plan_free(p);
        iabn_graph_free(c);
    }
    int checked = 0;
    for (int pct = 95; pct >= 50; pct -= 5) {
        size_t budget = fixed + keep * (size_t)pct / 100;
        double best = -1;
        for (int code = 0; code < total; code++)
            if (tm[code] >= 0 && ar[code] + fixed <= budget && (best < 0 || tm[code] < best))
                best = tm[code];
        if (best < 0) continue;
        iabn_graph *c = iabn_graph_clone(g);
        iabn_strategy_opts o = {.budget = budget, .fixed_bytes = fixed, .cost = cm,
                                .allow_offload = 1, .allow_recompute = 1, .lookahead = 1};
        iabn_strategy_result r;
        CHECK_OK(iabn_strategy_auto(c, &o, &r, &e));
        if (getenv("T_VERBOSE")) {
            int bc = -1;
            for (int code = 0; code < total; code++)
                if (tm[code] == best && ar[code] + fixed <= budget) bc = code;
            fprintf(stderr, "%d%% (%zu): auto fits %d arena %zu est %.4g rc %d off %d; best %.4g arena %zu code", pct, budget - fixed, r.fits,
                    r.arena_bytes, r.est_time, r.n_recompute, r.n_offload, best, ar[bc]);
            for (int i = 0, v = bc; i < nc; i++, v /= 3) fprintf(stderr, " %s:%d", iabn_graph_t(g, cand[i])->name, v % 3);
            fprintf(stderr, "\n");
        }
        CHECK_MSG(r.fits, "budget %d%%: auto found nothing, the search did", pct);
        if (r.fits) {
            CHECK_MSG(r.est_time <= best * 1.05, "budget %d%%: auto %.3g s, optimum %.3g s", pct,
                      r.est_time, best);
            checked++;
        }
        iabn_graph_free(c);
    }
    CHECK_MSG(checked >= 3, "only %d budgets compared", checked);
    free(tm);
    free(ar);
    iabn_graph_free(g);
    iabn_store_free(s);
}

/* The simulated device: offloaded copies go through its copy thread at a
 * limited bandwidth, with events; results equal the CPU's bit for bit. */
static void test_sim_bit_identical(void)
{
    float *ref = malloc(CAP * sizeof(float)), *got = malloc(CAP * sizeof(float));
    iabn_err e = {0};
    for (int mode = IABN_BN_STANDARD; mode <= IABN_BN_INPLACE_II; mode += 3) {
        size_t nr = 0, ng = 0;
        CHECK_OK(run_case(mode, POL_KEEP, 0, iabn_backend_cpu(), ref, CAP, &nr, NULL, NULL, NULL));
        for (int how = POL_PAPER; how <= POL_ALL; how++) {
            iabn_sim *sim = NULL;
            iabn_sim_opts so = {.device_bytes = 64 << 20, .host_bytes = 64 << 20,
                                .copy_bytes_per_s = 2e9};
            CHECK_OK(iabn_sim_open(&so, &sim, &e));
            if (!sim) continue;
            CHECK_OK(run_case(mode, how, 0, iabn_sim_backend(sim), got, CAP, &ng, NULL, NULL,
                              NULL));
            CHECK_MSG(ng == nr && memcmp(ref, got, nr * sizeof(float)) == 0,
                      "mode %s policy %d: the sim device differs from the CPU",
                      iabn_bn_mode_name(mode), how);
            iabn_sim_stats st;
            iabn_sim_get_stats(sim, &st);
            CHECK_MSG(st.copies > 0 && st.host_peak > 0, "no copies went through the copy thread");
            CHECK(st.device_used == 0 && st.host_used == 0); /* all freed */
            iabn_sim_close(sim);
        }
    }
    free(ref);
    free(got);
}

/* float32 -> bfloat16: ties to even, NaN kept, overflow to infinity; back
 * exactly. */
static void test_bf16_rounding(void)
{
    static const struct { uint32_t in; uint16_t out; } cases[] = {
        {0x3f800000u, 0x3f80}, /* 1 */
        {0x3f808000u, 0x3f80}, /* 1 + half an ulp: tie, to even (down) */
        {0x3f818000u, 0x3f82}, /* tie, to even (up) */
        {0x3f808001u, 0x3f81}, /* above the tie */
        {0x80000000u, 0x8000}, /* -0 */
        {0x00000001u, 0x0000}, /* smallest subnormal rounds to 0 */
        {0x7f800000u, 0x7f80}, /* inf */
        {0xff800000u, 0xff80}, /* -inf */
        {0x7f7fffffu, 0x7f80}, /* FLT_MAX overflows to inf, as float rounding does */
        {0x7fc00000u, 0x7fc0}, /* quiet NaN */
        {0xff800001u, 0xffc0}, /* signalling NaN with low bits only: stays NaN */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float f = iabn_bits_to_float(cases[i].in);
        uint16_t h;
        iabn_to_bf16(1, &f, &h);
        CHECK_MSG(h == cases[i].out, "bf16 of %08x: %04x, want %04x", cases[i].in, h, cases[i].out);
        float back;
        iabn_from_bf16(1, &h, &back);
        uint32_t u;
        memcpy(&u, &back, sizeof u);
        CHECK(u == (uint32_t)h << 16);
    }
}

/* Standard BN's backward absorbs the act_bwd before it and rebuilds z from
 * x (layers/norm_act.c); where x or z comes back from the host in bfloat16
 * it must leave act_bwd its own step, on the rounded z: the same bits with the
 * executor's fusion on and off, conv inputs (z) or every saved tensor
 * (x and z) offloaded, with ELU, whose derivative reads z's value. */
static void test_bf16_absorbed(void)
{
    float *a = malloc(CAP * sizeof(float)), *b = malloc(CAP * sizeof(float));
    static const int hows[] = {POL_KEEP, POL_PAPER_BF16, POL_ALL_BF16};
    use_elu = 1;
    for (int h = 0; h < 3; h++) {
        size_t na = 0, nb = 0;
        int marked = 0;
        fusion_off = 0;
        CHECK_OK(run_case(IABN_BN_STANDARD, hows[h], 0, iabn_backend_cpu(), a, CAP, &na, NULL,
                          NULL, &marked));
        fusion_off = 1;
        CHECK_OK(run_case(IABN_BN_STANDARD, hows[h], 0, iabn_backend_cpu(), b, CAP, &nb, NULL,
                          NULL, NULL));
        CHECK(h == 0 || marked > 0);
        CHECK_MSG(na > 0 && na == nb && !memcmp(a, b, na * sizeof(float)),
                  "policy %d: fusion on and off differ", hows[h]);
    }
    fusion_off = use_elu = 0;
    free(a);
    free(b);
}

/* bfloat16 host copies of the paper's choice: on the CPU and on the sim
 * device; the host pool is half the float32 one. */
static void test_bf16_copies(void)
{
    float *ref = malloc(CAP * sizeof(float)), *got = malloc(CAP * sizeof(float));
    iabn_err e = {0};
    for (int dev = 0; dev < 2; dev++) {
        size_t nr = 0, ng = 0;
        int marked = 0;
        CHECK_OK(run_case(IABN_BN_INPLACE_II, POL_PAPER, 0, iabn_backend_cpu(), ref, CAP, &nr,
                          NULL, NULL, NULL));
        iabn_sim *sim = NULL;
        iabn_sim_opts so = {.device_bytes = 64 << 20, .host_bytes = 64 << 20,
                            .copy_bytes_per_s = 2e9};
        if (dev) CHECK_OK(iabn_sim_open(&so, &sim, &e));
        if (dev && !sim) continue;
        CHECK_OK(run_case(IABN_BN_INPLACE_II, POL_PAPER_BF16, 0,
                          dev ? iabn_sim_backend(sim) : iabn_backend_cpu(), got, CAP, &ng, NULL,
                          NULL, &marked));
        CHECK(marked > 0 && ng == nr);
        /* the first loss is the forward's: the same bits; then the gradients
         * differ by bfloat16 rounding of what the backward reads */
        CHECK_MSG(ng && memcmp(ref, got, sizeof(float)) == 0, "bf16: the forward changed");
        double d = 0, r = 0;
        for (size_t i = 1; i < nr && i < ng; i++) {
            d += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
            r += (double)ref[i] * ref[i];
        }
        double rel = sqrt(d / (r > 0 ? r : 1));
        CHECK_MSG(rel > 0 && rel < 2e-2, "%s: bf16 copies: relative difference %.3g",
                  dev ? "sim" : "cpu", rel);
        if (sim) {
            iabn_sim_stats st;
            iabn_sim_get_stats(sim, &st);
            CHECK(st.copies > 0 && st.device_used == 0 && st.host_used == 0);
            iabn_sim_close(sim);
        }
    }
    /* the host pool, planned: half */
    size_t host[2], other[2], pool[2];
    for (int bf = 0; bf < 2; bf++) {
        iabn_store *s = iabn_store_new_virtual(iabn_backend_cpu(), &e);
        iabn_graph *g = iabn_graph_new(s, IABN_TRAIN);
        int loss;
        build_cnn(g, IABN_BN_INPLACE_II, 4, &loss);
        iabn_plan *p = NULL;
        iabn_plan_opts po;
        iabn_plan_opts_default(&po);
        iabn_graph_set_offload_opts(g, &(iabn_offload_opts){.lookahead = 1, .host_bf16 = bf});
        CHECK_OK(iabn_graph_backward(g, loss, &e));
        CHECK(iabn_graph_offload_conv_inputs(g) > 0);
        CHECK_OK(iabn_graph_finalize(g, &e));
        CHECK_OK(iabn_plan_build(g, &po, &p, &e));
        /* the float copies' bytes (the pool reuses space among them; a max
         * pool's int32 argmax is copied as it is) */
        host[bf] = other[bf] = 0;
        for (int t = 0; t < iabn_graph_ntensors(g); t++) {
            const iabn_tensor *x = iabn_graph_t(g, t);
            if (x->kind != IABN_T_HOST) continue;
            CHECK(x->dtype != (bf ? IABN_F32 : IABN_BF16));
            if (x->dtype == IABN_F32 || x->dtype == IABN_BF16) host[bf] += x->nbytes;
            else other[bf] += x->nbytes;
        }
        pool[bf] = p ? p->host_bytes : 0;
        iabn_plan_free(p);
        iabn_graph_free(g);
        iabn_store_free(s);
    }
    CHECK_MSG(host[0] > 0 && host[1] * 2 == host[0] && other[1] == other[0] && pool[1] < pool[0],
              "host copies %zu bytes with bfloat16, %zu with float32 (pools %zu, %zu)", host[1],
              host[0], pool[1], pool[0]);
    free(ref);
    free(got);
}

/* Check mode with guard bytes after every buffer: prefetched buffers get
 * their guards armed too, and nothing writes past a buffer. */
static void test_sim_checked(void)
{
    float *ref = malloc(CAP * sizeof(float)), *got = malloc(CAP * sizeof(float));
    iabn_err e = {0};
    size_t nr = 0, ng = 0;
    CHECK_OK(run_case(IABN_BN_STANDARD, POL_KEEP, 0, iabn_backend_cpu(), ref, CAP, &nr, NULL,
                      NULL, NULL));
    setenv("IABN_PLAN_GUARD", "64", 1);
    setenv("IABN_CHECK", "1", 1);
    iabn_sim *sim = NULL;
    iabn_sim_opts so = {.copy_bytes_per_s = 1e9};
    CHECK_OK(iabn_sim_open(&so, &sim, &e));
    CHECK_OK(run_case(IABN_BN_STANDARD, POL_ALL, 0, iabn_sim_backend(sim), got, CAP, &ng, NULL,
                      NULL, NULL));
    CHECK(ng == nr && memcmp(ref, got, nr * sizeof(float)) == 0);
    iabn_sim_close(sim);
    unsetenv("IABN_PLAN_GUARD");
    unsetenv("IABN_CHECK");
    free(ref);
    free(got);
}

/* Prepares the CNN with every saved tensor offloaded on a sim device. */
static int sim_prepare(t_run *t, iabn_sim *sim, iabn_err *e)
{
    t->s = iabn_store_new(iabn_sim_backend(sim), e);
    if (!t->s) return -1;
    t->g = iabn_graph_new(t->s, IABN_TRAIN);
    build_cnn(t->g, IABN_BN_STANDARD, 4, &t->loss);
    if (iabn_graph_backward(t->g, t->loss, e)) return -1;
    for (int i = 0; i < iabn_graph_ntensors(t->g); i++)
        if (iabn_graph_t(t->g, i)->policy == IABN_KEEP && iabn_graph_offloadable(t->g, i))
            iabn_graph_set_policy(t->g, i, IABN_OFFLOAD);
    int rc = iabn_graph_finalize(t->g, e);
    if (!rc) rc = iabn_plan_build(t->g, NULL, &t->p, e);
    if (!rc) rc = iabn_exec_new(t->g, t->p, &t->ex, e);
    return rc;
}

static void test_sim_errors(void)
{
    iabn_err e = {0};
    /* the pinned pool cannot be had: the executor says so */
    iabn_sim *sim = NULL;
    iabn_sim_opts so = {.host_bytes = 1024};
    CHECK_OK(iabn_sim_open(&so, &sim, &e));
    t_run t = {0};
    int rc = sim_prepare(&t, sim, &e);
    CHECK_MSG(rc == IABN_ENOMEM && strstr(e.msg, "host pool"), "pinned pool failure: %d %s", rc,
              e.msg);
    t_free(&t);
    iabn_sim_close(sim);
    /* a copy fails on the copy thread: the run returns the error */
    for (long nth = 1; nth <= 12; nth += 11) {
        iabn_sim_opts fo = {.fail_copy = nth, .copy_bytes_per_s = 1e9};
        CHECK_OK(iabn_sim_open(&fo, &sim, &e));
        memset(&t, 0, sizeof t);
        CHECK_OK(sim_prepare(&t, sim, &e));
        if (t.ex) {
            iabn_init_params(t.s, IABN_INIT_XAVIER_NORMAL, (iabn_act){IABN_ACT_RELU, 0}, 3, NULL);
            memset(&e, 0, sizeof e);
            rc = iabn_exec_run(t.ex, &e);
            CHECK_MSG(rc == IABN_EDEVICE && strstr(e.msg, "copy of"), "copy %ld failing: %d %s",
                      nth, rc, e.msg);
            /* the next run works again */
            CHECK_OK(iabn_exec_run(t.ex, &e));
        }
        t_free(&t);
        iabn_sim_close(sim);
    }
}

static int build_at(void *ctx, int batch, iabn_store **s, iabn_graph **g, iabn_err *e)
{
    iabn_bn_mode mode = *(iabn_bn_mode *)ctx;
    *s = iabn_store_new_virtual(iabn_backend_cpu(), e);
    if (!*s) return e->code;
    *g = iabn_graph_new(*s, IABN_TRAIN);
    int loss;
    build_cnn(*g, mode, batch, &loss);
    if (!iabn_graph_ok(*g)) return *e = *iabn_graph_error(*g), e->code;
    return iabn_graph_backward(*g, loss, e);
}

/* Over budget: refused from the plan, before the arena is allocated, and
 * the largest batch that fits is found by planning alone. */
static void test_budget_refused(void)
{
    iabn_err e = {0};
    iabn_bn_mode mode = IABN_BN_STANDARD;
    iabn_strategy_opts o = {.allow_offload = 1, .allow_recompute = 1, .lookahead = 1};
    fixed_cost(&o.cost);
    size_t b8 = 0, b16 = 0;
    int fits;
    CHECK_OK(iabn_batch_device_bytes(build_at, &mode, 8, IABN_STORAGE_KEEP, NULL, &b8, &fits, &e));
    CHECK_OK(iabn_batch_device_bytes(build_at, &mode, 16, IABN_STORAGE_KEEP, NULL, &b16, &fits, &e));
    o.budget = (b8 + b16) / 2;
    int best[IABN_STORAGE_NMODES] = {0};
    for (int st = 0; st < IABN_STORAGE_NMODES; st++)
        if (iabn_largest_batch(build_at, &mode, (iabn_storage)st, &o, 256, &best[st], &e))
            CHECK_MSG(0, "largest batch (%s): %s", iabn_storage_name((iabn_storage)st), e.msg);
    CHECK_MSG(best[0] >= 8 && best[0] < 16, "keep: largest batch %d", best[0]);
    CHECK_MSG(best[1] >= best[0] && best[2] > best[0], "largest batch keep %d offload %d auto %d",
              best[0], best[1], best[2]);
    size_t bytes;
    CHECK_OK(iabn_batch_device_bytes(build_at, &mode, best[0], IABN_STORAGE_KEEP, &o, &bytes,
                                     &fits, &e));
    CHECK(fits);
    CHECK_OK(iabn_batch_device_bytes(build_at, &mode, best[0] + 1, IABN_STORAGE_KEEP, &o, &bytes,
                                     &fits, &e));
    CHECK(!fits);
    /* on a sim device of that size, batch 16 is refused by the plan check
     * and nothing beyond the store has been allocated */
    iabn_sim *sim = NULL;
    iabn_sim_opts so = {.device_bytes = o.budget};
    CHECK_OK(iabn_sim_open(&so, &sim, &e));
    iabn_store *s = iabn_store_new(iabn_sim_backend(sim), &e);
    iabn_graph *g = iabn_graph_new(s, IABN_TRAIN);
    int loss;
    build_cnn(g, mode, 16, &loss);
    iabn_plan *p = NULL;
    CHECK_OK(iabn_graph_backward(g, loss, &e));
    CHECK_OK(iabn_graph_finalize(g, &e));
    CHECK_OK(iabn_plan_build(g, NULL, &p, &e));
    iabn_sim_stats st0, st1;
    iabn_sim_get_stats(sim, &st0);
    int rc = p ? iabn_plan_check_budget(g, p, o.budget, &e) : -1;
    CHECK_MSG(rc == IABN_ENOMEM && strstr(e.msg, "over the budget"), "%d %s", rc, e.msg);
    iabn_sim_get_stats(sim, &st1);
    CHECK(st1.device_peak == st0.device_peak);
    iabn_plan_free(p);
    iabn_graph_free(g);
    iabn_store_free(s);
    iabn_sim_close(sim);
}

int main(void)
{
    iabn_set_num_threads(2);
    RUN(test_offload_bit_identical);
    RUN(test_auto_bit_identical);
    RUN(test_auto_near_optimum);
    RUN(test_sim_bit_identical);
    RUN(test_sim_checked);
    RUN(test_bf16_rounding);
    RUN(test_bf16_copies);
    RUN(test_bf16_absorbed);
    RUN(test_sim_errors);
    RUN(test_budget_refused);
    return TEST_END();
}
