/* cmd_export.c: `iabn export CHECKPOINT -o OUT --format safetensors|onnx
 * [--fold-bn]`.  The writing is tools/export.py (python3-onnx builds the
 * ONNX file); this file gives it what only iabn knows, the model's evaluation
 * graph, through a subcommand of its own:
 *
 *     iabn export --graph ARCH --classes K [--act KIND[:PARAM]] [--bn MODE]
 *                 [--input-3x3 0|1] [--dilation 0|1] [--size HxW]
 *
 * prints {"input": {...}, "output": NAME, "tensors": {NAME: {"shape", "kind"}},
 * "nodes": [{"name", "in", "out", "attrs"}]}: the forward nodes in order, each
 * described by iabn_layer_describe. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iabn.h"
#include "tools/cli.h"
#include "tools/commands.h"

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

static void print_shape(const iabn_tensor *t)
{
    printf("[");
    for (int d = 0; d < t->nd; d++) printf(d ? ", %d" : "%d", t->shape[d]);
    printf("]");
}

static int parse_act(const char *s, iabn_act *a)
{
    char kind[32];
    const char *colon = strchr(s, ':');
    size_t k = colon ? (size_t)(colon - s) : strlen(s);
    if (k >= sizeof kind) return -1;
    memcpy(kind, s, k);
    kind[k] = 0;
    static const struct { const char *name; iabn_act_kind kind; float param; } acts[] = {
        {"identity", IABN_ACT_IDENTITY, 0.f}, {"relu", IABN_ACT_RELU, 0.f},
        {"leaky_relu", IABN_ACT_LEAKY_RELU, 0.01f}, {"elu", IABN_ACT_ELU, 1.f}};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        if (strcmp(kind, acts[i].name)) continue;
        a->kind = acts[i].kind;
        a->param = acts[i].param;
        double v;
        if (colon && iabn_parse_float(colon + 1, &v)) return -1;
        if (colon) a->param = (float)v;
        return 0;
    }
    return -1;
}

static int dump_graph(int argc, char **argv)
{
    const char *cmd = "iabn export --graph";
    if (argc < 3) {
        fprintf(stderr, "%s: needs a model name\n", cmd);
        return 2;
    }
    const char *arch = argv[2];
    if (!iabn_model_exists(arch)) {
        fprintf(stderr, "%s: unknown model '%s' (iabn models)\n", cmd, arch);
        return 2;
    }
    iabn_model_cfg mc = iabn_model_defaults(arch);
    int h = iabn_model_is_segmentation(arch) ? 512 : 224, w = h;
    for (int i = 3; i < argc; i++) {
        const char *f = argv[i], *v = iabn_flag_value(argc, argv, &i, cmd);
        long long n = 0;
        if (!v) return 2;
        int bad = 0;
        if (!strcmp(f, "--classes")) bad = iabn_parse_int(v, &n) || n < 1, mc.classes = (int)n;
        else if (!strcmp(f, "--input-3x3")) bad = iabn_parse_int(v, &n) || n < 0 || n > 1, mc.input_3x3 = (int)n;
        else if (!strcmp(f, "--dilation")) bad = iabn_parse_int(v, &n) || n < 0 || n > 1, mc.dilation = (int)n;
        else if (!strcmp(f, "--act")) bad = parse_act(v, &mc.act);
        else if (!strcmp(f, "--bn")) bad = iabn_bn_mode_parse(v, &mc.bn, NULL) != 0;
        else if (!strcmp(f, "--size")) bad = iabn_parse_hw(v, &h, &w) || h < 1 || w < 1;
        else {
            fprintf(stderr, "%s: unknown option '%s'\n", cmd, f);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "%s: bad value '%s' for %s\n", cmd, v, f);
            return 2;
        }
    }
    iabn_err e = {0};
    iabn_store *s = iabn_store_new_virtual(iabn_backend_cpu(), &e);
    if (!s) {
        fprintf(stderr, "%s: %s\n", cmd, e.msg);
        return 1;
    }
    iabn_graph *g = iabn_graph_new(s, IABN_EVAL);
    int xs[4] = {1, 3, h, w};
    int x = iabn_graph_input(g, "input", IABN_F32, 4, xs), logits = -1;
    int rc = iabn_model_build(g, &mc, x, &logits);
    if (rc) {
        fprintf(stderr, "%s: %s\n", cmd, iabn_graph_error(g)->msg);
        iabn_graph_free(g);
        iabn_store_free(s);
        return 1;
    }
    int nn = iabn_graph_nnodes(g);
    printf("{\"input\": {\"name\": \"%s\", \"shape\": ", iabn_graph_t(g, x)->name);
    print_shape(iabn_graph_t(g, x));
    printf("},\n \"output\": \"%s\",\n \"tensors\": {", iabn_graph_t(g, logits)->name);
    for (int t = 0; t < iabn_graph_ntensors(g); t++) {
        const iabn_tensor *tt = iabn_graph_t(g, t);
        printf("%s\n  \"%s\": {\"shape\": ", t ? "," : "", tt->name);
        print_shape(tt);
        printf(", \"kind\": \"%s\"}", kind_name(tt->kind));
    }
    printf("},\n \"nodes\": [");
    int first = 1;
    for (int k = 0; k < nn && !rc; k++) {
        char attrs[512];
        const iabn_node *nd = iabn_graph_n(g, k);
        if (nd->phase != IABN_PHASE_FWD) continue;
        if (iabn_layer_describe(g, k, attrs, sizeof attrs)) {
            fprintf(stderr, "%s: node %s (op %s) has no inference form\n", cmd, nd->name,
                    nd->op->name);
            rc = 1;
            break;
        }
        printf("%s\n  {\"name\": \"%s\", \"attrs\": %s, \"in\": [", first ? "" : ",", nd->name, attrs);
        for (int i = 0; i < nd->nin; i++) printf(i ? ", \"%s\"" : "\"%s\"", iabn_graph_t(g, nd->in[i])->name);
        printf("], \"out\": [");
        for (int j = 0; j < nd->nout; j++) printf(j ? ", \"%s\"" : "\"%s\"", iabn_graph_t(g, nd->out[j])->name);
        printf("]}");
        first = 0;
    }
    printf("\n]}\n");
    iabn_graph_free(g);
    iabn_store_free(s);
    return rc;
}

int iabn_cmd_export(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "--graph")) return dump_graph(argc, argv);
    return iabn_run_script("export", "export.py", argc, argv);
}
