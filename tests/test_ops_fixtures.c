/* test_ops_fixtures.c: the op kernels of cpu/ops.h against PyTorch 1.13.
 *
 * tests/fixtures/make_ops_fixtures.py wrote ops.safetensors (bilinear
 * resize, max pool, global average pool, cross-entropy with ignore index and
 * bootstrapping, SGD with Nesterov momentum and weight decay); every tensor
 * here is recomputed by our kernels and compared at ~1e-5 relative.
 * Usage: test_ops_fixtures [ops.safetensors]
 */
#include "tensor/tensor.h"
#include "test_util.h"

#include <stdint.h>

/* the layout of every kernel call here (test_layout_kernels.c covers nChw16c) */
#define NCHW IABN_LAYOUT_NCHW

#ifndef OPS_FIXTURE
#define OPS_FIXTURE "tests/fixtures/ops.safetensors"
#endif

static iabn_st_file *fx;

/* The named tensor, checked for dtype and element count; NULL (and a failed
 * check) if it is missing. */
static const void *get(const char *name, int dtype, size_t count, const iabn_st_tensor **tp)
{
    const iabn_st_tensor *t = iabn_st_find(fx, name);
    CHECK_MSG(t != NULL, "%s missing", name);
    if (!t) return NULL;
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    CHECK_MSG(t->dtype == dtype, "%s dtype", name);
    CHECK_MSG(count == 0 || n == count, "%s has %zu elements, want %zu", name, n, count);
    if (tp) *tp = t;
    return t->dtype == dtype && (count == 0 || n == count) ? t->data : NULL;
}

static const float *getf(const char *name, size_t count, const iabn_st_tensor **tp)
{
    return get(name, IABN_F32, count, tp);
}

static void compare(const char *what, const float *got, const float *want, size_t n)
{
    double e = t_max_err(got, want, n, 1e-6, 1e-5);
    CHECK_MSG(e <= 1.0, "%s: worst error ratio %g", what, e);
}

static float *falloc(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof *p);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static void test_bilinear(void)
{
    for (int c = 0;; c++) {
        char name[64];
        snprintf(name, sizeof name, "bilinear%d.x", c);
        if (!iabn_st_find(fx, name)) {
            CHECK_MSG(c >= 4, "only %d bilinear cases", c);
            break;
        }
        const iabn_st_tensor *tx, *ty;
        const float *x = getf(name, 0, &tx);
        snprintf(name, sizeof name, "bilinear%d.y", c);
        const float *y = getf(name, 0, &ty);
        if (!x || !y || tx->ndim != 4 || ty->ndim != 4) return;
        int n = (int)tx->shape[0], ch = (int)tx->shape[1], hi = (int)tx->shape[2];
        int wi = (int)tx->shape[3], ho = (int)ty->shape[2], wo = (int)ty->shape[3];
        size_t nx = (size_t)n * ch * hi * wi, ny = (size_t)n * ch * ho * wo;
        snprintf(name, sizeof name, "bilinear%d.dy", c);
        const float *dy = getf(name, ny, NULL);
        snprintf(name, sizeof name, "bilinear%d.dx", c);
        const float *dx = getf(name, nx, NULL);
        if (!dy || !dx) return;
        float *yo = falloc(ny), *dxo = falloc(nx);
        iabn_bilinear_fwd(n, ch, hi, wi, NCHW, ho, wo, x, yo);
        iabn_bilinear_bwd(n, ch, hi, wi, NCHW, ho, wo, dy, dxo);
        snprintf(name, sizeof name, "bilinear%d %dx%d->%dx%d fwd", c, hi, wi, ho, wo);
        compare(name, yo, y, ny);
        snprintf(name, sizeof name, "bilinear%d %dx%d->%dx%d bwd", c, hi, wi, ho, wo);
        compare(name, dxo, dx, nx);
        free(yo), free(dxo);
    }
}

static void test_maxpool(void)
{
    const iabn_st_tensor *tx, *ty;
    const float *x = getf("maxpool.x", 0, &tx), *y = getf("maxpool.y", 0, &ty);
    if (!x || !y) return;
    int n = (int)tx->shape[0], c = (int)tx->shape[1], h = (int)tx->shape[2];
    int w = (int)tx->shape[3];
    int ho = iabn_pool_out(h, 3, 2, 1), wo = iabn_pool_out(w, 3, 2, 1);
    CHECK(ho == ty->shape[2] && wo == ty->shape[3]);
    size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * ho * wo;
    const int32_t *am = get("maxpool.argmax", IABN_I32, ny, NULL);
    const float *dy = getf("maxpool.dy", ny, NULL), *dx = getf("maxpool.dx", nx, NULL);
    if (!am || !dy || !dx) return;
    float *yo = falloc(ny), *dxo = falloc(nx);
    int32_t *amo = malloc(ny * sizeof *amo);
    iabn_maxpool_fwd(n, c, h, w, NCHW, 3, 2, 1, ho, wo, x, yo, amo);
    CHECK(memcmp(yo, y, ny * sizeof *y) == 0); /* a max is exact */
    CHECK(memcmp(amo, am, ny * sizeof *am) == 0);
    iabn_maxpool_bwd(n, c, h, w, NCHW, ho, wo, dy, amo, dxo);
    compare("maxpool bwd", dxo, dx, nx);
    free(yo), free(dxo), free(amo);
}

static void test_gap(void)
{
    const iabn_st_tensor *tx;
    const float *x = getf("gap.x", 0, &tx);
    if (!x) return;
    int n = (int)tx->shape[0], c = (int)tx->shape[1];
    int hw = (int)(tx->shape[2] * tx->shape[3]);
    const float *y = getf("gap.y", (size_t)n * c, NULL), *dy = getf("gap.dy", (size_t)n * c, NULL);
    const float *dx = getf("gap.dx", (size_t)n * c * hw, NULL);
    if (!y || !dy || !dx) return;
    float *yo = falloc((size_t)n * c), *dxo = falloc((size_t)n * c * hw);
    iabn_gap_fwd(n, c, hw, NCHW, x, yo);
    iabn_gap_bwd(n, c, hw, NCHW, dy, dxo);
    compare("gap fwd", yo, y, (size_t)n * c);
    compare("gap bwd", dxo, dx, (size_t)n * c * hw);
    free(yo), free(dxo);
}

static void check_xent(const char *pre, float top_frac)
{
    char name[64];
    const iabn_st_tensor *tl;
    snprintf(name, sizeof name, "%s.logits", pre);
    const float *l = getf(name, 0, &tl);
    if (!l) return;
    int n = (int)tl->shape[0], k = (int)tl->shape[1], hw = 1;
    for (int i = 2; i < tl->ndim; i++) hw *= (int)tl->shape[i];
    size_t m = (size_t)n * hw, nl = m * k;
    snprintf(name, sizeof name, "%s.labels", pre);
    const int32_t *lab = get(name, IABN_I32, m, NULL);
    snprintf(name, sizeof name, "%s.loss", pre);
    const float *loss = getf(name, 1, NULL);
    snprintf(name, sizeof name, "%s.dlogits", pre);
    const float *dl = getf(name, nl, NULL);
    if (!lab || !loss || !dl) return;
    float *w = falloc(m), *dlo = falloc(nl), lo = -1;
    void *scratch = malloc(iabn_xent_scratch_bytes(n, hw));
    long bad = -1;
    CHECK(iabn_xent_fwd(n, k, hw, l, lab, 255, top_frac, &lo, w, scratch, &bad) == 0);
    iabn_xent_bwd(n, k, hw, l, lab, w, 1.f, dlo);
    snprintf(name, sizeof name, "%s loss", pre);
    compare(name, &lo, loss, 1);
    snprintf(name, sizeof name, "%s dlogits", pre);
    compare(name, dlo, dl, nl);
    free(w), free(dlo), free(scratch);
}

static void test_xent(void)
{
    check_xent("xent_cls", 0.f);
    check_xent("xent_pix", 0.f);
    check_xent("xent_boot", 0.25f);
}

static void test_sgd(void)
{
    const iabn_st_tensor *tw;
    const float *w0 = getf("sgd.w0", 0, &tw);
    if (!w0) return;
    size_t n = (size_t)tw->shape[0];
    const float *g = getf("sgd.g", 3 * n, NULL), *wt = getf("sgd.w", 3 * n, NULL);
    const float *buf = getf("sgd.buf", n, NULL);
    if (!g || !wt || !buf) return;
    float *w = falloc(n), *b = falloc(n), *gs = falloc(n);
    memcpy(w, w0, n * sizeof *w);
    for (int s = 0; s < 3; s++) {
        memcpy(gs, g + s * n, n * sizeof *gs); /* the update zeroes it */
        iabn_sgd_update(n, 0.1f, 0.9f, 1e-4f, 1, s == 0, w, gs, b);
        char name[32];
        snprintf(name, sizeof name, "sgd step %d", s + 1);
        compare(name, w, wt + s * n, n);
    }
    compare("sgd momentum buffer", b, buf, n);
    free(w), free(b), free(gs);
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : OPS_FIXTURE;
    iabn_err e = {0};
    if (iabn_st_load(path, &fx, &e) != 0) {
        fprintf(stderr, "cannot load %s: %s\n", path, e.msg);
        return 1;
    }
    RUN(test_bilinear);
    RUN(test_maxpool);
    RUN(test_gap);
    RUN(test_xent);
    RUN(test_sgd);
    iabn_st_free(fx);
    return TEST_END();
}
