/* densenet.c: the reference's DenseNet with InPlace-ABN (its scripts/models/
 * densenet.py and scripts/modules/dense.py, docs/MODELS.md).
 *
 *   mod1      input_3x3: conv1 3x3/2, bn1, conv2 3x3, bn2, conv3 3x3, max pool
 *             3/2 (no BN after conv3: the first dense layer's BN follows);
 *             otherwise conv1 7x7/2 and the pool.  2 * growth channels.
 *   mod2..5   dense modules: layer i reads the concatenation of the module's
 *             input and every earlier layer's output: convs1.i (bn, 1x1 conv
 *             to 4 * growth), convs3.i (bn, 3x3 conv to growth); the module's
 *             output is the concatenation of all of them.
 *   tra3..5   before mod3..mod5: bn, 1x1 conv halving the channels (theta
 *             0.5, rounded down), 2x2 average pool with stride 2 (left out
 *             where the module is dilated).
 *   bn_out, classifier.{avg_pool, fc}
 *
 * Every concatenation is a new tensor that the following BN overwrites in
 * the in-place modes, as the reference's torch.cat (which the paper's
 * DenseNet memory figures count). */
#include "models/models_internal.h"

#include <stdio.h>

int iabn_mdl_densenet_body(const iabn_mctx *m, int growth, const int *structure, int x)
{
    if (x < 0 || !iabn_graph_ok(m->g)) return -1;
    char n[IABN_NAME_LEN];
    iabn_mdl_block(m, "mod1");
    int h, c2 = 2 * growth;
    if (m->cfg->input_3x3) {
        h = iabn_mdl_conv(m, "mod1.conv1", x, c2, 3, 2, 1, 1, 0);
        h = iabn_mdl_bn(m, "mod1.bn1", h, 0);
        h = iabn_mdl_conv(m, "mod1.conv2", h, c2, 3, 1, 1, 1, 0);
        h = iabn_mdl_bn(m, "mod1.bn2", h, 0);
        h = iabn_mdl_conv(m, "mod1.conv3", h, c2, 3, 1, 1, 1, 0);
    } else {
        h = iabn_mdl_conv(m, "mod1.conv1", x, c2, 7, 2, 1, 1, 0);
    }
    h = iabn_maxpool(m->g, iabn_mdl_name(m, n, "mod1.pool"), h, 3, 2, 1);
    for (int mod = 0; mod < 4 && h >= 0; mod++) {
        int stride, dil;
        iabn_mdl_resnet_schedule(m, mod, 0, &stride, &dil);
        if (mod > 0) {
            iabn_mdl_block(m, "tra%d", mod + 2);
            int c = iabn_mdl_channels(m, h);
            snprintf(n, sizeof n, "tra%d.bn", mod + 2);
            h = iabn_mdl_bn(m, n, h, 0);
            snprintf(n, sizeof n, "tra%d.conv", mod + 2);
            h = iabn_mdl_conv(m, n, h, c / 2, 1, 1, 1, 1, 0);
            if (stride == 2) {
                char full[IABN_NAME_LEN];
                h = iabn_avgpool(m->g, iabn_mdl_name(m, full, "tra%d.pool", mod + 2), h, 2, 2);
            }
        }
        /* raw: the module's input and every layer's output so far, grown by
         * one two-input concat per layer (a graph node takes at most
         * IABN_MAX_IN inputs); the BN that overwrites it in place gets the
         * copy that the next concat reads from iabn_graph_finalize, which is
         * the reference's fresh torch.cat per layer. */
        int raw = h;
        char full[IABN_NAME_LEN];
        for (int i = 0; i < structure[mod] && h >= 0; i++) {
            iabn_mdl_block(m, "mod%d.block%d", mod + 2, i + 1);
            if (i > 0) {
                int two[2] = {raw, h};
                raw = iabn_concat(m->g, iabn_mdl_name(m, full, "mod%d.cat%d", mod + 2, i), 2, two);
            }
            snprintf(n, sizeof n, "mod%d.convs1.%d.bn", mod + 2, i);
            h = iabn_mdl_bn(m, n, raw, 0);
            snprintf(n, sizeof n, "mod%d.convs1.%d.conv", mod + 2, i);
            h = iabn_mdl_conv(m, n, h, 4 * growth, 1, 1, 1, 1, 0);
            snprintf(n, sizeof n, "mod%d.convs3.%d.bn", mod + 2, i);
            h = iabn_mdl_bn(m, n, h, 0);
            snprintf(n, sizeof n, "mod%d.convs3.%d.conv", mod + 2, i);
            h = iabn_mdl_conv(m, n, h, growth, 3, 1, dil, 1, 0);
        }
        if (h < 0) return -1;
        int two[2] = {raw, h};
        h = iabn_concat(m->g, iabn_mdl_name(m, full, "mod%d", mod + 2), 2, two);
    }
    iabn_mdl_block(m, "bn_out");
    return iabn_mdl_bn(m, "bn_out", h, 0);
}
