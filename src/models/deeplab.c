/* deeplab.c: the reference's DeepLabV3 head (scripts/modules/deeplab.py) and
 * the segmentation nets built on it (scripts/test_vistas_single_gpu.py: body,
 * head, cls).  The head: four parallel bias-free convs (1x1 and 3x3 with
 * dilation 12, 24, 36) concatenated, map_bn, red_conv; a global branch (mean
 * over H,W, global_pooling_conv, global_pooling_bn, pool_red_conv) broadcast-
 * added; red_bn last, with the activation like every BN of the head.  Training
 * always uses the global mean; evaluation graphs with a pooling size (the
 * reference's pooling_size, 84 x 84 in its test script) average stride-1
 * windows of that size instead where the feature map is larger, replicate-
 * padded back to the map, and run the branch's 1x1 convs and BN per position
 * (a smaller map gives the global mean either way, so it keeps the cheap
 * global branch).  The classifier `cls` is a 1x1 conv with bias, its logits
 * bilinearly upsampled to the input size. */
#include "models/models_internal.h"

#include <stdio.h>

int iabn_mdl_deeplab_head(const iabn_mctx *m, int x, int hidden)
{
    const int HIDDEN = hidden, HEAD_OUT = hidden; /* 256 in the reference */
    static const int dil[3] = {12, 24, 36};
    char n[IABN_NAME_LEN];
    int maps[4];
    iabn_graph_begin_block(m->g, "head");
    maps[0] = iabn_mdl_conv(m, "map_convs.0", x, HIDDEN, 1, 1, 1, 1, 0);
    for (int i = 0; i < 3; i++) {
        char cn[16];
        snprintf(cn, sizeof cn, "map_convs.%d", i + 1);
        maps[i + 1] = iabn_mdl_conv(m, cn, x, HIDDEN, 3, 1, dil[i], 1, 0);
    }
    for (int i = 0; i < 4; i++)
        if (maps[i] < 0) return -1;
    int out = iabn_concat(m->g, iabn_mdl_name(m, n, "map_convs"), 4, maps);
    out = iabn_mdl_bn(m, "map_bn", out, 0);
    out = iabn_mdl_conv(m, "red_conv", out, HEAD_OUT, 1, 1, 1, 1, 0);
    const iabn_tensor *xt = x >= 0 ? iabn_graph_t(m->g, x) : NULL;
    int windowed = xt && iabn_graph_mode(m->g) == IABN_EVAL && m->cfg->pool_h > 0 &&
                   m->cfg->pool_w > 0 && (xt->shape[2] > m->cfg->pool_h || xt->shape[3] > m->cfg->pool_w);
    int pool = windowed ? iabn_avgpool_same(m->g, iabn_mdl_name(m, n, "global_pooling"), x,
                                            m->cfg->pool_h, m->cfg->pool_w)
                        : iabn_global_avgpool(m->g, iabn_mdl_name(m, n, "global_pooling"), x);
    pool = iabn_mdl_conv(m, "global_pooling_conv", pool, HIDDEN, 1, 1, 1, 1, 0);
    pool = iabn_mdl_bn(m, "global_pooling_bn", pool, 0);
    pool = iabn_mdl_conv(m, "pool_red_conv", pool, HEAD_OUT, 1, 1, 1, 1, 0);
    out = windowed ? iabn_add_layer(m->g, iabn_mdl_name(m, n, "pool_add"), out, pool)
                   : iabn_add_bcast(m->g, iabn_mdl_name(m, n, "pool_add"), out, pool);
    return iabn_mdl_bn(m, "red_bn", out, 0);
}

int iabn_mdl_deeplab_net(iabn_graph *g, const iabn_model_cfg *cfg, int body, int x)
{
    iabn_model_cfg bc = *cfg;
    bc.dilation = 1;
    iabn_mctx mb, mh, mc;
    iabn_mdl_ctx(&mb, g, &bc, "body.");
    iabn_mdl_ctx(&mh, g, &bc, "head.");
    iabn_mdl_ctx(&mc, g, &bc, "");
    int h = body ? iabn_mdl_resnext_body(&mb, body, 0, x) : iabn_mdl_wrn_body(&mb, 1, x);
    h = iabn_mdl_deeplab_head(&mh, h, body == 14 ? 64 : 256);
    iabn_graph_begin_block(g, "cls");
    h = iabn_mdl_conv(&mc, "cls", h, cfg->classes, 1, 1, 1, 1, 1);
    if (h < 0) return -1;
    const iabn_tensor *in = iabn_graph_t(g, x);
    int oh = cfg->out_h > 0 ? cfg->out_h : in->shape[2], ow = cfg->out_w > 0 ? cfg->out_w : in->shape[3];
    return iabn_upsample_bilinear(g, "cls.upsample", h, oh, ow);
}
