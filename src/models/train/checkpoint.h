/* checkpoint.h: training checkpoints as safetensors: every store tensor under
 * its reference name (parameters and running statistics, loadable as plain
 * weights), the SGD momentum under "optimizer.momentum.<name>", and the
 * training position in the metadata.  Written atomically. */
#ifndef IABN_MODELS_TRAIN_CHECKPOINT_H
#define IABN_MODELS_TRAIN_CHECKPOINT_H

#include "graph/graph.h"

typedef struct iabn_ckpt_pos {
    long long epoch;          /* epoch to continue in                  */
    long long step_in_epoch;  /* optimizer steps already done in it    */
    long long global_step;    /* optimizer steps since the start       */
    long long runs;           /* executor runs (dropout stream)        */
    double best;              /* best validation metric so far         */
    long long best_epoch;
    long long world_size;     /* ranks of the job that wrote it (0: one) */
    long long global_batch;   /* its batch over all ranks (0: unknown)   */
    long long train_images;   /* size of the training set (0: not recorded) */
    long long val_pending;    /* 1 + the epoch whose validation is due and has
                               * not run (the checkpoint an epoch's end writes
                               * before validating); 0: none */
} iabn_ckpt_pos;

/* Refuses (IABN_ENUM, nothing written) a store holding NaN or Inf. */
int iabn_ckpt_save(iabn_store *s, const char *path, const iabn_ckpt_pos *pos,
                   const char *config_json, iabn_err *e);
/* Loads weights (all store tensors must be present with their shapes); with
 * optimizer also the momentum buffers and the position. */
int iabn_ckpt_load(iabn_store *s, const char *path, int optimizer, iabn_ckpt_pos *pos,
                   iabn_err *e);

#endif
