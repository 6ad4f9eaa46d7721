/* bench_step.c: `iabn bench step MODEL`: the time of one training step
 * (forward, backward, SGD update) of a model, median over repeated steps,
 * split into forward / backward / update from the executor's per-node
 * profile, and the memory the step holds (plan + store), the figure to set
 * beside PyTorch's max_memory_allocated.  On a GPU the per-node profile
 * synchronises after every node, which costs launch overlap: it is taken
 * only with --ops there, and a step is timed from launch to a synchronise
 * after the update.  The PyTorch side is tools/bench_step_torch.py.
 * Storage strategies: --strategy offload|auto|recompute (--offload is
 * offload) store the saved activations as graph/strategy.h says; on the CPU
 * they run on the simulated device (src/tensor/sim) with a copy thread at
 * --copy-bw (pcie3: PCIe 3 x16, memcpy: the measured host memcpy, or GB/s),
 * and the device peak is the simulated device's measured high-water mark.
 *
 * Under mpirun (`mpirun -np N iabn bench step ...`) --batch is the global
 * batch, split over the ranks; the step carries the gradient all-reduce
 * buckets, and the line adds the all-reduce time (the communicator thread's,
 * rank 0) and the fraction of it hidden behind the backward (1 - the time
 * the step waited for the sums / the all-reduce time).  Rank 0 prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "iabn.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/options.h"
#include "tensor/device.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int iabn_bench_step(int argc, char **argv)
{
    iabn_args a;
    int prc = iabn_args_parse(&a, IABN_C_BENCH_STEP, argc, argv);
    if (prc) return prc == IABN_ARGS_HELP ? 0 : 2;
    const char *arch = a.npos ? a.pos[0] : a.v[IABN_O_MODEL].s;
    const char *bn = a.v[IABN_O_BN].set ? a.v[IABN_O_BN].s : "standard";
    const char *device = a.v[IABN_O_DEVICE].set ? a.v[IABN_O_DEVICE].s : "cpu";
    int batch = a.v[IABN_O_BATCH].set ? (int)a.v[IABN_O_BATCH].i : 4;
    int h = a.v[IABN_O_SIZE].h, w = a.v[IABN_O_SIZE].w;
    int repeat = a.v[IABN_O_REPEAT].set ? (int)a.v[IABN_O_REPEAT].i : 5;
    int json = a.v[IABN_O_JSON].set, classes = a.v[IABN_O_CLASSES].set ? (int)a.v[IABN_O_CLASSES].i : 0;
    int by_op = a.v[IABN_O_OPS].set;
    if (a.v[IABN_O_THREADS].set) iabn_set_num_threads((int)a.v[IABN_O_THREADS].i);
    struct { const char *name; double s; } ops[64];
    int nops = 0;
    int use_sim = a.v[IABN_O_SIM].set;
    iabn_storage storage = a.v[IABN_O_OFFLOAD].set ? IABN_STORAGE_OFFLOAD : IABN_STORAGE_KEEP;
    iabn_strategy_opts sopt = {.allow_offload = 1, .allow_recompute = 1, .lookahead = 1};
    double budget = a.v[IABN_O_BUDGET].set ? a.v[IABN_O_BUDGET].f : 0;
    double copy_bw = IABN_PCIE3_X16_BYTES_PER_S;
    const char *copy_bw_s = "pcie3";
    if (a.v[IABN_O_LOOKAHEAD].set) sopt.lookahead = (int)a.v[IABN_O_LOOKAHEAD].i;
    if (a.v[IABN_O_STRATEGY].set) {
        iabn_err se = {0};
        if (iabn_storage_parse(a.v[IABN_O_STRATEGY].s, &storage, &se)) {
            fprintf(stderr, "iabn bench step: %s\n", se.msg);
            return 2;
        }
    }
    if (a.v[IABN_O_COPY_BW].set) {
        char *end;
        copy_bw_s = a.v[IABN_O_COPY_BW].s;
        if (!strcmp(copy_bw_s, "pcie3")) copy_bw = IABN_PCIE3_X16_BYTES_PER_S;
        else if (!strcmp(copy_bw_s, "memcpy")) copy_bw = iabn_host_copy_bandwidth();
        else if ((copy_bw = strtod(copy_bw_s, &end) * 1e9) <= 0 || *end) {
            fprintf(stderr, "iabn bench step: --copy-bw %s (pcie3, memcpy or GB/s)\n", copy_bw_s);
            return 2;
        }
        use_sim = 1;
    }
    if (!arch) {
        fprintf(stderr, "iabn bench step: which model? (iabn bench step --help)\n");
        return 2;
    }
    if (!iabn_model_exists(arch)) { fprintf(stderr, "iabn bench step: unknown model %s\n", arch); return 2; }
    iabn_model_cfg mc = iabn_model_defaults(arch);
    iabn_err pe = {0};
    if (iabn_bn_mode_parse(bn, &mc.bn, &pe)) { fprintf(stderr, "iabn bench step: --bn: %s\n", pe.msg); return 2; }
    if (classes) mc.classes = classes;
    if (!h) h = w = iabn_model_is_segmentation(arch) ? 512 : 224;
    int seg = iabn_model_is_segmentation(arch);
    iabn_err e = {0};
    iabn_comm *comm = NULL;
    if (iabn_comm_new(NULL, &comm, &e)) {
        fprintf(stderr, "iabn bench step: %s\n", e.msg);
        return 1;
    }
    int ranks = iabn_comm_size(comm), rank = iabn_comm_rank(comm), global_batch = batch;
    if (batch % ranks) {
        fprintf(stderr, "iabn bench step: --batch %d does not split over %d ranks\n", batch, ranks);
        iabn_comm_free(comm);
        return 2;
    }
    batch /= ranks;
    iabn_device dev;
    if (iabn_device_open(device, &dev, &e)) {
        fprintf(stderr, "iabn bench step: %s\n", e.msg);
        iabn_comm_free(comm);
        return 1;
    }
    const iabn_backend *be = dev.be;
    if ((storage == IABN_STORAGE_AUTO || storage == IABN_STORAGE_RECOMPUTE) && budget <= 0) {
        fprintf(stderr, "iabn bench step: --strategy %s needs --budget\n", iabn_storage_name(storage));
        iabn_device_close(&dev);
        return 2;
    }
    iabn_sim *sim = NULL;
    if (be->kind == IABN_DEV_CPU && (use_sim || storage != IABN_STORAGE_KEEP)) {
        iabn_sim_opts smo = {.copy_bytes_per_s = copy_bw};
        if (iabn_sim_open(&smo, &sim, &e)) {
            fprintf(stderr, "iabn bench step: %s\n", e.msg);
            iabn_device_close(&dev);
            return 1;
        }
        be = iabn_sim_backend(sim);
    }
    sopt.budget = budget > 0 ? (size_t)budget : 0;
    sopt.cost.copy_bytes_per_s = be->kind == IABN_DEV_CPU ? copy_bw : 0;
    if (storage != IABN_STORAGE_KEEP && iabn_cost_calibrate(&sopt.cost, be->kind, &e)) {
        fprintf(stderr, "iabn bench step: %s\n", e.msg);
        iabn_sim_close(sim);
        iabn_device_close(&dev);
        return 1;
    }
    size_t used0 = iabn_device_used(&dev); /* before the store, the plan's arena and io */
    int gpu = be->kind == IABN_DEV_CUDA, profile = by_op || !gpu;
    iabn_session_cfg sc;
    iabn_session_cfg_defaults(&sc);
    sc.model_cfg = &mc;
    sc.batch = batch;
    sc.height = h;
    sc.width = w;
    sc.backend = be;
    sc.storage = storage;
    sc.strategy = &sopt;
    sc.budget_bytes = sopt.budget; /* over it: refused before allocating */
    if (ranks > 1) {
        sc.comm = comm;
        sc.grad_bucket_bytes = IABN_BUCKET_BYTES_DEFAULT;
    }
    iabn_session ss;
    int rc = iabn_session_build(&sc, &ss, &e);
    iabn_store *s = ss.store;
    iabn_graph *g = ss.graph;
    iabn_plan *p = ss.plan;
    iabn_exec *ex = ss.exec;
    if (!rc) rc = iabn_model_init(s, &mc, 1, &e);
    double *tot = calloc((size_t)repeat, sizeof *tot), *fw = calloc((size_t)repeat, sizeof *fw),
           *bw = calloc((size_t)repeat, sizeof *bw), *up = calloc((size_t)repeat, sizeof *up);
    double *ar = calloc((size_t)repeat, sizeof *ar), *arw = calloc((size_t)repeat, sizeof *arw);
    if (!tot || !fw || !bw || !up || !ar || !arw) rc = iabn_err_set(&e, IABN_ENOMEM, "out of memory");
    if (!rc) {
        /* host buffers and exec_set: the same code feeds either backend */
        size_t nx = (size_t)batch * 3 * h * w, nl = seg ? (size_t)batch * h * w : (size_t)batch;
        float *xp = malloc(nx * sizeof *xp);
        int32_t *lp = malloc(nl * sizeof *lp);
        if (!xp || !lp) rc = iabn_err_set(&e, IABN_ENOMEM, "out of memory for the inputs");
        for (size_t i = 0; !rc && i < nx; i++) xp[i] = iabn_rng_normal(3, 0, i);
        for (size_t i = 0; !rc && i < nl; i++) lp[i] = (int32_t)(i % (size_t)mc.classes);
        if (!rc) rc = iabn_session_set_inputs(&ss, xp, lp, &e);
        free(xp);
        free(lp);
    }
    size_t held = 0, used = 0; /* planned: arena + io + store (momentum included); measured */
    if (!rc) {
        iabn_exec_profile(ex, profile);
        const int *sched = iabn_graph_schedule(g);
        int ns = iabn_graph_schedule_len(g);
        iabn_sgd_opts so = {.lr = {1e-4f, 1e-4f}, .momentum = 0.9f, .weight_decay = 1e-4f,
                            .nesterov = 1, .grad_scale = 1.f};
        for (int k = 0; k <= repeat && !rc; k++) {
            iabn_comm_reset_times(comm);
            double t0 = iabn_now();
            rc = iabn_session_run(&ss, &e);
            if (!rc && be->sync(be->ctx)) /* a GPU run is only queued so far */
                rc = iabn_err_set(&e, IABN_EDEVICE, "synchronising after the step failed");
            double t1 = iabn_now();
            if (!rc) rc = iabn_store_sgd_step(s, &so, NULL, &e);
            if (!rc && be->sync(be->ctx))
                rc = iabn_err_set(&e, IABN_EDEVICE, "synchronising after the update failed");
            double t2 = iabn_now();
            if (k == 0 && sim) iabn_sim_reset_stats(sim);
            if (k == 0) { /* warm-up; the momentum exists from here */
                size_t pb, gb, ob, bb, np;
                iabn_store_totals(s, &np, &pb, &gb, &ob, &bb);
                held = p->arena_bytes + p->io_bytes + pb + gb + ob + bb;
                used = iabn_device_used(&dev) - used0;
                continue;
            }
            const double *st = iabn_exec_step_times(ex);
            double f = 0, b = 0;
            for (int j = 0; profile && j < ns; j++) {
                if (iabn_graph_n(g, sched[j])->phase == IABN_PHASE_FWD) f += st[j];
                else b += st[j];
            }
            for (int j = 0; by_op && j < ns; j++) {
                const char *on = iabn_graph_n(g, sched[j])->op->name;
                int q = 0;
                while (q < nops && strcmp(ops[q].name, on)) q++;
                if (q == nops && nops < 64) {
                    ops[nops].name = on;
                    ops[nops++].s = 0;
                }
                if (q < nops) ops[q].s += st[j];
            }
            iabn_comm_times(comm, &ar[k - 1], &arw[k - 1]);
            tot[k - 1] = t2 - t0;
            fw[k - 1] = f;
            bw[k - 1] = profile ? t1 - t0 - f : 0; /* the backward and the executor's own time */
            up[k - 1] = t2 - t1;
        }
    }
    if (!rc && by_op) {
        /* per op kind, mean ms per step, largest first */
        for (int i = 0; i < nops; i++)
            for (int j = i + 1; j < nops; j++)
                if (ops[j].s > ops[i].s) {
                    const char *tn = ops[i].name;
                    double ts = ops[i].s;
                    ops[i] = ops[j];
                    ops[j].name = tn;
                    ops[j].s = ts;
                }
        for (int i = 0; i < nops; i++)
            printf("  %-24s %10.1f ms\n", ops[i].name, 1e3 * ops[i].s / repeat);
    }
    if (rc) {
        fprintf(stderr, "iabn bench step (rank %d): %s\n", rank, e.msg);
    } else if (rank > 0) {
        /* rank 0 prints */
    } else {
        qsort(tot, (size_t)repeat, sizeof *tot, cmp_d);
        qsort(fw, (size_t)repeat, sizeof *fw, cmp_d);
        qsort(bw, (size_t)repeat, sizeof *bw, cmp_d);
        qsort(up, (size_t)repeat, sizeof *up, cmp_d);
        qsort(ar, (size_t)repeat, sizeof *ar, cmp_d);
        qsort(arw, (size_t)repeat, sizeof *arw, cmp_d);
        int m = repeat / 2;
        double hidden = ar[m] > 0 ? 1.0 - arw[m] / ar[m] : 0;
        if (hidden < 0) hidden = 0;
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "model", arch);
            cJSON_AddStringToObject(o, "bn_mode", iabn_bn_mode_name(mc.bn));
            cJSON_AddStringToObject(o, "device", dev.name);
            cJSON_AddNumberToObject(o, "batch", batch);
            cJSON_AddNumberToObject(o, "ranks", ranks);
            cJSON_AddNumberToObject(o, "global_batch", global_batch);
            if (ranks > 1) {
                cJSON_AddNumberToObject(o, "allreduce_ms", 1e3 * ar[m]);
                cJSON_AddNumberToObject(o, "allreduce_waited_ms", 1e3 * arw[m]);
                cJSON_AddNumberToObject(o, "allreduce_hidden_fraction", hidden);
            }
            cJSON_AddNumberToObject(o, "size", h);
            cJSON_AddNumberToObject(o, "threads", iabn_num_threads());
            cJSON_AddNumberToObject(o, "step_ms", 1e3 * tot[m]);
            cJSON_AddNumberToObject(o, "forward_ms", 1e3 * fw[m]);
            cJSON_AddNumberToObject(o, "backward_ms", 1e3 * bw[m]);
            cJSON_AddNumberToObject(o, "update_ms", 1e3 * up[m]);
            cJSON_AddNumberToObject(o, "arena_bytes", (double)p->arena_bytes);
            cJSON_AddNumberToObject(o, "held_bytes", (double)held);
            if (gpu) cJSON_AddNumberToObject(o, "device_used_bytes", (double)used);
            cJSON_AddBoolToObject(o, "profiled", profile);
            cJSON_AddStringToObject(o, "strategy", iabn_storage_name(storage));
            cJSON_AddNumberToObject(o, "host_bytes", (double)p->host_bytes);
            cJSON_AddNumberToObject(o, "offloaded_bytes_per_step", (double)p->offload_bytes);
            cJSON_AddNumberToObject(o, "offloaded_tensors", ss.strategy.n_offload);
            cJSON_AddNumberToObject(o, "recomputed_tensors", ss.strategy.n_recompute);
            if (sopt.budget) cJSON_AddNumberToObject(o, "budget_bytes", (double)sopt.budget);
            if (sim) {
                iabn_sim_stats st;
                iabn_sim_get_stats(sim, &st);
                cJSON_AddStringToObject(o, "copy_bw", copy_bw_s);
                cJSON_AddNumberToObject(o, "copy_bytes_per_s", copy_bw);
                cJSON_AddNumberToObject(o, "device_peak_bytes", (double)st.device_peak);
                cJSON_AddNumberToObject(o, "copy_wait_ms_per_step", 1e3 * st.wait_seconds / repeat);
            }
            if (gpu) cJSON_AddBoolToObject(o, "tf32", iabn_device_tf32(&dev));
            char *js = cJSON_Print(o);
            printf("%s\n", js);
            free(js);
            cJSON_Delete(o);
        } else {
            printf("%s %s batch %d %dx%d on %s, %d threads: step %.1f ms", arch,
                   iabn_bn_mode_name(mc.bn), batch, h, w, dev.name, iabn_num_threads(), 1e3 * tot[m]);
            if (profile)
                printf(" (forward %.1f, backward %.1f, update %.1f)", 1e3 * fw[m], 1e3 * bw[m],
                       1e3 * up[m]);
            else
                printf(" (update %.1f; --ops for the forward / backward split)", 1e3 * up[m]);
            printf(", median of %d; arena %.1f MiB, step holds %.1f MiB", repeat,
                   (double)p->arena_bytes / 1048576.0, (double)held / 1048576.0);
            if (gpu) printf(" (driver: +%.1f MiB)", (double)used / 1048576.0);
            if (sim) {
                iabn_sim_stats st;
                iabn_sim_get_stats(sim, &st);
                printf("; sim device peak %.1f MiB, host pool %.1f MiB, %s copies %.1f GB/s, "
                       "waited %.1f ms/step", (double)st.device_peak / 1048576.0,
                       (double)p->host_bytes / 1048576.0, iabn_storage_name(storage),
                       copy_bw / 1e9, 1e3 * st.wait_seconds / repeat);
            }
            if (ranks > 1)
                printf("; %d ranks (global batch %d): gradient all-reduce %.1f ms, waited for "
                       "%.1f ms, %.0f%% hidden behind the backward",
                       ranks, global_batch, 1e3 * ar[m], 1e3 * arw[m], 100.0 * hidden);
            printf("\n");
        }
    }
    free(tot);
    free(fw);
    free(bw);
    free(up);
    free(ar);
    free(arw);
    iabn_session_free(&ss);
    iabn_sim_close(sim);
    iabn_device_close(&dev);
    if (rc) iabn_comm_give_up(comm);
    iabn_comm_free(comm);
    return rc ? 1 : 0;
}
