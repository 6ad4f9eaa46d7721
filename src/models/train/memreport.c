/* memreport.c: the memory report of a training step (see memreport.h):
 * columns planned through the session, their per-module rows and live
 * memory, and the table, JSON and SVG made of them. */
#include "models/train/memreport.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "models/train/plot.h"

#define MAX_MARKS 256

void iabn_memreport_opts_defaults(iabn_memreport_opts *o)
{
    memset(o, 0, sizeof *o);
    o->batch = 32;
    o->world = 1;
    o->strategy.allow_offload = o->strategy.allow_recompute = 1;
    o->strategy.lookahead = 1;
}

const char *iabn_memreport_col_name(const iabn_memreport_col *c, char *buf, size_t n)
{
    if (c->storage == IABN_STORAGE_KEEP) snprintf(buf, n, "%s", iabn_bn_mode_name(c->mode));
    else snprintf(buf, n, "%s+%s", iabn_bn_mode_name(c->mode), iabn_storage_name(c->storage));
    return buf;
}

/* The forward steps at which the report's next row (module, or block with
 * blocks) starts: the memory plot's marks. */
static int mark_modules(const iabn_graph *g, const iabn_memreport_opts *o,
                        const iabn_model_block *mb, int nb, iabn_memreport_col *r, iabn_err *e)
{
    const int *sched = iabn_graph_schedule(g);
    int n = r->boundary < iabn_graph_schedule_len(g) ? r->boundary : iabn_graph_schedule_len(g);
    r->mark_step = malloc((size_t)(nb + 1) * sizeof *r->mark_step);
    r->mark_name = malloc((size_t)(nb + 1) * sizeof *r->mark_name);
    if (!r->mark_step || !r->mark_name) return iabn_err_set(e, IABN_ENOMEM, "out of memory");
    for (int s = 0; s < n && r->nmarks < nb; s++) {
        int b = iabn_graph_n(g, sched[s])->block;
        if (b < 0 || b >= nb) continue;
        const char *name = o->blocks || !mb[b].module[0] ? iabn_graph_block_name(g, b) : mb[b].module;
        if (r->nmarks && !strcmp(r->mark_name[r->nmarks - 1], name)) continue;
        int seen = 0;
        for (int k = 0; k < r->nmarks && !seen; k++) seen = !strcmp(r->mark_name[k], name);
        if (seen) continue;
        r->mark_step[r->nmarks] = s;
        snprintf(r->mark_name[r->nmarks++], IABN_NAME_LEN, "%s", name);
    }
    return 0;
}

/* The session description of the step for mode at batch x h x w. */
static void step_cfg(const iabn_memreport_opts *o, iabn_bn_mode mode, iabn_storage st,
                     iabn_model_cfg *mc, iabn_session_cfg *c)
{
    *mc = iabn_model_defaults(o->model);
    mc->bn = mode;
    if (o->classes > 0) mc->classes = o->classes;
    if (iabn_bn_mode_is_inplace(mode) && !iabn_act_invertible(mc->act.kind)) {
        mc->act.kind = IABN_ACT_LEAKY_RELU;
        mc->act.param = iabn_act_default_param(IABN_ACT_LEAKY_RELU);
    }
    iabn_session_cfg_defaults(c);
    c->model_cfg = mc;
    c->batch = o->batch;
    c->height = o->height;
    c->width = o->width;
    c->backend = o->backend;
    c->plan_only = 1;
    c->storage = st;
    c->strategy = &o->strategy;
    c->layout_mode = o->layout_mode;
    c->winograd = o->winograd;
    if (o->world > 1) c->grad_bucket_bytes = IABN_BUCKET_BYTES_DEFAULT;
}

/* The rows, live memory and marks of a planned step. */
static int fill_rows(const iabn_memreport_opts *o, const iabn_graph *g, const iabn_plan *p,
                     iabn_memreport_col *r, iabn_err *e)
{
    int nb = iabn_graph_block_count(g), rc = 0;
    iabn_block_mem *bm = calloc((size_t)nb + 1, sizeof *bm);
    iabn_model_block *mb = calloc((size_t)nb + 1, sizeof *mb);
    r->rows = calloc((size_t)nb + 1, sizeof *r->rows);
    r->live = malloc((size_t)p->nsteps * sizeof *r->live);
    r->host_live = calloc((size_t)p->nsteps + 1, sizeof *r->host_live);
    if (!bm || !mb || !r->rows || !r->live || !r->host_live)
        rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
    if (!rc && o->schedule) {
        fprintf(o->schedule, "schedule of %s, %s (step, phase F/B/R, node, op, live bytes, "
                             "outputs@offset+bytes <- inputs):\n",
                o->model, iabn_bn_mode_name(r->mode));
        iabn_plan_dump(g, p, o->schedule);
        fprintf(o->schedule, "\n");
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
            const char *name = o->blocks ? iabn_graph_block_name(g, b)
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
    if (!rc) rc = mark_modules(g, o, mb, nb, r, e);
    free(bm);
    free(mb);
    return rc;
}

/* Plans one column's step and fills it. */
static int plan_col(const iabn_memreport_opts *o, iabn_memreport_col *r, iabn_err *e)
{
    iabn_model_cfg mc;
    iabn_session_cfg c;
    step_cfg(o, r->mode, r->storage, &mc, &c);
    iabn_session ss;
    int rc = iabn_session_build(&c, &ss, e);
    if (!rc) {
        iabn_storage st = r->storage;
        r->m = ss.mem;
        r->n_off = ss.strategy.n_offload;
        r->n_rc = ss.strategy.n_recompute;
        r->fits = (st != IABN_STORAGE_AUTO && st != IABN_STORAGE_RECOMPUTE) || ss.strategy.fits;
        r->est = iabn_strategy_estimate(ss.graph, ss.plan, &o->strategy.cost);
        r->est_base = ss.strategy.base_time;
        r->strategy_s = ss.strategy.seconds;
        r->paper = ss.strategy.paper;
        rc = fill_rows(o, ss.graph, ss.plan, r, e);
    }
    iabn_session_free(&ss);
    if (!rc && o->budget > 0) {
        int v = 0;
        rc = iabn_session_largest(&c, IABN_SEARCH_BATCH, o->budget, &v, e);
        r->max_batch = v;
        if (!rc && o->search_crop) rc = iabn_session_largest(&c, IABN_SEARCH_SIDE, o->budget, &v, e);
        if (o->search_crop) r->max_crop = v;
    }
    return rc;
}

int iabn_memreport_columns(const iabn_bn_mode *modes, int nmodes, const int *want,
                           iabn_memreport_col *cols, int max)
{
    int n = 0;
    for (int b = 0; b < nmodes; b++)
        for (int st = 0; st < IABN_STORAGE_NMODES; st++)
            if (want[st] && n < max)
                cols[n++] = (iabn_memreport_col){.mode = modes[b], .storage = (iabn_storage)st};
    return n;
}

int iabn_memreport_build(const iabn_memreport_opts *o, const iabn_memreport_col *cols, int n,
                         iabn_memreport *r, iabn_err *e)
{
    memset(r, 0, sizeof *r);
    if (!o->model || !iabn_model_exists(o->model))
        return iabn_err_set(e, IABN_EINVAL, "unknown model '%s'", o->model ? o->model : "(none)");
    if (n < 1 || n > IABN_MEMREPORT_MAX_COLS)
        return iabn_err_set(e, IABN_EINVAL, "%d columns: from 1 to %d", n, IABN_MEMREPORT_MAX_COLS);
    if (o->world > 1 && o->batch < o->world)
        return iabn_err_set(e, IABN_EINVAL, "batch %d cannot be split over %d ranks", o->batch,
                            o->world);
    r->o = *o;
    r->global_batch = o->batch;
    if (o->world > 1) r->o.batch = (o->batch + o->world - 1) / o->world;
    if (!r->o.backend) r->o.backend = iabn_backend_cpu();
    if (!r->o.height || !r->o.width)
        r->o.height = r->o.width = iabn_model_is_segmentation(o->model) ? 512 : 224;
    if (r->o.world < 1) r->o.world = 1;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        r->col[i].mode = cols[i].mode;
        r->col[i].storage = cols[i].storage;
        r->ncols = i + 1;
        rc = plan_col(&r->o, &r->col[i], e);
    }
    if (rc) iabn_memreport_free(r);
    return rc;
}

void iabn_memreport_free(iabn_memreport *r)
{
    for (int i = 0; i < r->ncols; i++) {
        free(r->col[i].rows);
        free(r->col[i].live);
        free(r->col[i].mark_step);
        free(r->col[i].mark_name);
        free(r->col[i].host_live);
    }
    memset(r, 0, sizeof *r);
}

static double mib(size_t b) { return (double)b / 1048576.0; }

/* The estimated time of the keep column of the same BN mode. */
static double base_est(const iabn_memreport *rep, int i)
{
    const iabn_memreport_col *r = rep->col;
    for (int k = 0; k < rep->ncols; k++)
        if (r[k].mode == r[i].mode && r[k].storage == IABN_STORAGE_KEEP && r[k].est > 0)
            return r[k].est;
    return r[i].est_base > 0 ? r[i].est_base : r[i].est > 0 ? r[i].est : 1;
}

/* The text a FILE* built in memory holds, or NULL. */
static char *close_text(FILE *f, char **buf)
{
    int bad = ferror(f);
    if (fclose(f) || bad) {
        free(*buf);
        return NULL;
    }
    return *buf;
}

char *iabn_memreport_table(const iabn_memreport *rep)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    const iabn_memreport_opts *a = &rep->o;
    const iabn_memreport_col *r = rep->col;
    int n = rep->ncols, cuda = a->backend->kind == IABN_DEV_CUDA;
    char cn[40];
    /* a column is 16 wide, or as wide as its name (inplace_abn_ii+offload) */
    int wd[IABN_MEMREPORT_MAX_COLS];
    for (int i = 0; i < n; i++) {
        int l = (int)strlen(iabn_memreport_col_name(&r[i], cn, sizeof cn));
        wd[i] = l > 16 ? l : 16;
    }
    fprintf(f, "%s, batch %d, %dx%d, training step (forward + backward), float32, %s backend, "
            "Winograd %s\n",
            a->model, a->batch, a->height, a->width, a->backend->name,
            iabn_winograd_mode_name(a->winograd));
    if (a->world > 1)
        fprintf(f, "per rank of %d: global batch %d split %d per rank (the largest share)\n",
                a->world, rep->global_batch, a->batch);
    fprintf(f, "%-34s", "");
    for (int i = 0; i < n; i++) fprintf(f, " %*s", wd[i], iabn_memreport_col_name(&r[i], cn, sizeof cn));
    fprintf(f, "\n");
#define LINE(label, expr, fmt)                                         \
    fprintf(f, "%-34s", label);                                        \
    for (int i = 0; i < n; i++) fprintf(f, " %*" fmt, wd[i], expr);   \
    fprintf(f, "\n")
    LINE("parameters (count)", (double)r[i].m.params, ".0f");
    LINE("parameters MiB", mib(r[i].m.param_bytes), ".1f");
    LINE("gradients MiB", mib(r[i].m.grad_bytes), ".1f");
    LINE("optimizer state MiB (momentum)", mib(r[i].m.optim_bytes), ".1f");
    LINE("running statistics MiB", mib(r[i].m.buffer_bytes), ".2f");
    LINE("inputs / outputs MiB", mib(r[i].m.io), ".1f");
    if (cuda) {
        LINE("  staged next inputs MiB", mib(r[i].m.staging), ".1f");
    }
    LINE("activations kept for backward MiB", mib(r[i].m.saved), ".1f");
    LINE("  per sample MiB", mib(r[i].m.saved) / a->batch, ".2f");
    LINE("arena peak MiB (planned)", mib(r[i].m.arena), ".1f");
    LINE("lower bound MiB (max live)", mib(r[i].m.lower_bound), ".1f");
    LINE("arena / lower bound", (double)r[i].m.arena / (double)r[i].m.lower_bound, ".3f");
    LINE(cuda ? "  largest cuDNN workspace MiB" : "  largest kernel scratch MiB",
         mib(r[i].m.scratch_max), ".1f");
    LINE("without reuse MiB", mib(r[i].m.naive), ".1f");
    LINE("copies for in-place", (double)r[i].m.copies, ".0f");
    LINE("blocked activations MiB", mib(r[i].m.layouts.blocked_bytes), ".1f");
    LINE("  conv passes still reordering", (double)r[i].m.layouts.conv_reorders, ".0f");
    LINE("conv passes on Winograd", (double)r[i].m.winograd, ".0f");
    LINE("  possible with --winograd on", (double)r[i].m.winograd_possible, ".0f");
    if (a->world > 1) {
        LINE("all-reduce buckets (25 MiB)", (double)r[i].m.buckets, ".0f");
        LINE("  bucket buffers MiB (in arena)", mib(r[i].m.bucket_bytes), ".1f");
    }
    LINE("total step MiB (device)", mib(r[i].m.total), ".1f");
    LINE("host pool MiB (offloaded copies)", mib(r[i].m.host), ".1f");
    LINE("offloaded tensors", (double)r[i].n_off, ".0f");
    LINE("recomputed tensors (strategy)", (double)r[i].n_rc, ".0f");
    LINE("estimated step time overhead %", 100.0 * (r[i].est / base_est(rep, i) - 1.0), ".1f");
    LINE("fits the budget (auto)", (double)r[i].fits, ".0f");
    LINE("strategy choice seconds (auto)", r[i].strategy_s, ".3f");
    LINE("  paper's offload policy (auto)", (double)r[i].paper, ".0f");
    if (n > 1) { LINE("kept / first mode", (double)r[i].m.saved / (double)r[0].m.saved, ".3f"); }
    if (a->budget > 0) {
        char lab[64];
        snprintf(lab, sizeof lab, "largest batch in %.1f GiB", (double)a->budget / 1073741824.0);
        LINE(lab, (double)r[i].max_batch, ".0f");
        snprintf(lab, sizeof lab, "largest square crop at batch %d", a->batch);
        LINE(lab, (double)r[i].max_crop, ".0f");
    }
#undef LINE
    fprintf(f, "\n%-34s", a->blocks ? "block: kept MiB/buffers/copies" : "module: kept MiB/buffers/copies");
    for (int i = 0; i < n; i++) fprintf(f, " %*s", wd[i], iabn_memreport_col_name(&r[i], cn, sizeof cn));
    fprintf(f, "\n");
    for (int k = 0; k < r[0].nrows; k++) {
        fprintf(f, "%-34.34s", r[0].rows[k].name);
        for (int i = 0; i < n; i++) {
            const iabn_memreport_row *w = NULL;
            for (int j = 0; j < r[i].nrows; j++)
                if (!strcmp(r[i].rows[j].name, r[0].rows[k].name)) w = &r[i].rows[j];
            char cell[48] = "-";
            if (w && (w->offloaded || w->recomputed))
                snprintf(cell, sizeof cell, "%.1f/%d/%d o%dr%d", mib(w->kept), w->buffers,
                         w->copies, w->offloaded, w->recomputed);
            else if (w) snprintf(cell, sizeof cell, "%.1f/%d/%d", mib(w->kept), w->buffers, w->copies);
            fprintf(f, " %*s", wd[i], cell);
        }
        fprintf(f, "\n");
    }
    return close_text(f, &buf);
}

char *iabn_memreport_largest(const iabn_memreport *rep)
{
    char *buf = NULL, cn[40];
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fprintf(f, "%s, %dx%d, training step: largest batch in %.2f GiB (device total), per mode\n",
            rep->o.model, rep->o.height, rep->o.width, (double)rep->o.budget / 1073741824.0);
    for (int i = 0; i < rep->ncols; i++)
        fprintf(f, "  %-34s %6ld\n", iabn_memreport_col_name(&rep->col[i], cn, sizeof cn),
                rep->col[i].max_batch);
    return close_text(f, &buf);
}

/* name: number pairs of one column */
static void add_numbers(cJSON *o, const char *const *names, const double *v, int n)
{
    for (int k = 0; k < n; k++) cJSON_AddNumberToObject(o, names[k], v[k]);
}

char *iabn_memreport_json(const iabn_memreport *rep)
{
    const iabn_memreport_opts *a = &rep->o;
    cJSON *out = cJSON_CreateArray();
    for (int i = 0; i < rep->ncols; i++) {
        const iabn_memreport_col *r = &rep->col[i];
        const iabn_session_mem *m = &r->m;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", a->model);
        cJSON_AddStringToObject(o, "bn_mode", iabn_bn_mode_name(r->mode));
        cJSON_AddStringToObject(o, "strategy", iabn_storage_name(r->storage));
        static const char *const n1[] = {"device_total_bytes", "host_bytes", "offloaded_tensors",
                                         "recomputed_tensors", "est_step_seconds", "est_overhead"};
        double v1[] = {(double)m->total, (double)m->host, r->n_off, r->n_rc, r->est,
                       r->est / base_est(rep, i) - 1.0};
        add_numbers(o, n1, v1, 6);
        cJSON_AddBoolToObject(o, "fits", r->fits);
        if (r->storage == IABN_STORAGE_AUTO || r->storage == IABN_STORAGE_RECOMPUTE)
        {
            cJSON_AddNumberToObject(o, "strategy_seconds", r->strategy_s);
            cJSON_AddBoolToObject(o, "paper_policy", r->paper);
        }
        cJSON_AddNumberToObject(o, "batch", a->batch);
        cJSON_AddStringToObject(o, "winograd", iabn_winograd_mode_name(a->winograd));
        if (a->world > 1) {
            static const char *const nw[] = {"world", "global_batch", "allreduce_buckets",
                                             "bucket_bytes"};
            double vw[] = {a->world, rep->global_batch, m->buckets, (double)m->bucket_bytes};
            add_numbers(o, nw, vw, 4);
        }
        static const char *const n2[] = {"height", "width", "params", "param_bytes", "grad_bytes",
                                         "optimizer_bytes", "buffer_bytes", "io_bytes"};
        double v2[] = {a->height, a->width, (double)m->params, (double)m->param_bytes,
                       (double)m->grad_bytes, (double)m->optim_bytes, (double)m->buffer_bytes,
                       (double)m->io};
        add_numbers(o, n2, v2, 8);
        cJSON_AddStringToObject(o, "device", a->backend->name);
        static const char *const n3[] = {"staging_bytes", "workspace_max_bytes",
                                         "workspace_sum_bytes", "arena_bytes", "lower_bound_bytes",
                                         "saved_activation_bytes", "copies", "total_bytes",
                                         "blocked_tensors", "blocked_bytes", "conv_reorders",
                                         "winograd_passes", "winograd_possible"};
        double v3[] = {(double)m->staging, (double)m->scratch_max, (double)m->scratch_sum,
                       (double)m->arena, (double)m->lower_bound, (double)m->saved, m->copies,
                       (double)m->total, m->layouts.blocked, (double)m->layouts.blocked_bytes,
                       m->layouts.conv_reorders, m->winograd, m->winograd_possible};
        add_numbers(o, n3, v3, 13);
        if (a->budget > 0) {
            static const char *const nb[] = {"budget_bytes", "max_batch", "max_crop"};
            double vb[] = {(double)a->budget, (double)r->max_batch, (double)r->max_crop};
            add_numbers(o, nb, vb, 3);
        }
        cJSON *rows = cJSON_AddArrayToObject(o, "rows");
        for (int k = 0; k < r->nrows; k++) {
            const iabn_memreport_row *w = &r->rows[k];
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "name", w->name);
            static const char *const nr[] = {"kept_bytes", "stored_buffers", "copies",
                                             "offloaded", "recomputed"};
            double vr[] = {(double)w->kept, w->buffers, w->copies, w->offloaded, w->recomputed};
            add_numbers(x, nr, vr, 5);
            cJSON_AddItemToArray(rows, x);
        }
        cJSON_AddItemToArray(out, o);
    }
    char *s = cJSON_Print(out);
    cJSON_Delete(out);
    return s;
}

/* x = step index, y = bytes in MiB, into fresh arrays */
static int curve(const size_t *bytes, int n, double **xs, double **ys, iabn_err *e)
{
    *xs = malloc((size_t)n * sizeof **xs);
    *ys = malloc((size_t)n * sizeof **ys);
    if (!*xs || !*ys) return iabn_err_set(e, IABN_ENOMEM, "out of memory");
    for (int s = 0; s < n; s++) {
        (*xs)[s] = s;
        (*ys)[s] = mib(bytes[s]);
    }
    return 0;
}

int iabn_memreport_svg(const iabn_memreport *rep, const char *path, iabn_err *e)
{
    enum { MAXS = IABN_MEMREPORT_MAX_COLS };
    const iabn_memreport_col *r = rep->col;
    int n = rep->ncols;
    iabn_plot_series ser[MAXS];
    char label[MAXS][96], title[256], cn[40];
    double *xs[MAXS] = {0}, *ys[MAXS] = {0};
    const char *names[MAX_MARKS + 1];
    double marks[MAX_MARKS + 1];
    int rc = 0, nmarks = 0;
    for (int i = 0; i < n && !rc; i++) {
        rc = curve(r[i].live, r[i].nsteps, &xs[i], &ys[i], e);
        snprintf(label[i], sizeof label[i], "%s: peak %.1f MiB",
                 iabn_memreport_col_name(&r[i], cn, sizeof cn), mib(r[i].m.arena));
        ser[i] = (iabn_plot_series){label[i], xs[i], ys[i], r[i].nsteps, i, 0, 0};
    }
    /* the host pool of each offloading column: bytes on the host per step, dashed */
    int ns = n;
    for (int i = 0; i < n && !rc && ns < MAXS; i++) {
        if (!r[i].m.host || !r[i].host_live) continue;
        rc = curve(r[i].host_live, r[i].nsteps, &xs[ns], &ys[ns], e);
        snprintf(label[ns], sizeof label[ns], "%s: host pool %.1f MiB, %d tensors offloaded",
                 iabn_memreport_col_name(&r[i], cn, sizeof cn), mib(r[i].m.host), r[i].n_off);
        ser[ns] = (iabn_plot_series){label[ns], xs[ns], ys[ns], r[i].nsteps, i, 1, 0};
        ns++;
    }
    for (int k = 0; n && k < r[0].nmarks && nmarks < MAX_MARKS; k++) {
        marks[nmarks] = r[0].mark_step[k];
        names[nmarks++] = r[0].mark_name[k];
    }
    if (n) {
        marks[nmarks] = r[0].boundary;
        names[nmarks++] = "backward";
    }
    snprintf(title, sizeof title, "%s, batch %d, %dx%d: live activation memory over the schedule",
             rep->o.model, rep->o.batch, rep->o.height, rep->o.width);
    iabn_plot_panel panel = {"forward, then backward (marks: module starts in the forward)",
                             "schedule step", "live MiB", ser, ns, 0, marks, names, nmarks};
    if (!rc) rc = iabn_plot_svg(path, title, &panel, 1, e);
    for (int i = 0; i < MAXS; i++) {
        free(xs[i]);
        free(ys[i]);
    }
    return rc;
}

int iabn_model_memory(const char *model, int batch, size_t *params, size_t *standard_bytes,
                      size_t *inplace_bytes, iabn_err *e)
{
    iabn_session_cfg c;
    iabn_session_cfg_defaults(&c);
    c.model = model;
    c.train = 0;
    c.loss = IABN_LOSS_NONE;
    c.plan_only = 1;
    c.height = c.width = iabn_model_is_segmentation(model) ? 512 : 224;
    iabn_session s;
    int rc = iabn_session_build(&c, &s, e);
    if (!rc) *params = s.mem.params;
    iabn_session_free(&s);
    if (rc || batch < 1) return rc;
    iabn_memreport_opts o;
    iabn_memreport_opts_defaults(&o);
    o.model = model;
    o.batch = batch;
    iabn_memreport_col cols[2] = {{.mode = IABN_BN_STANDARD}, {.mode = IABN_BN_INPLACE_II}};
    iabn_memreport r;
    if ((rc = iabn_memreport_build(&o, cols, 2, &r, e))) return rc;
    *standard_bytes = r.col[0].m.arena;
    *inplace_bytes = r.col[1].m.arena;
    iabn_memreport_free(&r);
    return 0;
}
