/* test_conv_winograd.c: the geometry's winograd flag (cpu/conv.h) on the
 * oneDNN path.  Where oneDNN has Winograd kernels for this CPU (AVX-512),
 * the geometries the flag takes run them (iabn_conv_winograd, and the
 * plan's implementation name says "wino") in all three passes, agree with
 * the direct convolution within WINO_TOL, are deterministic, accumulate
 * into dw like the direct pass, give the same bits from NCHW and nChw16c
 * activations, fit the scratch the planner sizes, and write nothing past
 * their buffers.  Geometries the flag leaves alone (stride 2, grouped,
 * dilated, 24 channels, 5x5, 1x1, maps under 14x14) give the direct
 * convolution's bits with the flag set; so does every geometry on a CPU
 * without those kernels. */
#include "iabn_config.h"
#include "tensor/cpu/conv_impl.h"
#include "tensor/tensor.h"
#include "test_dnnl.h"
#include "test_util.h"

/* Winograd rounds differently from the direct convolution (it sums
 * transformed tiles), but no worse here: measured 0.6e-6 to 4e-6 of the
 * largest value, up to 512 channels and 112x112 maps, against the 3e-5 the
 * direct oneDNN path is held to against the native kernels
 * (test_conv_dnnl). */
#define WINO_TOL 3e-5

/* The three passes of g, with its flag as given; dw and db accumulate
 * onto dw0 / db0. */
typedef struct outs {
    float *y, *dx, *dw, *db;
} outs;

static void run3(const iabn_conv_geom *g, const float *x, const float *w, const float *b,
                 const float *dy, const float *dw0, const float *db0, outs *o)
{
    size_t nx = (size_t)g->n * g->c_in * g->h_in * g->w_in;
    size_t ny = (size_t)g->n * g->c_out * g->h_out * g->w_out;
    size_t nw = (size_t)g->c_out * (g->c_in / g->groups) * g->kh * g->kw, nb = (size_t)g->c_out;
    int th = iabn_num_threads();
    size_t sb = 0;
    for (int p = 0; p < 3; p++) {
        size_t s = iabn_conv_scratch_bytes(g, (iabn_conv_pass)p, th);
        if (s > sb) sb = s;
    }
    float *scr = t_alloc_canary(sb / 4 + 1);
    o->y = t_alloc_canary(ny);
    o->dx = t_alloc_canary(nx);
    o->dw = t_alloc_canary(nw);
    o->db = t_alloc_canary(nb);
    memcpy(o->dw, dw0, nw * 4);
    memcpy(o->db, db0, nb * 4);
    iabn_err e = {0};
    CHECK_OK(iabn_conv_fwd(NULL, g, x, w, b, o->y, scr, sb, &e));
    CHECK_OK(iabn_conv_bwd_data(NULL, g, dy, w, o->dx, scr, sb, &e));
    CHECK_OK(iabn_conv_bwd_filter(NULL, g, x, dy, o->dw, o->db, scr, sb, &e));
    CHECK_MSG(t_canary_ok(scr, sb / 4 + 1) && t_canary_ok(o->y, ny) && t_canary_ok(o->dx, nx) &&
                  t_canary_ok(o->dw, nw) && t_canary_ok(o->db, nb),
              "write past a buffer");
    free(scr);
}

static void free3(outs *o)
{
    free(o->y);
    free(o->dx);
    free(o->dw);
    free(o->db);
}

static void wino_case_images(int n, int ci, int h, int w_, int co, int pad, int bias,
                             int images)
{
    iabn_conv_geom g;
    CHECK(iabn_conv_geom_init(&g, n, ci, h, w_, co, 3, 3, 1, pad, 1, 1) == 0);
    size_t nx = (size_t)n * ci * h * w_, ny = (size_t)n * co * g.h_out * g.w_out;
    size_t nw = (size_t)co * ci * 9, nb = (size_t)co;
    unsigned seed = (unsigned)(ci * 13 + h);
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc(nb * 4), *dy = malloc(ny * 4);
    float *dw0 = malloc(nw * 4), *db0 = malloc(nb * 4);
    t_fill(x, nx, seed); t_fill(w, nw, seed + 1); t_fill(b, nb, seed + 2);
    t_fill(dy, ny, seed + 3); t_fill(dw0, nw, seed + 4); t_fill(db0, nb, seed + 5);
    char desc[96];
    snprintf(desc, sizeof desc, "n%d c%d %dx%d -> %d p%d bias %d, at most %d images, %d thr", n,
             ci, h, w_, co, pad, bias, images, iabn_num_threads());

    iabn_conv_geom gw = g;
    gw.winograd = 1;
    gw.wino_images = images;
    int on = t_cpu_avx512_core();
    for (int p = 0; p < 3; p++) {
        CHECK_MSG(iabn_conv_winograd(&gw, (iabn_conv_pass)p) == on, "pass %d: winograd %d, %s",
                  p, !on, desc);
        CHECK(iabn_conv_winograd(&g, (iabn_conv_pass)p) == 0); /* the flag off */
        const char *impl = NULL;
        size_t bytes = 0;
        iabn_err e = {0};
        CHECK_OK(iabn_conv_dnnl_scratch(&gw, (iabn_conv_pass)p, bias, iabn_num_threads(), &bytes,
                                        &impl, &e));
        CHECK_MSG(!on || (impl && strstr(impl, "wino")), "pass %d implementation '%s', %s", p,
                  impl ? impl : "?", desc);
        CHECK(bytes <= iabn_conv_scratch_bytes(&gw, (iabn_conv_pass)p, iabn_num_threads()));
    }

    outs d, wi, w2;
    run3(&g, x, w, bias ? b : NULL, dy, dw0, db0, &d);
    run3(&gw, x, w, bias ? b : NULL, dy, dw0, db0, &wi);
    run3(&gw, x, w, bias ? b : NULL, dy, dw0, db0, &w2);
    for (size_t i = 0; i < nw; i++) { d.dw[i] -= dw0[i]; wi.dw[i] -= dw0[i]; w2.dw[i] -= dw0[i]; }
    for (size_t i = 0; i < nb; i++) { d.db[i] -= db0[i]; wi.db[i] -= db0[i]; w2.db[i] -= db0[i]; }
    double ey = t_rel_diff(wi.y, d.y, ny), ex = t_rel_diff(wi.dx, d.dx, nx);
    double ew = t_rel_diff(wi.dw, d.dw, nw), eb = bias ? t_rel_diff(wi.db, d.db, nb) : 0;
    printf("  %s: winograd vs direct %.2g / %.2g / %.2g (bias %.2g)\n", desc, ey, ex, ew, eb);
    CHECK_MSG(ey <= WINO_TOL && ex <= WINO_TOL && ew <= WINO_TOL && eb <= WINO_TOL,
              "winograd vs direct %.3g / %.3g / %.3g / %.3g, %s", ey, ex, ew, eb, desc);
    CHECK_MSG(!on || ey > 0 || ex > 0 || ew > 0, "winograd gave the direct bits: not run? %s",
              desc);
    CHECK_MSG(memcmp(wi.y, w2.y, ny * 4) == 0 && memcmp(wi.dx, w2.dx, nx * 4) == 0 &&
                  memcmp(wi.dw, w2.dw, nw * 4) == 0 && memcmp(wi.db, w2.db, nb * 4) == 0,
              "winograd not repeatable, %s", desc);

    /* nChw16c activations: the same bits */
    iabn_conv_geom gb = gw;
    gb.x_layout = gb.y_layout = IABN_LAYOUT_NCHW16C;
    float *xb = malloc(nx * 4), *dyb = malloc(ny * 4), *t = malloc((nx > ny ? nx : ny) * 4);
    t_nchw16c(n, ci, h * w_, x, xb, 0);
    t_nchw16c(n, co, g.h_out * g.w_out, dy, dyb, 0);
    outs bl;
    run3(&gb, xb, w, bias ? b : NULL, dyb, dw0, db0, &bl);
    for (size_t i = 0; i < nw; i++) bl.dw[i] -= dw0[i];
    for (size_t i = 0; i < nb; i++) bl.db[i] -= db0[i];
    t_nchw16c(n, co, g.h_out * g.w_out, bl.y, t, 1);
    CHECK_MSG(memcmp(t, wi.y, ny * 4) == 0, "nChw16c forward differs, %s", desc);
    t_nchw16c(n, ci, h * w_, bl.dx, t, 1);
    CHECK_MSG(memcmp(t, wi.dx, nx * 4) == 0, "nChw16c data pass differs, %s", desc);
    /* the weight pass of NCHW operands runs natively on an AVX2 CPU
     * (cpu/conv.c native_weights): another order of the sums there */
    if (t_cpu_avx512_core())
        CHECK_MSG(memcmp(bl.dw, wi.dw, nw * 4) == 0 && memcmp(bl.db, wi.db, nb * 4) == 0,
                  "nChw16c weight pass differs, %s", desc);
    else
        CHECK_MSG(t_rel_diff(bl.dw, wi.dw, nw) <= 1e-5 && t_rel_diff(bl.db, wi.db, nb) <= 1e-5,
                  "nChw16c weight pass differs, %s", desc);
    free3(&d); free3(&wi); free3(&w2); free3(&bl);
    free(x); free(w); free(b); free(dy); free(dw0); free(db0); free(xb); free(dyb); free(t);
}

static void wino_case(int n, int ci, int h, int w_, int co, int pad, int bias)
{
    wino_case_images(n, ci, h, w_, co, pad, bias, 0);
}

static void test_winograd(void)
{
    static const int threads[] = {2, 1};
    for (int ti = 0; ti < 2; ti++) {
        iabn_set_num_threads(threads[ti]);
        wino_case(2, 32, 14, 14, 48, 1, 0);
        wino_case(1, 16, 15, 17, 32, 1, 1); /* odd sizes: partial 4x4 tiles */
        wino_case(2, 64, 16, 18, 16, 0, 0); /* no padding */
    }
    iabn_set_num_threads(2);
}

/* Winograd on slices of the batch (cpu/conv_dnnl_plan.c wino_slice): where
 * fewer images than the batch give 784 output tiles, the pass runs on
 * slices of them, its scratch that of the slice's geometry, and its results
 * agree with the direct convolution (wino_case: also the bias gradient
 * summed over slices, and nChw16c against NCHW operands, whose copies are
 * per slice).  Where no divisor of the batch is that small, the whole batch
 * in one call. */
static void test_slices(void)
{
    wino_case(3, 16, 112, 112, 16, 1, 1); /* 784 tiles per image: 3 slices of 1 */
    wino_case(8, 16, 56, 56, 32, 1, 0);   /* 196: 2 slices of 4 */
    if (!t_cpu_avx512_core()) return;
    /* batch, map, wino_images (at most; 0: the fastest), images per call */
    static const int c[][4] = {
        {3, 112, 0, 1},  {8, 56, 0, 4},  {16, 28, 0, 16}, {6, 56, 0, 6},  {5, 28, 0, 5},
        {12, 28, 0, 12}, {32, 28, 0, 16}, {1, 28, 0, 1},
        /* fewer, for less scratch: down to 196 tiles a call */
        {16, 28, 8, 8},  {16, 28, 5, 4},  {16, 28, 4, 4},  {16, 28, 1, 4},  {6, 56, 5, 3},
        {6, 56, 1, 1},   {16, 14, 2, 16}, {8, 56, 9, 4},  {8, 56, 2, 2}};
    for (size_t k = 0; k < sizeof c / sizeof *c; k++) {
        iabn_conv_geom g, s;
        CHECK(iabn_conv_geom_init(&g, c[k][0], 32, c[k][1], c[k][1], 32, 3, 3, 1, 1, 1, 1) == 0);
        g.winograd = 1;
        g.wino_images = c[k][2];
        g.x_layout = g.y_layout = IABN_LAYOUT_NCHW16C;
        s = g;
        s.n = c[k][3];
        s.wino_images = 0;
        for (int p = 0; p < 3; p++) {
            size_t bg = 0, bs = 0;
            iabn_err e = {0};
            CHECK_OK(iabn_conv_dnnl_scratch(&g, (iabn_conv_pass)p, 0, 2, &bg, NULL, &e));
            CHECK_OK(iabn_conv_dnnl_scratch(&s, (iabn_conv_pass)p, 0, 2, &bs, NULL, &e));
            int per = iabn_conv_dnnl_winograd(&g, (iabn_conv_pass)p);
            CHECK_MSG(per == c[k][3] && bg == bs,
                      "batch %d, %dx%d, at most %d: pass %d: %d images per call (expected %d), "
                      "%zu bytes of scratch, %zu for the slice's batch", c[k][0], c[k][1], c[k][1],
                      c[k][2], p, per, c[k][3], bg, bs);
        }
    }
    /* fewer images per call: the results of the whole batch's (the weight
     * pass and the bias gradient summed over 4 slices) */
    wino_case_images(16, 16, 28, 28, 32, 1, 1, 4);
}

/* Geometries the kernels do not take: the flag changes nothing. */
static void test_declined(void)
{
    static const int cases[][7] = {
        /* c_in, c_out, k, stride, pad, dil, groups */
        {32, 32, 3, 2, 1, 1, 1},
        {64, 64, 3, 1, 1, 1, 2},
        {32, 32, 3, 1, 2, 2, 1},
        {24, 32, 3, 1, 1, 1, 1},
        {32, 32, 5, 1, 2, 1, 1},
        {32, 64, 1, 1, 0, 1, 1},
        {32, 32, 3, 1, 1, 1, 1}, /* 12x12: smaller than 14x14, slower there */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int *c = cases[k];
        iabn_conv_geom g;
        CHECK(iabn_conv_geom_init(&g, 2, c[0], 12, 12, c[1], c[2], c[2], c[3], c[4], c[5],
                                  c[6]) == 0);
        iabn_conv_geom gw = g;
        gw.winograd = 1;
        for (int p = 0; p < 3; p++)
            CHECK_MSG(!iabn_conv_winograd(&gw, (iabn_conv_pass)p), "case %zu pass %d", k, p);
        size_t nx = (size_t)2 * c[0] * 144, ny = (size_t)2 * c[1] * g.h_out * g.w_out;
        size_t nw = (size_t)c[1] * (c[0] / c[6]) * c[2] * c[2], nb = (size_t)c[1];
        float *x = malloc(nx * 4), *w = malloc(nw * 4), *dy = malloc(ny * 4);
        float *dw0 = calloc(nw, 4), *db0 = calloc(nb, 4);
        t_fill(x, nx, 7); t_fill(w, nw, 8); t_fill(dy, ny, 9);
        outs a, b;
        run3(&g, x, w, NULL, dy, dw0, db0, &a);
        run3(&gw, x, w, NULL, dy, dw0, db0, &b);
        CHECK_MSG(memcmp(a.y, b.y, ny * 4) == 0 && memcmp(a.dx, b.dx, nx * 4) == 0 &&
                      memcmp(a.dw, b.dw, nw * 4) == 0,
                  "case %zu: the flag changed a declined conv", k);
        free3(&a); free3(&b);
        free(x); free(w); free(dy); free(dw0); free(db0);
    }
}

int main(void)
{
    int skip = t_dnnl_start(NULL);
    if (skip) return skip;
    RUN(test_winograd);
    RUN(test_slices);
    RUN(test_declined);
    return TEST_END();
}
