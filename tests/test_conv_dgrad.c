/* test_conv_dgrad.c: the hand-written data pass of dense 1x1 convs on
 * nChw16c (cpu/conv_dgrad.c).
 *
 * Geometries with tiles of 6 pixels that run from one image into the next
 * and a shorter last one (maps of 1, 6, 35, 49 and 196 pixels), one to
 * three groups of 4 input blocks, and output channels in one run of 32
 * blocks, several, and a short last one: dx against a double-precision reference, dx overwritten (it starts
 * as NaN), the same bits with 1, 2 and 3 threads, and nothing written past
 * dx; the library's AVX-512 build (where the CPU has it) and a portable one
 * (cpu/simd.h's float structs, built here with AVX-512 off) give the same
 * bits.  Through the entry point (cpu/conv.h): the path the graph gets (the
 * data pass of 1x1 stride-1 convs on nChw16c up to 784 pixels a call, on an
 * AVX-512 CPU; oneDNN elsewhere), its bits and its scratch (none).
 */
#include "iabn_config.h"
#include "tensor/cpu/conv_impl.h"
#include "tensor/tensor.h"
#include "test_util.h"

/* the portable copy (tests/meson.build) */
int iabn_conv_dgrad_geometry_portable(const iabn_conv_geom *g);
void iabn_conv_dgrad_bwd_data_portable(const iabn_conv_geom *g, int threads, const float *dy,
                                       const float *w, float *dx);

/* |got - ref| <= TOL * sum of |products| */
#define TOL 2e-6

static void one_case(int n, int ci, int co, int h, int w)
{
    iabn_conv_geom g;
    CHECK(iabn_conv_geom_init(&g, n, ci, h, w, co, 1, 1, 1, 0, 1, 1) == 0);
    g.x_layout = g.y_layout = IABN_LAYOUT_NCHW16C;
    CHECK(iabn_conv_dgrad_geometry_portable(&g));
    int hw = h * w;
    size_t nx = (size_t)n * ci * hw, ny = (size_t)n * co * hw, nw = (size_t)co * ci;
    float *dyn = malloc(ny * 4), *dy = malloc(ny * 4), *wt = malloc(nw * 4);
    float *dxn = malloc(nx * 4);
    double *ref = malloc(nx * 8), *mag = malloc(nx * 8);
    t_fill(dyn, ny, 11u + (unsigned)co);
    t_fill(wt, nw, 23u + (unsigned)ci);
    t_nchw16c(n, co, hw, dyn, dy, 0);
    /* the reference on NCHW: dx[i][c][s] = sum_o dy[i][o][s] * w[o][c] */
    for (int i = 0; i < n; i++)
        for (int c = 0; c < ci; c++)
            for (int s = 0; s < hw; s++) {
                double r = 0, a = 0;
                for (int o = 0; o < co; o++) {
                    double p = (double)dyn[((size_t)i * co + o) * hw + s] * wt[(size_t)o * ci + c];
                    r += p;
                    a += fabs(p);
                }
                size_t k = ((size_t)i * ci + c) * hw + s;
                ref[k] = r;
                mag[k] = a;
            }
    float *first = malloc(nx * 4);
    for (int v = 0; v < 4; v++) { /* the portable build on 1, 2, 3 threads, then AVX-512 */
        int avx = v == 3, threads = avx ? 2 : v + 1;
        if (avx && !iabn_conv_direct_avx512()) break;
        float *dx = t_alloc_canary(nx);
        for (size_t i = 0; i < nx; i++) dx[i] = NAN;
#if IABN_HAVE_DIRECT_AVX512
        if (avx) {
            CHECK(iabn_conv_dgrad_geometry_avx512(&g));
            iabn_conv_dgrad_bwd_data_avx512(&g, threads, dy, wt, dx);
        }
#endif
        if (!avx) iabn_conv_dgrad_bwd_data_portable(&g, threads, dy, wt, dx);
        CHECK(t_canary_ok(dx, nx));
        t_nchw16c(n, ci, hw, dx, dxn, 1);
        double worst = 0;
        for (size_t i = 0; i < nx; i++) {
            double e = fabs(dxn[i] - ref[i]) / (TOL * mag[i] + 1e-30);
            if (!(e <= worst)) worst = e;
        }
        CHECK_MSG(worst <= 1, "%dx%dx%dx%d <- %d, run %d: error %.3g of the bound", n, ci, h, w,
                  co, v, worst);
        if (v == 0) memcpy(first, dx, nx * 4);
        else
            CHECK_MSG(memcmp(first, dx, nx * 4) == 0, "%dx%dx%dx%d <- %d: run %d differs", n, ci,
                      h, w, co, v);
        free(dx);
    }
    /* the entry point: the kernel where the path takes the pass, no scratch */
    iabn_set_num_threads(2);
    iabn_conv_plan p;
    iabn_conv_plan_make(&g, IABN_CONV_BWD_DATA, 2, &p);
    CHECK((p.path == IABN_CONV_PATH_DGRAD) == iabn_conv_dgrad_takes(&g, IABN_CONV_BWD_DATA));
    if (p.path == IABN_CONV_PATH_DGRAD) {
        CHECK(iabn_conv_scratch_bytes(&g, IABN_CONV_BWD_DATA, 2) == 0);
        float *dx = malloc(nx * 4);
        for (size_t i = 0; i < nx; i++) dx[i] = NAN;
        iabn_err e = {0};
        CHECK_OK(iabn_conv_bwd_data(NULL, &g, dy, wt, dx, NULL, 0, &e));
        CHECK(memcmp(dx, first, nx * 4) == 0);
        free(dx);
    }
    free(dyn); free(dy); free(wt); free(dxn); free(ref); free(mag); free(first);
}

static void test_kernel(void)
{
    one_case(2, 64, 48, 5, 7);     /* 70 pixels: a tile across the images, one of 4 last */
    one_case(3, 64, 32, 7, 7);     /* 147 pixels: tiles across both boundaries */
    one_case(1, 192, 16, 1, 1);    /* one pixel, three input groups, one output block */
    one_case(3, 128, 560, 14, 14); /* a run of 32 output blocks and one of 3 */
    one_case(1, 64, 1024, 2, 3);   /* two whole runs */
}

static void test_path(void)
{
    int avx = iabn_conv_direct_avx512();
    iabn_conv_geom g;
    /* ResNeXt-101's mod4 and mod5 data passes at batch 4, ResNeXt-50's mod5
     * at batch 16: taken on AVX-512 CPUs */
    CHECK(iabn_conv_geom_init(&g, 4, 512, 14, 14, 1024, 1, 1, 1, 0, 1, 1) == 0);
    g.x_layout = g.y_layout = IABN_LAYOUT_NCHW16C;
    CHECK(iabn_conv_dgrad_takes(&g, IABN_CONV_BWD_DATA) == avx);
    CHECK(!iabn_conv_dgrad_takes(&g, IABN_CONV_FWD) &&
          !iabn_conv_dgrad_takes(&g, IABN_CONV_BWD_FILTER));
    CHECK(iabn_conv_layouts_ok(&g, IABN_CONV_BWD_DATA));
    CHECK(iabn_conv_geom_init(&g, 4, 2048, 7, 7, 1024, 1, 1, 1, 0, 1, 1) == 0);
    g.x_layout = g.y_layout = IABN_LAYOUT_NCHW16C;
    CHECK(iabn_conv_dgrad_takes(&g, IABN_CONV_BWD_DATA) == avx);
    CHECK(iabn_conv_geom_init(&g, 16, 1024, 7, 7, 2048, 1, 1, 1, 0, 1, 1) == 0);
    g.x_layout = g.y_layout = IABN_LAYOUT_NCHW16C;
    CHECK(iabn_conv_dgrad_takes(&g, IABN_CONV_BWD_DATA) == avx);
    /* not taken: 3x3, strided, NCHW (2), c_in not a multiple of 64, a
     * padded 1x1, groups, more than 784 pixels a call (6, 7: oneDNN's copy
     * of the weights weighs less there) */
    iabn_conv_geom no[8];
    CHECK(iabn_conv_geom_init(&no[0], 4, 256, 14, 14, 512, 3, 3, 1, 1, 1, 1) == 0);
    CHECK(iabn_conv_geom_init(&no[1], 4, 1024, 14, 14, 2048, 1, 1, 2, 0, 1, 1) == 0);
    CHECK(iabn_conv_geom_init(&no[2], 4, 512, 14, 14, 1024, 1, 1, 1, 0, 1, 1) == 0);
    CHECK(iabn_conv_geom_init(&no[3], 4, 48, 14, 14, 64, 1, 1, 1, 0, 1, 1) == 0);
    CHECK(iabn_conv_geom_init(&no[4], 2, 64, 12, 12, 64, 1, 1, 1, 1, 1, 1) == 0);
    CHECK(iabn_conv_geom_init(&no[5], 4, 128, 14, 14, 128, 1, 1, 1, 0, 1, 2) == 0);
    CHECK(iabn_conv_geom_init(&no[6], 8, 512, 14, 14, 1024, 1, 1, 1, 0, 1, 1) == 0);
    CHECK(iabn_conv_geom_init(&no[7], 4, 64, 56, 56, 256, 1, 1, 1, 0, 1, 1) == 0);
    for (int i = 0; i < 8; i++) {
        if (i != 2) no[i].x_layout = no[i].y_layout = IABN_LAYOUT_NCHW16C;
        CHECK_MSG(!iabn_conv_dgrad_takes(&no[i], IABN_CONV_BWD_DATA), "case %d taken", i);
    }
}

int main(void)
{
    RUN(test_kernel);
    RUN(test_path);
    return TEST_END();
}
