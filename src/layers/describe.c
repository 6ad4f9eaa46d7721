/* describe.c: a forward node's operation as JSON, for exporters (`iabn
 * export` writes ONNX from it): the op's inference meaning and attributes,
 * decoded from the node's parameter bytes, which only src/layers knows. */
#include "layers/layer_util.h"
#include "layers/layer_params.h"

#include <stdarg.h>

static int put(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return k < 0 || (size_t)k >= n ? -1 : 0;
}

static const char *act_str(iabn_act a, char *tmp, size_t n)
{
    snprintf(tmp, n, "\"act\": \"%s\", \"act_param\": %.9g", iabn_act_name(a.kind), (double)a.param);
    return tmp;
}

int iabn_layer_describe(const iabn_graph *g, int node, char *buf, size_t n)
{
    const iabn_node *nd = iabn_graph_n(g, node);
    const char *op = nd->op->name;
    char a[96];
    if (nd->phase != IABN_PHASE_FWD) return -1;
    if (!strcmp(op, "conv2d")) {
        IABN_PARAMS(conv_p, nd);
        return put(buf, n,
                   "{\"op\": \"conv2d\", \"kernel\": [%d, %d], \"stride\": %d, \"pad\": %d, "
                   "\"dilation\": %d, \"groups\": %d, \"bias\": %d}",
                   P.geom.kh, P.geom.kw, P.geom.stride, P.geom.pad, P.geom.dil, P.geom.groups,
                   P.bias);
    }
    if (!strcmp(op, "norm_act_eval") || !strcmp(op, "bn") || !strcmp(op, "inplace_abn") ||
        !strcmp(op, "norm_act_ckpt_opt")) {
        IABN_PARAMS(na_p, nd);
        /* a training-mode "bn" node is followed by its own "act" node */
        iabn_act act = P.act;
        if (!strcmp(op, "bn")) act.kind = IABN_ACT_IDENTITY;
        return put(buf, n, "{\"op\": \"batchnorm\", \"eps\": %.9g, \"abs_gamma\": %d, %s}",
                   (double)P.eps, P.abs_gamma, act_str(act, a, sizeof a));
    }
    if (!strcmp(op, "act")) {
        IABN_PARAMS(na_p, nd);
        return put(buf, n, "{\"op\": \"activation\", %s}", act_str(P.act, a, sizeof a));
    }
    if (!strcmp(op, "maxpool")) {
        IABN_PARAMS(pool_p, nd);
        return put(buf, n, "{\"op\": \"maxpool\", \"kernel\": %d, \"stride\": %d, \"pad\": %d}",
                   P.k, P.s, P.p);
    }
    if (!strcmp(op, "linear")) {
        IABN_PARAMS(lin_p, nd);
        return put(buf, n, "{\"op\": \"linear\", \"bias\": %d}", P.bias);
    }
    if (!strcmp(op, "avgpool_window")) {
        IABN_PARAMS(avg_p, nd);
        return put(buf, n,
                   "{\"op\": \"avgpool_window\", \"kernel\": [%d, %d], \"stride\": [%d, %d], "
                   "\"pooled\": [%d, %d], \"top_left\": [%d, %d]}",
                   P.kh, P.kw, P.sh, P.sw, P.ph, P.pw, P.top, P.left);
    }
    static const char *const plain[] = {"add", "add_bcast", "concat", "global_avgpool",
                                        "upsample_bilinear", "copy", "dropout2d"};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (!strcmp(op, plain[i])) return put(buf, n, "{\"op\": \"%s\"}", op);
    return -1;
}
