/* bench_block.c: `iabn bench block`, the paper's Fig. 4 on this machine:
 * forward + backward time of one BN+ACT+CONV block at ResNeXt-101's four
 * module shapes (grouped 3x3 conv, 64 groups; --plain: groups 1), batch 8,
 * for every BN mode; median over repeats (the modes interleaved), ratio to standard, and the
 * bytes the plan keeps for the backward.  Only the block's own nodes are timed (the
 * producer of its input and the loss are excluded), from the executor's
 * per-node profile. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "iabn.h"
#include "tools/commands.h"
#include "tools/options.h"

int iabn_bench_block(int argc, char **argv)
{
    iabn_args a;
    int prc = iabn_args_parse(&a, IABN_C_BENCH_BLOCK, argc, argv);
    if (prc) return prc == IABN_ARGS_HELP ? 0 : 2;
    int plain = a.v[IABN_O_PLAIN].set, json = a.v[IABN_O_JSON].set;
    int batch = a.v[IABN_O_BATCH].set ? (int)a.v[IABN_O_BATCH].i : 8;
    int repeat = a.v[IABN_O_REPEAT].set ? (int)a.v[IABN_O_REPEAT].i : 7;
    if (a.v[IABN_O_THREADS].set) iabn_set_num_threads((int)a.v[IABN_O_THREADS].i);
    cJSON *out = cJSON_CreateArray();
    if (!json)
        printf("BN+ACT+CONV fwd+bwd, %s 3x3 conv, batch %d, %d threads, median of %d\n"
               "%-6s %-16s %10s %8s %12s %8s\n",
               plain ? "dense" : "grouped (64)", batch, iabn_num_threads(), repeat, "shape", "mode",
               "ms", "ratio", "kept MiB", "buffers");
    int all_ok = 1;
    for (int si = 0; si < IABN_FIG4_SHAPES; si++) {
        iabn_blockbench_result r[IABN_FIG4_MODES];
        iabn_err e = {0};
        const char *shape = iabn_fig4_shape_name(si);
        int ok = 0;
        if (iabn_fig4_run(si, batch, plain ? 1 : 64, repeat, r, &ok, &e)) {
            fprintf(stderr, "iabn bench block: %s: %s\n", shape, e.msg);
            cJSON_Delete(out);
            return 1;
        }
        for (int m = 0; m < IABN_FIG4_MODES; m++) {
            const char *mode = iabn_bn_mode_name(iabn_fig4_mode(m));
            if (json) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "shape", shape);
                cJSON_AddStringToObject(o, "mode", mode);
                cJSON_AddNumberToObject(o, "ms", r[m].ms);
                cJSON_AddNumberToObject(o, "ratio", r[m].ratio);
                cJSON_AddNumberToObject(o, "kept_bytes", (double)r[m].kept);
                cJSON_AddNumberToObject(o, "kept_buffers", r[m].buffers);
                cJSON_AddItemToArray(out, o);
            } else {
                printf("%-6s %-16s %10.2f %8.3f %12.2f %8d\n", shape, mode, r[m].ms, r[m].ratio,
                       (double)r[m].kept / 1048576.0, r[m].buffers);
            }
        }
        all_ok &= ok;
        if (!json)
            printf("%-6s target inplace_abn_ii <= 1.05x standard, checkpoint slower: %s\n", shape,
                   ok ? "met" : "MISSED");
    }
    if (json) {
        char *s = cJSON_Print(out);
        printf("%s\n", s);
        free(s);
    } else {
        printf("all targets %s\n", all_ok ? "met" : "not met");
    }
    cJSON_Delete(out);
    return 0;
}
