/* cmd_models.c: `iabn models`, the hub of names: every model of the registry
 * with its parameter count, default input, the reference experiment configs
 * that train it, whether published reference (or torchvision) weights exist
 * for `iabn convert`, and the memory of a training step at batch 32 with
 * in-place ABN relative to standard BN (planned, nothing allocated).
 *
 *     iabn models [--json] [--no-memory] [--batch N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iabn.h"
#include "tools/cli.h"
#include "tools/commands.h"

/* What the reference repository publishes for each model: the experiment
 * configs under its scripts/experiments (and our segmentation configs), and
 * the weights its README links (ImageNet snapshots, the Vistas DeepLabV3). */
typedef struct ref_entry {
    const char *arch, *configs, *weights;
} ref_entry;

static const ref_entry refs[] = {
    {"resnet34", "resnet34_ipabn-sync_lr_512", "reference ImageNet (resnet34_ipabn-sync); torchvision"},
    {"resnet50", "resnet50_ipabn-sync_lr_512", "reference ImageNet (resnet50_ipabn-sync); torchvision"},
    {"resnet101", "resnet101_ipabn-sync_lr_512", "reference ImageNet (resnet101_ipabn-sync); torchvision"},
    {"resnet18", "", "torchvision"},
    {"resnet152", "", "torchvision"},
    {"resnext50_32x4d", "", "torchvision"},
    {"resnext101_32x8d", "", "torchvision"},
    {"wide_resnet50_2", "", "torchvision"},
    {"wide_resnet101_2", "", "torchvision"},
    {"resnext101",
     "resnext101_ipabn_lr_512, resnext101_ipabn-sync_lr_256, resnext101_stdbn_lr_256",
     "reference ImageNet (resnext101_ipabn_lr_512, _ipabn-sync_lr_256, _stdbn_lr_256)"},
    {"resnext152", "resnext152_ipabn_lr_256", "reference ImageNet (resnext152_ipabn_lr_256)"},
    {"wider_resnet38", "wider_resnet38_ipabn_lr_256", "reference ImageNet (wider_resnet38_ipabn_lr_256)"},
    {"densenet264", "densenet264_ipabn_lr_256", "reference ImageNet (densenet264_ipabn_lr_256)"},
    {"deeplabv3_wider_resnet38_a2", "vistas_wrn38_deeplabv3, cityscapes_wrn38_deeplabv3",
     "reference Vistas (wide_resnet38_deeplab_vistas)"},
};

static const ref_entry *ref_of(const char *arch)
{
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++)
        if (!strcmp(refs[i].arch, arch)) return &refs[i];
    return NULL;
}

/* Builds arch on a virtual store: parameters (eval graph at the default
 * input), or with mode >= 0 the planned arena of a training step at `batch`. */
static int measure(const char *arch, int mode, int batch, int side, size_t *out, iabn_err *e)
{
    iabn_store *s = iabn_store_new_virtual(iabn_backend_cpu(), e);
    if (!s) return e->code;
    iabn_graph *g = iabn_graph_new(s, mode >= 0 ? IABN_TRAIN : IABN_EVAL);
    iabn_model_cfg mc = iabn_model_defaults(arch);
    if (mode >= 0) {
        mc.bn = (iabn_bn_mode)mode;
        if (iabn_bn_mode_is_inplace(mc.bn) && mc.act.kind == IABN_ACT_RELU) {
            mc.act.kind = IABN_ACT_LEAKY_RELU;
            mc.act.param = 0.01f;
        }
    }
    int seg = iabn_model_is_segmentation(arch);
    int xs[4] = {batch, 3, side, side}, ls[3] = {batch, side, side};
    int x = iabn_graph_input(g, "input", IABN_F32, 4, xs), logits = -1;
    int rc = iabn_model_build(g, &mc, x, &logits);
    if (rc) *e = *iabn_graph_error(g);
    iabn_plan *p = NULL;
    if (!rc && mode < 0) {
        size_t bytes, grads, opt, bufs;
        iabn_store_totals(s, out, &bytes, &grads, &opt, &bufs);
    } else if (!rc) {
        int lab = iabn_graph_input(g, "labels", IABN_I32, seg ? 3 : 1, ls);
        int loss = iabn_softmax_xent(g, "loss", logits, lab, 255, 1.f);
        rc = iabn_graph_backward(g, loss, e);
        if (!rc) rc = iabn_graph_finalize(g, e);
        if (!rc) rc = iabn_plan_build(g, NULL, &p, e);
        if (!rc) *out = p->arena_bytes;
        iabn_plan_free(p);
    }
    iabn_graph_free(g);
    iabn_store_free(s);
    return rc;
}

int iabn_cmd_models(int argc, char **argv)
{
    int json = 0, memory = 1;
    long long batch = 32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--no-memory")) {
            memory = 0;
        } else if (!strcmp(argv[i], "--batch")) {
            const char *v = iabn_flag_value(argc, argv, &i, "iabn models");
            if (!v) return 2;
            if (iabn_parse_int(v, &batch) || batch < 1 || batch > 4096) {
                fprintf(stderr, "iabn models: --batch must be an integer from 1 to 4096, not '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: iabn models [--json] [--no-memory] [--batch N]\n"
                   "  Every model: parameters, default input, the reference configs that train it,\n"
                   "  the published weights `iabn convert` reads for it, and the planned memory of a\n"
                   "  training step at batch N (32) with inplace_abn_ii relative to standard BN.\n");
            return 0;
        } else {
            fprintf(stderr, "iabn models: unknown option '%s' (iabn models --help)\n", argv[i]);
            return 2;
        }
    }
    int n = 0;
    const char *const *names = iabn_model_names(&n);
    if (json) printf("[\n");
    else
        printf("%-28s %11s %9s %8s  %-44s %s\n", "model", "parameters", "input", memory ? "iabn/std" : "",
               "reference configs", "weights to convert");
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        iabn_err e = {0};
        int side = iabn_model_is_segmentation(names[i]) ? 512 : 224;
        size_t params = 0, std_b = 0, ip_b = 0;
        rc = measure(names[i], -1, 1, side, &params, &e);
        if (!rc && memory) rc = measure(names[i], IABN_BN_STANDARD, (int)batch, side, &std_b, &e);
        if (!rc && memory) rc = measure(names[i], IABN_BN_INPLACE_II, (int)batch, side, &ip_b, &e);
        if (rc) {
            fprintf(stderr, "iabn models: %s: %s\n", names[i], e.msg);
            break;
        }
        const ref_entry *r = ref_of(names[i]);
        double ratio = std_b ? (double)ip_b / (double)std_b : 0;
        if (json) {
            printf("  {\"model\": \"%s\", \"parameters\": %zu, \"input\": [3, %d, %d], "
                   "\"reference_configs\": \"%s\", \"weights\": \"%s\"",
                   names[i], params, side, side, r ? r->configs : "", r ? r->weights : "");
            if (memory)
                printf(", \"batch\": %lld, \"standard_bytes\": %zu, \"inplace_abn_ii_bytes\": %zu, "
                       "\"ratio\": %.4f",
                       batch, std_b, ip_b, ratio);
            printf("}%s\n", i + 1 < n ? "," : "");
        } else {
            char in[24], ra[16] = "";
            snprintf(in, sizeof in, "%dx%d", side, side);
            if (memory) snprintf(ra, sizeof ra, "%.3f", ratio);
            printf("%-28s %11zu %9s %8s  %-44s %s\n", names[i], params, in, ra,
                   r && *r->configs ? r->configs : "-", r ? r->weights : "-");
        }
    }
    if (json && !rc) printf("]\n");
    if (!json && !rc && memory)
        printf("\niabn/std: planned memory of a training step at batch %lld, inplace_abn_ii over "
               "standard (both leaky_relu where the model's default is relu)\n", batch);
    return rc ? 1 : 0;
}
