/* registry.c: the models by name (a constant table), their defaults, the
 * build entry point, weight initialisation and the report rows. */
#include "models/models_internal.h"

#include <stdio.h>
#include <string.h>

typedef enum fam { F_RESNET, F_RESNEXT, F_WRN, F_DEEPLAB, F_VGG, F_MOBILENET, F_DENSENET } fam;

typedef struct entry {
    const char *name;
    fam family;
    int depth;      /* resnet / resnext depth, deeplab body (0 = WRN-38-A2)   */
    int variant;    /* resnet: IABN_RESNET_*; resnext: 64x4d widths; wrn: A2; vgg: BN; densenet: growth */
    const char *what;
} entry;

static const entry models[] = {
    {"resnet18", F_RESNET, 18, 0, "ResNet-18, post-activation basic units [2,2,2,2], OS 32"},
    {"resnet34", F_RESNET, 34, 0, "ResNet-34, post-activation basic units [3,4,6,3], OS 32"},
    {"resnet50", F_RESNET, 50, 0, "ResNet-50, post-activation bottlenecks [3,4,6,3], OS 32"},
    {"resnet101", F_RESNET, 101, 0, "ResNet-101, post-activation bottlenecks [3,4,23,3], OS 32"},
    {"resnet152", F_RESNET, 152, 0, "ResNet-152, post-activation bottlenecks [3,8,36,3], OS 32"},
    {"resnext50_32x4d", F_RESNET, 50, IABN_RESNET_32X4D, "torchvision's ResNeXt-50 32x4d: post-activation, 3x3 in 32 groups, mod2 (128,128,256)"},
    {"resnext101_32x8d", F_RESNET, 101, IABN_RESNET_32X8D, "torchvision's ResNeXt-101 32x8d: post-activation, 3x3 in 32 groups, mod2 (256,256,256)"},
    {"wide_resnet50_2", F_RESNET, 50, IABN_RESNET_WIDE2, "torchvision's Wide ResNet-50-2: post-activation bottlenecks twice as wide, mod2 (128,128,256)"},
    {"wide_resnet101_2", F_RESNET, 101, IABN_RESNET_WIDE2, "torchvision's Wide ResNet-101-2: post-activation bottlenecks twice as wide, mod2 (128,128,256)"},
    {"resnext50", F_RESNEXT, 50, 0, "pre-activation ResNeXt-50 [3,4,6,3], 64 groups, mod2 (128,128,256)"},
    {"resnext101", F_RESNEXT, 101, 0, "pre-activation ResNeXt-101 [3,4,23,3], 64 groups, mod2 (128,128,256)"},
    {"resnext152", F_RESNEXT, 152, 0, "pre-activation ResNeXt-152 [3,8,36,3], 64 groups, mod2 (128,128,256)"},
    {"resnext_tiny", F_RESNEXT, 14, 0, "pre-activation ResNeXt [1,1,1,1], 8 groups, mod2 (32,32,64): demo and tests"},
    {"resnext101_64x4d", F_RESNEXT, 101, 1, "pre-activation ResNeXt-101 64x4d, mod2 (256,256,256)"},
    {"resnext152_64x4d", F_RESNEXT, 152, 1, "pre-activation ResNeXt-152 64x4d, mod2 (256,256,256)"},
    {"wider_resnet38", F_WRN, 38, 0, "WideResNet-38, max pool before mod2..mod6, OS 32"},
    {"wider_resnet38_a2", F_WRN, 38, 1, "WideResNet-38 A2, strided mod4..mod6 (OS 32) or dilated (OS 8), dropout in mod6/mod7"},
    {"deeplabv3_wider_resnet38_a2", F_DEEPLAB, 0, 0, "DeepLabV3 on dilated WideResNet-38 A2 (OS 8), cls 1x1, upsampled logits"},
    {"deeplabv3_resnext101", F_DEEPLAB, 101, 0, "DeepLabV3 on ResNeXt-101 dilated in mod4/mod5 (OS 8), cls 1x1, upsampled logits"},
    {"deeplabv3_resnext152", F_DEEPLAB, 152, 0, "DeepLabV3 on ResNeXt-152 dilated in mod4/mod5 (OS 8), cls 1x1, upsampled logits"},
    {"deeplabv3_resnext_tiny", F_DEEPLAB, 14, 0, "DeepLabV3 (64 hidden) on resnext_tiny dilated (OS 8): demo and tests"},
    {"densenet121", F_DENSENET, 121, 32, "DenseNet-121 [6,12,24,16], growth 32, bottleneck 4, theta 0.5"},
    {"densenet161", F_DENSENET, 161, 48, "DenseNet-161 [6,12,36,24], growth 48, bottleneck 4, theta 0.5"},
    {"densenet169", F_DENSENET, 169, 32, "DenseNet-169 [6,12,32,32], growth 32, bottleneck 4, theta 0.5"},
    {"densenet201", F_DENSENET, 201, 32, "DenseNet-201 [6,12,48,32], growth 32, bottleneck 4, theta 0.5"},
    {"densenet264", F_DENSENET, 264, 32, "DenseNet-264 [6,12,64,48], growth 32, bottleneck 4, theta 0.5"},
    {"vgg19", F_VGG, 19, 0, "VGG-19, torchvision layout, no BN, dropout 0.5 in the classifier"},
    {"vgg19_bn", F_VGG, 19, 1, "VGG-19 with a BN+act unit after each conv (torchvision's vgg19_bn)"},
    {"mobilenet_v1", F_MOBILENET, 0, 0, "MobileNet v1, width 1.0, depthwise-separable units with BN+act"},
};

enum { NMODELS = sizeof models / sizeof models[0] };

static const char *const names[NMODELS] = {
    "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
    "resnext50_32x4d", "resnext101_32x8d", "wide_resnet50_2", "wide_resnet101_2",
    "resnext50", "resnext101", "resnext152", "resnext_tiny", "resnext101_64x4d", "resnext152_64x4d",
    "wider_resnet38", "wider_resnet38_a2",
    "deeplabv3_wider_resnet38_a2", "deeplabv3_resnext101", "deeplabv3_resnext152",
    "deeplabv3_resnext_tiny",
    "densenet121", "densenet161", "densenet169", "densenet201", "densenet264",
    "vgg19", "vgg19_bn", "mobilenet_v1",
};

static const entry *find(const char *arch)
{
    for (int i = 0; arch && i < NMODELS; i++)
        if (strcmp(models[i].name, arch) == 0) return &models[i];
    return NULL;
}

const char *const *iabn_model_names(int *count)
{
    if (count) *count = NMODELS;
    return names;
}

int iabn_model_exists(const char *arch) { return find(arch) != NULL; }

int iabn_model_is_segmentation(const char *arch)
{
    const entry *m = find(arch);
    return m && m->family == F_DEEPLAB;
}

const char *iabn_model_describe(const char *arch)
{
    const entry *m = find(arch);
    return m ? m->what : NULL;
}

iabn_model_cfg iabn_model_defaults(const char *arch)
{
    iabn_model_cfg c;
    memset(&c, 0, sizeof c);
    const entry *m = find(arch);
    c.arch = arch;
    c.classes = m && m->family == F_DEEPLAB ? 65 : 1000;
    if (m && m->family == F_DEEPLAB) c.pool_h = c.pool_w = 84;
    c.bn = IABN_BN_INPLACE_II;
    c.act.kind = IABN_ACT_LEAKY_RELU;
    c.act.param = iabn_act_default_param(IABN_ACT_LEAKY_RELU);
    c.input_3x3 = 1;
    c.eps = 1e-5f;
    c.momentum = 0.1f;
    if (m && (m->family == F_VGG || m->family == F_MOBILENET)) {
        c.bn = IABN_BN_STANDARD;
        c.act.kind = IABN_ACT_RELU;
        c.act.param = 0.f;
    }
    return c;
}

/* layers per dense module (the reference's _NETS; 161 is torchvision's) */
static const int *densenet_layers(int depth)
{
    static const int l121[4] = {6, 12, 24, 16}, l161[4] = {6, 12, 36, 24},
                     l169[4] = {6, 12, 32, 32}, l201[4] = {6, 12, 48, 32},
                     l264[4] = {6, 12, 64, 48};
    return depth == 161 ? l161 : depth == 169 ? l169 : depth == 201 ? l201
         : depth == 264 ? l264 : l121;
}

static void list_names(char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < NMODELS && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", names[i]);
}

int iabn_model_build(iabn_graph *g, const iabn_model_cfg *cfg, int input, int *logits)
{
    if (logits) *logits = -1;
    if (!iabn_graph_ok(g)) return iabn_graph_error(g)->code;
    const entry *m = find(cfg->arch);
    if (!m) {
        char known[768];
        list_names(known, sizeof known);
        return iabn_graph_fail(g, IABN_EINVAL, "unknown model '%s' (known: %s)",
                               cfg->arch ? cfg->arch : "(null)", known);
    }
    if (input < 0 || input >= iabn_graph_ntensors(g))
        return iabn_graph_fail(g, IABN_EINVAL, "%s: no input tensor", m->name);
    const iabn_tensor *in = iabn_graph_t(g, input);
    if (in->nd != 4 || in->shape[1] != 3 || in->dtype != IABN_F32)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: input %s must be float32 N,3,H,W", m->name,
                               in->name);
    if (cfg->classes < 1)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: %d classes", m->name, cfg->classes);
    iabn_mctx c;
    iabn_mdl_ctx(&c, g, cfg, "");
    int h = -1;
    switch (m->family) {
    case F_RESNET:
        h = iabn_mdl_classifier(&c, iabn_mdl_resnet_body(&c, m->depth, m->variant, input));
        break;
    case F_RESNEXT:
        h = iabn_mdl_classifier(&c, iabn_mdl_resnext_body(&c, m->depth, m->variant, input));
        break;
    case F_WRN:
        h = iabn_mdl_classifier(&c, iabn_mdl_wrn_body(&c, m->variant, input));
        break;
    case F_DEEPLAB:
        h = iabn_mdl_deeplab_net(g, cfg, m->depth, input);
        break;
    case F_VGG:
        h = iabn_mdl_vgg19(&c, m->variant, input);
        break;
    case F_MOBILENET:
        h = iabn_mdl_classifier(&c, iabn_mdl_mobilenet_body(&c, input));
        break;
    case F_DENSENET:
        h = iabn_mdl_classifier(&c, iabn_mdl_densenet_body(&c, m->variant, densenet_layers(m->depth),
                                                           input));
        break;
    }
    if (!iabn_graph_ok(g) || h < 0) {
        const iabn_err *e = iabn_graph_error(g);
        if (!e->code) return iabn_graph_fail(g, IABN_EINVAL, "%s: build failed", m->name);
        return e->code;
    }
    if (logits) *logits = h;
    return 0;
}

int iabn_model_init(iabn_store *s, const iabn_model_cfg *cfg, uint64_t seed, iabn_err *e)
{
    return iabn_init_params(s, IABN_INIT_XAVIER_NORMAL, cfg->act, seed, e);
}

int iabn_model_blocks(const iabn_graph *g, iabn_model_block *out, int max)
{
    int nb = iabn_graph_block_count(g);
    for (int b = 0; b < nb && b < max; b++) {
        const char *name = iabn_graph_block_name(g, b);
        out[b].id = b;
        out[b].name = name;
        snprintf(out[b].module, sizeof out[b].module, "%s", name);
        /* "x.mod2.block3" rolls up into "x.mod2" */
        char *dot = strrchr(out[b].module, '.');
        if (dot && strncmp(dot, ".block", 6) == 0) *dot = 0;
    }
    return nb;
}
