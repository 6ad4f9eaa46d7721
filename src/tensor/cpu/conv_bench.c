/* cpu/conv_bench.c: the convolution throughput measurement (conv_bench.h):
 * the cases, the peak loop and the timing of the native and oneDNN paths. */
#include "tensor/cpu/conv_bench.h"

#if (defined(__AVX2__) && defined(__FMA__)) || (defined(__GNUC__) && defined(__x86_64__))
#include <immintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iabn_config.h"
#include "tensor/cpu/conv_impl.h"
#include "tensor/cpu/ops.h"

#if IABN_HAVE_DNNL
#include "tensor/cpu/blocked_map.h"

#include <oneapi/dnnl/dnnl.h>
#endif

typedef struct bench_case {
    const char *name;
    const char *desc;
    int n, c_in, h, w, c_out, k, stride, pad, dil, groups;
    double target[3]; /* fraction of peak: fwd, bwd-data, bwd-weights */
} bench_case;

static const bench_case cases[] = {
    {"dense3x3", "3x3 64->64 56x56 b8", 8, 64, 56, 56, 64, 3, 1, 1, 1, 1, {0.85, 0.85, 0.85}},
    {"grouped3x3", "grp3x3 256->256 g64 56x56 b8", 8, 256, 56, 56, 256, 3, 1, 1, 1, 64,
     {0.55, 0.55, 0.30}},
    {"grouped3x3_16", "grp3x3 1024->1024 g64 14x14 b8", 8, 1024, 14, 14, 1024, 3, 1, 1, 1, 64,
     {0.55, 0.55, 0.30}},
    /* ResNeXt-101's mod4 grouped conv (23 blocks, 8 per group) */
    {"grouped3x3_8", "grp3x3 512->512 g64 14x14 b4", 4, 512, 14, 14, 512, 3, 1, 1, 1, 64,
     {0.55, 0.55, 0.30}},
    /* its mod5 grouped conv (3 blocks, 16 per group) */
    {"grouped3x3_16_7", "grp3x3 1024->1024 g64 7x7 b4", 4, 1024, 7, 7, 1024, 3, 1, 1, 1, 64,
     {0.55, 0.55, 0.30}},
    {"conv1x1", "1x1 256->1024 14x14 b8", 8, 256, 14, 14, 1024, 1, 1, 0, 1, 1, {0.85, 0.85, 0.85}},
    {"conv1x1_56", "1x1 256->128 56x56 b4", 4, 256, 56, 56, 128, 1, 1, 0, 1, 1, {0.85, 0.85, 0.85}},
    /* ResNeXt-101's mod4 pair (23 blocks): about 45% of its b4 step */
    {"conv1x1_r101", "1x1 1024->512 14x14 b4", 4, 1024, 14, 14, 512, 1, 1, 0, 1, 1, {0.85, 0.85, 0.85}},
    {"conv1x1_r101b", "1x1 512->1024 14x14 b4", 4, 512, 14, 14, 1024, 1, 1, 0, 1, 1, {0.85, 0.85, 0.85}},
    /* its mod5 expansion (3 blocks): the largest weights, 8 MiB */
    {"conv1x1_r101c", "1x1 1024->2048 7x7 b4", 4, 1024, 7, 7, 2048, 1, 1, 0, 1, 1, {0.85, 0.85, 0.85}},
    {"dilated3x3", "3x3 d12 2048->256 33x33 b2", 2, 2048, 33, 33, 256, 3, 1, 12, 12, 1,
     {0.85, 0.85, 0.85}},
    /* no target (0): where --winograd pays (its wino column) and where its
     * rule leaves the direct kernel (7x7), docs/CPU.md */
    {"dense3x3_112", "3x3 64->64 112x112 b4", 4, 64, 112, 112, 64, 3, 1, 1, 1, 1, {0, 0, 0}},
    {"dense3x3_28", "3x3 512->512 28x28 b4", 4, 512, 28, 28, 512, 3, 1, 1, 1, 1, {0, 0, 0}},
    {"dense3x3_7", "3x3 512->512 7x7 b4", 4, 512, 7, 7, 512, 3, 1, 1, 1, 1, {0, 0, 0}},
    /* ResNeXt's stem: x NCHW, y blocked where oneDNN's flat kernels take it
     * (docs/CPU.md "The stem"); its data pass never runs in a step */
    {"stem3x3", "3x3 3->64 s2 224x224 b4", 4, 3, 224, 224, 64, 3, 2, 1, 1, 1, {0, 0, 0}},
};

static const char *const pass_names[3] = {"fwd", "bwd-data", "bwd-weights"};

#define NCASES ((int)(sizeof cases / sizeof cases[0]))
_Static_assert(sizeof cases / sizeof cases[0] * 3 <= IABN_CONVBENCH_ROWS,
               "IABN_CONVBENCH_ROWS is too small for the cases");

const char *const *iabn_convbench_cases(void)
{
    static const char *names[NCASES + 1];
    for (int i = 0; i < NCASES; i++) names[i] = cases[i].name;
    return names;
}

#if defined(__GNUC__) && defined(__x86_64__)
/* One thread's FP32 FMA rate with 16-wide (AVX-512) FMAs: on cores with
 * full-width AVX-512 units (Zen 5, Xeons with two FMA ports) that is twice
 * the AVX2 rate, and oneDNN's kernels use it. */
__attribute__((target("avx512f"))) static double peak_avx512(int windows)
{
    __m512 acc[12], m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
    for (int c = 0; c < 12; c++) acc[c] = _mm512_set1_ps((float)c);
    double best = 0;
    for (int w = 0; w < windows; w++) {
        long iters = 2000000;
        double t0 = iabn_now();
        for (long k = 0; k < iters; k++)
            for (int c = 0; c < 12; c++) acc[c] = _mm512_fmadd_ps(acc[c], m, a);
        double dt = iabn_now() - t0, gf = (double)iters * 12 * 2 * 16 / dt * 1e-9;
        if (gf > best) best = gf;
    }
    float sum = 0;
    for (int c = 0; c < 12; c++) sum += _mm512_reduce_add_ps(acc[c]);
    return best + (sum == 12345.0f ? 1e-9 : 0.0); /* keeps every chain live */
}
#define HAVE_PEAK_AVX512 1
#endif

/* FP32 FMA throughput of `threads` threads: 12 independent 8-wide (or
 * 16-wide where the CPU has AVX-512) FMA chains per thread (enough to cover
 * the FMA latency), best of `windows` windows of about 4 ms.  For machines
 * other than the reference one (iabn bench conv --peak measure).  Without
 * FMA in the build it times mul+add pairs, counted as 2 FLOPs. */
static double peak_windows(int threads, int windows)
{
    double total = 0;
#ifdef HAVE_PEAK_AVX512
    int wide = __builtin_cpu_supports("avx512f");
#else
    int wide = 0;
#endif
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
#ifdef HAVE_PEAK_AVX512
        if (wide) total += peak_avx512(windows);
#endif
        if (!wide) {
#if defined(__AVX2__) && defined(__FMA__)
        __m256 acc[12], m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
        for (int c = 0; c < 12; c++) acc[c] = _mm256_set1_ps((float)c);
#define PEAK_STEP(c) acc[c] = _mm256_fmadd_ps(acc[c], m, a)
#define PEAK_LANES 8
#else
        float acc[12], m = 0.999999f, a = 1e-7f;
        for (int c = 0; c < 12; c++) acc[c] = (float)c;
#define PEAK_STEP(c) acc[c] = acc[c] * m + a
#define PEAK_LANES 1
#endif
        double best = 0;
        for (int w = 0; w < windows; w++) {
            long iters = 2000000;
            double t0 = iabn_now();
            for (long k = 0; k < iters; k++)
                for (int c = 0; c < 12; c++) PEAK_STEP(c);
            double dt = iabn_now() - t0, gf = (double)iters * 12 * 2 * PEAK_LANES / dt * 1e-9;
            if (gf > best) best = gf;
        }
        float sink[PEAK_LANES * 12], sum = 0;
        memcpy(sink, acc, sizeof sink);
        for (int i = 0; i < PEAK_LANES * 12; i++) sum += sink[i];
        total += best + (sum == 12345.0f ? 1e-9 : 0.0); /* keeps every chain live */
#undef PEAK_STEP
#undef PEAK_LANES
        }
    }
    return total;
}

double iabn_cpu_peak_gflops(int threads) { return peak_windows(threads, 5); }

static void fill(float *p, size_t n, unsigned seed)
{
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 17; s ^= s << 5;
        p[i] = (float)((s >> 8) * (1.0 / 8388608.0)) - 1.0f;
    }
}

static int run_pass(iabn_conv_cache *c, const iabn_conv_plan *p, const iabn_conv_geom *g,
                    int pass, float *x, float *w, float *y, float *dx, float *dw, void *scr,
                    size_t sb, iabn_err *e)
{
    switch (pass) {
    case 0: return iabn_conv_run_plan(c, p, g, IABN_CONV_FWD, x, w, NULL, y, NULL, scr, sb, e);
    case 1: return iabn_conv_run_plan(c, p, g, IABN_CONV_BWD_DATA, y, w, NULL, dx, NULL, scr, sb, e);
    default: return iabn_conv_run_plan(c, p, g, IABN_CONV_BWD_FILTER, x, y, NULL, dw, NULL, scr, sb, e);
    }
}

static const char *path_label(const iabn_conv_plan *p)
{
    switch (p->path) {
    case IABN_CONV_PATH_DIRECT: return "direct";
    case IABN_CONV_PATH_TAPS: return "taps";
    case IABN_CONV_PATH_DNNL: return "onednn";
    case IABN_CONV_PATH_WGRAD: return "wgrad";
    case IABN_CONV_PATH_DGRAD: return "dgrad";
    default: return p->no_col ? "gemm" : p->flip ? "im2col-flip" : "im2col";
    }
}

/* --cold: the bytes read before each timed call, twice the largest L3 of
 * the machines docs/CPU.md measured on (32 MiB); every thread reads its
 * share, so that each core's own L2 is swept too. */
enum { COLD_BYTES = 64 << 20 };

/* Reads the sweep (n floats) on `threads` threads; the sum keeps the
 * loads live. */
static float read_sweep(const float *s, size_t n, int threads)
{
    float sum = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : sum) schedule(static)
    for (size_t i = 0; i < n; i += 16) sum += s[i];
    return sum;
}

/* Best times t[k] of `repeat` calls of each of the k < nrun runs (a plan,
 * its geometry: the native plan, the oneDNN one on NCHW operands, the
 * oneDNN one on the layouts the graph's layout pass would give them, and
 * with the winograd flag), after
 * a warm-up of each; the runs alternate call by call, so that a load from
 * elsewhere on the machine hits them alike.  With `peak` not NULL, one
 * window of the FMA loop runs after each round of calls too, and *peak is
 * its best: on a host whose speed drifts (a shared VM: the same call runs
 * at 0.78x for minutes at a time), a peak timed once at the start makes the
 * same kernel read 72% or 92%; timed beside the calls, it drifts with them.
 * With `sweep` not NULL (COLD_BYTES), each timed call comes after a read of
 * it.  Returns 0, or the failing call's status. */
static int time_pass(iabn_conv_cache *c, int nrun, const iabn_conv_plan *const *plan,
                     const iabn_conv_geom *const *g, int pass, int repeat, float *x, float *w,
                     float *y, float *dx, float *dw, void *scr, size_t sb, const float *sweep,
                     double *t, double *peak, iabn_err *e)
{
    int rc = 0;
    volatile float sink = 0;
    for (int k = 0; k < nrun && !rc; k++) {
        t[k] = 1e30;
        rc = run_pass(c, plan[k], g[k], pass, x, w, y, dx, dw, scr, sb, e);
    }
    if (peak) *peak = 0;
    for (int r = 0; r < repeat && !rc; r++) {
        for (int k = 0; k < nrun && !rc; k++) {
            if (sweep) sink += read_sweep(sweep, COLD_BYTES / sizeof *sweep, plan[k]->threads);
            double t0 = iabn_now();
            rc = run_pass(c, plan[k], g[k], pass, x, w, y, dx, dw, scr, sb, e);
            double dt = iabn_now() - t0;
            if (dt < t[k]) t[k] = dt;
        }
        if (peak && !rc) {
            double pk = peak_windows(plan[0]->threads, 1);
            if (pk > *peak) *peak = pk;
        }
    }
    return rc;
}

/* The residual add (layers.h iabn_conv2d_add) on the forward of g, where
 * the graph fuses it: best times of the convolution (plan p) then the add
 * kernel (t[0], what an unfused graph runs), of the accumulating
 * convolution ga, g with accumulate set (t[1]: the sum over the shortcut,
 * the in-place modes' identity blocks), and of the sum written apart from
 * the shortcut (t[2], iabn_conv_fwd_add: standard BN's identity blocks),
 * alternating call by call.  r holds the shortcut; the fused run adds into
 * y2, which grows with each call (the time does not depend on the values). */
static int time_residual(iabn_conv_cache *c, const iabn_conv_plan *p, const iabn_conv_geom *g,
                         const iabn_conv_geom *ga, int repeat, float *x, float *w, float *y,
                         float *y2, const float *r, size_t ny, void *scr, size_t sb, double *t,
                         iabn_err *e)
{
    iabn_conv_plan pa;
    iabn_conv_plan_make(ga, IABN_CONV_FWD, p->threads, &pa);
    memcpy(y2, r, ny * sizeof(float));
    t[0] = t[1] = t[2] = 1e30;
    int rc = 0;
    for (int i = -1; i < repeat && !rc; i++) { /* i -1: the warm-up */
        double t0 = iabn_now();
        rc = iabn_conv_run_plan(c, p, g, IABN_CONV_FWD, x, w, NULL, y, NULL, scr, sb, e);
        if (!rc) iabn_add(ny, y, r, y);
        double t1 = iabn_now();
        if (!rc) rc = iabn_conv_run_plan(c, &pa, ga, IABN_CONV_FWD, x, w, NULL, y2, NULL, scr,
                                         sb, e);
        double t2 = iabn_now();
        if (!rc) rc = iabn_conv_fwd_add(c, ga, x, w, NULL, r, y, scr, sb, e);
        double t3 = iabn_now();
        if (i >= 0 && t1 - t0 < t[0]) t[0] = t1 - t0;
        if (i >= 0 && t2 - t1 < t[1]) t[1] = t2 - t1;
        if (i >= 0 && t3 - t2 < t[2]) t[2] = t3 - t2;
    }
    return rc;
}

#if IABN_HAVE_DNNL
enum { SWEEP_BYTES = 256 << 20 };

/* The weights of a 1x1 conv, c_out x c_in in multiples of 16, into the
 * layout oneDNN's 1x1 kernel takes in a pass: OIhw16i16o forward,
 * IOhw16o16i in the data pass (DNNL_VERBOSE names them).  Best ms of
 * oneDNN's reorder (t[0]) and of the map's copy that the conv path runs
 * (t[1], cpu/blocked_map.c), alternating, each call after a 256 MiB sweep
 * that moves the weights out of the caches, as in a training step that
 * reads every weight once per pass.  t stays 0 where nothing is timed: the
 * map declines, or oneDNN fails (the conv rows report that). */
static void time_weight_copy(const iabn_conv_geom *g, int pass, int repeat, const float *w,
                             double t[2])
{
    t[0] = t[1] = 0;
    size_t nw = (size_t)g->c_out * g->c_in;
    char *sweep = iabn_aligned_alloc(64, SWEEP_BYTES);
    float *wb = iabn_aligned_alloc(64, nw * sizeof *wb);
    dnnl_engine_t eng = NULL;
    dnnl_stream_t st = NULL;
    dnnl_memory_desc_t pm, bm;
    dnnl_memory_t mp = NULL, mb = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t r = NULL;
    iabn_blocked_map map = {0};
    dnnl_dims_t d = {g->c_out, g->c_in, 1, 1};
    dnnl_format_tag_t tag = pass == 0 ? dnnl_OIhw16i16o : dnnl_IOhw16o16i;
    int ok = sweep && wb && dnnl_engine_create(&eng, dnnl_cpu, 0) == dnnl_success &&
             dnnl_stream_create(&st, eng, dnnl_stream_default_flags) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&pm, 4, d, dnnl_f32, dnnl_oihw) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&bm, 4, d, dnnl_f32, tag) == dnnl_success &&
             dnnl_memory_create(&mp, &pm, eng, (void *)w) == dnnl_success &&
             dnnl_memory_create(&mb, &bm, eng, wb) == dnnl_success &&
             dnnl_reorder_primitive_desc_create(&pd, &pm, eng, &bm, eng, NULL) == dnnl_success &&
             dnnl_primitive_create(&r, pd) == dnnl_success;
    ok = ok && iabn_blocked_map_from_dnnl(&map, &bm) == 0 && (map.tile16 || map.rows16);
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, mp}, {DNNL_ARG_TO, mb}};
    double best[2] = {1e30, 1e30};
    for (int i = -1; ok && i < repeat; i++) { /* i -1: the warm-up */
        for (int k = 0; k < 2 && ok; k++) {
            memset(sweep, i + k, SWEEP_BYTES);
            double t0 = iabn_now();
            if (k == 0)
                ok = dnnl_primitive_execute(r, st, 2, a) == dnnl_success &&
                     dnnl_stream_wait(st) == dnnl_success;
            else
                iabn_blocked_pack(&map, w, wb);
            double dt = iabn_now() - t0;
            if (i >= 0 && dt < best[k]) best[k] = dt;
        }
    }
    if (ok) {
        t[0] = best[0] * 1e3;
        t[1] = best[1] * 1e3;
    }
    iabn_blocked_map_free(&map);
    if (r) dnnl_primitive_destroy(r);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (mp) dnnl_memory_destroy(mp);
    if (mb) dnnl_memory_destroy(mb);
    if (st) dnnl_stream_destroy(st);
    if (eng) dnnl_engine_destroy(eng);
    iabn_aligned_free(wb);
    iabn_aligned_free(sweep);
}
#endif

/* Measures the three passes of one case into rows[0..3). */
static int bench_one(const bench_case *bc, int repeat, double peak, int threads, int cold,
                     iabn_convbench_row *rows, iabn_err *e)
{
    iabn_conv_geom g;
    if (iabn_conv_geom_init(&g, bc->n, bc->c_in, bc->h, bc->w, bc->c_out, bc->k, bc->k,
                            bc->stride, bc->pad, bc->dil, bc->groups))
        return iabn_err_set(e, IABN_EINVAL, "bench conv: case %s has no geometry", bc->name);
    size_t nx = (size_t)g.n * g.c_in * g.h_in * g.w_in;
    size_t ny = (size_t)g.n * g.c_out * g.h_out * g.w_out;
    size_t nw = (size_t)g.c_out * (g.c_in / g.groups) * g.kh * g.kw;
    /* the native plans, and the oneDNN ones (when built with it); gb: the
     * operands the conv votes blocked for in the CPU's blocked layout (what
     * the graph gives it where its neighbours agree) */
    int has_dn = iabn_conv_have_dnnl();
    iabn_conv_geom gb = g;
    iabn_layout L = iabn_conv_blocked_layout();
    if (iabn_conv_layout_vote(&g, IABN_CONV_FWD, 0) == 1) gb.x_layout = L;
    if (iabn_conv_layout_vote(&g, IABN_CONV_FWD, 1) == 1) gb.y_layout = L;
    int has_blk = gb.x_layout != g.x_layout || gb.y_layout != g.y_layout;
    /* a conv the graph keeps NCHW whose weight pass runs the hand-written
     * kernel through blocked copies (DeepLab's ASPP): its chosen plans take
     * the blocked run's place */
    iabn_conv_plan cw;
    iabn_conv_plan_make(&g, IABN_CONV_BWD_FILTER, threads, &cw);
    int copied = !has_blk && cw.path == IABN_CONV_PATH_WGRAD;
    const iabn_conv_geom *gbr = copied ? &g : &gb;
    int has_b = has_blk || copied;
    /* gw: gb with the winograd flag (iabn --winograd), where it runs Winograd */
    iabn_conv_geom gw = gb;
    gw.winograd = 1;
    int has_wino = has_dn && iabn_conv_winograd(&gw, IABN_CONV_FWD);
    /* the runs, in this order: native, oneDNN on NCHW operands, on blocked
     * ones where it votes so (ib: oneDNN's, or the blocked grouped kernels),
     * with Winograd where it runs it (iw); -1: not run */
    const iabn_conv_geom *run[4] = {&g};
    int nrun = 1, ib = -1, iw = -1;
    if (has_dn) run[nrun++] = &g;
    if (has_b) run[ib = nrun++] = gbr;
    if (has_wino) run[iw = nrun++] = &gw;
    iabn_conv_plan nat[3], dn[3], blk[3], wn[3];
    const char *impl[3] = {"", "", ""};
    size_t sb = 0;
    /* the residual add fused where the graph would (gb's layouts) */
    iabn_conv_geom ga = gb;
    ga.accumulate = 1;
    int has_res = iabn_conv_accumulates(&gb);
    if (has_res) sb = iabn_conv_scratch_bytes(&ga, IABN_CONV_FWD, threads);
    for (int p = 0; p < 3; p++) {
        iabn_conv_plan_make_native(&g, (iabn_conv_pass)p, threads, &nat[p]);
        if (nat[p].total * sizeof(float) > sb) sb = nat[p].total * sizeof(float);
        memset(&dn[p], 0, sizeof dn[p]);
        dn[p].path = IABN_CONV_PATH_DNNL;
        dn[p].threads = threads;
        /* the blocked run's plan (oneDNN's, or the blocked kernels'), which
         * sizes its own scratch */
        iabn_conv_plan_make(gbr, (iabn_conv_pass)p, threads, &blk[p]);
        if (blk[p].total * sizeof(float) > sb) sb = blk[p].total * sizeof(float);
        /* the Winograd run's: oneDNN's, or cpu/conv_wino.c's on nChw8c */
        iabn_conv_plan_make(&gw, (iabn_conv_pass)p, threads, &wn[p]);
        if (wn[p].total * sizeof(float) > sb) sb = wn[p].total * sizeof(float);
        for (int k = 1; k < nrun; k++) { /* the other oneDNN runs: their largest plan */
            if (k == ib || (k == iw && wn[p].path != IABN_CONV_PATH_DNNL)) continue;
            size_t b = 0;
            int rc = iabn_conv_dnnl_scratch(run[k], (iabn_conv_pass)p, 0, threads, &b,
                                            k == 1 ? &impl[p] : NULL, e);
            if (rc) return rc;
            if (b > sb) sb = b;
        }
    }
    iabn_conv_cache *cache = NULL;
    int rc = has_dn ? iabn_conv_cache_new(&cache, e) : 0;
    if (rc) return rc;
    float *x = iabn_aligned_alloc(64, nx * 4), *dx = iabn_aligned_alloc(64, nx * 4);
    float *y = iabn_aligned_alloc(64, ny * 4), *w = iabn_aligned_alloc(64, nw * 4);
    float *dw = iabn_aligned_alloc(64, nw * 4);
    float *res = has_res ? iabn_aligned_alloc(64, ny * 4) : NULL;
    float *y2 = has_res ? iabn_aligned_alloc(64, ny * 4) : NULL;
    void *scr = iabn_aligned_alloc(64, sb ? sb : 64);
    float *sweep = cold ? iabn_aligned_alloc(64, COLD_BYTES) : NULL;
    if (!x || !dx || !y || !w || !dw || !scr || (has_res && (!res || !y2)) || (cold && !sweep)) {
        rc = iabn_err_set(e, IABN_ENOMEM, "bench conv: out of memory for %s", bc->name);
        goto done;
    }
    fill(x, nx, 1); fill(w, nw, 2); fill(y, ny, 3);
    if (sweep) memset(sweep, 0, COLD_BYTES);
    if (has_res) fill(res, ny, 4);
    memset(dw, 0, nw * 4);
    double flops = 2.0 * g.n * g.c_out * g.h_out * g.w_out * (double)(g.c_in / g.groups) *
                   g.kh * g.kw;
    for (int pass = 0; pass < 3 && !rc; pass++) {
        const iabn_conv_plan *plans[4] = {&nat[pass], &dn[pass], &dn[pass], &dn[pass]};
        if (ib >= 0) plans[ib] = &blk[pass];
        if (iw >= 0 && wn[pass].path != IABN_CONV_PATH_DNNL) plans[iw] = &wn[pass];
        double t[4] = {0, 0, 0, 0}, pk = peak;
        if ((rc = time_pass(cache, nrun, plans, run, pass, repeat, x, w, y, dx, dw, scr, sb,
                            sweep, t, peak > 0 ? NULL : &pk, e)))
            break;
        iabn_conv_plan chosen; /* what the graph runs on NCHW operands */
        iabn_conv_plan_make(&g, (iabn_conv_pass)pass, threads, &chosen);
        int chose_dnnl = chosen.path == IABN_CONV_PATH_DNNL;
        iabn_convbench_row *r = &rows[pass];
        r->case_name = bc->name;
        r->desc = bc->desc;
        r->pass = pass_names[pass];
        r->native_path = path_label(&nat[pass]);
        /* the path of the run the row's GFLOP/s come from */
        int dnnl_row = has_b ? blk[pass].path == IABN_CONV_PATH_DNNL : chose_dnnl;
        r->path = has_b && blk[pass].path == IABN_CONV_PATH_BLOCKED ? "blocked"
                  : has_b && blk[pass].path == IABN_CONV_PATH_WGRAD  ? "wgrad"
                  : has_b && blk[pass].path == IABN_CONV_PATH_DGRAD  ? "dgrad"
                  : dnnl_row                                         ? "onednn"
                                                                     : r->native_path;
        r->onednn_impl = has_dn ? impl[pass] : "";
        r->onednn = has_dn;
        r->native_gflops = flops / t[0] * 1e-9;
        r->onednn_gflops = has_dn ? flops / t[1] * 1e-9 : 0;
        r->blocked = has_b;
        r->blocked_layout = iabn_layout_name(L);
        r->blocked_gflops = has_b ? flops / t[ib] * 1e-9 : 0;
        r->wino = has_wino;
        r->wino_gflops = has_wino ? flops / t[iw] * 1e-9 : 0;
        /* the graph gives a conv that votes blocked those operands */
        r->gflops = has_b ? r->blocked_gflops : chose_dnnl ? r->onednn_gflops : r->native_gflops;
        r->peak = pk;
        r->peak_fraction = r->gflops / pk;
        r->target = bc->target[pass];
        r->ok = r->peak_fraction >= r->target;
        r->wcopy = 0;
#if IABN_HAVE_DNNL
        /* the 1x1 convs on blocked operands (the graph's): their weights' copy */
        r->wcopy = pass < 2 && has_blk && chose_dnnl && g.kh * g.kw == 1 && g.groups == 1 &&
                   g.c_in % 16 == 0 && g.c_out % 16 == 0;
        if (r->wcopy) time_weight_copy(&g, pass, repeat, w, r->wcopy_ms);
        r->wcopy = r->wcopy && r->wcopy_ms[1] > 0;
#endif
        r->residual = pass == 0 && has_res;
        if (r->residual) {
            double tr[3];
            rc = time_residual(cache, &blk[0], &gb, &ga, repeat, x, w, y, y2, res, ny, scr, sb,
                               tr, e);
            for (int k = 0; k < 3; k++) r->residual_ms[k] = tr[k] * 1e3;
            r->residual_binary = iabn_conv_dnnl_add_fused(&gb);
        }
    }
done:
    iabn_conv_cache_free(cache);
    iabn_aligned_free(x); iabn_aligned_free(dx); iabn_aligned_free(y);
    iabn_aligned_free(w); iabn_aligned_free(dw); iabn_aligned_free(scr);
    iabn_aligned_free(res); iabn_aligned_free(y2); iabn_aligned_free(sweep);
    return rc;
}

int iabn_convbench_run(const char *only, int repeat, double peak, int threads, int cold,
                       iabn_convbench_row *rows, int max, int *n, iabn_err *e)
{
    *n = 0;
    int found = !only;
    for (int i = 0; i < NCASES; i++) found |= only && !strcmp(only, cases[i].name);
    if (!found) {
        char names[256] = "";
        for (int i = 0; i < NCASES; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     cases[i].name);
        return iabn_err_set(e, IABN_EINVAL, "no convolution case %s (valid: %s)", only, names);
    }
    for (int i = 0; i < NCASES; i++) {
        if (only && strcmp(only, cases[i].name)) continue;
        if (*n + 3 > max) return iabn_err_set(e, IABN_EINVAL, "bench conv: room for %d rows", max);
        int rc = bench_one(&cases[i], repeat, peak, threads, cold, rows + *n, e);
        if (rc) return rc;
        *n += 3;
    }
    return 0;
}
