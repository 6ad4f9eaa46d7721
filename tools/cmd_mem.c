/* cmd_mem.c: `iabn mem`, the per-model memory report.  For each requested BN
 * mode it plans a full training step (forward, backward, loss) without
 * allocating anything and prints, side by side: parameters, gradients,
 * optimizer state, running statistics, the planned arena, the planner's lower
 * bound, the activation bytes kept for the backward, per-module (or per-block)
 * rows, and with --budget the largest batch and the largest square crop that
 * fit.  --plot draws live memory over the schedule; --json gives the numbers.
 * --device cuda plans for the CUDA backend (no GPU needed): its scratch is
 * cuDNN's workspace, its alignment 256 bytes, and the copy stream's second
 * input buffer counts.
 * Storage strategies (graph/strategy.h): --offload adds, per BN mode, a
 * column with the paper's offload of conv / pool inputs, --strategy auto
 * (with --budget) one with the automatic keep / recompute / offload choice;
 * each shows its device and host bytes and its estimated time overhead, and
 * --largest-batch prints the largest batch that fits for every mode. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "iabn.h"
#include "tools/options.h"
#include "models/train/plot.h"

#define IABN_MAX_MARKS 256
#include "tools/commands.h"
#include "tensor/device.h"

#define MAX_MODES 24

typedef struct row {
    char name[IABN_NAME_LEN];
    size_t kept;
    int buffers, copies;
    int offloaded, recomputed;  /* saved tensors by policy */
} row;

typedef struct report {
    iabn_bn_mode mode;
    iabn_session_mem m;         /* scratch: cuDNN's workspace on cuda */
    iabn_storage storage;
    size_t *host_live;          /* per step: bytes on the host */
    int n_off, n_rc, fits;
    double est;                 /* estimated step seconds (cost model) */
    double est_base;            /* auto: the keep-everything estimate */
    double strategy_s;          /* auto: seconds the choice took */
    row *rows;
    int nrows;
    size_t *live;
    int nsteps, boundary;
    double *mark_step;          /* forward steps where a module (block) starts */
    char (*mark_name)[IABN_NAME_LEN];
    int nmarks;
    long max_batch, max_crop;
} report;

typedef struct mem_args {
    const char *arch;
    int batch, h, w, classes, blocks, steps;
    double budget;
    const iabn_backend *be;     /* planning backend of --device */
    const char *device;
    iabn_strategy_opts sopts;   /* cost model, lookahead, budget for auto */
    int world, global_batch;    /* --world: ranks sharing --batch */
} mem_args;

/* The forward steps at which the report's next row (module, or block with
 * --blocks) starts: the memory plot's marks. */
static int mark_modules(const iabn_graph *g, const mem_args *a, const iabn_model_block *mb, int nb,
                        report *r, iabn_err *e)
{
    const int *sched = iabn_graph_schedule(g);
    int n = r->boundary < iabn_graph_schedule_len(g) ? r->boundary : iabn_graph_schedule_len(g);
    r->mark_step = malloc((size_t)(nb + 1) * sizeof *r->mark_step);
    r->mark_name = malloc((size_t)(nb + 1) * sizeof *r->mark_name);
    if (!r->mark_step || !r->mark_name) return iabn_err_set(e, IABN_ENOMEM, "out of memory");
    for (int s = 0; s < n && r->nmarks < nb; s++) {
        int b = iabn_graph_n(g, sched[s])->block;
        if (b < 0 || b >= nb) continue;
        const char *name = a->blocks || !mb[b].module[0] ? iabn_graph_block_name(g, b) : mb[b].module;
        if (r->nmarks && !strcmp(r->mark_name[r->nmarks - 1], name)) continue;
        int seen = 0;
        for (int k = 0; k < r->nmarks && !seen; k++) seen = !strcmp(r->mark_name[k], name);
        if (seen) continue;
        r->mark_step[r->nmarks] = s;
        snprintf(r->mark_name[r->nmarks++], IABN_NAME_LEN, "%s", name);
    }
    return 0;
}

static char *col_name(const report *r, char *buf, size_t n)
{
    if (r->storage == IABN_STORAGE_KEEP) snprintf(buf, n, "%s", iabn_bn_mode_name(r->mode));
    else snprintf(buf, n, "%.10s+%s", iabn_bn_mode_name(r->mode), iabn_storage_name(r->storage));
    return buf;
}

/* The session description of --device's step for mode at batch x h x w. */
static void step_cfg(const mem_args *a, iabn_bn_mode mode, iabn_storage st, int batch, int h,
                     int w, iabn_model_cfg *mc, iabn_session_cfg *c)
{
    *mc = iabn_model_defaults(a->arch);
    mc->bn = mode;
    if (a->classes > 0) mc->classes = a->classes;
    if (iabn_bn_mode_is_inplace(mode) && !iabn_act_invertible(mc->act.kind)) {
        mc->act.kind = IABN_ACT_LEAKY_RELU;
        mc->act.param = iabn_act_default_param(IABN_ACT_LEAKY_RELU);
    }
    iabn_session_cfg_defaults(c);
    c->model_cfg = mc;
    c->batch = batch;
    c->height = h;
    c->width = w;
    c->backend = a->be;
    c->plan_only = 1;
    c->storage = st;
    c->strategy = &a->sopts;
    if (a->world > 1) c->grad_bucket_bytes = IABN_BUCKET_BYTES_DEFAULT;
}

/* Plans one training step; fills r (rows and live when full). */
static int plan_step(const mem_args *a, iabn_bn_mode mode, iabn_storage st, int batch, int h,
                     int w, int full, report *r, iabn_err *e)
{
    iabn_model_cfg mc;
    iabn_session_cfg c;
    step_cfg(a, mode, st, batch, h, w, &mc, &c);
    iabn_session ss;
    int rc = iabn_session_build(&c, &ss, e);
    if (!rc) {
        iabn_graph *g = ss.graph;
        const iabn_plan *p = ss.plan;
        memset(r, 0, sizeof *r);
        r->mode = mode;
        r->m = ss.mem;
        r->storage = st;
        r->n_off = ss.strategy.n_offload;
        r->n_rc = ss.strategy.n_recompute;
        r->fits = (st != IABN_STORAGE_AUTO && st != IABN_STORAGE_RECOMPUTE) || ss.strategy.fits;
        r->est = iabn_strategy_estimate(g, p, &a->sopts.cost);
        r->est_base = ss.strategy.base_time;
        r->strategy_s = ss.strategy.seconds;
        if (full) {
            int nb = iabn_graph_block_count(g);
            iabn_block_mem *bm = calloc((size_t)nb + 1, sizeof *bm);
            iabn_model_block *mb = calloc((size_t)nb + 1, sizeof *mb);
            r->rows = calloc((size_t)nb + 1, sizeof *r->rows);
            r->live = malloc((size_t)p->nsteps * sizeof *r->live);
            r->host_live = calloc((size_t)p->nsteps + 1, sizeof *r->host_live);
            if (!bm || !mb || !r->rows || !r->live || !r->host_live) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
            if (!rc && a->steps) {
                printf("schedule of %s, %s (step, phase F/B/R, node, op, live bytes, outputs@offset+bytes <- inputs):\n",
                       a->arch, iabn_bn_mode_name(mode));
                iabn_plan_dump(g, p, stdout);
                printf("\n");
            }
            if (!rc) {
                iabn_plan_blocks(g, p, bm);
                iabn_model_blocks(g, mb, nb);
                memcpy(r->live, p->live, (size_t)p->nsteps * sizeof *r->live);
                for (int t = 0; t < iabn_graph_ntensors(g); t++)
                    if (iabn_graph_t(g, t)->kind == IABN_T_HOST)
                        for (int q = p->first[t]; q <= p->last[t]; q++)
                            r->host_live[q] += iabn_graph_t(g, t)->nbytes;
                r->nsteps = p->nsteps;
                r->boundary = p->boundary;
                for (int b = 0; b < nb; b++) {
                    const char *name = a->blocks ? iabn_graph_block_name(g, b)
                                       : (mb[b].module[0] ? mb[b].module : iabn_graph_block_name(g, b));
                    int k = 0;
                    while (k < r->nrows && strcmp(r->rows[k].name, name)) k++;
                    if (k == r->nrows) snprintf(r->rows[r->nrows++].name, IABN_NAME_LEN, "%s", name);
                    r->rows[k].kept += bm[b].kept_bytes;
                    r->rows[k].buffers += bm[b].kept_buffers;
                    r->rows[k].copies += bm[b].copies;
                    for (int t = 0; t < iabn_graph_ntensors(g); t++) {
                        const iabn_tensor *tt = iabn_graph_t(g, t);
                        if (tt->block != b || tt->kind != IABN_T_ACT) continue;
                        r->rows[k].offloaded += tt->policy == IABN_OFFLOAD;
                        r->rows[k].recomputed += tt->policy == IABN_RECOMPUTE;
                    }
                }
            }
            if (!rc) rc = mark_modules(g, a, mb, nb, r, e);
            free(bm);
            free(mb);
        }
    }
    iabn_session_free(&ss);
    return rc;
}

/* The largest batch, or square crop at --batch, whose step fits --budget. */
static int search(const mem_args *a, iabn_bn_mode mode, iabn_storage st, int crop, long *out,
                  iabn_err *e)
{
    iabn_model_cfg mc;
    iabn_session_cfg c;
    step_cfg(a, mode, st, a->batch, a->h, a->w, &mc, &c);
    int v = 0;
    int rc = iabn_session_largest(&c, crop ? IABN_SEARCH_SIDE : IABN_SEARCH_BATCH,
                                  (size_t)a->budget, &v, e);
    *out = v;
    return rc;
}

static double mib(size_t b) { return (double)b / 1048576.0; }

/* The estimated time of the keep column of the same BN mode. */
static double base_est(const report *r, int n, int i)
{
    for (int k = 0; k < n; k++)
        if (r[k].mode == r[i].mode && r[k].storage == IABN_STORAGE_KEEP && r[k].est > 0)
            return r[k].est;
    return r[i].est_base > 0 ? r[i].est_base : r[i].est > 0 ? r[i].est : 1;
}

static void print_table(const mem_args *a, report *r, int n)
{
    printf("%s, batch %d, %dx%d, training step (forward + backward), float32, %s backend\n",
           a->arch, a->batch, a->h, a->w, a->be->name);
    char cn[40];
    if (a->world > 1)
        printf("per rank of %d: global batch %d split %d per rank (the largest share)\n",
               a->world, a->global_batch, a->batch);
    printf("%-34s", "");
    for (int i = 0; i < n; i++) printf(" %16s", col_name(&r[i], cn, sizeof cn));
    printf("\n");
#define LINE(label, expr, fmt)                                         \
    printf("%-34s", label);                                            \
    for (int i = 0; i < n; i++) printf(" " fmt, expr);                 \
    printf("\n")
    LINE("parameters (count)", (double)r[i].m.params, "%16.0f");
    LINE("parameters MiB", mib(r[i].m.param_bytes), "%16.1f");
    LINE("gradients MiB", mib(r[i].m.grad_bytes), "%16.1f");
    LINE("optimizer state MiB (momentum)", mib(r[i].m.optim_bytes), "%16.1f");
    LINE("running statistics MiB", mib(r[i].m.buffer_bytes), "%16.2f");
    LINE("inputs / outputs MiB", mib(r[i].m.io), "%16.1f");
    if (a->be->kind == IABN_DEV_CUDA) {
        LINE("  staged next inputs MiB", mib(r[i].m.staging), "%16.1f");
    }
    LINE("activations kept for backward MiB", mib(r[i].m.saved), "%16.1f");
    LINE("  per sample MiB", mib(r[i].m.saved) / a->batch, "%16.2f");
    LINE("arena peak MiB (planned)", mib(r[i].m.arena), "%16.1f");
    LINE("lower bound MiB (max live)", mib(r[i].m.lower_bound), "%16.1f");
    LINE("arena / lower bound", (double)r[i].m.arena / (double)r[i].m.lower_bound, "%16.3f");
    LINE(a->be->kind == IABN_DEV_CUDA ? "  largest cuDNN workspace MiB" : "  largest kernel scratch MiB",
         mib(r[i].m.scratch_max), "%16.1f");
    LINE("without reuse MiB", mib(r[i].m.naive), "%16.1f");
    LINE("copies for in-place", (double)r[i].m.copies, "%16.0f");
    if (a->world > 1) {
        LINE("all-reduce buckets (25 MiB)", (double)r[i].m.buckets, "%16.0f");
        LINE("  bucket buffers MiB (in arena)", mib(r[i].m.bucket_bytes), "%16.1f");
    }
    LINE("total step MiB (device)", mib(r[i].m.total), "%16.1f");
    LINE("host pool MiB (offloaded copies)", mib(r[i].m.host), "%16.1f");
    LINE("offloaded tensors", (double)r[i].n_off, "%16.0f");
    LINE("recomputed tensors (strategy)", (double)r[i].n_rc, "%16.0f");
    LINE("estimated step time overhead %", 100.0 * (r[i].est / base_est(r, n, i) - 1.0), "%16.1f");
    LINE("fits the budget (auto)", (double)r[i].fits, "%16.0f");
    LINE("strategy choice seconds (auto)", r[i].strategy_s, "%16.3f");
    if (n > 1) { LINE("kept / first mode", (double)r[i].m.saved / (double)r[0].m.saved, "%16.3f"); }
    if (a->budget > 0) {
        char lab[64];
        snprintf(lab, sizeof lab, "largest batch in %.1f GiB", a->budget / 1073741824.0);
        LINE(lab, (double)r[i].max_batch, "%16.0f");
        snprintf(lab, sizeof lab, "largest square crop at batch %d", a->batch);
        LINE(lab, (double)r[i].max_crop, "%16.0f");
    }
#undef LINE
    printf("\n%-34s", a->blocks ? "block: kept MiB/buffers/copies" : "module: kept MiB/buffers/copies");
    for (int i = 0; i < n; i++) printf(" %16s", col_name(&r[i], cn, sizeof cn));
    printf("\n");
    for (int k = 0; k < r[0].nrows; k++) {
        printf("%-34.34s", r[0].rows[k].name);
        for (int i = 0; i < n; i++) {
            const row *w = NULL;
            for (int j = 0; j < r[i].nrows; j++)
                if (!strcmp(r[i].rows[j].name, r[0].rows[k].name)) w = &r[i].rows[j];
            if (!w) printf(" %16s", "-");
            else {
                char cell[48];
                if (w->offloaded || w->recomputed)
                    snprintf(cell, sizeof cell, "%.1f/%d/%d o%dr%d", mib(w->kept), w->buffers,
                             w->copies, w->offloaded, w->recomputed);
                else snprintf(cell, sizeof cell, "%.1f/%d/%d", mib(w->kept), w->buffers, w->copies);
                printf(" %16s", cell);
            }
        }
        printf("\n");
    }
}

static void print_json(const mem_args *a, report *r, int n)
{
    cJSON *out = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", a->arch);
        cJSON_AddStringToObject(o, "bn_mode", iabn_bn_mode_name(r[i].mode));
        cJSON_AddStringToObject(o, "strategy", iabn_storage_name(r[i].storage));
        cJSON_AddNumberToObject(o, "device_total_bytes", (double)r[i].m.total);
        cJSON_AddNumberToObject(o, "host_bytes", (double)r[i].m.host);
        cJSON_AddNumberToObject(o, "offloaded_tensors", r[i].n_off);
        cJSON_AddNumberToObject(o, "recomputed_tensors", r[i].n_rc);
        cJSON_AddNumberToObject(o, "est_step_seconds", r[i].est);
        cJSON_AddNumberToObject(o, "est_overhead", r[i].est / base_est(r, n, i) - 1.0);
        cJSON_AddBoolToObject(o, "fits", r[i].fits);
        if (r[i].storage == IABN_STORAGE_AUTO || r[i].storage == IABN_STORAGE_RECOMPUTE)
            cJSON_AddNumberToObject(o, "strategy_seconds", r[i].strategy_s);
        cJSON_AddNumberToObject(o, "batch", a->batch);
        if (a->world > 1) {
            cJSON_AddNumberToObject(o, "world", a->world);
            cJSON_AddNumberToObject(o, "global_batch", a->global_batch);
            cJSON_AddNumberToObject(o, "allreduce_buckets", r[i].m.buckets);
            cJSON_AddNumberToObject(o, "bucket_bytes", (double)r[i].m.bucket_bytes);
        }
        cJSON_AddNumberToObject(o, "height", a->h);
        cJSON_AddNumberToObject(o, "width", a->w);
        cJSON_AddNumberToObject(o, "params", (double)r[i].m.params);
        cJSON_AddNumberToObject(o, "param_bytes", (double)r[i].m.param_bytes);
        cJSON_AddNumberToObject(o, "grad_bytes", (double)r[i].m.grad_bytes);
        cJSON_AddNumberToObject(o, "optimizer_bytes", (double)r[i].m.optim_bytes);
        cJSON_AddNumberToObject(o, "buffer_bytes", (double)r[i].m.buffer_bytes);
        cJSON_AddNumberToObject(o, "io_bytes", (double)r[i].m.io);
        cJSON_AddStringToObject(o, "device", a->be->name);
        cJSON_AddNumberToObject(o, "staging_bytes", (double)r[i].m.staging);
        cJSON_AddNumberToObject(o, "workspace_max_bytes", (double)r[i].m.scratch_max);
        cJSON_AddNumberToObject(o, "workspace_sum_bytes", (double)r[i].m.scratch_sum);
        cJSON_AddNumberToObject(o, "arena_bytes", (double)r[i].m.arena);
        cJSON_AddNumberToObject(o, "lower_bound_bytes", (double)r[i].m.lower_bound);
        cJSON_AddNumberToObject(o, "saved_activation_bytes", (double)r[i].m.saved);
        cJSON_AddNumberToObject(o, "copies", r[i].m.copies);
        cJSON_AddNumberToObject(o, "total_bytes", (double)r[i].m.total);
        if (a->budget > 0) {
            cJSON_AddNumberToObject(o, "budget_bytes", a->budget);
            cJSON_AddNumberToObject(o, "max_batch", (double)r[i].max_batch);
            cJSON_AddNumberToObject(o, "max_crop", (double)r[i].max_crop);
        }
        cJSON *rows = cJSON_AddArrayToObject(o, "rows");
        for (int k = 0; k < r[i].nrows; k++) {
            cJSON *w = cJSON_CreateObject();
            cJSON_AddStringToObject(w, "name", r[i].rows[k].name);
            cJSON_AddNumberToObject(w, "kept_bytes", (double)r[i].rows[k].kept);
            cJSON_AddNumberToObject(w, "stored_buffers", r[i].rows[k].buffers);
            cJSON_AddNumberToObject(w, "copies", r[i].rows[k].copies);
            cJSON_AddNumberToObject(w, "offloaded", r[i].rows[k].offloaded);
            cJSON_AddNumberToObject(w, "recomputed", r[i].rows[k].recomputed);
            cJSON_AddItemToArray(rows, w);
        }
        cJSON_AddItemToArray(out, o);
    }
    char *s = cJSON_Print(out);
    printf("%s\n", s);
    free(s);
    cJSON_Delete(out);
}

/* Live activation memory over the schedule, one curve per BN mode, with the
 * modules (or blocks) of the first mode marked and the backward's start. */
static int write_svg(const char *path, const mem_args *a, report *r, int n, iabn_err *e)
{
    iabn_plot_series ser[MAX_MODES];
    char label[MAX_MODES][96], title[256];
    double *xs[MAX_MODES] = {0}, *ys[MAX_MODES] = {0};
    const char *names[IABN_MAX_MARKS + 1];
    double marks[IABN_MAX_MARKS + 1];
    int rc = 0, nmarks = 0;
    for (int i = 0; i < n && !rc; i++) {
        xs[i] = malloc((size_t)r[i].nsteps * sizeof *xs[i]);
        ys[i] = malloc((size_t)r[i].nsteps * sizeof *ys[i]);
        if (!xs[i] || !ys[i]) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
        for (int s = 0; !rc && s < r[i].nsteps; s++) {
            xs[i][s] = s;
            ys[i][s] = mib(r[i].live[s]);
        }
        char cn[40];
        snprintf(label[i], sizeof label[i], "%s: peak %.1f MiB", col_name(&r[i], cn, sizeof cn),
                 mib(r[i].m.arena));
        ser[i] = (iabn_plot_series){label[i], xs[i], ys[i], r[i].nsteps, i, 0, 0};
    }
    /* the host pool of each offloading column: bytes on the host per step, dashed */
    int ns = n;
    for (int i = 0; i < n && !rc && ns < MAX_MODES; i++) {
        if (!r[i].m.host || !r[i].host_live) continue;
        xs[ns] = malloc((size_t)r[i].nsteps * sizeof *xs[ns]);
        ys[ns] = malloc((size_t)r[i].nsteps * sizeof *ys[ns]);
        if (!xs[ns] || !ys[ns]) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
        for (int s = 0; !rc && s < r[i].nsteps; s++) {
            xs[ns][s] = s;
            ys[ns][s] = mib(r[i].host_live[s]);
        }
        char cn[40];
        snprintf(label[ns], sizeof label[ns], "%s: host pool %.1f MiB, %d tensors offloaded",
                 col_name(&r[i], cn, sizeof cn), mib(r[i].m.host), r[i].n_off);
        ser[ns] = (iabn_plot_series){label[ns], xs[ns], ys[ns], r[i].nsteps, i, 1, 0};
        ns++;
    }
    for (int k = 0; n && k < r[0].nmarks && nmarks < IABN_MAX_MARKS; k++) {
        marks[nmarks] = r[0].mark_step[k];
        names[nmarks++] = r[0].mark_name[k];
    }
    if (n) {
        marks[nmarks] = r[0].boundary;
        names[nmarks++] = "backward";
    }
    snprintf(title, sizeof title, "%s, batch %d, %dx%d: live activation memory over the schedule",
             a->arch, a->batch, a->h, a->w);
    iabn_plot_panel panel = {"forward, then backward (marks: module starts in the forward)",
                             "schedule step", "live MiB", ser, ns, 0, marks, names, nmarks};
    if (!rc) rc = iabn_plot_svg(path, title, &panel, 1, e);
    for (int i = 0; i < MAX_MODES; i++) {
        free(xs[i]);
        free(ys[i]);
    }
    return rc;
}

int iabn_cmd_mem(int argc, char **argv)
{
    mem_args a = {NULL, 32, 0, 0, 0, 0, 0, 0, NULL, "cpu", {0}, 1, 32};
    iabn_args o;
    int prc = iabn_args_parse(&o, IABN_C_MEM, argc, argv);
    if (prc) return prc == IABN_ARGS_HELP ? 0 : 2;
    if (o.v[IABN_O_LIST].set) {
        int cnt;
        const char *const *names = iabn_model_names(&cnt);
        for (int k = 0; k < cnt; k++) {
            const char *d = iabn_model_describe(names[k]);
            printf("%-32s %s\n", names[k], d ? d : "");
        }
        return 0;
    }
    const char *modes_s = o.v[IABN_O_BN].set ? o.v[IABN_O_BN].s : "standard,inplace_abn_ii";
    const char *plot = o.v[IABN_O_PLOT].s;
    int json = o.v[IABN_O_JSON].set;
    a.blocks = o.v[IABN_O_BLOCKS].set;
    a.steps = o.v[IABN_O_STEPS].set;
    if (o.v[IABN_O_BATCH].set) a.batch = (int)o.v[IABN_O_BATCH].i;
    if (o.v[IABN_O_CLASSES].set) a.classes = (int)o.v[IABN_O_CLASSES].i;
    if (o.v[IABN_O_SIZE].set) a.h = o.v[IABN_O_SIZE].h, a.w = o.v[IABN_O_SIZE].w;
    if (o.v[IABN_O_BUDGET].set) a.budget = o.v[IABN_O_BUDGET].f;
    if (o.v[IABN_O_DEVICE].set) a.device = o.v[IABN_O_DEVICE].s;
    if (o.v[IABN_O_WORLD].set) a.world = (int)o.v[IABN_O_WORLD].i;
    a.arch = o.npos ? o.pos[0] : o.v[IABN_O_MODEL].s;
    if (o.npos && o.v[IABN_O_MODEL].set) {
        fprintf(stderr, "iabn mem: the model both as --model and as an argument\n");
        return 2;
    }
    int want[IABN_STORAGE_NMODES] = {1, 0, 0, 0};
    int largest = o.v[IABN_O_LARGEST_BATCH].set;
    int gpu_cost = o.v[IABN_O_COST].set && !strcmp(o.v[IABN_O_COST].s, "gpu");
    double copy_bw = 0;
    a.sopts.allow_offload = a.sopts.allow_recompute = 1;
    a.sopts.lookahead = o.v[IABN_O_LOOKAHEAD].set ? (int)o.v[IABN_O_LOOKAHEAD].i : 1;
    if (o.v[IABN_O_OFFLOAD].set) want[IABN_STORAGE_OFFLOAD] = 1;
    if (o.v[IABN_O_STRATEGY].set) {
        iabn_storage st;
        iabn_err se = {0};
        if (iabn_storage_parse(o.v[IABN_O_STRATEGY].s, &st, &se)) {
            fprintf(stderr, "iabn mem: %s\n", se.msg);
            return 2;
        }
        want[IABN_STORAGE_KEEP] = st == IABN_STORAGE_KEEP;
        want[st] = 1;
    }
    if (o.v[IABN_O_COPY_BW].set) {
        char *end;
        copy_bw = strtod(o.v[IABN_O_COPY_BW].s, &end) * 1e9;
        if (*end || copy_bw <= 0) {
            fprintf(stderr, "iabn mem: --copy-bw %s (GB/s)\n", o.v[IABN_O_COPY_BW].s);
            return 2;
        }
    }
    if (!a.arch) {
        fprintf(stderr, "iabn mem: which model? iabn mem MODEL (iabn mem --list; iabn mem --help)\n");
        return 2;
    }
    {
        iabn_err de = {0};
        if (iabn_device_planning_backend(a.device, &a.be, &de)) {
            fprintf(stderr, "iabn mem: %s\n", de.msg);
            return 2;
        }
    }
    if (!iabn_model_exists(a.arch)) {
        fprintf(stderr, "iabn mem: unknown model '%s' (iabn mem --list)\n", a.arch);
        return 2;
    }
    if (!a.h) a.h = a.w = iabn_model_is_segmentation(a.arch) ? 512 : 224;
    a.global_batch = a.batch;
    if (a.world > 1) {
        if (a.batch < a.world) {
            fprintf(stderr, "iabn mem: --batch %d cannot be split over --world %d ranks\n",
                    a.batch, a.world);
            return 2;
        }
        a.batch = (a.batch + a.world - 1) / a.world;
    }
    if ((want[IABN_STORAGE_AUTO] || want[IABN_STORAGE_RECOMPUTE] || largest) && a.budget <= 0) {
        fprintf(stderr, "iabn mem: --strategy auto|recompute and --largest-batch need --budget\n");
        return 2;
    }
    a.sopts.budget = a.budget > 0 ? (size_t)a.budget : 0;
    a.sopts.cost.copy_bytes_per_s = copy_bw;
    {
        iabn_err ce = {0};
        if (iabn_cost_calibrate(&a.sopts.cost, gpu_cost ? IABN_DEV_CUDA : a.be->kind, &ce)) {
            fprintf(stderr, "iabn mem: %s\n", ce.msg);
            return 1;
        }
    }
    iabn_bn_mode bms[6];
    int nb = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", modes_s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        iabn_err pe = {0};
        if (nb == 6 || iabn_bn_mode_parse(tok, &bms[nb], &pe)) {
            fprintf(stderr, "iabn mem: --bn: %s\n", nb == 6 ? "too many modes" : pe.msg);
            return 2;
        }
        nb++;
    }
    /* columns: each BN mode under each storage strategy asked for */
    iabn_bn_mode modes[MAX_MODES];
    iabn_storage stors[MAX_MODES];
    int nm = 0;
    for (int b = 0; b < nb; b++)
        for (int st = 0; st < IABN_STORAGE_NMODES; st++)
            if (want[st] || (largest && st != IABN_STORAGE_RECOMPUTE)) {
                modes[nm] = bms[b];
                stors[nm++] = (iabn_storage)st;
            }
    report r[MAX_MODES];
    memset(r, 0, sizeof r);
    int rc = 0;
    iabn_err e = {0};
    for (int i = 0; i < nm && !rc; i++) {
        rc = plan_step(&a, modes[i], stors[i], a.batch, a.h, a.w, 1, &r[i], &e);
        if (!rc && a.budget > 0) rc = search(&a, modes[i], stors[i], 0, &r[i].max_batch, &e);
        if (!rc && a.budget > 0 && !largest)
            rc = search(&a, modes[i], stors[i], 1, &r[i].max_crop, &e);
    }
    if (rc) fprintf(stderr, "iabn mem: %s\n", e.msg);
    else if (json) print_json(&a, r, nm);
    else if (largest) {
        char cn[40];
        printf("%s, %dx%d, training step: largest batch in %.2f GiB (device total), per mode\n",
               a.arch, a.h, a.w, a.budget / 1073741824.0);
        for (int i = 0; i < nm; i++)
            printf("  %-34s %6ld\n", col_name(&r[i], cn, sizeof cn), r[i].max_batch);
    } else print_table(&a, r, nm);
    if (!rc && plot && write_svg(plot, &a, r, nm, &e)) {
        fprintf(stderr, "iabn mem: %s\n", e.msg);
        rc = 1;
    }
    for (int i = 0; i < nm; i++) {
        free(r[i].rows);
        free(r[i].live);
        free(r[i].mark_step);
        free(r[i].mark_name);
        free(r[i].host_live);
    }
    return rc ? 1 : 0;
}
