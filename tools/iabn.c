/* iabn.c: the `iabn` program: git-style subcommands over libiabn.
 *
 *     iabn help                     list the commands
 *     iabn <command> --help         a command's own usage
 *
 * Each command lives in its own file (cmd_*.c, bench_*.c) and returns a
 * process exit status; only this program (never the library) exits. */
#include <stdio.h>
#include <string.h>

#include "iabn.h"
#include "iabn_config.h"
#include "tools/commands.h"
#include "tools/options.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static int cmd_bench(int argc, char **argv);
static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);
static int cmd_completion(int argc, char **argv);

static const command commands[] = {
    {"demo", iabn_cmd_demo, "train a narrow ResNeXt on generated data for a minute, then the memory report"},
    {"train", iabn_cmd_train, "train a classifier on an ImageNet-style folder"},
    {"eval", iabn_cmd_eval, "top-1 / top-5 of a checkpoint on a validation folder"},
    {"segtrain", iabn_cmd_segtrain, "fine-tune a segmentation network (Cityscapes, Vistas)"},
    {"segeval", iabn_cmd_segeval, "mean IoU of a segmentation checkpoint"},
    {"step", iabn_cmd_step, "one forward/backward of a model on safetensors inputs (PyTorch parity)"},
    {"predict", iabn_cmd_predict, "segmentation label maps (PNG) for a folder of images"},
    {"convert", iabn_cmd_convert, "reference PyTorch checkpoints <-> iabn safetensors"},
    {"export", iabn_cmd_export, "a checkpoint for inference: plain or folded BN, safetensors or ONNX"},
    {"models", iabn_cmd_models, "every model: parameters, input, reference configs, memory"},
    {"mem", iabn_cmd_mem, "plan a training step and report its memory, mode by mode"},
    {"data", iabn_cmd_data, "data tools: bench (decode + augment rate), synth, info"},
    {"plot", iabn_cmd_plot, "loss, top-1 / mIoU and learning rate of runs as one SVG"},
    {"bench", cmd_bench, "benchmarks: conv, block, step, allreduce"},
    {"completion", cmd_completion, "bash completion script (source <(iabn completion bash))"},
    {"version", cmd_version, "print the version and the backends built in"},
    {"help", cmd_help, "this list"},
};
#define NCOMMANDS (int)(sizeof commands / sizeof commands[0])

static const command benches[] = {
    {"conv", iabn_bench_conv, "convolution GFLOP/s against the machine's peak"},
    {"block", iabn_bench_block, "BN+ACT+CONV blocks in every BN mode (paper Fig. 4)"},
    {"step", iabn_bench_step, "one training step of a model, median time"},
    {"allreduce", iabn_bench_allreduce, "all-reduce bandwidth per message size (under mpirun)"},
};
#define NBENCHES (int)(sizeof benches / sizeof benches[0])

static int cmd_help(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("usage: iabn <command> [args]   (iabn <command> --help for details)\n\ncommands:\n");
    for (int i = 0; i < NCOMMANDS; i++) printf("  %-8s %s\n", commands[i].name, commands[i].summary);
    printf("\nbenchmarks (iabn bench <name>):\n");
    for (int i = 0; i < NBENCHES; i++) printf("  %-8s %s\n", benches[i].name, benches[i].summary);
    printf("\nenvironment: IABN_PLAN=naive|noinplace  IABN_PLAN_GUARD=<bytes>  IABN_CHECK=1\n");
    return 0;
}

static int cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("iabn %s (%d threads%s)\n", IABN_VERSION, iabn_num_threads(),
           IABN_HAVE_MPI ? ", mpi" : "");
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
        for (int i = 0; i < NBENCHES; i++) printf("  %-8s %s\n", benches[i].name, benches[i].summary);
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
