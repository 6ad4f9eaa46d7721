/* cmd_demo.c: `iabn demo`, the main job on a small built-in default: it
 * generates a learnable image-folder data set (classes told apart by colour
 * and stripe orientation), trains a narrow pre-activation ResNeXt with
 * in-place ABN on it for about a minute, reports the validation accuracy
 * against chance, and prints the model's memory report, standard BN versus
 * in-place ABN. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tools/cli.h"
#include "tools/commands.h"
#include "models/train/trainer.h"

#define DEMO_ARCH "resnext_tiny"
#define DEMO_CLASSES 10
#define DEMO_SIZE 32

static void usage(void)
{
    printf("usage: iabn demo [--dir DIR] [--seconds 60] [--bn MODE] [--threads T]\n"
           "  Generates DIR/data (once), trains %s on it for about --seconds, evaluates,\n"
           "  and prints the memory report (standard vs in-place ABN).  Outputs in DIR/run.\n",
           DEMO_ARCH);
}

int iabn_cmd_demo(int argc, char **argv)
{
    const char *dir = "iabn-demo", *bn = "inplace_abn_ii";
    double seconds = 60;
    int threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        double f;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        if (!(v = iabn_flag_value(argc, argv, &i, "demo"))) return 2;
        if (!strcmp(a, "--dir")) dir = v;
        else if (!strcmp(a, "--bn")) bn = v;
        else if (!strcmp(a, "--seconds") && !iabn_parse_float(v, &f) && f > 0) seconds = f;
        else if (!strcmp(a, "--threads") && !iabn_parse_float(v, &f) && f >= 1) threads = (int)f;
        else { fprintf(stderr, "iabn demo: bad argument %s %s\n", a, v); return 2; }
    }
    char data[1024], out[1024], probe[1100];
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(out, sizeof out, "%s/run", dir);
    snprintf(probe, sizeof probe, "%s/val", data);
    iabn_err e = {0};
    struct stat st;
    mkdir(dir, 0777);
    if (stat(probe, &st) != 0) {
        printf("generating %d classes of %dx%d images in %s ...\n", DEMO_CLASSES, DEMO_SIZE,
               DEMO_SIZE, data);
        fflush(stdout);
        if (iabn_data_make_synthetic_folder(data, DEMO_CLASSES, 120, 30, DEMO_SIZE, 7, &e)) {
            fprintf(stderr, "iabn demo: %s\n", e.msg);
            return 1;
        }
    }
    iabn_config cfg;
    iabn_config_defaults(&cfg);
    snprintf(cfg.arch, sizeof cfg.arch, "%s", DEMO_ARCH);
    cfg.act.kind = IABN_ACT_LEAKY_RELU;
    cfg.act.param = iabn_act_default_param(cfg.act.kind);
    cfg.input_3x3 = 1;
    iabn_err pe = {0};
    if (iabn_bn_mode_parse(bn, &cfg.bn_mode, &pe)) {
        fprintf(stderr, "iabn demo: --bn: %s\n", pe.msg);
        return 2;
    }
    cfg.batch_size = 32;
    cfg.learning_rate = 0.05f;
    cfg.nesterov = 1;
    cfg.clip = 0;
    cfg.schedule.kind = IABN_SCHED_CONSTANT;
    cfg.schedule.epochs = 100; /* the time limit ends the run */
    cfg.crop_train = cfg.crop_val = DEMO_SIZE;
    cfg.scale_train = -1;
    cfg.scale_val = DEMO_SIZE;
    iabn_train_opts o;
    iabn_trainer_opts_defaults(&o);
    o.log = iabn_cli_log;
    o.config = &cfg;
    o.data_dir = data;
    o.output_dir = out;
    o.time_limit = seconds;
    o.print_freq = 20;
    o.threads = threads;
    o.stop = iabn_cli_stop_on_signals();
    iabn_train_result res;
    if (iabn_trainer_run(&o, &res, &e)) {
        fprintf(stderr, "iabn demo: %s\n", e.msg);
        return 1;
    }
    printf("\ndemo: %d epochs, %lld steps; validation top-1 %.1f%% (chance %.1f%%), best %.1f%%\n",
           res.epochs_done, res.steps_done, res.last_metric, 100.0 / DEMO_CLASSES, res.best_metric);
    printf("      checkpoints, metrics.jsonl and TensorBoard events in %s\n\n", out);
    fflush(stdout);
    char batch[16], size[16];
    snprintf(batch, sizeof batch, "%d", cfg.batch_size);
    snprintf(size, sizeof size, "%d", DEMO_SIZE);
    char *margv[] = {"mem", DEMO_ARCH, "--batch", batch, "--size", size, "--classes", "10",
                     "--bn", "standard,checkpoint,inplace_abn,inplace_abn_ii", NULL};
    return iabn_cmd_mem(10, margv);
}
