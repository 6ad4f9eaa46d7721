/* resnet.c: the reference's ResNet-18/34/50/101/152 (scripts/models/resnet.py):
 * post-activation units ("ResidualBlock"), where the block's last BN and the
 * projection's BN have the identity activation and the network's activation
 * follows the add, in place.  The bottleneck's stride sits in its 3x3, as in
 * the reference and torchvision (the counts do not depend on it). */
#include "models/models_internal.h"

#include <stdio.h>

static const char *sub(char *buf, const char *name, const char *part)
{
    snprintf(buf, IABN_NAME_LEN, "%.60s.%s", name, part);
    return buf;
}

static int post_block(const iabn_mctx *m, const char *name, int x, const int *ch, int nch,
                      int stride, int dil)
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
        h = iabn_mdl_conv(m, sub(n, name, "convs.conv2"), h, ch[1], 3, stride, dil, 1, 0);
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

int iabn_mdl_resnet_body(const iabn_mctx *m, int depth, int x)
{
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
    int ch[3] = {64, 64, 256};
    for (int mod = 0; mod < 4; mod++) {
        for (int b = 0; b < tab[t].s[mod]; b++) {
            int s, d;
            iabn_mdl_resnet_schedule(m, mod, b, &s, &d);
            char bn[32];
            snprintf(bn, sizeof bn, "mod%d.block%d", mod + 2, b + 1);
            iabn_mdl_block(m, "%s", bn);
            h = post_block(m, bn, h, ch, nch, s, d);
        }
        for (int i = 0; i < 3; i++) ch[i] *= 2;
    }
    return h;
}
