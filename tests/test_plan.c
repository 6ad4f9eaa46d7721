/* test_plan.c: the memory planner.
 *  - exact offsets on small hand-built graphs;
 *  - the no-overlap invariant (and lifetime containment, and in-place grants
 *    only where no later reader exists) on many random graphs;
 *  - bit-identical losses and gradients across IABN_PLAN modes and guards;
 *  - the residual-shortcut case gets its copy;
 *  - planning a deep network is fast and allocates nothing of the arena;
 *  - the executor's staged (double-buffered) inputs and the store's SGD step. */
#include <math.h>
#include <time.h>

#include "graph_test_util.h"

/* A kernel-less op: planning only. */
static const iabn_op_def op_t = {.name = "t"};

static int vec(iabn_graph *g, const char *name, int floats)
{
    int s[1] = {floats};
    return iabn_graph_tensor(g, name, IABN_F32, 1, s);
}

static void test_exact_offsets_chain(void)
{
    iabn_store *s = iabn_store_new(iabn_backend_cpu(), NULL);
    iabn_graph *g = iabn_graph_new(s, IABN_EVAL);
    int in = iabn_graph_input(g, "in", IABN_F32, 1, (int[]){16});
    int a = vec(g, "a", 256), b = vec(g, "b", 128), c = vec(g, "c", 256), d = vec(g, "d", 64);
    iabn_graph_node(g, &op_t, "n0", 1, &in, 1, &a, NULL, 0);
    iabn_graph_node(g, &op_t, "n1", 1, &a, 1, &b, NULL, 0);
    iabn_graph_node(g, &op_t, "n2", 1, &b, 1, &c, NULL, 0);
    iabn_graph_node(g, &op_t, "n3", 1, &c, 1, &d, NULL, 0);
    iabn_graph_mark_output(g, d);
    iabn_err e = {0};
    iabn_plan *p = NULL;
    iabn_plan_opts o = {IABN_PLAN_FULL, 0, 64};
    CHECK_OK(iabn_graph_finalize(g, &e));
    CHECK_OK(iabn_plan_build(g, &o, &p, &e));
    if (p) {
        /* a [0,1] and c [2,3] share offset 0; b [1,2] overlaps both: on top */
        CHECK(p->offset[a] == 0);
        CHECK(p->offset[c] == 0);
        CHECK(p->offset[b] == 1024);
        CHECK(p->arena_bytes == 1536);
        CHECK(p->lower_bound == 1536);
        CHECK(p->group[d] == -1); /* outputs live in the io region */
        CHECK_OK(iabn_plan_validate(g, p, &e));
    }
    iabn_plan_free(p);
    iabn_graph_free(g);
    iabn_store_free(s);
}

static void test_exact_offsets_inplace(void)
{
    iabn_store *s = iabn_store_new(iabn_backend_cpu(), NULL);
    iabn_graph *g = iabn_graph_new(s, IABN_EVAL);
    int in = iabn_graph_input(g, "in", IABN_F32, 1, (int[]){16});
    int a = vec(g, "a", 256), b = vec(g, "b", 256), c = vec(g, "c", 256), d = vec(g, "d", 256);
    iabn_graph_node(g, &op_t, "n0", 1, &in, 1, &a, NULL, 0);
    int n1 = iabn_graph_node(g, &op_t, "n1", 1, &a, 1, &b, NULL, 0);
    iabn_graph_inplace(g, n1, 0, 0, 0);              /* granted: a's only reader */
    int n2 = iabn_graph_node(g, &op_t, "n2", 1, &b, 1, &c, NULL, 0);
    iabn_graph_inplace(g, n2, 0, 0, 0);              /* refused: b is read by n3 */
    int bc[2] = {b, c};
    iabn_graph_node(g, &op_t, "n3", 2, bc, 1, &d, NULL, 0);
    iabn_graph_mark_output(g, d);
    iabn_err e = {0};
    iabn_plan *p = NULL;
    iabn_plan_opts o = {IABN_PLAN_FULL, 0, 64};
    CHECK_OK(iabn_graph_finalize(g, &e));
    CHECK_OK(iabn_plan_build(g, &o, &p, &e));
    if (p) {
        CHECK(p->group[b] == p->group[a]);
        CHECK(p->group[c] != p->group[b]);
        CHECK(p->offset[a] == 0 && p->offset[b] == 0);
        CHECK(p->offset[c] == 1024);
        CHECK(p->arena_bytes == 2048);
        CHECK(p->nnotes == 2);
        CHECK(p->notes[0].granted == 1 && p->notes[1].granted == 0);
        CHECK(strstr(p->notes[1].why, "read later") != NULL);
    }
    iabn_plan_free(p);
    iabn_graph_free(g);
    iabn_store_free(s);
}

static unsigned rnd(unsigned *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static void test_random_graphs(void)
{
    int bad = 0;
    for (unsigned trial = 1; trial <= 300; trial++) {
        unsigned r = trial * 2654435761u;
        iabn_store *s = iabn_store_new(iabn_backend_cpu(), NULL);
        iabn_graph *g = iabn_graph_new(s, IABN_EVAL);
        int ts[200], nts = 0;
        ts[nts++] = iabn_graph_input(g, "in", IABN_F32, 1, (int[]){8});
        int nn = 5 + (int)(rnd(&r) % 60);
        for (int i = 0; i < nn; i++) {
            int nin = 1 + (int)(rnd(&r) % 3), ins[3];
            for (int k = 0; k < nin; k++) ins[k] = ts[nts - 1 - (int)(rnd(&r) % (unsigned)(nts < 6 ? nts : 6))];
            int sizes[4] = {16, 64, 100, 1000};
            int sz = rnd(&r) % 3 == 0 ? iabn_graph_t(g, ins[0])->shape[0] : sizes[rnd(&r) % 4];
            char name[16];
            snprintf(name, sizeof name, "t%d", i);
            int o = vec(g, name, sz);
            int n = iabn_graph_node(g, &op_t, name, nin, ins, 1, &o, NULL, 0);
            if (rnd(&r) % 2) iabn_graph_inplace(g, n, 0, (int)(rnd(&r) % (unsigned)nin), 0);
            ts[nts++] = o;
        }
        iabn_graph_mark_output(g, ts[nts - 1]);
        iabn_err e = {0};
        iabn_plan *p = NULL;
        iabn_plan_opts o = {(iabn_plan_mode)(trial % 3), (size_t)(trial % 2) * 32, 64};
        if (iabn_graph_finalize(g, &e) || iabn_plan_build(g, &o, &p, &e) ||
            iabn_plan_validate(g, p, &e)) {
            if (!bad) fprintf(stderr, "trial %u: %s\n", trial, e.msg);
            bad++;
        } else {
            /* every tensor's own lifetime lies inside its group's */
            const int *sched = iabn_graph_schedule(g);
            for (int st = 0; st < iabn_graph_schedule_len(g); st++) {
                const iabn_node *n = iabn_graph_n(g, sched[st]);
                for (int k = 0; k < n->nin; k++) {
                    int x = n->in[k];
                    if (p->group[x] >= 0 && (p->first[p->group[x]] > st || p->last[p->group[x]] < st))
                        bad++;
                }
            }
            /* a granted alias never precedes another reader of its input */
            for (int i = 0; i < p->nnotes; i++) {
                if (!p->notes[i].granted) continue;
                const iabn_node *n = iabn_graph_n(g, p->notes[i].node);
                int x = n->in[p->notes[i].in], pos = -1;
                for (int st = 0; st < iabn_graph_schedule_len(g); st++)
                    if (sched[st] == p->notes[i].node) pos = st;
                for (int st = pos + 1; st < iabn_graph_schedule_len(g); st++) {
                    const iabn_node *m = iabn_graph_n(g, sched[st]);
                    for (int k = 0; k < m->nin; k++) bad += m->in[k] == x;
                }
            }
            if (p->arena_bytes < p->lower_bound) bad++;
        }
        iabn_plan_free(p);
        iabn_graph_free(g);
        iabn_store_free(s);
    }
    CHECK_MSG(bad == 0, "%d random-graph violations", bad);
}

/* Random training graphs: op_rb's backward reads all its inputs and its
 * output gradient, so every forward tensor is saved; random ones are marked
 * OFFLOAD (and some RECOMPUTE).  The plan must keep the no-overlap invariant
 * in the arena and in the host pool, every read must lie inside its
 * buffer's lifetime, an offloaded tensor's device buffer must die before the
 * backward, and its prefetch must come before every backward reader. */
static const iabn_op_def op_rb_bwd = {.name = "rb_bwd"};

static int rb_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    (void)e;
    const iabn_node fw = *iabn_graph_n(g, node);
    int ins[IABN_MAX_IN], nin = 0;
    for (int k = 0; k < fw.nin; k++) ins[nin++] = fw.in[k];
    if (dout[0] >= 0) ins[nin++] = dout[0];
    int outs[IABN_MAX_OUT], nout = 0;
    for (int k = 0; k < fw.nin && nout < IABN_MAX_OUT; k++) {
        const iabn_tensor *x = iabn_graph_t(g, fw.in[k]);
        if (!x->requires_grad || x->kind != IABN_T_ACT) continue;
        char name[IABN_NAME_LEN];
        snprintf(name, sizeof name, "d%d.%d", node, k);
        int shape[1] = {x->shape[0]};
        din[k] = outs[nout++] = iabn_graph_tensor(g, name, IABN_F32, 1, shape);
    }
    if (nout) iabn_graph_node(g, &op_rb_bwd, "rb_bwd", nin, ins, nout, outs, NULL, 0);
    return 0;
}

static const iabn_op_def op_rb = {.name = "rb", .backward = rb_backward};

static void test_random_offload_graphs(void)
{
    int bad = 0, noff = 0;
    for (unsigned trial = 1; trial <= 200; trial++) {
        unsigned r = trial * 2246822519u;
        iabn_store *s = iabn_store_new(iabn_backend_cpu(), NULL);
        iabn_graph *g = iabn_graph_new(s, IABN_TRAIN);
        int w = iabn_graph_param(g, "w", IABN_P_WEIGHT, 1, (int[]){4});
        int ts[80], nts = 0;
        int in = iabn_graph_input(g, "in", IABN_F32, 1, (int[]){8});
        int nn = 4 + (int)(rnd(&r) % 30);
        for (int i = 0; i < nn; i++) {
            int nin = 1 + (int)(rnd(&r) % 3), ins[4];
            for (int k = 0; k < nin; k++)
                ins[k] = nts ? ts[nts - 1 - (int)(rnd(&r) % (unsigned)(nts < 5 ? nts : 5))] : in;
            ins[nin++] = w; /* a parameter: gradients flow everywhere */
            int sizes[4] = {16, 64, 100, 1000};
            char name[16];
            snprintf(name, sizeof name, "t%d", i);
            int o = vec(g, name, sizes[rnd(&r) % 4]);
            int n = iabn_graph_node(g, &op_rb, name, nin, ins, 1, &o, NULL, 0);
            if (rnd(&r) % 3 == 0) iabn_graph_inplace(g, n, 0, 0, 0);
            ts[nts++] = o;
        }
        int one[1] = {1};
        int loss = iabn_graph_tensor(g, "loss", IABN_F32, 1, one);
        int li[2] = {ts[nts - 1], w};
        iabn_graph_node(g, &op_rb, "loss", 2, li, 1, &loss, NULL, 0);
        iabn_graph_mark_output(g, loss);
        iabn_err e = {0};
        iabn_plan *p = NULL;
        if (iabn_graph_backward(g, loss, &e)) {
            bad++;
            fprintf(stderr, "trial %u backward: %s\n", trial, e.msg);
            goto next;
        }
        iabn_graph_set_offload_opts(g, &(iabn_offload_opts){.lookahead = (int)(trial % 3)});
        for (int i = 0; i < nts; i++) {
            unsigned k = rnd(&r) % 4;
            if (k == 0 && iabn_graph_offloadable(g, ts[i])) {
                iabn_graph_set_policy(g, ts[i], IABN_OFFLOAD);
                noff++;
            } else if (k == 1) {
                iabn_graph_set_policy(g, ts[i], IABN_RECOMPUTE);
            }
        }
        iabn_plan_opts o = {(iabn_plan_mode)(trial % 3), (size_t)(trial % 2) * 32, 64};
        if (iabn_graph_finalize(g, &e) || iabn_plan_build(g, &o, &p, &e) ||
            iabn_plan_validate(g, p, &e)) {
            if (!bad) fprintf(stderr, "trial %u: %s\n", trial, e.msg);
            bad++;
            goto next;
        }
        const int *sched = iabn_graph_schedule(g);
        int ns = iabn_graph_schedule_len(g);
        for (int st = 0; st < ns; st++) {
            const iabn_node *n = iabn_graph_n(g, sched[st]);
            for (int k = 0; k < n->nin; k++) {
                int x = n->in[k];
                if (p->group[x] >= 0 && (p->first[p->group[x]] > st || p->last[p->group[x]] < st))
                    bad++;
                /* no backward node reads an offloaded original */
                if (n->phase != IABN_PHASE_FWD && iabn_graph_t(g, x)->policy == IABN_OFFLOAD)
                    bad++;
                /* a host copy is read by its prefetch only, after its offload */
                if (iabn_graph_t(g, x)->kind == IABN_T_HOST &&
                    (n->op != &iabn_op_prefetch || p->first[x] >= st))
                    bad++;
            }
            if (n->op == &iabn_op_offload) {
                int x = n->in[0];
                if (p->last[p->group[x]] >= p->boundary) bad++; /* device copy dies in forward */
                if (p->host_offset[n->out[0]] + iabn_graph_t(g, x)->nbytes > p->host_bytes) bad++;
            }
        }
        if (p->arena_bytes < p->lower_bound) bad++;
    next:
        iabn_plan_free(p);
        iabn_graph_free(g);
        iabn_store_free(s);
    }
    CHECK_MSG(noff > 100, "only %d tensors offloaded over the trials", noff);
    CHECK_MSG(bad == 0, "%d random offload-graph violations", bad);
}

/* A small CNN with every kind of layer, trained for two steps. */
static int build_cnn_on(t_run *t, iabn_bn_mode mode, const iabn_backend *be)
{
    t->s = iabn_store_new(be, NULL);
    t->g = iabn_graph_new(t->s, IABN_TRAIN);
    iabn_graph *g = t->g;
    int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){4, 3, 12, 12});
    int lab = iabn_graph_input(g, "labels", IABN_I32, 1, (int[]){4});
    iabn_norm_act_cfg bn = iabn_norm_act_defaults(mode);
    int h = iabn_conv2d(g, "c1", x, 8, 3, 1, 1, 1, 1, 0);
    h = iabn_norm_act(g, "bn1", h, &bn);
    int sc = iabn_maxpool(g, "pool", h, 3, 2, 1);
    h = iabn_norm_act(g, "bn2", sc, &bn); /* sc is read by the add */
    h = iabn_conv2d(g, "c2", h, 8, 3, 1, 1, 1, 4, 0);
    h = iabn_add_layer(g, "add", h, sc);
    h = iabn_norm_act(g, "bn3", h, &bn);
    h = iabn_dropout2d(g, "drop", h, 0.2f);
    h = iabn_global_avgpool(g, "gap", h);
    h = iabn_linear(g, "fc", h, 5, 1);
    t->loss = iabn_softmax_xent(g, "loss", h, lab, 255, 1.f);
    return 0;
}

static int build_cnn(t_run *t, iabn_bn_mode mode)
{
    return build_cnn_on(t, mode, iabn_backend_cpu());
}

static int run_steps(t_run *t, const iabn_plan_opts *o, float *losses, float **grads)
{
    if (t_prepare(t, o)) return -1;
    iabn_init_params(t->s, IABN_INIT_XAVIER_NORMAL, (iabn_act){IABN_ACT_LEAKY_RELU, 0.01f}, 3, NULL);
    int x = iabn_graph_find(t->g, "input"), lab = iabn_graph_find(t->g, "labels");
    t_fill(iabn_exec_ptr(t->ex, x), 4 * 3 * 12 * 12, 9);
    int32_t *l = iabn_exec_ptr(t->ex, lab);
    for (int i = 0; i < 4; i++) l[i] = i % 5;
    iabn_exec_set_seed(t->ex, 77);
    iabn_exec_set_check(t->ex, o->guard != 0);
    for (int step = 0; step < 2; step++) {
        iabn_err e = {0};
        iabn_store_zero_grads(t->s, NULL);
        if (iabn_exec_run(t->ex, &e)) {
            fprintf(stderr, "run: %s\n", e.msg);
            return -1;
        }
        losses[step] = *(float *)iabn_exec_ptr(t->ex, t->loss);
        for (int i = 0; i < iabn_store_count(t->s); i++) {
            iabn_param *p = iabn_store_get(t->s, i);
            if (p->grad) iabn_sgd_update(p->count, 0.1f, 0.9f, 1e-4f, 1, step == 0, p->data, p->grad,
                                         grads[i]);
        }
    }
    return 0;
}

static void test_modes_bit_identical(void)
{
    for (int mode = 0; mode < IABN_BN_INPLACE_SYNC; mode++) {
        float ref_loss[2] = {0}, **ref = NULL;
        int np = 0;
        for (int pm = 0; pm < 4; pm++) {
            t_run t = {0};
            build_cnn(&t, (iabn_bn_mode)mode);
            iabn_plan_opts o = {(iabn_plan_mode)(pm % 3), pm == 3 ? 128 : 0, 0};
            float loss[2];
            np = 64;
            float **mom = calloc((size_t)np, sizeof *mom);
            for (int i = 0; i < np; i++) mom[i] = calloc(4096, sizeof(float));
            int ok = run_steps(&t, &o, loss, mom) == 0;
            CHECK_MSG(ok, "bn mode %d plan mode %d failed", mode, pm);
            if (ok && pm == 0) {
                memcpy(ref_loss, loss, sizeof loss);
                ref = mom;
                mom = NULL;
            } else if (ok) {
                CHECK_MSG(memcmp(loss, ref_loss, sizeof loss) == 0,
                          "bn %s plan mode %d: loss %.9g vs %.9g", iabn_bn_mode_name(mode), pm,
                          loss[1], ref_loss[1]);
                int same = 1;
                for (int i = 0; i < iabn_store_count(t.s); i++)
                    same &= memcmp(mom[i], ref[i], 4096 * sizeof(float)) == 0;
                CHECK_MSG(same, "bn %s plan mode %d: optimizer state differs",
                          iabn_bn_mode_name(mode), pm);
            }
            if (mom) {
                for (int i = 0; i < np; i++) free(mom[i]);
                free(mom);
            }
            t_free(&t);
        }
        if (ref) {
            for (int i = 0; i < np; i++) free(ref[i]);
            free(ref);
        }
    }
}

static void test_residual_own_buffer(void)
{
    t_run t = {0};
    build_cnn(&t, IABN_BN_INPLACE_II);
    iabn_err e = {0};
    CHECK_OK(iabn_graph_backward(t.g, t.loss, &e));
    CHECK_OK(iabn_graph_finalize(t.g, &e));
    /* bn2 would overwrite its input, which the add reads later: that costs
     * one buffer, counted as a copy, which bn2 writes itself (its op's
     * own_buffer) instead of a copy node before it */
    CHECK(iabn_graph_copies(t.g) == 1);
    int found = 0;
    for (int i = 0; i < iabn_graph_ntensors(t.g); i++)
        found |= strcmp(iabn_graph_t(t.g, i)->name, "pool.copy") == 0;
    CHECK(!found);
    iabn_plan *p = NULL;
    CHECK_OK(iabn_plan_build(t.g, NULL, &p, &e));
    int seen = 0;
    for (int i = 0; p && i < iabn_graph_schedule_len(t.g); i++) {
        const iabn_node *n = iabn_graph_n(t.g, iabn_graph_schedule(t.g)[i]);
        if (n->phase != IABN_PHASE_FWD || strcmp(n->name, "bn2") != 0) continue;
        seen = 1;
        CHECK_MSG(n->inplace[0] < 0 && p->group[n->out[0]] != p->group[n->in[0]],
                  "bn2 writes over its input, which the add reads later");
    }
    CHECK(seen);
    iabn_plan_free(p);
    t_free(&t);
    build_cnn(&t, IABN_BN_STANDARD);
    CHECK_OK(iabn_graph_backward(t.g, t.loss, &e));
    CHECK_OK(iabn_graph_finalize(t.g, &e));
    CHECK(iabn_graph_copies(t.g) == 0);
    t_free(&t);
}

static void test_deep_plan_fast(void)
{
    /* 150 conv + BN units at batch 64: planning must take well under a second */
    iabn_store *s = iabn_store_new(iabn_backend_cpu(), NULL);
    iabn_graph *g = iabn_graph_new(s, IABN_TRAIN);
    int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){64, 16, 28, 28});
    int lab = iabn_graph_input(g, "labels", IABN_I32, 1, (int[]){64});
    iabn_norm_act_cfg bn = iabn_norm_act_defaults(IABN_BN_INPLACE_II);
    int h = x;
    for (int i = 0; i < 150; i++) {
        char n1[32], n2[32];
        snprintf(n1, sizeof n1, "c%d", i);
        snprintf(n2, sizeof n2, "b%d", i);
        h = iabn_conv2d(g, n1, h, 16, 3, 1, 1, 1, 4, 0);
        h = iabn_norm_act(g, n2, h, &bn);
    }
    h = iabn_global_avgpool(g, "gap", h);
    h = iabn_linear(g, "fc", h, 10, 1);
    int loss = iabn_softmax_xent(g, "loss", h, lab, 255, 1.f);
    iabn_err e = {0};
    clock_t c0 = clock();
    iabn_plan *p = NULL;
    int rc = iabn_graph_backward(g, loss, &e);
    if (!rc) rc = iabn_graph_finalize(g, &e);
    if (!rc) rc = iabn_plan_build(g, NULL, &p, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    double sec = (double)(clock() - c0) / CLOCKS_PER_SEC;
    CHECK_MSG(sec < 1.0, "planning took %.3f s", sec);
    if (p) CHECK((double)p->arena_bytes <= 1.05 * (double)p->lower_bound);
    iabn_plan_free(p);
    iabn_graph_free(g);
    iabn_store_free(s);
}


/* ---- staged inputs: the double-buffering of iabn_exec_stage, on a CPU
 * backend given (synchronous) copy-stream hooks that count their calls ---- */

typedef struct hook_count {
    int events, records, waits, copies, live_events;
} hook_count;

static hook_count hooks;

static void *hk_event_new(void *ctx)
{
    (void)ctx;
    hooks.events++;
    hooks.live_events++;
    return malloc(1);
}
static void hk_event_free(void *ctx, void *ev)
{
    (void)ctx;
    hooks.live_events--;
    free(ev);
}
static int hk_record(void *ctx, void *ev)
{
    (void)ctx, (void)ev;
    hooks.records++;
    return 0;
}
static int hk_wait(void *ctx, void *ev)
{
    (void)ctx, (void)ev;
    hooks.waits++;
    return 0;
}
static int hk_h2d_async(void *ctx, void *dst, const void *src, size_t bytes, void *after,
                        void *done)
{
    (void)ctx, (void)after, (void)done;
    hooks.copies++;
    memcpy(dst, src, bytes);
    return 0;
}

static void staged_inputs(int k, float *x, int32_t *lab)
{
    t_fill(x, 4 * 3 * 12 * 12, 100u + (unsigned)k);
    for (int i = 0; i < 4; i++) lab[i] = (i + k) % 5;
}

static void test_exec_staging(void)
{
    iabn_backend hb = *iabn_backend_cpu();
    hb.event_new = hk_event_new;
    hb.event_free = hk_event_free;
    hb.record = hk_record;
    hb.wait = hk_wait;
    hb.h2d_async = hk_h2d_async;
    memset(&hooks, 0, sizeof hooks);
    enum { STEPS = 4 };
    float loss[2][STEPS];
    float xin[4 * 3 * 12 * 12];
    int32_t lab[4];
    void *xptr[STEPS];
    for (int side = 0; side < 2; side++) {
        t_run t = {0};
        build_cnn_on(&t, IABN_BN_INPLACE_II, side ? &hb : iabn_backend_cpu());
        CHECK(t_prepare(&t, NULL) == 0);
        if (!t.ex) return;
        iabn_init_params(t.s, IABN_INIT_XAVIER_NORMAL, (iabn_act){IABN_ACT_LEAKY_RELU, 0.01f}, 3,
                         NULL);
        int x = iabn_graph_find(t.g, "input"), l = iabn_graph_find(t.g, "labels");
        iabn_exec_set_seed(t.ex, 5);
        iabn_err e = {0};
        iabn_sgd_opts so = {.lr = {0.05f, 0.1f}, .momentum = 0.9f, .weight_decay = 1e-4f,
                            .nesterov = 1, .grad_scale = 1.f};
        if (side) { /* the trainer's order: the next batch is staged while one runs */
            staged_inputs(0, xin, lab);
            CHECK_OK(iabn_exec_stage(t.ex, x, xin, sizeof xin, &e));
            CHECK_OK(iabn_exec_stage(t.ex, l, lab, sizeof lab, &e));
            CHECK(iabn_exec_stage(t.ex, x, xin, sizeof xin, &e) == IABN_EINVAL);
            CHECK(strstr(e.msg, "not been consumed") != NULL);
        }
        for (int k = 0; k < STEPS; k++) {
            if (!side) {
                staged_inputs(k, xin, lab);
                CHECK_OK(iabn_exec_set(t.ex, x, xin, sizeof xin, &e));
                CHECK_OK(iabn_exec_set(t.ex, l, lab, sizeof lab, &e));
            }
            CHECK_OK(iabn_exec_run(t.ex, &e));
            if (side) {
                xptr[k] = iabn_exec_ptr(t.ex, x);
                if (k + 1 < STEPS) {
                    staged_inputs(k + 1, xin, lab);
                    CHECK_OK(iabn_exec_stage(t.ex, x, xin, sizeof xin, &e));
                    CHECK_OK(iabn_exec_stage(t.ex, l, lab, sizeof lab, &e));
                }
            }
            CHECK_OK(iabn_exec_get(t.ex, t.loss, &loss[side][k], sizeof(float), &e));
            CHECK_OK(iabn_store_sgd_step(t.s, &so, NULL, &e));
        }
        if (side) {
            CHECK(iabn_exec_staging_bytes(t.ex) == sizeof xin + sizeof lab);
            /* two buffers, alternating */
            CHECK(xptr[0] != xptr[1] && xptr[0] == xptr[2] && xptr[1] == xptr[3]);
            CHECK(hooks.copies == 2 * STEPS && hooks.waits == 2 * STEPS);
            CHECK(hooks.records == 2 * STEPS && hooks.events == 6);
            /* an input of the graph only: a parameter cannot be staged */
            int w = iabn_graph_find(t.g, "c1.weight");
            if (w >= 0) CHECK(iabn_exec_stage(t.ex, w, xin, 4, &e) == IABN_EINVAL);
        }
        t_free(&t);
    }
    CHECK(hooks.live_events == 0);
    for (int k = 0; k < STEPS; k++)
        CHECK_MSG(memcmp(&loss[0][k], &loss[1][k], sizeof(float)) == 0,
                  "step %d: staged loss %.9g vs set %.9g", k, loss[1][k], loss[0][k]);
}

/* iabn_store_sgd_step against the per-parameter kernel it wraps: scaling,
 * the two learning-rate groups and the reported norm. */
static void test_sgd_step(void)
{
    t_run t = {0};
    build_cnn(&t, IABN_BN_STANDARD);
    CHECK(t_prepare(&t, NULL) == 0);
    if (!t.ex) return;
    iabn_init_params(t.s, IABN_INIT_XAVIER_NORMAL, (iabn_act){IABN_ACT_LEAKY_RELU, 0.01f}, 3, NULL);
    int n = iabn_store_count(t.s);
    float **w = calloc((size_t)n, sizeof *w), **g = calloc((size_t)n, sizeof *g);
    double sq = 0;
    int frozen = -1; /* one frozen parameter: not updated, its gradient zeroed too */
    for (int i = 0; i < n; i++) {
        iabn_param *p = iabn_store_get(t.s, i);
        p->lr_group = strncmp(p->name, "fc", 2) == 0;
        if (!p->grad) continue;
        if (frozen < 0) p->frozen = 1, frozen = i;
        t_fill(p->grad, p->count, 40u + (unsigned)i);
        w[i] = malloc(p->count * sizeof(float));
        g[i] = malloc(p->count * sizeof(float));
        memcpy(w[i], p->data, p->count * sizeof(float));
        for (size_t k = 0; k < p->count && i != frozen; k++) {
            g[i][k] = p->grad[k] * 0.5f;
            sq += (double)g[i][k] * g[i][k];
        }
    }
    iabn_sgd_opts so = {.lr = {0.01f, 0.2f}, .momentum = 0.9f, .weight_decay = 1e-3f,
                        .grad_scale = 0.5f, .clip = 0};
    double norm = 0;
    iabn_err e = {0};
    CHECK_OK(iabn_store_sgd_step(t.s, &so, &norm, &e));
    CHECK(fabs(norm - sqrt(sq)) <= 1e-9 * sqrt(sq));
    int bad = 0;
    for (int i = 0; i < n; i++) {
        iabn_param *p = iabn_store_get(t.s, i);
        if (!p->grad) continue;
        float *buf = malloc(p->count * sizeof(float));
        if (i != frozen)
            iabn_sgd_update(p->count, p->lr_group ? 0.2f : 0.01f, 0.9f, 1e-3f, 0, 1, w[i], g[i],
                            buf);
        bad += memcmp(w[i], p->data, p->count * sizeof(float)) != 0;
        for (size_t k = 0; k < p->count; k++) bad += p->grad[k] != 0.f; /* zeroed */
        free(buf);
        free(w[i]);
        free(g[i]);
    }
    CHECK_MSG(bad == 0, "%d parameters differ from iabn_sgd_update", bad);
    free(w);
    free(g);
    t_free(&t);
}

/* A non-finite gradient stops the step before any update, and the error
 * names its parameter: the last trainable one here, with a frozen one (not
 * asked about) before it. */
static void test_sgd_nonfinite(void)
{
    t_run t = {0};
    build_cnn(&t, IABN_BN_STANDARD);
    CHECK(t_prepare(&t, NULL) == 0);
    if (!t.ex) return;
    int n = iabn_store_count(t.s), first = -1, last = -1;
    for (int i = 0; i < n; i++) {
        iabn_param *p = iabn_store_get(t.s, i);
        if (!p->grad) continue;
        if (first < 0) p->frozen = 1, first = i;
        else last = i;
        t_fill(p->grad, p->count, 60u + (unsigned)i);
    }
    CHECK(last > first && first >= 0);
    if (last < 0) {
        t_free(&t);
        return;
    }
    iabn_param *bad = iabn_store_get(t.s, last);
    bad->grad[bad->count - 1] = NAN;
    float w0 = bad->data[0];
    iabn_sgd_opts so = {.lr = {0.1f, 0.1f}, .momentum = 0.9f, .grad_scale = 1.f};
    iabn_err e = {0};
    CHECK(iabn_store_sgd_step(t.s, &so, NULL, &e) == IABN_ENUM);
    CHECK_MSG(strstr(e.msg, bad->name) && strstr(e.msg, "not finite"), "%s", e.msg);
    CHECK(bad->data[0] == w0);
    t_free(&t);
}

int main(void)
{
    iabn_set_num_threads(2);
    RUN(test_exact_offsets_chain);
    RUN(test_exact_offsets_inplace);
    RUN(test_random_graphs);
    RUN(test_random_offload_graphs);
    RUN(test_residual_own_buffer);
    RUN(test_modes_bit_identical);
    RUN(test_deep_plan_fast);
    RUN(test_exec_staging);
    RUN(test_sgd_step);
    RUN(test_sgd_nonfinite);
    return TEST_END();
}
