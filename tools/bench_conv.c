/* bench_conv.c: `iabn bench conv`, the CPU convolution throughput of the four
 * layers docs/TARGETS.md names, per pass, on the native path (NCHW), oneDNN
 * on NCHW operands, and the path blocked operands (the CPU's nChw16c or
 * nChw8c, named in the chosen column) take where the conv votes for them
 * (oneDNN's, or the blocked grouped kernels), against the targets
 * there (measured by the library: tensor/cpu/conv_bench.h).
 * Below the table, where the graph fuses a residual add into the forward
 * (layers.h iabn_conv2d_add), the conv then the add against the fused conv
 * (the sum over the shortcut, and the sum apart from it);
 * then, for the 1x1 convs on oneDNN, the copy of their weights into its
 * blocks by oneDNN's reorder and by the map's copy the conv path runs.
 * The wino column times the conv with --winograd's flag where that runs
 * Winograd kernels (oneDNN's on AVX-512, iabn's F(2x2, 3x3) on nChw8c
 * elsewhere), counting the direct convolution's FLOPs (so it
 * can pass 100% of peak); the chosen path stays the default's.
 * The default peak (235 GFLOP/s) is the FP32 peak of both cores of the
 * reference machine; pass --peak for another, or --peak measure to time an
 * FMA loop on this one beside each pass's calls (the peak column: a shared
 * host's speed drifts between cases).  --cold times each call after a
 * sweep of the caches (operands and weights from memory, as the weights
 * come in a training step); by default the operands are warm. */
#include "bench.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/cpu/conv_bench.h"
#include "tools/cli.h"
#include "tools/options.h"

static void print_json(const iabn_convbench_row *rows, int n)
{
    cJSON *list = cJSON_CreateArray();
    for (int i = 0; i < n && list; i++) {
        const iabn_convbench_row *r = &rows[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "case", r->case_name);
        cJSON_AddStringToObject(o, "pass", r->pass);
        cJSON_AddStringToObject(o, "path", r->path);
        cJSON_AddStringToObject(o, "native_path", r->native_path);
        cJSON_AddNumberToObject(o, "native_gflops", r->native_gflops);
        if (r->onednn) {
            cJSON_AddNumberToObject(o, "onednn_gflops", r->onednn_gflops);
            cJSON_AddStringToObject(o, "onednn_impl", r->onednn_impl);
        }
        if (r->blocked) {
            cJSON_AddNumberToObject(o, "blocked_gflops", r->blocked_gflops);
            cJSON_AddStringToObject(o, "blocked_layout", r->blocked_layout);
        }
        if (r->wino) cJSON_AddNumberToObject(o, "winograd_gflops", r->wino_gflops);
        cJSON_AddNumberToObject(o, "gflops", r->gflops);
        cJSON_AddNumberToObject(o, "peak_gflops", r->peak);
        cJSON_AddNumberToObject(o, "peak_fraction", r->peak_fraction);
        cJSON_AddNumberToObject(o, "target", r->target);
        cJSON_AddBoolToObject(o, "ok", r->ok);
        if (r->residual) { /* [conv then add, fused over r, fused apart], ms */
            cJSON *ms = cJSON_CreateDoubleArray(r->residual_ms, 3);
            if (ms) cJSON_AddItemToObject(o, "residual_add_ms", ms);
            cJSON_AddBoolToObject(o, "residual_binary_post_op", r->residual_binary);
        }
        if (r->wcopy) { /* [oneDNN's reorder, the map's copy], ms */
            cJSON *ms = cJSON_CreateDoubleArray(r->wcopy_ms, 2);
            if (ms) cJSON_AddItemToObject(o, "weight_copy_ms", ms);
        }
        cJSON_AddItemToArray(list, o);
    }
    char *s = list ? cJSON_Print(list) : NULL;
    if (s) printf("%s\n", s);
    free(s);
    cJSON_Delete(list);
}

int iabn_bench_conv(int argc, char **argv)
{
    iabn_args a;
    int prc = iabn_args_parse(&a, IABN_C_BENCH_CONV, argc, argv);
    if (prc) return prc == IABN_ARGS_HELP ? 0 : 2;
    int json = a.v[IABN_O_JSON].set, strict = a.v[IABN_O_STRICT].set;
    int cold = a.v[IABN_O_COLD].set;
    int repeat = a.v[IABN_O_REPEAT].set ? (int)a.v[IABN_O_REPEAT].i : 5;
    int threads = a.v[IABN_O_THREADS].set ? (int)a.v[IABN_O_THREADS].i : 0;
    double peak = 235.0;
    if (a.v[IABN_O_PEAK].set) {
        const char *v = a.v[IABN_O_PEAK].s;
        if (!strcmp(v, "measure")) peak = 0; /* beside each pass */
        else if (iabn_parse_float(v, &peak) || !(peak > 0)) {
            fprintf(stderr, "iabn bench conv: --peak %s: a positive GFLOP/s figure or measure\n", v);
            return 2;
        }
    }
    if (threads) iabn_set_num_threads(threads);
    threads = iabn_num_threads();
    iabn_convbench_row rows[IABN_CONVBENCH_ROWS];
    int n = 0;
    iabn_err e = {0};
    if (iabn_convbench_run(a.v[IABN_O_CASE].s, repeat, peak, threads, cold, rows,
                           IABN_CONVBENCH_ROWS, &n, &e)) {
        fprintf(stderr, "iabn bench conv: %s\n", e.msg);
        return 2;
    }
    int missed = 0;
    for (int i = 0; i < n; i++) missed |= !rows[i].ok;
    if (json) {
        print_json(rows, n);
    } else {
        char pdesc[64];
        if (peak > 0) snprintf(pdesc, sizeof pdesc, "peak %.1f GFLOP/s", peak);
        else snprintf(pdesc, sizeof pdesc, "peak measured beside each pass");
        printf("conv bench: %d threads, %s, best of %d%s (GFLOP/s and %% of peak); "
               "native GEMMs on %s (OpenBLAS runs its %s kernels)\n",
               threads, pdesc, repeat, cold ? ", each call after a sweep of the caches" : "",
               iabn_gemm_engine_name(iabn_gemm_engine()),
               iabn_blas_core());
        printf("%-28s %-11s %6s %-11s %7s %6s %7s %6s %7s %6s %7s %6s  %-20s %-7s %5s\n", "case",
               "pass", "peak", "native", "GFLOP/s", "%peak", "oneDNN", "%peak", "blocked",
               "%peak", "wino", "%peak", "oneDNN impl", "chosen", "target");
        for (int i = 0; i < n; i++) {
            const iabn_convbench_row *r = &rows[i];
            double pk = r->peak;
            char dcol[64] = "      -      -", bcol[64] = "      -      -";
            char wcol[64] = "      -      -";
            if (r->onednn)
                snprintf(dcol, sizeof dcol, "%7.1f %5.1f%%", r->onednn_gflops,
                         100 * r->onednn_gflops / pk);
            if (r->blocked)
                snprintf(bcol, sizeof bcol, "%7.1f %5.1f%%", r->blocked_gflops,
                         100 * r->blocked_gflops / pk);
            if (r->wino)
                snprintf(wcol, sizeof wcol, "%7.1f %5.1f%%", r->wino_gflops,
                         100 * r->wino_gflops / pk);
            char tcol[16] = "    -";
            if (r->target > 0)
                snprintf(tcol, sizeof tcol, "%4.0f%% %s", 100 * r->target, r->ok ? "ok" : "MISS");
            printf("%-28s %-11s %6.0f %-11s %7.1f %5.1f%% %s %s %s  %-20s %-7s %s\n", r->desc,
                   r->pass, pk, r->native_path, r->native_gflops, 100 * r->native_gflops / pk, dcol,
                   bcol, wcol, r->onednn ? r->onednn_impl : "-",
                   r->blocked && strcmp(r->path, "onednn") == 0 ? r->blocked_layout : r->path,
                   tcol);
        }
        int header = 0;
        for (int i = 0; i < n; i++) {
            const iabn_convbench_row *r = &rows[i];
            if (!r->residual) continue;
            if (!header++)
                printf("\nresidual add after the forward (conv2d_add), best ms: the conv and "
                       "then the add; fused over the shortcut (oneDNN's sum post-op); fused "
                       "into a sum apart (standard BN: its binary post-op, or where the "
                       "kernel would apply that one value at a time, a copy of the shortcut "
                       "and the sum post-op)\n");
            printf("%-28s %8.3f %8.3f %.2fx %8.3f %.2fx %s\n", r->desc, r->residual_ms[0],
                   r->residual_ms[1], r->residual_ms[0] / r->residual_ms[1], r->residual_ms[2],
                   r->residual_ms[0] / r->residual_ms[2], r->residual_binary ? "binary" : "copy");
        }
        header = 0;
        for (int i = 0; i < n; i++) {
            const iabn_convbench_row *r = &rows[i];
            if (!r->wcopy) continue;
            if (!header++)
                printf("\nthe weights into oneDNN's 16x16 blocks (1x1 convs), from memory, best "
                       "ms: oneDNN's reorder, and the copy the conv runs (cpu/blocked_map.c)\n");
            printf("%-28s %-11s %8.3f %8.3f   %.2fx\n", r->desc, r->pass, r->wcopy_ms[0],
                   r->wcopy_ms[1], r->wcopy_ms[0] / r->wcopy_ms[1]);
        }
    }
    return strict && missed ? 1 : 0;
}
