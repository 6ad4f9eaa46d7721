/* models.h: the interface of src/models: the networks of docs/MODELS.md built by
 * name from the public layer API, and their weights in safetensors.
 *
 *     iabn_model_cfg cfg = iabn_model_defaults("resnext101");
 *     cfg.bn = IABN_BN_INPLACE_II;
 *     int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){8, 3, 224, 224});
 *     int logits;
 *     if (iabn_model_build(g, &cfg, x, &logits)) ... iabn_graph_error(g)->msg ...
 *     iabn_model_init(store, &cfg, seed, &e);     (or iabn_weights_load)
 *
 * Parameter names are the reference implementation's state_dict names
 * (mapillary/inplace_abn, scripts/models and scripts/modules), so its weights
 * load after a format conversion only:
 *   pre-activation nets   mod1.conv1.weight, mod2.block1.bn1.weight,
 *                         mod2.block1.convs.conv1.weight, .convs.bn2.*,
 *                         .proj_conv.weight, bn_out.*, classifier.fc.weight
 *   post-activation nets  mod1.conv1, mod1.bn1, modK.blockJ.convs.{conv1,bn1,...},
 *                         .proj_conv, .proj_bn, classifier.fc
 *   segmentation nets     body.<the body's names>, head.map_convs.{0..3},
 *                         head.map_bn, head.red_conv, head.global_pooling_conv,
 *                         head.global_pooling_bn, head.pool_red_conv, head.red_bn,
 *                         cls.weight, cls.bias (scripts/test_vistas_single_gpu.py)
 *   vgg19 / vgg19_bn      torchvision's features.<i>, classifier.{0,3,6}
 *   mobilenet_v1          stem.conv, stem.bn, blockJ.{dw_conv,dw_bn,pw_conv,pw_bn},
 *                         classifier.fc (no reference exists; our choice)
 *
 * Every BN + activation unit takes the BN mode, activation, eps, momentum and
 * frozen flag from the config; units that the reference builds with an
 * identity activation (post-activation nets' last BN of a block and proj_bn)
 * keep it.  The BN scale follows the mode (layers.h): gamma in standard,
 * checkpoint and checkpoint_opt, |gamma| + eps in the in-place modes; weight
 * files record which, and loading converts where that is exact.
 */
#ifndef IABN_MODELS_H
#define IABN_MODELS_H

#include <stdint.h>

#include "graph/graph.h"
#include "layers/layers.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iabn_model_cfg {
    const char *arch;
    int classes;
    iabn_bn_mode bn;
    iabn_act act;
    int input_3x3;     /* ResNeXt stem: three 3x3 convs instead of one 7x7           */
    int dilation;      /* classification bodies: dilated variant, output stride 8     */
                       /* (segmentation nets are always dilated)                      */
    int frozen_bn;     /* running statistics in training, no gamma / beta gradient    */
    float eps, momentum;
    int no_dropout;    /* leave out the dropout layers (parity runs against another   */
                       /* framework, whose dropout masks cannot be reproduced)        */
    int pool_h, pool_w; /* DeepLabV3 head in evaluation graphs: the global branch     */
                       /* averages pool_h x pool_w windows (stride 1, replicate-      */
                       /* padded) where the feature map is larger, as the reference   */
                       /* evaluates (84 x 84, its default here); 0: the global mean.  */
                       /* Training graphs always use the global mean.                 */
    int out_h, out_w;  /* segmentation: logits upsampled straight to this size (test-  */
                       /* time scales resize once, as the reference); 0: the input's  */
} iabn_model_cfg;

/* The reference defaults for arch: leaky_relu 0.01, in-place ABN II, eps 1e-5,
 * momentum 0.1, input_3x3, 1000 classes (65 for segmentation nets, Vistas,
 * whose evaluation pooling_size 84 x 84 they also get).
 * vgg19, vgg19_bn and mobilenet_v1 default to relu and standard BN, their
 * published form (relu refuses the in-place modes: pick leaky_relu for them). */
iabn_model_cfg iabn_model_defaults(const char *arch);

/* Appends the model to g reading `input` (N,3,H,W float32).  *logits: N,classes
 * for classification, N,classes,H,W (bilinearly upsampled to the input size)
 * for segmentation.  Returns 0, or the error code recorded in g (the message
 * names the model and the layer). */
int iabn_model_build(iabn_graph *g, const iabn_model_cfg *cfg, int input, int *logits);

/* The registry: every name iabn_model_build accepts, in a fixed order. */
const char *const *iabn_model_names(int *count);
int iabn_model_exists(const char *arch);
int iabn_model_is_segmentation(const char *arch);
/* One line describing the model (structure, output stride), or NULL. */
const char *iabn_model_describe(const char *arch);

/* Initialises every parameter of the store the reference way (xavier-normal
 * with the activation's gain, BN weight 1, bias 0, running var 1), keyed by
 * name and seed.  Separate from the build because several graphs (train,
 * eval) share one store and building one must not reset the weights. */
int iabn_model_init(iabn_store *s, const iabn_model_cfg *cfg, uint64_t seed, iabn_err *e);

/* ---- report rows ---------------------------------------------------------- */

/* A model opens one report block per stem, pool, residual block, head part
 * and classifier ("mod1", "pool2", "mod2.block1", "bn_out", "head",
 * "classifier", "body.mod4.block2", ...).  Each rolls up into a module row:
 * the block's name without its last ".blockN" component ("mod2"). */
typedef struct iabn_model_block {
    int id;                          /* graph block id (iabn_tensor.block)      */
    const char *name;                /* owned by the graph                      */
    char module[IABN_NAME_LEN];
} iabn_model_block;

/* Fills out[0..max-1] with the blocks of g in build order; returns how many
 * blocks g has (which may exceed max). */
int iabn_model_blocks(const iabn_graph *g, iabn_model_block *out, int max);

/* ---- weights ---------------------------------------------------------------- */

/* Loads every store tensor (parameters and running statistics) from a
 * safetensors file by name.  strict: every store tensor must be present with
 * its shape and the file may hold nothing else; otherwise missing and extra
 * tensors are skipped (a present tensor of another shape is still an error).
 * Nothing is written unless the whole file checks out; the error lists the
 * missing, mismatched and extra names. */
int iabn_weights_load(iabn_store *s, const char *path, int strict, iabn_err *e);
/* 1 when name is "<bn>.num_batches_tracked" for a BN of the store: the
 * reference's (and torch.nn.BatchNorm's) step counter.  Loading accepts it
 * and leaves it in the file (the model does not use it: momentum is fixed);
 * `iabn convert` and `iabn export` carry it through to what they write. */
int iabn_weights_is_counter(const iabn_store *s, const char *name);

/* Writes every store tensor under its name (float32), plus metadata from
 * meta_kv: NULL, or {"key", "value", ..., NULL}.  Atomic (temporary file,
 * fsync, rename). */
int iabn_weights_save(iabn_store *s, const char *path, const char *const *meta_kv, iabn_err *e);

#ifdef __cplusplus
}
#endif
#endif
