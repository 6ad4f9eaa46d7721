/* cmd_train.h: how the commands turn flags into an experiment config, shared
 * by train, eval, segtrain, segeval, demo and predict. */
#ifndef IABN_TOOLS_CMD_TRAIN_H
#define IABN_TOOLS_CMD_TRAIN_H

#include "models/train/config.h"
#include "tools/options.h"

/* The config a run starts from without a file: torchvision's classification
 * reference (SGD 0.1, momentum 0.9, wd 1e-4, batch 256, 90 epochs, x0.1
 * every 30) or the reference segmentation recipe (poly per step). */
void iabn_reference_recipe(iabn_config *c, int seg);
/* Over c: the --config file, then the flags that name a config key, --crop,
 * --batch-per-rank, --lr-warmup-epochs; then the cross-field check.
 * have_base: c already came from a checkpoint (no activation default). */
int iabn_config_from_args(const iabn_args *a, iabn_config *c, int have_base, const char *what,
                          iabn_err *e);
/* The config stored in an iabn checkpoint's metadata, parsed over c. */
int iabn_config_from_checkpoint(iabn_config *c, const char *ckpt, iabn_err *e);

#endif
