/* test_conv_wgrad.c: the hand-written weight pass of dense convs on
 * nChw8c and nChw16c (cpu/conv_wgrad.c).
 *
 * 1x1: geometries with 1 to 7 input blocks (tiles of 3, 2 and 1 blocks),
 * one pixel chunk and several in each lane count (the chunk boundaries
 * inside an image and between images), strides 1 to 3 (x gathered into
 * the scratch).  k x k: 3x3 with padding 1, tiles of 3, 2 + 2 and
 * 3 + 2 + 2 blocks, chunks of rows, stride 2, dilation 2 and 4 (taps that
 * read only padding), 3x1 and a padded 1x1, several super-groups of output
 * channels per thread.  With and without bias, in both lane counts: dw
 * and dbias, which accumulate, against a double-precision reference; the
 * same bits with 1, 2 and 3 threads, in the library's build (AVX2 for 8
 * lanes, AVX-512 for 16 where the CPU has it) and a portable one
 * (cpu/simd.h's float structs, built here with AVX2 off), and nothing
 * written past a buffer.
 * Through the entry point (cpu/conv.h): the path the graph gets (the AVX2
 * build takes the 1x1 weight pass of nChw8c operands, the AVX-512 one every
 * dense weight pass on nChw16c but oneDNN's Winograd ones), the same bits
 * as the kernel, the scratch (too little is an error), and the layout
 * votes.
 */
#include "tensor/cpu/conv_impl.h"
#include "tensor/tensor.h"
#include "test_util.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* the portable copies (tests/meson.build), 8 and 16 lanes */
int iabn_conv_wgrad_geometry_portable(const iabn_conv_geom *g);
void iabn_conv_wgrad_bwd_filter_portable(const iabn_conv_geom *g, int threads, const float *x,
                                       const float *dy, float *dw, float *dbias, float *scratch);
int iabn_conv_wgrad_geometry_portable16(const iabn_conv_geom *g);
size_t iabn_conv_wgrad_scratch_portable(const iabn_conv_geom *g, int threads);
size_t iabn_conv_wgrad_scratch_portable16(const iabn_conv_geom *g, int threads);
void iabn_conv_wgrad_bwd_filter_portable16(const iabn_conv_geom *g, int threads, const float *x,
                                         const float *dy, float *dw, float *dbias,
                                         float *scratch);

/* Whether the library runs 16 lanes natively here (its AVX-512 build). */
static int native16(void) { return iabn_conv_direct_avx512(); }

/* |got - ref| <= TOL * (sum of |products| + |initial value|) */
#define TOL 2e-6

/* NCHW index of the element at nChw<b>c offset i */
static size_t nchw_of(size_t i, int c, int hw, int b)
{
    size_t l = i % b, p = (i / b) % hw, cb = (i / b / hw) % (c / b), n = i / b / hw / (c / b);
    return (n * c + cb * b + l) * hw + p;
}

/* a kh x kw kernel, blk: 8 (nChw8c) or 16 (nChw16c) */
static void kcase(int n, int ci, int co, int h, int w, int kh, int kw, int stride, int pad,
                  int dil, int bias, int blk)
{
    iabn_conv_geom g;
    CHECK(iabn_conv_geom_init(&g, n, ci, h, w, co, kh, kw, stride, pad, dil, 1) == 0);
    g.x_layout = g.y_layout = blk == 16 ? IABN_LAYOUT_NCHW16C : IABN_LAYOUT_NCHW8C;
    if (blk == 16) CHECK(iabn_conv_wgrad_geometry_portable16(&g) && !iabn_conv_wgrad_geometry(&g));
    else CHECK(iabn_conv_wgrad_geometry(&g) && iabn_conv_wgrad_geometry_portable(&g));
    int hw = h * w, hwo = g.h_out * g.w_out, T = kh * kw;
    int one = T == 1 && pad == 0; /* the 1x1 kernel */
    size_t nx = (size_t)n * ci * hw, ny = (size_t)n * co * hwo, nw = (size_t)co * ci * T;
    float *x = malloc(nx * 4), *dy = malloc(ny * 4), *w0 = malloc(nw * 4), *b0 = malloc(co * 4);
    t_fill(x, nx, (unsigned)(ci + hw)); t_fill(dy, ny, (unsigned)(co + 7 * hwo));
    t_fill(w0, nw, 5); t_fill(b0, co, 6);
    /* the reference, from the blocked buffers read as NCHW */
    double *rw = malloc(nw * 8), *ra = malloc(nw * 8), *rb = calloc(co, 8), *rba = calloc(co, 8);
    float *xn = malloc(nx * 4), *dyn = malloc(ny * 4);
    for (size_t i = 0; i < nx; i++) xn[nchw_of(i, ci, hw, blk)] = x[i];
    for (size_t i = 0; i < ny; i++) dyn[nchw_of(i, co, hwo, blk)] = dy[i];
    for (int o = 0; o < co; o++) {
        for (int c = 0; c < ci; c++)
            for (int t = 0; t < T; t++) {
                size_t at = ((size_t)o * ci + c) * T + t; /* OIHW */
                double s = w0[at], a = fabs(s);
                for (int i = 0; i < n; i++)
                    for (int p = 0; p < hwo; p++) {
                        int ih = p / g.w_out * stride - pad + t / kw * dil;
                        int iw = p % g.w_out * stride - pad + t % kw * dil;
                        if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue; /* padding */
                        double v = (double)dyn[((size_t)i * co + o) * hwo + p] *
                                   xn[((size_t)i * ci + c) * hw + (size_t)ih * w + iw];
                        s += v; a += fabs(v);
                    }
                rw[at] = s; ra[at] = a;
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
    /* the library's build (its entry point sends nChw16c to the AVX-512
     * build), or without one for 16 lanes here the portable copy */
    int lib = blk == 8 || native16();
    for (int v = 0; v < 4; v++) { /* 1, 2, 3 threads; then the portable build on 2 */
        int th = v < 3 ? threads[v] : 2;
        size_t ns = lib && v < 3 ? iabn_conv_wgrad_scratch(&g, th)
                    : blk == 16  ? iabn_conv_wgrad_scratch_portable16(&g, th)
                                 : iabn_conv_wgrad_scratch_portable(&g, th);
        /* 1x1: x gathered where strided; k x k: the threads' sums, one
         * share each (the canaries check that the kernel stays inside) */
        CHECK(one ? ns == (stride == 1 ? 0 : iabn_conv_round16((size_t)n * ci * hwo))
                  : ns > 0 && ns % th == 0);
        float *dw = t_alloc_canary(nw), *db = t_alloc_canary(co), *scr = t_alloc_canary(ns);
        memcpy(dw, w0, nw * 4);
        memcpy(db, b0, co * 4);
        float *b = bias ? db : NULL;
        if (v < 3 && lib) iabn_conv_wgrad_bwd_filter(&g, th, x, dy, dw, b, scr);
        else if (blk == 16) iabn_conv_wgrad_bwd_filter_portable16(&g, th, x, dy, dw, b, scr);
        else iabn_conv_wgrad_bwd_filter_portable(&g, th, x, dy, dw, b, scr);
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
        CHECK_MSG(worst <= 1, "%dx%dx%dx%d -> %d, %dx%d s%d p%d d%d, bias %d, run %d: error %.3g of the bound", n,
                  ci, h, w, co, kh, kw, stride, pad, dil, bias, v, worst);
        if (!bias) CHECK(memcmp(db, b0, co * 4) == 0);
        if (v == 0) {
            memcpy(first_w, dw, nw * 4);
            memcpy(first_b, db, co * 4);
        } else {
            CHECK_MSG(memcmp(first_w, dw, nw * 4) == 0 && memcmp(first_b, db, co * 4) == 0,
                      "%dx%dx%dx%d -> %d, %dx%d: run %d differs from one thread", n, ci, h, w, co,
                      kh, kw, v);
        }
        free(dw);
        free(db);
    }
    /* the entry point: the kernel where the path takes the pass */
    iabn_set_num_threads(2);
    iabn_conv_plan p;
    iabn_conv_plan_make(&g, IABN_CONV_BWD_FILTER, 2, &p);
    CHECK((p.path == IABN_CONV_PATH_WGRAD) == iabn_conv_wgrad_takes(&g, IABN_CONV_BWD_FILTER));
    if (p.path == IABN_CONV_PATH_WGRAD) {
        /* the kernel's scratch for the plan's threads */
        size_t sb = iabn_conv_scratch_bytes(&g, IABN_CONV_BWD_FILTER, 2);
        CHECK(sb == iabn_conv_wgrad_scratch(&g, 2) * 4);
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

/* a 1x1 kernel */
static void one_case(int n, int ci, int co, int h, int w, int stride, int bias, int blk)
{
    kcase(n, ci, co, h, w, 1, 1, stride, 0, 1, bias, blk);
}

static void test_kernel(void)
{
    for (int blk = 8; blk <= 16; blk += 8) {
        int b = blk / 8; /* channels in blocks: the same tilings in both */
        one_case(2, 24 * b, 16 * b, 5, 5, 1, 1, blk);   /* 3 input blocks: one tile wide; one chunk */
        one_case(1, 8 * b, 8 * b, 3, 3, 1, 0, blk);     /* 1 block */
        one_case(2, 40 * b, 24 * b, 7, 3, 1, 1, blk);   /* 5 blocks: tiles of 3 and 2 */
        one_case(3, 56 * b, 8 * b, 15, 15, 1, 0, blk);  /* 7 blocks (3, 3, 1); 675 pixels: 8 lanes' chunks of 400, 275 */
        one_case(5, 16 * b, 32 * b, 16, 15, 1, 1, blk); /* 1200 pixels: 8 lanes' three chunks, across images */
        one_case(2, 16 * b, 48 * b, 26, 50, 1, 1, blk); /* 2600 pixels: 16 lanes' chunks of 1600, 1000 */
        one_case(4, 64 * b, 40 * b, 14, 14, 1, 0, blk); /* ResNeXt's 14x14 maps: 784 pixels (400, 384) */
        /* strided: x gathered at every other pixel of every other row, odd maps */
        one_case(3, 40 * b, 16 * b, 15, 13, 2, 1, blk); /* 8x7 outputs */
        one_case(9, 24 * b, 8 * b, 18, 18, 2, 0, blk);  /* 729 pixels: two chunks */
        one_case(2, 16 * b, 8 * b, 7, 9, 3, 1, blk);    /* stride 3 */
    }
}

static void test_kxk(void)
{
    for (int blk = 8; blk <= 16; blk += 8) {
        int b = blk / 8;
        kcase(2, 24 * b, 16 * b, 5, 5, 3, 3, 1, 1, 1, 1, blk);   /* 3 blocks, one chunk of rows */
        kcase(2, 32 * b, 16 * b, 7, 6, 3, 3, 1, 1, 1, 0, blk);   /* 4 blocks: 2 + 2 */
        kcase(2, 56 * b, 8 * b, 21, 20, 3, 3, 1, 1, 1, 1, blk);  /* 7 blocks: 3 + 2 + 2; chunks of 20 and 22 rows */
        kcase(3, 24 * b, 16 * b, 13, 11, 3, 3, 2, 1, 1, 1, blk); /* stride 2, odd maps */
        kcase(2, 16 * b, 16 * b, 9, 9, 3, 3, 1, 2, 2, 0, blk);   /* dilation 2 */
        kcase(2, 16 * b, 8 * b, 6, 7, 3, 3, 1, 4, 4, 1, blk);    /* dilation 4 on 6x7: corner taps read only padding */
        kcase(2, 16 * b, 8 * b, 6, 5, 3, 1, 1, 1, 1, 0, blk);    /* 3x1 */
        kcase(2, 16 * b, 8 * b, 4, 5, 1, 1, 1, 1, 1, 1, blk);    /* 1x1 with padding: one tap of the k x k kernel */
        kcase(1, 24 * b, 384, 5, 5, 4, 4, 1, 1, 1, 1, blk);      /* 4x4: several groups of output channels per thread */
        kcase(1, 512, 64, 5, 5, 3, 3, 1, 1, 1, 0, blk);          /* input channels in ranges, the last shorter */
    }
}

/* Which geometries and passes the path takes, and the votes that keep the
 * layout pass giving them nChw8c. */
static void test_path(void)
{
    iabn_conv_geom g;
    CHECK(iabn_conv_geom_init(&g, 4, 64, 14, 14, 32, 1, 1, 1, 0, 1, 1) == 0);
    CHECK(!iabn_conv_wgrad_geometry(&g)); /* NCHW */
    g.x_layout = g.y_layout = IABN_LAYOUT_NCHW8C;
    CHECK(iabn_conv_wgrad_geometry(&g));
    CHECK(!iabn_conv_wgrad_takes(&g, IABN_CONV_FWD) && !iabn_conv_wgrad_takes(&g, IABN_CONV_BWD_DATA));
    g.y_layout = IABN_LAYOUT_NCHW;
    CHECK(!iabn_conv_wgrad_geometry(&g)); /* a mix */
    g.y_layout = IABN_LAYOUT_NCHW16C;
    CHECK(!iabn_conv_wgrad_geometry(&g));
    iabn_conv_geom s = g;
    /* stride 2 (ResNeXt's downsampling shortcuts) */
    CHECK(iabn_conv_geom_init(&s, 4, 64, 14, 14, 32, 1, 1, 2, 0, 1, 1) == 0);
    s.x_layout = s.y_layout = IABN_LAYOUT_NCHW8C;
    CHECK(iabn_conv_wgrad_geometry(&s));
    CHECK(iabn_conv_wgrad_takes(&s, IABN_CONV_BWD_FILTER) == iabn_conv_blocked_native_8c());
    CHECK(iabn_conv_geom_init(&s, 4, 64, 14, 14, 32, 1, 1, 1, 0, 1, 2) == 0); /* grouped */
    s.x_layout = s.y_layout = IABN_LAYOUT_NCHW8C;
    CHECK(!iabn_conv_wgrad_geometry(&s));
    CHECK(iabn_conv_geom_init(&s, 4, 64, 14, 14, 32, 3, 3, 1, 1, 1, 1) == 0); /* 3x3 */
    s.x_layout = s.y_layout = IABN_LAYOUT_NCHW8C;
    CHECK(iabn_conv_wgrad_geometry(&s) && !iabn_conv_wgrad_takes(&s, IABN_CONV_BWD_FILTER));
    CHECK(iabn_conv_geom_init(&s, 4, 64, 14, 14, 32, 5, 5, 1, 2, 1, 1) == 0); /* 25 taps */
    s.x_layout = s.y_layout = IABN_LAYOUT_NCHW8C;
    CHECK(!iabn_conv_wgrad_geometry(&s));
    /* nChw16c: the AVX-512 build's weight pass, on every map */
    CHECK(iabn_conv_geom_init(&s, 4, 64, 14, 14, 32, 1, 1, 1, 0, 1, 1) == 0);
    s.x_layout = s.y_layout = IABN_LAYOUT_NCHW16C;
    CHECK(iabn_conv_wgrad_takes(&s, IABN_CONV_BWD_FILTER) == native16());
    CHECK(!iabn_conv_wgrad_takes(&s, IABN_CONV_FWD) && !iabn_conv_wgrad_takes(&s, IABN_CONV_BWD_DATA));
    CHECK(iabn_conv_geom_init(&s, 4, 64, 28, 28, 32, 1, 1, 2, 0, 1, 1) == 0); /* to 14x14 */
    s.x_layout = s.y_layout = IABN_LAYOUT_NCHW16C;
    CHECK(iabn_conv_wgrad_takes(&s, IABN_CONV_BWD_FILTER) == native16());
    CHECK(iabn_conv_geom_init(&s, 4, 64, 56, 56, 32, 1, 1, 1, 0, 1, 1) == 0); /* 56x56 */
    s.x_layout = s.y_layout = IABN_LAYOUT_NCHW16C;
    CHECK(iabn_conv_wgrad_takes(&s, IABN_CONV_BWD_FILTER) == native16());
    CHECK(!iabn_conv_wgrad_takes(&s, IABN_CONV_FWD) && !iabn_conv_wgrad_takes(&s, IABN_CONV_BWD_DATA));
    /* every other dense weight pass on nChw16c: 3x3 at any size, strided,
     * dilated; not where oneDNN's Winograd runs it */
    int kx[][6] = {{64, 28, 3, 1, 1, 1}, {64, 56, 3, 2, 1, 1}, {32, 32, 3, 1, 12, 12},
                   {64, 7, 3, 1, 1, 1}, {64, 28, 1, 1, 1, 1}};
    for (int i = 0; i < 5; i++) {
        CHECK(iabn_conv_geom_init(&s, 2, 64, kx[i][1], kx[i][1], kx[i][0], kx[i][2], kx[i][2],
                                  kx[i][3], kx[i][4], kx[i][5], 1) == 0);
        s.x_layout = s.y_layout = IABN_LAYOUT_NCHW16C;
        CHECK(iabn_conv_wgrad_takes(&s, IABN_CONV_BWD_FILTER) == native16());
        CHECK(!iabn_conv_wgrad_takes(&s, IABN_CONV_FWD) && !iabn_conv_wgrad_takes(&s, IABN_CONV_BWD_DATA));
        s.winograd = 1;
        CHECK(iabn_conv_wgrad_takes(&s, IABN_CONV_BWD_FILTER) ==
              (native16() && !iabn_conv_dnnl_winograd(&s, IABN_CONV_BWD_FILTER)));
    }
    CHECK(iabn_conv_geom_init(&s, 2, 64, 28, 28, 64, 3, 3, 1, 1, 1, 1) == 0);
    s.x_layout = s.y_layout = IABN_LAYOUT_NCHW16C;
    s.winograd = 1; /* oneDNN's Winograd takes it where the CPU has AVX-512 */
    CHECK(!iabn_conv_wgrad_takes(&s, IABN_CONV_BWD_FILTER));
    CHECK(iabn_conv_geom_init(&s, 4, 64, 28, 28, 32, 1, 1, 1, 0, 1, 1) == 0);
    s.x_layout = s.y_layout = IABN_LAYOUT_NCHW16C;
    s.c_in = 56; /* not a multiple of 16 */
    CHECK(!iabn_conv_wgrad_takes(&s, IABN_CONV_BWD_FILTER) && !iabn_conv_wgrad_geometry_portable16(&s));
    /* where the build is AVX2 and the CPU's blocked layout nChw8c, the
     * weight pass votes for it on both sides */
    if (iabn_conv_blocked_layout() == IABN_LAYOUT_NCHW8C && iabn_conv_blocked_native_8c()) {
        CHECK(iabn_conv_geom_init(&g, 4, 64, 14, 14, 32, 1, 1, 1, 0, 1, 1) == 0);
        CHECK(iabn_conv_layout_vote(&g, IABN_CONV_BWD_FILTER, 0) == 1 &&
              iabn_conv_layout_vote(&g, IABN_CONV_BWD_FILTER, 1) == 1);
        g.x_layout = g.y_layout = IABN_LAYOUT_NCHW8C;
        CHECK(iabn_conv_wgrad_takes(&g, IABN_CONV_BWD_FILTER) && iabn_conv_layouts_ok(&g, 2));
    }
}

int main(void)
{
    RUN(test_kernel);
    RUN(test_kxk);
    RUN(test_path);
    return TEST_END();
}
