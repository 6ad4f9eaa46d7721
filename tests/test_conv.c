/* test_conv.c: the CPU convolution kernels (fwd, bwd-data, bwd-filter)
 * against a naive direct convolution with double accumulation (PyTorch
 * conv2d semantics), over geometries that reach every path: oneDNN (dense,
 * 16 channels and up), im2col, 1x1, per-tap (dilated on small maps) and the
 * direct kernels, at 1, 2 and 3 threads.  Also: bwd-filter accumulates, bwd-data overwrites, nothing
 * is written past the scratch or the outputs, repeated calls are bitwise
 * equal, and a finite-difference check of all three gradients. */
#include "iabn_config.h"
#include "tensor/tensor.h"
#include "tensor/cpu/conv_impl.h"
#include "test_util.h"

typedef struct tcase {
    int n, c_in, h, w, c_out, k, stride, pad, dil, groups;
} tcase;


/* Reference values and sums of |terms| (the scale of the rounding error). */
static void ref_all(const iabn_conv_geom *g, const float *x, const float *w, const float *b,
                    const float *dy, double *y, double *ya, double *dx, double *dxa, double *dw,
                    double *dwa)
{
    int G = g->groups, cpi = g->c_in / G, cpo = g->c_out / G;
    size_t ny = (size_t)g->n * g->c_out * g->h_out * g->w_out;
    size_t nx = (size_t)g->n * g->c_in * g->h_in * g->w_in;
    size_t nw = (size_t)g->c_out * cpi * g->kh * g->kw;
    memset(dx, 0, nx * sizeof(double)); memset(dxa, 0, nx * sizeof(double));
    memset(dw, 0, nw * sizeof(double)); memset(dwa, 0, nw * sizeof(double));
    for (int n = 0; n < g->n; n++)
        for (int co = 0; co < g->c_out; co++)
            for (int oh = 0; oh < g->h_out; oh++)
                for (int ow = 0; ow < g->w_out; ow++) {
                    size_t yi = (((size_t)n * g->c_out + co) * g->h_out + oh) * g->w_out + ow;
                    double s = b ? b[co] : 0, sa = b ? fabs(b[co]) : 0, d = dy[yi];
                    for (int ci = 0; ci < cpi; ci++)
                        for (int r = 0; r < g->kh; r++)
                            for (int q = 0; q < g->kw; q++) {
                                int ih = oh * g->stride - g->pad + r * g->dil;
                                int iw = ow * g->stride - g->pad + q * g->dil;
                                if (ih < 0 || ih >= g->h_in || iw < 0 || iw >= g->w_in) continue;
                                int c = (co / cpo) * cpi + ci;
                                size_t xi = (((size_t)n * g->c_in + c) * g->h_in + ih) * g->w_in + iw;
                                size_t wi = (((size_t)co * cpi + ci) * g->kh + r) * g->kw + q;
                                s += (double)x[xi] * w[wi];
                                sa += fabs((double)x[xi] * w[wi]);
                                dx[xi] += d * w[wi];
                                dxa[xi] += fabs(d * w[wi]);
                                dw[wi] += d * x[xi];
                                dwa[wi] += fabs(d * x[xi]);
                            }
                    y[yi] = s;
                    ya[yi] = sa;
                }
    (void)ny;
}

/* Largest |got - want| / (1e-6 + 3e-5 * scale); <= 1 passes. */
static double worst(const float *got, const double *want, const double *scale, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (1e-6 + 3e-5 * scale[i]);
        if (!(e <= m)) m = e;
    }
    return m;
}

static const char *path_name(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    iabn_conv_plan p;
    iabn_conv_plan_make(g, pass, iabn_num_threads(), &p);
    return p.path == IABN_CONV_PATH_DIRECT ? "direct"
           : p.path == IABN_CONV_PATH_TAPS ? "taps"
           : p.path == IABN_CONV_PATH_DNNL ? "onednn"
                                           : "im2col";
}

static int paths_seen[IABN_CONV_NPATHS];

static void run_case(const tcase *tc)
{
    iabn_conv_geom g;
    int rc = iabn_conv_geom_init(&g, tc->n, tc->c_in, tc->h, tc->w, tc->c_out, tc->k, tc->k,
                                 tc->stride, tc->pad, tc->dil, tc->groups);
    CHECK_MSG(rc == 0, "geometry n%d c%d %dx%d -> %d k%d s%d p%d d%d g%d", tc->n, tc->c_in,
              tc->h, tc->w, tc->c_out, tc->k, tc->stride, tc->pad, tc->dil, tc->groups);
    if (rc) return;
    int cpi = g.c_in / g.groups;
    size_t nx = (size_t)g.n * g.c_in * g.h_in * g.w_in;
    size_t ny = (size_t)g.n * g.c_out * g.h_out * g.w_out;
    size_t nw = (size_t)g.c_out * cpi * g.kh * g.kw;
    unsigned seed = (unsigned)(tc->n * 7 + tc->c_in * 131 + tc->h * 17 + tc->k * 3 + tc->dil);
    float *x = malloc(nx * sizeof(float)), *w = malloc(nw * sizeof(float));
    float *b = malloc(g.c_out * sizeof(float)), *dy = malloc(ny * sizeof(float));
    float *dw0 = malloc(nw * sizeof(float)), *db0 = malloc(g.c_out * sizeof(float));
    t_fill(x, nx, seed); t_fill(w, nw, seed + 1); t_fill(b, g.c_out, seed + 2);
    t_fill(dy, ny, seed + 3); t_fill(dw0, nw, seed + 4); t_fill(db0, g.c_out, seed + 5);
    double *ry = malloc(ny * sizeof(double)), *rya = malloc(ny * sizeof(double));
    double *rdx = malloc(nx * sizeof(double)), *rdxa = malloc(nx * sizeof(double));
    double *rdw = malloc(nw * sizeof(double)), *rdwa = malloc(nw * sizeof(double));
    ref_all(&g, x, w, b, dy, ry, rya, rdx, rdxa, rdw, rdwa);
    for (size_t i = 0; i < nw; i++) { rdw[i] += dw0[i]; rdwa[i] += fabs(dw0[i]); }
    double rdb[4096], rdba[4096];
    for (int co = 0; co < g.c_out; co++) {
        rdb[co] = db0[co]; rdba[co] = fabs(db0[co]);
        for (int n = 0; n < g.n; n++)
            for (int i = 0; i < g.h_out * g.w_out; i++) {
                double v = dy[((size_t)n * g.c_out + co) * g.h_out * g.w_out + i];
                rdb[co] += v; rdba[co] += fabs(v);
            }
    }

    static const int thread_counts[] = {2, 1, 3};
    for (int ti = 0; ti < 3; ti++) {
        iabn_set_num_threads(thread_counts[ti]);
        int th = iabn_num_threads();
        for (int pass = 0; pass < 3; pass++) {
            iabn_conv_plan pl;
            iabn_conv_plan_make(&g, (iabn_conv_pass)pass, th, &pl);
            paths_seen[pl.path] = 1;
        }
        size_t sf = 0;
        for (int pass = 0; pass < 3; pass++) {
            size_t s = iabn_conv_scratch_bytes(&g, (iabn_conv_pass)pass, th) / sizeof(float);
            if (s > sf) sf = s;
        }
        float *scr = t_alloc_canary(sf);
        iabn_err err = {0};
        float *y = t_alloc_canary(ny), *y2 = t_alloc_canary(ny), *dx = t_alloc_canary(nx);
        float *dw = t_alloc_canary(nw), *db = t_alloc_canary(g.c_out);

        CHECK_OK(iabn_conv_fwd(NULL, &g, x, w, b, y, scr, sf * sizeof(float), &err));
        double e = worst(y, ry, rya, ny);
        CHECK_MSG(e <= 1, "fwd [%s, %d thr] n%d c%d %dx%d -> %d k%d s%d p%d d%d g%d: err %.3g",
                  path_name(&g, IABN_CONV_FWD), th, tc->n, tc->c_in, tc->h, tc->w, tc->c_out,
                  tc->k, tc->stride, tc->pad, tc->dil, tc->groups, e);
        CHECK_OK(iabn_conv_fwd(NULL, &g, x, w, b, y2, scr, sf * sizeof(float), &err));
        CHECK_MSG(memcmp(y, y2, ny * sizeof(float)) == 0, "fwd not repeatable (g%d)", tc->groups);

        for (size_t i = 0; i < nx; i++) dx[i] = NAN; /* must be overwritten, never read */
        CHECK_OK(iabn_conv_bwd_data(NULL, &g, dy, w, dx, scr, sf * sizeof(float), &err));
        e = worst(dx, rdx, rdxa, nx);
        CHECK_MSG(e <= 1, "bwd-data [%s, %d thr] n%d c%d %dx%d -> %d k%d s%d p%d d%d g%d: err %.3g",
                  path_name(&g, IABN_CONV_BWD_DATA), th, tc->n, tc->c_in, tc->h, tc->w,
                  tc->c_out, tc->k, tc->stride, tc->pad, tc->dil, tc->groups, e);

        memcpy(dw, dw0, nw * sizeof(float));
        memcpy(db, db0, g.c_out * sizeof(float));
        CHECK_OK(iabn_conv_bwd_filter(NULL, &g, x, dy, dw, db, scr, sf * sizeof(float), &err));
        e = worst(dw, rdw, rdwa, nw);
        CHECK_MSG(e <= 1, "bwd-filter [%s, %d thr] n%d c%d %dx%d -> %d k%d s%d p%d d%d g%d: err %.3g",
                  path_name(&g, IABN_CONV_BWD_FILTER), th, tc->n, tc->c_in, tc->h, tc->w,
                  tc->c_out, tc->k, tc->stride, tc->pad, tc->dil, tc->groups, e);
        e = worst(db, rdb, rdba, g.c_out);
        CHECK_MSG(e <= 1, "dbias g%d c%d: err %.3g", tc->groups, tc->c_out, e);

        CHECK_MSG(t_canary_ok(scr, sf) && t_canary_ok(y, ny) && t_canary_ok(dx, nx) &&
                      t_canary_ok(dw, nw) && t_canary_ok(db, g.c_out),
                  "write past a buffer: n%d c%d %dx%d k%d g%d", tc->n, tc->c_in, tc->h, tc->w,
                  tc->k, tc->groups);
        free(scr); free(y); free(y2); free(dx); free(dw); free(db);
    }
    iabn_set_num_threads(2);
    free(x); free(w); free(b); free(dy); free(dw0); free(db0);
    free(ry); free(rya); free(rdx); free(rdxa); free(rdw); free(rdwa);
}

static void test_geometry(void)
{
    iabn_conv_geom g;
    CHECK(iabn_conv_geom_init(&g, 2, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1) == 0);
    CHECK(g.h_out == 56 && g.w_out == 56);
    CHECK(iabn_conv_geom_init(&g, 1, 3, 224, 224, 64, 7, 7, 2, 3, 1, 1) == 0);
    CHECK(g.h_out == 112 && g.w_out == 112);
    CHECK(iabn_conv_geom_init(&g, 1, 8, 33, 33, 8, 3, 3, 1, 36, 36, 1) == 0);
    CHECK(g.h_out == 33);
    CHECK(iabn_conv_geom_init(&g, 1, 8, 4, 4, 8, 3, 3, 1, 0, 2, 1) == -1); /* extent 5 > 4 */
    CHECK(iabn_conv_geom_init(&g, 1, 6, 8, 8, 8, 3, 3, 1, 1, 1, 4) == -1); /* 6 % 4 */
    CHECK(iabn_conv_geom_init(&g, 1, 8, 8, 8, 8, 3, 3, 0, 1, 1, 1) == -1);
    CHECK(iabn_conv_geom_init(&g, 1, 8, 1, 1, 8, 3, 3, 2, 1, 1, 1) == 0);
    CHECK(g.h_out == 1);
}

static void test_dense(void)
{
    static const tcase cs[] = {
        {2, 3, 9, 11, 5, 3, 1, 1, 1, 1},    /* odd sizes, items in parallel, dw partials */
        {3, 4, 8, 7, 6, 3, 2, 1, 1, 1},     /* stride 2: col2im */
        {1, 8, 13, 13, 16, 7, 2, 3, 1, 1},  /* 7x7 stem-like */
        {2, 16, 6, 5, 24, 1, 1, 0, 1, 1},   /* 1x1: no im2col */
        {2, 16, 7, 7, 8, 1, 2, 0, 1, 1},    /* 1x1 stride 2 */
        {1, 6, 5, 6, 4, 1, 1, 1, 1, 1},     /* 1x1 with padding */
        {4, 5, 10, 10, 7, 3, 1, 0, 1, 1},   /* pad 0 */
        {1, 5, 10, 9, 3, 3, 1, 2, 1, 1},    /* pad 2 */
        {1, 5, 9, 10, 3, 3, 2, 3, 1, 1},    /* pad 3, stride 2 */
        {2, 8, 9, 9, 8, 3, 1, 2, 2, 1},     /* dilation 2 */
        {1, 4, 7, 7, 4, 3, 1, 12, 12, 1},   /* dilation 12 on a 7x7 map */
        {1, 4, 11, 9, 5, 3, 2, 12, 12, 1},  /* dilation 12, stride 2 */
        /* wider than the direct kernels take: im2col + sgemm */
        {2, 80, 7, 6, 24, 3, 1, 1, 1, 1},   /* flipped bwd-data, dw partials */
        {3, 72, 6, 5, 8, 3, 2, 1, 1, 1},    /* stride 2: col2im */
        {1, 8, 7, 7, 72, 3, 1, 2, 2, 1},    /* dilated */
        {2, 144, 5, 5, 144, 3, 1, 1, 1, 2}, /* 72 per group */
        {4, 66, 9, 7, 70, 5, 2, 2, 1, 1},   /* 5x5 stride 2 */
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&cs[i]);
}

static void test_taps(void)
{
    static const tcase cs[] = {
        {1, 64, 9, 9, 32, 3, 1, 12, 12, 1},  /* only the centre tap reads the map */
        {2, 64, 10, 11, 48, 3, 1, 4, 4, 1},  /* partial windows, whole-row taps */
        {1, 64, 9, 9, 32, 3, 2, 6, 6, 1},    /* strided */
        {1, 64, 13, 13, 32, 3, 1, 12, 12, 1},
        {3, 128, 6, 7, 64, 3, 1, 3, 3, 2},   /* two groups of 64 */
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&cs[i]);
}

static void test_grouped(void)
{
    static const tcase cs[] = {
        {2, 8, 12, 10, 8, 3, 1, 1, 1, 2},      /* 4 per group */
        {2, 128, 6, 6, 128, 3, 1, 1, 1, 64},   /* 2 per group, 64 groups */
        {1, 256, 5, 7, 256, 3, 2, 1, 1, 64},   /* 4 per group, stride 2 */
        {1, 512, 6, 6, 512, 3, 1, 1, 1, 64},   /* 8 per group */
        {2, 12, 9, 8, 12, 3, 1, 1, 1, 12},     /* depthwise */
        {1, 16, 11, 11, 16, 3, 2, 1, 1, 16},   /* depthwise stride 2 */
        {1, 7, 10, 9, 7, 5, 1, 2, 1, 7},       /* depthwise 5x5 */
        {1, 6, 9, 9, 15, 3, 1, 1, 1, 3},       /* 2 in, 5 out per group */
        {1, 32, 9, 9, 32, 7, 1, 3, 1, 2},      /* 16 per group, 7x7 */
        {1, 128, 9, 9, 128, 3, 1, 12, 12, 64}, /* dilation 12 on a 9x9 map */
        {2, 8, 9, 11, 8, 3, 2, 0, 2, 4},       /* stride 2, dilation 2, pad 0 */
        {1, 12, 8, 8, 12, 1, 1, 0, 1, 4},      /* grouped 1x1 */
        {1, 12, 8, 8, 12, 1, 2, 1, 1, 4},      /* grouped 1x1, stride 2, pad 1 */
        {2, 64, 5, 5, 64, 3, 1, 1, 1, 2},      /* 32 per group */
        {1, 96, 7, 7, 96, 3, 2, 1, 1, 3},      /* 32 per group, stride 2 */
        {3, 9, 7, 6, 9, 3, 3, 2, 1, 3},        /* stride 3 */
        {1, 256, 128, 130, 256, 3, 1, 1, 1, 128}, /* 17 MB output: streaming stores */
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&cs[i]);
    /* channels per group 1..8 */
    for (int cpg = 1; cpg <= 8; cpg++) {
        tcase t = {2, cpg * 3, 8, 9, cpg * 3, 3, 1 + cpg % 2, cpg % 4, 1 + cpg % 3, 3};
        run_case(&t);
    }
}

/* The direct kernels' AVX-512 build against the AVX2 one: the same bits in
 * the forward and bwd-data (each output sums its products in one order
 * whatever the vector width), over widths that leave every tail length and
 * the strided / dilated / upsampled packings.  Skipped where the CPU or the
 * build has no AVX-512. */
static void test_direct_isa(void)
{
#if IABN_HAVE_DIRECT_AVX512
    if (!iabn_conv_direct_avx512()) {
        printf("  (no AVX-512 on this CPU: the AVX2 build alone runs)\n");
        return;
    }
    static const tcase cs[] = {
        {2, 8, 12, 10, 8, 3, 1, 1, 1, 2},      /* 4 per group */
        {2, 128, 9, 56, 128, 3, 1, 1, 1, 64},  /* 2 per group, 56 wide */
        {1, 256, 7, 28, 256, 3, 2, 1, 1, 64},  /* 4 per group, stride 2 */
        {1, 64, 6, 17, 64, 3, 1, 2, 2, 8},     /* 8 per group, dilation 2 */
        {1, 16, 11, 33, 16, 3, 2, 1, 1, 16},   /* depthwise stride 2, odd width */
        {1, 3, 14, 45, 32, 3, 2, 1, 1, 1},     /* a stem: 3 channels in */
        {3, 9, 7, 6, 9, 3, 3, 2, 1, 3},        /* stride 3 */
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        const tcase *t = &cs[i];
        iabn_conv_geom g;
        CHECK(iabn_conv_geom_init(&g, t->n, t->c_in, t->h, t->w, t->c_out, t->k, t->k, t->stride,
                                  t->pad, t->dil, t->groups) == 0);
        size_t nx = (size_t)g.n * g.c_in * g.h_in * g.w_in;
        size_t ny = (size_t)g.n * g.c_out * g.h_out * g.w_out;
        size_t nw = (size_t)g.c_out * (g.c_in / g.groups) * g.kh * g.kw;
        size_t sf = iabn_conv_direct_scratch(&g, IABN_CONV_FWD, 2);
        size_t sd = iabn_conv_direct_scratch(&g, IABN_CONV_BWD_DATA, 2);
        float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc((size_t)g.c_out * 4);
        float *y1 = malloc(ny * 4), *y2 = malloc(ny * 4), *dx1 = malloc(nx * 4), *dx2 = malloc(nx * 4);
        float *scr = malloc((sf > sd ? sf : sd) * 4);
        t_fill(x, nx, 7); t_fill(w, nw, 8); t_fill(b, (size_t)g.c_out, 9);
        iabn_conv_direct_fwd_avx2(&g, 2, x, w, b, y1, scr);
        iabn_conv_direct_fwd_avx512(&g, 2, x, w, b, y2, scr);
        CHECK_MSG(memcmp(y1, y2, ny * 4) == 0, "case %zu: AVX-512 forward differs", i);
        iabn_conv_direct_bwd_data_avx2(&g, 2, y1, w, dx1, scr);
        iabn_conv_direct_bwd_data_avx512(&g, 2, y1, w, dx2, scr);
        CHECK_MSG(memcmp(dx1, dx2, nx * 4) == 0, "case %zu: AVX-512 bwd-data differs", i);
        free(x); free(w); free(b); free(y1); free(y2); free(dx1); free(dx2); free(scr);
    }
#else
    CHECK(!iabn_conv_direct_avx512()); /* this build has the portable / AVX2 code only */
#endif
}

/* L = sum r*y; dL/dx = bwd_data(r), dL/dw = bwd_filter(x, r), dL/db = sum r. */
static double loss(const iabn_conv_geom *g, const float *x, const float *w, const float *b,
                   const float *r, float *y, void *scr, size_t sb)
{
    size_t ny = (size_t)g->n * g->c_out * g->h_out * g->w_out;
    iabn_err e = {0};
    CHECK_OK(iabn_conv_fwd(NULL, g, x, w, b, y, scr, sb, &e));
    double s = 0;
    for (size_t i = 0; i < ny; i++) s += (double)r[i] * y[i];
    return s;
}

static void fd_case(int n, int c_in, int h, int w_, int c_out, int k, int stride, int pad,
                    int dil, int groups)
{
    iabn_conv_geom g;
    CHECK(iabn_conv_geom_init(&g, n, c_in, h, w_, c_out, k, k, stride, pad, dil, groups) == 0);
    size_t nx = (size_t)n * c_in * h * w_, ny = (size_t)n * c_out * g.h_out * g.w_out;
    size_t nw = (size_t)c_out * (c_in / groups) * k * k;
    size_t sb = 0;
    for (int p = 0; p < 3; p++) {
        size_t s = iabn_conv_scratch_bytes(&g, (iabn_conv_pass)p, iabn_num_threads());
        if (s > sb) sb = s;
    }
    void *scr = malloc(sb + 4);
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc(c_out * 4), *r = malloc(ny * 4);
    float *y = malloc(ny * 4), *dx = malloc(nx * 4), *dw = calloc(nw, 4), *db = calloc(c_out, 4);
    t_fill(x, nx, 11); t_fill(w, nw, 12); t_fill(b, c_out, 13); t_fill(r, ny, 14);
    iabn_err e = {0};
    CHECK_OK(iabn_conv_bwd_data(NULL, &g, r, w, dx, scr, sb, &e));
    CHECK_OK(iabn_conv_bwd_filter(NULL, &g, x, r, dw, db, scr, sb, &e));
    const float eps = 1e-2f;
    for (size_t i = 0; i < nx; i += 7) {
        float keep = x[i];
        x[i] = keep + eps; double lp = loss(&g, x, w, b, r, y, scr, sb);
        x[i] = keep - eps; double lm = loss(&g, x, w, b, r, y, scr, sb);
        x[i] = keep;
        CHECK_CLOSE(dx[i], (lp - lm) / (2 * eps), 2e-3, 2e-3);
    }
    for (size_t i = 0; i < nw; i += 3) {
        float keep = w[i];
        w[i] = keep + eps; double lp = loss(&g, x, w, b, r, y, scr, sb);
        w[i] = keep - eps; double lm = loss(&g, x, w, b, r, y, scr, sb);
        w[i] = keep;
        CHECK_CLOSE(dw[i], (lp - lm) / (2 * eps), 2e-3, 2e-3);
    }
    for (int i = 0; i < c_out; i++) {
        float keep = b[i];
        b[i] = keep + eps; double lp = loss(&g, x, w, b, r, y, scr, sb);
        b[i] = keep - eps; double lm = loss(&g, x, w, b, r, y, scr, sb);
        b[i] = keep;
        CHECK_CLOSE(db[i], (lp - lm) / (2 * eps), 2e-3, 2e-3);
    }
    free(scr); free(x); free(w); free(b); free(r); free(y); free(dx); free(dw); free(db);
}

static void test_finite_difference(void)
{
    fd_case(2, 3, 7, 6, 4, 3, 2, 1, 1, 1);  /* dense, stride 2 */
    fd_case(2, 8, 6, 7, 8, 3, 1, 2, 2, 4);  /* grouped, dilated */
}

int main(void)
{
    iabn_set_num_threads(2);
    RUN(test_geometry);
    RUN(test_dense);
    RUN(test_taps);
    RUN(test_grouped);
    RUN(test_direct_isa);
    RUN(test_finite_difference);
    CHECK_MSG(paths_seen[IABN_CONV_PATH_IM2COL] && paths_seen[IABN_CONV_PATH_TAPS] &&
                  paths_seen[IABN_CONV_PATH_DIRECT] &&
                  paths_seen[IABN_CONV_PATH_DNNL] == iabn_conv_have_dnnl(),
              "every path exercised (im2col %d, taps %d, direct %d, oneDNN %d)",
              paths_seen[IABN_CONV_PATH_IM2COL], paths_seen[IABN_CONV_PATH_TAPS],
              paths_seen[IABN_CONV_PATH_DIRECT], paths_seen[IABN_CONV_PATH_DNNL]);
    return TEST_END();
}
