/* test_dist.c: data-parallel training driven through graphs directly (issue
 * 14).  Meant for `mpirun -np 2`; under one process the multi-rank checks
 * compare a one-rank job against itself and only the world-size-1 checks
 * carry weight.
 *
 * Each rank builds a small conv / BN / linear / cross-entropy net on its own
 * share of a fixed global batch, with the graph's communicator set and the
 * gradient all-reduce added as buckets (tiny ones, so there are several),
 * and also, in-process, the same net on the whole batch without a
 * communicator: the reference.  After 20 SGD steps
 *   - sync II, sync I and synchronised standard BN on equal shares (4+4) and
 *     on unequal ones (3+5) give the reference's weights and running
 *     statistics (relative error <= 1e-5);
 *   - unsynchronised BN on 2 ranks does not (the check that sync is real);
 *   - on one process, each sync mode equals its unsynchronised mode bit for
 *     bit. */
#include "iabn.h"
#include "test_util.h"

enum { B = 8, C_IN = 3, HW = 6, K = 4, STEPS = 20 };

static iabn_comm *comm;

static float frand(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xFFFF) / 32768.f - 1.f;
}

/* The global batch: identical on every rank. */
static void make_batch(int step, float *x, int32_t *y)
{
    unsigned s = 12345u + 977u * (unsigned)step;
    for (int i = 0; i < B * C_IN * HW * HW; i++) x[i] = frand(&s) + 0.3f;
    for (int i = 0; i < B; i++) y[i] = (int32_t)((unsigned)(frand(&s) * 1000.f + 1000.f) % K);
}

typedef struct net {
    iabn_store *s;
    iabn_graph *g;
    iabn_plan *p;
    iabn_exec *ex;
    int x, y, loss;
} net;

static int build(net *m, int n, iabn_bn_mode mode, iabn_comm *c)
{
    iabn_err e = {0};
    memset(m, 0, sizeof *m);
    m->s = iabn_store_new(iabn_backend_cpu(), &e);
    m->g = iabn_graph_new(m->s, IABN_TRAIN);
    iabn_graph_set_comm(m->g, c);
    iabn_graph *g = m->g;
    m->x = iabn_graph_input(g, "x", IABN_F32, 4, (int[]){n, C_IN, HW, HW});
    m->y = iabn_graph_input(g, "y", IABN_I32, 1, (int[]){n});
    iabn_norm_act_cfg bn = iabn_norm_act_defaults(mode);
    int h = iabn_conv2d(g, "c1", m->x, 8, 3, 1, 1, 1, 1, 0);
    h = iabn_norm_act(g, "b1", h, &bn);
    h = iabn_conv2d(g, "c2", h, 8, 3, 2, 1, 1, 1, 0);
    h = iabn_norm_act(g, "b2", h, &bn);
    h = iabn_global_avgpool(g, "pool", h);
    h = iabn_linear(g, "fc", h, K, 1);
    m->loss = iabn_softmax_xent(g, "loss", h, m->y, -1, 1.f);
    if (!iabn_graph_ok(g)) {
        fprintf(stderr, "build: %s\n", iabn_graph_error(g)->msg);
        return -1;
    }
    if (iabn_graph_backward(g, m->loss, &e) || iabn_graph_finalize(g, &e) ||
        (c && iabn_graph_grad_buckets(g, 1024, &e)) || iabn_plan_build(g, NULL, &m->p, &e) ||
        iabn_plan_validate(g, m->p, &e) || iabn_exec_new(g, m->p, &m->ex, &e) ||
        iabn_init_params(m->s, IABN_INIT_KAIMING_NORMAL, bn.act, 7, &e)) {
        fprintf(stderr, "prepare: %s\n", e.msg);
        return -1;
    }
    return 0;
}

static void drop(net *m)
{
    iabn_exec_free(m->ex);
    iabn_plan_free(m->p);
    iabn_graph_free(m->g);
    iabn_store_free(m->s);
}

/* 20 SGD steps on samples [off, off+n) of each global batch. */
static int train(net *m, int off, int n)
{
    iabn_err e = {0};
    float x[B * C_IN * HW * HW];
    int32_t y[B];
    iabn_sgd_opts o = {{0.1f, 0.1f}, 0.9f, 1e-4f, 0, 1.f, 0.f};
    size_t per = (size_t)C_IN * HW * HW;
    for (int step = 0; step < STEPS; step++) {
        make_batch(step, x, y);
        if (iabn_exec_set(m->ex, m->x, x + per * (size_t)off, per * (size_t)n * 4, &e) ||
            iabn_exec_set(m->ex, m->y, y + off, (size_t)n * 4, &e) || iabn_exec_run(m->ex, &e) ||
            iabn_store_sgd_step(m->s, &o, NULL, &e)) {
            fprintf(stderr, "step %d: %s\n", step, e.msg);
            return -1;
        }
    }
    return 0;
}

/* Largest relative difference (L2 over each tensor) between two stores. */
static double store_diff(iabn_store *a, iabn_store *b)
{
    double worst = 0;
    for (int i = 0; i < iabn_store_count(a); i++) {
        const iabn_param *p = iabn_store_get(a, i);
        int j = iabn_store_find(b, p->name);
        if (j < 0) return 1e9;
        const iabn_param *q = iabn_store_get(b, j);
        double d = 0, r = 0;
        for (size_t k = 0; k < p->count; k++) {
            double t = (double)p->data[k] - q->data[k];
            d += t * t;
            r += (double)q->data[k] * q->data[k];
        }
        double rel = r > 0 ? sqrt(d / r) : sqrt(d);
        if (rel > worst) worst = rel;
    }
    return worst;
}

/* The job's largest difference to the one-process reference. */
static double job_vs_reference(iabn_bn_mode mode, const int *counts)
{
    int rank = iabn_comm_rank(comm), world = iabn_comm_size(comm);
    int off = 0, n = B;
    if (world == 2) {
        off = rank == 0 ? 0 : counts[0];
        n = counts[rank];
    }
    net d, r;
    double diff = 1e9;
    if (build(&d, n, mode, comm) == 0 && build(&r, B, mode, NULL) == 0 && train(&d, off, n) == 0 &&
        train(&r, 0, B) == 0)
        diff = store_diff(d.s, r.s);
    drop(&d);
    drop(&r);
    /* the worst rank decides */
    iabn_err e = {0};
    double all = diff;
    if (iabn_comm_size(comm) > 1) {
        double v[2];
        iabn_comm_allgather(comm, &diff, v, sizeof diff, "diff", &e);
        all = v[0] > v[1] ? v[0] : v[1];
    }
    return all;
}

static void test_sync_equals_one_rank(void)
{
    static const iabn_bn_mode modes[] = {IABN_BN_INPLACE_SYNC, IABN_BN_INPLACE_SYNC_I,
                                         IABN_BN_STANDARD_SYNC};
    static const int shares[][2] = {{4, 4}, {3, 5}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        for (size_t k = 0; k < 2; k++) {
            double d = job_vs_reference(modes[i], shares[k]);
            CHECK_MSG(d <= 1e-5, "%s on %d+%d: relative error %.3g", iabn_bn_mode_name(modes[i]),
                      shares[k][0], shares[k][1], d);
        }
}

static void test_unsynced_differs(void)
{
    if (iabn_comm_size(comm) != 2) return;
    double d = job_vs_reference(IABN_BN_INPLACE_II, (const int[]){4, 4});
    CHECK_MSG(d > 1e-4, "unsynchronised BN on 2 ranks matched one rank (%.3g): sync proves nothing",
              d);
}

/* World size 1: each sync mode is its unsynchronised mode, bit for bit. */
static void test_world_one_is_unsynced(void)
{
    static const iabn_bn_mode pairs[][2] = {{IABN_BN_INPLACE_SYNC, IABN_BN_INPLACE_II},
                                            {IABN_BN_INPLACE_SYNC_I, IABN_BN_INPLACE},
                                            {IABN_BN_STANDARD_SYNC, IABN_BN_STANDARD}};
    iabn_comm *one = NULL;
    iabn_err e = {0};
    iabn_comm_opts o = {0, 1};
    CHECK_OK(iabn_comm_new(&o, &one, &e));
    for (size_t i = 0; i < 3; i++) {
        net a, b;
        int ok = build(&a, B, pairs[i][0], one) == 0 && build(&b, B, pairs[i][1], NULL) == 0 &&
                 train(&a, 0, B) == 0 && train(&b, 0, B) == 0;
        CHECK(ok);
        if (ok) CHECK_MSG(store_diff(a.s, b.s) == 0.0, "%s", iabn_bn_mode_name(pairs[i][0]));
        drop(&a);
        drop(&b);
    }
    iabn_comm_free(one);
}

/* The sampler: disjoint shards; with drop_last the ranks' step t together is
 * the one-process step t of a world-times-larger batch, and every rank runs
 * the same number of steps; without it every sample is read exactly once. */
static void test_sampler(void)
{
    enum { N = 37, BATCH = 4 };
    int64_t perm[N], perm2[N], order[N];
    iabn_sampler_perm(N, 5, 3, 1, perm);
    iabn_sampler_perm(N, 5, 3, 1, perm2);
    CHECK(memcmp(perm, perm2, sizeof perm) == 0);
    iabn_sampler_perm(N, 5, 4, 1, perm2);
    CHECK(memcmp(perm, perm2, sizeof perm) != 0);
    for (int world = 1; world <= 3; world++)
        for (int drop = 0; drop <= 1; drop++) {
            int seen[N] = {0};
            int64_t steps = iabn_sampler_batches(N, 0, world, BATCH, drop);
            for (int r = 0; r < world; r++) {
                int64_t per = iabn_sampler_shard(perm, N, r, world, drop, order);
                if (drop) CHECK(iabn_sampler_batches(N, r, world, BATCH, drop) == steps);
                for (int64_t k = 0; k < per; k++) {
                    seen[order[k]]++;
                    /* in step k / BATCH, at a position of the big batch's window */
                    int64_t pos = r + k * world, step = k / BATCH;
                    if (drop && step < steps)
                        CHECK(pos / (BATCH * world) == step);
                }
            }
            int once = 1, covered = 0;
            for (int i = 0; i < N; i++) {
                once &= seen[i] <= 1;
                covered += seen[i];
            }
            CHECK(once);
            CHECK(covered == (drop ? N / world * world : N));
        }
    CHECK(iabn_sampler_batches(N, 0, 2, BATCH, 1) * 2 * BATCH ==
          iabn_sampler_batches(N, 0, 1, 2 * BATCH, 1) * 2 * BATCH);
}

int main(void)
{
    iabn_err e = {0};
    if (iabn_comm_new(NULL, &comm, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    RUN(test_sampler);
    RUN(test_world_one_is_unsynced);
    RUN(test_sync_equals_one_rank);
    RUN(test_unsynced_differs);
    int rc = TEST_END();
    iabn_comm_free(comm);
    return rc;
}
