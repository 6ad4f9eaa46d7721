/* cmd_demo.c: `iabn demo`, the main job on a small built-in default: it
 * generates an image-folder data set that takes learning (12 classes of
 * shapes with random colours, overlapping distractors, pixel and label
 * noise), trains a narrow pre-activation ResNeXt with in-place ABN on it for
 * about a minute, reports the validation accuracy against chance, prints the
 * model's memory report, standard BN versus in-place ABN, and ends with the
 * paths of the learning curves and the memory plot. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tools/cli.h"
#include "tools/commands.h"
#include "models/train/trainer.h"
#include "tools/options.h"
#include "tools/progress.h"

#define DEMO_ARCH "resnext_tiny"
#define DEMO_CLASSES 12
#define DEMO_SIZE 32
#define DEMO_LABEL_NOISE 0.08

int iabn_cmd_demo(int argc, char **argv)
{
    iabn_args a;
    int prc = iabn_args_parse(&a, IABN_C_DEMO, argc, argv);
    if (prc) return prc == IABN_ARGS_HELP ? 0 : 2;
    const char *dir = a.v[IABN_O_DIR].set ? a.v[IABN_O_DIR].s : "iabn-demo";
    const char *bn = a.v[IABN_O_BN].set ? a.v[IABN_O_BN].s : "inplace_abn_ii";
    double seconds = a.v[IABN_O_TIME_LIMIT].set ? a.v[IABN_O_TIME_LIMIT].f : 60;
    int threads = a.v[IABN_O_THREADS].set ? (int)a.v[IABN_O_THREADS].i : 0;
    char data[1024], out[1024], probe[1100];
    snprintf(data, sizeof data, "%s/data-shapes", dir);
    snprintf(out, sizeof out, "%s/run", dir);
    snprintf(probe, sizeof probe, "%s/val", data);
    iabn_err e = {0};
    struct stat st;
    mkdir(dir, 0777);
    if (stat(probe, &st) != 0) {
        printf("generating %d classes of %dx%d shape images (%.0f%% of the labels noise) in %s ...\n",
               DEMO_CLASSES, DEMO_SIZE, DEMO_SIZE, 100 * DEMO_LABEL_NOISE, data);
        fflush(stdout);
        if (iabn_data_make_synthetic_shapes(data, DEMO_CLASSES, 200, 40, DEMO_SIZE, DEMO_LABEL_NOISE,
                                            7, &e)) {
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
    cfg.learning_rate = 0.02f; /* the noisy shapes diverge at 0.05 without clipping */
    cfg.nesterov = 1;
    cfg.clip = 1;
    cfg.schedule.kind = IABN_SCHED_CONSTANT;
    cfg.schedule.epochs = 100; /* the time limit ends the run */
    cfg.crop_train = cfg.crop_val = DEMO_SIZE;
    /* resize to 34 then a random 32 crop: a little translation, never a crop
     * that cuts the object away (RandomResizedCrop's 8% would) */
    cfg.scale_train = DEMO_SIZE + 2;
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
    iabn_progress prog;
    iabn_progress_init(&prog, stdout, cfg.batch_size, o.print_freq, 0, seconds);
    o.progress = iabn_progress_report;
    o.log = iabn_progress_log;
    o.user = &prog;
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
    char batch[16], size[16], classes[16], memplot[1100];
    snprintf(batch, sizeof batch, "%d", cfg.batch_size);
    snprintf(size, sizeof size, "%d", DEMO_SIZE);
    snprintf(classes, sizeof classes, "%d", DEMO_CLASSES);
    snprintf(memplot, sizeof memplot, "%s/memory.svg", dir);
    char *margv[] = {"mem", DEMO_ARCH, "--batch-size", batch, "--size", size, "--classes", classes,
                     "--bn", "standard,checkpoint,inplace_abn,inplace_abn_ii", "--plot", memplot,
                     NULL};
    int rc = iabn_cmd_mem(12, margv);
    if (rc) return rc;
    printf("\nlearning curves: %s/curves.svg   (several runs: iabn plot RUN_DIR RUN_DIR -o F.svg)\n"
           "memory plot:     %s\n", out, memplot);
    return 0;
}
