/* test_layout_pool.c: max pooling and bilinear resizing in nChw16c and
 * nChw8c (tensor.h's blocked layouts) against the same kernels in NCHW.
 *
 * Inputs are made in NCHW and reordered with iabn_reorder (test_layout_kernels.c
 * checks it against the layout's definition); the blocked outputs, the max
 * pool's int32 argmax included, are reordered back and must be the NCHW
 * kernel's bits: both layouts scan a window in the same order with the same
 * tie and NaN rule, use the same taps and expression, and scatter into each
 * gradient element in the same order.  The data has ties, NaNs of both signs
 * (the last NaN of a window wins, so its bits tell which) and -inf, and one
 * geometry has windows wholly in the padding (argmax -1).  Also: the blocked
 * kernels give the same bits for 1 and 2 threads, and the CPU kernel table
 * runs them for a blocked layout and refuses a channel count that the block
 * does not divide (24 for nChw16c, 20 for nChw8c), by layout name.  Every
 * check runs in both blocked layouts, plus channel counts only nChw8c takes
 * (8, 24, 40).
 */
#include "tensor/backend.h"
#include "tensor/tensor.h"
#include "test_util.h"
#include "fd_check.h"

#include <stdint.h>

#define NCHW IABN_LAYOUT_NCHW
/* the blocked layouts, each checked against NCHW */
static const iabn_layout BLKS[] = {IABN_LAYOUT_NCHW16C, IABN_LAYOUT_NCHW8C};
#define NBLKS ((int)(sizeof BLKS / sizeof BLKS[0]))

/* ---- layouts ----------------------------------------------------------------- */

/* Offset of element (ni, ci, p) of an (n, c, hw) tensor with blk channels
 * per block (tensor.h's definition; 1: NCHW). */
static size_t blk_at(int c, int hw, int blk, int ni, int ci, int p)
{
    return (((size_t)ni * (c / blk) + ci / blk) * hw + p) * blk + ci % blk;
}

static float *to_blk(int n, int c, int hw, iabn_layout L, const float *x)
{
    size_t cnt = (size_t)n * c * hw;
    float *y = falloc(cnt);
    iabn_err e = {0};
    CHECK_MSG(iabn_reorder(n, c, hw, NCHW, L, x, y, &e) == 0, "reorder: %s", e.msg);
    return y;
}

/* Whether floats in layout L are nchw's bits; names the first that differs.
 * Reads the blocked data by the definition, not through the reorder. */
static int same_f(int n, int c, int hw, iabn_layout L, const float *blk, const float *nchw,
                  const char *what)
{
    int B = iabn_layout_block(L);
    for (int ni = 0; ni < n; ni++)
        for (int ci = 0; ci < c; ci++)
            for (int p = 0; p < hw; p++) {
                float a = blk[blk_at(c, hw, B, ni, ci, p)], b = nchw[blk_at(c, hw, 1, ni, ci, p)];
                if (memcmp(&a, &b, sizeof a)) {
                    fprintf(stderr, "  %s %s n%d c%d hw%d: (n %d, c %d, p %d) %.9g, NCHW %.9g\n",
                            iabn_layout_name(L), what, n, c, hw, ni, ci, p, a, b);
                    return 0;
                }
            }
    return 1;
}

/* The same for an int32 array (the argmax, stored in y's order). */
static int same_i(int n, int c, int hw, iabn_layout L, const int32_t *blk, const int32_t *nchw,
                  const char *what)
{
    int B = iabn_layout_block(L);
    for (int ni = 0; ni < n; ni++)
        for (int ci = 0; ci < c; ci++)
            for (int p = 0; p < hw; p++) {
                int32_t a = blk[blk_at(c, hw, B, ni, ci, p)], b = nchw[blk_at(c, hw, 1, ni, ci, p)];
                if (a != b) {
                    fprintf(stderr, "  %s %s n%d c%d hw%d: (n %d, c %d, p %d) %d, NCHW %d\n",
                            iabn_layout_name(L), what, n, c, hw, ni, ci, p, (int)a, (int)b);
                    return 0;
                }
            }
    return 1;
}

static int32_t *ialloc(size_t n)
{
    int32_t *p = malloc((n ? n : 1) * sizeof *p);
    CHECK(p != NULL);
    return p;
}

/* ---- max pool ----------------------------------------------------------------- */

/* Ties (7 levels), NaNs of both signs and -inf, scrambled over the planes. */
static void fill_pool(float *x, size_t cnt, unsigned seed)
{
    for (size_t i = 0; i < cnt; i++) {
        unsigned u = ((unsigned)i + seed * 7919u) * 2654435761u >> 18;
        x[i] = u % 23 == 0   ? (u & 64 ? NAN : -NAN)
               : u % 29 == 0 ? -INFINITY
                             : (float)(u % 7) - 3.f;
    }
}

typedef struct pool_out {
    float *y, *dx;
    int32_t *am;
} pool_out;

static pool_out pool_run(int n, int c, int h, int w, iabn_layout L, int k, int s, int p, int ho,
                         int wo, const float *x, const float *dy)
{
    pool_out o = {falloc((size_t)n * c * ho * wo), falloc((size_t)n * c * h * w),
                  ialloc((size_t)n * c * ho * wo)};
    iabn_maxpool_fwd(n, c, h, w, L, k, s, p, ho, wo, x, o.y, o.am);
    iabn_maxpool_bwd(n, c, h, w, L, ho, wo, dy, o.am, o.dx);
    return o;
}

static void pool_free(pool_out *o) { free(o->y), free(o->dx), free(o->am); }

static int pool_same(const pool_out *a, const pool_out *b, size_t ny, size_t nx)
{
    return !memcmp(a->y, b->y, ny * sizeof(float)) && !memcmp(a->am, b->am, ny * 4) &&
           !memcmp(a->dx, b->dx, nx * sizeof(float));
}

static void test_maxpool(void)
{
    /* n, c, h, w, k, s, p; the 56x56 runs its channel blocks in parallel;
     * 8, 24 and 40 channels run in nChw8c alone */
    static const int cfg[][7] = {
        {2, 32, 8, 8, 2, 2, 0},  {1, 48, 7, 9, 3, 2, 1},    {2, 16, 7, 9, 3, 1, 1},
        {3, 32, 13, 12, 3, 2, 1}, {1, 16, 11, 9, 4, 3, 2},  {2, 16, 9, 7, 2, 2, 0},
        {1, 32, 7, 8, 2, 3, 2} /* windows wholly in the padding: rows and columns 0 and 3 */,
        {2, 64, 56, 56, 3, 2, 1}, {2, 8, 9, 7, 2, 2, 0},  {1, 24, 7, 9, 3, 2, 1},
        {3, 40, 11, 9, 4, 3, 2},
    };
    int saved = iabn_num_threads(), padded = 0, nans = 0, runs[NBLKS] = {0};
    for (size_t q = 0; q < sizeof cfg / sizeof cfg[0]; q++) {
        int n = cfg[q][0], c = cfg[q][1], h = cfg[q][2], w = cfg[q][3];
        int k = cfg[q][4], s = cfg[q][5], p = cfg[q][6];
        int ho = iabn_pool_out(h, k, s, p), wo = iabn_pool_out(w, k, s, p);
        size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * ho * wo;
        float *x = falloc(nx), *dy = falloc(ny);
        fill_pool(x, nx, (unsigned)q);
        t_fill(dy, ny, 40u + (unsigned)q);
        pool_out on = pool_run(n, c, h, w, NCHW, k, s, p, ho, wo, x, dy);
        for (int b = 0; b < NBLKS; b++) {
            iabn_layout L = BLKS[b];
            if (c % iabn_layout_block(L)) continue;
            runs[b]++;
            float *bx = to_blk(n, c, h * w, L, x), *bdy = to_blk(n, c, ho * wo, L, dy);
            iabn_set_num_threads(1);
            pool_out b1 = pool_run(n, c, h, w, L, k, s, p, ho, wo, bx, bdy);
            iabn_set_num_threads(2);
            pool_out b2 = pool_run(n, c, h, w, L, k, s, p, ho, wo, bx, bdy);
            iabn_set_num_threads(saved);
            char what[96];
            snprintf(what, sizeof what, "maxpool c%d k%d s%d p%d %dx%d", c, k, s, p, h, w);
            CHECK_MSG(same_f(n, c, ho * wo, L, b1.y, on.y, what), "%s %s: y differs from NCHW",
                      iabn_layout_name(L), what);
            CHECK_MSG(same_i(n, c, ho * wo, L, b1.am, on.am, what), "%s %s: argmax differs",
                      iabn_layout_name(L), what);
            CHECK_MSG(same_f(n, c, h * w, L, b1.dx, on.dx, what), "%s %s: dx differs from NCHW",
                      iabn_layout_name(L), what);
            CHECK_MSG(pool_same(&b1, &b2, ny, nx), "%s %s: 1 and 2 threads differ",
                      iabn_layout_name(L), what);
            free(bx), free(bdy);
            pool_free(&b1), pool_free(&b2);
        }
        for (size_t i = 0; i < ny; i++) {
            padded += on.am[i] < 0;
            nans += isnan(on.y[i]);
        }
        free(x), free(dy);
        pool_free(&on);
    }
    CHECK(runs[0] == 8 && runs[1] == 11); /* every geometry ran in every layout that takes it */
    /* the data does reach the rules it is meant to test */
    CHECK_MSG(padded > 0 && nans > 0, "%d padded windows, %d NaN maxima", padded, nans);
}

/* ---- bilinear ------------------------------------------------------------------ */

static void test_bilinear(void)
{
    /* n, c, hi, wi, ho, wo; 8, 24 and 40 channels run in nChw8c alone */
    static const int cfg[][6] = {
        {2, 32, 7, 9, 14, 18},   /* up 2x */
        {1, 48, 5, 7, 13, 11},   /* odd up */
        {2, 16, 13, 11, 5, 7},   /* down */
        {1, 32, 9, 4, 3, 10},    /* down in h, up in w */
        {2, 16, 1, 1, 6, 5},     /* a 1x1 map spread (DeepLab's image pooling) */
        {1, 32, 17, 150, 35, 300}, /* two column chunks */
        {2, 64, 33, 31, 65, 62},   /* channel blocks in parallel */
        {2, 24, 7, 9, 14, 18}, {1, 8, 13, 11, 5, 7}, {2, 40, 1, 1, 6, 5},
    };
    int saved = iabn_num_threads();
    for (size_t q = 0; q < sizeof cfg / sizeof cfg[0]; q++) {
        int n = cfg[q][0], c = cfg[q][1], hi = cfg[q][2], wi = cfg[q][3];
        int ho = cfg[q][4], wo = cfg[q][5];
        size_t nx = (size_t)n * c * hi * wi, ny = (size_t)n * c * ho * wo;
        float *x = falloc(nx), *dy = falloc(ny), *y = falloc(ny), *dx = falloc(nx);
        t_fill(x, nx, 60u + (unsigned)q);
        t_fill(dy, ny, 70u + (unsigned)q);
        iabn_bilinear_fwd(n, c, hi, wi, NCHW, ho, wo, x, y);
        iabn_bilinear_bwd(n, c, hi, wi, NCHW, ho, wo, dy, dx);
        for (int b = 0; b < NBLKS; b++) {
            iabn_layout L = BLKS[b];
            if (c % iabn_layout_block(L)) continue;
            float *bx = to_blk(n, c, hi * wi, L, x), *bdy = to_blk(n, c, ho * wo, L, dy);
            float *by[2] = {falloc(ny), falloc(ny)}, *bdx[2] = {falloc(nx), falloc(nx)};
            for (int th = 0; th < 2; th++) {
                iabn_set_num_threads(th + 1);
                iabn_bilinear_fwd(n, c, hi, wi, L, ho, wo, bx, by[th]);
                iabn_bilinear_bwd(n, c, hi, wi, L, ho, wo, bdy, bdx[th]);
            }
            iabn_set_num_threads(saved);
            char what[96];
            snprintf(what, sizeof what, "bilinear c%d %dx%d -> %dx%d", c, hi, wi, ho, wo);
            CHECK_MSG(same_f(n, c, ho * wo, L, by[0], y, what), "%s %s: y differs from NCHW",
                      iabn_layout_name(L), what);
            CHECK_MSG(same_f(n, c, hi * wi, L, bdx[0], dx, what), "%s %s: dx differs from NCHW",
                      iabn_layout_name(L), what);
            CHECK_MSG(!memcmp(by[0], by[1], ny * sizeof(float)) &&
                          !memcmp(bdx[0], bdx[1], nx * sizeof(float)),
                      "%s %s: 1 and 2 threads differ", iabn_layout_name(L), what);
            free(bx), free(bdy);
            for (int th = 0; th < 2; th++) free(by[th]), free(bdx[th]);
        }
        free(x), free(dy), free(y), free(dx);
    }
}

/* ---- the CPU kernel table ------------------------------------------------------- */

static void test_kernel_table(void)
{
    const iabn_backend *be = iabn_backend_cpu();
    const iabn_kernels *k = be->k;
    enum { N = 2, C = 32, H = 7, W = 9, HO = 4, WO = 5 };
    size_t nx = (size_t)N * C * H * W, ny = (size_t)N * C * HO * WO;
    float *x = falloc(nx), *y = falloc(ny), *y2 = falloc(ny), *dx = falloc(nx), *dx2 = falloc(nx);
    int32_t *am = ialloc(ny), *am2 = ialloc(ny);
    fill_pool(x, nx, 99);
    for (int b = 0; b < NBLKS; b++) {
        iabn_layout L = BLKS[b];
        int bad = iabn_layout_block(L) == 16 ? 24 : 20;
        char want[8];
        snprintf(want, sizeof want, "%d", bad);
        t_fill(y2, ny, 98);
        iabn_err e = {0};
        CHECK_OK(k->maxpool_fwd(be->ctx, N, C, H, W, L, 3, 2, 1, HO, WO, x, y, am, &e));
        iabn_maxpool_fwd(N, C, H, W, L, 3, 2, 1, HO, WO, x, y2, am2);
        CHECK(!memcmp(y, y2, ny * sizeof *y) && !memcmp(am, am2, ny * sizeof *am));
        CHECK_OK(k->maxpool_bwd(be->ctx, N, C, H, W, L, 3, 2, 1, HO, WO, y, am, dx, &e));
        iabn_maxpool_bwd(N, C, H, W, L, HO, WO, y, am, dx2);
        CHECK(!memcmp(dx, dx2, nx * sizeof *dx));
        CHECK_OK(k->bilinear_fwd(be->ctx, N, C, H, W, L, HO, WO, x, y, &e));
        iabn_bilinear_fwd(N, C, H, W, L, HO, WO, x, y2);
        CHECK(!memcmp(y, y2, ny * sizeof *y));
        CHECK_OK(k->bilinear_bwd(be->ctx, N, C, H, W, L, HO, WO, y, dx, &e));
        iabn_bilinear_bwd(N, C, H, W, L, HO, WO, y, dx2);
        CHECK(!memcmp(dx, dx2, nx * sizeof *dx));
        /* a count the block does not divide: refused, by name, nothing read */
        CHECK(k->maxpool_fwd(be->ctx, 1, bad, H, W, L, 3, 2, 1, HO, WO, x, y, am, &e) ==
              IABN_EINVAL);
        CHECK_MSG(strstr(e.msg, iabn_layout_name(L)) && strstr(e.msg, want), "message: %s",
                  e.msg);
        CHECK(k->maxpool_bwd(be->ctx, 1, bad, H, W, L, 3, 2, 1, HO, WO, y, am, dx, &e) ==
              IABN_EINVAL);
        CHECK(k->bilinear_fwd(be->ctx, 1, bad, H, W, L, HO, WO, x, y, &e) == IABN_EINVAL);
        CHECK(k->bilinear_bwd(be->ctx, 1, bad, H, W, L, HO, WO, y, dx, &e) == IABN_EINVAL);
    }
    iabn_err e = {0};
    CHECK(k->bilinear_fwd(be->ctx, 1, 16, H, W, IABN_LAYOUT_COUNT, HO, WO, x, y, &e) ==
          IABN_EINVAL);
    /* NCHW with any channel count still runs, nChw8c with 24 */
    CHECK_OK(k->maxpool_fwd(be->ctx, 1, 24, H, W, NCHW, 3, 2, 1, HO, WO, x, y, am, &e));
    CHECK_OK(k->maxpool_fwd(be->ctx, 1, 24, H, W, IABN_LAYOUT_NCHW8C, 3, 2, 1, HO, WO, x, y, am,
                            &e));
    free(x), free(y), free(y2), free(dx), free(dx2), free(am), free(am2);
}

int main(void)
{
    RUN(test_maxpool);
    RUN(test_bilinear);
    RUN(test_kernel_table);
    return TEST_END();
}
