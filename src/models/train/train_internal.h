/* train_internal.h: the trainer's private state, shared by train.c,
 * train_graphs.c and train_eval.c. */
#ifndef IABN_MODELS_TRAIN_TRAIN_INTERNAL_H
#define IABN_MODELS_TRAIN_TRAIN_INTERNAL_H

#include <stdio.h>

#include "models/train/checkpoint.h"
#include "models/train/session.h"
#include "tensor/device.h"
#include "models/train/tb_events.h"
#include "models/train/trainer.h"

typedef struct trainer {
    const iabn_train_opts *o;
    iabn_task task;
    iabn_config cfg;
    iabn_model_cfg mcfg;
    iabn_storage storage;     /* --strategy */
    iabn_strategy_opts sopts; /* its cost model and budget */
    iabn_device dev;          /* where graphs run (--device) */
    iabn_store *s;
    iabn_dataset *dtrain, *dval;
    iabn_loader *ltrain, *lval;
    int classes;
    int in_h, in_w;           /* training input size */
    int batch;                /* per step (this rank) */
    int micro, nmicro;        /* micro-batch size and count */
    size_t need_bytes;
    iabn_session train;
    iabn_session evals[2];            /* evaluation graphs, by batch size */
    int evals_ten;            /* images per sample in evaluation (10: ten-crop) */
    char *config_json;
    iabn_ckpt_pos pos;
    FILE *metrics;
    iabn_tb *tb;
    char outdir[1024];
    float *host;              /* host copy of the logits (gset_fetch) */
    iabn_trainer_log_fn log;  /* report lines (NULL: none) */
    void *user;
    size_t host_cap;
    iabn_comm *comm;          /* data parallel (train_dist.c); NULL: one process */
    int rank, world;
    int stop_agreed;          /* a stop the ranks agreed on (any rank's request) */
    int win_h, win_w;         /* segmentation evaluation: sliding window (0: whole image) */
    int pool_set, pool_h, pool_w; /* DeepLabV3 pooling_size override (0x0: global mean) */
    int eval_oh[2], eval_ow[2];   /* logits' size of evals[i] (mcfg.out_h, out_w) */
    int lock_fd;              /* the output directory's lock, fd + 1 (0: none) */
    float *snap;              /* --on-nonfinite skip: the buffers before the step */
    size_t snap_cap;
} trainer;

/* The functions below are the trainer's own: not exported from libiabn. */
#pragma GCC visibility push(hidden)

/* A report line to the caller's log (nothing without one). */
void trainer_say(const trainer *tr, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* tr->mcfg from tr->cfg and tr->classes: the one translation from the
 * experiment config to the model, shared by train, eval and predict. */
void trainer_model_cfg(trainer *tr);
/* A new store holding the model's tensors, filled from a checkpoint's weights
 * (eval, predict); side: the square input the model is probed at. */
int trainer_load_weights(trainer *tr, const char *ckpt, int side, iabn_err *e);
/* The trainer's step for a batch of n at h x w: training (with its loss,
 * OHEM for segmentation) or evaluation, on tr->s, bound when asked. */
int gset_build(trainer *tr, int train, int n, int h, int w, int bind, iabn_session *gs,
               iabn_err *e);
int memory_for(trainer *tr, int n, size_t *bytes, iabn_err *e);
/* Host copy of a graph's output (the logits, the loss): on a GPU the bytes
 * come back from the device; *buf grows as needed (owned by the caller). */
int gset_fetch(iabn_session *gs, int t, float **buf, size_t *cap, iabn_err *e);
int choose_micro_batches(trainer *tr, iabn_err *e);
void fill_transform(const trainer *tr, int train, iabn_transform_cfg *t);

/* train_guard.c: an exclusive lock on the output directory (refused naming
 * the holder's pid); --resume against the checkpoint's config and data size
 * (refused listing the differences unless resume_override; a finished run is
 * an error); the running statistics saved (restore 0) or put back (1). */
int trainer_lock_outdir(trainer *tr, iabn_err *e);
int trainer_check_resume(trainer *tr, iabn_err *e);
int trainer_buffers_copy(trainer *tr, int restore, iabn_err *e);

/* Evaluation over a loader: classification top-1 / top-5 (and loss), or
 * segmentation mIoU / pixel accuracy (per-class IoU printed when verbose). */
typedef struct eval_result {
    double top1, top5, loss, miou, pixel_acc;
    long samples;
    long nonfinite;           /* samples whose outputs held NaN or Inf */
    long skipped;             /* undecodable files left out of samples */
    double *iou;              /* per class, segmentation (owned) */
} eval_result;
int run_evaluation(trainer *tr, iabn_loader *ld, int ten, int flip, const float *scales,
                   int nscales, int verbose, eval_result *r, iabn_err *e);
void eval_result_free(eval_result *r);
/* Class probabilities of one normalised image (3,h,w) at the image's size,
 * acc (K,h,w): the softmax of each pass's logits (upsampled once from the
 * feature map to the image), averaged over the test scales and the
 * horizontal flip, the reference's "mean" fusion (its
 * scripts/test_vistas_single_gpu.py).  With a sliding window (tr->win_h,
 * win_w) each pass's logits are the mean over windows of that size
 * overlapping by a third. */
int seg_logits(trainer *tr, const float *img, int h, int w, const float *scales, int ns,
               int flip, float *acc, iabn_err *e);

/* train_init.c: the weights a run starts from (--pretrained body of a
 * segmentation net, --init of a fine-tuned classifier). */
int trainer_load_body_weights(iabn_store *s, const char *path, iabn_err *e);
int trainer_load_matching_weights(const trainer *tr, iabn_store *s, const char *path,
                                  iabn_err *e);

/* train_dist.c: the data-parallel steps (one process: no-ops). */
int dist_setup(trainer *tr, iabn_err *e);
/* On CUDA with NCCL built in: NCCL over the ranks' devices. */
int dist_device(trainer *tr, iabn_err *e);
int dist_check_micro(trainer *tr, iabn_err *e);
/* flags[0..n): a rank's stop reasons in, the job's (any rank's) out. */
int dist_agree_stop(trainer *tr, int *flags, int n, iabn_err *e);
int dist_sum(trainer *tr, double *v, size_t n, iabn_err *e);
void dist_resume_note(trainer *tr);

#pragma GCC visibility pop

#endif
