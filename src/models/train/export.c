/* export.c: a model's evaluation graph as JSON (see export.h). */
#include "models/train/export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *kind_name(iabn_tkind k)
{
    switch (k) {
    case IABN_T_PARAM: return "param";
    case IABN_T_STATE: return "state";
    case IABN_T_INPUT: return "input";
    case IABN_T_OUTPUT: return "output";
    default: return "activation";
    }
}

static void print_shape(FILE *f, const iabn_tensor *t)
{
    fprintf(f, "[");
    for (int d = 0; d < t->nd; d++) fprintf(f, d ? ", %d" : "%d", t->shape[d]);
    fprintf(f, "]");
}

/* The forward nodes of g as the JSON list's items; nonzero when one has no
 * inference form. */
static int print_nodes(FILE *f, const iabn_graph *g, iabn_err *e)
{
    int first = 1;
    for (int k = 0; k < iabn_graph_nnodes(g); k++) {
        char attrs[512];
        const iabn_node *nd = iabn_graph_n(g, k);
        if (nd->phase != IABN_PHASE_FWD) continue;
        if (iabn_layer_describe(g, k, attrs, sizeof attrs))
            return iabn_err_set(e, IABN_EINVAL, "node %s (op %s) has no inference form", nd->name,
                                nd->op->name);
        fprintf(f, "%s\n  {\"name\": \"%s\", \"attrs\": %s, \"in\": [", first ? "" : ",", nd->name,
                attrs);
        for (int i = 0; i < nd->nin; i++)
            fprintf(f, i ? ", \"%s\"" : "\"%s\"", iabn_graph_t(g, nd->in[i])->name);
        fprintf(f, "], \"out\": [");
        for (int j = 0; j < nd->nout; j++)
            fprintf(f, j ? ", \"%s\"" : "\"%s\"", iabn_graph_t(g, nd->out[j])->name);
        fprintf(f, "]}");
        first = 0;
    }
    return 0;
}

char *iabn_export_graph_json(const iabn_model_cfg *mc, int height, int width, iabn_err *e)
{
    iabn_store *s = iabn_store_new_virtual(iabn_backend_cpu(), e);
    if (!s) return NULL;
    iabn_graph *g = iabn_graph_new(s, IABN_EVAL);
    /* the model's layers as their reference has them, not fused for speed */
    if (g) iabn_graph_set_fusion(g, 0);
    int xs[4] = {1, 3, height, width};
    int x = iabn_graph_input(g, "input", IABN_F32, 4, xs), logits = -1;
    int rc = iabn_model_build(g, mc, x, &logits);
    if (rc) *e = *iabn_graph_error(g);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = rc ? NULL : open_memstream(&buf, &len);
    if (!rc && !f) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
    if (!rc) {
        fprintf(f, "{\"input\": {\"name\": \"%s\", \"shape\": ", iabn_graph_t(g, x)->name);
        print_shape(f, iabn_graph_t(g, x));
        fprintf(f, "},\n \"output\": \"%s\",\n \"tensors\": {", iabn_graph_t(g, logits)->name);
        for (int t = 0; t < iabn_graph_ntensors(g); t++) {
            const iabn_tensor *tt = iabn_graph_t(g, t);
            fprintf(f, "%s\n  \"%s\": {\"shape\": ", t ? "," : "", tt->name);
            print_shape(f, tt);
            fprintf(f, ", \"kind\": \"%s\"}", kind_name(tt->kind));
        }
        fprintf(f, "},\n \"nodes\": [");
        rc = print_nodes(f, g, e);
        fprintf(f, "\n]}\n");
        int bad = ferror(f);
        if (fclose(f) || bad) rc = rc ? rc : iabn_err_set(e, IABN_ENOMEM, "out of memory");
    }
    iabn_graph_free(g);
    iabn_store_free(s);
    if (rc) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* The reference repository's experiment configs and weights per model. */
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

const char *iabn_model_reference_configs(const char *model)
{
    const ref_entry *r = ref_of(model);
    return r ? r->configs : NULL;
}

const char *iabn_model_reference_weights(const char *model)
{
    const ref_entry *r = ref_of(model);
    return r ? r->weights : NULL;
}
