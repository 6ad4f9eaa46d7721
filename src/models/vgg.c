/* vgg.c: the CPU-offloading paper's test models (its Table 3).
 *
 * vgg19: torchvision's layout and names: features.<i> (3x3 convs with bias,
 * each followed by the activation, 2x2 max pools), then classifier.0 (fc
 * 4096), .3 (fc 4096), .6 (fc classes), with the activation and dropout 0.5
 * between them.  No BN (torchvision's vgg19); vgg19_bn puts the BN+act unit
 * after each conv (torchvision's vgg19_bn indices: conv i, BN i+1, relu i+2),
 * so that the BN modes apply to it.  torchvision's AdaptiveAvgPool2d(7) is the
 * identity at 224x224, the only size its classifier was made for; we have no
 * adaptive pool, so classifier.0 takes the flattened features of whatever
 * size arrives (512 * (H/32) * (W/32)): torchvision's 25088 at 224.
 *
 * mobilenet_v1 (Howard et al. 2017, width 1.0): a 3x3/2 conv of 32, then 13
 * depthwise-separable units (3x3 depthwise + BN+act, 1x1 pointwise + BN+act),
 * global average pool, fc.  4,231,976 parameters with 1000 classes.  Names are
 * ours: stem.conv, stem.bn, blockJ.{dw_conv,dw_bn,pw_conv,pw_bn}, classifier.fc. */
#include "models/models_internal.h"

#include <stdio.h>

int iabn_mdl_vgg19(const iabn_mctx *m, int bn, int x)
{
    /* channels per conv; 0 = max pool */
    static const int cfg[] = {64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0,
                              512, 512, 512, 512, 0, 512, 512, 512, 512, 0};
    iabn_graph *g = m->g;
    char n[IABN_NAME_LEN], f[IABN_NAME_LEN];
    int h = x, idx = 0, stage = 1;
    iabn_mdl_block(m, "features.stage1");
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        if (!cfg[i]) {
            snprintf(n, sizeof n, "features.%d", idx++);
            h = iabn_maxpool(g, iabn_mdl_name(m, f, "%s", n), h, 2, 2, 0);
            if (i + 1 < sizeof cfg / sizeof cfg[0]) iabn_mdl_block(m, "features.stage%d", ++stage);
            continue;
        }
        snprintf(n, sizeof n, "features.%d", idx++);
        h = iabn_mdl_conv(m, n, h, cfg[i], 3, 1, 1, 1, 1);
        snprintf(n, sizeof n, "features.%d", idx++);
        if (bn) {
            h = iabn_mdl_bn(m, n, h, 0);
            idx++; /* torchvision's separate relu module */
        } else {
            h = iabn_act_layer(g, iabn_mdl_name(m, f, "%s", n), h, m->cfg->act);
        }
    }
    if (h < 0) return -1;
    iabn_mdl_block(m, "classifier");
    const iabn_tensor *t = iabn_graph_t(g, h);
    int flat[2] = {t->shape[0], t->shape[1] * t->shape[2] * t->shape[3]};
    h = iabn_graph_view(g, h, iabn_mdl_name(m, f, "classifier.flatten"), 2, flat);
    for (int k = 0; k < 3; k++) {
        snprintf(n, sizeof n, "classifier.%d", 3 * k);
        h = iabn_linear(g, iabn_mdl_name(m, f, "%s", n), h, k < 2 ? 4096 : m->cfg->classes, 1);
        if (k == 2) break;
        snprintf(n, sizeof n, "classifier.%d", 3 * k + 1);
        h = iabn_act_layer(g, iabn_mdl_name(m, f, "%s", n), h, m->cfg->act);
        if (!m->cfg->no_dropout) {
            snprintf(n, sizeof n, "classifier.%d", 3 * k + 2);
            h = iabn_dropout2d(g, iabn_mdl_name(m, f, "%s", n), h, 0.5f);
        }
    }
    return h;
}

int iabn_mdl_mobilenet_body(const iabn_mctx *m, int x)
{
    static const struct { int c, s; } units[13] = {
        {64, 1},  {128, 2}, {128, 1}, {256, 2}, {256, 1}, {512, 2},  {512, 1},
        {512, 1}, {512, 1}, {512, 1}, {512, 1}, {1024, 2}, {1024, 1},
    };
    iabn_mdl_block(m, "stem");
    int h = iabn_mdl_conv(m, "stem.conv", x, 32, 3, 2, 1, 1, 0);
    h = iabn_mdl_bn(m, "stem.bn", h, 0);
    for (int i = 0; i < 13; i++) {
        char n[IABN_NAME_LEN];
        int c = iabn_mdl_channels(m, h);
        iabn_mdl_block(m, "block%d", i + 1);
        snprintf(n, sizeof n, "block%d.dw_conv", i + 1);
        h = iabn_mdl_conv(m, n, h, c, 3, units[i].s, 1, c, 0);
        snprintf(n, sizeof n, "block%d.dw_bn", i + 1);
        h = iabn_mdl_bn(m, n, h, 0);
        snprintf(n, sizeof n, "block%d.pw_conv", i + 1);
        h = iabn_mdl_conv(m, n, h, units[i].c, 1, 1, 1, 1, 0);
        snprintf(n, sizeof n, "block%d.pw_bn", i + 1);
        h = iabn_mdl_bn(m, n, h, 0);
    }
    return h;
}
