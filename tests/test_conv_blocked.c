/* test_conv_blocked.c: the blocked grouped kernels (cpu/conv_blocked.c).
 *
 * For grouped geometries with 1 to 16 channels per group, strides 1 and 2,
 * paddings 0 to 2, dilations 1 and 2, 3x3, 1x3 and 5x5 kernels, odd maps,
 * with and without bias: the three passes on nChw16c and nChw8c activations
 * against a double-precision reference of PyTorch's conv2d; the 16-lane
 * builds (portable and, where the CPU has it, AVX-512) and the 8-lane one
 * (AVX2 in release builds, else portable) bit for bit where each output
 * sums the same products in the same order whatever the lanes: not where
 * one build rotates the input (cpu/conv_blocked_rot.c: the forward and data
 * passes of 3x3 stride 1, 2 or 4 per group with 8 lanes, 2 to 16 per group
 * on maps up to 28 wide with 16) and the other does not, nor along the rows
 * (cpu/conv_rows.c, 8 per group on maps up to 14 wide: the 8-lane forward
 * and data passes, the 16-lane weight pass), which sum in orders of their
 * own, each checked against the reference; the same
 * bits with 1 and 2 threads, dw and dbias accumulating, and nothing written
 * past a buffer.  Through the entry points (cpu/conv.h), in both blocked
 * layouts: the path the graph gets for blocked operands, NCHW operands
 * reordered through the scratch giving the same bits, and the votes.
 */
#include "iabn_config.h"
#include "tensor/cpu/conv_impl.h"
#include "tensor/tensor.h"
#include "test_util.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Per element: |got - ref| <= TOL * sum of |products| (float rounding of a
 * sum of at most 400 products, in any order, stays well inside). */
#define TOL 2e-6

typedef struct geo {
    int n, c, h, w, groups, kh, kw, stride, pad, dil, bias;
} geo;

static int init(const geo *q, iabn_conv_geom *g)
{
    if (iabn_conv_geom_init(g, q->n, q->c, q->h, q->w, q->c, q->kh, q->kw, q->stride, q->pad,
                            q->dil, q->groups))
        return -1;
    return 0;
}

/* The reference passes (NCHW, double) and the sums of |products| per output. */
static void reference(const iabn_conv_geom *g, const float *x, const float *w, const float *b,
                      const float *dy, double *y, double *ya, double *dx, double *dxa,
                      double *dw, double *dwa, double *db)
{
    int cpg = g->c_in / g->groups, T = g->kh * g->kw;
    size_t nx = (size_t)g->n * g->c_in * g->h_in * g->w_in;
    size_t nw = (size_t)g->c_out * cpg * T;
    memset(dx, 0, nx * 8); memset(dxa, 0, nx * 8);
    memset(dw, 0, nw * 8); memset(dwa, 0, nw * 8);
    memset(db, 0, (size_t)g->c_out * 8);
    for (int n = 0; n < g->n; n++)
        for (int oc = 0; oc < g->c_out; oc++)
            for (int oh = 0; oh < g->h_out; oh++)
                for (int ow = 0; ow < g->w_out; ow++) {
                    size_t yi = (((size_t)n * g->c_out + oc) * g->h_out + oh) * g->w_out + ow;
                    double s = b ? b[oc] : 0, a = b ? fabs(b[oc]) : 0, gy = dy[yi];
                    db[oc] += gy;
                    for (int k = 0; k < cpg; k++) {
                        int ic = oc / cpg * cpg + k;
                        for (int r = 0; r < g->kh; r++)
                            for (int t = 0; t < g->kw; t++) {
                                int ih = oh * g->stride - g->pad + r * g->dil;
                                int iw = ow * g->stride - g->pad + t * g->dil;
                                if (ih < 0 || ih >= g->h_in || iw < 0 || iw >= g->w_in) continue;
                                size_t xi = (((size_t)n * g->c_in + ic) * g->h_in + ih) * g->w_in + iw;
                                size_t wi = ((size_t)oc * cpg + k) * T + r * g->kw + t;
                                s += (double)w[wi] * x[xi];
                                a += fabs((double)w[wi] * x[xi]);
                                dx[xi] += (double)w[wi] * gy;
                                dxa[xi] += fabs((double)w[wi] * gy);
                                dw[wi] += gy * x[xi];
                                dwa[wi] += fabs(gy * x[xi]);
                            }
                    }
                    y[yi] = s;
                    ya[yi] = a;
                }
}

/* Worst |got - ref| / (TOL * sum|products|) (<= 1 passes); got in NCHW. */
static double worst(const float *got, const double *ref, const double *abs_, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(got[i] - ref[i]) / (TOL * abs_[i] + 1e-30);
        if (!(e <= m)) m = e;
    }
    return m;
}

typedef struct outs {
    float *y, *dx, *dw, *db;
} outs;

typedef void (*fwd_fn)(const iabn_conv_geom *, int, const float *, const float *, const float *,
                       float *, float *);
typedef void (*bwd_fn)(const iabn_conv_geom *, int, const float *, const float *, float *,
                       float *);
typedef void (*flt_fn)(const iabn_conv_geom *, int, const float *, const float *, float *,
                       float *, float *);
typedef size_t (*scr_fn)(const iabn_conv_geom *, iabn_conv_pass, int);

/* One build of the kernels. */
typedef struct build {
    const char *name;
    int lanes;
    fwd_fn f;
    bwd_fn bd;
    flt_fn bf;
    scr_fn scratch;
} build;

static const build portable16 = {"portable", 16, iabn_conv_blocked_fwd_portable,
                                 iabn_conv_blocked_bwd_data_portable,
                                 iabn_conv_blocked_bwd_filter_portable,
                                 iabn_conv_blocked_scratch_portable};
static const build lanes8 = {"8-lane", 8, iabn_conv_blocked_fwd_8c,
                             iabn_conv_blocked_bwd_data_8c, iabn_conv_blocked_bwd_filter_8c,
                             iabn_conv_blocked_scratch_8c};
#if IABN_HAVE_DIRECT_AVX512
static const build avx512 = {"AVX-512", 16, iabn_conv_blocked_fwd_avx512,
                             iabn_conv_blocked_bwd_data_avx512,
                             iabn_conv_blocked_bwd_filter_avx512,
                             iabn_conv_blocked_scratch_portable};
#endif

/* The three passes of build k on blocked x / dy; dw, db start from dw0, db0. */
static void run_build(const iabn_conv_geom *g, int threads, const build *k, const float *xb,
                      const float *w, const float *b, const float *dyb, const float *dw0,
                      const float *db0, outs *o)
{
    size_t nx = (size_t)g->n * g->c_in * g->h_in * g->w_in;
    size_t ny = (size_t)g->n * g->c_out * g->h_out * g->w_out;
    size_t nw = (size_t)g->c_out * (g->c_in / g->groups) * g->kh * g->kw;
    size_t sf = 0;
    for (int p = 0; p < 3; p++) {
        size_t s = k->scratch(g, (iabn_conv_pass)p, threads);
        if (s > sf) sf = s;
    }
    float *scr = t_alloc_canary(sf);
    o->y = t_alloc_canary(ny); o->dx = t_alloc_canary(nx);
    o->dw = t_alloc_canary(nw); o->db = t_alloc_canary((size_t)g->c_out);
    memcpy(o->dw, dw0, nw * 4);
    memcpy(o->db, db0, (size_t)g->c_out * 4);
    k->f(g, threads, xb, w, b, o->y, scr);
    k->bd(g, threads, dyb, w, o->dx, scr);
    k->bf(g, threads, xb, dyb, o->dw, o->db, scr);
    CHECK_MSG(t_canary_ok(scr, sf) && t_canary_ok(o->y, ny) && t_canary_ok(o->dx, nx) &&
                  t_canary_ok(o->dw, nw) && t_canary_ok(o->db, (size_t)g->c_out),
              "write past a buffer");
    free(scr);
}

static int same(const outs *a, const outs *b, const iabn_conv_geom *g)
{
    size_t nx = (size_t)g->n * g->c_in * g->h_in * g->w_in;
    size_t ny = (size_t)g->n * g->c_out * g->h_out * g->w_out;
    size_t nw = (size_t)g->c_out * (g->c_in / g->groups) * g->kh * g->kw;
    return !memcmp(a->y, b->y, ny * 4) && !memcmp(a->dx, b->dx, nx * 4) &&
           !memcmp(a->dw, b->dw, nw * 4) && !memcmp(a->db, b->db, (size_t)g->c_out * 4);
}

static void free_outs(outs *o)
{
    free(o->y); free(o->dx); free(o->dw); free(o->db);
}

/* Build k (1 and 2 threads) against the reference; its 2-thread outputs
 * in *o. */
static void check_build(const iabn_conv_geom *g, const build *k, const float *x, const float *w,
                        const float *b, const float *dy, const float *dw0, const float *db0,
                        const double *const *ref, const char *desc, outs *o)
{
    size_t nx = (size_t)g->n * g->c_in * g->h_in * g->w_in;
    size_t ny = (size_t)g->n * g->c_out * g->h_out * g->w_out;
    size_t nw = (size_t)g->c_out * (g->c_in / g->groups) * g->kh * g->kw, nc = (size_t)g->c_out;
    size_t nt = nx > ny ? nx : ny;
    float *xb = malloc(nx * 4), *dyb = malloc(ny * 4), *t = malloc((nt > nw ? nt : nw) * 4);
    double *radw = malloc(nw * 8);
    t_nchw_blk(g->n, g->c_in, g->h_in * g->w_in, k->lanes, x, xb, 0);
    t_nchw_blk(g->n, g->c_out, g->h_out * g->w_out, k->lanes, dy, dyb, 0);
    outs p1;
    run_build(g, 1, k, xb, w, b, dyb, dw0, db0, &p1);
    run_build(g, 2, k, xb, w, b, dyb, dw0, db0, o);
    CHECK_MSG(same(&p1, o, g), "%s: 1 and 2 threads differ: %s", k->name, desc);

    /* against the reference, dw and db as increments */
    t_nchw_blk(g->n, g->c_out, g->h_out * g->w_out, k->lanes, p1.y, t, 1);
    double ey = worst(t, ref[0], ref[1], ny);
    t_nchw_blk(g->n, g->c_in, g->h_in * g->w_in, k->lanes, p1.dx, t, 1);
    double ex = worst(t, ref[2], ref[3], nx);
    /* the increment rounds with dw0 too */
    for (size_t i = 0; i < nw; i++) {
        t[i] = p1.dw[i] - dw0[i];
        radw[i] = ref[5][i] + fabs(dw0[i]);
    }
    double ew = worst(t, ref[4], radw, nw), eb = 0;
    for (size_t i = 0; i < nc; i++) {
        double d = fabs((double)p1.db[i] - db0[i] - ref[6][i]);
        double lim = 1e-5 * (fabs(db0[i]) + (double)g->h_out * g->w_out * g->n);
        if (d / lim > eb) eb = d / lim;
    }
    CHECK_MSG(ey <= 1 && ex <= 1 && ew <= 1 && eb <= 1,
              "%s: against the reference %.3g / %.3g / %.3g / %.3g (<= 1): %s", k->name, ey, ex,
              ew, eb, desc);
    free_outs(&p1);
    free(xb); free(dyb); free(t); free(radw);
}

/* Whether the 8- and 16-lane builds sum a forward or data pass of g in
 * the same order: both rotating the input (cpu/conv_blocked_rot.c), or
 * neither, with no 8-lane rows (cpu/conv_rows.c) either. */
static int same_order(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    return iabn_conv_blocked_rot_takes(g, pass, 16) == iabn_conv_blocked_rot_takes(g, pass, 8) &&
           !iabn_conv_rows_takes(g, pass, 8);
}

/* The same values in NCHW order (y, dx, dw, db) from two lane counts; y,
 * dx and dw only where both sum in the same order (the weight pass: not
 * along the 16-lane rows). */
static int same_across(const outs *a, int la, const outs *b, int lb, const iabn_conv_geom *g)
{
    int rows = iabn_conv_rows_takes(g, IABN_CONV_BWD_FILTER, 16);
    size_t nx = (size_t)g->n * g->c_in * g->h_in * g->w_in;
    size_t ny = (size_t)g->n * g->c_out * g->h_out * g->w_out;
    float *ta = calloc(nx > ny ? nx : ny, 4), *tb = calloc(nx > ny ? nx : ny, 4);
    t_nchw_blk(g->n, g->c_out, g->h_out * g->w_out, la, a->y, ta, 1);
    t_nchw_blk(g->n, g->c_out, g->h_out * g->w_out, lb, b->y, tb, 1);
    int ok = !same_order(g, IABN_CONV_FWD) || !memcmp(ta, tb, ny * 4);
    t_nchw_blk(g->n, g->c_in, g->h_in * g->w_in, la, a->dx, ta, 1);
    t_nchw_blk(g->n, g->c_in, g->h_in * g->w_in, lb, b->dx, tb, 1);
    ok = ok && (!same_order(g, IABN_CONV_BWD_DATA) || !memcmp(ta, tb, nx * 4));
    size_t nw = (size_t)g->c_out * (g->c_in / g->groups) * g->kh * g->kw;
    ok = ok && (rows || !memcmp(a->dw, b->dw, nw * 4)) &&
         !memcmp(a->db, b->db, (size_t)g->c_out * 4);
    free(ta); free(tb);
    return ok;
}

static void one_case(const geo *q)
{
    iabn_conv_geom g;
    if (init(q, &g)) {
        CHECK_MSG(0, "bad case geometry");
        return;
    }
    char desc[128];
    snprintf(desc, sizeof desc, "n%d c%d %dx%d g%d k%dx%d s%d p%d d%d bias %d", q->n, q->c, q->h,
             q->w, q->groups, q->kh, q->kw, q->stride, q->pad, q->dil, q->bias);
    int t16 = iabn_conv_blocked_takes(&g, IABN_LAYOUT_NCHW16C);
    int t8 = iabn_conv_blocked_takes(&g, IABN_LAYOUT_NCHW8C);
    int cpg = q->c / q->groups;
    CHECK_MSG(t16 == (q->c % 16 == 0), "16 lanes: %s: %s", t16 ? "taken" : "not taken", desc);
    CHECK_MSG(t8 == (cpg <= 8), "8 lanes: %s: %s", t8 ? "taken" : "not taken", desc);
    size_t nx = (size_t)g.n * g.c_in * g.h_in * g.w_in, ny = (size_t)g.n * g.c_out * g.h_out * g.w_out;
    size_t nw = (size_t)g.c_out * (g.c_in / g.groups) * g.kh * g.kw, nc = (size_t)g.c_out;
    unsigned seed = (unsigned)(q->c * 7 + q->h * 3 + q->groups + q->stride * 11 + q->dil);
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc(nc * 4), *dy = malloc(ny * 4);
    float *dw0 = malloc(nw * 4), *db0 = malloc(nc * 4);
    t_fill(x, nx, seed); t_fill(w, nw, seed + 1); t_fill(b, nc, seed + 2);
    t_fill(dy, ny, seed + 3); t_fill(dw0, nw, seed + 4); t_fill(db0, nc, seed + 5);
    double *ry = malloc(ny * 8), *ray = malloc(ny * 8), *rdx = malloc(nx * 8), *radx = malloc(nx * 8);
    double *rdw = malloc(nw * 8), *radw = malloc(nw * 8), *rdb = malloc(nc * 8);
    reference(&g, x, w, q->bias ? b : NULL, dy, ry, ray, rdx, radx, rdw, radw, rdb);
    const double *ref[7] = {ry, ray, rdx, radx, rdw, radw, rdb};
    const float *bias = q->bias ? b : NULL;

    outs p16 = {0}, p8 = {0};
    if (t16) check_build(&g, &portable16, x, w, bias, dy, dw0, db0, ref, desc, &p16);
    if (t8) check_build(&g, &lanes8, x, w, bias, dy, dw0, db0, ref, desc, &p8);
    int k3 = q->kh == 3 && q->kw == 3 && q->stride == 1 && q->pad == 1 && q->dil == 1;
    int rot8 = k3 && (cpg == 2 || cpg == 4) && q->c % 8 == 0;
    int rot16 = k3 && cpg >= 2 && q->c % 16 == 0 && q->w <= 28;
    CHECK_MSG(iabn_conv_blocked_rot_takes(&g, IABN_CONV_FWD, 8) == rot8 &&
                  iabn_conv_blocked_rot_takes(&g, IABN_CONV_BWD_DATA, 8) == rot8 &&
                  iabn_conv_blocked_rot_takes(&g, IABN_CONV_FWD, 16) == rot16 &&
                  iabn_conv_blocked_rot_takes(&g, IABN_CONV_BWD_DATA, 16) == rot16 &&
                  !iabn_conv_blocked_rot_takes(&g, IABN_CONV_BWD_FILTER, 8) &&
                  !iabn_conv_blocked_rot_takes(&g, IABN_CONV_BWD_FILTER, 16),
              "input-side rotation: %s", desc);
    int rows = cpg == 8 && k3 && q->w <= 14;
    for (int p = 0; p < 3; p++) {
        CHECK_MSG(iabn_conv_rows_takes(&g, (iabn_conv_pass)p, 16) ==
                      (rows && p == IABN_CONV_BWD_FILTER),
                  "along the rows, 16 lanes: %s", desc);
        CHECK_MSG(iabn_conv_rows_takes(&g, (iabn_conv_pass)p, 8) ==
                      (rows && p != IABN_CONV_BWD_FILTER),
                  "along the rows, 8 lanes: %s", desc);
    }
    if (t16 && t8) CHECK_MSG(same_across(&p16, 16, &p8, 8, &g), "8 and 16 lanes differ: %s", desc);
#if IABN_HAVE_DIRECT_AVX512
    if (t16 && iabn_conv_direct_avx512()) {
        outs a;
        check_build(&g, &avx512, x, w, bias, dy, dw0, db0, ref, desc, &a);
        CHECK_MSG(same(&a, &p16, &g), "AVX-512 and portable builds differ: %s", desc);
        free_outs(&a);
    }
#endif
    if (t16) free_outs(&p16);
    if (t8) free_outs(&p8);
    free(x); free(w); free(b); free(dy); free(dw0); free(db0);
    free(ry); free(ray); free(rdx); free(radx); free(rdw); free(radw); free(rdb);
}

static void test_kernels(void)
{
    static const geo cases[] = {
        /* n  c   h   w  groups kh kw s p d bias */
        {2, 64, 9, 11, 16, 3, 3, 1, 1, 1, 0},   /* 4 per group, ResNeXt's */
        {1, 128, 7, 30, 16, 3, 3, 1, 1, 1, 1},  /* 8 per group, a 30-wide row: strips */
        {2, 32, 8, 8, 32, 3, 3, 1, 1, 1, 1},    /* depthwise */
        {1, 32, 6, 5, 16, 3, 3, 1, 1, 1, 0},    /* 2 per group */
        {1, 32, 5, 7, 2, 3, 3, 1, 1, 1, 1},     /* 16 per group */
        {2, 64, 10, 9, 16, 3, 3, 2, 1, 1, 0},   /* stride 2, odd width */
        {1, 32, 11, 12, 4, 3, 3, 2, 1, 1, 1},   /* stride 2, 8 per group */
        {1, 32, 9, 9, 8, 3, 3, 1, 2, 2, 0},     /* dilated */
        {1, 16, 12, 13, 4, 3, 3, 2, 2, 2, 1},   /* dilated, strided */
        {1, 16, 7, 8, 4, 3, 3, 1, 0, 1, 0},     /* no padding */
        {1, 16, 9, 10, 4, 5, 5, 1, 2, 1, 1},    /* 5x5 */
        {1, 16, 6, 9, 4, 1, 3, 1, 1, 1, 0},     /* 1x3 */
        {2, 32, 3, 2, 8, 3, 3, 2, 1, 1, 1},     /* maps smaller than the kernel */
        {1, 64, 58, 62, 16, 3, 3, 1, 1, 1, 0},  /* wider than a tile of 28 */
        {2, 128, 15, 14, 64, 3, 3, 1, 1, 1, 1}, /* ResNeXt-101's mod1, 2 per group */
        {1, 24, 7, 9, 12, 3, 3, 1, 1, 1, 1},    /* channels 8 lanes only take */
        {1, 40, 9, 8, 10, 3, 3, 2, 1, 1, 0},    /* the same, 4 per group, strided */
        {1, 8, 13, 17, 2, 3, 3, 1, 2, 2, 1},    /* one 8-lane block, dilated */
        /* 8 lanes, 4 per group, 3x3 stride 1 padding 1: the input-side
         * rotation (tiles of up to 12, row bands, maps down to 1x1) */
        {1, 24, 5, 13, 6, 3, 3, 1, 1, 1, 1},
        {1, 32, 3, 25, 8, 3, 3, 1, 1, 1, 1},
        {1, 8, 14, 2, 2, 3, 3, 1, 1, 1, 0},
        {2, 16, 1, 1, 4, 3, 3, 1, 1, 1, 1},
        /* 8 per group, 3x3 stride 1 padding 1, up to 14 wide: along the
         * rows (tiles of 3, 2 and 1 rows, one and two 8-lane vectors of a
         * row, maps down to 1x1) */
        {2, 32, 14, 14, 4, 3, 3, 1, 1, 1, 1},
        {1, 48, 7, 13, 6, 3, 3, 1, 1, 1, 0},
        {2, 16, 4, 14, 2, 3, 3, 1, 1, 1, 0},
        {1, 16, 1, 1, 2, 3, 3, 1, 1, 1, 1},
        {1, 32, 10, 2, 4, 3, 3, 1, 1, 1, 1},
        {1, 16, 5, 15, 2, 3, 3, 1, 1, 1, 0}, /* 15 wide: the rotation kernels */
        {1, 24, 6, 8, 3, 3, 3, 1, 1, 1, 1},  /* 8 lanes only: 3 blocks */
        {2, 16, 3, 9, 2, 3, 3, 1, 1, 1, 0},
        /* 16 lanes, 3x3 stride 1 padding 1, up to 28 wide: the input-side
         * rotation in registers (tiles of up to 14, row bands, 2 to 16 per
         * group, maps down to 1x1) */
        {1, 64, 4, 28, 8, 3, 3, 1, 1, 1, 1},  /* two tiles of 14 */
        {2, 32, 3, 27, 2, 3, 3, 1, 1, 1, 0},  /* 16 per group, tiles of 14 and 13 */
        {1, 32, 2, 29, 16, 3, 3, 1, 1, 1, 1}, /* 29 wide: past the rotation's maps */
        {1, 32, 1, 1, 2, 3, 3, 1, 1, 1, 1},   /* 16 per group, 1x1 */
        {1, 64, 20, 6, 4, 3, 3, 1, 1, 1, 0},  /* 16 per group, in row bands */
        {1, 64, 7, 7, 32, 3, 3, 1, 1, 1, 1},  /* 2 per group, ResNeXt's 7x7 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) one_case(&cases[i]);
}

/* Through the entry points, in blocked layout L: blocked operands take the
 * blocked path (4 per group: oneDNN declines it), and NCHW operands on
 * either side go through the scratch with the same bits.  The votes are
 * for the CPU's blocked layout, where its kernels are native (AVX-512 for
 * nChw16c, an AVX2 build for nChw8c). */
static void entry_case(iabn_layout L)
{
    geo q = {2, 64, 9, 10, 16, 3, 3, 1, 1, 1, 1};
    iabn_conv_geom g;
    CHECK(init(&q, &g) == 0);
    int fast = iabn_conv_blocked_layout() == IABN_LAYOUT_NCHW16C ? iabn_conv_direct_avx512()
                                                                 : iabn_conv_blocked_native_8c();
    for (int side = 0; side < 2; side++)
        CHECK(iabn_conv_layout_vote(&g, IABN_CONV_FWD, side) == (fast ? 1 : -1));
    int lanes = iabn_layout_block(L);
    size_t nx = (size_t)g.n * g.c_in * g.h_in * g.w_in, ny = (size_t)g.n * g.c_out * g.h_out * g.w_out;
    size_t nw = (size_t)g.c_out * (g.c_in / g.groups) * 9, nc = (size_t)g.c_out;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc(nc * 4), *dy = malloc(ny * 4);
    float *xb = malloc(nx * 4), *dyb = malloc(ny * 4);
    t_fill(x, nx, 5); t_fill(w, nw, 6); t_fill(b, nc, 7); t_fill(dy, ny, 8);
    t_nchw_blk(g.n, g.c_in, g.h_in * g.w_in, lanes, x, xb, 0);
    t_nchw_blk(g.n, g.c_out, g.h_out * g.w_out, lanes, dy, dyb, 0);
    float *ref[3] = {NULL, NULL, NULL};
    int th = iabn_num_threads();
    for (int lay = 0; lay < 3; lay++) { /* both blocked, x NCHW, y NCHW */
        iabn_conv_geom gl = g;
        gl.x_layout = lay == 1 ? IABN_LAYOUT_NCHW : L;
        gl.y_layout = lay == 2 ? IABN_LAYOUT_NCHW : L;
        iabn_conv_plan p;
        for (int pass = 0; pass < 3; pass++) {
            iabn_conv_plan_make(&gl, (iabn_conv_pass)pass, th, &p);
            CHECK(p.path == IABN_CONV_PATH_BLOCKED);
        }
        size_t sb = 0;
        for (int pass = 0; pass < 3; pass++) {
            size_t s = iabn_conv_scratch_bytes(&gl, (iabn_conv_pass)pass, th);
            if (s > sb) sb = s;
        }
        float *scr = t_alloc_canary(sb / 4), *y = malloc(ny * 4), *dx = malloc(nx * 4);
        float *dw = calloc(nw, 4), *db = calloc(nc, 4);
        iabn_err e = {0};
        const float *xin = gl.x_layout == IABN_LAYOUT_NCHW ? x : xb;
        const float *dyin = gl.y_layout == IABN_LAYOUT_NCHW ? dy : dyb;
        CHECK_OK(iabn_conv_fwd(NULL, &gl, xin, w, b, y, scr, sb, &e));
        CHECK_OK(iabn_conv_bwd_data(NULL, &gl, dyin, w, dx, scr, sb, &e));
        CHECK_OK(iabn_conv_bwd_filter(NULL, &gl, xin, dyin, dw, db, scr, sb, &e));
        CHECK(t_canary_ok(scr, sb / 4));
        /* back to blocked, to compare with the first */
        float *all = malloc((ny + nx + nw + nc) * 4);
        if (gl.y_layout == IABN_LAYOUT_NCHW)
            t_nchw_blk(g.n, g.c_out, g.h_out * g.w_out, lanes, y, all, 0);
        else
            memcpy(all, y, ny * 4);
        if (gl.x_layout == IABN_LAYOUT_NCHW)
            t_nchw_blk(g.n, g.c_in, g.h_in * g.w_in, lanes, dx, all + ny, 0);
        else
            memcpy(all + ny, dx, nx * 4);
        memcpy(all + ny + nx, dw, nw * 4);
        memcpy(all + ny + nx + nw, db, nc * 4);
        ref[lay] = all;
        if (lay) CHECK_MSG(!memcmp(all, ref[0], (ny + nx + nw + nc) * 4), "layouts %d differ", lay);
        /* too little scratch is an error, never an overrun */
        CHECK(iabn_conv_fwd(NULL, &gl, xin, w, b, y, scr, sb / 2, &e) != 0);
        free(scr); free(y); free(dx); free(dw); free(db);
    }
    for (int i = 0; i < 3; i++) free(ref[i]);
    free(x); free(w); free(b); free(dy); free(xb); free(dyb);
}

static void test_entry(void)
{
    entry_case(IABN_LAYOUT_NCHW16C);
    entry_case(IABN_LAYOUT_NCHW8C);
}

/* What the kernels decline: other channels in and out, channels not a
 * multiple of the block, 3 per group, more per group than the block, stride
 * 3, dense. */
static void test_declined(void)
{
    const iabn_layout B16 = IABN_LAYOUT_NCHW16C, B8 = IABN_LAYOUT_NCHW8C;
    iabn_conv_geom g;
    CHECK(iabn_conv_geom_init(&g, 1, 64, 8, 8, 128, 3, 3, 1, 1, 1, 16) == 0);
    CHECK(!iabn_conv_blocked_takes(&g, B16) && !iabn_conv_blocked_takes(&g, B8));
    CHECK(iabn_conv_geom_init(&g, 1, 24, 8, 8, 24, 3, 3, 1, 1, 1, 6) == 0);
    CHECK(!iabn_conv_blocked_takes(&g, B16) && iabn_conv_blocked_takes(&g, B8));
    CHECK(iabn_conv_geom_init(&g, 1, 48, 8, 8, 48, 3, 3, 1, 1, 1, 16) == 0);
    CHECK(!iabn_conv_blocked_takes(&g, B16) && !iabn_conv_blocked_takes(&g, B8));
    CHECK(iabn_conv_geom_init(&g, 1, 12, 8, 8, 12, 3, 3, 1, 1, 1, 6) == 0);
    CHECK(!iabn_conv_blocked_takes(&g, B8));
    CHECK(iabn_conv_geom_init(&g, 1, 32, 8, 8, 32, 3, 3, 1, 1, 1, 2) == 0);
    CHECK(iabn_conv_blocked_takes(&g, B16) && !iabn_conv_blocked_takes(&g, B8));
    CHECK(iabn_conv_geom_init(&g, 1, 64, 9, 9, 64, 3, 3, 3, 1, 1, 16) == 0);
    CHECK(!iabn_conv_blocked_takes(&g, B16) && !iabn_conv_blocked_takes(&g, B8));
    CHECK(iabn_conv_geom_init(&g, 1, 64, 9, 9, 64, 3, 3, 1, 1, 1, 1) == 0);
    CHECK(!iabn_conv_blocked_takes(&g, B16) && !iabn_conv_blocked_takes(&g, B8));
    CHECK(!iabn_conv_blocked_takes(&g, IABN_LAYOUT_NCHW));
}

int main(void)
{
    RUN(test_kernels);
    RUN(test_entry);
    RUN(test_declined);
    return TEST_END();
}
