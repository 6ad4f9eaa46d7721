/* trainer.h: the one training loop of `iabn train` (classification) and
 * `iabn segtrain` (segmentation): graphs planned per batch size, micro-batches
 * when the batch does not fit, SGD with the config's schedule, validation,
 * progress / metrics / TensorBoard, atomic checkpoints, exact resume, a clean
 * stop on SIGINT / SIGTERM and on a non-finite loss. */
#ifndef IABN_MODELS_TRAIN_TRAINER_H
#define IABN_MODELS_TRAIN_TRAINER_H

#include "data/data.h"
#include "models/models.h"
#include "models/train/config.h"

typedef enum iabn_task { IABN_TASK_CLASSIFY = 0, IABN_TASK_SEGMENT = 1 } iabn_task;

typedef struct iabn_train_opts {
    iabn_task task;
    const char *config_path;     /* NULL: built-in defaults */
    const iabn_config *config;   /* used instead of config_path when set */
    const char *data_dir;
    iabn_dataset_kind dataset;   /* segmentation: cityscapes or vistas */
    int epochs, batch, workers, print_freq;   /* <= 0: config / defaults */
    float lr;                    /* <= 0: config */
    long long seed;
    const char *bn;              /* overrides network.bn_mode */
    const char *resume;          /* checkpoint to continue from */
    const char *init;            /* segmentation: ImageNet body weights */
    const char *output_dir;
    int quiet, verbose, evaluate_only, no_accumulate, strict_data;
    double budget_bytes;         /* 0: the machine's available memory */
    double time_limit;           /* seconds; 0: none (the demo uses it) */
    long long max_steps;         /* 0: none */
    int threads;
    const char *device;          /* "cpu" (NULL), "cuda", "cuda:N" */
    /* data parallel: the job's communicator (NULL or size 1: one process);
     * batch is then the global batch, split over the ranks; rank 0 alone
     * prints and writes */
    iabn_comm *comm;
} iabn_train_opts;

void iabn_train_opts_defaults(iabn_train_opts *o);

/* Results of a run, for the demo and the tests. */
typedef struct iabn_train_result {
    double final_loss, best_metric, last_metric;   /* metric: top-1 % or mIoU % */
    double last_top5, last_pixel_acc;
    int epochs_done;
    long long steps_done;
    size_t arena_bytes, lower_bound;
    size_t step_bytes;            /* everything the step needs (arena, io, store) */
    int micro_batches;
    int stopped_by_signal, stopped_by_nan, stopped_by_time;
} iabn_train_result;

/* Runs training (or evaluation with evaluate_only); prints progress; returns 0
 * on success, an iabn error code otherwise (the message in e). */
int iabn_train(const iabn_train_opts *o, iabn_train_result *res, iabn_err *e);

/* Evaluation of a checkpoint (iabn eval / segeval): top-1 / top-5 or mIoU. */
typedef struct iabn_eval_opts {
    iabn_task task;
    const char *config_path, *checkpoint, *data_dir;
    const char *split;           /* "val" (image folders) / "val" "validation" */
    iabn_dataset_kind dataset;
    int crop, scale, ten_crops, batch, workers, flip, longest;
    float scales[8];
    int nscales;
    int threads, verbose;
    const char *device;          /* "cpu" (NULL), "cuda", "cuda:N" */
    iabn_comm *comm;             /* sharded evaluation, counts summed; rank 0 prints */
} iabn_eval_opts;

int iabn_evaluate(const iabn_eval_opts *o, iabn_train_result *res, iabn_err *e);

/* Installs SIGINT / SIGTERM handlers that ask the loop to stop after the
 * current step (and clears an earlier request). */
void iabn_train_install_signals(void);

#endif
