/* test_conv_1x1.c: the weight pass of 1x1 convs on nChw8c (cpu/conv_1x1.c).
 *
 * Geometries with 1 to 7 input blocks (tiles of 3, 2 and 1 blocks), one
 * pixel chunk and several (the chunk boundaries inside an image and
 * between images), strides 1 to 3 (x gathered into the scratch), with and
 * without bias: dw and dbias, which accumulate,
 * against a double-precision reference; the same bits with 1, 2 and 3
 * threads, in the library's build and a portable one (cpu/simd.h's float
 * structs, built here with AVX2 off), and nothing written past a buffer.
 * Through the entry point (cpu/conv.h): the path the graph gets (the AVX2
 * build takes the weight pass of nChw8c operands, nothing else), the same
 * bits as the kernel, scratch only where strided (too little is an error),
 * and the layout votes.
 */
#include "tensor/cpu/conv_impl.h"
#include "tensor/tensor.h"
#include "test_util.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* the portable copy (tests/meson.build) */
int iabn_conv_1x1_geometry_portable(const iabn_conv_geom *g);
void iabn_conv_1x1_bwd_filter_portable(const iabn_conv_geom *g, int threads, const float *x,
                                       const float *dy, float *dw, float *dbias, float *scratch);

/* |got - ref| <= TOL * (sum of |products| + |initial value|) */
#define TOL 2e-6

/* NCHW index of the element at nChw8c offset i */
static size_t nchw_of(size_t i, int c, int hw)
{
    size_t l = i % 8, p = (i / 8) % hw, cb = (i / 8 / hw) % (c / 8), n = i / 8 / hw / (c / 8);
    return (n * c + cb * 8 + l) * hw + p;
}

static void one_case(int n, int ci, int co, int h, int w, int stride, int bias)
{
    iabn_conv_geom g;
    CHECK(iabn_conv_geom_init(&g, n, ci, h, w, co, 1, 1, stride, 0, 1, 1) == 0);
    g.x_layout = g.y_layout = IABN_LAYOUT_NCHW8C;
    CHECK(iabn_conv_1x1_geometry(&g) && iabn_conv_1x1_geometry_portable(&g));
    int hw = h * w, hwo = g.h_out * g.w_out;
    size_t nx = (size_t)n * ci * hw, ny = (size_t)n * co * hwo, nw = (size_t)co * ci;
    float *x = malloc(nx * 4), *dy = malloc(ny * 4), *w0 = malloc(nw * 4), *b0 = malloc(co * 4);
    t_fill(x, nx, (unsigned)(ci + hw)); t_fill(dy, ny, (unsigned)(co + 7 * hwo));
    t_fill(w0, nw, 5); t_fill(b0, co, 6);
    /* the reference, from the blocked buffers read as NCHW */
    double *rw = malloc(nw * 8), *ra = malloc(nw * 8), *rb = calloc(co, 8), *rba = calloc(co, 8);
    float *xn = malloc(nx * 4), *dyn = malloc(ny * 4);
    for (size_t i = 0; i < nx; i++) xn[nchw_of(i, ci, hw)] = x[i];
    for (size_t i = 0; i < ny; i++) dyn[nchw_of(i, co, hwo)] = dy[i];
    for (int o = 0; o < co; o++) {
        for (int c = 0; c < ci; c++) {
            double s = w0[(size_t)o * ci + c], a = fabs(s);
            for (int i = 0; i < n; i++)
                for (int p = 0; p < hwo; p++) {
                    int at = (p / g.w_out * w + p % g.w_out) * stride; /* x under output p */
                    double v = (double)dyn[((size_t)i * co + o) * hwo + p] *
                               xn[((size_t)i * ci + c) * hw + at];
                    s += v; a += fabs(v);
                }
            rw[(size_t)o * ci + c] = s; ra[(size_t)o * ci + c] = a;
        }
        rb[o] = b0[o]; rba[o] = fabs(b0[o]);
        for (int i = 0; i < n; i++)
            for (int p = 0; p < hwo; p++) {
                rb[o] += dyn[((size_t)i * co + o) * hwo + p];
                rba[o] += fabs(dyn[((size_t)i * co + o) * hwo + p]);
            }
    }
    float *first_w = malloc(nw * 4), *first_b = malloc(co * 4);
    static const int threads[] = {1, 2, 3};
    for (int v = 0; v < 4; v++) { /* 1, 2, 3 threads; then the portable build on 2 */
        size_t ns = iabn_conv_1x1_scratch(&g);
        float *dw = t_alloc_canary(nw), *db = t_alloc_canary(co), *scr = t_alloc_canary(ns);
        memcpy(dw, w0, nw * 4);
        memcpy(db, b0, co * 4);
        if (v < 3) iabn_conv_1x1_bwd_filter(&g, threads[v], x, dy, dw, bias ? db : NULL, scr);
        else iabn_conv_1x1_bwd_filter_portable(&g, 2, x, dy, dw, bias ? db : NULL, scr);
        CHECK(t_canary_ok(dw, nw) && t_canary_ok(db, co) && t_canary_ok(scr, ns));
        free(scr);
        double worst = 0;
        for (size_t i = 0; i < nw; i++) {
            double e = fabs(dw[i] - rw[i]) / (TOL * ra[i] + 1e-30);
            if (!(e <= worst)) worst = e;
        }
        for (int o = 0; bias && o < co; o++) {
            double e = fabs(db[o] - rb[o]) / (TOL * rba[o] + 1e-30);
            if (!(e <= worst)) worst = e;
        }
        CHECK_MSG(worst <= 1, "%dx%dx%dx%d -> %d bias %d, run %d: error %.3g of the bound", n,
                  ci, h, w, co, bias, v, worst);
        if (!bias) CHECK(memcmp(db, b0, co * 4) == 0);
        if (v == 0) {
            memcpy(first_w, dw, nw * 4);
            memcpy(first_b, db, co * 4);
        } else {
            CHECK_MSG(memcmp(first_w, dw, nw * 4) == 0 && memcmp(first_b, db, co * 4) == 0,
                      "%dx%dx%dx%d -> %d: run %d differs from one thread", n, ci, h, w, co, v);
        }
        free(dw);
        free(db);
    }
    /* the entry point: the kernel where the path takes the pass */
    iabn_set_num_threads(2);
    iabn_conv_plan p;
    iabn_conv_plan_make(&g, IABN_CONV_BWD_FILTER, 2, &p);
    CHECK((p.path == IABN_CONV_PATH_1X1) == iabn_conv_1x1_takes(&g, IABN_CONV_BWD_FILTER));
    if (p.path == IABN_CONV_PATH_1X1) {
        /* scratch only for a strided conv: x at the pixels it reads */
        size_t sb = iabn_conv_scratch_bytes(&g, IABN_CONV_BWD_FILTER, 2);
        CHECK(sb == (stride == 1 ? 0 : iabn_conv_round16((size_t)n * ci * hwo) * 4));
        float *dw = malloc(nw * 4), *db = malloc(co * 4), *scr = malloc(sb ? sb : 1);
        memcpy(dw, w0, nw * 4);
        memcpy(db, b0, co * 4);
        iabn_err e = {0};
        CHECK_OK(iabn_conv_bwd_filter(NULL, &g, x, dy, dw, bias ? db : NULL, scr, sb, &e));
        CHECK(memcmp(dw, first_w, nw * 4) == 0 && memcmp(db, first_b, co * 4) == 0);
        if (sb) { /* too little scratch: an error that says so, dw untouched */
            CHECK(iabn_conv_bwd_filter(NULL, &g, x, dy, dw, NULL, scr, sb - 4, &e) == IABN_EINVAL &&
                  strstr(e.msg, "scratch"));
            CHECK(memcmp(dw, first_w, nw * 4) == 0);
        }
        free(dw);
        free(db);
        free(scr);
    }
    free(x); free(dy); free(w0); free(b0); free(rw); free(ra); free(rb); free(rba);
    free(xn); free(dyn); free(first_w); free(first_b);
}

static void test_kernel(void)
{
    one_case(2, 24, 16, 5, 5, 1, 1);   /* 3 input blocks: one tile wide; one chunk */
    one_case(1, 8, 8, 3, 3, 1, 0);     /* 1 block */
    one_case(2, 40, 24, 7, 3, 1, 1);   /* 5 blocks: tiles of 3 and 2 */
    one_case(3, 56, 8, 15, 15, 1, 0);  /* 7 blocks (3, 3, 1); 675 pixels: chunks of 400, 275 */
    one_case(5, 16, 32, 16, 15, 1, 1); /* 1200 pixels: three chunks, across images */
    one_case(4, 64, 40, 14, 14, 1, 0); /* ResNeXt's 14x14 maps: 784 pixels (400, 384) */
    /* strided: x gathered at every other pixel of every other row, odd maps */
    one_case(3, 40, 16, 15, 13, 2, 1); /* 8x7 outputs */
    one_case(9, 24, 8, 18, 18, 2, 0);  /* 729 pixels: two chunks */
    one_case(2, 16, 8, 7, 9, 3, 1);    /* stride 3 */
}

/* Which geometries and passes the path takes, and the votes that keep the
 * layout pass giving them nChw8c. */
static void test_path(void)
{
    iabn_conv_geom g;
    CHECK(iabn_conv_geom_init(&g, 4, 64, 14, 14, 32, 1, 1, 1, 0, 1, 1) == 0);
    CHECK(!iabn_conv_1x1_geometry(&g)); /* NCHW */
    g.x_layout = g.y_layout = IABN_LAYOUT_NCHW8C;
    CHECK(iabn_conv_1x1_geometry(&g));
    CHECK(!iabn_conv_1x1_takes(&g, IABN_CONV_FWD) && !iabn_conv_1x1_takes(&g, IABN_CONV_BWD_DATA));
    g.y_layout = IABN_LAYOUT_NCHW;
    CHECK(!iabn_conv_1x1_geometry(&g)); /* a mix */
    g.y_layout = IABN_LAYOUT_NCHW16C;
    CHECK(!iabn_conv_1x1_geometry(&g));
    iabn_conv_geom s = g;
    /* stride 2 (ResNeXt's downsampling shortcuts) */
    CHECK(iabn_conv_geom_init(&s, 4, 64, 14, 14, 32, 1, 1, 2, 0, 1, 1) == 0);
    s.x_layout = s.y_layout = IABN_LAYOUT_NCHW8C;
    CHECK(iabn_conv_1x1_geometry(&s));
    CHECK(iabn_conv_1x1_takes(&s, IABN_CONV_BWD_FILTER) == iabn_conv_blocked_native_8c());
    CHECK(iabn_conv_geom_init(&s, 4, 64, 14, 14, 32, 1, 1, 1, 0, 1, 2) == 0); /* grouped */
    s.x_layout = s.y_layout = IABN_LAYOUT_NCHW8C;
    CHECK(!iabn_conv_1x1_geometry(&s));
    CHECK(iabn_conv_geom_init(&s, 4, 64, 14, 14, 32, 3, 3, 1, 1, 1, 1) == 0); /* 3x3 */
    s.x_layout = s.y_layout = IABN_LAYOUT_NCHW8C;
    CHECK(!iabn_conv_1x1_geometry(&s));
    /* where the build is AVX2 and the CPU's blocked layout nChw8c, the
     * weight pass votes for it on both sides */
    if (iabn_conv_blocked_layout() == IABN_LAYOUT_NCHW8C && iabn_conv_blocked_native_8c()) {
        CHECK(iabn_conv_geom_init(&g, 4, 64, 14, 14, 32, 1, 1, 1, 0, 1, 1) == 0);
        CHECK(iabn_conv_layout_vote(&g, IABN_CONV_BWD_FILTER, 0) == 1 &&
              iabn_conv_layout_vote(&g, IABN_CONV_BWD_FILTER, 1) == 1);
        g.x_layout = g.y_layout = IABN_LAYOUT_NCHW8C;
        CHECK(iabn_conv_1x1_takes(&g, IABN_CONV_BWD_FILTER) && iabn_conv_layouts_ok(&g, 2));
    }
}

int main(void)
{
    RUN(test_kernel);
    RUN(test_path);
    return TEST_END();
}
