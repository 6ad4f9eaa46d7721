/* cmd_train.h: how the commands turn flags into an experiment config, shared
 * by train, eval, segtrain, segeval, demo and predict. */
#ifndef IABN_TOOLS_CMD_TRAIN_H
#define IABN_TOOLS_CMD_TRAIN_H

#include "models/train/config.h"
#include "tools/options.h"

/* Over c: the --config file, then the flags that name a config key, --crop,
 * --lr-warmup-epochs; then the cross-field check.
 * have_base: c already came from a checkpoint (no activation default). */
int iabn_config_from_args(const iabn_args *a, iabn_config *c, int have_base, const char *what,
                          iabn_err *e);

#endif
