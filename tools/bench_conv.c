/* bench_conv.c: `iabn bench conv`, the CPU convolution throughput of the four
 * layers docs/TARGETS.md names (dense 3x3, ResNeXt's grouped 3x3, a 1x1, DeepLab's
 * dilated ASPP 3x3), per pass, against the targets there.
 *
 * Each dense case runs twice: on the native path (direct, per-tap or im2col
 * kernels) and on the oneDNN path (cached primitives, reorders from and to
 * NCHW included); the path column says which one the library chooses, and
 * the target is checked on that one.  Rate = nominal FLOPs
 * (2*N*Cout*Hout*Wout*Cin/groups*kh*kw, padding taps included, as
 * docs/TARGETS.md counts it) over the best time of --repeat calls, after one
 * warm-up call (best, not median: on a shared machine the other loads only
 * ever slow a call down); native and oneDNN calls alternate.  The default peak (235 GFLOP/s) is the FP32
 * peak of both cores of the reference machine; pass --peak for another, or
 * --peak measure to time an FMA loop on this one.
 */
#include "bench.h"

#include <cjson/cJSON.h>
#if (defined(__AVX2__) && defined(__FMA__)) || (defined(__GNUC__) && defined(__x86_64__))
#include <immintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"
#include "tensor/cpu/conv_impl.h"
#include "tools/cli.h"
#include "tools/options.h"

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
    {"conv1x1", "1x1 256->1024 14x14 b8", 8, 256, 14, 14, 1024, 1, 1, 0, 1, 1, {0.85, 0.85, 0.85}},
    {"dilated3x3", "3x3 d12 2048->256 33x33 b2", 2, 2048, 33, 33, 256, 3, 1, 12, 12, 1,
     {0.85, 0.85, 0.85}},
};

static const char *pass_names[3] = {"fwd", "bwd-data", "bwd-weights"};

#if defined(__GNUC__) && defined(__x86_64__)
/* One thread's FP32 FMA rate with 16-wide (AVX-512) FMAs: on cores with
 * full-width AVX-512 units (Zen 5, Xeons with two FMA ports) that is twice
 * the AVX2 rate, and oneDNN's kernels use it. */
__attribute__((target("avx512f"))) static double peak_avx512(void)
{
    __m512 acc[12], m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
    for (int c = 0; c < 12; c++) acc[c] = _mm512_set1_ps((float)c);
    double best = 0;
    for (int w = 0; w < 5; w++) {
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
 * the FMA latency), best of several windows.  For machines other than the
 * reference one (--peak measure).  Without FMA in the build it times mul+add
 * pairs, counted as 2 FLOPs. */
static double measure_peak(int threads)
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
        if (wide) total += peak_avx512();
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
        for (int w = 0; w < 5; w++) {
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
                    size_t sb)
{
    iabn_err e = {0};
    int rc;
    switch (pass) {
    case 0: rc = iabn_conv_run_plan(c, p, g, IABN_CONV_FWD, x, w, NULL, y, NULL, scr, sb, &e); break;
    case 1: rc = iabn_conv_run_plan(c, p, g, IABN_CONV_BWD_DATA, y, w, NULL, dx, NULL, scr, sb, &e); break;
    default: rc = iabn_conv_run_plan(c, p, g, IABN_CONV_BWD_FILTER, x, y, NULL, dw, NULL, scr, sb, &e); break;
    }
    if (rc) fprintf(stderr, "bench conv: %s\n", e.msg);
    return rc;
}

static const char *path_label(const iabn_conv_plan *p)
{
    switch (p->path) {
    case IABN_CONV_PATH_DIRECT: return "direct";
    case IABN_CONV_PATH_TAPS: return "taps";
    case IABN_CONV_PATH_DNNL: return "onednn";
    default: return p->no_col ? "gemm" : p->flip ? "im2col-flip" : "im2col";
    }
}

/* Best times of `repeat` calls of the native plan and (with dn) the oneDNN
 * one, after a warm-up of each; the two alternate call by call, so that a
 * load from elsewhere on the machine hits both alike.  Returns 0, or -1 on
 * failure. */
static int time_pass(iabn_conv_cache *c, const iabn_conv_plan *nat, const iabn_conv_plan *dn,
                     const iabn_conv_geom *g, int pass, int repeat, float *x, float *w, float *y,
                     float *dx, float *dw, void *scr, size_t sb, double *tn, double *td)
{
    if (run_pass(NULL, nat, g, pass, x, w, y, dx, dw, scr, sb)) return -1;
    if (dn && run_pass(c, dn, g, pass, x, w, y, dx, dw, scr, sb)) return -1;
    *tn = *td = 1e30;
    for (int r = 0; r < repeat; r++) {
        double t0 = iabn_now();
        if (run_pass(NULL, nat, g, pass, x, w, y, dx, dw, scr, sb)) return -1;
        double t = iabn_now() - t0;
        if (t < *tn) *tn = t;
        if (!dn) continue;
        t0 = iabn_now();
        if (run_pass(c, dn, g, pass, x, w, y, dx, dw, scr, sb)) return -1;
        t = iabn_now() - t0;
        if (t < *td) *td = t;
    }
    return 0;
}

/* Measures the three passes of one case; returns 0, or 2 on failure. */
static int bench_one(const bench_case *bc, int repeat, double peak, int threads, int json,
                     cJSON *list, int *missed)
{
    iabn_conv_geom g;
    if (iabn_conv_geom_init(&g, bc->n, bc->c_in, bc->h, bc->w, bc->c_out, bc->k, bc->k,
                            bc->stride, bc->pad, bc->dil, bc->groups))
        return 2;
    size_t nx = (size_t)g.n * g.c_in * g.h_in * g.w_in;
    size_t ny = (size_t)g.n * g.c_out * g.h_out * g.w_out;
    size_t nw = (size_t)g.c_out * (g.c_in / g.groups) * g.kh * g.kw;
    /* the native plans, and the oneDNN ones for dense convs */
    int dense = g.groups == 1 && iabn_conv_have_dnnl();
    iabn_conv_plan nat[3], dn[3];
    const char *impl[3] = {"", "", ""};
    size_t sb = 0;
    iabn_err e = {0};
    for (int p = 0; p < 3; p++) {
        iabn_conv_plan_make_native(&g, (iabn_conv_pass)p, threads, &nat[p]);
        if (nat[p].total * sizeof(float) > sb) sb = nat[p].total * sizeof(float);
        if (!dense) continue;
        size_t b = 0;
        if (iabn_conv_dnnl_scratch(&g, (iabn_conv_pass)p, 0, threads, &b, &impl[p], &e)) {
            fprintf(stderr, "bench conv: %s\n", e.msg);
            return 2;
        }
        memset(&dn[p], 0, sizeof dn[p]);
        dn[p].path = IABN_CONV_PATH_DNNL;
        dn[p].threads = threads;
        if (b > sb) sb = b;
    }
    iabn_conv_cache *cache = NULL;
    if (dense && iabn_conv_cache_new(&cache, &e)) {
        fprintf(stderr, "bench conv: %s\n", e.msg);
        return 2;
    }
    float *x = iabn_aligned_alloc(64, nx * 4), *dx = iabn_aligned_alloc(64, nx * 4);
    float *y = iabn_aligned_alloc(64, ny * 4), *w = iabn_aligned_alloc(64, nw * 4);
    float *dw = iabn_aligned_alloc(64, nw * 4);
    void *scr = iabn_aligned_alloc(64, sb ? sb : 64);
    int rc = 0;
    if (!x || !dx || !y || !w || !dw || !scr) {
        fprintf(stderr, "bench conv: out of memory for %s\n", bc->name);
        rc = 2;
        goto done;
    }
    fill(x, nx, 1); fill(w, nw, 2); fill(y, ny, 3);
    memset(dw, 0, nw * 4);
    double flops = 2.0 * g.n * g.c_out * g.h_out * g.w_out * (double)(g.c_in / g.groups) *
                   g.kh * g.kw;
    for (int pass = 0; pass < 3 && !rc; pass++) {
        double tn, td;
        if (time_pass(cache, &nat[pass], dense ? &dn[pass] : NULL, &g, pass, repeat, x, w, y, dx,
                      dw, scr, sb, &tn, &td)) {
            rc = 2;
            break;
        }
        int chose_dnnl = iabn_conv_use_dnnl(&g, (iabn_conv_pass)pass);
        double gn = flops / tn * 1e-9, gd = dense ? flops / td * 1e-9 : 0;
        double frac = (chose_dnnl ? gd : gn) / peak;
        int ok = frac >= bc->target[pass];
        if (!ok) *missed = 1;
        const char *chosen = chose_dnnl ? "onednn" : path_label(&nat[pass]);
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "case", bc->name);
            cJSON_AddStringToObject(o, "pass", pass_names[pass]);
            cJSON_AddStringToObject(o, "path", chosen);
            cJSON_AddStringToObject(o, "native_path", path_label(&nat[pass]));
            cJSON_AddNumberToObject(o, "native_gflops", gn);
            if (dense) {
                cJSON_AddNumberToObject(o, "onednn_gflops", gd);
                cJSON_AddStringToObject(o, "onednn_impl", impl[pass]);
            }
            cJSON_AddNumberToObject(o, "gflops", chose_dnnl ? gd : gn);
            cJSON_AddNumberToObject(o, "peak_fraction", frac);
            cJSON_AddNumberToObject(o, "target", bc->target[pass]);
            cJSON_AddBoolToObject(o, "ok", ok);
            cJSON_AddItemToArray(list, o);
        } else {
            char dcol[64] = "            -";
            if (dense)
                snprintf(dcol, sizeof dcol, "%7.1f %5.1f%%", gd, 100 * gd / peak);
            printf("%-28s %-11s %-11s %7.1f %5.1f%% %s  %-20s %-7s %4.0f%% %s\n", bc->desc,
                   pass_names[pass], path_label(&nat[pass]), gn, 100 * gn / peak, dcol,
                   dense ? impl[pass] : "-", chosen, 100 * bc->target[pass], ok ? "ok" : "MISS");
        }
    }
done:
    iabn_conv_cache_free(cache);
    iabn_aligned_free(x); iabn_aligned_free(dx); iabn_aligned_free(y);
    iabn_aligned_free(w); iabn_aligned_free(dw); iabn_aligned_free(scr);
    return rc;
}

int iabn_bench_conv(int argc, char **argv)
{
    iabn_args a;
    int prc = iabn_args_parse(&a, IABN_C_BENCH_CONV, argc, argv);
    if (prc) return prc == IABN_ARGS_HELP ? 0 : 2;
    int json = a.v[IABN_O_JSON].set, strict = a.v[IABN_O_STRICT].set;
    int repeat = a.v[IABN_O_REPEAT].set ? (int)a.v[IABN_O_REPEAT].i : 5;
    int threads = a.v[IABN_O_THREADS].set ? (int)a.v[IABN_O_THREADS].i : 0;
    double peak = 235.0;
    const char *only = a.v[IABN_O_CASE].s;
    if (a.v[IABN_O_PEAK].set) {
        const char *v = a.v[IABN_O_PEAK].s;
        if (!strcmp(v, "measure")) peak = -1;
        else if (iabn_parse_float(v, &peak) || !(peak > 0)) {
            fprintf(stderr, "iabn bench conv: --peak %s: a positive GFLOP/s figure or measure\n", v);
            return 2;
        }
    }
    if (only) {
        size_t i = 0;
        while (i < sizeof cases / sizeof cases[0] && strcmp(only, cases[i].name)) i++;
        if (i == sizeof cases / sizeof cases[0]) {
            fprintf(stderr, "iabn bench conv: --case %s: must be one of", only);
            for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
                fprintf(stderr, "%s %s", k ? "," : "", cases[k].name);
            fprintf(stderr, "\n");
            return 2;
        }
    }
    if (threads) iabn_set_num_threads(threads);
    threads = iabn_num_threads();
    if (peak < 0) peak = measure_peak(threads);

    cJSON *list = json ? cJSON_CreateArray() : NULL;
    if (json && !list) return 2;
    if (!json) {
        printf("conv bench: %d threads, peak %.1f GFLOP/s, best of %d (GFLOP/s and %% of peak)\n",
               threads, peak, repeat);
        printf("%-28s %-11s %-11s %7s %6s %7s %6s  %-20s %-7s %5s\n", "case", "pass", "native",
               "GFLOP/s", "%peak", "oneDNN", "%peak", "oneDNN impl", "chosen", "target");
    }
    int missed = 0, rc = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && !rc; i++) {
        if (only && strcmp(only, cases[i].name)) continue;
        rc = bench_one(&cases[i], repeat, peak, threads, json, list, &missed);
    }
    if (json) {
        char *s = cJSON_Print(list);
        if (s) {
            printf("%s\n", s);
            free(s);
        } else {
            rc = 2;
        }
        cJSON_Delete(list);
    }
    if (rc) return rc;
    return strict && missed ? 1 : 0;
}
