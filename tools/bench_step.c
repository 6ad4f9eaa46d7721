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

#include <cjson/cJSON.h>

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
    o->height = v[IABN_O_SIZE].h, o->width = v[IABN_O_SIZE].w;
    o->by_op = v[IABN_O_OPS].set;
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

static void print_json(const iabn_stepbench_opts *o, const iabn_stepbench_result *r, int ranks,
                       const char *copy_bw)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", o->model->arch);
    cJSON_AddStringToObject(j, "bn_mode", iabn_bn_mode_name(o->model->bn));
    cJSON_AddStringToObject(j, "device", r->device);
    cJSON_AddNumberToObject(j, "batch", o->batch);
    cJSON_AddNumberToObject(j, "ranks", ranks);
    cJSON_AddNumberToObject(j, "global_batch", o->batch * ranks);
    if (ranks > 1) {
        cJSON_AddNumberToObject(j, "allreduce_ms", 1e3 * r->allreduce_s);
        cJSON_AddNumberToObject(j, "allreduce_waited_ms", 1e3 * r->allreduce_wait_s);
        cJSON_AddNumberToObject(j, "allreduce_hidden_fraction", r->hidden);
    }
    cJSON_AddNumberToObject(j, "size", o->height);
    cJSON_AddNumberToObject(j, "threads", iabn_num_threads());
    cJSON_AddNumberToObject(j, "step_ms", 1e3 * r->step_s);
    cJSON_AddNumberToObject(j, "forward_ms", 1e3 * r->forward_s);
    cJSON_AddNumberToObject(j, "backward_ms", 1e3 * r->backward_s);
    cJSON_AddNumberToObject(j, "update_ms", 1e3 * r->update_s);
    cJSON_AddNumberToObject(j, "arena_bytes", (double)r->arena);
    cJSON_AddNumberToObject(j, "held_bytes", (double)r->held);
    if (r->gpu) cJSON_AddNumberToObject(j, "device_used_bytes", (double)r->device_used);
    cJSON_AddBoolToObject(j, "profiled", r->profiled);
    cJSON_AddStringToObject(j, "strategy", iabn_storage_name(o->storage));
    cJSON_AddNumberToObject(j, "host_bytes", (double)r->host_bytes);
    cJSON_AddNumberToObject(j, "offloaded_bytes_per_step", (double)r->offload_bytes);
    cJSON_AddNumberToObject(j, "offloaded_tensors", r->n_offload);
    cJSON_AddNumberToObject(j, "recomputed_tensors", r->n_recompute);
    if (o->budget) cJSON_AddNumberToObject(j, "budget_bytes", (double)o->budget);
    if (r->sim) {
        cJSON_AddStringToObject(j, "copy_bw", copy_bw);
        cJSON_AddNumberToObject(j, "copy_bytes_per_s", o->copy_bytes_per_s);
        cJSON_AddNumberToObject(j, "device_peak_bytes", (double)r->sim_device_peak);
        cJSON_AddNumberToObject(j, "copy_wait_ms_per_step", 1e3 * r->sim_wait_s);
    }
    if (r->gpu) cJSON_AddBoolToObject(j, "tf32", r->tf32);
    char *js = cJSON_Print(j);
    printf("%s\n", js);
    free(js);
    cJSON_Delete(j);
}

static void print_line(const iabn_stepbench_opts *o, const iabn_stepbench_result *r, int ranks)
{
    printf("%s %s batch %d %dx%d on %s, %d threads: step %.1f ms", o->model->arch,
           iabn_bn_mode_name(o->model->bn), o->batch, o->height, o->width, r->device,
           iabn_num_threads(), 1e3 * r->step_s);
    if (r->profiled)
        printf(" (forward %.1f, backward %.1f, update %.1f)", 1e3 * r->forward_s,
               1e3 * r->backward_s, 1e3 * r->update_s);
    else
        printf(" (update %.1f; --ops for the forward / backward split)", 1e3 * r->update_s);
    printf(", median of %d; arena %.1f MiB, step holds %.1f MiB", o->repeat,
           (double)r->arena / 1048576.0, (double)r->held / 1048576.0);
    if (r->gpu) printf(" (driver: +%.1f MiB)", (double)r->device_used / 1048576.0);
    if (r->sim)
        printf("; sim device peak %.1f MiB, host pool %.1f MiB, %s copies %.1f GB/s, "
               "waited %.1f ms/step", (double)r->sim_device_peak / 1048576.0,
               (double)r->host_bytes / 1048576.0, iabn_storage_name(o->storage),
               o->copy_bytes_per_s / 1e9, 1e3 * r->sim_wait_s);
    if (ranks > 1)
        printf("; %d ranks (global batch %d): gradient all-reduce %.1f ms, waited for "
               "%.1f ms, %.0f%% hidden behind the backward",
               ranks, o->batch * ranks, 1e3 * r->allreduce_s, 1e3 * r->allreduce_wait_s,
               100.0 * r->hidden);
    printf("\n");
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
    if (rc) fprintf(stderr, "iabn bench step (rank %d): %s\n", rank, e.msg);
    else if (rank == 0 && a.v[IABN_O_JSON].set)
        print_json(&o, r, ranks, a.v[IABN_O_COPY_BW].set ? a.v[IABN_O_COPY_BW].s : "pcie3");
    else if (rank == 0) print_line(&o, r, ranks);
    free(r);
    if (rc) iabn_comm_give_up(o.comm);
    iabn_comm_free(o.comm);
    return rc ? 1 : 0;
}
