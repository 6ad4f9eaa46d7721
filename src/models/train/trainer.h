/* trainer.h: the one training loop of `iabn train` (classification) and
 * `iabn segtrain` (segmentation): graphs planned per batch size, micro-batches
 * when the batch does not fit, SGD with the config's schedule, validation,
 * progress / metrics / TensorBoard, atomic checkpoints, exact resume, a clean
 * stop on request (a signal handler the program installs) and on a
 * non-finite loss.
 *
 * The library prints nothing: the lines a run reports (the step's memory,
 * progress every print_freq steps, validation) go to the `log` callback, and
 * the numbers behind a progress line to `progress`; both may be NULL.
 *
 * Gradients: a new store's are zero; a step's micro-batches add into them,
 * and the SGD update (iabn_store_sgd_step) zeroes them after applying them,
 * so every step starts from zero gradients. */
#ifndef IABN_MODELS_TRAIN_TRAINER_H
#define IABN_MODELS_TRAIN_TRAINER_H

#include <signal.h>

#include "data/data.h"
#include "models/models.h"
#include "models/train/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum iabn_task { IABN_TASK_CLASSIFY = 0, IABN_TASK_SEGMENT = 1 } iabn_task;

/* A stop request: the program's signal handler (or another thread) calls
 * iabn_trainer_request_stop; the loop stops after the current step, writes
 * its checkpoint and returns 0 with stopped_by_signal set. */
typedef struct iabn_trainer_stop {
    volatile sig_atomic_t requested;
} iabn_trainer_stop;

/* Async-signal-safe. */
void iabn_trainer_request_stop(iabn_trainer_stop *s);

/* The numbers of one progress report (every print_freq steps). */
typedef struct iabn_train_progress {
    int epoch, epochs;                    /* epoch from 1 */
    long long step_in_epoch, steps_per_epoch, global_step;
    double loss, avg_loss, lr, images_per_s, data_wait_s, eta_s;
    double top1;                          /* classification: running top-1 %, else -1 */
    size_t arena_bytes;
} iabn_train_progress;

typedef void (*iabn_trainer_log_fn)(void *user, const char *line);
typedef void (*iabn_trainer_progress_fn)(void *user, const iabn_train_progress *p);

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
    int resume_override;         /* resume although the config or data changed */
    int on_nonfinite_skip;       /* a NaN/Inf loss or gradient skips the step (else stops) */
    double budget_bytes;         /* 0: the machine's available memory */
    const char *strategy;        /* saved activations: keep (NULL), offload, auto or
                                    recompute (auto / recompute aim at the budget) */
    double time_limit;           /* seconds; 0: none (the demo uses it) */
    long long max_steps;         /* 0: none */
    long long checkpoint_every;  /* > 0: checkpoint_last every N steps, mid-epoch too */
    int threads;
    const char *device;          /* "cpu" (NULL), "cuda", "cuda:N" */
    iabn_trainer_stop *stop;     /* NULL: runs to its end */
    iabn_trainer_log_fn log;     /* report lines, without newline (NULL: silent) */
    iabn_trainer_progress_fn progress;
    void *user;                  /* passed to log and progress */
    /* data parallel: the job's communicator (NULL or size 1: one process);
     * batch is then the global batch, split over the ranks; rank 0 alone
     * reports and writes */
    iabn_comm *comm;
} iabn_train_opts;

void iabn_trainer_opts_defaults(iabn_train_opts *o);

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
    long long skipped_steps;      /* --on-nonfinite skip */
} iabn_train_result;

/* Runs training (or evaluation with evaluate_only); reports through the
 * callbacks; returns 0 on success, an iabn error code otherwise (the message
 * in e). */
int iabn_trainer_run(const iabn_train_opts *o, iabn_train_result *res, iabn_err *e);

/* Evaluation of a checkpoint (iabn eval / segeval): top-1 / top-5 or mIoU. */
typedef struct iabn_eval_opts {
    iabn_task task;
    const char *config_path, *checkpoint, *data_dir;
    const iabn_config *config;   /* used instead of config_path when set */
    const char *split;           /* "val" (image folders) / "val" "validation" */
    iabn_dataset_kind dataset;
    int crop, scale, ten_crops, batch, workers, flip, longest;
    float scales[8];
    int nscales;
    int window_h, window_w;      /* segmentation: sliding window (0: whole image) */
    int pool_set, pool_h, pool_w; /* DeepLabV3 pooling_size (0x0: global mean) */
    int threads, verbose;
    int strict;                  /* an undecodable image is an error (else left out, counted) */
    const char *device;          /* "cpu" (NULL), "cuda", "cuda:N" */
    iabn_trainer_log_fn log;     /* the result line (and per-class IoU), NULL: silent */
    void *user;
    iabn_comm *comm;             /* sharded evaluation, counts summed; rank 0 reports */
} iabn_eval_opts;

int iabn_trainer_evaluate(const iabn_eval_opts *o, iabn_train_result *res, iabn_err *e);

/* A segmentation checkpoint opened for prediction (iabn predict): the
 * network and its normalisation come from the configuration the checkpoint
 * carries in its metadata, or from opts.config when given (which then
 * overrides the checkpoint's). */
typedef struct iabn_predictor iabn_predictor;
typedef struct iabn_predict_opts {
    const char *device;          /* "cpu" (NULL), "cuda", "cuda:N" */
    int window_h, window_w;      /* sliding-window inference (0: whole image) */
    int pool_set, pool_h, pool_w;   /* DeepLabV3 pooling size override (0x0: global mean) */
    const iabn_config *config;   /* NULL: the checkpoint's own                    */
} iabn_predict_opts;
int iabn_predictor_open(const char *checkpoint, const iabn_predict_opts *o,
                        iabn_predictor **out, iabn_err *e);
void iabn_predictor_close(iabn_predictor *p);
/* The experiment the checkpoint was trained with (classes, mean / std). */
const iabn_config *iabn_predictor_config(const iabn_predictor *p);
/* Logits of one normalised image (3,h,w), averaged over the scales (ns of
 * them) and, with flip, the horizontal flip, at the image's size: acc (K,h,w). */
int iabn_predictor_logits(iabn_predictor *p, const float *img, int h, int w,
                          const float *scales, int ns, int flip, float *acc, iabn_err *e);

#ifdef __cplusplus
}
#endif
#endif
