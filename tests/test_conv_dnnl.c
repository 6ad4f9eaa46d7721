/* test_conv_dnnl.c: the oneDNN convolution path (cpu/conv_dnnl.c) against
 * the native kernels (im2col + sgemm where the layer is wider than the direct
 * kernels take, the direct ones below), all three passes, on dense 3x3, 1x1
 * strided, biased, odd-sized, 5x5 / 7x7 strided and dilated geometries, at 1
 * and 2 threads; also: cached and uncached plans agree bitwise, a geometry is
 * planned once per pass in a cache, inputs are never written (the reorders
 * read them; the API forbids outputs aliasing inputs), nothing is written
 * past the scratch or the outputs, a scratch smaller than the plan is an
 * error, oneDNN picks a JIT kernel (not its reference code) for a ResNet
 * layer, and the CPU device's kernel table runs through its cache; the
 * geometry's layouts: nChw16c and nChw8c activations give the NCHW results
 * bitwise (reordered), with less scratch when the primitive works in the
 * CPU's blocked layout, or no kernel and a clear error, and the layout votes; the weight layout map (cpu/blocked_map.h) adds a blocked
 * tensor into a plain one with the bits of oneDNN's reorder with a sum
 * post-op, on the layouts the convs choose, and declines the ones it cannot
 * express. */
#include "iabn_config.h"
#include "tensor/backend.h"
#include "tensor/device.h"
#include "tensor/tensor.h"
#include "tensor/cpu/blocked_map.h"
#include "tensor/cpu/conv_impl.h"
#include "test_dnnl.h"
#include "test_util.h"

#if IABN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

typedef struct tcase {
    int n, c_in, h, w, c_out, k, stride, pad, dil, bias, groups; /* groups 0: 1 */
} tcase;

/* t_rel_diff (test_util.h) of float32 noise of sums of a few hundred terms */
#define TOL 3e-5

static void run_case(const tcase *tc, iabn_conv_cache *cache)
{
    iabn_conv_geom g;
    int groups = tc->groups ? tc->groups : 1;
    int rc = iabn_conv_geom_init(&g, tc->n, tc->c_in, tc->h, tc->w, tc->c_out, tc->k, tc->k,
                                 tc->stride, tc->pad, tc->dil, groups);
    CHECK(rc == 0);
    if (rc) return;
    size_t nx = (size_t)g.n * g.c_in * g.h_in * g.w_in;
    size_t ny = (size_t)g.n * g.c_out * g.h_out * g.w_out;
    size_t nw = (size_t)g.c_out * (g.c_in / groups) * g.kh * g.kw, nb = (size_t)g.c_out;
    unsigned seed = (unsigned)(tc->c_in * 31 + tc->h * 7 + tc->k);
    float *x = t_alloc_canary(nx), *w = t_alloc_canary(nw), *b = t_alloc_canary(nb), *dy = t_alloc_canary(ny);
    float *xk = malloc(nx * 4), *wk = malloc(nw * 4), *dyk = malloc(ny * 4);
    t_fill(x, nx, seed); t_fill(w, nw, seed + 1); t_fill(b, nb, seed + 2); t_fill(dy, ny, seed + 3);
    memcpy(xk, x, nx * 4); memcpy(wk, w, nw * 4); memcpy(dyk, dy, ny * 4);
    float *dw0 = malloc(nw * 4), *db0 = malloc(nb * 4);
    t_fill(dw0, nw, seed + 4); t_fill(db0, nb, seed + 5);
    const float *bias = tc->bias ? b : NULL;

    static const int threads[] = {2, 1};
    for (int ti = 0; ti < 2; ti++) {
        iabn_set_num_threads(threads[ti]);
        int th = iabn_num_threads();
        iabn_conv_plan nat[3], dn[3], ch[3];
        size_t sb = 0;
        for (int p = 0; p < 3; p++) {
            iabn_conv_plan_make_native(&g, (iabn_conv_pass)p, th, &nat[p]);
            CHECK(nat[p].path != IABN_CONV_PATH_DNNL);
            size_t s = nat[p].total * sizeof(float);
            if (s > sb) sb = s;
            /* the oneDNN plan, whether or not the rule picks it here */
            size_t b0 = 0, b1 = 0;
            iabn_err pe = {0};
            CHECK_OK(iabn_conv_dnnl_scratch(&g, (iabn_conv_pass)p, 0, th, &b0, NULL, &pe));
            CHECK_OK(iabn_conv_dnnl_scratch(&g, (iabn_conv_pass)p, 1, th, &b1, NULL, &pe));
            memset(&dn[p], 0, sizeof dn[p]);
            dn[p].path = IABN_CONV_PATH_DNNL;
            dn[p].threads = th;
            dn[p].total = (b0 > b1 ? b0 : b1) / sizeof(float);
            s = iabn_conv_scratch_bytes(&g, (iabn_conv_pass)p, th);
            iabn_conv_plan chosen;
            iabn_conv_plan_make(&g, (iabn_conv_pass)p, th, &chosen);
            ch[p] = chosen;
            CHECK(iabn_conv_use_dnnl(&g, (iabn_conv_pass)p) || chosen.path != IABN_CONV_PATH_DNNL);
            if (chosen.path == IABN_CONV_PATH_DNNL)
                CHECK_MSG(s >= b0 && (p == IABN_CONV_BWD_DATA || s >= b1),
                          "planned scratch %zu < oneDNN's %zu / %zu", s, b0, b1);
            if (s > sb) sb = s;
            if (dn[p].total * sizeof(float) > sb) sb = dn[p].total * sizeof(float);
        }
        float *scr = t_alloc_canary(sb / 4 + 1);
        float *y1 = t_alloc_canary(ny), *y2 = t_alloc_canary(ny), *y3 = t_alloc_canary(ny);
        float *dx1 = t_alloc_canary(nx), *dx2 = t_alloc_canary(nx), *dx3 = t_alloc_canary(nx);
        float *dw1 = t_alloc_canary(nw), *dw2 = t_alloc_canary(nw), *dw3 = t_alloc_canary(nw);
        float *db1 = t_alloc_canary(nb), *db2 = t_alloc_canary(nb), *db3 = t_alloc_canary(nb);
        iabn_err e = {0};
        char desc[128];
        snprintf(desc, sizeof desc, "n%d c%d %dx%d -> %d k%d s%d p%d d%d g%d bias %d, %d thr",
                 tc->n, tc->c_in, tc->h, tc->w, tc->c_out, tc->k, tc->stride, tc->pad, tc->dil,
                 groups, tc->bias, th);

        /* forward: native, oneDNN uncached, oneDNN cached */
        CHECK_OK(iabn_conv_run_plan(NULL, &nat[0], &g, IABN_CONV_FWD, x, w, bias, y1, NULL, scr, sb, &e));
        CHECK_OK(iabn_conv_run_plan(NULL, &dn[0], &g, IABN_CONV_FWD, x, w, bias, y2, NULL, scr, sb, &e));
        CHECK_OK(iabn_conv_run_plan(cache, &dn[0], &g, IABN_CONV_FWD, x, w, bias, y3, NULL, scr, sb, &e));
        double d = t_rel_diff(y2, y1, ny);
        CHECK_MSG(d <= TOL, "fwd oneDNN vs %s: %.3g, %s", nat[0].path ? "direct" : "im2col", d, desc);
        CHECK_MSG(memcmp(y2, y3, ny * 4) == 0, "fwd cached != uncached, %s", desc);

        for (size_t i = 0; i < nx; i++) dx2[i] = dx3[i] = NAN; /* overwritten, never read */
        CHECK_OK(iabn_conv_run_plan(NULL, &nat[1], &g, IABN_CONV_BWD_DATA, dy, w, NULL, dx1, NULL, scr, sb, &e));
        CHECK_OK(iabn_conv_run_plan(NULL, &dn[1], &g, IABN_CONV_BWD_DATA, dy, w, NULL, dx2, NULL, scr, sb, &e));
        CHECK_OK(iabn_conv_run_plan(cache, &dn[1], &g, IABN_CONV_BWD_DATA, dy, w, NULL, dx3, NULL, scr, sb, &e));
        d = t_rel_diff(dx2, dx1, nx);
        CHECK_MSG(d <= TOL, "bwd-data oneDNN vs native: %.3g, %s", d, desc);
        CHECK_MSG(memcmp(dx2, dx3, nx * 4) == 0, "bwd-data cached != uncached, %s", desc);

        /* the filter pass accumulates into dw and db */
        float *dws[3] = {dw1, dw2, dw3}, *dbs[3] = {db1, db2, db3};
        for (int k = 0; k < 3; k++) {
            memcpy(dws[k], dw0, nw * 4);
            memcpy(dbs[k], db0, nb * 4);
        }
        float *db_arg[3] = {tc->bias ? db1 : NULL, tc->bias ? db2 : NULL, tc->bias ? db3 : NULL};
        CHECK_OK(iabn_conv_run_plan(NULL, &nat[2], &g, IABN_CONV_BWD_FILTER, x, dy, NULL, dw1, db_arg[0], scr, sb, &e));
        CHECK_OK(iabn_conv_run_plan(NULL, &dn[2], &g, IABN_CONV_BWD_FILTER, x, dy, NULL, dw2, db_arg[1], scr, sb, &e));
        CHECK_OK(iabn_conv_run_plan(cache, &dn[2], &g, IABN_CONV_BWD_FILTER, x, dy, NULL, dw3, db_arg[2], scr, sb, &e));
        /* compare the increments, not the prefilled values */
        for (size_t i = 0; i < nw; i++) { dw1[i] -= dw0[i]; dw2[i] -= dw0[i]; dw3[i] -= dw0[i]; }
        d = t_rel_diff(dw2, dw1, nw);
        CHECK_MSG(d <= TOL, "bwd-filter oneDNN vs native: %.3g, %s", d, desc);
        CHECK_MSG(memcmp(dw2, dw3, nw * 4) == 0, "bwd-filter cached != uncached, %s", desc);
        if (ch[2].path == IABN_CONV_PATH_WGRAD) {
            /* the hand-written weight pass through its nChw16c copies */
            memcpy(dw3, dw0, nw * 4);
            CHECK_OK(iabn_conv_run_plan(cache, &ch[2], &g, IABN_CONV_BWD_FILTER, x, dy, NULL, dw3,
                                        NULL, scr, sb, &e));
            for (size_t i = 0; i < nw; i++) dw3[i] -= dw0[i];
            d = t_rel_diff(dw3, dw1, nw);
            CHECK_MSG(d <= TOL, "bwd-filter wgrad vs native: %.3g, %s", d, desc);
            memcpy(dw3, dw2, nw * 4);
        }
        if (tc->bias) {
            for (size_t i = 0; i < nb; i++) { db1[i] -= db0[i]; db2[i] -= db0[i]; }
            d = t_rel_diff(db2, db1, nb);
            CHECK_MSG(d <= TOL, "bias grad oneDNN vs native: %.3g, %s", d, desc);
        } else {
            CHECK(memcmp(db2, db0, nb * 4) == 0); /* untouched without bias */
        }

        /* repeated cached calls are bitwise equal (deterministic) */
        CHECK_OK(iabn_conv_run_plan(cache, &dn[0], &g, IABN_CONV_FWD, x, w, bias, y1, NULL, scr, sb, &e));
        CHECK_MSG(memcmp(y1, y3, ny * 4) == 0, "fwd not repeatable, %s", desc);

        CHECK_MSG(memcmp(x, xk, nx * 4) == 0 && memcmp(w, wk, nw * 4) == 0 &&
                      memcmp(dy, dyk, ny * 4) == 0,
                  "an input was written, %s", desc);
        CHECK_MSG(t_canary_ok(scr, sb / 4 + 1) && t_canary_ok(y1, ny) && t_canary_ok(y2, ny) &&
                      t_canary_ok(y3, ny) && t_canary_ok(dx2, nx) && t_canary_ok(dx3, nx) &&
                      t_canary_ok(dw2, nw) && t_canary_ok(dw3, nw) && t_canary_ok(db2, nb) &&
                      t_canary_ok(db3, nb) && t_canary_ok(x, nx) && t_canary_ok(w, nw),
                  "write past a buffer, %s", desc);

        /* too little scratch: an error that says so, nothing written */
        size_t need = 0;
        CHECK_OK(iabn_conv_dnnl_scratch(&g, IABN_CONV_FWD, tc->bias, th, &need, NULL, &e));
        CHECK(need <= dn[0].total * sizeof(float));
        if (need > 0) {
            iabn_err e2 = {0};
            rc = iabn_conv_run_plan(cache, &dn[0], &g, IABN_CONV_FWD, x, w, bias, y1, NULL, scr,
                                    need - 1, &e2);
            CHECK_MSG(rc != 0 && strstr(e2.msg, "scratch"), "short scratch: rc %d '%s'", rc, e2.msg);
        }
        free(scr); free(y1); free(y2); free(y3); free(dx1); free(dx2); free(dx3);
        free(dw1); free(dw2); free(dw3); free(db1); free(db2); free(db3);
    }
    iabn_set_num_threads(2);
    free(x); free(w); free(b); free(dy); free(xk); free(wk); free(dyk); free(dw0); free(db0);
}

static iabn_conv_cache *cache;

/* Whether oneDNN runs its 16-lane kernels here (AVX-512): their blocked
 * layout is nChw16c.  On an AVX2 CPU its kernels want nChw8c (the graph's
 * there: iabn_conv_blocked_layout), and 8 channels per group run on the
 * direct kernels (cpu/conv.c) on NCHW operands only. */
static int lanes16(void) { return t_cpu_avx512_core(); }
/* Whether the hand-written weight pass runs 16 lanes here: builds with
 * their own AVX-512 kernels (release), on such a CPU (cpu/conv_wgrad.c;
 * the sanitizer build leaves the pass to oneDNN). */
static int wgrad16(void) { return iabn_conv_direct_avx512(); }
#define CPU_BLOCKED iabn_conv_blocked_layout()

static void test_parity(void)
{
    static const tcase cs[] = {
        {2, 16, 9, 11, 24, 3, 1, 1, 1, 0, 1},  /* dense 3x3, odd sizes (direct natively) */
        {2, 66, 7, 6, 70, 3, 1, 1, 1, 1, 1},  /* wider than the direct kernels: im2col; bias */
        {2, 72, 7, 7, 80, 1, 2, 0, 1, 0, 1},  /* 1x1 stride 2 */
        {3, 80, 5, 6, 72, 1, 1, 0, 1, 1, 1},  /* 1x1, bias */
        {1, 3, 13, 11, 8, 7, 2, 3, 1, 0, 1},  /* 7x7 stem, stride 2 */
        {2, 68, 8, 8, 66, 3, 2, 1, 1, 1, 1},  /* stride 2, even map: right pad smaller */
        {1, 70, 9, 10, 68, 5, 2, 2, 1, 0, 1},  /* 5x5 stride 2 */
        {2, 66, 16, 15, 66, 3, 1, 2, 2, 1, 1},  /* dilated 2, taps mostly in the map */
        {1, 5, 3, 4, 3, 3, 1, 0, 1, 1, 1},  /* tiny: 1x2 output */
        {2, 32, 28, 30, 48, 1, 1, 0, 1, 1, 1},  /* 1x1 on a 28x30 map: NCHW, no reorders; bias */
        {1, 24, 57, 56, 32, 1, 2, 0, 1, 0, 1},  /* 1x1 stride 2 to 29x28: NCHW */
        {2, 64, 9, 10, 64, 3, 1, 1, 1, 1, 8},   /* grouped, 8 per group; bias */
        {1, 128, 8, 7, 128, 3, 2, 1, 1, 0, 8},  /* grouped, 16 per group, stride 2 */
        {2, 64, 6, 6, 96, 1, 1, 0, 1, 0, 4},    /* grouped 1x1, 16 -> 24 per group */
        {2, 32, 7, 7, 32, 3, 1, 1, 1, 0, 8},    /* grouped, 4 per group: direct */
        {1, 64, 16, 16, 64, 3, 1, 2, 2, 0, 4},  /* grouped, 16 per group, dilated 2 */
        {2, 64, 7, 7, 96, 1, 1, 0, 1, 1, 1},    /* 1x1, 16-multiples: weights as tiles */
        {2, 64, 9, 10, 48, 3, 1, 1, 1, 1, 1},   /* dense 3x3, 16-multiples (AVX-512: the
                                                 * weight pass hand-written, on copies); bias */
        {1, 64, 9, 9, 32, 3, 1, 12, 12, 0, 1},  /* ASPP-like: taps in the padding */
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&cs[i], cache);
#if !(defined(IABN_CONV_DNNL_ALL) && IABN_CONV_DNNL_ALL) /* that build sends all dense there */
    /* which of them the rule sends to oneDNN: 16 channels or more, dilated
     * only with most taps in the map, 8 per group on small maps; with AVX2
     * no dilated grouped forwards (lanes16) */
    int want[] = {1, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0, lanes16(), 1, 1, 0};
    int plain[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}; /* 1x1, >= 28x28 */
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        iabn_conv_geom g;
        CHECK(iabn_conv_geom_init(&g, cs[i].n, cs[i].c_in, cs[i].h, cs[i].w, cs[i].c_out, cs[i].k,
                                  cs[i].k, cs[i].stride, cs[i].pad, cs[i].dil,
                                  cs[i].groups ? cs[i].groups : 1) == 0);
        CHECK_MSG(iabn_conv_use_dnnl(&g, IABN_CONV_FWD) == want[i], "case %zu: rule", i);
        CHECK_MSG(iabn_conv_dnnl_plain(&g) == plain[i], "case %zu: layout rule", i);
    }
    /* a NCHW plan makes no copies of the activations: its scratch is below
     * one whole-batch copy of the input (the blocked plan's is above) */
    iabn_conv_geom gp;
    CHECK(iabn_conv_geom_init(&gp, 8, 256, 28, 28, 256, 1, 1, 1, 0, 1, 1) == 0);
    for (int p = 0; p < 3; p++) {
        size_t b = 0;
        iabn_err e = {0};
        CHECK_OK(iabn_conv_dnnl_scratch(&gp, (iabn_conv_pass)p, 0, 2, &b, NULL, &e));
        CHECK_MSG(b < (size_t)8 * 256 * 28 * 28 * 4, "pass %d: NCHW plan scratch %zu", p, b);
    }
    /* with no copies, a 1x1 conv on a large map stays on oneDNN at any batch */
    CHECK(iabn_conv_geom_init(&gp, 64, 256, 56, 56, 256, 1, 1, 1, 0, 1, 1) == 0);
    CHECK(iabn_conv_use_dnnl(&gp, IABN_CONV_FWD));
    iabn_conv_geom gd;
    CHECK(iabn_conv_geom_init(&gd, 1, 64, 9, 9, 32, 3, 3, 1, 12, 12, 1) == 0);
    CHECK(!iabn_conv_use_dnnl(&gd, IABN_CONV_FWD)); /* ASPP-like: per-tap path */
    CHECK(!iabn_conv_use_dnnl(&gd, IABN_CONV_BWD_DATA));
    CHECK(iabn_conv_use_dnnl(&gd, IABN_CONV_BWD_FILTER)); /* oneDNN skips padded taps there */
    { /* with AVX-512 the hand-written weight pass, through the nChw16c
       * copies oneDNN would make (cpu/conv_wgrad.c); with AVX2 oneDNN's GEMM
       * kernel computes the padded taps: the per-tap path */
        iabn_conv_plan pt;
        iabn_conv_plan_make(&gd, IABN_CONV_BWD_FILTER, 2, &pt);
        CHECK(pt.path == (wgrad16()   ? IABN_CONV_PATH_WGRAD
                          : lanes16() ? IABN_CONV_PATH_DNNL
                                      : IABN_CONV_PATH_TAPS));
    }
    CHECK(iabn_conv_geom_init(&gd, 1, 64, 9, 9, 64, 3, 3, 1, 1, 1, 16) == 0);
    CHECK(!iabn_conv_use_dnnl(&gd, IABN_CONV_FWD)); /* grouped, 4 per group */
    CHECK(iabn_conv_geom_init(&gd, 1, 64, 16, 16, 64, 3, 3, 1, 2, 2, 8) == 0);
    CHECK(!iabn_conv_use_dnnl(&gd, IABN_CONV_BWD_FILTER)); /* dilated, 8 per group */
    CHECK(iabn_conv_geom_init(&gd, 1, 64, 16, 16, 64, 3, 3, 1, 2, 2, 4) == 0);
    /* dilated, 16 per group: oneDNN with AVX-512; with AVX2 only its data
     * pass (the others run its GEMM kernel there: direct) */
    CHECK(iabn_conv_use_dnnl(&gd, IABN_CONV_FWD) == lanes16());
    CHECK(iabn_conv_use_dnnl(&gd, IABN_CONV_BWD_FILTER) == lanes16());
    CHECK(iabn_conv_use_dnnl(&gd, IABN_CONV_BWD_DATA));
    /* 8 per group: oneDNN up to 14x14 maps, direct above on NCHW
     * operands; with AVX2, on nChw8c ones at any size (unmerged: one
     * channel block per group); 16 per group: oneDNN */
    CHECK(iabn_conv_geom_init(&gd, 4, 512, 14, 14, 512, 3, 3, 1, 1, 1, 64) == 0);
    CHECK(iabn_conv_use_dnnl(&gd, IABN_CONV_FWD));
    CHECK(iabn_conv_geom_init(&gd, 4, 256, 56, 56, 256, 3, 3, 1, 1, 1, 32) == 0);
    CHECK(!iabn_conv_use_dnnl(&gd, IABN_CONV_FWD));
    gd.x_layout = gd.y_layout = IABN_LAYOUT_NCHW8C;
    CHECK(iabn_conv_use_dnnl(&gd, IABN_CONV_FWD) == !lanes16());
    /* mod4 (14x14) on nChw8c where the 8-lane build is AVX2: forward and
     * data along the rows (cpu/conv_rows.c), the weight pass on oneDNN */
    CHECK(iabn_conv_geom_init(&gd, 4, 512, 14, 14, 512, 3, 3, 1, 1, 1, 64) == 0);
    gd.x_layout = gd.y_layout = IABN_LAYOUT_NCHW8C;
    if (iabn_conv_blocked_native_8c()) {
        iabn_conv_plan pl;
        for (int p = 0; p < 3; p++) {
            iabn_conv_plan_make(&gd, (iabn_conv_pass)p, 2, &pl);
            CHECK_MSG(pl.path == (p == IABN_CONV_BWD_FILTER ? IABN_CONV_PATH_DNNL
                                                            : IABN_CONV_PATH_BLOCKED),
                      "mod4 on nChw8c, pass %d: path %d", p, (int)pl.path);
        }
    }
    CHECK(iabn_conv_geom_init(&gd, 4, 512, 28, 28, 512, 3, 3, 1, 1, 1, 32) == 0);
    CHECK(iabn_conv_use_dnnl(&gd, IABN_CONV_BWD_FILTER));
    /* dense 3x3 (WideResNet's) on NCHW operands: forward and data on
     * oneDNN; with AVX-512 the weight pass hand-written through nChw16c
     * copies where oneDNN would make them; with AVX2 it runs natively (2.3x
     * faster here), where its scratch fits oneDNN's copy cap: not at 128
     * channels on 112x112 (110 MiB of column buffers on two threads) */
    CHECK(iabn_conv_geom_init(&gd, 4, 256, 56, 56, 256, 3, 3, 1, 1, 1, 1) == 0);
    iabn_conv_plan pl;
    for (int p = 0; p < 3; p++) {
        iabn_conv_plan_make(&gd, (iabn_conv_pass)p, 2, &pl);
        CHECK_MSG(p < 2 || lanes16() ? pl.path == (p == 2 && wgrad16() /* through copies */
                                                        ? IABN_CONV_PATH_WGRAD
                                                        : IABN_CONV_PATH_DNNL)
                                     : pl.path != IABN_CONV_PATH_DNNL,
                  "pass %d: path %d", p, (int)pl.path);
        CHECK(iabn_conv_scratch_bytes(&gd, (iabn_conv_pass)p, 2) <= IABN_DNNL_COPY_MAX);
    }
    /* blocked operands: with AVX-512 the hand-written weight pass
     * (cpu/conv_wgrad.c), with AVX2 the native kernels (x and dy copied to
     * NCHW first) */
    gd.x_layout = gd.y_layout = CPU_BLOCKED;
    iabn_conv_plan_make(&gd, IABN_CONV_BWD_FILTER, 2, &pl);
    CHECK(lanes16() ? pl.path == (wgrad16() ? IABN_CONV_PATH_WGRAD : IABN_CONV_PATH_DNNL)
                    : pl.path != IABN_CONV_PATH_DNNL);
    CHECK(iabn_conv_geom_init(&gd, 4, 128, 112, 112, 128, 3, 3, 1, 1, 1, 1) == 0);
    iabn_conv_plan_make(&gd, IABN_CONV_BWD_FILTER, 2, &pl);
    CHECK(pl.path == (wgrad16() ? IABN_CONV_PATH_WGRAD : IABN_CONV_PATH_DNNL));
    /* the whole batch's blocked copies over IABN_DNNL_COPY_MAX: native (VGG19's
     * first convs at batch 32, 128x128: 256 MiB of copies); at batch 4 oneDNN */
    CHECK(iabn_conv_geom_init(&gd, 32, 64, 128, 128, 64, 3, 3, 1, 1, 1, 1) == 0);
    CHECK(!iabn_conv_use_dnnl(&gd, IABN_CONV_FWD) && !iabn_conv_use_dnnl(&gd, IABN_CONV_BWD_FILTER));
    CHECK(iabn_conv_geom_init(&gd, 4, 64, 128, 128, 64, 3, 3, 1, 1, 1, 1) == 0);
    CHECK(iabn_conv_use_dnnl(&gd, IABN_CONV_FWD));
#endif
    /* per geometry, pass and thread count: one plan (test_blocked runs after) */
    CHECK_MSG(iabn_conv_cache_size(cache) == (int)(sizeof cs / sizeof cs[0]) * 3 * 2,
              "plans in the cache: %d", iabn_conv_cache_size(cache));
}

/* A conv on operands in blocked layout L against NCHW: the same bits where
 * both run one primitive (bit p of `exact` for pass p), within the oneDNN
 * tolerance where NCHW operands run another (1x1 convs on large maps: a
 * GEMM on NCHW; on AVX2, dense weight passes natively).  exact -1: no
 * kernel takes L (iabn_conv_layouts_ok says so, and the passes refuse it by
 * name). */
static int same_out(const float *a, const float *b, size_t n, int exact)
{
    return exact ? memcmp(a, b, n * 4) == 0 : t_rel_diff(a, b, n) <= 3e-5;
}

static void blocked_case(iabn_layout L, int n, int ci, int h, int co, int k, int stride,
                         int groups, int want_smaller, int exact)
{
    iabn_conv_geom g, gb;
    CHECK(iabn_conv_geom_init(&g, n, ci, h, h, co, k, k, stride, k / 2, 1, groups) == 0);
    gb = g;
    gb.x_layout = gb.y_layout = L;
    const char *ln = iabn_layout_name(L);
    if (exact < 0) {
        float buf[1];
        iabn_err e = {0};
        for (int p = 0; p < 3; p++) CHECK(!iabn_conv_layouts_ok(&gb, (iabn_conv_pass)p));
        CHECK_MSG(iabn_conv_fwd(cache, &gb, buf, buf, NULL, buf, NULL, 0, &e) == IABN_EINVAL &&
                      strstr(e.msg, ln),
                  "%s: %s", ln, e.msg);
        return;
    }
    for (int p = 0; p < 3; p++) CHECK(iabn_conv_layouts_ok(&gb, (iabn_conv_pass)p));
    /* the weight pass that cpu/conv_wgrad.c runs (1x1 on nChw8c with AVX2,
     * every dense one on nChw16c with AVX-512) and the 1x1 data pass that
     * cpu/conv_dgrad.c runs (nChw16c, AVX-512): their own sums;
     * test_conv_wgrad and test_conv_dgrad check them against a
     * double-precision reference */
    if (iabn_conv_wgrad_takes(&gb, IABN_CONV_BWD_FILTER)) exact &= 3;
    if (iabn_conv_dgrad_takes(&gb, IABN_CONV_BWD_DATA)) exact &= ~2;
    /* where the blocked path takes a pass and rotates the input
     * (cpu/conv_blocked_rot.c) or runs along the rows (cpu/conv_rows.c):
     * their own sums (test_conv_blocked checks them against a
     * double-precision reference) */
    for (int p = 0; p < 3; p++) {
        iabn_conv_plan pb;
        iabn_conv_plan_make(&gb, (iabn_conv_pass)p, 2, &pb);
        int lanes = iabn_layout_block(L);
        if (pb.path == IABN_CONV_PATH_BLOCKED &&
            (iabn_conv_blocked_rot_takes(&gb, (iabn_conv_pass)p, lanes) ||
             iabn_conv_rows_takes(&gb, (iabn_conv_pass)p, lanes)))
            exact &= ~(1 << p);
    }
    int hwi = g.h_in * g.w_in, hwo = g.h_out * g.w_out;
    size_t nx = (size_t)n * ci * hwi, ny = (size_t)n * co * hwo;
    size_t nw = (size_t)co * (ci / groups) * k * k;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *dy = malloc(ny * 4);
    float *xb = malloc(nx * 4), *dyb = malloc(ny * 4);
    t_fill(x, nx, 11); t_fill(w, nw, 12); t_fill(dy, ny, 13);
    t_nchw_blk(n, ci, hwi, iabn_layout_block(L), x, xb, 0);
    t_nchw_blk(n, co, hwo, iabn_layout_block(L), dy, dyb, 0);
    float *o1 = malloc((nx > ny ? nx : ny) * 4), *o2 = malloc((nx > ny ? nx : ny) * 4);
    float *ob = malloc((nx > ny ? nx : ny) * 4);
    float *dw1 = calloc(nw, 4), *dw2 = calloc(nw, 4);
    iabn_err e = {0};
    for (int p = 0; p < 3; p++) {
        size_t s1 = iabn_conv_scratch_bytes(&g, (iabn_conv_pass)p, 2);
        size_t s2 = iabn_conv_scratch_bytes(&gb, (iabn_conv_pass)p, 2);
        /* the primitive's layout saves the copies, where NCHW ran oneDNN too */
        iabn_conv_plan pn, pb;
        iabn_conv_plan_make(&g, (iabn_conv_pass)p, 2, &pn);
        iabn_conv_plan_make(&gb, (iabn_conv_pass)p, 2, &pb);
        if (want_smaller && L == CPU_BLOCKED && pn.path == IABN_CONV_PATH_DNNL &&
            pb.path == IABN_CONV_PATH_DNNL)
            CHECK_MSG(s2 < s1, "%s, pass %d: scratch %zu blocked, %zu NCHW", ln, p, s2, s1);
        void *sc1 = malloc(s1 ? s1 : 1), *sc2 = malloc(s2 ? s2 : 1);
        if (p == 0) {
            CHECK_OK(iabn_conv_fwd(cache, &g, x, w, NULL, o1, sc1, s1, &e));
            CHECK_OK(iabn_conv_fwd(cache, &gb, xb, w, NULL, ob, sc2, s2, &e));
            t_nchw_blk(n, co, hwo, iabn_layout_block(L), ob, o2, 1);
            CHECK_MSG(same_out(o2, o1, ny, exact & 1), "%s fwd %d->%d k%d g%d: blocked differs", ln,
                      ci, co, k, groups);
        } else if (p == 1) {
            CHECK_OK(iabn_conv_bwd_data(cache, &g, dy, w, o1, sc1, s1, &e));
            CHECK_OK(iabn_conv_bwd_data(cache, &gb, dyb, w, ob, sc2, s2, &e));
            t_nchw_blk(n, ci, hwi, iabn_layout_block(L), ob, o2, 1);
            CHECK_MSG(same_out(o2, o1, nx, exact & 2), "%s bwd-data %d->%d: blocked differs", ln,
                      ci, co);
        } else {
            CHECK_OK(iabn_conv_bwd_filter(cache, &g, x, dy, dw1, NULL, sc1, s1, &e));
            CHECK_OK(iabn_conv_bwd_filter(cache, &gb, xb, dyb, dw2, NULL, sc2, s2, &e));
            CHECK_MSG(same_out(dw2, dw1, nw, exact & 4), "%s bwd-filter %d->%d: blocked differs", ln,
                      ci, co);
        }
        free(sc1);
        free(sc2);
    }
    free(x); free(w); free(dy); free(xb); free(dyb); free(o1); free(o2); free(ob);
    free(dw1); free(dw2);
}

/* Every pass of g votes v on both sides. */
static void votes_are(const iabn_conv_geom *g, int v, const char *what)
{
    for (int p = 0; p < 3; p++)
        CHECK_MSG(iabn_conv_layout_vote(g, (iabn_conv_pass)p, 0) == v &&
                      iabn_conv_layout_vote(g, (iabn_conv_pass)p, 1) == v,
                  "%s, pass %d: votes %d %d", what, p,
                  iabn_conv_layout_vote(g, (iabn_conv_pass)p, 0),
                  iabn_conv_layout_vote(g, (iabn_conv_pass)p, 1));
}

/* g with x blocked where bit 0 of m is set, y where bit 1 is. */
static iabn_conv_geom with_layouts(const iabn_conv_geom *g, int m)
{
    iabn_conv_geom r = *g;
    r.x_layout = m & 1 ? CPU_BLOCKED : IABN_LAYOUT_NCHW;
    r.y_layout = m & 2 ? CPU_BLOCKED : IABN_LAYOUT_NCHW;
    return r;
}

/* Blocked activations, in both blocked layouts on every CPU: the same bits
 * as NCHW, and no reorder copies where the primitive works in the CPU's
 * blocked layout; the votes that the layout pass reads. */
static void test_blocked(void)
{
    static const iabn_layout LS[] = {IABN_LAYOUT_NCHW16C, IABN_LAYOUT_NCHW8C};
    for (int i = 0; i < 2; i++) {
        iabn_layout L = LS[i];
        blocked_case(L, 2, 64, 14, 128, 1, 1, 1, 1, 7);  /* 1x1 on 14x14: blocked primitive */
        blocked_case(L, 2, 128, 14, 128, 3, 1, 8, 1, 7); /* grouped, 16 per group */
        /* 8 per group: in release builds, nChw16c with AVX-512 the input
         * rotated in registers (forward and data) and the rows (weights),
         * nChw8c with AVX2 the rows (forward and data); else oneDNN, merged
         * pairs with AVX-512, unmerged with AVX2 */
        blocked_case(L, 2, 128, 14, 128, 3, 1, 16, 1, 7);
        /* and on 28x28: the direct kernels on NCHW; on blocked operands
         * with AVX-512 the blocked kernels (nChw16c, and the 8-lane build
         * on nChw8c: one group per block), with AVX2 oneDNN; all summing
         * in another order */
        blocked_case(L, 2, 128, 28, 128, 3, 1, 16, 0, 0);
        /* 12 per group on 28x28: no kernel takes blocked operands (the
         * layout pass leaves such convs NCHW) */
        blocked_case(L, 2, 192, 28, 192, 3, 1, 16, 0, -1);
        /* dense 3x3, stride 2 (AVX2: the NCHW weight pass natively) */
        blocked_case(L, 2, 32, 9, 48, 3, 2, 1, 1, lanes16() ? 7 : 3);
        /* 1x1 on 28x28: a GEMM on NCHW operands, the blocked 1x1 kernel (no
         * copies) on blocked ones */
        blocked_case(L, 1, 32, 28, 64, 1, 1, 1, 0, 0);
    }
#if !(defined(IABN_CONV_DNNL_ALL) && IABN_CONV_DNNL_ALL)
    iabn_conv_geom g;
    CHECK(CPU_BLOCKED == (lanes16() ? IABN_LAYOUT_NCHW16C : IABN_LAYOUT_NCHW8C));
    int v16 = 1; /* oneDNN's kernels take the CPU's blocked layout */
    CHECK(iabn_conv_geom_init(&g, 4, 256, 14, 14, 512, 1, 1, 1, 0, 1, 1) == 0);
    CHECK(iabn_conv_layout_vote(&g, IABN_CONV_FWD, 0) == v16 &&
          iabn_conv_layout_vote(&g, IABN_CONV_BWD_DATA, 1) == v16);
    /* 1x1 on 56x56: NCHW operands run on NCHW, but it votes as its blocked
     * kernel, which runs blocked operands about as fast (docs/CPU.md) */
    CHECK(iabn_conv_geom_init(&g, 4, 256, 56, 56, 128, 1, 1, 1, 0, 1, 1) == 0);
    CHECK(iabn_conv_dnnl_plain(&g));
    CHECK(iabn_conv_layout_vote(&g, IABN_CONV_FWD, 0) == v16 &&
          iabn_conv_layout_vote(&g, IABN_CONV_BWD_FILTER, 1) == v16);
    g.x_layout = CPU_BLOCKED;
    CHECK(!iabn_conv_dnnl_plain(&g));
    g.x_layout = IABN_LAYOUT_NCHW;
    /* 8 per group runs as 16 per group (pairs merged) on AVX-512: nChw16c,
     * where oneDNN's own 8-per-group kernels want nChw8c (a vote of 2);
     * on AVX2 it is one nChw8c block per group */
    CHECK(iabn_conv_geom_init(&g, 4, 512, 14, 14, 512, 3, 3, 1, 1, 1, 64) == 0);
    votes_are(&g, 1, "8 per group");
    /* 4 per group: the blocked grouped kernels where they are native
     * (test_conv_blocked: AVX-512 for nChw16c, an AVX2 build for nChw8c),
     * else the NCHW direct kernels */
    CHECK(iabn_conv_geom_init(&g, 4, 128, 56, 56, 128, 3, 3, 1, 1, 1, 32) == 0);
    int native = lanes16() ? iabn_conv_direct_avx512() : iabn_conv_blocked_native_8c();
    CHECK(iabn_conv_layout_vote(&g, IABN_CONV_FWD, 1) == (native ? 1 : -1));
    /* the stems (3 channels in): x NCHW, y blocked (test_conv_dnnl_flat) */
    for (int k = 3; k <= 7; k += 4) {
        CHECK(iabn_conv_geom_init(&g, 4, 3, 64, 64, 64, k, k, 2, k / 2, 1, 1) == 0);
        for (int p = 0; p < 3; p++)
            CHECK_MSG(iabn_conv_layout_vote(&g, (iabn_conv_pass)p, 0) == 0 &&
                          iabn_conv_layout_vote(&g, (iabn_conv_pass)p, 1) == v16,
                      "stem %dx%d, pass %d", k, k, p);
    }
    /* ResNeXt's 3x3 stem convs at batch 16: both sides NCHW copy 98 MiB,
     * over IABN_DNNL_COPY_MAX (native), one side 49 MiB: they vote blocked,
     * and every mix with a blocked side is oneDNN's.  This voted -1 (NCHW
     * only), so the layout pass kept them NCHW on the native kernels, 2-4x
     * slower */
    CHECK(iabn_conv_geom_init(&g, 16, 64, 112, 112, 64, 3, 3, 1, 1, 1, 1) == 0);
    CHECK(!iabn_conv_use_dnnl(&g, IABN_CONV_FWD));
    for (int p = 0; p < 2; p++)
        CHECK(iabn_conv_layout_vote(&g, (iabn_conv_pass)p, 0) == v16 &&
              iabn_conv_layout_vote(&g, (iabn_conv_pass)p, 1) == v16);
    /* its weight pass: oneDNN's with AVX-512; natively without, through NCHW
     * copies of blocked operands, which counts for neither layout */
    CHECK(iabn_conv_layout_vote(&g, IABN_CONV_BWD_FILTER, 0) == (lanes16() ? v16 : 2));
    for (int m = 1; m < 4; m++) {
        iabn_conv_geom gm = with_layouts(&g, m);
        CHECK(iabn_conv_use_dnnl(&gm, IABN_CONV_FWD) && iabn_conv_use_dnnl(&gm, IABN_CONV_BWD_DATA));
    }
    /* VGG19's at batch 32, 128x128: one side alone copies 128 MiB.  It
     * votes blocked too (oneDNN takes it with both sides blocked), but a
     * mix with one NCHW side has no kernel: the layout pass asks
     * iabn_conv_layouts_ok and sends such a conv back to NCHW (test_layout) */
    CHECK(iabn_conv_geom_init(&g, 32, 64, 128, 128, 64, 3, 3, 1, 1, 1, 1) == 0);
    CHECK(iabn_conv_layout_vote(&g, IABN_CONV_FWD, 0) == v16 &&
          iabn_conv_layout_vote(&g, IABN_CONV_FWD, 1) == v16);
    for (int m = 0; m < 4; m++) {
        iabn_conv_geom gm = with_layouts(&g, m);
        for (int p = 0; p < 3; p++)
            CHECK_MSG(iabn_conv_layouts_ok(&gm, (iabn_conv_pass)p) == (m == 0 || m == 3),
                      "VGG19's conv, layouts %d, pass %d", m, p);
    }
    /* a blocked operand on a conv the native kernels run is an error (3
     * channels per group: no blocked kernel takes it) */
    CHECK(iabn_conv_geom_init(&g, 1, 48, 7, 7, 48, 3, 3, 1, 1, 1, 16) == 0);
    g.x_layout = CPU_BLOCKED;
    float buf[48 * 49];
    iabn_err e = {0};
    CHECK(iabn_conv_fwd(cache, &g, buf, buf, NULL, buf, NULL, 0, &e) == IABN_EINVAL &&
          strstr(e.msg, iabn_layout_name(CPU_BLOCKED)));
#endif
}

#if IABN_HAVE_DNNL
/* One weight shape and oneDNN format: oneDNN copies a plain tensor into the
 * blocked layout, and the map's copy gives the same bits; the map's addition
 * of it into another plain tensor gives the bits of oneDNN's reorder with a
 * sum post-op; `mapped` 0 when the map must decline; `fast` the path the
 * map moves 16 x 16 blocks by (1 tiles, 2 rows, 0 the table walk). */
static void map_case(int nd, const dnnl_dims_t d, dnnl_format_tag_t plain, dnnl_format_tag_t tag,
                     int mapped, int fast)
{
    dnnl_engine_t eng;
    dnnl_stream_t st;
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0) == dnnl_success);
    CHECK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags) == dnnl_success);
    dnnl_memory_desc_t pm, bm;
    CHECK(dnnl_memory_desc_init_by_tag(&pm, nd, d, dnnl_f32, plain) == dnnl_success);
    CHECK(dnnl_memory_desc_init_by_tag(&bm, nd, d, dnnl_f32, tag) == dnnl_success);
    size_t n = dnnl_memory_desc_get_size(&pm) / 4, nb = dnnl_memory_desc_get_size(&bm) / 4;
    int64_t dims[DNNL_MAX_NDIMS], str[DNNL_MAX_NDIMS], blks[DNNL_MAX_NDIMS], idx[DNNL_MAX_NDIMS];
    const dnnl_blocking_desc_t *b = &bm.format_desc.blocking;
    for (int k = 0; k < nd; k++) { dims[k] = d[k]; str[k] = b->strides[k]; }
    for (int j = 0; j < b->inner_nblks; j++) { blks[j] = b->inner_blks[j]; idx[j] = b->inner_idxs[j]; }
    int pad = 0;
    for (int k = 0; k < nd; k++) pad |= bm.padded_dims[k] != bm.dims[k];
    iabn_blocked_map m;
    int rc = pad ? 1 : iabn_blocked_map_init(&m, nd, dims, str, bm.offset0, b->inner_nblks, blks, idx);
    CHECK_MSG(rc == !mapped, "format %d: map_init %d, want %s", (int)tag, rc, mapped ? "0" : "1");
    if (rc == 0) {
        CHECK_MSG(m.tile16 == (fast == 1) && m.rows16 == (fast == 2), "format %d: tile16 %d rows16 %d",
                  (int)tag, m.tile16, m.rows16);
        float *x = malloc(n * 4), *y1 = malloc(nb * 4), *y2 = malloc(nb * 4);
        float *z1 = malloc(n * 4), *z2 = malloc(n * 4);
        t_fill(x, n, 11); t_fill(z1, n, 12); memcpy(z2, z1, n * 4);
        dnnl_memory_t mx, my, mz;
        dnnl_primitive_desc_t pd;
        dnnl_primitive_t r;
        CHECK(dnnl_memory_create(&mx, &pm, eng, x) == dnnl_success);
        CHECK(dnnl_memory_create(&my, &bm, eng, y1) == dnnl_success);
        CHECK(dnnl_reorder_primitive_desc_create(&pd, &pm, eng, &bm, eng, NULL) == dnnl_success);
        CHECK(dnnl_primitive_create(&r, pd) == dnnl_success);
        dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, mx}, {DNNL_ARG_TO, my}};
        CHECK(dnnl_primitive_execute(r, st, 2, a) == dnnl_success && dnnl_stream_wait(st) == dnnl_success);
        dnnl_primitive_destroy(r);
        dnnl_primitive_desc_destroy(pd);
        memset(y2, 0xff, nb * 4); /* NaNs wherever the copy misses */
        iabn_blocked_pack(&m, x, y2);
        CHECK_MSG(memcmp(y1, y2, nb * 4) == 0, "format %d: the map's copy differs", (int)tag);
        /* z += y1, oneDNN's way and the map's */
        dnnl_primitive_attr_t at;
        dnnl_post_ops_t po;
        CHECK(dnnl_primitive_attr_create(&at) == dnnl_success && dnnl_post_ops_create(&po) == dnnl_success);
        CHECK(dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
              dnnl_primitive_attr_set_post_ops(at, po) == dnnl_success);
        CHECK(dnnl_memory_create(&mz, &pm, eng, z1) == dnnl_success);
        CHECK(dnnl_reorder_primitive_desc_create(&pd, &bm, eng, &pm, eng, at) == dnnl_success);
        CHECK(dnnl_primitive_create(&r, pd) == dnnl_success);
        dnnl_exec_arg_t a2[2] = {{DNNL_ARG_FROM, my}, {DNNL_ARG_TO, mz}};
        CHECK(dnnl_primitive_execute(r, st, 2, a2) == dnnl_success && dnnl_stream_wait(st) == dnnl_success);
        iabn_blocked_unpack_add(&m, y1, z2);
        CHECK_MSG(memcmp(z1, z2, n * 4) == 0, "format %d: add back differs", (int)tag);
        dnnl_primitive_destroy(r);
        dnnl_primitive_desc_destroy(pd);
        dnnl_post_ops_destroy(po);
        dnnl_primitive_attr_destroy(at);
        dnnl_memory_destroy(mx); dnnl_memory_destroy(my); dnnl_memory_destroy(mz);
        free(x); free(y1); free(y2); free(z1); free(z2);
        iabn_blocked_map_free(&m);
    }
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
}

static void test_blocked_map(void)
{
    dnnl_dims_t w1 = {512, 1024, 1, 1}, w1b = {2048, 64, 1, 1}, w3 = {64, 32, 3, 3};
    dnnl_dims_t g8 = {64, 8, 8, 3, 3}, g16 = {4, 16, 32, 3, 3}, w24 = {24, 32, 1, 1};
    map_case(4, w1, dnnl_oihw, dnnl_OIhw16i16o, 1, 1);  /* 1x1 fwd / weights: tiles */
    map_case(4, w1b, dnnl_oihw, dnnl_OIhw16i16o, 1, 1);
    map_case(4, w1, dnnl_oihw, dnnl_IOhw16o16i, 1, 2);  /* 1x1 data pass: rows */
    map_case(4, w1b, dnnl_oihw, dnnl_IOhw16o16i, 1, 2);
    map_case(4, w3, dnnl_oihw, dnnl_OIhw16i16o, 1, 0);  /* 3x3: the table walk */
    map_case(4, w3, dnnl_oihw, dnnl_Ohwi16o, 1, 0);
    map_case(5, g8, dnnl_goihw, dnnl_gOIhw8i8o, 1, 0);  /* grouped, 8 per group */
    map_case(5, g16, dnnl_goihw, dnnl_gOIhw16i16o, 1, 0);
    map_case(4, w1, dnnl_oihw, dnnl_OIhw4i16o4i, 0, 0); /* a dimension blocked twice */
    map_case(4, w24, dnnl_oihw, dnnl_OIhw16i16o, 0, 0); /* 24 outputs: padded */
    /* the map's own refusal of a padded layout (map_case skips the call) */
    iabn_blocked_map m;
    int64_t dims[2] = {24, 32}, str[2] = {512, 16}, blks[1] = {16}, idx[1] = {0};
    CHECK(iabn_blocked_map_init(&m, 2, dims, str, 0, 1, blks, idx) == 1 && !m.mem);
}
#else
static void test_blocked_map(void) {}
#endif

static void test_impl(void)
{
    /* a ResNet stage-1 layer must not land on oneDNN's reference code */
    iabn_conv_geom g;
    CHECK(iabn_conv_geom_init(&g, 2, 64, 28, 28, 64, 3, 3, 1, 1, 1, 1) == 0);
    for (int p = 0; p < 3; p++) {
        size_t b = 0;
        const char *impl = NULL;
        iabn_err e = {0};
        CHECK_OK(iabn_conv_dnnl_scratch(&g, (iabn_conv_pass)p, 0, 2, &b, &impl, &e));
        CHECK_MSG(impl && strncmp(impl, "ref", 3) && strstr(impl, "jit"),
                  "pass %d implementation '%s'", p, impl ? impl : "?");
    }
}

/* The device's table runs through its cache; the constant backend's
 * builds per call; both give the same bits. */
static void test_device(void)
{
    iabn_device d;
    iabn_err e = {0};
    CHECK_OK(iabn_device_open("cpu", &d, &e));
    CHECK(d.be->ctx != NULL && d.be->kind == IABN_DEV_CPU);
    iabn_conv_geom g;
    CHECK(iabn_conv_geom_init(&g, 2, 8, 10, 10, 12, 3, 3, 1, 1, 1, 1) == 0);
    size_t nx = 2 * 8 * 100, ny = 2 * 12 * 100, nw = 12 * 8 * 9;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *y1 = malloc(ny * 4), *y2 = malloc(ny * 4);
    t_fill(x, nx, 5); t_fill(w, nw, 6);
    size_t sb = d.be->k->conv_scratch(&g, IABN_CONV_FWD);
    CHECK(sb == iabn_backend_cpu()->k->conv_scratch(&g, IABN_CONV_FWD));
    void *scr = malloc(sb);
    CHECK_OK(d.be->k->conv_fwd(d.be->ctx, &g, x, w, NULL, y1, scr, sb, &e));
    CHECK_OK(d.be->k->conv_fwd(d.be->ctx, &g, x, w, NULL, y1, scr, sb, &e));
    CHECK_OK(iabn_backend_cpu()->k->conv_fwd(NULL, &g, x, w, NULL, y2, scr, sb, &e));
    CHECK(memcmp(y1, y2, ny * 4) == 0);
    iabn_device_close(&d);
    free(x); free(w); free(y1); free(y2); free(scr);
}

/* An accumulating forward (y += conv: the residual add fused into the
 * convolution) against the conv and then the add, on the layouts and paths
 * it takes: blocked operands (the CPU's layout: the sum post-op), NCHW ones the primitive
 * reorders (a scratch copy added to y), 1x1 on a large NCHW map (the GEMM
 * kernel's sum post-op), bias, Winograd; the geometries it refuses.  The
 * same bits (exact), or float32 noise where oneDNN adds y (or the bias)
 * at another point of the sum: with a bias, and on long reductions in
 * blocked layouts (it starts the accumulators from y when it splits the sum over
 * input-channel blocks). */
static void acc_case(int n, int ci, int h, int co, int k, int bias, int blocked, int wino,
                     int exact, int binary)
{
    iabn_conv_geom g;
    CHECK(iabn_conv_geom_init(&g, n, ci, h, h, co, k, k, 1, k / 2, 1, 1) == 0);
    if (blocked) g.x_layout = g.y_layout = CPU_BLOCKED;
    g.winograd = wino;
    CHECK(iabn_conv_accumulates(&g));
    iabn_conv_geom ga = g;
    ga.accumulate = 1;
    size_t nx = (size_t)n * ci * h * h, ny = (size_t)n * co * g.h_out * g.w_out;
    size_t nw = (size_t)co * ci * k * k;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc((size_t)co * 4);
    float *r = malloc(ny * 4), *y = malloc(ny * 4), *ya = malloc(ny * 4);
    t_fill(x, nx, 21); t_fill(w, nw, 22); t_fill(b, (size_t)co, 23); t_fill(r, ny, 24);
    memcpy(ya, r, ny * 4);
    size_t s1 = iabn_conv_scratch_bytes(&g, IABN_CONV_FWD, 2);
    size_t s2 = iabn_conv_scratch_bytes(&ga, IABN_CONV_FWD, 2);
    void *sc = malloc((s1 > s2 ? s1 : s2) + 1);
    iabn_err e = {0};
    CHECK_OK(iabn_conv_fwd(cache, &g, x, w, bias ? b : NULL, y, sc, s1, &e));
    CHECK_OK(iabn_conv_fwd(cache, &ga, x, w, bias ? b : NULL, ya, sc, s2, &e));
    /* the sum in a buffer of its own, r left as it was */
    float *y2 = malloc(ny * 4), *r0 = malloc(ny * 4);
    memcpy(r0, r, ny * 4);
    CHECK_OK(iabn_conv_fwd_add(cache, &ga, x, w, bias ? b : NULL, r, y2, sc, s2, &e));
    CHECK(memcmp(r, r0, ny * 4) == 0);
    for (size_t i = 0; i < ny; i++) y[i] += r[i];
    const char *lname = blocked ? iabn_layout_name(CPU_BLOCKED) : "NCHW";
    CHECK_MSG(exact ? memcmp(y, ya, ny * 4) == 0 : t_rel_diff(ya, y, ny) <= 1e-6,
              "%dx%dx%d -> %d k%d bias %d %s wino %d: y += conv differs from conv, then add "
              "(rel %.3g)", n, ci, h, co, k, bias, lname, wino, t_rel_diff(ya, y, ny));
    /* the binary post-op gives the bits of the conv and then the add; where
     * it is not taken, r is copied into y2 and the conv adds to it */
    CHECK_MSG(memcmp(y2, y, ny * 4) == 0 || memcmp(y2, ya, ny * 4) == 0,
              "%dx%dx%d -> %d k%d bias %d %s wino %d: y2 = r + conv is neither conv, then add, "
              "nor y += conv (rel %.3g)", n, ci, h, co, k, bias, lname, wino,
              t_rel_diff(y, y2, ny));
    if (binary)
        CHECK_MSG(memcmp(y2, y, ny * 4) == 0, "%dx%dx%d -> %d %s: not the binary post-op's bits",
                  n, ci, h, co, lname);
    free(x); free(w); free(b); free(r); free(y); free(ya); free(sc); free(y2); free(r0);
}

static void test_accumulate(void)
{
    acc_case(2, 64, 14, 128, 1, 0, 1, 0, 1, 1);  /* ResNeXt's conv3: blocked, sum post-op */
    acc_case(2, 64, 14, 128, 1, 0, 0, 0, 1, 0);  /* NCHW operands: reordered, then added  */
    acc_case(1, 64, 28, 32, 1, 0, 0, 0, 1, 0);   /* 1x1 on 28x28 NCHW: oneDNN's GEMM      */
    /* long reductions (mod4 / mod5): the sum post-op rounds otherwise, the
     * binary one does not */
    acc_case(2, 512, 4, 1024, 1, 0, 1, 0, 0, 1);
    acc_case(2, 1024, 2, 2048, 1, 0, 1, 0, 0, 1);
    acc_case(2, 1024, 1, 2048, 1, 0, 0, 0, 1, 0);
    acc_case(2, 32, 9, 48, 3, 1, 1, 0, 0, 0);    /* 3x3 with bias (WideResNet's conv2)    */
    acc_case(2, 32, 9, 48, 3, 1, 0, 0, 1, 0);
    /* with the Winograd flag: Winograd's kernels on AVX-512; on AVX2 the
     * direct one on nChw8c, which adds y where it starts the sum */
    acc_case(1, 32, 16, 32, 3, 0, 1, 1, lanes16(), 0);
    /* on slices of the batch (AVX-512: 784 tiles of 112x112, one image per
     * call), blocked and through NCHW copies */
    acc_case(3, 16, 112, 16, 3, 0, 1, 1, lanes16(), 0);
    acc_case(3, 16, 112, 16, 3, 1, 0, 1, 0, 0);
    /* the sum apart adds r in oneDNN's kernel where that generates its
     * binary post-op into its output loop (the 1x1 kernel on the CPU's
     * blocked layout, nChw16c or nChw8c), and not on the GEMM kernel of 1x1 convs on NCHW,
     * which applied it one value at a time: ResNeXt-101's step on an AVX2
     * CPU, whose 1x1 convs at 56x56 and 28x28 stay NCHW, spent 25x their
     * time in those convs (docs/CPU.md) */
    iabn_conv_geom g;
    CHECK(iabn_conv_geom_init(&g, 4, 128, 56, 56, 256, 1, 1, 1, 0, 1, 1) == 0);
    CHECK(iabn_conv_dnnl_plain(&g) && !iabn_conv_dnnl_add_fused(&g));
    CHECK(iabn_conv_geom_init(&g, 4, 512, 14, 14, 1024, 1, 1, 1, 0, 1, 1) == 0);
    g.x_layout = g.y_layout = CPU_BLOCKED;
    CHECK(iabn_conv_dnnl_add_fused(&g));
    /* the geometries and passes it refuses, by name */
    CHECK(iabn_conv_geom_init(&g, 1, 64, 8, 8, 64, 3, 3, 1, 1, 1, 16) == 0); /* 4 per group */
    CHECK(!iabn_conv_accumulates(&g));
    CHECK(iabn_conv_geom_init(&g, 1, 3, 8, 8, 16, 3, 3, 1, 1, 1, 1) == 0); /* a stem */
    CHECK(!iabn_conv_accumulates(&g));
    g.accumulate = 1;
    float buf[3 * 64 + 16 * 27 + 16 * 64 + 1024];
    iabn_err e = {0};
    CHECK(iabn_conv_fwd(cache, &g, buf, buf + 192, NULL, buf + 624, NULL, 0, &e) == IABN_EINVAL &&
          strstr(e.msg, "accumulating"));
    CHECK(iabn_conv_fwd_add(cache, &g, buf, buf + 192, NULL, buf + 1648, buf + 624, NULL, 0,
                            &e) == IABN_EINVAL &&
          strstr(e.msg, "residual added apart"));
    /* accumulate 2 is the sum apart's, inside: no r to read through iabn_conv_fwd */
    CHECK(iabn_conv_geom_init(&g, 1, 16, 8, 8, 16, 1, 1, 1, 0, 1, 1) == 0);
    g.accumulate = 2;
    CHECK(iabn_conv_fwd(cache, &g, buf, buf + 1024, NULL, buf + 1300, buf, sizeof buf, &e) ==
              IABN_EINVAL &&
          strstr(e.msg, "accumulate must be 0 or 1"));
    CHECK(iabn_conv_geom_init(&g, 1, 16, 8, 8, 16, 1, 1, 1, 0, 1, 1) == 0);
    g.accumulate = 1;
    CHECK(iabn_conv_bwd_data(cache, &g, buf, buf, buf + 1024, NULL, 0, &e) == IABN_EINVAL);
}

int main(void)
{
    int skip = t_dnnl_start(&cache);
    if (skip) return skip;
    RUN(test_parity);
    RUN(test_blocked);
    RUN(test_blocked_map);
    RUN(test_impl);
    RUN(test_device);
    RUN(test_accumulate);
    iabn_conv_cache_free(cache);
    return TEST_END();
}
