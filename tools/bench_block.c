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

typedef struct shape {
    const char *name;
    int c, hw;
} shape;

static const shape shapes[] = {{"mod2", 128, 56}, {"mod3", 256, 28}, {"mod4", 512, 14},
                               {"mod5", 1024, 7}};

static const iabn_bn_mode modes[] = {IABN_BN_STANDARD, IABN_BN_CHECKPOINT, IABN_BN_CHECKPOINT_OPT,
                                     IABN_BN_INPLACE, IABN_BN_INPLACE_II};
#define NMODES (int)(sizeof modes / sizeof modes[0])

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct result {
    double ms;
    size_t kept;
    int buffers;
} result;

/* One mode's graph for one shape, planned and bound. */
typedef struct bench_graph {
    iabn_session ss;
    double *t;
} bench_graph;

static void bench_free(bench_graph *b)
{
    iabn_session_free(&b->ss);
    free(b->t);
    memset(b, 0, sizeof *b);
}

typedef struct block_spec {
    const shape *sh;
    iabn_norm_act_cfg cfg;
    int groups;
} block_spec;

/* The session's graph builder: the block under test, fed by a producer. */
static int build_block(iabn_graph *g, int x, void *user, int *out, iabn_err *e)
{
    const block_spec *b = user;
    /* the block's input must be an activation the in-place modes may
     * overwrite, as in a network: a cheap depthwise conv produces it */
    int act = iabn_conv2d(g, "pre", x, b->sh->c, 1, 1, 0, 1, b->sh->c, 0);
    iabn_graph_begin_block(g, "block");
    int z = iabn_norm_act(g, "bn", act, &b->cfg);
    *out = iabn_conv2d(g, "conv", z, b->sh->c, 3, 1, 1, 1, b->groups, 0);
    return 0;
}

static int bench_setup(const shape *sh, iabn_bn_mode mode, int batch, int groups, int repeat,
                       bench_graph *b, result *r, iabn_err *e)
{
    memset(b, 0, sizeof *b);
    block_spec spec = {sh, iabn_norm_act_defaults(mode), groups};
    iabn_session_cfg c;
    iabn_session_cfg_defaults(&c);
    c.build = build_block;
    c.build_user = &spec;
    c.batch = batch;
    c.channels = sh->c;
    c.height = c.width = sh->hw;
    c.labels = IABN_LABELS_PER_PIXEL;
    int rc = iabn_session_build(&c, &b->ss, e);
    if (!rc) rc = iabn_init_params(b->ss.store, IABN_INIT_XAVIER_NORMAL, spec.cfg.act, 1, e);
    if (rc) return rc;
    float *xp = iabn_exec_ptr(b->ss.exec, b->ss.input);
    for (size_t i = 0; i < (size_t)batch * sh->c * sh->hw * sh->hw; i++)
        xp[i] = iabn_rng_normal(7, 0, i);
    int32_t *lp = iabn_exec_ptr(b->ss.exec, b->ss.labels);
    for (int i = 0; i < batch * sh->hw * sh->hw; i++) lp[i] = i % sh->c;
    iabn_exec_profile(b->ss.exec, 1);
    b->t = calloc((size_t)repeat, sizeof *b->t);
    iabn_block_mem rows[2];
    iabn_plan_blocks(b->ss.graph, b->ss.plan, rows);
    r->kept = rows[0].kept_bytes; /* block 0: the BN+ACT+CONV block */
    r->buffers = rows[0].kept_buffers;
    return b->t ? iabn_session_run(&b->ss, e) /* warm-up */ : IABN_ENOMEM;
}

/* One timed run: the seconds of the block's own nodes. */
static int bench_run(bench_graph *b, double *sec, iabn_err *e)
{
    int rc = iabn_session_run(&b->ss, e);
    if (rc) return rc;
    const iabn_graph *g = b->ss.graph;
    const double *st = iabn_exec_step_times(b->ss.exec);
    const int *sched = iabn_graph_schedule(g);
    double sum = 0;
    for (int i = 0; i < iabn_graph_schedule_len(g); i++)
        if (iabn_graph_n(g, sched[i])->block == 0) sum += st[i];
    *sec = sum;
    return 0;
}

static void usage(void)
{
    printf("usage: iabn bench block [--plain] [--batch N] [--repeat N] [--threads T] [--json]\n"
           "  BN+ACT+CONV forward+backward at ResNeXt-101's module shapes, every BN mode.\n"
           "  --plain: dense 3x3 conv (groups 1) instead of 64 groups.  Target: inplace_abn_ii\n"
           "  <= 1.05x standard; checkpointing slower than the in-place modes.\n");
}

int iabn_bench_block(int argc, char **argv)
{
    int plain = 0, batch = 8, repeat = 7, json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--plain")) plain = 1;
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) iabn_set_num_threads(atoi(argv[++i]));
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "iabn bench block: unknown argument '%s'\n", argv[i]);
            usage();
            return 2;
        }
    }
    if (batch < 1 || repeat < 1) {
        fprintf(stderr, "iabn bench block: --batch and --repeat must be >= 1\n");
        return 2;
    }
    cJSON *out = cJSON_CreateArray();
    if (!json)
        printf("BN+ACT+CONV fwd+bwd, %s 3x3 conv, batch %d, %d threads, median of %d\n"
               "%-6s %-16s %10s %8s %12s %8s\n",
               plain ? "dense" : "grouped (64)", batch, iabn_num_threads(), repeat, "shape", "mode",
               "ms", "ratio", "kept MiB", "buffers");
    int all_ok = 1;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        /* every mode's graph first, then the repeats round-robin over the
         * modes, so that a slow spell of the machine hits them all alike */
        bench_graph bg[NMODES];
        result r[NMODES];
        memset(bg, 0, sizeof bg);
        memset(r, 0, sizeof r);
        iabn_err e = {0};
        int rc = 0;
        for (int m = 0; m < NMODES && !rc; m++)
            rc = bench_setup(&shapes[si], modes[m], batch, plain ? 1 : 64, repeat, &bg[m], &r[m], &e);
        for (int k = 0; k < repeat && !rc; k++)
            for (int m = 0; m < NMODES && !rc; m++) rc = bench_run(&bg[m], &bg[m].t[k], &e);
        if (rc) {
            fprintf(stderr, "iabn bench block: %s: %s\n", shapes[si].name, e.msg);
            for (int m = 0; m < NMODES; m++) bench_free(&bg[m]);
            cJSON_Delete(out);
            return 1;
        }
        double std_ms = 0, ckpt_ms = 0, inpl_ms = 0;
        for (int m = 0; m < NMODES; m++) {
            qsort(bg[m].t, (size_t)repeat, sizeof *bg[m].t, cmp_d);
            r[m].ms = 1e3 * bg[m].t[repeat / 2];
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
            bench_free(&bg[m]);
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
