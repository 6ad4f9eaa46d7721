/* resnext.c: the reference's pre-activation ResNeXt (scripts/models/resnext.py).
 * mod1 is the 3x3 stem (input_3x3, the paper's configs) or the 7x7 one; then
 * four modules of bottleneck IdentityResidualBlocks with 64 groups and the
 * stride in the first 1x1, then bn_out.  Widths: the repository's networks
 * start at (128, 128, 256), i.e. 64 groups of 2 channels (the counts of its
 * released weights); `wide` starts at (256, 256, 256), a true 64x4d. */
#include "models/models_internal.h"

#include <stdio.h>

int iabn_mdl_resnext_body(const iabn_mctx *m, int depth, int wide, int x)
{
    /* depth 14 is `resnext_tiny`: one unit per module, widths (32, 32, 64),
     * 8 groups: the demo's and the end-to-end tests' network, same code */
    static const struct { int depth, s[4]; } tab[] = {
        {50, {3, 4, 6, 3}}, {101, {3, 4, 23, 3}}, {152, {3, 8, 36, 3}}, {14, {1, 1, 1, 1}},
    };
    int t = -1;
    for (int i = 0; i < 4; i++)
        if (tab[i].depth == depth) t = i;
    if (t < 0) return iabn_graph_fail(m->g, IABN_EINVAL, "resnext: no depth %d", depth);
    char n[IABN_NAME_LEN];
    iabn_mdl_block(m, "mod1");
    int h;
    if (m->cfg->input_3x3) {
        h = iabn_mdl_conv(m, "mod1.conv1", x, 64, 3, 2, 1, 1, 0);
        h = iabn_mdl_bn(m, "mod1.bn1", h, 0);
        h = iabn_mdl_conv(m, "mod1.conv2", h, 64, 3, 1, 1, 1, 0);
        h = iabn_mdl_bn(m, "mod1.bn2", h, 0);
        /* no BN after conv3: mod2.block1.bn1 is the next normalisation */
        h = iabn_mdl_conv(m, "mod1.conv3", h, 64, 3, 1, 1, 1, 0);
    } else {
        h = iabn_mdl_conv(m, "mod1.conv1", x, 64, 7, 2, 1, 1, 0);
    }
    h = iabn_maxpool(m->g, iabn_mdl_name(m, n, "mod1.pool"), h, 3, 2, 1);
    int ch[3] = {128, 128, 256}, groups = 64;
    if (wide) ch[0] = ch[1] = 256;
    if (depth == 14) {
        ch[0] = ch[1] = 32;
        ch[2] = 64;
        groups = 8;
    }
    for (int mod = 0; mod < 4; mod++) {
        for (int b = 0; b < tab[t].s[mod]; b++) {
            int s, d;
            iabn_mdl_resnet_schedule(m, mod, b, &s, &d);
            char bn[32];
            snprintf(bn, sizeof bn, "mod%d.block%d", mod + 2, b + 1);
            iabn_mdl_block(m, "%s", bn);
            h = iabn_mdl_preact_block(m, bn, h, ch, 3, s, d, groups, 0.f);
        }
        for (int i = 0; i < 3; i++) ch[i] *= 2;
    }
    iabn_mdl_block(m, "bn_out");
    return iabn_mdl_bn(m, "bn_out", h, 0);
}
