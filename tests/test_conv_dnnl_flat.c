/* test_conv_dnnl_flat.c: two geometries the oneDNN path runs on kernels
 * other than their pass's own (cpu/conv.c, cpu/conv_dnnl_plan.c): a stem
 * (fewer channels in than a block) writing y blocked on oneDNN's flat
 * kernels, x read as NCHW, and the data pass of a 1x1 conv run as the
 * forward of the transposed conv; each against a double-precision
 * reference, on both sides of its rule.  test_conv_dnnl has the layout
 * votes. */
#include "tensor/cpu/conv_impl.h"
#include "tensor/tensor.h"
#include "test_dnnl.h"
#include "test_util.h"

static iabn_conv_cache *cache;
#define CPU_BLOCKED iabn_conv_blocked_layout()

/* A stem conv (fewer channels in than a block): on NCHW operands the native
 * kernels; with y blocked oneDNN's flat kernels, which read x as it is and
 * write y blocked with no copies.  Its forward and weight pass against a
 * double-precision reference; PyTorch runs the same kernels (its conv2d on
 * float batches goes to oneDNN): its weight pass of ResNeXt's stem measured
 * 3.9e-6 of relative L2 error there, as this one (docs/CPU.md "The stem"). */
static void stem_case(int n, int ci, int h, int co, int k, int stride)
{
    iabn_conv_geom g, gb;
    CHECK(iabn_conv_geom_init(&g, n, ci, h, h, co, k, k, stride, k / 2, 1, 1) == 0);
    gb = g;
    gb.y_layout = CPU_BLOCKED;
    CHECK(!iabn_conv_use_dnnl(&g, IABN_CONV_FWD) && iabn_conv_use_dnnl(&gb, IABN_CONV_FWD));
    int hwi = g.h_in * g.w_in, hwo = g.h_out * g.w_out, B = iabn_layout_block(CPU_BLOCKED);
    size_t nx = (size_t)n * ci * hwi, ny = (size_t)n * co * hwo, nw = (size_t)co * ci * k * k;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *dy = malloc(ny * 4), *dyb = malloc(ny * 4);
    float *yb = malloc(ny * 4), *y = malloc(ny * 4), *dw = calloc(nw, 4);
    t_fill(x, nx, 21); t_fill(w, nw, 22); t_fill(dy, ny, 23);
    t_nchw_blk(n, co, hwo, B, dy, dyb, 0);
    iabn_err e = {0};
    for (int p = 0; p < 3; p += 2) { /* no data pass: an image needs no gradient */
        CHECK(iabn_conv_layouts_ok(&gb, (iabn_conv_pass)p));
        iabn_conv_plan pl;
        iabn_conv_plan_make(&gb, (iabn_conv_pass)p, 2, &pl);
        size_t sb = iabn_conv_scratch_bytes(&gb, (iabn_conv_pass)p, 2);
        /* no copy of y or dy (the weight pass may copy x: 3 channels) */
        CHECK_MSG(pl.path == IABN_CONV_PATH_DNNL && sb < ny * 4, "stem pass %d: path %d, %zu bytes",
                  p, pl.path, sb);
        void *sc = malloc(sb ? sb : 1);
        if (p == 0) {
            CHECK_OK(iabn_conv_fwd(cache, &gb, x, w, NULL, yb, sc, sb, &e));
            t_nchw_blk(n, co, hwo, B, yb, y, 1);
        } else {
            CHECK_OK(iabn_conv_bwd_filter(cache, &gb, x, dyb, dw, NULL, sc, sb, &e));
        }
        free(sc);
    }
    double ey = 0, my = 0, ew = 0, mw = 0;
    double *rw = calloc(nw, sizeof(double));
    for (int i = 0; i < n; i++)
        for (int o = 0; o < co; o++)
            for (int oy = 0; oy < g.h_out; oy++)
                for (int ox = 0; ox < g.w_out; ox++) {
                    size_t yi = (((size_t)i * co + o) * g.h_out + oy) * g.w_out + ox;
                    double s = 0;
                    for (int c = 0; c < ci; c++)
                        for (int a = 0; a < k; a++)
                            for (int b = 0; b < k; b++) {
                                int iy = oy * stride + a - k / 2, ix = ox * stride + b - k / 2;
                                if (iy < 0 || ix < 0 || iy >= h || ix >= h) continue;
                                double xv = x[(((size_t)i * ci + c) * h + iy) * h + ix];
                                size_t wi = (((size_t)o * ci + c) * k + a) * k + b;
                                s += xv * w[wi];
                                rw[wi] += xv * dy[yi];
                            }
                    ey = fmax(ey, fabs(y[yi] - s));
                    my = fmax(my, fabs(s));
                }
    for (size_t i = 0; i < nw; i++) ew = fmax(ew, fabs(dw[i] - rw[i])), mw = fmax(mw, fabs(rw[i]));
    CHECK_MSG(ey <= 1e-5 * my && ew <= 2e-5 * mw, "stem %dx%d: y off by %.3g of %.3g, dw %.3g of %.3g",
              k, k, ey, my, ew, mw);
    free(rw); free(x); free(w); free(dy); free(dyb); free(yb); free(y); free(dw);
}

/* The data pass of a 1x1 conv, which with 784 output pixels or more runs
 * as oneDNN's forward of the transposed conv on AVX2 (conv_dnnl_plan.c
 * transposed_fwd), and with fewer as its data pass: against a double
 * reference, in NCHW and the CPU's blocked layout, dx overwritten (a NaN
 * left in it fails). */
static void data_1x1_case(int n, int ci, int co, int h, iabn_layout L)
{
    iabn_conv_geom g;
    CHECK(iabn_conv_geom_init(&g, n, ci, h, h, co, 1, 1, 1, 0, 1, 1) == 0);
    g.x_layout = g.y_layout = L;
    if (!iabn_conv_use_dnnl(&g, IABN_CONV_BWD_DATA)) return;
    int hw = h * h, B = iabn_layout_block(L);
    size_t nx = (size_t)n * ci * hw, ny = (size_t)n * co * hw, nw = (size_t)co * ci;
    float *w = malloc(nw * 4), *dy = malloc(ny * 4), *dyl = malloc(ny * 4);
    float *dxl = malloc(nx * 4), *dx = malloc(nx * 4);
    t_fill(w, nw, 31); t_fill(dy, ny, 32);
    if (L == IABN_LAYOUT_NCHW) memcpy(dyl, dy, ny * 4);
    else t_nchw_blk(n, co, hw, B, dy, dyl, 0);
    for (size_t i = 0; i < nx; i++) dxl[i] = NAN;
    size_t sb = iabn_conv_scratch_bytes(&g, IABN_CONV_BWD_DATA, 2);
    void *sc = malloc(sb ? sb : 1);
    iabn_err e = {0};
    CHECK_OK(iabn_conv_bwd_data(cache, &g, dyl, w, dxl, sc, sb, &e));
    if (L == IABN_LAYOUT_NCHW) memcpy(dx, dxl, nx * 4);
    else t_nchw_blk(n, ci, hw, B, dxl, dx, 1);
    double err = 0, big = 0;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < ci; c++)
            for (int p = 0; p < hw; p++) {
                double s = 0;
                for (int o = 0; o < co; o++)
                    s += (double)w[(size_t)o * ci + c] * dy[((size_t)i * co + o) * hw + p];
                double v = dx[((size_t)i * ci + c) * hw + p];
                err = isnan(v) ? INFINITY : fmax(err, fabs(v - s));
                big = fmax(big, fabs(s));
            }
    CHECK_MSG(err <= 1e-5 * big, "1x1 data %dx%d@%d -> %d, %s: off by %.3g of %.3g", n, ci, h, co,
              iabn_layout_name(L), err, big);
    free(sc); free(w); free(dy); free(dyl); free(dxl); free(dx);
}

static void test_data_1x1(void)
{
    static const iabn_layout LS[] = {IABN_LAYOUT_NCHW, IABN_LAYOUT_NCHW8C, IABN_LAYOUT_NCHW16C};
    for (int l = 0; l < 3; l++) {
        if (LS[l] != IABN_LAYOUT_NCHW && LS[l] != CPU_BLOCKED) continue;
        data_1x1_case(4, 64, 48, 14, LS[l]); /* 784 pixels: the forward */
        data_1x1_case(1, 32, 64, 28, LS[l]); /* 784 (on NCHW: oneDNN's GEMM) */
        data_1x1_case(4, 48, 32, 7, LS[l]);  /* 196: the data pass */
    }
}

static void test_stem(void)
{
#if !(defined(IABN_CONV_DNNL_ALL) && IABN_CONV_DNNL_ALL)
    stem_case(2, 3, 32, 64, 3, 2);  /* ResNeXt's 3x3 stem */
    stem_case(2, 3, 30, 64, 7, 2);  /* ResNet's 7x7 one */
    stem_case(1, 3, 17, 32, 3, 1);  /* WideResNet's, stride 1 */
#endif
}

int main(void)
{
    int skip = t_dnnl_start(&cache);
    if (skip) return skip;
    RUN(test_stem);
    RUN(test_data_1x1);
    iabn_conv_cache_free(cache);
    return TEST_END();
}
