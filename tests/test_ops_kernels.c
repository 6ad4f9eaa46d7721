/* test_ops_kernels.c: the CPU op kernels of cpu/ops.h against finite
 * differences, hand-computed values and themselves (aliasing, thread counts).
 *
 * Gradient checks use the scalar L = sum(r * y) with a random r, so that one
 * central difference per input element checks the whole backward at once.
 * Inputs of max pooling are spaced further apart than the step so that no
 * argmax flips.  The losses are test_loss_kernels.c's.
 */
#include "tensor/tensor.h"
#include "tensor/math/pool.h"
#include "tensor/math/upsample.h"
#include "test_util.h"

#include <float.h>
#include <stdint.h>

#include "fd_check.h"

/* the layout of every kernel call here (the blocked ones: test_layout_kernels.c) */
#define NCHW IABN_LAYOUT_NCHW


/* ---- max pool ------------------------------------------------------------ */

typedef struct { int n, c, h, w, k, s, p, ho, wo; } pool_ctx;

static void maxpool_f(const void *vc, const float *x, float *y)
{
    const pool_ctx *c = vc;
    int32_t *am = malloc(sizeof *am * (size_t)c->n * c->c * c->ho * c->wo);
    iabn_maxpool_fwd(c->n, c->c, c->h, c->w, NCHW, c->k, c->s, c->p, c->ho, c->wo, x, y,
                     am);
    free(am);
}

/* Distinct values 0.05 apart in a scrambled order: a step of 0.01 never
 * changes which element wins a window. */
static void fill_distinct(float *x, size_t n, float lo)
{
    for (size_t i = 0; i < n; i++) x[i] = lo + 0.05f * (float)((i * 7919u + 13u) % n);
}

static void check_maxpool(int n, int c, int h, int w, int k, int s, int p)
{
    pool_ctx pc = {n, c, h, w, k, s, p, iabn_pool_out(h, k, s, p), iabn_pool_out(w, k, s, p)};
    size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * pc.ho * pc.wo;
    float *x = falloc(nx), *y = falloc(ny), *r = falloc(ny), *dx = falloc(nx);
    int32_t *am = malloc(ny * sizeof *am);
    fill_distinct(x, nx, -3.f);
    t_fill(r, ny, 11);
    iabn_maxpool_fwd(n, c, h, w, NCHW, k, s, p, pc.ho, pc.wo, x, y, am);
    iabn_maxpool_bwd(n, c, h, w, NCHW, pc.ho, pc.wo, r, am, dx);
    FD_OK(fd_check(&pc, maxpool_f, x, nx, ny, r, dx, 0.01f, 1e-3, 1e-3));
    free(x), free(y), free(r), free(dx), free(am);
}

static void test_maxpool_grad(void)
{
    check_maxpool(2, 3, 7, 9, 3, 2, 1);
    check_maxpool(1, 2, 8, 8, 2, 2, 0);
    check_maxpool(1, 2, 6, 5, 3, 1, 1);  /* overlapping windows add up */
    check_maxpool(1, 1, 10, 11, 4, 3, 2);
}

/* Padding is -inf: an all-negative input must never give 0 at the border,
 * and windows partly outside take the max of their in-bounds part. */
static void test_maxpool_padding(void)
{
    CHECK(iabn_pool_out(7, 3, 2, 1) == 4);
    CHECK(iabn_pool_out(224, 3, 2, 1) == 112);
    CHECK(iabn_pool_out(112, 3, 2, 1) == 56);
    CHECK(iabn_pool_out(8, 2, 2, 0) == 4);
    CHECK(iabn_pool_out(1, 3, 1, 0) == 0);
    int h = 6, w = 7, k = 4, s = 3, p = 2;
    int ho = iabn_pool_out(h, k, s, p), wo = iabn_pool_out(w, k, s, p);
    CHECK(ho == 3 && wo == 3);
    float x[42], y[9];
    int32_t am[9];
    for (int i = 0; i < h * w; i++) x[i] = -1.f - 0.01f * (float)((i * 17) % 42);
    iabn_maxpool_fwd(1, 1, h, w, NCHW, k, s, p, ho, wo, x, y, am);
    for (int oh = 0; oh < ho; oh++) {
        for (int ow = 0; ow < wo; ow++) {
            float best = -INFINITY;
            int bi = -1;
            for (int i = oh * s - p; i < oh * s - p + k; i++)
                for (int j = ow * s - p; j < ow * s - p + k; j++)
                    if (i >= 0 && i < h && j >= 0 && j < w && x[i * w + j] > best) {
                        best = x[i * w + j];
                        bi = i * w + j;
                    }
            CHECK(y[oh * wo + ow] == best && y[oh * wo + ow] < 0.f);
            CHECK(am[oh * wo + ow] == bi);
        }
    }
    /* A tie goes to the first element in scan order, as in PyTorch. */
    float t[4] = {2.f, 2.f, 2.f, 2.f}, ty;
    int32_t ta;
    iabn_maxpool_fwd(1, 1, 2, 2, NCHW, 2, 2, 0, 1, 1, t, &ty, &ta);
    CHECK(ty == 2.f && ta == 0);
}

/* The windows inside the plane take a branch-free path (k 3 s 2 its own
 * instance): same values and argmax as a plain scan, with ties (values on a
 * coarse grid), NaNs (the last NaN of a window wins, as in PyTorch) and
 * -inf, for shapes where windows touch every border. */
static void test_maxpool_interior(void)
{
    static const int cfg[][5] = {{13, 12, 3, 2, 1}, {12, 13, 3, 2, 0}, {9, 10, 3, 1, 1},
                                 {8, 11, 2, 2, 0}, {11, 9, 4, 3, 2}, {5, 20, 5, 1, 2}};
    for (size_t q = 0; q < sizeof cfg / sizeof cfg[0]; q++) {
        int h = cfg[q][0], w = cfg[q][1], k = cfg[q][2], s = cfg[q][3], p = cfg[q][4], n = 3;
        int ho = iabn_pool_out(h, k, s, p), wo = iabn_pool_out(w, k, s, p);
        float *x = malloc(sizeof(float) * n * h * w), *y = malloc(sizeof(float) * n * ho * wo);
        int32_t *am = malloc(sizeof(int32_t) * n * ho * wo);
        for (int i = 0; i < n * h * w; i++) {
            unsigned u = (unsigned)i * 2654435761u >> 20;
            x[i] = u % 23 == 0 ? NAN : u % 29 == 0 ? -INFINITY : (float)(u % 7) - 3.f;
        }
        iabn_maxpool_fwd(n, 1, h, w, NCHW, k, s, p, ho, wo, x, y, am);
        int bad = 0;
        for (int pl = 0; pl < n; pl++)
            for (int oh = 0; oh < ho; oh++)
                for (int ow = 0; ow < wo; ow++) {
                    const float *xp = x + (size_t)pl * h * w;
                    float m = -INFINITY;
                    int bi = -1;
                    for (int i = oh * s - p; i < oh * s - p + k; i++)
                        for (int j = ow * s - p; j < ow * s - p + k; j++) {
                            if (i < 0 || i >= h || j < 0 || j >= w) continue;
                            float v = xp[i * w + j];
                            if (bi < 0 || v > m || isnan(v)) m = v, bi = i * w + j;
                        }
                    size_t o = ((size_t)pl * ho + oh) * wo + ow;
                    bad += am[o] != bi || !(y[o] == m || (isnan(y[o]) && isnan(m)));
                }
        CHECK_MSG(bad == 0, "maxpool %dx%d k%d s%d p%d: %d outputs differ", h, w, k, s, p, bad);
        free(x); free(y); free(am);
    }
}

/* ---- global average pool ------------------------------------------------- */

typedef struct { int n, c, hw; } nchw_ctx;

static void gap_f(const void *vc, const float *x, float *y)
{
    const nchw_ctx *c = vc;
    iabn_gap_fwd(c->n, c->c, c->hw, NCHW, x, y);
}

static void test_gap_grad(void)
{
    nchw_ctx c = {2, 3, 35};
    size_t nx = 2 * 3 * 35, ny = 6;
    float *x = falloc(nx), *y = falloc(ny), *r = falloc(ny), *dx = falloc(nx);
    t_fill(x, nx, 1);
    t_fill(r, ny, 2);
    iabn_gap_fwd(2, 3, 35, NCHW, x, y);
    double s = 0;
    for (int i = 0; i < 35; i++) s += x[35 + i];
    CHECK_CLOSE(y[1], s / 35, 1e-6, 1e-6);
    iabn_gap_bwd(2, 3, 35, NCHW, r, dx);
    FD_OK(fd_check(&c, gap_f, x, nx, ny, r, dx, 1.f / 64, 1e-3, 1e-3));
    free(x), free(y), free(r), free(dx);
}

/* ---- windowed average: the index arithmetic the CUDA kernels use ------------
 * (math/pool.h): the outputs showing a cell are exactly those iabn_avgwin_cell
 * maps to it, and the cells over an input are exactly those whose window
 * holds it, by brute force over small geometries. */
static void test_avgwin_index(void)
{
    int bad = 0;
    for (int k = 1; k <= 4; k++)
        for (int st = 1; st <= 3; st++)
            for (int nc = 1; nc <= 5; nc++)
                for (int off = 0; off <= 3; off++) {
                    int nout = nc + 2 * off;
                    for (int p = 0; p < nc; p++) {
                        int lo, hi;
                        iabn_avgwin_outputs(p, off, nc, nout, &lo, &hi);
                        for (int o = 0; o < nout; o++)
                            bad += (iabn_avgwin_cell(o, off, nc) == p) != (o >= lo && o < hi);
                    }
                    for (int r = 0; r < (nc - 1) * st + k; r++) {
                        int lo, hi;
                        iabn_avgwin_cells_over(r, k, st, nc, &lo, &hi);
                        for (int p = 0; p < nc; p++)
                            bad += (r >= p * st && r < p * st + k) != (p >= lo && p < hi);
                    }
                }
    CHECK_MSG(bad == 0, "%d index mismatches", bad);
}

/* ---- linear ---------------------------------------------------------------- */

typedef struct { int n, in, out; float *x, *w, *b; int which; } lin_ctx;

static void lin_f(const void *vc, const float *v, float *y)
{
    const lin_ctx *c = vc;
    iabn_linear_fwd(c->n, c->in, c->out, c->which == 0 ? v : c->x, c->which == 1 ? v : c->w,
                    c->which == 2 ? v : c->b, y);
}

static void test_linear_grad(void)
{
    enum { N = 3, I = 5, O = 4 };
    float x[N * I], w[O * I], b[O], y[N * O], r[N * O], dx[N * I], dw[O * I], db[O];
    t_fill(x, N * I, 3);
    t_fill(w, O * I, 4);
    t_fill(b, O, 5);
    t_fill(r, N * O, 6);
    iabn_linear_fwd(N, I, O, x, w, b, y);
    double ref = b[2];
    for (int i = 0; i < I; i++) ref += (double)x[1 * I + i] * w[2 * I + i];
    CHECK_CLOSE(y[1 * O + 2], ref, 1e-6, 1e-5);
    iabn_linear_bwd_data(N, I, O, r, w, dx);
    /* bwd_weight accumulates: start from 1 and subtract it afterwards. */
    for (int i = 0; i < O * I; i++) dw[i] = 1.f;
    for (int i = 0; i < O; i++) db[i] = 1.f;
    iabn_linear_bwd_weight(N, I, O, x, r, dw, db);
    for (int i = 0; i < O * I; i++) dw[i] -= 1.f;
    for (int i = 0; i < O; i++) db[i] -= 1.f;
    lin_ctx c = {N, I, O, x, w, b, 0};
    FD_OK(fd_check(&c, lin_f, x, N * I, N * O, r, dx, 1.f / 64, 1e-3, 1e-3));
    c.which = 1;
    FD_OK(fd_check(&c, lin_f, w, O * I, N * O, r, dw, 1.f / 64, 1e-3, 1e-3));
    c.which = 2;
    FD_OK(fd_check(&c, lin_f, b, O, N * O, r, db, 1.f / 64, 1e-3, 1e-3));
    /* No bias: y = x w^T only. */
    float y0[N * O];
    iabn_linear_fwd(N, I, O, x, w, NULL, y0);
    CHECK_CLOSE(y0[1 * O + 2], ref - b[2], 1e-6, 1e-5);
}

/* ---- broadcast add, concat / slice ----------------------------------------- */

typedef struct { int n, c, hw; const float *a, *b; int which; } bc_ctx;

static void bc_f(const void *vc, const float *v, float *y)
{
    const bc_ctx *c = vc;
    iabn_add_bcast_hw(c->n, c->c, c->hw, c->which == 0 ? v : c->a, c->which == 1 ? v : c->b, y);
}

static void test_bcast_add_grad(void)
{
    enum { N = 2, C = 3, HW = 10 };
    float a[N * C * HW], b[N * C], y[N * C * HW], r[N * C * HW], db[N * C];
    t_fill(a, N * C * HW, 7);
    t_fill(b, N * C, 8);
    t_fill(r, N * C * HW, 9);
    iabn_add_bcast_hw(N, C, HW, a, b, y);
    CHECK(y[(1 * C + 2) * HW + 4] == a[(1 * C + 2) * HW + 4] + b[1 * C + 2]);
    iabn_sum_hw(N, C, HW, r, db);
    bc_ctx c = {N, C, HW, a, b, 0};
    FD_OK(fd_check(&c, bc_f, a, N * C * HW, N * C * HW, r, r, 1.f / 64, 1e-3, 1e-3));
    c.which = 1;
    FD_OK(fd_check(&c, bc_f, b, N * C, N * C * HW, r, db, 1.f / 64, 1e-3, 1e-3));
}

typedef struct { int n, cx, cy, off, hw; } cat_ctx;

static void cat_f(const void *vc, const float *x, float *y)
{
    const cat_ctx *c = vc;
    memset(y, 0, sizeof *y * (size_t)c->n * c->cy * c->hw);
    iabn_copy_channels(c->n, c->cx, c->cy, c->off, c->hw, x, y);
}

static void test_concat_slice(void)
{
    enum { N = 2, CX = 3, CY = 7, OFF = 2, HW = 6 };
    float x[N * CX * HW], y[N * CY * HW], r[N * CY * HW], dx[N * CX * HW], back[N * CX * HW];
    t_fill(x, N * CX * HW, 10);
    t_fill(r, N * CY * HW, 11);
    for (int i = 0; i < N * CY * HW; i++) y[i] = 42.f;
    iabn_copy_channels(N, CX, CY, OFF, HW, x, y);
    CHECK(y[(1 * CY + OFF + 1) * HW + 3] == x[(1 * CX + 1) * HW + 3]);
    CHECK(y[(1 * CY + OFF + CX) * HW] == 42.f && y[(1 * CY + OFF - 1) * HW + HW - 1] == 42.f);
    iabn_slice_channels(N, CX, CY, OFF, HW, y, back);
    CHECK(memcmp(back, x, sizeof x) == 0);
    /* The gradient of a concat is the slice of the output gradient. */
    iabn_slice_channels(N, CX, CY, OFF, HW, r, dx);
    cat_ctx c = {N, CX, CY, OFF, HW};
    FD_OK(fd_check(&c, cat_f, x, N * CX * HW, N * CY * HW, r, dx, 1.f / 64, 1e-3, 1e-3));
    /* One image whose part already lies in the target: copying it onto
     * itself leaves it intact. */
    iabn_copy_channels(1, CX, CY, OFF, HW, y + OFF * HW, y);
    iabn_slice_channels(1, CX, CY, OFF, HW, y, back);
    CHECK(memcmp(back, x, sizeof *x * CX * HW) == 0);
}

/* ---- dropout --------------------------------------------------------------- */

typedef struct { int n, c, hw; float p; uint64_t seed, stream; } drop_ctx;

static void drop_f(const void *vc, const float *x, float *y)
{
    const drop_ctx *c = vc;
    iabn_dropout2d_apply(c->n, c->c, c->hw, NCHW, c->p, c->seed, c->stream, x, y);
}

static void test_dropout(void)
{
    enum { N = 4, C = 50, HW = 9, T = N * C * HW };
    float *x = falloc(T), *y = falloc(T), *r = falloc(T), *dx = falloc(T);
    t_fill(x, T, 12);
    t_fill(r, T, 13);
    iabn_dropout2d_apply(N, C, HW, NCHW, 0.f, 5, 1, x, y);
    CHECK(memcmp(x, y, sizeof *x * T) == 0);
    iabn_dropout2d_apply(N, C, HW, NCHW, 1.f, 5, 1, x, y);
    int zeros = 1;
    for (int i = 0; i < T; i++) zeros &= y[i] == 0.f && !signbit(y[i]);
    CHECK(zeros);

    float p = 0.3f;
    iabn_dropout2d_apply(N, C, HW, NCHW, p, 5, 1, x, y);
    int dropped = 0, mask_ok = 1;
    for (int m = 0; m < N * C; m++) {
        int drop = iabn_rng_uniform(5, 1, (uint64_t)m) < p;
        dropped += drop;
        for (int i = 0; i < HW; i++) {
            float want = drop ? 0.f : x[m * HW + i] * (1.f / (1.f - p));
            mask_ok &= y[m * HW + i] == want;
        }
    }
    CHECK(mask_ok);
    CHECK_MSG(dropped > 35 && dropped < 85, "dropped %d of 200 maps at p = 0.3", dropped);
    /* Another stream draws another mask. */
    float *y2 = falloc(T);
    iabn_dropout2d_apply(N, C, HW, NCHW, p, 5, 2, x, y2);
    CHECK(memcmp(y, y2, sizeof *y * T) != 0);
    free(y2);
    /* Backward is the same map applied to dy. */
    iabn_dropout2d_apply(N, C, HW, NCHW, p, 5, 1, r, dx);
    drop_ctx c = {N, C, HW, p, 5, 1};
    FD_OK(fd_check(&c, drop_f, x, T, T, r, dx, 1.f / 64, 1e-3, 1e-3));
    free(x), free(y), free(r), free(dx);
}

/* ---- bilinear -------------------------------------------------------------- */

typedef struct { int n, c, hi, wi, ho, wo; } bil_ctx;

static void bil_f(const void *vc, const float *x, float *y)
{
    const bil_ctx *c = vc;
    iabn_bilinear_fwd(c->n, c->c, c->hi, c->wi, NCHW, c->ho, c->wo, x, y);
}

static void check_bilinear(int n, int c, int hi, int wi, int ho, int wo)
{
    bil_ctx bc = {n, c, hi, wi, ho, wo};
    size_t nx = (size_t)n * c * hi * wi, ny = (size_t)n * c * ho * wo;
    float *x = falloc(nx), *y = falloc(ny), *r = falloc(ny), *dx = falloc(nx);
    t_fill(x, nx, 14);
    t_fill(r, ny, 15);
    iabn_bilinear_bwd(n, c, hi, wi, NCHW, ho, wo, r, dx);
    FD_OK(fd_check(&bc, bil_f, x, nx, ny, r, dx, 1.f / 64, 1e-3, 1e-3));
    free(x), free(y), free(r), free(dx);
}

static void test_bilinear_grad(void)
{
    check_bilinear(2, 2, 5, 7, 11, 13);  /* up */
    check_bilinear(2, 2, 11, 13, 5, 7);  /* down */
    check_bilinear(1, 3, 9, 4, 3, 10);   /* down in h, up in w */
    check_bilinear(1, 1, 1, 1, 3, 3);    /* a single pixel spreads everywhere */
}

static void test_bilinear_values(void)
{
    /* Same size: the identity. */
    float x[35], y[35];
    t_fill(x, 35, 16);
    iabn_bilinear_fwd(1, 1, 5, 7, NCHW, 5, 7, x, y);
    CHECK(memcmp(x, y, sizeof x) == 0);
    /* 2x up of [0, 1, 2, 3] along w (align_corners = false):
     * src = (j + 0.5)/2 - 0.5, clamped at 0 -> 0, 0.25, 0.75, ..., 3 at the end. */
    float r4[4] = {0, 1, 2, 3}, r8[8];
    iabn_bilinear_fwd(1, 1, 1, 4, NCHW, 1, 8, r4, r8);
    const float want[8] = {0.f, 0.25f, 0.75f, 1.25f, 1.75f, 2.25f, 2.75f, 3.f};
    for (int j = 0; j < 8; j++) CHECK_CLOSE(r8[j], want[j], 1e-7, 0);
    int i0, i1;
    float l0, l1;
    iabn_bilinear_src(iabn_bilinear_scale(4, 8), 4, 0, &i0, &i1, &l0, &l1);
    CHECK(i0 == 0 && i1 == 1 && l0 == 1.f && l1 == 0.f);
    iabn_bilinear_src(iabn_bilinear_scale(4, 8), 4, 7, &i0, &i1, &l0, &l1);
    CHECK(i0 == 3 && i1 == 3);
    /* The backward does not depend on the thread count. */
    enum { HI = 33, WI = 31, HO = 129, WO = 127 };
    size_t nx = 3 * HI * WI, ny = 3 * HO * WO;
    float *dy = falloc(ny), *d1 = falloc(nx), *d2 = falloc(nx);
    t_fill(dy, ny, 17);
    int th = iabn_num_threads();
    iabn_set_num_threads(1);
    iabn_bilinear_bwd(1, 3, HI, WI, NCHW, HO, WO, dy, d1);
    iabn_set_num_threads(2);
    iabn_bilinear_bwd(1, 3, HI, WI, NCHW, HO, WO, dy, d2);
    iabn_set_num_threads(th);
    CHECK(memcmp(d1, d2, nx * sizeof *d1) == 0);
    free(dy), free(d1), free(d2);
}

/* ---- SGD ------------------------------------------------------------------- */

static void test_sgd(void)
{
    /* lr 0.1, momentum 0.9, wd 0.01, nesterov; w0 = 1, grads 0.5, -0.25, 1.
     * step 1: g = 0.5 + 0.01*1             = 0.51          buf = 0.51
     *         w = 1 - 0.1*(0.51 + 0.9*0.51)                  = 0.9031
     * step 2: g = -0.25 + 0.01*0.9031      = -0.240969
     *         buf = 0.9*0.51 - 0.240969                      = 0.218031
     *         w = 0.9031 - 0.1*(-0.240969 + 0.9*0.218031)    = 0.90757411
     * step 3: g = 1 + 0.01*0.90757411      = 1.0090757411
     *         buf = 0.9*0.218031 + 1.0090757411              = 1.2053036411
     *         w = 0.90757411 - 0.1*(1.0090757411 + 0.9*1.2053036411)
     *                                                        = 0.698189208191 */
    const float grads[3] = {0.5f, -0.25f, 1.f};
    const double want_w[3] = {0.9031, 0.90757411, 0.698189208191};
    const double want_b[3] = {0.51, 0.218031, 1.2053036411};
    float w[2] = {1.f, 1.f}, buf[2] = {123.f, 123.f};
    for (int s = 0; s < 3; s++) {
        float g[2] = {grads[s], grads[s]};
        iabn_sgd_update(2, 0.1f, 0.9f, 0.01f, 1, s == 0, w, g, buf);
        CHECK(g[0] == 0.f && g[1] == 0.f); /* consumed */
        CHECK_CLOSE(w[0], want_w[s], 1e-6, 1e-6);
        CHECK_CLOSE(buf[1], want_b[s], 1e-6, 1e-6);
        CHECK(w[0] == w[1]);
    }
    /* Plain momentum (no nesterov): step = buf. */
    float v = 1.f, bv = 0.f, gv = 0.5f;
    iabn_sgd_update(1, 0.1f, 0.9f, 0.f, 0, 1, &v, &gv, &bv);
    gv = 0.5f;
    iabn_sgd_update(1, 0.1f, 0.9f, 0.f, 0, 0, &v, &gv, &bv);
    CHECK_CLOSE(v, 1.0 - 0.1 * 0.5 - 0.1 * 0.95, 1e-7, 1e-6);
    /* No momentum: the buffer is never touched (may be NULL). */
    float u = 1.f, gu = 0.5f;
    iabn_sgd_update(1, 0.1f, 0.f, 0.f, 1, 0, &u, &gu, NULL);
    CHECK_CLOSE(u, 0.95, 1e-7, 1e-6);
}

/* ---- small helpers ----------------------------------------------------------- */

static void test_elementwise(void)
{
    enum { T = 70000 }; /* above the parallel threshold */
    float *a = falloc(T), *b = falloc(T), *y = falloc(T);
    t_fill(a, T, 30);
    t_fill(b, T, 31);
    iabn_add(T, a, b, y);
    CHECK(y[T - 1] == a[T - 1] + b[T - 1]);
    iabn_copy(T, a, y);
    CHECK(memcmp(a, y, T * sizeof *a) == 0);
    iabn_axpy(T, 2.f, b, y);
    CHECK(y[123] == a[123] + 2.f * b[123]);
    iabn_fill(T, 3.f, y);
    CHECK(y[0] == 3.f && y[T - 1] == 3.f);
    iabn_scale(T, 0.5f, y);
    CHECK(y[T / 2] == 1.5f);

    double ref = 0;
    for (int i = 0; i < T; i++) ref += (double)a[i] * a[i];
    CHECK_CLOSE(iabn_sumsq(T, a), ref, 0, 1e-12);
    int th = iabn_num_threads();
    iabn_set_num_threads(1);
    double s1 = iabn_sumsq(T, a);
    iabn_set_num_threads(2);
    double s2 = iabn_sumsq(T, a);
    iabn_set_num_threads(th);
    CHECK(s1 == s2);
    CHECK(iabn_sumsq(0, a) == 0);

    CHECK(iabn_all_finite(T, a));
    a[T - 7] = NAN;
    CHECK(!iabn_all_finite(T, a));
    a[T - 7] = -INFINITY;
    CHECK(!iabn_all_finite(T, a));
    a[T - 7] = FLT_MAX;
    CHECK(iabn_all_finite(T, a));
    float small[3] = {0.f, INFINITY, 1.f};
    CHECK(!iabn_all_finite(3, small) && iabn_all_finite(1, small));
    free(a), free(b), free(y);
}

/* Out == in where the header allows it: bit-identical to out != in. */
static void test_aliasing(void)
{
    enum { N = 2, C = 5, HW = 21, T = N * C * HW };
    float a[T], b[T], y[T], z[T], bb[N * C];
    t_fill(a, T, 40);
    t_fill(b, T, 41);
    t_fill(bb, N * C, 42);

    iabn_add(T, a, b, y);
    memcpy(z, a, sizeof z);
    iabn_add(T, z, b, z);
    CHECK(memcmp(y, z, sizeof y) == 0);
    memcpy(z, b, sizeof z);
    iabn_add(T, a, z, z);
    CHECK(memcmp(y, z, sizeof y) == 0);

    iabn_add_bcast_hw(N, C, HW, a, bb, y);
    memcpy(z, a, sizeof z);
    iabn_add_bcast_hw(N, C, HW, z, bb, z);
    CHECK(memcmp(y, z, sizeof y) == 0);

    iabn_dropout2d_apply(N, C, HW, NCHW, 0.4f, 9, 3, a, y);
    memcpy(z, a, sizeof z);
    iabn_dropout2d_apply(N, C, HW, NCHW, 0.4f, 9, 3, z, z);
    CHECK(memcmp(y, z, sizeof y) == 0);

    iabn_copy(T, a, y);
    iabn_copy(T, y, y);
    CHECK(memcmp(y, a, sizeof y) == 0);

    /* Cross-entropy gradient written over the logits. */
    int32_t lab[N * HW];
    float w[N * HW], loss;
    uint32_t scratch[N * HW];
    long bad;
    for (int i = 0; i < N * HW; i++) lab[i] = i % 6 == 0 ? 255 : i % C;
    CHECK(iabn_xent_fwd(N, C, HW, a, lab, 255, 0.5f, &loss, w, scratch, &bad) == 0);
    iabn_xent_bwd(N, C, HW, a, lab, w, 1.f, y);
    memcpy(z, a, sizeof z);
    iabn_xent_bwd(N, C, HW, z, lab, w, 1.f, z);
    CHECK(memcmp(y, z, sizeof y) == 0);

    /* SGD with the gradient in the buffer's storage (first step copies it);
     * that gradient is the buffer now and is not zeroed. */
    float w1[T], w2[T], b1[T], g2[T];
    memcpy(w1, a, sizeof w1);
    memcpy(w2, a, sizeof w2);
    memcpy(g2, b, sizeof g2);
    iabn_sgd_update(T, 0.1f, 0.9f, 1e-4f, 1, 1, w1, b, b1);
    iabn_sgd_update(T, 0.1f, 0.9f, 1e-4f, 1, 1, w2, g2, g2);
    CHECK(memcmp(w1, w2, sizeof w1) == 0 && memcmp(b1, g2, sizeof b1) == 0);
}

static void test_rng_bits(void)
{
    /* The mixer moved to math/<family>.h; the values must not have changed. */
    for (uint64_t i = 0; i < 100; i++) {
        uint64_t z = 7 + 0x9e3779b97f4a7c15ULL;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        uint64_t s = z ^ (3 * 0xd1b54a32d192ed03ULL + 0x632be59bd9b4e019ULL);
        s = (s ^ (s >> 30)) * 0xbf58476d1ce4e5b9ULL;
        s = (s ^ (s >> 27)) * 0x94d049bb133111ebULL;
        s ^= s >> 31;
        uint64_t t = s ^ (i + 0x9e3779b97f4a7c15ULL * 4);
        t = (t ^ (t >> 30)) * 0xbf58476d1ce4e5b9ULL;
        t = (t ^ (t >> 27)) * 0x94d049bb133111ebULL;
        t ^= t >> 31;
        CHECK(iabn_rng_u64(7, 3, i) == t);
        CHECK(iabn_rng_uniform(7, 3, i) == (float)(t >> 40) * (1.0f / 16777216.0f));
    }
}

int main(void)
{
    RUN(test_maxpool_grad);
    RUN(test_maxpool_padding);
    RUN(test_maxpool_interior);
    RUN(test_gap_grad);
    RUN(test_avgwin_index);
    RUN(test_linear_grad);
    RUN(test_bcast_add_grad);
    RUN(test_concat_slice);
    RUN(test_dropout);
    RUN(test_bilinear_grad);
    RUN(test_bilinear_values);
    RUN(test_sgd);
    RUN(test_elementwise);
    RUN(test_aliasing);
    RUN(test_rng_bits);
    return TEST_END();
}
