/* cmd_step.c: `iabn step MODEL --input X --output O`, one forward (and
 * backward) on safetensors inputs for PyTorch parity: the flags into a model
 * config and models/train/stepfile.h's options (which say what the files
 * hold); the library runs the step and writes what it computed. */
#include "tools/commands.h"

#include <stdio.h>
#include <string.h>

#include "iabn.h"
#include "models/train/stepfile.h"
#include "tools/options.h"

/* The option table's flags into mc and o; 0, or the exit status. */
static int setup(const iabn_args *a, iabn_model_cfg *mc, iabn_stepfile_opts *o, iabn_err *e)
{
    const iabn_optval *v = a->v;
    const char *arch = a->npos ? a->pos[0] : v[IABN_O_MODEL].s;
    if (v[IABN_O_TRAIN_MODE].set && v[IABN_O_EVAL_MODE].set) {
        fprintf(stderr, "iabn step: --train or --eval, not both\n");
        return 2;
    }
    if (!arch || !v[IABN_O_INPUT].set || !v[IABN_O_OUTPUT].set) {
        fprintf(stderr, "iabn step: MODEL, --input and --output are required (iabn step --help)\n");
        return 2;
    }
    if (!iabn_model_exists(arch)) {
        fprintf(stderr, "iabn step: unknown model '%s' (iabn mem --list)\n", arch);
        return 2;
    }
    *mc = iabn_model_defaults(arch);
    if (v[IABN_O_BN].set && iabn_bn_mode_parse(v[IABN_O_BN].s, &mc->bn, e))
        return iabn_err_prefix(e, "--bn: "), 1;
    if (v[IABN_O_ACT].set) {
        if (iabn_act_parse(v[IABN_O_ACT].s, &mc->act.kind, e)) return iabn_err_prefix(e, "--act: "), 1;
        mc->act.param = iabn_act_default_param(mc->act.kind);
    }
    if (v[IABN_O_ACT_PARAM].set) mc->act.param = (float)v[IABN_O_ACT_PARAM].f;
    if (v[IABN_O_CLASSES].set) mc->classes = (int)v[IABN_O_CLASSES].i;
    mc->no_dropout = v[IABN_O_NO_DROPOUT].set;
    if (v[IABN_O_NO_INPUT_3X3].set) mc->input_3x3 = 0;
    mc->dilation = v[IABN_O_DILATED].set;
    mc->frozen_bn = v[IABN_O_FROZEN_BN].set;
    *o = (iabn_stepfile_opts){.model = mc, .input = v[IABN_O_INPUT].s, .output = v[IABN_O_OUTPUT].s,
                              .weights = v[IABN_O_WEIGHTS].s, .device = v[IABN_O_DEVICE].s,
                              .train = !v[IABN_O_EVAL_MODE].set, .check = v[IABN_O_CHECK].set,
                              .init_seed = v[IABN_O_INIT_SEED].set ? (unsigned long long)v[IABN_O_INIT_SEED].i : 1,
                              .seed = (unsigned long long)v[IABN_O_SEED].i};
    if (v[IABN_O_BUDGET].set) o->budget = (size_t)v[IABN_O_BUDGET].f;
    if (v[IABN_O_STRATEGY].set && iabn_storage_parse(v[IABN_O_STRATEGY].s, &o->storage, e)) return 1;
    if (v[IABN_O_THREADS].set) iabn_set_num_threads((int)v[IABN_O_THREADS].i);
    if (v[IABN_O_LAYOUT].set && iabn_layout_mode_parse(v[IABN_O_LAYOUT].s, &o->layout_mode, e))
        return iabn_err_prefix(e, "--layout: "), 1;
    return 0;
}

int iabn_cmd_step(int argc, char **argv)
{
    iabn_args a;
    int rc = iabn_args_parse(&a, IABN_C_STEP, argc, argv);
    if (rc) return rc == IABN_ARGS_HELP ? 0 : 2;
    iabn_model_cfg mc;
    iabn_stepfile_opts o;
    iabn_err e = {0};
    if ((rc = setup(&a, &mc, &o, &e)) == 2) return 2;
    if (rc || iabn_stepfile_run(&o, &e)) {
        fprintf(stderr, "iabn step: %s\n", e.msg);
        return 1;
    }
    return 0;
}
