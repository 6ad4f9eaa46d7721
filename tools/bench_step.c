/* bench_step.c: `iabn bench step MODEL`: the time of one training step of a
 * model (models/train/bench.h measures it), median over repeated steps,
 * split into forward / backward / update, and the memory the step holds, the
 * figure to set beside PyTorch's max_memory_allocated (the PyTorch side is
 * tools/bench_step_torch.py).  --strategy offload|auto|recompute runs on the
 * simulated device on the CPU with copies at --copy-bw (pcie3, memcpy: the
 * measured host memcpy, or GB/s).  Under mpirun --batch is the global batch,
 * split over the ranks, and the line adds the all-reduce time and the
 * fraction of it hidden behind the backward.  Rank 0 prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iabn.h"
#include "tools/commands.h"
#include "tools/options.h"

/* The flags into o; 0, or the exit status. */
static int setup(const iabn_args *a, iabn_stepbench_opts *o, iabn_model_cfg *mc)
{
    const iabn_optval *v = a->v;
    const char *arch = a->npos ? a->pos[0] : v[IABN_O_MODEL].s;
    iabn_err e = {0};
    if (v[IABN_O_DEVICE].set) o->device = v[IABN_O_DEVICE].s;
    if (v[IABN_O_BATCH].set) o->batch = (int)v[IABN_O_BATCH].i;
    if (v[IABN_O_REPEAT].set) o->repeat = (int)v[IABN_O_REPEAT].i;
    if (v[IABN_O_THREADS].set) iabn_set_num_threads((int)v[IABN_O_THREADS].i);
    if (v[IABN_O_BUDGET].set) o->budget = (size_t)v[IABN_O_BUDGET].f;
    if (v[IABN_O_LOOKAHEAD].set) o->lookahead = (int)v[IABN_O_LOOKAHEAD].i;
    o->host_bf16 = v[IABN_O_OFFLOAD_BF16].set;
    if (v[IABN_O_WINOGRAD].set && iabn_winograd_mode_parse(v[IABN_O_WINOGRAD].s, &o->winograd, &e)) {
        fprintf(stderr, "iabn bench step: %s\n", e.msg);
        return 2;
    }
    if (v[IABN_O_LAYOUT].set && iabn_layout_mode_parse(v[IABN_O_LAYOUT].s, &o->layout_mode, &e)) {
        fprintf(stderr, "iabn bench step: %s\n", e.msg);
        return 2;
    }
    o->height = v[IABN_O_SIZE].h, o->width = v[IABN_O_SIZE].w;
    o->by_op = v[IABN_O_OPS].set;
    o->by_layer = v[IABN_O_LAYERS].set;
    o->sim = v[IABN_O_SIM].set || v[IABN_O_COPY_BW].set;
    o->storage = v[IABN_O_OFFLOAD].set ? IABN_STORAGE_OFFLOAD : IABN_STORAGE_KEEP;
    if (v[IABN_O_STRATEGY].set && iabn_storage_parse(v[IABN_O_STRATEGY].s, &o->storage, &e)) {
        fprintf(stderr, "iabn bench step: %s\n", e.msg);
        return 2;
    }
    const char *bw = v[IABN_O_COPY_BW].set ? v[IABN_O_COPY_BW].s : "pcie3";
    char *end;
    if (!strcmp(bw, "memcpy")) o->copy_bytes_per_s = iabn_host_copy_bandwidth();
    else if (strcmp(bw, "pcie3") && ((o->copy_bytes_per_s = strtod(bw, &end) * 1e9) <= 0 || *end)) {
        fprintf(stderr, "iabn bench step: --copy-bw %s (pcie3, memcpy or GB/s)\n", bw);
        return 2;
    }
    if (!arch) {
        fprintf(stderr, "iabn bench step: which model? (iabn bench step --help)\n");
        return 2;
    }
    if (!iabn_model_exists(arch)) { fprintf(stderr, "iabn bench step: unknown model %s\n", arch); return 2; }
    *mc = iabn_model_defaults(arch);
    if (iabn_bn_mode_parse(v[IABN_O_BN].set ? v[IABN_O_BN].s : "standard", &mc->bn, &e)) {
        fprintf(stderr, "iabn bench step: --bn: %s\n", e.msg);
        return 2;
    }
    if (v[IABN_O_CLASSES].set) mc->classes = (int)v[IABN_O_CLASSES].i;
    if (!o->height) o->height = o->width = iabn_model_is_segmentation(arch) ? 512 : 224;
    if ((o->storage == IABN_STORAGE_AUTO || o->storage == IABN_STORAGE_RECOMPUTE) && !o->budget) {
        fprintf(stderr, "iabn bench step: --strategy %s needs --budget\n", iabn_storage_name(o->storage));
        return 2;
    }
    o->model = mc;
    return 0;
}

int iabn_bench_step(int argc, char **argv)
{
    iabn_args a;
    int rc = iabn_args_parse(&a, IABN_C_BENCH_STEP, argc, argv);
    if (rc) return rc == IABN_ARGS_HELP ? 0 : 2;
    iabn_stepbench_opts o;
    iabn_stepbench_opts_defaults(&o);
    iabn_model_cfg mc;
    if ((rc = setup(&a, &o, &mc))) return rc;
    iabn_err e = {0};
    if (iabn_comm_new(NULL, &o.comm, &e)) {
        fprintf(stderr, "iabn bench step: %s\n", e.msg);
        return 1;
    }
    int ranks = iabn_comm_size(o.comm), rank = iabn_comm_rank(o.comm);
    if (o.batch % ranks) {
        fprintf(stderr, "iabn bench step: --batch %d does not split over %d ranks\n", o.batch, ranks);
        iabn_comm_free(o.comm);
        return 2;
    }
    o.batch /= ranks;
    iabn_stepbench_result *r = malloc(sizeof *r);
    rc = r ? iabn_stepbench_run(&o, r, &e) : iabn_err_set(&e, IABN_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < r->nops; i++) /* per op kind, mean ms per step, largest first */
        printf("  %-24s %10.1f ms\n", r->ops[i].name, 1e3 * r->ops[i].seconds / o.repeat);
    for (int i = 0; !rc && !a.v[IABN_O_JSON].set && i < r->nlayers; i++) {
        const iabn_stepbench_layer *l = &r->layers[i];
        printf("  %-68s x%-3d %8.2f ms %6.0f GFLOP/s\n", l->name, l->nodes,
               1e3 * l->seconds / o.repeat, l->seconds > 0 ? l->flops / l->seconds * 1e-9 : 0);
    }
    if (rc) fprintf(stderr, "iabn bench step (rank %d): %s\n", rank, e.msg);
    else if (rank == 0) {
        const char *bw = a.v[IABN_O_COPY_BW].set ? a.v[IABN_O_COPY_BW].s : "pcie3";
        char *text = a.v[IABN_O_JSON].set ? iabn_stepbench_json(&o, r, bw) : iabn_stepbench_text(&o, r);
        if (text) printf("%s\n", text);
        free(text);
    }
    free(r);
    if (rc) iabn_comm_give_up(o.comm);
    iabn_comm_free(o.comm);
    return rc ? 1 : 0;
}
