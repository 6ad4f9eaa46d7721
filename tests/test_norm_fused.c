/* test_norm_fused.c: a training pass's two halves in one call
 * (cpu/norm_act.h: iabn_bn_fwd_train, iabn_bn_act_bwd_train,
 * iabn_iabn_bwd_train) against the two calls they stand for.
 *
 * Every output must be the same bits, with the outputs written over their
 * inputs as the layers do (z over x, dx over dz), in NCHW, nChw16c and
 * nChw8c, at shapes the group-by-group path takes (return 1) and ones it
 * declines (too few channel groups: return 0), on one thread and two.  The identity act must
 * also give the plain BN pair's bits (the layer routes plain BN through it).
 */
#include "tensor/tensor.h"
#include "test_util.h"

#include <string.h>

#define EPS 1e-5f

typedef struct {
    int n, c, hw;
    iabn_layout layout;
    int fuses; /* what the functions must return at two threads */
} shape;

static const shape shapes[] = {
    {4, 64, 49, IABN_LAYOUT_NCHW, 1},      /* 64 groups of one channel */
    {4, 128, 196, IABN_LAYOUT_NCHW16C, 1}, /* 8 groups of 16 */
    {3, 16, 300, IABN_LAYOUT_NCHW16C, 0},  /* one group: too few for the threads */
    {4, 128, 196, IABN_LAYOUT_NCHW8C, 1},  /* 16 groups of 8 */
    {2, 72, 49, IABN_LAYOUT_NCHW8C, 1},    /* 9 groups, planes ending in half a block */
    {3, 24, 300, IABN_LAYOUT_NCHW8C, 0},   /* 3 groups: too few for the threads */
};

static const iabn_act acts[] = {
    {IABN_ACT_IDENTITY, 0.f}, {IABN_ACT_LEAKY_RELU, 0.01f}, {IABN_ACT_ELU, 1.0f}};

static float *fa(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static int same(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof *a); }

static void fill(float *v, size_t n, uint64_t seed, float scale, float shift)
{
    for (size_t i = 0; i < n; i++) v[i] = shift + scale * iabn_rng_normal(seed, 1, i);
}

static void one_shape(const shape *s, int threads)
{
    const int n = s->n, c = s->c, hw = s->hw;
    const iabn_layout L = s->layout;
    const size_t cnt = (size_t)n * c * hw;
    const int want = threads == 1 ? -1 : s->fuses; /* one thread: whichever it takes */
    float *x = fa(cnt), *dz = fa(cnt), *z = fa(cnt), *zf = fa(cnt), *dx = fa(cnt), *dxf = fa(cnt);
    float *g = fa(c), *b = fa(c), *m = fa(c), *v = fa(c), *mf = fa(c), *vf = fa(c);
    float *s0 = fa(c), *s1 = fa(c), *t0 = fa(c), *t1 = fa(c);
    fill(x, cnt, 11, 1.5f, 0.7f);
    fill(dz, cnt, 12, 1.f, 0.f);
    fill(g, c, 13, 0.5f, 1.f);
    fill(b, c, 14, 0.3f, 0.f);
    iabn_set_num_threads(threads);
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) {
        const iabn_act act = acts[a];
        /* forward, z over x */
        iabn_bn_stats(n, c, hw, L, x, m, v);
        iabn_norm_act_fwd(n, c, hw, L, x, m, v, EPS, g, b, 1, act, z, NULL);
        memcpy(zf, x, cnt * sizeof *x);
        int r = iabn_bn_fwd_train(n, c, hw, L, zf, EPS, g, b, 1, act, mf, vf, zf);
        CHECK_MSG(want < 0 || r == want, "fwd %dx%dx%d: returned %d", n, c, hw, r);
        CHECK_MSG(same(m, mf, c) && same(v, vf, c) && same(z, zf, cnt),
                  "fwd %dx%dx%d act %d: not the two calls' bits", n, c, hw, (int)act.kind);
        /* standard backward with the act folded in, dx over dz */
        iabn_bn_act_bwd_reduce(n, c, hw, L, x, dz, act, m, v, EPS, g, b, 0, s0, s1);
        iabn_bn_act_bwd_apply(n, c, hw, L, x, dz, act, m, v, EPS, g, b, 0, s0, s1,
                              (double)n * hw, dx);
        memcpy(dxf, dz, cnt * sizeof *dz);
        r = iabn_bn_act_bwd_train(n, c, hw, L, x, dxf, act, m, v, EPS, g, b, 0, t0, t1, dxf);
        CHECK_MSG(want < 0 || r == want, "bn bwd %dx%dx%d: returned %d", n, c, hw, r);
        CHECK_MSG(same(s0, t0, c) && same(s1, t1, c) && same(dx, dxf, cnt),
                  "bn bwd %dx%dx%d act %d: not the two calls' bits", n, c, hw, (int)act.kind);
        if (act.kind == IABN_ACT_IDENTITY) { /* = the plain pair */
            iabn_bn_bwd_reduce(n, c, hw, L, x, dz, m, v, EPS, s0, s1);
            iabn_bn_bwd_apply(n, c, hw, L, x, dz, m, v, EPS, g, 0, s0, s1, (double)n * hw, 1, dx);
            CHECK_MSG(same(s0, t0, c) && same(s1, t1, c) && same(dx, dxf, cnt),
                      "bn bwd %dx%dx%d: the identity is not plain BN", n, c, hw);
        }
        /* in-place ABN backward from the forward's z, dx over dz */
        for (int variant = 1; variant <= 2 && act.kind != IABN_ACT_IDENTITY; variant++) {
            iabn_iabn_bwd_reduce(variant, n, c, hw, L, z, dz, EPS, g, b, act, s0, s1);
            iabn_iabn_bwd_apply(variant, n, c, hw, L, z, dz, v, EPS, g, b, 1, act, s0, s1,
                                (double)n * hw, 1, dx);
            memcpy(dxf, dz, cnt * sizeof *dz);
            r = iabn_iabn_bwd_train(variant, n, c, hw, L, z, dxf, v, EPS, g, b, 1, act, t0, t1,
                                    dxf);
            CHECK_MSG(want < 0 || r == want, "iabn bwd %dx%dx%d: returned %d", n, c, hw, r);
            CHECK_MSG(same(s0, t0, c) && same(s1, t1, c) && same(dx, dxf, cnt),
                      "iabn %d bwd %dx%dx%d act %d: not the two calls' bits", variant, n, c, hw,
                      (int)act.kind);
        }
    }
    free(x), free(dz), free(z), free(zf), free(dx), free(dxf);
    free(g), free(b), free(m), free(v), free(mf), free(vf);
    free(s0), free(s1), free(t0), free(t1);
}

static void test_same_bits(void)
{
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        one_shape(&shapes[k], 2);
        one_shape(&shapes[k], 1);
    }
    iabn_set_num_threads(2);
}

/* Empty shapes: the statistics are zeros, nothing else is touched. */
static void test_empty(void)
{
    float m[3] = {1, 1, 1}, v[3] = {1, 1, 1}, g[3] = {1, 1, 1}, b[3] = {0, 0, 0}, z = 5.f;
    iabn_act act = {IABN_ACT_LEAKY_RELU, 0.01f};
    CHECK(iabn_bn_fwd_train(0, 3, 4, IABN_LAYOUT_NCHW, &z, EPS, g, b, 1, act, m, v, &z) == 0);
    CHECK(m[0] == 0.f && v[2] == 0.f && z == 5.f);
    float s0[3] = {1, 1, 1}, s1[3] = {1, 1, 1};
    CHECK(iabn_bn_act_bwd_train(2, 3, 0, IABN_LAYOUT_NCHW, &z, &z, act, m, v, EPS, g, b, 1, s0,
                                s1, &z) == 0);
    CHECK(s0[1] == 0.f && s1[1] == 0.f && z == 5.f);
}

int main(void)
{
    RUN(test_same_bits);
    RUN(test_empty);
    return TEST_END();
}
