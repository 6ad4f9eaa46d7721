/* cmd_models.c: `iabn models`, the hub of names: every model of the registry
 * with its parameter count, default input, the reference experiment configs
 * that train it, whether published reference (or torchvision) weights exist
 * for `iabn convert`, and the memory of a training step at batch 32 with
 * in-place ABN relative to standard BN (planned, nothing allocated). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iabn.h"
#include "tools/commands.h"
#include "tools/options.h"

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

/* The parameter count of arch and, with batch > 0, the planned memory of a
 * training step in standard BN and in inplace_abn_ii (nothing allocated). */
static int measure(const char *arch, int batch, size_t *params, size_t *std_b, size_t *ip_b,
                   iabn_err *e)
{
    iabn_session_cfg c;
    iabn_session_cfg_defaults(&c);
    c.model = arch;
    c.train = 0;
    c.loss = IABN_LOSS_NONE;
    c.plan_only = 1;
    c.height = c.width = iabn_model_is_segmentation(arch) ? 512 : 224;
    iabn_session s;
    int rc = iabn_session_build(&c, &s, e);
    if (!rc) *params = s.mem.params;
    iabn_session_free(&s);
    if (rc || batch < 1) return rc;
    iabn_memreport_opts o;
    iabn_memreport_opts_defaults(&o);
    o.model = arch;
    o.batch = batch;
    iabn_memreport_col cols[2] = {{.mode = IABN_BN_STANDARD}, {.mode = IABN_BN_INPLACE_II}};
    iabn_memreport r;
    if ((rc = iabn_memreport_build(&o, cols, 2, &r, e))) return rc;
    *std_b = r.col[0].m.arena;
    *ip_b = r.col[1].m.arena;
    iabn_memreport_free(&r);
    return 0;
}

int iabn_cmd_models(int argc, char **argv)
{
    iabn_args a;
    int rc = iabn_args_parse(&a, IABN_C_MODELS, argc, argv);
    if (rc) return rc == IABN_ARGS_HELP ? 0 : 2;
    int json = a.v[IABN_O_JSON].set, memory = !a.v[IABN_O_NO_MEMORY].set;
    long long batch = a.v[IABN_O_BATCH].set ? a.v[IABN_O_BATCH].i : 32;
    int n = 0;
    const char *const *names = iabn_model_names(&n);
    if (json) printf("[\n");
    else
        printf("%-28s %11s %9s %8s  %-44s %s\n", "model", "parameters", "input", memory ? "iabn/std" : "",
               "reference configs", "weights to convert");
    for (int i = 0; i < n && !rc; i++) {
        iabn_err e = {0};
        int side = iabn_model_is_segmentation(names[i]) ? 512 : 224;
        size_t params = 0, std_b = 0, ip_b = 0;
        rc = measure(names[i], memory ? (int)batch : 0, &params, &std_b, &ip_b, &e);
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
