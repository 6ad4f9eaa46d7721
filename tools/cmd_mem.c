/* cmd_mem.c: `iabn mem`, the per-model memory report: for each requested BN
 * mode (and storage strategy: --offload, --strategy) a planned training step,
 * nothing allocated, side by side (models/train/memreport.h builds it);
 * --steps dumps each schedule, --plot draws live memory, --json gives the
 * numbers, --largest-batch the largest batch per mode within --budget.
 * --device cuda plans for the CUDA backend (no GPU needed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iabn.h"
#include "models/train/memreport.h"
#include "tensor/device.h"
#include "tools/commands.h"
#include "tools/options.h"

static int list_models(void)
{
    int cnt;
    const char *const *names = iabn_model_names(&cnt);
    for (int k = 0; k < cnt; k++) {
        const char *d = iabn_model_describe(names[k]);
        printf("%-32s %s\n", names[k], d ? d : "");
    }
    return 0;
}

/* The flags into o and the columns; 0, or the exit status. */
static int setup(const iabn_args *a, iabn_memreport_opts *o, iabn_memreport_col *cols, int *ncols)
{
    const iabn_optval *v = a->v;
    iabn_err e = {0};
    if (v[IABN_O_BATCH].set) o->batch = (int)v[IABN_O_BATCH].i;
    if (v[IABN_O_CLASSES].set) o->classes = (int)v[IABN_O_CLASSES].i;
    if (v[IABN_O_SIZE].set) o->height = v[IABN_O_SIZE].h, o->width = v[IABN_O_SIZE].w;
    if (v[IABN_O_BUDGET].set) o->budget = (size_t)v[IABN_O_BUDGET].f;
    if (v[IABN_O_WORLD].set) o->world = (int)v[IABN_O_WORLD].i;
    if (v[IABN_O_LOOKAHEAD].set) o->strategy.lookahead = (int)v[IABN_O_LOOKAHEAD].i;
    o->strategy.host_bf16 = v[IABN_O_OFFLOAD_BF16].set;
    if (v[IABN_O_WINOGRAD].set && iabn_winograd_mode_parse(v[IABN_O_WINOGRAD].s, &o->winograd, &e)) {
        fprintf(stderr, "iabn mem: %s\n", e.msg);
        return 2;
    }
    if (v[IABN_O_LAYOUT].set && iabn_layout_mode_parse(v[IABN_O_LAYOUT].s, &o->layout_mode, &e)) {
        fprintf(stderr, "iabn mem: %s\n", e.msg);
        return 2;
    }
    o->blocks = v[IABN_O_BLOCKS].set;
    o->schedule = v[IABN_O_STEPS].set ? stdout : NULL;
    o->model = a->npos ? a->pos[0] : v[IABN_O_MODEL].s;
    if (a->npos && v[IABN_O_MODEL].set) {
        fprintf(stderr, "iabn mem: the model both as --model and as an argument\n");
        return 2;
    }
    int want[IABN_STORAGE_NMODES] = {1, 0, 0, 0}, largest = v[IABN_O_LARGEST_BATCH].set;
    if (v[IABN_O_OFFLOAD].set) want[IABN_STORAGE_OFFLOAD] = 1;
    if (v[IABN_O_STRATEGY].set) {
        iabn_storage st;
        if (iabn_storage_parse(v[IABN_O_STRATEGY].s, &st, &e)) goto bad;
        want[IABN_STORAGE_KEEP] = st == IABN_STORAGE_KEEP;
        want[st] = 1;
    }
    if (v[IABN_O_COPY_BW].set) {
        char *end;
        o->strategy.cost.copy_bytes_per_s = strtod(v[IABN_O_COPY_BW].s, &end) * 1e9;
        if (*end || o->strategy.cost.copy_bytes_per_s <= 0) {
            fprintf(stderr, "iabn mem: --copy-bw %s (GB/s)\n", v[IABN_O_COPY_BW].s);
            return 2;
        }
    }
    if (!o->model) {
        fprintf(stderr, "iabn mem: which model? iabn mem MODEL (iabn mem --list; iabn mem --help)\n");
        return 2;
    }
    if (iabn_device_planning_backend(v[IABN_O_DEVICE].set ? v[IABN_O_DEVICE].s : "cpu",
                                     &o->backend, &e))
        goto bad;
    if (!iabn_model_exists(o->model)) {
        fprintf(stderr, "iabn mem: unknown model '%s' (iabn mem --list)\n", o->model);
        return 2;
    }
    if ((want[IABN_STORAGE_AUTO] || want[IABN_STORAGE_RECOMPUTE] || largest) && !o->budget) {
        fprintf(stderr, "iabn mem: --strategy auto|recompute and --largest-batch need --budget\n");
        return 2;
    }
    o->strategy.budget = o->budget;
    o->search_crop = !largest;
    int gpu_cost = v[IABN_O_COST].set && !strcmp(v[IABN_O_COST].s, "gpu");
    if (iabn_cost_calibrate(&o->strategy.cost, gpu_cost ? IABN_DEV_CUDA : o->backend->kind, &e)) {
        fprintf(stderr, "iabn mem: %s\n", e.msg);
        return 1;
    }
    /* columns: each BN mode under each storage strategy asked for */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v[IABN_O_BN].set ? v[IABN_O_BN].s : "standard,inplace_abn_ii");
    iabn_bn_mode modes[6];
    int nb = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ","), nb++)
        if (nb == 6 || iabn_bn_mode_parse(tok, &modes[nb], &e)) {
            fprintf(stderr, "iabn mem: --bn: %s\n", nb == 6 ? "too many modes" : e.msg);
            return 2;
        }
    if (largest) want[IABN_STORAGE_KEEP] = want[IABN_STORAGE_OFFLOAD] = want[IABN_STORAGE_AUTO] = 1;
    *ncols = iabn_memreport_columns(modes, nb, want, cols, IABN_MEMREPORT_MAX_COLS);
    return 0;
bad:
    fprintf(stderr, "iabn mem: %s\n", e.msg);
    return 2;
}

int iabn_cmd_mem(int argc, char **argv)
{
    iabn_args a;
    int rc = iabn_args_parse(&a, IABN_C_MEM, argc, argv);
    if (rc) return rc == IABN_ARGS_HELP ? 0 : 2;
    if (a.v[IABN_O_LIST].set) return list_models();
    iabn_memreport_opts o;
    iabn_memreport_opts_defaults(&o);
    iabn_memreport_col cols[IABN_MEMREPORT_MAX_COLS];
    int n = 0;
    if ((rc = setup(&a, &o, cols, &n))) return rc;
    iabn_memreport r;
    iabn_err e = {0};
    if (iabn_memreport_build(&o, cols, n, &r, &e)) {
        fprintf(stderr, "iabn mem: %s\n", e.msg);
        return 1;
    }
    char *text = a.v[IABN_O_JSON].set        ? iabn_memreport_json(&r)
                 : a.v[IABN_O_LARGEST_BATCH].set ? iabn_memreport_largest(&r)
                                                 : iabn_memreport_table(&r);
    if (text) printf(a.v[IABN_O_JSON].set ? "%s\n" : "%s", text);
    else rc = iabn_err_set(&e, IABN_ENOMEM, "out of memory");
    free(text);
    if (!rc && a.v[IABN_O_PLOT].set) rc = iabn_memreport_svg(&r, a.v[IABN_O_PLOT].s, &e);
    if (rc) fprintf(stderr, "iabn mem: %s\n", e.msg);
    iabn_memreport_free(&r);
    return rc ? 1 : 0;
}
