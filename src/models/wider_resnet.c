/* wider_resnet.c: WideResNet-38 (scripts/models/wider_resnet.py).
 * mod1 is one 3x3 conv at full resolution; six modules of IdentityResidualBlocks
 * (two 3x3s, or a 1x1-3x3-1x1 bottleneck in mod6 / mod7), then bn_out.
 *   plain (wider_resnet38): a max pool before each of mod2..mod6, every block
 *     stride 1, no dropout; output stride 32.
 *   A2 (wider_resnet38_a2): pools before mod2 and mod3 only, then stride 2 in
 *     the first block of mod4, mod5, mod6 (output stride 32), or with dilation
 *     stride 2 in mod4 only, dilation 2 in mod5 and 4 in mod6 / mod7 (output
 *     stride 8); Dropout2d 0.3 in mod6 and 0.5 in mod7 before each block's
 *     last conv. */
#include "models/models_internal.h"

#include <stdio.h>

int iabn_mdl_wrn_body(const iabn_mctx *m, int a2, int x)
{
    static const int structure[6] = {3, 3, 6, 3, 1, 1};
    static const int chans[6][3] = {{128, 128, 0},   {256, 256, 0},     {512, 512, 0},
                                    {512, 1024, 0},  {512, 1024, 2048}, {1024, 2048, 4096}};
    int dilated = a2 && m->cfg->dilation;
    if (!a2 && m->cfg->dilation)
        return iabn_graph_fail(m->g, IABN_EINVAL,
                               "wider_resnet38 has no dilated variant (the reference's plain "
                               "WiderResNet); use wider_resnet38_a2");
    char n[IABN_NAME_LEN];
    iabn_mdl_block(m, "mod1");
    int h = iabn_mdl_conv(m, "mod1.conv1", x, 64, 3, 1, 1, 1, 0);
    for (int mod = 0; mod < 6; mod++) {
        if (mod < 2 || (!a2 && mod <= 4)) {
            char pn[16];
            snprintf(pn, sizeof pn, "pool%d", mod + 2);
            iabn_mdl_block(m, "%s", pn);
            h = iabn_maxpool(m->g, iabn_mdl_name(m, n, "%s", pn), h, 3, 2, 1);
        }
        int nch = chans[mod][2] ? 3 : 2;
        float drop = !a2 ? 0.f : mod == 4 ? 0.3f : mod == 5 ? 0.5f : 0.f;
        for (int b = 0; b < structure[mod]; b++) {
            int s = 1, d = 1;
            if (a2 && !dilated) {
                s = b == 0 && mod >= 2 && mod <= 4 ? 2 : 1;
            } else if (dilated) {
                d = mod == 3 ? 2 : mod > 3 ? 4 : 1;
                s = b == 0 && mod == 2 ? 2 : 1;
            }
            char bn[32];
            snprintf(bn, sizeof bn, "mod%d.block%d", mod + 2, b + 1);
            iabn_mdl_block(m, "%s", bn);
            h = iabn_mdl_preact_block(m, bn, h, chans[mod], nch, s, d, 1, drop);
        }
    }
    iabn_mdl_block(m, "bn_out");
    return iabn_mdl_bn(m, "bn_out", h, 0);
}
