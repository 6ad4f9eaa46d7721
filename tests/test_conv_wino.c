/* test_conv_wino.c: Winograd F(2x2, 3x3) on nChw8c (cpu/conv_wino.c), the
 * winograd flag's kernels where oneDNN has none (CPUs without AVX-512),
 * in every build (the portable one included).  The forward (with and
 * without bias, overwriting, accumulating into y, and with the residual
 * apart), the data pass and the weight pass (adding into dw and db) agree
 * with a double-precision direct convolution within WINO_TOL of the
 * largest value, on odd map sizes (partial tiles), several tile blocks and
 * dilations 2 and 3 (phases, one not dividing the map).
 * Where the rule takes a geometry (128 channels and more in and out for the
 * forward and data passes, 64 for the weight pass; maps of 14x14 and more)
 * the conv entry points run the path with the scratch its plan
 * sizes; smaller cases call the kernels themselves.  The kernels write
 * nothing past their buffers, one and two threads give the same bits, and
 * the geometries the rule leaves out are declined. */
#include "tensor/cpu/conv_impl.h"
#include "tensor/tensor.h"
#include "test_util.h"

/* Measured 1e-6 to 4e-6 of the largest value (up to 512 channels and
 * 112x112 maps in the benchmark harness; here up to 64). */
#define WINO_TOL 2e-5

/* y[n][co][p] = sum w[co][ci][ky][kx] x[n][ci][p + (ky-1, kx-1)] + b, NCHW,
 * in double; bwd-data as its transpose. */
static void ref_fwd(const iabn_conv_geom *g, const float *x, const float *w, const float *b,
                    double *y)
{
    int H = g->h_in, W = g->w_in;
    for (int n = 0; n < g->n; n++)
        for (int o = 0; o < g->c_out; o++)
            for (int yy = 0; yy < H; yy++)
                for (int xx = 0; xx < W; xx++) {
                    double s = b ? b[o] : 0.0;
                    for (int i = 0; i < g->c_in; i++)
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                int sy = yy + (ky - 1) * g->dil, sx = xx + (kx - 1) * g->dil;
                                if (sy < 0 || sy >= H || sx < 0 || sx >= W) continue;
                                s += (double)w[((size_t)o * g->c_in + i) * 9 + ky * 3 + kx] *
                                     x[(((size_t)n * g->c_in + i) * H + sy) * W + sx];
                            }
                    y[(((size_t)n * g->c_out + o) * H + yy) * W + xx] = s;
                }
}

static void ref_bwd_data(const iabn_conv_geom *g, const float *dy, const float *w, double *dx)
{
    int H = g->h_in, W = g->w_in;
    size_t nx = (size_t)g->n * g->c_in * H * W;
    for (size_t k = 0; k < nx; k++) dx[k] = 0.0;
    for (int n = 0; n < g->n; n++)
        for (int o = 0; o < g->c_out; o++)
            for (int yy = 0; yy < H; yy++)
                for (int xx = 0; xx < W; xx++) {
                    double d = dy[(((size_t)n * g->c_out + o) * H + yy) * W + xx];
                    for (int i = 0; i < g->c_in; i++)
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                int sy = yy + (ky - 1) * g->dil, sx = xx + (kx - 1) * g->dil;
                                if (sy < 0 || sy >= H || sx < 0 || sx >= W) continue;
                                dx[(((size_t)n * g->c_in + i) * H + sy) * W + sx] +=
                                    d * w[((size_t)o * g->c_in + i) * 9 + ky * 3 + kx];
                            }
                }
}

/* dw[o][i][ky][kx] = sum dy[n][o][p] x[n][i][p + (ky-1, kx-1)], db[o] = sum
 * dy[n][o][p], in double. */
static void ref_bwd_filter(const iabn_conv_geom *g, const float *x, const float *dy, double *dw,
                           double *db)
{
    int H = g->h_in, W = g->w_in;
    for (int o = 0; o < g->c_out; o++) {
        double sb = 0;
        for (int n = 0; n < g->n; n++)
            for (int p = 0; p < H * W; p++) sb += dy[((size_t)n * g->c_out + o) * H * W + p];
        db[o] = sb;
        for (int i = 0; i < g->c_in; i++)
            for (int ky = 0; ky < 3; ky++)
                for (int kx = 0; kx < 3; kx++) {
                    double s = 0;
                    for (int n = 0; n < g->n; n++)
                        for (int yy = 0; yy < H; yy++)
                            for (int xx = 0; xx < W; xx++) {
                                int sy = yy + (ky - 1) * g->dil, sx = xx + (kx - 1) * g->dil;
                                if (sy < 0 || sy >= H || sx < 0 || sx >= W) continue;
                                s += (double)dy[(((size_t)n * g->c_out + o) * H + yy) * W + xx] *
                                     x[(((size_t)n * g->c_in + i) * H + sy) * W + sx];
                            }
                    dw[((size_t)o * g->c_in + i) * 9 + ky * 3 + kx] = s;
                }
    }
}

/* Largest |a - (base + ref)| over the largest |ref|, plain arrays. */
static double err_plain(const float *a, const float *base, const double *ref, size_t n)
{
    double big = 0, worst = 0;
    for (size_t k = 0; k < n; k++) {
        if (fabs(ref[k]) > big) big = fabs(ref[k]);
        double d = fabs(a[k] - (base[k] + ref[k]));
        if (d > worst) worst = d;
    }
    return worst / (big > 0 ? big : 1);
}

/* Largest |a - ref| over the largest |ref|; a is nChw8c. */
static double err_blk(const iabn_conv_geom *g, int c, const float *a, const double *ref)
{
    size_t hw = (size_t)g->h_in * g->w_in, n = (size_t)g->n * c * hw;
    float *plain = malloc(n * 4);
    t_nchw_blk(g->n, c, (int)hw, 8, a, plain, 1);
    double big = 0, worst = 0;
    for (size_t k = 0; k < n; k++) {
        if (fabs(ref[k]) > big) big = fabs(ref[k]);
        if (fabs(plain[k] - ref[k]) > worst) worst = fabs(plain[k] - ref[k]);
    }
    free(plain);
    return worst / (big > 0 ? big : 1);
}

static iabn_conv_geom wgeom(int n, int ci, int h, int w, int co, int dil)
{
    iabn_conv_geom g;
    CHECK(iabn_conv_geom_init(&g, n, ci, h, w, co, 3, 3, 1, dil, dil, 1) == 0);
    g.x_layout = g.y_layout = IABN_LAYOUT_NCHW8C;
    g.winograd = 1;
    return g;
}

/* A pass through the conv entry points where the rule takes g, else the
 * kernels themselves. */
static void fwd(const iabn_conv_geom *g, int taken, const float *x, const float *w,
                const float *b, const float *r, float *y, float *scr, size_t sb)
{
    iabn_err e = {0};
    if (!taken)
        iabn_conv_wino_fwd(g, iabn_num_threads(), x, w, b, g->accumulate ? (r ? r : y) : NULL, y,
                           scr);
    else if (r)
        CHECK_OK(iabn_conv_fwd_add(NULL, g, x, w, b, r, y, scr, sb, &e));
    else
        CHECK_OK(iabn_conv_fwd(NULL, g, x, w, b, y, scr, sb, &e));
}

static void bwd_data(const iabn_conv_geom *g, int taken, const float *dy, const float *w,
                     float *dx, float *scr, size_t sb)
{
    iabn_err e = {0};
    if (!taken) iabn_conv_wino_bwd_data(g, iabn_num_threads(), dy, w, dx, scr);
    else CHECK_OK(iabn_conv_bwd_data(NULL, g, dy, w, dx, scr, sb, &e));
}

static void bwd_filter(const iabn_conv_geom *g, int taken, const float *x, const float *dy,
                       float *dw, float *db, float *scr, size_t sb)
{
    iabn_err e = {0};
    if (!taken) iabn_conv_wino_bwd_filter(g, iabn_num_threads(), x, dy, dw, db, scr);
    else CHECK_OK(iabn_conv_bwd_filter(NULL, g, x, dy, dw, db, scr, sb, &e));
}

/* One geometry: both passes against the reference, every forward form. */
static void wino_case(int n, int ci, int h, int w_, int co, int dil)
{
    iabn_conv_geom g = wgeom(n, ci, h, w_, co, dil);
    size_t hw = (size_t)h * w_, nx = (size_t)n * ci * hw, ny = (size_t)n * co * hw;
    size_t nw = (size_t)co * ci * 9;
    unsigned seed = (unsigned)(ci * 31 + h * 7 + w_);
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc((size_t)co * 4);
    float *dy = malloc(ny * 4), *y0 = malloc(ny * 4);
    t_fill(x, nx, seed); t_fill(w, nw, seed + 1); t_fill(b, (size_t)co, seed + 2);
    t_fill(dy, ny, seed + 3); t_fill(y0, ny, seed + 4);
    float *xb = malloc(nx * 4), *dyb = malloc(ny * 4), *y0b = malloc(ny * 4);
    t_nchw_blk(n, ci, (int)hw, 8, x, xb, 0);
    t_nchw_blk(n, co, (int)hw, 8, dy, dyb, 0);
    t_nchw_blk(n, co, (int)hw, 8, y0, y0b, 0);
    char desc[80];
    snprintf(desc, sizeof desc, "n%d %d -> %d %dx%d d%d, %d thr", n, ci, co, h, w_, dil,
             iabn_num_threads());

    int th = iabn_num_threads();
    /* the rule: 128 channels in and out (forward, data), 64 (weights) */
    int taken = ci >= 128 && co >= 128, taken_w = ci >= 64 && co >= 64;
    size_t sb = 0;
    for (int p = 0; p < 3; p++) {
        int tk = p == IABN_CONV_BWD_FILTER ? taken_w : taken;
        CHECK_MSG(iabn_conv_wino_takes(&g, (iabn_conv_pass)p) == tk, "pass %d, %s", p, desc);
        size_t sp = iabn_conv_wino_scratch(&g, (iabn_conv_pass)p, th) * 4;
        if (tk) {
            iabn_conv_plan pl;
            iabn_conv_plan_make(&g, (iabn_conv_pass)p, th, &pl);
            CHECK_MSG(pl.path == IABN_CONV_PATH_WINO && iabn_conv_winograd(&g, (iabn_conv_pass)p),
                      "pass %d: path %d, %s", p, (int)pl.path, desc);
            CHECK(iabn_conv_scratch_bytes(&g, (iabn_conv_pass)p, th) == sp);
        }
        if (sp > sb) sb = sp;
    }
    float *scr = t_alloc_canary(sb / 4);
    float *y = t_alloc_canary(ny), *dx = t_alloc_canary(nx);
    double *ry = malloc(ny * sizeof(double)), *rx = malloc(nx * sizeof(double));

    double ey = 0;
    for (int bias = 0; bias < 2; bias++) { /* y = conv + bias */
        ref_fwd(&g, x, w, bias ? b : NULL, ry);
        fwd(&g, taken, xb, w, bias ? b : NULL, NULL, y, scr, sb);
        double eb = err_blk(&g, co, y, ry);
        CHECK_MSG(eb < WINO_TOL && eb > 0, "fwd bias %d: %.3g, %s", bias, eb, desc);
        if (eb > ey) ey = eb;
    }
    float *plain = malloc(ny * 4);
    memcpy(plain, y, ny * 4); /* with bias */
    /* y += conv + bias: the plain forward added to y's own values */
    memcpy(y, y0b, ny * 4);
    iabn_conv_geom ga = g;
    ga.accumulate = 1;
    fwd(&ga, taken, xb, w, b, NULL, y, scr, sb);
    int same = 1;
    for (size_t k = 0; k < ny; k++) same &= y[k] == y0b[k] + plain[k];
    CHECK_MSG(same, "accumulating forward: not y + conv, %s", desc);
    /* the residual apart: y = r + conv + bias, r untouched */
    float *r = malloc(ny * 4);
    memcpy(r, y0b, ny * 4);
    fwd(&ga, taken, xb, w, b, r, y, scr, sb);
    same = memcmp(r, y0b, ny * 4) == 0;
    for (size_t k = 0; k < ny; k++) same &= y[k] == y0b[k] + plain[k];
    CHECK_MSG(same, "forward with the residual apart: not r + conv, %s", desc);

    ref_bwd_data(&g, dy, w, rx);
    bwd_data(&g, taken, dyb, w, dx, scr, sb);
    double ex = err_blk(&g, ci, dx, rx);
    CHECK_MSG(ex < WINO_TOL && ex > 0, "bwd-data: %.3g, %s", ex, desc);
    /* dw and db add onto what they hold */
    float *dw0 = malloc(nw * 4), *db0 = malloc((size_t)co * 4);
    t_fill(dw0, nw, seed + 5);
    t_fill(db0, (size_t)co, seed + 6);
    float *dw = t_alloc_canary(nw), *db = t_alloc_canary((size_t)co);
    memcpy(dw, dw0, nw * 4);
    memcpy(db, db0, (size_t)co * 4);
    double *rw = malloc(nw * sizeof(double)), *rb = malloc((size_t)co * sizeof(double));
    ref_bwd_filter(&g, x, dy, rw, rb);
    bwd_filter(&g, taken_w, xb, dyb, dw, db, scr, sb);
    double ew = err_plain(dw, dw0, rw, nw), ebias = err_plain(db, db0, rb, (size_t)co);
    CHECK_MSG(ew < WINO_TOL && ew > 0 && ebias < 1e-5, "bwd-filter: %.3g, bias %.3g, %s", ew,
              ebias, desc);
    printf("  %s: fwd within %.2g, bwd-data %.2g, bwd-filter %.2g of the largest value\n", desc,
           ey, ex, ew);
    CHECK_MSG(t_canary_ok(scr, sb / 4) && t_canary_ok(y, ny) && t_canary_ok(dx, nx) &&
                  t_canary_ok(dw, nw) && t_canary_ok(db, (size_t)co),
              "write past a buffer, %s", desc);

    /* one thread: the same bits */
    if (th > 1) {
        float *y1 = malloc(ny * 4), *dx1 = malloc(nx * 4), *dw1 = malloc(nw * 4);
        float *db1 = malloc((size_t)co * 4);
        memcpy(dw1, dw0, nw * 4);
        memcpy(db1, db0, (size_t)co * 4);
        iabn_set_num_threads(1);
        for (int p = 0; p < 3; p++)
            CHECK(iabn_conv_wino_scratch(&g, (iabn_conv_pass)p, 1) * 4 <= sb);
        fwd(&g, taken, xb, w, b, NULL, y1, scr, sb);
        bwd_data(&g, taken, dyb, w, dx1, scr, sb);
        bwd_filter(&g, taken_w, xb, dyb, dw1, db1, scr, sb);
        iabn_set_num_threads(th);
        CHECK_MSG(memcmp(y1, plain, ny * 4) == 0 && memcmp(dx1, dx, nx * 4) == 0 &&
                      memcmp(dw1, dw, nw * 4) == 0 && memcmp(db1, db, (size_t)co * 4) == 0,
                  "1 and %d threads differ, %s", th, desc);
        free(y1); free(dx1); free(dw1); free(db1);
    }
    free(plain); free(r); free(ry); free(rx); free(scr); free(y); free(dx);
    free(dw0); free(db0); free(dw); free(db); free(rw); free(rb);
    free(x); free(w); free(b); free(dy); free(y0); free(xb); free(dyb); free(y0b);
}

static void test_against_reference(void)
{
    iabn_set_num_threads(2);
    /* through the conv entry points */
    wino_case(1, 128, 14, 15, 136, 1); /* odd width: partial tiles; 17 column panels */
    /* the kernels themselves */
    wino_case(2, 16, 14, 14, 24, 1);
    wino_case(1, 8, 15, 17, 16, 1);  /* odd sizes: partial tiles on both edges */
    wino_case(3, 24, 14, 15, 8, 1);  /* 3 x 7 x 8 tiles */
    wino_case(1, 64, 28, 28, 32, 1); /* 196 tiles in one block */
    wino_case(2, 64, 14, 14, 64, 1); /* the rule takes its weight pass only */
    wino_case(1, 8, 5, 3, 8, 1);     /* a map smaller than the rule takes: 3 x 2 tiles */
    wino_case(3, 512, 14, 14, 8, 1); /* fwd and bwd-filter: 147 tiles in blocks of 128 */
    wino_case(3, 8, 14, 14, 512, 1); /* bwd-data: the same (512 channels of dy) */
    /* dilated: d x d phases, each a 3x3 conv on its own grid */
    wino_case(1, 128, 28, 29, 128, 2); /* taken: phase grids of 14x15 */
    wino_case(2, 16, 15, 17, 24, 2);   /* odd: phases of 8x9 and 7x8 points */
    wino_case(1, 8, 14, 13, 16, 3);    /* 3 does not divide the map */
}

/* What the kernels do not take, by name. */
static void test_declined(void)
{
    iabn_conv_geom g = wgeom(2, 128, 14, 14, 128, 1);
    CHECK(iabn_conv_wino_takes(&g, IABN_CONV_FWD) && iabn_conv_wino_takes(&g, IABN_CONV_BWD_DATA));
    iabn_conv_geom d = g;
    d.winograd = 0;
    CHECK(!iabn_conv_wino_takes(&d, IABN_CONV_FWD));
    d = g;
    d.x_layout = d.y_layout = IABN_LAYOUT_NCHW;
    CHECK(!iabn_conv_wino_takes(&d, IABN_CONV_FWD));
    d = g;
    d.y_layout = IABN_LAYOUT_NCHW16C;
    CHECK(!iabn_conv_wino_takes(&d, IABN_CONV_FWD));
    /* 64 to 127 channels: the weight pass only */
    iabn_conv_geom n64 = wgeom(2, 64, 14, 14, 120, 1);
    CHECK(!iabn_conv_wino_takes(&n64, IABN_CONV_FWD) &&
          !iabn_conv_wino_takes(&n64, IABN_CONV_BWD_DATA) &&
          iabn_conv_wino_takes(&n64, IABN_CONV_BWD_FILTER));
    static const int cases[][9] = {
        /* c_in, h, w, c_out, k, stride, pad, dil, groups */
        {128, 14, 14, 128, 3, 2, 1, 1, 1}, {128, 14, 14, 128, 3, 1, 0, 1, 1},
        {128, 14, 14, 128, 3, 1, 2, 2, 1}, {128, 14, 14, 128, 3, 1, 1, 1, 2},
        {132, 14, 14, 128, 3, 1, 1, 1, 1}, {128, 14, 14, 140, 3, 1, 1, 1, 1},
        {128, 14, 14, 128, 5, 1, 2, 1, 1}, {128, 14, 14, 128, 1, 1, 0, 1, 1},
        {128, 14, 13, 128, 3, 1, 1, 1, 1}, /* 182 outputs: under 14x14 */
        {56, 14, 14, 128, 3, 1, 1, 1, 1}, {128, 14, 14, 56, 3, 1, 1, 1, 1}, /* narrow */
        {128, 28, 28, 128, 3, 1, 1, 2, 1}, /* dilated, padding not the dilation */
        {128, 26, 28, 128, 3, 1, 2, 2, 1}, /* phases of 13x14 points */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int *c = cases[k];
        CHECK(iabn_conv_geom_init(&d, 2, c[0], c[1], c[2], c[3], c[4], c[4], c[5], c[6], c[7],
                                  c[8]) == 0);
        d.x_layout = d.y_layout = IABN_LAYOUT_NCHW8C;
        d.winograd = 1;
        for (int p = 0; p < 3; p++)
            CHECK_MSG(!iabn_conv_wino_takes(&d, (iabn_conv_pass)p), "case %zu pass %d", k, p);
    }
}

int main(void)
{
    RUN(test_against_reference);
    RUN(test_declined);
    return TEST_END();
}
