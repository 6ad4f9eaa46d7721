/* blocks.c: the pieces every model file uses: prefixed names, the BN+act
 * units configured from the model config, the pre-activation residual block
 * (the reference's IdentityResidualBlock) and the classifier. */
#include "models/models_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void iabn_mdl_ctx(iabn_mctx *m, iabn_graph *g, const iabn_model_cfg *cfg, const char *prefix)
{
    memset(m, 0, sizeof *m);
    m->g = g;
    m->cfg = cfg;
    m->prefix = prefix ? prefix : "";
    m->na = iabn_norm_act_defaults(cfg->bn);
    m->na.act = cfg->act;
    m->na.eps = cfg->eps;
    m->na.momentum = cfg->momentum;
    m->na.frozen = cfg->frozen_bn;
    m->na_id = m->na;
    m->na_id.act.kind = IABN_ACT_IDENTITY;
    m->na_id.act.param = 0.f;
}

const char *iabn_mdl_name(const iabn_mctx *m, char *buf, const char *fmt, ...)
{
    int k = snprintf(buf, IABN_NAME_LEN, "%s", m->prefix);
    if (k < 0 || k >= IABN_NAME_LEN) k = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + k, (size_t)(IABN_NAME_LEN - k), fmt, ap);
    va_end(ap);
    return buf;
}

void iabn_mdl_block(const iabn_mctx *m, const char *fmt, ...)
{
    char tail[IABN_NAME_LEN], full[IABN_NAME_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tail, sizeof tail, fmt, ap);
    va_end(ap);
    iabn_graph_begin_block(m->g, iabn_mdl_name(m, full, "%s", tail));
}

/* The reference's padding: the map keeps its size at stride 1. */
static int same_pad(int k, int dil) { return k == 1 ? 0 : dil * (k - 1) / 2; }

int iabn_mdl_conv(const iabn_mctx *m, const char *name, int x, int c_out, int k, int stride,
                  int dil, int groups, int bias)
{
    char full[IABN_NAME_LEN];
    return iabn_conv2d(m->g, iabn_mdl_name(m, full, "%s", name), x, c_out, k, stride,
                       same_pad(k, dil), dil, groups, bias);
}

int iabn_mdl_bn(const iabn_mctx *m, const char *name, int x, int identity)
{
    char full[IABN_NAME_LEN];
    return iabn_norm_act(m->g, iabn_mdl_name(m, full, "%s", name), x,
                         identity ? &m->na_id : &m->na);
}

int iabn_mdl_channels(const iabn_mctx *m, int x)
{
    return x < 0 ? 0 : iabn_graph_t(m->g, x)->shape[1];
}

/* name + "." + part, for the sub-layers of a block */
static const char *sub(char *buf, const char *name, const char *part)
{
    snprintf(buf, IABN_NAME_LEN, "%.60s.%s", name, part);
    return buf;
}

void iabn_mdl_resnet_schedule(const iabn_mctx *m, int stage, int b, int *stride, int *dil)
{
    static const int dilation[4] = {1, 1, 2, 4};
    *dil = m->cfg->dilation ? dilation[stage] : 1;
    *stride = *dil == 1 && b == 0 && stage > 0 ? 2 : 1;
}

int iabn_mdl_preact_block(const iabn_mctx *m, const char *name, int x, const int *ch, int nch,
                          int stride, int dil, int groups, float drop)
{
    if (x < 0 || !iabn_graph_ok(m->g)) return -1;
    char n[IABN_NAME_LEN], full[IABN_NAME_LEN];
    int c_in = iabn_mdl_channels(m, x);
    int bn1 = iabn_mdl_bn(m, sub(n, name, "bn1"), x, 0);
    /* The identity shortcut reads x after bn1 in the in-place modes: where the
     * reference clones x, iabn_graph_finalize has bn1 write z to a buffer of
     * its own (the same memory as the clone, in bn1's pass). */
    int shortcut = x;
    if (stride != 1 || c_in != ch[nch - 1])
        shortcut = iabn_mdl_conv(m, sub(n, name, "proj_conv"), bn1, ch[nch - 1], 1, stride, 1, 1, 0);
    int h;
    if (nch == 2) {
        h = iabn_mdl_conv(m, sub(n, name, "convs.conv1"), bn1, ch[0], 3, stride, dil, 1, 0);
        h = iabn_mdl_bn(m, sub(n, name, "convs.bn2"), h, 0);
    } else {
        h = iabn_mdl_conv(m, sub(n, name, "convs.conv1"), bn1, ch[0], 1, stride, 1, 1, 0);
        h = iabn_mdl_bn(m, sub(n, name, "convs.bn2"), h, 0);
        h = iabn_mdl_conv(m, sub(n, name, "convs.conv2"), h, ch[1], 3, 1, dil, groups, 0);
        h = iabn_mdl_bn(m, sub(n, name, "convs.bn3"), h, 0);
    }
    if (drop > 0.f && !m->cfg->no_dropout)
        h = iabn_dropout2d(m->g, iabn_mdl_name(m, full, "%s", sub(n, name, "convs.dropout")), h,
                           drop);
    /* The last conv adds the shortcut as it writes (iabn_conv2d_add).  Where
     * nothing reads the shortcut afterwards (a projection, or x in the
     * in-place modes: bn1 wrote z elsewhere) the sum overwrites it; in the
     * other modes x is bn1's saved input, and the sum gets a buffer of its
     * own (the backend reads x in the convolution's output pass). */
    int k = nch == 2 ? 3 : 1, d = nch == 2 ? dil : 1;
    char last[IABN_NAME_LEN];
    iabn_mdl_name(m, last, "%s", sub(n, name, nch == 2 ? "convs.conv2" : "convs.conv3"));
    iabn_mdl_name(m, full, "%s", name);
    return iabn_conv2d_add(m->g, last, full, h, shortcut, ch[nch - 1], k, 1, same_pad(k, d), d,
                           1, 0);
}

int iabn_mdl_classifier(const iabn_mctx *m, int x)
{
    char n[IABN_NAME_LEN];
    iabn_mdl_block(m, "classifier");
    int h = iabn_global_avgpool(m->g, iabn_mdl_name(m, n, "classifier.avg_pool"), x);
    return iabn_linear(m->g, iabn_mdl_name(m, n, "classifier.fc"), h, m->cfg->classes, 1);
}
