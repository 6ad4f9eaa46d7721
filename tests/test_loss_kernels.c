/* test_loss_kernels.c: the CPU loss kernels of cpu/ops.h: cross-entropy
 * (with the bootstrapped top-k selection) against finite differences, a
 * double-precision reference, its edge cases and thread counts; top-k
 * accuracy counting.  Bootstrapped losses are checked only when no pixel
 * sits within the step of the selection threshold.
 */
#include "tensor/tensor.h"
#include "fd_check.h"

#include <float.h>
#include <stdint.h>

/* ---- cross-entropy --------------------------------------------------------- */

typedef struct {
    int n, k, hw;
    const int32_t *labels;
    float top_frac;
    float *weight;
    void *scratch;
} xent_ctx;

static void xent_f(const void *vc, const float *x, float *y)
{
    const xent_ctx *c = vc;
    long bad = -1;
    if (iabn_xent_fwd(c->n, c->k, c->hw, x, c->labels, 255, c->top_frac, y, c->weight,
                      c->scratch, &bad) != 0)
        y[0] = NAN;
}

/* Per-pixel losses in double, for the reference loss and the margin test. */
static void ref_losses(int n, int k, int hw, const float *l, const int32_t *lab, double *out)
{
    for (int i = 0; i < n; i++) {
        for (int p = 0; p < hw; p++) {
            const float *x = l + (size_t)i * k * hw + p;
            double mx = -INFINITY, s = 0;
            for (int c = 0; c < k; c++) mx = fmax(mx, x[c * hw]);
            for (int c = 0; c < k; c++) s += exp(x[c * hw] - mx);
            int y = lab[i * hw + p];
            out[i * hw + p] = y == 255 ? -1 : mx + log(s) - x[y * hw];
        }
    }
}

static int cmp_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

static void check_xent(int n, int k, int hw, float top_frac, unsigned seed)
{
    size_t m = (size_t)n * hw, nl = m * k;
    float *l = falloc(nl), *dl = falloc(nl), *w = falloc(m), *w2 = falloc(m);
    int32_t *lab = malloc(m * sizeof *lab);
    void *scratch = malloc(iabn_xent_scratch_bytes(n, hw));
    double *pl = malloc(m * sizeof *pl), *sorted = malloc(m * sizeof *sorted);
    t_fill(l, nl, seed);
    for (size_t i = 0; i < nl; i++) l[i] *= 3.f;
    for (size_t i = 0; i < m; i++) lab[i] = (i * 7 + 3) % 5 == 0 ? 255 : (int32_t)((i * 13) % k);

    float loss = -1;
    long bad = -1;
    CHECK(iabn_xent_fwd(n, k, hw, l, lab, 255, top_frac, &loss, w, scratch, &bad) == 0);
    ref_losses(n, k, hw, l, lab, pl);
    size_t valid = 0;
    for (size_t i = 0; i < m; i++)
        if (pl[i] >= 0) sorted[valid++] = pl[i];
    qsort(sorted, valid, sizeof *sorted, cmp_desc);
    size_t kept = top_frac > 0 && top_frac < 1 ? (size_t)ceil(top_frac * valid - 1e-6) : valid;
    double ref = 0;
    for (size_t i = 0; i < kept; i++) ref += sorted[i];
    CHECK_CLOSE(loss, ref / kept, 1e-6, 1e-5);
    size_t nz = 0;
    for (size_t i = 0; i < m; i++) nz += w[i] != 0.f;
    CHECK(nz == kept);

    /* Skip the difference check if a pixel sits near the threshold: the
     * selection, not the kernel, would make it fail. */
    int near = kept < valid && sorted[kept - 1] - sorted[kept] < 0.05;
    if (!near) {
        iabn_xent_bwd(n, k, hw, l, lab, w, 1.f, dl);
        float r = 1.f;
        xent_ctx c = {n, k, hw, lab, top_frac, w2, scratch};
        FD_OK(fd_check(&c, xent_f, l, nl, 1, &r, dl, 1.f / 256, 1e-4, 1e-2));
        /* Ignored and unselected pixels get an exact 0. */
        int zero_ok = 1;
        for (size_t i = 0; i < m; i++)
            for (int c2 = 0; c2 < k; c2++)
                if (w[i] == 0.f) zero_ok &= dl[(i / hw) * k * hw + c2 * hw + i % hw] == 0.f;
        CHECK(zero_ok);
    } else {
        fprintf(stderr, "  (threshold too close for a difference check; seed %u)\n", seed);
    }
    free(l), free(dl), free(w), free(w2), free(lab), free(scratch), free(pl), free(sorted);
}

static void test_xent_grad(void)
{
    check_xent(2, 5, 13, 0.f, 20);   /* per pixel */
    check_xent(9, 7, 1, 0.f, 21);    /* classification */
    check_xent(2, 5, 13, 0.25f, 22); /* bootstrapped */
    check_xent(3, 4, 17, 0.5f, 23);
}

static void test_xent_edges(void)
{
    enum { N = 2, K = 3, HW = 4, M = N * HW };
    float l[N * K * HW], dl[N * K * HW], w[M], loss = -1;
    int32_t lab[M];
    uint32_t scratch[M];
    long bad = -1;
    t_fill(l, N * K * HW, 24);
    for (int i = 0; i < M; i++) lab[i] = 255;
    CHECK(iabn_xent_fwd(N, K, HW, l, lab, 255, 0.f, &loss, w, scratch, &bad) == 0);
    CHECK(loss == 0.f);
    CHECK(iabn_xent_fwd(N, K, HW, l, lab, 255, 0.25f, &loss, w, scratch, &bad) == 0);
    CHECK(loss == 0.f);
    iabn_xent_bwd(N, K, HW, l, lab, w, 1.f, dl);
    int zero = 1;
    for (int i = 0; i < N * K * HW; i++) zero &= dl[i] == 0.f;
    for (int i = 0; i < M; i++) zero &= w[i] == 0.f;
    CHECK(zero);

    /* Out-of-range labels: an error naming the first bad position. */
    for (int i = 0; i < M; i++) lab[i] = i % K;
    lab[5] = K;
    lab[6] = -1;
    CHECK(iabn_xent_fwd(N, K, HW, l, lab, 255, 0.f, &loss, w, scratch, &bad) == IABN_EINVAL);
    CHECK(bad == 5);
    lab[5] = 0;
    CHECK(iabn_xent_fwd(N, K, HW, l, lab, 255, 0.f, &loss, w, scratch, NULL) == IABN_EINVAL);
    lab[6] = 255;
    CHECK(iabn_xent_fwd(N, K, HW, l, lab, 255, 0.f, &loss, w, scratch, &bad) == 0);
    CHECK(isfinite(loss) && loss > 0.f);

    /* Equal losses everywhere: bootstrapping keeps the lowest indices. */
    for (int i = 0; i < N * K * HW; i++) l[i] = 0.5f;
    for (int i = 0; i < M; i++) lab[i] = i == 1 ? 255 : 1;
    CHECK(iabn_xent_fwd(N, K, HW, l, lab, 255, 0.3f, &loss, w, scratch, &bad) == 0);
    /* 7 valid, ceil(0.3 * 7) = 3: pixels 0, 2, 3. */
    CHECK(w[0] > 0 && w[1] == 0 && w[2] > 0 && w[3] > 0 && w[4] == 0 && w[7] == 0);
    CHECK_CLOSE(loss, log(3.0), 1e-6, 1e-6);
    /* 0.3f of 10 valid pixels keeps 3, not 4 (float noise in the product). */
    for (int i = 0; i < M; i++) lab[i] = 1;
    float l10[10 * K];
    int32_t lab10[10];
    float w10[10];
    uint32_t s10[10];
    for (int i = 0; i < 10 * K; i++) l10[i] = 0.f;
    for (int i = 0; i < 10; i++) lab10[i] = 0;
    CHECK(iabn_xent_fwd(1, K, 10, l10, lab10, 255, 0.3f, &loss, w10, s10, &bad) == 0);
    int kept = 0;
    for (int i = 0; i < 10; i++) kept += w10[i] != 0.f;
    CHECK_MSG(kept == 3, "kept %d", kept);

    /* The scale multiplies the gradient. */
    t_fill(l, N * K * HW, 25);
    CHECK(iabn_xent_fwd(N, K, HW, l, lab, 255, 0.f, &loss, w, scratch, &bad) == 0);
    float d1[N * K * HW], d2[N * K * HW];
    iabn_xent_bwd(N, K, HW, l, lab, w, 1.f, d1);
    iabn_xent_bwd(N, K, HW, l, lab, w, 0.5f, d2);
    int half = 1;
    for (int i = 0; i < N * K * HW; i++) half &= fabsf(d2[i] - 0.5f * d1[i]) <= 1e-7f;
    CHECK(half);
}

/* Big enough for the parallel paths: the same bits with 1 and 2 threads. */
static void test_xent_threads(void)
{
    enum { N = 2, K = 19, HW = 4096, M = N * HW };
    float *l = falloc((size_t)N * K * HW), *w1 = falloc(M), *w2 = falloc(M);
    float *d1 = falloc((size_t)N * K * HW), *d2 = falloc((size_t)N * K * HW);
    int32_t *lab = malloc(M * sizeof *lab);
    void *scratch = malloc(iabn_xent_scratch_bytes(N, HW));
    t_fill(l, (size_t)N * K * HW, 26);
    /* Coarse logits make many equal losses, so ties at the threshold happen. */
    for (size_t i = 0; i < (size_t)N * K * HW; i++) l[i] = floorf(l[i] * 4.f);
    for (int i = 0; i < M; i++) lab[i] = i % 11 == 0 ? 255 : (i * 5) % K;
    float loss1, loss2;
    long bad;
    int th = iabn_num_threads();
    iabn_set_num_threads(1);
    CHECK(iabn_xent_fwd(N, K, HW, l, lab, 255, 0.25f, &loss1, w1, scratch, &bad) == 0);
    iabn_xent_bwd(N, K, HW, l, lab, w1, 1.f, d1);
    iabn_set_num_threads(2);
    CHECK(iabn_xent_fwd(N, K, HW, l, lab, 255, 0.25f, &loss2, w2, scratch, &bad) == 0);
    iabn_xent_bwd(N, K, HW, l, lab, w2, 1.f, d2);
    iabn_set_num_threads(th);
    CHECK(memcmp(&loss1, &loss2, sizeof loss1) == 0);
    CHECK(memcmp(w1, w2, M * sizeof *w1) == 0);
    CHECK(memcmp(d1, d2, (size_t)N * K * HW * sizeof *d1) == 0);
    size_t valid = 0, kept = 0;
    for (int i = 0; i < M; i++) valid += lab[i] != 255, kept += w1[i] != 0.f;
    CHECK(kept == (size_t)ceil(0.25 * valid));
    free(l), free(w1), free(w2), free(d1), free(d2), free(lab), free(scratch);
}

static void test_topk(void)
{
    /* 4 samples, 5 classes. */
    const float l[20] = {0.1f, 0.9f, 0.3f, 0.2f, 0.0f,   /* label 1: top-1 */
                         0.5f, 0.4f, 0.3f, 0.2f, 0.1f,   /* label 2: top-3 */
                         1.0f, 1.0f, 0.0f, 0.0f, 0.0f,   /* label 1: tie, ranks second */
                         0.0f, 0.1f, 0.2f, 0.3f, 0.4f};  /* label 0: last */
    const int32_t lab[4] = {1, 2, 1, 0};
    long c1 = -1, ck = -1;
    iabn_topk_correct(4, 5, l, lab, 3, &c1, &ck);
    CHECK(c1 == 1 && ck == 3);
    iabn_topk_correct(4, 5, l, lab, 5, &c1, &ck);
    CHECK(c1 == 1 && ck == 4);
    const int32_t ign[4] = {255, 2, -1, 0};
    iabn_topk_correct(4, 5, l, ign, 5, &c1, &ck);
    CHECK(c1 == 0 && ck == 2);
    /* issue 16.1: NaN or Inf logits are never correct (NaN compares false,
     * which used to rank every label first: 100% top-1) */
    float bad[10] = {NAN, NAN, NAN, NAN, NAN, 0.1f, INFINITY, 0.2f, 0.3f, 0.4f};
    const int32_t lb[2] = {0, 1};
    iabn_topk_correct(2, 5, bad, lb, 5, &c1, &ck);
    CHECK_MSG(c1 == 0 && ck == 0, "non-finite logits: top-1 %ld, top-5 %ld correct", c1, ck);
}

int main(void)
{
    RUN(test_xent_grad);
    RUN(test_xent_edges);
    RUN(test_xent_threads);
    RUN(test_topk);
    return TEST_END();
}
