/* bench.c: measured training steps and BN+ACT+CONV blocks (see bench.h). */
#include "models/train/bench.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cjson/cJSON.h>

#include "tensor/sim/sim.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[n] (sorted in place). */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

void iabn_stepbench_opts_defaults(iabn_stepbench_opts *o)
{
    memset(o, 0, sizeof *o);
    o->batch = 4;
    o->repeat = 5;
    o->lookahead = 1;
    o->device = "cpu";
    o->copy_bytes_per_s = IABN_PCIE3_X16_BYTES_PER_S;
}

/* Random inputs and labels within the model's classes. */
static int fill_inputs(iabn_session *ss, const iabn_stepbench_opts *o, iabn_err *e)
{
    int seg = iabn_model_is_segmentation(o->model->arch);
    size_t nx = (size_t)o->batch * 3 * o->height * o->width;
    size_t nl = seg ? (size_t)o->batch * o->height * o->width : (size_t)o->batch;
    float *xp = malloc(nx * sizeof *xp);
    int32_t *lp = malloc(nl * sizeof *lp);
    int rc = xp && lp ? 0 : iabn_err_set(e, IABN_ENOMEM, "out of memory for the inputs");
    for (size_t i = 0; !rc && i < nx; i++) xp[i] = iabn_rng_normal(3, 0, i);
    for (size_t i = 0; !rc && i < nl; i++) lp[i] = (int32_t)(i % (size_t)o->model->classes);
    if (!rc) rc = iabn_session_set_inputs(ss, xp, lp, e);
    free(xp);
    free(lp);
    return rc;
}

/* Adds the per-node times of one step to r->ops by op name. */
static void add_ops(iabn_stepbench_result *r, const iabn_graph *g, const double *st)
{
    const int *sched = iabn_graph_schedule(g);
    for (int j = 0; j < iabn_graph_schedule_len(g); j++) {
        const char *on = iabn_graph_n(g, sched[j])->op->name;
        int q = 0;
        while (q < r->nops && strcmp(r->ops[q].name, on)) q++;
        if (q == r->nops && r->nops < 64) r->ops[r->nops++] = (iabn_stepbench_op){on, 0};
        if (q < r->nops) r->ops[q].seconds += st[j];
    }
}

static void put_shape(char *buf, size_t n, const iabn_tensor *t)
{
    size_t k = strlen(buf);
    for (int d = 0; d < t->nd && k < n; d++, k = strlen(buf))
        snprintf(buf + k, n - k, d ? "x%d" : "%d", t->shape[d]);
}

/* The node's layer key and its FLOPs; 0 for a node without FLOPs
 * (memory-bound: iabn_node_flops counts conv / linear passes only). */
static double layer_key(const iabn_graph *g, int id, char *buf, size_t n)
{
    double flops = iabn_node_flops(g, id);
    if (flops <= 0) return 0;
    const iabn_node *nd = iabn_graph_n(g, id);
    const iabn_node *f = nd->phase == IABN_PHASE_BWD && nd->fwd >= 0 ? iabn_graph_n(g, nd->fwd) : nd;
    int w = -1;
    for (int k = 0; k < f->nin && w < 0; k++)
        if (iabn_graph_t(g, f->in[k])->kind == IABN_T_PARAM && iabn_graph_t(g, f->in[k])->nd >= 2)
            w = f->in[k];
    if (w < 0) return 0;
    snprintf(buf, n, "%s ", nd->op->name);
    put_shape(buf, n, iabn_graph_t(g, f->in[0]));
    strncat(buf, " -> ", n - strlen(buf) - 1);
    put_shape(buf, n, iabn_graph_t(g, f->out[0]));
    strncat(buf, " w ", n - strlen(buf) - 1);
    put_shape(buf, n, iabn_graph_t(g, w));
    return flops;
}

static void add_layers(iabn_stepbench_result *r, const iabn_graph *g, const double *st, int first)
{
    const int *sched = iabn_graph_schedule(g);
    for (int j = 0; j < iabn_graph_schedule_len(g); j++) {
        char key[sizeof r->layers[0].name];
        double flops = layer_key(g, sched[j], key, sizeof key);
        if (flops <= 0) continue;
        int q = 0;
        while (q < r->nlayers && strcmp(r->layers[q].name, key)) q++;
        if (q == IABN_STEPBENCH_LAYERS) continue; /* more shapes than rows: left out */
        iabn_stepbench_layer *l = &r->layers[q];
        if (q == r->nlayers) {
            memset(l, 0, sizeof *l);
            snprintf(l->name, sizeof l->name, "%s", key);
            r->nlayers++;
        }
        l->nodes += first;
        l->seconds += st[j];
        l->flops += flops;
    }
}

static int cmp_layer(const void *a, const void *b)
{
    double x = ((const iabn_stepbench_layer *)a)->seconds;
    double y = ((const iabn_stepbench_layer *)b)->seconds;
    return x > y ? -1 : x < y;
}

static int cmp_op(const void *a, const void *b)
{
    double x = ((const iabn_stepbench_op *)a)->seconds, y = ((const iabn_stepbench_op *)b)->seconds;
    return x > y ? -1 : x < y;
}

/* The timed steps of a built, initialised session. */
static int time_steps(const iabn_stepbench_opts *o, iabn_session *ss, const iabn_backend *be,
                      iabn_device *dev, iabn_sim *sim, size_t used0, iabn_stepbench_result *r,
                      iabn_err *e)
{
    int n = o->repeat, rc = 0;
    double *t = calloc((size_t)n * 6, sizeof *t);
    if (!t) return iabn_err_set(e, IABN_ENOMEM, "out of memory");
    double *tot = t, *fw = t + n, *bw = t + 2 * n, *up = t + 3 * n, *ar = t + 4 * n, *arw = t + 5 * n;
    const iabn_graph *g = ss->graph;
    const int *sched = iabn_graph_schedule(g);
    int ns = iabn_graph_schedule_len(g);
    iabn_exec_profile(ss->exec, r->profiled);
    iabn_sgd_opts so = {.lr = {1e-4f, 1e-4f}, .momentum = 0.9f, .weight_decay = 1e-4f,
                        .nesterov = 1, .grad_scale = 1.f};
    for (int k = 0; k <= n && !rc; k++) {
        if (o->comm) iabn_comm_reset_times(o->comm);
        double t0 = iabn_now();
        rc = iabn_session_run(ss, e);
        if (!rc && be->sync(be->ctx)) /* a GPU run is only queued so far */
            rc = iabn_err_set(e, IABN_EDEVICE, "synchronising after the step failed");
        double t1 = iabn_now();
        if (!rc) rc = iabn_store_sgd_step(ss->store, &so, NULL, e);
        if (!rc && be->sync(be->ctx))
            rc = iabn_err_set(e, IABN_EDEVICE, "synchronising after the update failed");
        double t2 = iabn_now();
        if (rc) break;
        if (k == 0) { /* warm-up; the momentum exists from here */
            size_t pb, gb, ob, bb, np;
            if (sim) iabn_sim_reset_stats(sim);
            iabn_store_totals(ss->store, &np, &pb, &gb, &ob, &bb);
            r->held = ss->plan->arena_bytes + ss->plan->io_bytes + pb + gb + ob + bb;
            r->device_used = iabn_device_used(dev) - used0;
            continue;
        }
        const double *st = iabn_exec_step_times(ss->exec);
        double f = 0;
        for (int j = 0; r->profiled && j < ns; j++)
            if (iabn_graph_n(g, sched[j])->phase == IABN_PHASE_FWD) f += st[j];
        if (o->by_op) add_ops(r, g, st);
        if (o->by_layer) add_layers(r, g, st, k == 1);
        if (o->comm) iabn_comm_times(o->comm, &ar[k - 1], &arw[k - 1]);
        tot[k - 1] = t2 - t0;
        fw[k - 1] = f;
        bw[k - 1] = r->profiled ? t1 - t0 - f : 0; /* the backward and the executor's own time */
        up[k - 1] = t2 - t1;
    }
    if (!rc) {
        r->step_s = median(tot, n);
        r->step_min_s = tot[0]; /* sorted by median() */
        r->forward_s = median(fw, n);
        r->backward_s = median(bw, n);
        r->update_s = median(up, n);
        r->allreduce_s = median(ar, n);
        r->allreduce_wait_s = median(arw, n);
        r->hidden = r->allreduce_s > 0 ? 1.0 - r->allreduce_wait_s / r->allreduce_s : 0;
        if (r->hidden < 0) r->hidden = 0;
        qsort(r->ops, (size_t)r->nops, sizeof r->ops[0], cmp_op);
        qsort(r->layers, (size_t)r->nlayers, sizeof r->layers[0], cmp_layer);
    }
    free(t);
    return rc;
}

int iabn_stepbench_run(const iabn_stepbench_opts *o, iabn_stepbench_result *r, iabn_err *e)
{
    memset(r, 0, sizeof *r);
    if (o->repeat < 1 || o->batch < 1 || !o->model)
        return iabn_err_set(e, IABN_EINVAL, "a step bench needs a model, batch >= 1, repeat >= 1");
    if ((o->storage == IABN_STORAGE_AUTO || o->storage == IABN_STORAGE_RECOMPUTE) && !o->budget)
        return iabn_err_set(e, IABN_EINVAL, "strategy %s needs a budget", iabn_storage_name(o->storage));
    iabn_device dev;
    int rc = iabn_device_open_rank(o->device, iabn_comm_local_rank(o->comm),
                                   o->comm ? iabn_comm_size(o->comm) : 1, &dev, e);
    if (rc) return rc;
    snprintf(r->device, sizeof r->device, "%s", dev.name);
    r->ranks = o->comm ? iabn_comm_size(o->comm) : 1;
    const iabn_backend *be = dev.be;
    iabn_sim *sim = NULL;
    if (be->kind == IABN_DEV_CPU && (o->sim || o->storage != IABN_STORAGE_KEEP)) {
        iabn_sim_opts smo = {.copy_bytes_per_s = o->copy_bytes_per_s};
        if ((rc = iabn_sim_open(&smo, &sim, e))) {
            iabn_device_close(&dev);
            return rc;
        }
        be = iabn_sim_backend(sim);
    }
    iabn_strategy_opts sopt = {.allow_offload = 1, .allow_recompute = 1, .lookahead = o->lookahead,
                               .budget = o->budget, .host_bf16 = o->host_bf16};
    sopt.cost.copy_bytes_per_s = be->kind == IABN_DEV_CPU ? o->copy_bytes_per_s : 0;
    if (o->storage != IABN_STORAGE_KEEP) rc = iabn_cost_calibrate(&sopt.cost, be->kind, e);
    size_t used0 = iabn_device_used(&dev); /* before the store, the plan's arena and io */
    r->gpu = be->kind == IABN_DEV_CUDA;
    r->profiled = o->by_op || o->by_layer || !r->gpu;
    r->sim = sim != NULL;
    iabn_session_cfg sc;
    iabn_session_cfg_defaults(&sc);
    sc.model_cfg = o->model;
    sc.batch = o->batch;
    sc.height = o->height;
    sc.width = o->width;
    sc.backend = be;
    sc.storage = o->storage;
    sc.strategy = &sopt;
    sc.budget_bytes = o->budget; /* over it: refused before allocating */
    sc.layout_mode = o->layout_mode;
    sc.winograd = o->winograd;
    if (o->comm && iabn_comm_size(o->comm) > 1) {
        sc.comm = o->comm;
        sc.grad_bucket_bytes = IABN_BUCKET_BYTES_DEFAULT;
    }
    iabn_session ss = {0};
    if (!rc) rc = iabn_session_build(&sc, &ss, e);
    if (!rc) rc = iabn_model_init(ss.store, o->model, 1, e);
    if (!rc) rc = fill_inputs(&ss, o, e);
    if (!rc) rc = time_steps(o, &ss, be, &dev, sim, used0, r, e);
    if (!rc) {
        r->arena = ss.plan->arena_bytes;
        r->host_bytes = ss.plan->host_bytes;
        r->offload_bytes = ss.plan->offload_bytes;
        r->n_offload = ss.strategy.n_offload;
        r->n_recompute = ss.strategy.n_recompute;
        r->tf32 = r->gpu && iabn_device_tf32(&dev);
    }
    if (!rc && sim) {
        iabn_sim_stats st;
        iabn_sim_get_stats(sim, &st);
        r->sim_device_peak = st.device_peak;
        r->sim_wait_s = st.wait_seconds / o->repeat;
    }
    iabn_session_free(&ss);
    iabn_sim_close(sim);
    iabn_device_close(&dev);
    return rc;
}

char *iabn_stepbench_json(const iabn_stepbench_opts *o, const iabn_stepbench_result *r,
                          const char *copy_bw)
{
    int ranks = r->ranks;
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
    cJSON_AddNumberToObject(j, "step_min_ms", 1e3 * r->step_min_s);
    cJSON_AddNumberToObject(j, "forward_ms", 1e3 * r->forward_s);
    cJSON_AddNumberToObject(j, "backward_ms", 1e3 * r->backward_s);
    cJSON_AddNumberToObject(j, "update_ms", 1e3 * r->update_s);
    cJSON_AddNumberToObject(j, "arena_bytes", (double)r->arena);
    cJSON_AddNumberToObject(j, "held_bytes", (double)r->held);
    if (r->gpu) cJSON_AddNumberToObject(j, "device_used_bytes", (double)r->device_used);
    cJSON_AddBoolToObject(j, "profiled", r->profiled);
    cJSON_AddStringToObject(j, "strategy", iabn_storage_name(o->storage));
    cJSON_AddStringToObject(j, "layout", iabn_layout_mode_name(o->layout_mode));
    cJSON_AddStringToObject(j, "winograd", iabn_winograd_mode_name(o->winograd));
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
    if (o->by_layer) {
        cJSON *ls = cJSON_AddArrayToObject(j, "layers");
        for (int i = 0; ls && i < r->nlayers; i++) {
            const iabn_stepbench_layer *l = &r->layers[i];
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "layer", l->name);
            cJSON_AddNumberToObject(x, "nodes", l->nodes);
            cJSON_AddNumberToObject(x, "ms", 1e3 * l->seconds / o->repeat);
            cJSON_AddNumberToObject(x, "gflops_per_s", l->seconds > 0 ? l->flops / l->seconds * 1e-9 : 0);
            cJSON_AddItemToArray(ls, x);
        }
    }
    char *js = cJSON_Print(j);
    cJSON_Delete(j);
    return js;
}

char *iabn_stepbench_text(const iabn_stepbench_opts *o, const iabn_stepbench_result *r)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    int ranks = r->ranks;
    fprintf(f, "%s %s batch %d %dx%d on %s, %d threads: step %.1f ms", o->model->arch,
            iabn_bn_mode_name(o->model->bn), o->batch, o->height, o->width, r->device,
            iabn_num_threads(), 1e3 * r->step_s);
    if (r->profiled)
        fprintf(f, " (forward %.1f, backward %.1f, update %.1f)", 1e3 * r->forward_s,
                1e3 * r->backward_s, 1e3 * r->update_s);
    else
        fprintf(f, " (update %.1f; --ops for the forward / backward split)", 1e3 * r->update_s);
    fprintf(f, ", median of %d (fastest %.1f); arena %.1f MiB, step holds %.1f MiB", o->repeat,
            1e3 * r->step_min_s, (double)r->arena / 1048576.0, (double)r->held / 1048576.0);
    if (r->gpu) fprintf(f, " (driver: +%.1f MiB)", (double)r->device_used / 1048576.0);
    if (r->sim)
        fprintf(f, "; sim device peak %.1f MiB, host pool %.1f MiB, %s copies %.1f GB/s, "
                "waited %.1f ms/step", (double)r->sim_device_peak / 1048576.0,
                (double)r->host_bytes / 1048576.0, iabn_storage_name(o->storage),
                o->copy_bytes_per_s / 1e9, 1e3 * r->sim_wait_s);
    if (ranks > 1)
        fprintf(f, "; %d ranks (global batch %d): gradient all-reduce %.1f ms, waited for "
                "%.1f ms, %.0f%% hidden behind the backward",
                ranks, o->batch * ranks, 1e3 * r->allreduce_s, 1e3 * r->allreduce_wait_s,
                100.0 * r->hidden);
    int bad = ferror(f);
    if (fclose(f) || bad) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* ---- one BN+ACT+CONV block ------------------------------------------------- */

typedef struct block_spec {
    int channels, groups;
    iabn_norm_act_cfg cfg;
} block_spec;

/* The session's graph builder: the block under test, fed by a producer. */
static int build_block(iabn_graph *g, int x, void *user, int *out, iabn_err *e)
{
    const block_spec *b = user;
    (void)e;
    /* the block's input must be an activation the in-place modes may
     * overwrite, as in a network: a cheap depthwise conv produces it */
    int act = iabn_conv2d(g, "pre", x, b->channels, 1, 1, 0, 1, b->channels, 0);
    iabn_graph_begin_block(g, "block");
    int z = iabn_norm_act(g, "bn", act, &b->cfg);
    *out = iabn_conv2d(g, "conv", z, b->channels, 3, 1, 1, 1, b->groups, 0);
    return 0;
}

/* One mode's block session, initialised, fed and warmed up. */
static int block_setup(int c, int hw, int batch, int groups, iabn_bn_mode mode, iabn_session *ss,
                       iabn_blockbench_result *r, iabn_err *e)
{
    block_spec spec = {c, groups, iabn_norm_act_defaults(mode)};
    iabn_session_cfg sc;
    iabn_session_cfg_defaults(&sc);
    sc.build = build_block;
    sc.build_user = &spec;
    sc.batch = batch;
    sc.channels = c;
    sc.height = sc.width = hw;
    sc.labels = IABN_LABELS_PER_PIXEL;
    int rc = iabn_session_build(&sc, ss, e);
    if (!rc) rc = iabn_init_params(ss->store, IABN_INIT_XAVIER_NORMAL, spec.cfg.act, 1, e);
    if (rc) return rc;
    float *xp = iabn_exec_ptr(ss->exec, ss->input);
    for (size_t i = 0; i < (size_t)batch * c * hw * hw; i++) xp[i] = iabn_rng_normal(7, 0, i);
    int32_t *lp = iabn_exec_ptr(ss->exec, ss->labels);
    for (int i = 0; i < batch * hw * hw; i++) lp[i] = i % c;
    iabn_exec_profile(ss->exec, 1);
    iabn_block_mem rows[2];
    iabn_plan_blocks(ss->graph, ss->plan, rows);
    r->kept = rows[0].kept_bytes; /* block 0: the BN+ACT+CONV block */
    r->buffers = rows[0].kept_buffers;
    return iabn_session_run(ss, e); /* warm-up */
}

/* One timed run: the seconds of the block's own nodes. */
static int block_run(iabn_session *ss, double *sec, iabn_err *e)
{
    int rc = iabn_session_run(ss, e);
    if (rc) return rc;
    const iabn_graph *g = ss->graph;
    const double *st = iabn_exec_step_times(ss->exec);
    const int *sched = iabn_graph_schedule(g);
    double sum = 0;
    for (int i = 0; i < iabn_graph_schedule_len(g); i++)
        if (iabn_graph_n(g, sched[i])->block == 0) sum += st[i];
    *sec = sum;
    return 0;
}

int iabn_blockbench_run(int channels, int hw, int batch, int groups, int repeat,
                        const iabn_bn_mode *modes, int n, iabn_blockbench_result *r, iabn_err *e)
{
    if (channels < 1 || hw < 1 || batch < 1 || groups < 1 || channels % groups || repeat < 1 || n < 1)
        return iabn_err_set(e, IABN_EINVAL, "block bench: %d channels, %dx%d, batch %d, %d groups, "
                            "%d repeats, %d modes", channels, hw, hw, batch, groups, repeat, n);
    iabn_session *ss = calloc((size_t)n, sizeof *ss);
    double *t = calloc((size_t)n * repeat, sizeof *t);
    int rc = ss && t ? 0 : iabn_err_set(e, IABN_ENOMEM, "out of memory");
    /* every mode's session first, then the repeats round-robin over them */
    for (int m = 0; m < n && !rc; m++)
        rc = block_setup(channels, hw, batch, groups, modes[m], &ss[m], &r[m], e);
    for (int k = 0; k < repeat && !rc; k++)
        for (int m = 0; m < n && !rc; m++) rc = block_run(&ss[m], &t[m * repeat + k], e);
    for (int m = 0; m < n && !rc; m++) r[m].ms = 1e3 * median(t + m * repeat, repeat);
    for (int m = 0; m < n && !rc; m++) r[m].ratio = r[m].ms / r[0].ms;
    for (int m = 0; ss && m < n; m++) iabn_session_free(&ss[m]);
    free(ss);
    free(t);
    return rc;
}

static const struct {
    const char *name;
    int c, hw;
} fig4_shapes[IABN_FIG4_SHAPES] = {{"mod2", 128, 56}, {"mod3", 256, 28}, {"mod4", 512, 14},
                                   {"mod5", 1024, 7}};
static const iabn_bn_mode fig4_modes[IABN_FIG4_MODES] = {
    IABN_BN_STANDARD, IABN_BN_CHECKPOINT, IABN_BN_CHECKPOINT_OPT, IABN_BN_INPLACE,
    IABN_BN_INPLACE_II};

const char *iabn_fig4_shape_name(int shape)
{
    return shape >= 0 && shape < IABN_FIG4_SHAPES ? fig4_shapes[shape].name : NULL;
}

iabn_bn_mode iabn_fig4_mode(int m) { return fig4_modes[m >= 0 && m < IABN_FIG4_MODES ? m : 0]; }

int iabn_fig4_run(int shape, int batch, int groups, int repeat,
                  iabn_blockbench_result r[IABN_FIG4_MODES], int *target_met, iabn_err *e)
{
    if (shape < 0 || shape >= IABN_FIG4_SHAPES)
        return iabn_err_set(e, IABN_EINVAL, "Fig. 4 shape %d: 0 to %d", shape, IABN_FIG4_SHAPES - 1);
    int rc = iabn_blockbench_run(fig4_shapes[shape].c, fig4_shapes[shape].hw, batch, groups, repeat,
                                 fig4_modes, IABN_FIG4_MODES, r, e);
    /* r[0] standard, r[1] checkpoint, r[4] inplace_abn_ii */
    if (!rc) *target_met = r[4].ms <= 1.05 * r[0].ms && r[1].ms > r[4].ms;
    return rc;
}

/* ---- the data loader ------------------------------------------------------- */

static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + (double)u.ru_stime.tv_sec +
           u.ru_stime.tv_usec * 1e-6;
}

int iabn_databench_run(const iabn_loader_cfg *cfg, iabn_dataset *ds, int epochs,
                       iabn_databench_result *r, iabn_err *e)
{
    memset(r, 0, sizeof *r);
    iabn_loader_cfg c = *cfg;
    c.drop_last = 0; /* every image, once per epoch */
    iabn_loader *ld = NULL;
    int rc = iabn_loader_open(&c, ds, &ld, e);
    if (rc) return rc;
    double t0 = iabn_now(), c0 = cpu_seconds();
    for (int ep = 0; ep < epochs && !rc; ep++) {
        if ((rc = iabn_loader_start_epoch(ld, ep, e))) break;
        iabn_batch *b;
        int got;
        while ((got = iabn_loader_next(ld, &b, e)) == 0) {
            r->images += b->n;
            r->checksum += b->images[0];
            iabn_loader_release(ld, b);
        }
        if (got < 0) rc = got;
    }
    r->seconds = iabn_now() - t0;
    r->cpu_seconds = cpu_seconds() - c0;
    iabn_loader_get_stats(ld, &r->stats);
    iabn_loader_close(ld);
    return rc;
}

/* ---- the gradient all-reduce ---------------------------------------------- */

int iabn_allreduce_bench_run(iabn_comm *c, float *buf, size_t bytes, int repeat, double *median_s,
                             iabn_err *e)
{
    int world = iabn_comm_size(c);
    size_t n = bytes / 4;
    double *t = malloc((size_t)repeat * sizeof *t);
    double *all = malloc((size_t)world * (size_t)repeat * sizeof *all);
    int rc = t && all && repeat > 0 ? 0 : iabn_err_set(e, IABN_ENOMEM, "out of memory");
    if (!rc) rc = iabn_comm_allreduce(c, NULL, buf, n, IABN_COMM_F32, "warm-up", e);
    for (int r = 0; r < repeat && !rc; r++) {
        rc = iabn_comm_barrier(c, "bench barrier", e);
        double t0 = iabn_now();
        if (!rc) rc = iabn_comm_allreduce(c, NULL, buf, n, IABN_COMM_F32, "bench", e);
        t[r] = iabn_now() - t0;
    }
    /* the slowest rank's time is the collective's */
    if (!rc) rc = iabn_comm_allgather(c, t, all, (size_t)repeat * sizeof *t, "bench times", e);
    for (int r = 0; r < repeat && !rc; r++) {
        t[r] = all[r];
        for (int w = 1; w < world; w++)
            if (all[(size_t)w * repeat + r] > t[r]) t[r] = all[(size_t)w * repeat + r];
    }
    if (!rc) *median_s = median(t, repeat);
    free(t);
    free(all);
    return rc;
}
