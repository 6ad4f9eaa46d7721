/* test_cuda_kernels.c: CUDA kernels against the CPU's where a small graph
 * (test_cuda.c) cannot reach: odd sizes and in-place aliasing of the BN
 * kernels, the refusal of a blocked layout, exact ties in the bootstrapped
 * loss, the regression losses, the finiteness check and the sum of squares,
 * and counts above 2^31 (skipped, saying so, where the device has too
 * little memory).  Tolerance: cuda_test_util.h.
 *
 * Without a CUDA device the test prints "SKIP: ..." and exits 77.
 */
#include "cuda_test_util.h"

static void test_all_finite(void)
{
    const iabn_backend *be = iabn_cuda_backend(cu);
    float h[4] = {1.f, 2.f, 3.f, 4.f};
    float *d = dev_up(h, 4);
    if (!d) return;
    int fin = 0;
    CHECK_OK(iabn_cuda_all_finite(cu, 4, d, &fin, &e_));
    CHECK(fin == 1);
    h[2] = NAN;
    CHECK_OK(be->h2d(be->ctx, d, h, sizeof h));
    CHECK_OK(iabn_cuda_all_finite(cu, 4, d, &fin, &e_));
    CHECK(fin == 0);
    dev_free(d);
}

static void test_sumsq(void)
{
    static const size_t sizes[] = {0, 1, 7, 4099, ((size_t)1 << 20) + 13};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        float *h = malloc((n ? n : 1) * sizeof *h);
        CHECK(h != NULL);
        if (!h) return;
        h[0] = 0.f;
        t_fill(h, n, 31u + (unsigned)k);
        for (size_t i = 0; i < n; i++) h[i] *= 1.f + (float)(i % 97); /* a spread of sizes */
        float *d = dev_up(h, n ? n : 1);
        double got = -1, again = -2, ref = iabn_sumsq(n, h);
        const float *dc = d;
        if (d) {
            CHECK_OK(iabn_cuda_sumsq(cu, 1, &dc, &n, &got, &e_));
            CHECK_OK(iabn_cuda_sumsq(cu, 1, &dc, &n, &again, &e_));
            CHECK_CLOSE(got, ref, 1e-300, 1e-10);
            CHECK(memcmp(&got, &again, sizeof got) == 0); /* deterministic: same bits */
            dev_free(d);
        }
        free(h);
    }
}

/* More arrays than one round trip holds (512), some empty, each answer in
 * its own slot: views into one device array of growing lengths. */
static void test_sumsq_many(void)
{
    enum { NA = 1100 };
    size_t total = (size_t)NA * (NA - 1) / 2;
    float *h = malloc(total * sizeof *h);
    const float **x = malloc(NA * sizeof *x);
    size_t *count = malloc(NA * sizeof *count);
    double *got = malloc(NA * sizeof *got);
    CHECK(h && x && count && got);
    if (h && x && count && got) {
        t_fill(h, total, 77u);
        float *d = dev_up(h, total);
        if (d) {
            size_t off = 0;
            for (int i = 0; i < NA; i++) {
                x[i] = d + off, count[i] = (size_t)i;
                got[i] = -1;
                off += (size_t)i;
            }
            CHECK_OK(iabn_cuda_sumsq(cu, NA, x, count, got, &e_));
            off = 0;
            for (int i = 0; i < NA; i++) {
                CHECK_CLOSE(got[i], iabn_sumsq((size_t)i, h + off), 1e-300, 1e-10);
                off += (size_t)i;
            }
            dev_free(d);
        }
    }
    free(h), free(x), free(count), free(got);
}

/* BN kernels against the CPU, every output written over its input as the
 * in-place modes do, at shapes that reach each path of the elementwise
 * kernel (cuda/norm_act.cu): one odd plane per block; many 7x7 planes per
 * block, across samples; float4s over 14x14 planes, a block's run ending
 * early; the same planes 4 bytes off alignment (no float4s); big planes. */
enum { CK = 5 };
typedef struct {
    int n, hw, off;
} nk_shape;
static const nk_shape nk_shapes[] = {{3, 1517, 0}, {4, 49, 0}, {3, 196, 0}, {30, 36, 0},
                                     {3, 196, 1}, {2, 4096, 0}};

/* "what n x c x hw (+off)": which shape a failed comparison was at */
static const char *tag(nk_shape sh, const char *what)
{
    static char buf[96];
    snprintf(buf, sizeof buf, "%s %dx%dx%d+%d", what, sh.n, CK, sh.hw, sh.off);
    return buf;
}

static void norm_kernels(nk_shape sh, const float *x, const float *dy, const float *gam, const float *bet,
                         float *z, float *dx, float *const *d)
{
    const size_t cnt = (size_t)sh.n * CK * sh.hw;
    const double m = (double)sh.n * sh.hw;
    const float eps = 1e-5f;
    const iabn_backend *be = iabn_cuda_backend(cu);
    float mean[CK], var[CK], s0[CK], s1[CK], dg[CK], db[CK];
    float *dx_ = d[0], *ddy = d[1], *dga = d[2], *dbe = d[3], *dm = d[4], *dv = d[5];
    float *ds0 = d[6], *ds1 = d[7], *dz = d[8], *dgg = d[9], *dbb = d[10];
    iabn_bn_stats(sh.n, CK, sh.hw, NCHW, x, mean, var);
    CHECK_OK(iabn_cuda_bn_stats(cu, sh.n, CK, sh.hw, NCHW, dx_, dm, dv, &e_));
    dev_cmp(tag(sh, "bn_stats"), "mean", dm, mean, CK);
    dev_cmp(tag(sh, "bn_stats"), "var", dv, var, CK);
    /* standard backward, dx over dy; parameter gradients accumulate */
    iabn_bn_bwd_reduce(sh.n, CK, sh.hw, NCHW, x, dy, mean, var, eps, s0, s1);
    iabn_bn_bwd_apply(sh.n, CK, sh.hw, NCHW, x, dy, mean, var, eps, gam, 0, s0, s1, m, 1, dx);
    CHECK_OK(iabn_cuda_bn_bwd_reduce(cu, sh.n, CK, sh.hw, NCHW, dx_, ddy, dm, dv, eps, ds0, ds1, &e_));
    dev_cmp(tag(sh, "bn_bwd_reduce"), "sum_dy", ds0, s0, CK);
    dev_cmp(tag(sh, "bn_bwd_reduce"), "sum_dy_xhat", ds1, s1, CK);
    CHECK_OK(iabn_cuda_bn_bwd_apply(cu, sh.n, CK, sh.hw, NCHW, dx_, ddy, dm, dv, eps, dga, 0, ds0,
                                    ds1, m, 1, ddy, &e_));
    dev_cmp(tag(sh, "bn_bwd_apply"), "dx over dy", ddy, dx, cnt);
    for (int c = 0; c < CK; c++) dg[c] = db[c] = 0.5f;
    CHECK_OK(be->h2d(be->ctx, dgg, dg, sizeof dg));
    CHECK_OK(be->h2d(be->ctx, dbb, db, sizeof db));
    iabn_bn_param_grads(CK, gam, 1, s0, s1, dg, db);
    CHECK_OK(iabn_cuda_bn_param_grads(cu, CK, dga, 1, ds0, ds1, dgg, dbb, &e_));
    dev_cmp(tag(sh, "bn_param_grads"), "dgamma", dgg, dg, CK);
    dev_cmp(tag(sh, "bn_param_grads"), "dbeta", dbb, db, CK);
    /* a gamma of exactly 0 (either sign) trains: dgamma = sum(dy*xhat) */
    float gz[CK];
    for (int c = 0; c < CK; c++) {
        gz[c] = c == 0 ? 0.f : c == 1 ? -0.f : gam[c];
        dg[c] = 0.f;
    }
    CHECK_OK(be->h2d(be->ctx, dga, gz, sizeof gz));
    CHECK_OK(be->h2d(be->ctx, dgg, dg, sizeof dg));
    iabn_bn_param_grads(CK, gz, 1, s0, s1, dg, db);
    CHECK(dg[0] == s1[0] && dg[1] == s1[1] && s1[0] != 0.f);
    CHECK_OK(iabn_cuda_bn_param_grads(cu, CK, dga, 1, ds0, ds1, dgg, dbb, &e_));
    dev_cmp(tag(sh, "bn_param_grads"), "dgamma at gamma 0", dgg, dg, CK);
    CHECK_OK(be->h2d(be->ctx, dga, gam, sizeof gz));
    /* in-place ABN: z over x forward; I and II backward with dx over dz, and
     * the evaluation backward, from the CPU's z so that only the kernel differs */
    static const iabn_act acts[] = {{IABN_ACT_LEAKY_RELU, 0.01f}, {IABN_ACT_ELU, 1.f},
                                    {IABN_ACT_IDENTITY, 0.f}};
    for (int a = 0; a < 3; a++) {
        iabn_norm_act_fwd(sh.n, CK, sh.hw, NCHW, x, mean, var, eps, gam, bet, 1, acts[a], z, NULL);
        CHECK_OK(be->h2d(be->ctx, dz, x, cnt * 4));
        CHECK_OK(iabn_cuda_norm_act_fwd(cu, sh.n, CK, sh.hw, NCHW, dz, dm, dv, eps, dga, dbe, 1,
                                        acts[a], dz, NULL, &e_));
        dev_cmp(tag(sh, "norm_act_fwd"), "z over x", dz, z, cnt);
        for (int v = 0; v <= 2; v++) { /* v = 0: evaluation (variant II's sums unused) */
            int var_ = v ? v : 2, tr = v != 0;
            iabn_iabn_bwd_reduce(var_, sh.n, CK, sh.hw, NCHW, z, dy, eps, gam, bet, acts[a], s0, s1);
            iabn_iabn_bwd_apply(var_, sh.n, CK, sh.hw, NCHW, z, dy, var, eps, gam, bet, 1, acts[a],
                                s0, s1, m, tr, dx);
            CHECK_OK(be->h2d(be->ctx, dz, z, cnt * 4));
            CHECK_OK(be->h2d(be->ctx, ddy, dy, cnt * 4));
            CHECK_OK(iabn_cuda_iabn_bwd_reduce(cu, var_, sh.n, CK, sh.hw, NCHW, dz, ddy, eps, dga, dbe,
                                               acts[a], ds0, ds1, &e_));
            dev_cmp(tag(sh, "iabn_bwd_reduce"), "sum_dy", ds0, s0, CK);
            dev_cmp(tag(sh, "iabn_bwd_reduce"), "sum_dy_xhat", ds1, s1, CK);
            CHECK_OK(iabn_cuda_iabn_bwd_apply(cu, var_, sh.n, CK, sh.hw, NCHW, dz, ddy, dv, eps, dga,
                                              dbe, 1, acts[a], ds0, ds1, m, tr, ddy, &e_));
            dev_cmp(tag(sh, "iabn_bwd_apply"), "dx over dz", ddy, dx, cnt);
        }
    }
}

static void norm_kernels_at(nk_shape sh)
{
    const size_t cnt = (size_t)sh.n * CK * sh.hw;
    float *x = malloc(cnt * 4), *dy = malloc(cnt * 4), *z = malloc(cnt * 4), *dx = malloc(cnt * 4);
    float gam[CK], bet[CK];
    float *d[11] = {0};
    int ok = x && dy && z && dx;
    CHECK(ok);
    if (ok) {
        t_fill(x, cnt, 3u);
        for (size_t i = 0; i < cnt; i++) x[i] = 3.f + 2.f * x[i]; /* |mean| > std: the shift */
        t_fill(dy, cnt, 4u);
        t_fill(gam, CK, 5u);
        t_fill(bet, CK, 6u);
        d[0] = dev_up(NULL, cnt + 1), d[1] = dev_up(NULL, cnt + 1), d[2] = dev_up(gam, CK);
        d[3] = dev_up(bet, CK), d[8] = dev_up(NULL, cnt + 1);
        for (int i = 4; i < 11; i++)
            if (i != 8) d[i] = dev_up(NULL, CK);
        for (int i = 0; i < 11; i++) ok = ok && d[i];
    }
    if (ok) {
        /* the big arrays are views sh.off floats into their buffers */
        float *v[11];
        for (int i = 0; i < 11; i++) v[i] = d[i] + (i == 0 || i == 1 || i == 8 ? sh.off : 0);
        const iabn_backend *be = iabn_cuda_backend(cu);
        CHECK_OK(be->h2d(be->ctx, v[0], x, cnt * 4) || be->h2d(be->ctx, v[1], dy, cnt * 4));
        norm_kernels(sh, x, dy, gam, bet, z, dx, v);
    }
    for (int i = 0; i < 11; i++)
        if (d[i]) dev_free(d[i]);
    free(x), free(dy), free(z), free(dx);
}

static void test_norm_kernels(void)
{
    for (size_t k = 0; k < sizeof nk_shapes / sizeof nk_shapes[0]; k++) norm_kernels_at(nk_shapes[k]);
}

/* CUDA runs NCHW only: nChw16c is refused by name (BN, dropout, max pool,
 * resize). */
static void test_layouts(void)
{
    const iabn_backend *be = iabn_cuda_backend(cu);
    const iabn_layout B = IABN_LAYOUT_NCHW16C;
    float h[96];
    t_fill(h, 96, 9u);
    float *x = dev_up(h, 96), *y = dev_up(NULL, 96);
    iabn_err e = {0};
    if (x && y) {
        CHECK(be->k->bn_stats(be->ctx, 2, 16, 3, B, x, y, y + 16, &e) == IABN_EINVAL);
        CHECK_MSG(strstr(e.msg, "nChw16c layout: not supported on the CUDA backend"), "%s", e.msg);
        CHECK(iabn_cuda_dropout2d_apply(cu, 2, 16, 3, B, 0.5f, 1, 1, x, y, &e) == IABN_EINVAL);
        CHECK(be->k->maxpool_fwd(be->ctx, 2, 16, 1, 3, B, 1, 1, 0, 1, 3, x, y, (int32_t *)y + 48,
                                 &e) == IABN_EINVAL &&
              be->k->bilinear_bwd(be->ctx, 2, 16, 1, 3, B, 1, 3, x, y, &e) == IABN_EINVAL);
    }
    dev_free(x), dev_free(y);
}

/* Logits from four patterns, so that pixels sharing a pattern and a label
 * have bit-identical losses on either side: the bootstrapped choice among
 * ties (lower index first, across 1024-pixel tiles) must be the CPU's exactly. */
static void test_xent_kernel(void)
{
    enum { N = 3, K = 5, HW = 1500 };
    static const float pat[4][K] = {
        {0, 1, 2, 3, 4}, {2, 2, 2, 2, 2}, {-1, 3, .5f, 0, 1}, {4, 0, 0, 0, -2}};
    const size_t m = (size_t)N * HW, nl = m * K;
    float *lg = malloc(nl * 4), *wc = malloc(m * 4), *wg = malloc(m * 4), *dl = malloc(nl * 4);
    int32_t *lab = malloc(m * 4);
    void *scr = malloc(iabn_xent_scratch_bytes(N, HW));
    const iabn_backend *be = iabn_cuda_backend(cu);
    CHECK(lg && wc && wg && dl && lab && scr);
    if (!lg || !wc || !wg || !dl || !lab || !scr) goto out;
    unsigned r = 7u;
    for (size_t i = 0; i < m; i++) {
        r = r * 1103515245u + 12345u;
        unsigned v = r >> 8;
        lab[i] = v % 10u == 0 ? 255 : (int32_t)((v / 10u) % K);
        for (int ch = 0; ch < K; ch++)
            lg[(i / HW * K + (size_t)ch) * HW + i % HW] = pat[(v / 50u) % 4u][ch];
    }
    float *dlg = dev_up(lg, nl), *dt = dev_up(NULL, nl), *dw = dev_up(NULL, m),
          *dloss = dev_up(NULL, 1), *dlab = dev_up((const float *)lab, m);
    if (dlg && dt && dw && dloss && dlab) {
        static const float tops[] = {1.f, .5f, .37f, .1f, .001f};
        for (int t = 0; t < 5; t++) {
            float lc = 0, lgpu = -1;
            long bad = -1;
            int bl = 0;
            CHECK(iabn_xent_fwd(N, K, HW, lg, lab, 255, tops[t], &lc, wc, scr, &bad) == 0);
            CHECK_OK(iabn_cuda_xent_fwd(cu, N, K, HW, dlg, (const int32_t *)dlab, 255, tops[t],
                                        dloss, dw, &bad, &bl, &e_));
            CHECK_OK(be->d2h(be->ctx, wg, dw, m * 4) || be->d2h(be->ctx, &lgpu, dloss, 4));
            CHECK_MSG(memcmp(wc, wg, m * 4) == 0, "bootstrap %g: another choice of pixels",
                      (double)tops[t]);
            CHECK_CLOSE(lgpu, lc, 1e-6, 1e-5);
            /* the gradient, written over a copy of the logits */
            iabn_xent_bwd(N, K, HW, lg, lab, wc, 0.5f, dl);
            CHECK_OK(iabn_cuda_copy_bytes(cu, nl * 4, dlg, dt, &e_));
            CHECK_OK(iabn_cuda_xent_bwd(cu, N, K, HW, dt, (const int32_t *)dlab, dw, 0.5f, dt,
                                        &e_));
            dev_cmp("xent_bwd", "dlogits over logits", dt, dl, nl);
        }
        /* label smoothing: every valid pixel weighted alike, loss and gradient
         * as the CPU's (the gradient again over the logits) */
        {
            float lc = 0, lgpu = -1;
            long bad = -1;
            int bl = 0;
            CHECK(iabn_xent_smooth_fwd(N, K, HW, lg, lab, 255, 0.1f, &lc, wc, &bad) == 0);
            CHECK_OK(iabn_cuda_xent_smooth_fwd(cu, N, K, HW, dlg, (const int32_t *)dlab, 255,
                                               0.1f, dloss, dw, &bad, &bl, &e_));
            CHECK_OK(be->d2h(be->ctx, wg, dw, m * 4) || be->d2h(be->ctx, &lgpu, dloss, 4));
            CHECK_MSG(memcmp(wc, wg, m * 4) == 0, "label smoothing: other pixel weights");
            CHECK_CLOSE(lgpu, lc, 1e-6, 1e-5);
            iabn_xent_smooth_bwd(N, K, HW, lg, lab, wc, 0.1f, 0.5f, dl);
            CHECK_OK(iabn_cuda_copy_bytes(cu, nl * 4, dlg, dt, &e_));
            CHECK_OK(iabn_cuda_xent_smooth_bwd(cu, N, K, HW, dt, (const int32_t *)dlab, dw, 0.1f,
                                               0.5f, dt, &e_));
            dev_cmp("xent_smooth_bwd", "dlogits over logits", dt, dl, nl);
        }
        /* a label outside [0, K): the first bad position and its value */
        lab[777] = 7;
        lab[2100] = -3;
        CHECK_OK(be->h2d(be->ctx, dlab, lab, m * 4));
        long bad = -1;
        int bl = 0;
        iabn_err e = {0};
        CHECK(iabn_cuda_xent_fwd(cu, N, K, HW, dlg, (const int32_t *)dlab, 255, 1.f, dloss, dw,
                                 &bad, &bl, &e) == IABN_EINVAL);
        CHECK(bad == 777 && bl == 7);
    }
    float *ds[5] = {dlg, dt, dw, dloss, dlab};
    for (int i = 0; i < 5; i++)
        if (ds[i]) dev_free(ds[i]);
out:
    free(lg), free(wc), free(wg), free(dl), free(lab), free(scr);
}

/* L1 and MSE kernels against the CPU's, with dy written over y. */
static void test_reg_loss_kernel(void)
{
    enum { M = 5003 };
    float *y = malloc(M * sizeof *y), *t = malloc(M * sizeof *t), *dy = malloc(M * sizeof *dy);
    CHECK(y && t && dy);
    if (!y || !t || !dy) goto out;
    for (int i = 0; i < M; i++) {
        y[i] = iabn_rng_normal(5, 0, (uint64_t)i);
        t[i] = i % 7 ? iabn_rng_normal(5, 1, (uint64_t)i) : y[i]; /* some exact ties */
    }
    for (int mse = 0; mse <= 1; mse++) {
        float loss = 0;
        iabn_reg_loss_fwd(M, mse, y, t, &loss);
        iabn_reg_loss_bwd(M, mse, y, t, dy);
        float *dyd = dev_up(y, M), *dt = dev_up(t, M), *dl = dev_up(NULL, 1);
        if (dyd && dt && dl) {
            CHECK_OK(iabn_cuda_reg_loss_fwd(cu, M, mse, dyd, dt, dl, &e_));
            dev_cmp("reg_loss_fwd", mse ? "mse" : "l1", dl, &loss, 1);
            CHECK_OK(iabn_cuda_reg_loss_bwd(cu, M, mse, dyd, dt, dyd, &e_));
            dev_cmp("reg_loss_bwd", mse ? "dmse over y" : "dl1 over y", dyd, dy, M);
        }
        if (dyd) dev_free(dyd);
        if (dt) dev_free(dt);
        if (dl) dev_free(dl);
    }
out:
    free(y);
    free(t);
    free(dy);
}

static float dev_at(const float *d, size_t i)
{
    const iabn_backend *be = iabn_cuda_backend(cu);
    float v = NAN;
    CHECK_OK(be->d2h(be->ctx, &v, d + i, sizeof v));
    return v;
}

/* Counts above 2^31 (8 GiB of floats): every index must be 64-bit. */
static void test_big_counts(void)
{
    const iabn_backend *be = iabn_cuda_backend(cu);
    const size_t n = ((size_t)1 << 31) + 4096, hw = n / 2;
    float *d = be->alloc(be->ctx, n * sizeof *d);
    float *s = dev_up(NULL, 8);
    if (!d || !s) {
        fprintf(stderr, "note: test_big_counts skipped: no room for %zu floats\n", n);
        if (d) dev_free(d);
        if (s) dev_free(s);
        return;
    }
    const float three = 3.f, one = 1.f, zero = 0.f;
    CHECK_OK(iabn_cuda_fill(cu, n, 1.f, d, &e_));
    CHECK_OK(be->h2d(be->ctx, d, &three, 4) || be->h2d(be->ctx, d + n - 1, &three, 4));
    double q = 0;
    const float *dc = d;
    CHECK_OK(iabn_cuda_sumsq(cu, 1, &dc, &n, &q, &e_));
    CHECK(q == (double)(n - 2) + 18.0);
    int fin = 0;
    CHECK_OK(iabn_cuda_all_finite(cu, n, d, &fin, &e_));
    CHECK(fin == 1);
    /* one channel of 2 x (2^30 + 2048): statistics, then z over x */
    float *mean = s, *var = s + 1, *gam = s + 2, *bet = s + 3;
    CHECK_OK(be->h2d(be->ctx, gam, &one, 4) || be->h2d(be->ctx, bet, &zero, 4));
    CHECK_OK(iabn_cuda_bn_stats(cu, 2, 1, (int)hw, NCHW, d, mean, var, &e_));
    double mu = ((double)n + 4.0) / (double)n, v = (8.0 * (double)n - 16.0) / ((double)n * n);
    float fm = dev_at(mean, 0), fv = dev_at(var, 0);
    CHECK_CLOSE(fm, mu, 0, 1e-6);
    CHECK_CLOSE(fv, v, 0, 1e-3);
    const iabn_act id = {IABN_ACT_IDENTITY, 0.f};
    CHECK_OK(iabn_cuda_norm_act_fwd(cu, 2, 1, (int)hw, NCHW, d, mean, var, 1e-5f, gam, bet, 0, id,
                                    d, NULL, &e_));
    float is = iabn_invstd(fv, 1e-5f);
    CHECK(dev_at(d, n - 1) == iabn_bn_xhat(3.f, fm, is));
    CHECK(dev_at(d, hw) == iabn_bn_xhat(1.f, fm, is));
    CHECK_OK(iabn_cuda_scale(cu, n, 2.f, d, &e_));
    CHECK(dev_at(d, n - 1) == 2.f * iabn_bn_xhat(3.f, fm, is));
    dev_free(d);
    dev_free(s);
}

int main(void)
{
    iabn_err e = {0};
    if (iabn_cuda_ctx_new(0, &cu, &e)) TEST_SKIP("no CUDA device (%s)", e.msg);
    RUN(test_all_finite);
    RUN(test_sumsq);
    RUN(test_sumsq_many);
    RUN(test_norm_kernels);
    RUN(test_layouts);
    RUN(test_xent_kernel);
    RUN(test_reg_loss_kernel);
    RUN(test_big_counts);
    iabn_cuda_ctx_free(cu);
    return TEST_END();
}
