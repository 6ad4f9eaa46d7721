/* stepfile.h: one forward (and backward) of a model on a batch read from a
 * safetensors file, everything it computed written to another: the C side
 * of a tensor-by-tensor parity check against another framework (`iabn
 * step`, tests/fixtures/parity.py).
 *
 * The input file holds `input` (float32 N,3,H,W) and, for a loss, `target`
 * (int64 or int32; N for classification, N,H,W for segmentation; 255
 * ignored).  The output gets `logits`, `loss`, `grad.<name>` for every
 * trainable parameter (training) and the running statistics under their
 * names, with arch / bn / mode metadata.  Weights load strictly (a parity
 * run against a half-loaded model would compare nothing), and labels are
 * range-checked (a label the loss kernel does not expect is the caller's
 * mistake, named in the error). */
#ifndef IABN_MODELS_TRAIN_STEPFILE_H
#define IABN_MODELS_TRAIN_STEPFILE_H

#include "models/train/session.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iabn_stepfile_opts {
    const iabn_model_cfg *model;
    const char *input, *output;  /* safetensors files                          */
    const char *weights;         /* every model tensor, or NULL: reference init */
    unsigned long long init_seed;   /* of the reference init                   */
    const char *device;          /* cpu (NULL), cuda, cuda:N                   */
    int train;                   /* forward + backward of the mean cross-entropy */
    iabn_storage storage;        /* saved activations (graph/strategy.h)       */
    size_t budget;               /* > 0: the step's limit (auto / recompute)   */
    unsigned long long seed;     /* dropout                                    */
    int check;                   /* guard bytes and NaN / Inf after every node */
    iabn_layout_mode layout_mode; /* activation layouts (graph.h; 0: auto)      */
} iabn_stepfile_opts;

int iabn_stepfile_run(const iabn_stepfile_opts *o, iabn_err *e);

#ifdef __cplusplus
}
#endif
#endif
