/* models_internal.h: what the model files of src/models share (private).
 *
 * A builder gets an iabn_mctx: the graph, the config, the two BN+act unit
 * configs (the network's activation, and identity for the units the
 * reference builds without one) and a name prefix ("" or "body.") so that a
 * body can sit inside a segmentation net under the reference's names. */
#ifndef IABN_MODELS_INTERNAL_H
#define IABN_MODELS_INTERNAL_H

#include "models/models.h"

typedef struct iabn_mctx {
    iabn_graph *g;
    const iabn_model_cfg *cfg;
    iabn_norm_act_cfg na;      /* network activation */
    iabn_norm_act_cfg na_id;   /* identity activation */
    const char *prefix;
} iabn_mctx;

void iabn_mdl_ctx(iabn_mctx *m, iabn_graph *g, const iabn_model_cfg *cfg, const char *prefix);

/* buf = prefix + printf(fmt, ...); returns buf. */
const char *iabn_mdl_name(const iabn_mctx *m, char *buf, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Opens the report block prefix + printf(fmt, ...). */
void iabn_mdl_block(const iabn_mctx *m, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Shorthands over the layer API with prefixed names (-1 on error, recorded in
 * the graph, like the layers themselves). */
int iabn_mdl_conv(const iabn_mctx *m, const char *name, int x, int c_out, int k, int stride,
                  int dil, int groups, int bias);
int iabn_mdl_bn(const iabn_mctx *m, const char *name, int x, int identity);
int iabn_mdl_channels(const iabn_mctx *m, int x);

/* The reference's IdentityResidualBlock (pre-activation), named `name`:
 * ch holds 2 (basic) or 3 (bottleneck) widths; drop > 0 puts a Dropout2d
 * before the last conv. */
int iabn_mdl_preact_block(const iabn_mctx *m, const char *name, int x, const int *ch, int nch,
                          int stride, int dil, int groups, float drop);

/* Stride and dilation of block b (0-based) of ResNet / ResNeXt module
 * mod2 + stage (stage 0..3): the first block of mod3..mod5 strides 2; the
 * dilated variant (output stride 8) dilates mod4 by 2 and mod5 by 4 instead
 * of striding them. */
void iabn_mdl_resnet_schedule(const iabn_mctx *m, int stage, int b, int *stride, int *dil);

/* Bodies: the feature extractor up to and including bn_out (pre-activation)
 * or mod5 (post-activation); classifier heads are added by the registry. */
/* post-activation ResNet bodies: the reference's, and torchvision's grouped /
 * wide bottlenecks (resnet.c) */
enum { IABN_RESNET_PLAIN, IABN_RESNET_32X4D, IABN_RESNET_32X8D, IABN_RESNET_WIDE2 };
int iabn_mdl_resnet_body(const iabn_mctx *m, int depth, int variant, int x);
int iabn_mdl_resnext_body(const iabn_mctx *m, int depth, int wide, int x);
int iabn_mdl_wrn_body(const iabn_mctx *m, int a2, int x);
int iabn_mdl_deeplab_head(const iabn_mctx *m, int x, int hidden);
/* A whole segmentation net (body, head, cls, upsample): body 0 is the dilated
 * wider_resnet38_a2, 101 / 152 the dilated ResNeXt (repository widths). */
int iabn_mdl_deeplab_net(iabn_graph *g, const iabn_model_cfg *cfg, int body, int x);
/* DenseNet: stem of 2 * growth channels, four dense modules of
 * structure[0..3] layers, transitions halving the channels, bn_out. */
int iabn_mdl_densenet_body(const iabn_mctx *m, int growth, const int *structure, int x);
int iabn_mdl_vgg19(const iabn_mctx *m, int bn, int x);
int iabn_mdl_mobilenet_body(const iabn_mctx *m, int x);

/* global average pool + classifier.fc */
int iabn_mdl_classifier(const iabn_mctx *m, int x);

#endif
