/* layers.h: the interface of src/layers: functions that append a layer's
 * forward nodes to a graph and return the output tensor id (or -1, with the
 * error recorded in the graph).  Parameters are created in the graph's store
 * under `name.weight`, `name.bias`, `name.running_mean`, `name.running_var`
 * (the reference implementation's state_dict names).
 *
 *     int y = iabn_conv2d(g, "mod1.conv1", x, 64, 3, 1, 1, 1, 1, 0);
 *     iabn_norm_act_cfg bn = iabn_norm_act_defaults(IABN_BN_INPLACE_II);
 *     y = iabn_norm_act(g, "mod1.bn1", y, &bn);
 */
#ifndef IABN_LAYERS_H
#define IABN_LAYERS_H

#include "graph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- BN + activation ------------------------------------------------------ */

/* The BN memory modes: this list is the only place they are enumerated.
 * X(ENUM, name, aliases, in-place backward variant, sync) where the variant
 * is 0 for the modes that keep their input (no in-place) and 1 / 2 for the
 * in-place backward formulas of InPlace-ABN I / II; aliases (comma-separated)
 * are the reference configs' and short spellings; sync 1: the statistics and
 * the backward sums are combined over the ranks of the graph's communicator
 * (docs/INPLACE_ABN.md section 3; with one rank, exactly the unsynchronised mode).
 *   standard        BN then act, separate nodes; keeps x and z
 *   checkpoint      keeps x; BN and act recomputed in the backward
 *   checkpoint_opt  keeps xhat; z recomputed from xhat
 *   inplace_abn     InPlace-ABN I: z over x, backward from z
 *   inplace_abn_ii  InPlace-ABN II: dx = A*dy + B*y + C
 *   inplace_abn_sync    II with statistics synchronised across workers
 *   inplace_abn_sync_i  I with statistics synchronised across workers
 *   standard_sync       standard BN synchronised across workers (comparison) */
#define IABN_BN_MODES(X)                                                                 \
    X(STANDARD, "standard", "std", 0, 0)                                                 \
    X(CHECKPOINT, "checkpoint", "ckpt", 0, 0)                                            \
    X(CHECKPOINT_OPT, "checkpoint_opt", "", 0, 0)                                        \
    X(INPLACE, "inplace_abn", "inplace,iabn,inplace_abn_i", 1, 0)                        \
    X(INPLACE_II, "inplace_abn_ii", "inplace_ii,iabn_ii", 2, 0)                          \
    X(INPLACE_SYNC, "inplace_abn_sync", "sync,inplace_sync,inplace_abn_sync_ii", 2, 1)  \
    X(INPLACE_SYNC_I, "inplace_abn_sync_i", "inplace_sync_i", 1, 1)                      \
    X(STANDARD_SYNC, "standard_sync", "sync_bn,syncbn", 0, 1)

typedef enum iabn_bn_mode {
#define IABN_X_(E, name, aliases, variant, sync) IABN_BN_##E,
    IABN_BN_MODES(IABN_X_)
#undef IABN_X_
    IABN_BN_NMODES
} iabn_bn_mode;

const char *iabn_bn_mode_name(iabn_bn_mode m);
/* Parses a mode's name or alias (case-insensitive); an unknown one is
 * IABN_EINVAL with a message naming the valid ones (e may be NULL). */
int iabn_bn_mode_parse(const char *s, iabn_bn_mode *out, iabn_err *e);
/* 0, or IABN_EINVAL naming the valid modes when m is not one. */
int iabn_bn_mode_check(iabn_bn_mode m, iabn_err *e);
int iabn_bn_mode_is_inplace(iabn_bn_mode m);
/* 1 for the synchronised modes (the list's sync column). */
int iabn_bn_mode_is_sync(iabn_bn_mode m);

typedef struct iabn_norm_act_cfg {
    iabn_bn_mode mode;
    iabn_act act;
    float eps;          /* 1e-5 */
    float momentum;     /* 0.1  */
    int frozen;         /* running statistics, no gradient to gamma / beta       */
} iabn_norm_act_cfg;

/* The scale a mode applies: standard, checkpoint and checkpoint_opt use gamma
 * itself (the reference's ABN, torch.nn.BatchNorm2d); the in-place modes use
 * |gamma| + eps, which is always > 0 so that y -> xhat can be inverted.  The
 * unit records its convention on its weight in the store (iabn_param.bn_abs,
 * bn_eps); weight files carry it in their metadata, below. */
int iabn_bn_mode_abs_gamma(iabn_bn_mode m);

/* ---- the BN scale convention of weight files (bn_gamma.c) -------------------
 * Metadata "bn_gamma" = "plain" or "abs+eps=<eps>" for every BN weight of the
 * file, or "bn_gamma.<name>" per weight when they differ.  A file without it
 * is read in the loading unit's own convention (reference state dicts), except
 * iabn-checkpoint-1 files, which predate plain gamma (|gamma|+eps). */
/* Adds the store's BN conventions to a file being written. */
int iabn_bn_gamma_write_meta(iabn_store *s, iabn_st_writer *w, iabn_err *e);
/* Before anything is loaded: IABN_EFORMAT naming every in-place unit of s
 * whose weight in f has plain gamma that |gamma|+eps cannot reproduce
 * (negative or below eps).  Only tensors of the store's names are looked at. */
int iabn_bn_gamma_check(iabn_store *s, const iabn_st_file *f, iabn_err *e);
/* Converts v (p->count values of file tensor fname, read for p) from the
 * file's convention to p's, exactly (see bn_gamma.c); no-op for other params
 * or the same convention.  IABN_EFORMAT, v unchanged, when it cannot. */
int iabn_bn_gamma_convert(const iabn_st_file *f, const char *fname, const iabn_param *p,
                          float *v, iabn_err *e);

iabn_norm_act_cfg iabn_norm_act_defaults(iabn_bn_mode mode);
int iabn_norm_act(iabn_graph *g, const char *name, int x, const iabn_norm_act_cfg *cfg);

/* ---- convolution, linear, pooling ----------------------------------------- */

int iabn_conv2d(iabn_graph *g, const char *name, int x, int c_out, int k, int stride,
                int pad, int dil, int groups, int bias);
/* conv2d(x) + r, named out_name: a residual block's last convolution and
 * its add in one node, where the backend's kernel adds to r's values as it
 * writes (backend.h conv_accumulates and conv_fwd_add; the CPU's oneDNN
 * path), else the two layers apart (and always with
 * iabn_graph_set_fusion(g, 0)).  r must have the convolution's output
 * shape.  The sum overwrites r where the plan allows (r dies at the add);
 * where r is read later it goes to a buffer of its own (conv_fwd_add).  The
 * weights are named as iabn_conv2d's, and the results are the same bits. */
int iabn_conv2d_add(iabn_graph *g, const char *name, const char *out_name, int x, int r,
                    int c_out, int k, int stride, int pad, int dil, int groups, int bias);
/* x: N,C or N,C,1,1 -> N,out */
int iabn_linear(iabn_graph *g, const char *name, int x, int out, int bias);
int iabn_maxpool(iabn_graph *g, const char *name, int x, int k, int stride, int pad);
/* N,C,H,W -> N,C,1,1 */
int iabn_global_avgpool(iabn_graph *g, const char *name, int x);
/* k x k windows, stride s, no padding (PyTorch's AvgPool2d(k, s)) */
int iabn_avgpool(iabn_graph *g, const char *name, int x, int k, int stride);
/* N,C,H,W -> N,C,H,W: stride-1 averages over min(kh,H) x min(kw,W) windows,
 * replicate-padded back to H x W (the reference DeepLabV3 pooling_size) */
int iabn_avgpool_same(iabn_graph *g, const char *name, int x, int kh, int kw);

/* ---- elementwise and shape ---------------------------------------------------- */

int iabn_act_layer(iabn_graph *g, const char *name, int x, iabn_act act);
int iabn_add_layer(iabn_graph *g, const char *name, int a, int b);
/* a: N,C,H,W plus b: N,C,1,1 broadcast over H,W */
int iabn_add_bcast(iabn_graph *g, const char *name, int a, int b);
int iabn_dropout2d(iabn_graph *g, const char *name, int x, float p);
int iabn_concat(iabn_graph *g, const char *name, int n, const int *xs);
int iabn_upsample_bilinear(iabn_graph *g, const char *name, int x, int h, int w);

/* ---- export ----------------------------------------------------------------- */

/* The forward node's inference meaning as one JSON object into buf:
 * {"op": "conv2d" | "batchnorm" | "activation" | "maxpool" | "linear" |
 * "avgpool_window" | "add" | "add_bcast" | "concat" | "global_avgpool" |
 * "upsample_bilinear" | "copy" | "dropout2d", ...attributes}.  Returns -1 for
 * a node that has no inference form (backward, loss) or when buf is short. */
int iabn_layer_describe(const iabn_graph *g, int node, char *buf, size_t n);

/* ---- loss ------------------------------------------------------------------- */

/* Mean softmax cross-entropy of logits (N,K or N,K,H,W) against int32 labels
 * (N or N,H,W); labels equal to ignore_index do not count; top_frac in (0,1)
 * keeps only the hardest fraction of the counted pixels (bootstrapping).
 * Returns the scalar loss tensor (a graph output). */
int iabn_softmax_xent(iabn_graph *g, const char *name, int logits, int labels,
                      int ignore_index, float top_frac);
/* The same with label smoothing eps in [0, 1): the cross-entropy against
 * (1-eps) one-hot + eps uniform over the K classes (torchvision's
 * --label-smoothing).  eps 0 is iabn_softmax_xent; eps > 0 takes no
 * bootstrapping (top_frac 1) and runs on the CPU backend. */
int iabn_softmax_xent_smooth(iabn_graph *g, const char *name, int logits, int labels,
                             int ignore_index, float top_frac, float eps);
/* Mean absolute error / mean squared error of pred against a float32 target
 * of the same shape, over all elements; the gradient flows to pred (the
 * target is data).  Return the scalar loss (a graph output). */
int iabn_l1_loss(iabn_graph *g, const char *name, int pred, int target);
int iabn_mse_loss(iabn_graph *g, const char *name, int pred, int target);

/* ---- weight initialisation ----------------------------------------------------- */

typedef enum iabn_init_kind { IABN_INIT_XAVIER_NORMAL = 0, IABN_INIT_KAIMING_NORMAL } iabn_init_kind;
/* Initialises every parameter of the store the reference way: conv / linear
 * weights xavier-normal with the activation's gain (or kaiming), biases 0,
 * BN weight 1, bias 0, running mean 0, var 1.  Deterministic for a seed. */
int iabn_init_params(iabn_store *s, iabn_init_kind kind, iabn_act act, uint64_t seed,
                     iabn_err *e);

#ifdef __cplusplus
}
#endif
#endif
