/* resnet.c: the reference's ResNet-18/34/50/101/152 (scripts/models/resnet.py):
 * post-activation units ("ResidualBlock"), where the block's last BN and the
 * projection's BN have the identity activation and the network's activation
 * follows the add, in place.  The bottleneck's stride sits in its 3x3, as in
 * the reference and torchvision (the counts do not depend on it).
 *
 * The same units with a grouped or wider 3x3 are torchvision's ResNeXt
 * (resnext50_32x4d, resnext101_32x8d) and Wide ResNet (wide_resnet50_2,
 * wide_resnet101_2): only the bottleneck's middle width and its groups
 * change, so their weights convert under the same names. */
#include "models/models_internal.h"

#include <stdio.h>

static const char *sub(char *buf, const char *name, const char *part)
{
    snprintf(buf, IABN_NAME_LEN, "%.60s.%s", name, part);
    return buf;
}

static int post_block(const iabn_mctx *m, const char *name, int x, const int *ch, int nch,
                      int groups, int stride, int dil)
{
    if (x < 0 || !iabn_graph_ok(m->g)) return -1;
    char n[IABN_NAME_LEN], full[IABN_NAME_LEN];
    int h;
    if (nch == 2) {
        h = iabn_mdl_conv(m, sub(n, name, "convs.conv1"), x, ch[0], 3, stride, dil, 1, 0);
        h = iabn_mdl_bn(m, sub(n, name, "convs.bn1"), h, 0);
        h = iabn_mdl_conv(m, sub(n, name, "convs.conv2"), h, ch[1], 3, 1, dil, 1, 0);
        h = iabn_mdl_bn(m, sub(n, name, "convs.bn2"), h, 1);
    } else {
        h = iabn_mdl_conv(m, sub(n, name, "convs.conv1"), x, ch[0], 1, 1, 1, 1, 0);
        h = iabn_mdl_bn(m, sub(n, name, "convs.bn1"), h, 0);
        h = iabn_mdl_conv(m, sub(n, name, "convs.conv2"), h, ch[1], 3, stride, dil, groups, 0);
        h = iabn_mdl_bn(m, sub(n, name, "convs.bn2"), h, 0);
        h = iabn_mdl_conv(m, sub(n, name, "convs.conv3"), h, ch[2], 1, 1, 1, 1, 0);
        h = iabn_mdl_bn(m, sub(n, name, "convs.bn3"), h, 1);
    }
    int shortcut = x;
    if (stride != 1 || iabn_mdl_channels(m, x) != ch[nch - 1]) {
        shortcut = iabn_mdl_conv(m, sub(n, name, "proj_conv"), x, ch[nch - 1], 1, stride, 1, 1, 0);
        shortcut = iabn_mdl_bn(m, sub(n, name, "proj_bn"), shortcut, 1);
    }
    int y = iabn_add_layer(m->g, iabn_mdl_name(m, full, "%s", sub(n, name, "add")), h, shortcut);
    return iabn_act_layer(m->g, iabn_mdl_name(m, full, "%s", name), y, m->cfg->act);
}

int iabn_mdl_resnet_body(const iabn_mctx *m, int depth, int variant, int x)
{
    /* variant: the first bottlenecks' middle width and the 3x3's groups */
    static const struct { int mid, groups; } var[] = {
        [IABN_RESNET_PLAIN] = {64, 1},     [IABN_RESNET_32X4D] = {128, 32},
        [IABN_RESNET_32X8D] = {256, 32},   [IABN_RESNET_WIDE2] = {128, 1},
    };
    if (variant < 0 || variant >= (int)(sizeof var / sizeof var[0]))
        return iabn_graph_fail(m->g, IABN_EINVAL, "resnet: no variant %d", variant);
    static const struct { int depth, bottleneck, s[4]; } tab[] = {
        {18, 0, {2, 2, 2, 2}},  {34, 0, {3, 4, 6, 3}},  {50, 1, {3, 4, 6, 3}},
        {101, 1, {3, 4, 23, 3}}, {152, 1, {3, 8, 36, 3}},
    };
    int t = -1;
    for (int i = 0; i < 5; i++)
        if (tab[i].depth == depth) t = i;
    if (t < 0) return iabn_graph_fail(m->g, IABN_EINVAL, "resnet: no depth %d", depth);
    char n[IABN_NAME_LEN];
    iabn_mdl_block(m, "mod1");
    int h = iabn_mdl_conv(m, "mod1.conv1", x, 64, 7, 2, 1, 1, 0);
    h = iabn_mdl_bn(m, "mod1.bn1", h, 0);
    h = iabn_maxpool(m->g, iabn_mdl_name(m, n, "mod1.pool1"), h, 3, 2, 1);
    int nch = tab[t].bottleneck ? 3 : 2;
    if (!tab[t].bottleneck && variant != IABN_RESNET_PLAIN)
        return iabn_graph_fail(m->g, IABN_EINVAL, "resnet%d: basic units have no width variant",
                               depth);
    int ch[3] = {var[variant].mid, var[variant].mid, 256};
    for (int mod = 0; mod < 4; mod++) {
        for (int b = 0; b < tab[t].s[mod]; b++) {
            int s, d;
            iabn_mdl_resnet_schedule(m, mod, b, &s, &d);
            char bn[32];
            snprintf(bn, sizeof bn, "mod%d.block%d", mod + 2, b + 1);
            iabn_mdl_block(m, "%s", bn);
            h = post_block(m, bn, h, ch, nch, var[variant].groups, s, d);
        }
        for (int i = 0; i < 3; i++) ch[i] *= 2;
    }
    return h;
}
