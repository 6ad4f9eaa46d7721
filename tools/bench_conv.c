/* bench_conv.c: `iabn bench conv`, the CPU convolution throughput of the four
 * layers docs/TARGETS.md names (dense 3x3, ResNeXt's grouped 3x3, a 1x1, DeepLab's
 * dilated ASPP 3x3), per pass, against the targets there.
 *
 * Rate = nominal FLOPs (2*N*Cout*Hout*Wout*Cin/groups*kh*kw, padding taps
 * included, as docs/TARGETS.md counts it) over the median time of --repeat
 * calls, after one warm-up call.  The default peak (235 GFLOP/s) is the FP32
 * peak of both cores of the reference machine; pass --peak for another, or
 * --peak measure to time an FMA loop on this one.
 */
#include "bench.h"

#include <cjson/cJSON.h>
#if defined(__AVX2__) && defined(__FMA__)
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
    {"dense3x3", "3x3 64->64 56x56 b8", 8, 64, 56, 56, 64, 3, 1, 1, 1, 1, {0.70, 0.70, 0.70}},
    {"grouped3x3", "grp3x3 256->256 g64 56x56 b8", 8, 256, 56, 56, 256, 3, 1, 1, 1, 64,
     {0.50, 0.50, 0.30}},
    {"conv1x1", "1x1 256->1024 14x14 b8", 8, 256, 14, 14, 1024, 1, 1, 0, 1, 1, {0.70, 0.70, 0.70}},
    {"dilated3x3", "3x3 d12 2048->256 33x33 b2", 2, 2048, 33, 33, 256, 3, 1, 12, 12, 1,
     {0.70, 0.70, 0.70}},
};

static const char *pass_names[3] = {"fwd", "bwd-data", "bwd-weights"};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* FP32 FMA throughput of `threads` threads: 12 independent 8-wide FMA
 * chains per thread (enough to cover the FMA latency), best of several
 * windows.  For machines other than the reference one (--peak measure).
 * Without FMA in the build it times mul+add pairs, counted as 2 FLOPs. */
static double measure_peak(int threads)
{
    double total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
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

static void run_pass(const iabn_conv_geom *g, int pass, float *x, float *w, float *y, float *dx,
                     float *dw, void *scr)
{
    switch (pass) {
    case 0: iabn_conv_fwd(g, x, w, NULL, y, scr); break;
    case 1: iabn_conv_bwd_data(g, y, w, dx, scr); break;
    default: iabn_conv_bwd_filter(g, x, y, dw, NULL, scr); break;
    }
}

static const char *path_label(const iabn_conv_geom *g, int pass, int threads)
{
    iabn_conv_plan p;
    iabn_conv_plan_make(g, (iabn_conv_pass)pass, threads, &p);
    switch (p.path) {
    case IABN_CONV_PATH_DIRECT: return "direct";
    case IABN_CONV_PATH_TAPS: return "taps";
    default: return p.no_col ? "gemm" : p.flip ? "im2col-flip" : "im2col";
    }
}

/* Measures the three passes of one case; returns 0, or 2 when out of memory. */
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
    size_t sb = 0;
    for (int p = 0; p < 3; p++) {
        size_t s = iabn_conv_scratch_bytes(&g, (iabn_conv_pass)p, threads);
        if (s > sb) sb = s;
    }
    float *x = iabn_aligned_alloc(64, nx * 4), *dx = iabn_aligned_alloc(64, nx * 4);
    float *y = iabn_aligned_alloc(64, ny * 4), *w = iabn_aligned_alloc(64, nw * 4);
    float *dw = iabn_aligned_alloc(64, nw * 4);
    void *scr = iabn_aligned_alloc(64, sb ? sb : 64);
    double *times = malloc(sizeof(double) * (size_t)repeat);
    int rc = 0;
    if (!x || !dx || !y || !w || !dw || !scr || !times) {
        fprintf(stderr, "bench conv: out of memory for %s\n", bc->name);
        rc = 2;
        goto done;
    }
    fill(x, nx, 1); fill(w, nw, 2); fill(y, ny, 3);
    memset(dw, 0, nw * 4);
    double flops = 2.0 * g.n * g.c_out * g.h_out * g.w_out * (double)(g.c_in / g.groups) *
                   g.kh * g.kw;
    for (int pass = 0; pass < 3; pass++) {
        run_pass(&g, pass, x, w, y, dx, dw, scr);
        for (int r = 0; r < repeat; r++) {
            double t0 = iabn_now();
            run_pass(&g, pass, x, w, y, dx, dw, scr);
            times[r] = iabn_now() - t0;
        }
        qsort(times, (size_t)repeat, sizeof(double), cmp_double);
        double med = repeat % 2 ? times[repeat / 2]
                                : 0.5 * (times[repeat / 2 - 1] + times[repeat / 2]);
        double gf = flops / med * 1e-9, frac = gf / peak;
        int ok = frac >= bc->target[pass];
        if (!ok) *missed = 1;
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "case", bc->name);
            cJSON_AddStringToObject(o, "pass", pass_names[pass]);
            cJSON_AddNumberToObject(o, "gflops", gf);
            cJSON_AddNumberToObject(o, "peak_fraction", frac);
            cJSON_AddNumberToObject(o, "target", bc->target[pass]);
            cJSON_AddBoolToObject(o, "ok", ok);
            cJSON_AddItemToArray(list, o);
        } else {
            printf("%-30s %-12s %-12s %9.2f %8.1f %7.1f%% %6.0f%%  %s\n", bc->desc,
                   pass_names[pass], path_label(&g, pass, threads), med * 1e3, gf, 100 * frac,
                   100 * bc->target[pass], ok ? "ok" : "MISS");
        }
    }
done:
    iabn_aligned_free(x); iabn_aligned_free(dx); iabn_aligned_free(y);
    iabn_aligned_free(w); iabn_aligned_free(dw); iabn_aligned_free(scr);
    free(times);
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
        printf("conv bench: %d threads, peak %.1f GFLOP/s, median of %d\n", threads, peak, repeat);
        printf("%-30s %-12s %-12s %9s %8s %8s %7s\n", "case", "pass", "path", "ms", "GFLOP/s",
               "%peak", "target");
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
