/* cmd_export.c: `iabn export CHECKPOINT -o OUT --format safetensors|onnx
 * [--fold-bn]`.  The writing is tools/export.py (python3-onnx builds the
 * ONNX file); this file checks the flags against the option table, hands
 * them on in the script's spelling, and serves what only iabn knows, the
 * model's evaluation graph (models/train/export.h), as
 *
 *     iabn export --graph MODEL [--classes K] [--act ACT] [--act-param F]
 *                 [--bn MODE] [--no-input-3x3] [--dilation] [--size HxW] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iabn.h"
#include "tools/commands.h"
#include "tools/options.h"

/* The model the flags describe over mc's defaults; 0, or the exit status. */
static int model_flags(const iabn_args *a, iabn_model_cfg *mc)
{
    const iabn_optval *v = a->v;
    iabn_err e = {0};
    if (v[IABN_O_CLASSES].set) mc->classes = (int)v[IABN_O_CLASSES].i;
    if (v[IABN_O_NO_INPUT_3X3].set) mc->input_3x3 = 0;
    if (v[IABN_O_DILATED].set) mc->dilation = 1;
    if (v[IABN_O_ACT].set && iabn_act_parse(v[IABN_O_ACT].s, &mc->act.kind, &e)) goto bad;
    if (v[IABN_O_ACT].set) mc->act.param = iabn_act_default_param(mc->act.kind);
    if (v[IABN_O_ACT_PARAM].set) mc->act.param = (float)v[IABN_O_ACT_PARAM].f;
    if (v[IABN_O_BN].set && iabn_bn_mode_parse(v[IABN_O_BN].s, &mc->bn, &e)) goto bad;
    return 0;
bad:
    fprintf(stderr, "iabn export: %s\n", e.msg);
    return 2;
}

static int dump_graph(const iabn_args *a)
{
    const char *arch = a->npos ? a->pos[0] : a->v[IABN_O_MODEL].s;
    if (!arch || !iabn_model_exists(arch)) {
        fprintf(stderr, "iabn export --graph: unknown model '%s' (iabn models)\n", arch ? arch : "");
        return 2;
    }
    iabn_model_cfg mc = iabn_model_defaults(arch);
    int rc = model_flags(a, &mc), h = iabn_model_is_segmentation(arch) ? 512 : 224, w = h;
    if (rc) return rc;
    if (a->v[IABN_O_SIZE].set) h = a->v[IABN_O_SIZE].h, w = a->v[IABN_O_SIZE].w;
    iabn_err e = {0};
    char *json = iabn_export_graph_json(&mc, h, w, &e);
    if (!json) {
        fprintf(stderr, "iabn export --graph: %s\n", e.msg);
        return 1;
    }
    fputs(json, stdout);
    free(json);
    return 0;
}

int iabn_cmd_export(int argc, char **argv)
{
    iabn_args a;
    int rc = iabn_args_parse(&a, IABN_C_EXPORT, argc, argv);
    if (rc) return rc == IABN_ARGS_HELP ? 0 : 2;
    const iabn_optval *v = a.v;
    if (v[IABN_O_GRAPH].set) return dump_graph(&a);
    if (!a.npos || !v[IABN_O_OUTPUT].set || !v[IABN_O_FORMAT].set) {
        fprintf(stderr, "iabn export: CHECKPOINT, -o OUT and --format are required (iabn export "
                        "--help)\n");
        return 2;
    }
    /* export.py's spelling: --arch, --act KIND[:PARAM], --input-3x3 0, --dilation 1 */
    char act[64];
    snprintf(act, sizeof act, "%s%s%s", v[IABN_O_ACT].set ? v[IABN_O_ACT].s : "",
             v[IABN_O_ACT_PARAM].set ? ":" : "", v[IABN_O_ACT_PARAM].set ? v[IABN_O_ACT_PARAM].s : "");
    const char *args[24] = {"export", a.pos[0], "-o", v[IABN_O_OUTPUT].s, "--format",
                            v[IABN_O_FORMAT].s};
    int n = 6;
    static const struct { iabn_opt_id id; const char *flag, *value; } pass[] = {
        {IABN_O_FOLD_BN, "--fold-bn", NULL}, {IABN_O_MODEL, "--arch", ""}, {IABN_O_BN, "--bn", ""},
        {IABN_O_NO_INPUT_3X3, "--input-3x3", "0"}, {IABN_O_DILATED, "--dilation", "1"},
        {IABN_O_SIZE, "--size", ""}, {IABN_O_OPSET, "--opset", ""}};
    for (size_t i = 0; i < sizeof pass / sizeof pass[0]; i++) {
        if (!v[pass[i].id].set) continue;
        args[n++] = pass[i].flag;
        if (pass[i].value) args[n++] = *pass[i].value ? pass[i].value : v[pass[i].id].s;
    }
    if (v[IABN_O_ACT].set || v[IABN_O_ACT_PARAM].set) {
        if (!v[IABN_O_ACT].set) {
            fprintf(stderr, "iabn export: --act-param goes with --act\n");
            return 2;
        }
        args[n++] = "--act";
        args[n++] = act;
    }
    args[n] = NULL;
    return iabn_run_script("export", "export.py", n, (char **)args);
}
