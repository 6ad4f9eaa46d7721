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

typedef struct shape {
    const char *name;
    int c, hw;
} shape;

static const shape shapes[] = {{"mod2", 128, 56}, {"mod3", 256, 28}, {"mod4", 512, 14},
                               {"mod5", 1024, 7}};

static const iabn_bn_mode modes[] = {IABN_BN_STANDARD, IABN_BN_CHECKPOINT, IABN_BN_CHECKPOINT_OPT,
                                     IABN_BN_INPLACE, IABN_BN_INPLACE_II};
#define NMODES (int)(sizeof modes / sizeof modes[0])

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
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        iabn_blockbench_result r[NMODES];
        iabn_err e = {0};
        if (iabn_blockbench_run(shapes[si].c, shapes[si].hw, batch, plain ? 1 : 64, repeat, modes,
                                NMODES, r, &e)) {
            fprintf(stderr, "iabn bench block: %s: %s\n", shapes[si].name, e.msg);
            cJSON_Delete(out);
            return 1;
        }
        double std_ms = 0, ckpt_ms = 0, inpl_ms = 0;
        for (int m = 0; m < NMODES; m++) {
            if (modes[m] == IABN_BN_STANDARD) std_ms = r[m].ms;
            if (modes[m] == IABN_BN_CHECKPOINT) ckpt_ms = r[m].ms;
            if (modes[m] == IABN_BN_INPLACE_II) inpl_ms = r[m].ms;
        }
        for (int m = 0; m < NMODES; m++) {
            double ratio = r[m].ms / std_ms;
            if (json) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "shape", shapes[si].name);
                cJSON_AddStringToObject(o, "mode", iabn_bn_mode_name(modes[m]));
                cJSON_AddNumberToObject(o, "ms", r[m].ms);
                cJSON_AddNumberToObject(o, "ratio", ratio);
                cJSON_AddNumberToObject(o, "kept_bytes", (double)r[m].kept);
                cJSON_AddNumberToObject(o, "kept_buffers", r[m].buffers);
                cJSON_AddItemToArray(out, o);
            } else {
                printf("%-6s %-16s %10.2f %8.3f %12.2f %8d\n", shapes[si].name,
                       iabn_bn_mode_name(modes[m]), r[m].ms, ratio, (double)r[m].kept / 1048576.0,
                       r[m].buffers);
            }
        }
        int ok = inpl_ms <= 1.05 * std_ms && ckpt_ms > inpl_ms;
        all_ok &= ok;
        if (!json)
            printf("%-6s target inplace_abn_ii <= 1.05x standard, checkpoint slower: %s\n",
                   shapes[si].name, ok ? "met" : "MISSED");
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
