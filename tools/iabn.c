/* iabn.c: the `iabn` program: git-style subcommands over libiabn.
 *
 *     iabn help                     list the commands
 *     iabn <command> --help         a command's own usage
 *
 * Each command lives in its own file (cmd_*.c, bench_*.c) and returns a
 * process exit status; only this program (never the library) exits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iabn.h"
#include "iabn_config.h"
#include "tools/commands.h"
#include "tools/options.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    int id;                  /* the option table's command (its summary), or -1 */
    const char *summary;     /* when id < 0                                     */
} command;

static int cmd_bench(int argc, char **argv);
static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);
static int cmd_completion(int argc, char **argv);

static const command commands[] = {
    {"demo", iabn_cmd_demo, IABN_C_DEMO, NULL},
    {"train", iabn_cmd_train, IABN_C_TRAIN, NULL},
    {"eval", iabn_cmd_eval, IABN_C_EVAL, NULL},
    {"segtrain", iabn_cmd_segtrain, IABN_C_SEGTRAIN, NULL},
    {"segeval", iabn_cmd_segeval, IABN_C_SEGEVAL, NULL},
    {"step", iabn_cmd_step, IABN_C_STEP, NULL},
    {"predict", iabn_cmd_predict, IABN_C_PREDICT, NULL},
    {"convert", iabn_cmd_convert, IABN_C_CONVERT, NULL},
    {"export", iabn_cmd_export, IABN_C_EXPORT, NULL},
    {"models", iabn_cmd_models, IABN_C_MODELS, NULL},
    {"mem", iabn_cmd_mem, IABN_C_MEM, NULL},
    {"data", iabn_cmd_data, IABN_C_DATA, NULL},
    {"plot", iabn_cmd_plot, IABN_C_PLOT, NULL},
    {"bench", cmd_bench, -1, "benchmarks: conv, block, step, allreduce"},
    {"completion", cmd_completion, IABN_C_COMPLETION, NULL},
    {"version", cmd_version, -1, "print the version and the backends built in"},
    {"help", cmd_help, -1, "this list"},
};
#define NCOMMANDS (int)(sizeof commands / sizeof commands[0])

static const command benches[] = {
    {"conv", iabn_bench_conv, IABN_C_BENCH_CONV, NULL},
    {"block", iabn_bench_block, IABN_C_BENCH_BLOCK, NULL},
    {"step", iabn_bench_step, IABN_C_BENCH_STEP, NULL},
    {"allreduce", iabn_bench_allreduce, IABN_C_BENCH_ALLREDUCE, NULL},
};
#define NBENCHES (int)(sizeof benches / sizeof benches[0])

static void list(const command *c, int n)
{
    for (int i = 0; i < n; i++)
        printf("  %-10s %s\n", c[i].name,
               c[i].id >= 0 ? iabn_command_get((iabn_cmd_id)c[i].id)->summary : c[i].summary);
}

static int cmd_help(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("usage: iabn <command> [args]   (iabn <command> --help for details)\n\ncommands:\n");
    list(commands, NCOMMANDS);
    printf("\nbenchmarks (iabn bench <name>):\n");
    list(benches, NBENCHES);
    printf("\nenvironment: IABN_PLAN=naive|noinplace  IABN_PLAN_GUARD=<bytes>  IABN_CHECK=1\n");
    return 0;
}

static int cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("iabn %s (%d threads%s)\n", IABN_VERSION, iabn_num_threads(),
           IABN_HAVE_MPI ? ", mpi" : "");
    /* the native conv paths' speed depends on it (docs/CPU.md) */
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("  blas  OpenBLAS, %s kernels%s%s%s; native GEMMs on %s\n", iabn_blas_core(),
           ct ? " (set by OPENBLAS_CORETYPE=" : "", ct ? ct : "", ct ? ")" : "",
           iabn_gemm_engine_name(iabn_gemm_engine()));
    for (int k = 0; iabn_device_kind_name(k); k++) {
        iabn_err why = {0};
        if (iabn_backend_available((iabn_device_kind)k, &why))
            printf("  %-5s available\n", iabn_device_kind_name(k));
        else
            printf("  %-5s not available: %s\n", iabn_device_kind_name(k), why.msg);
    }
    return 0;
}

static int cmd_completion(int argc, char **argv)
{
    iabn_args a;
    int rc = iabn_args_parse(&a, IABN_C_COMPLETION, argc, argv);
    if (rc) return rc == IABN_ARGS_HELP ? 0 : 2;
    if (strcmp(a.pos[0], "bash")) {
        fprintf(stderr, "iabn completion: only bash is generated, not '%s'\n", a.pos[0]);
        return 2;
    }
    iabn_args_completion_bash(stdout);
    return 0;
}

static int cmd_bench(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        printf("usage: iabn bench <name> [--json] [...]\n");
        list(benches, NBENCHES);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 0; i < NBENCHES; i++)
        if (!strcmp(argv[1], benches[i].name)) return benches[i].run(argc - 1, argv + 1);
    fprintf(stderr, "iabn bench: unknown benchmark '%s' (iabn bench --help)\n", argv[1]);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        cmd_help(0, NULL);
        return 2;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h")) return cmd_help(0, NULL);
    if (!strcmp(name, "--version")) return cmd_version(0, NULL);
    for (int i = 0; i < NCOMMANDS; i++)
        if (!strcmp(name, commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "iabn: '%s' is not a command (iabn help)\n", name);
    return 2;
}
