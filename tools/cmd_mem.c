/* cmd_mem.c: `iabn mem`, the per-model memory report.  For each requested BN
 * mode it plans a full training step (forward, backward, loss) without
 * allocating anything and prints, side by side: parameters, gradients,
 * optimizer state, running statistics, the planned arena, the planner's lower
 * bound, the activation bytes kept for the backward, per-module (or per-block)
 * rows, and with --budget the largest batch and the largest square crop that
 * fit.  --plot draws live memory over the schedule; --json gives the numbers.
 * --device cuda plans for the CUDA backend (no GPU needed): its scratch is
 * cuDNN's workspace, its alignment 256 bytes, and the copy stream's second
 * input buffer counts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "iabn.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tensor/device.h"

#define MAX_MODES 6

typedef struct row {
    char name[IABN_NAME_LEN];
    size_t kept;
    int buffers, copies;
} row;

typedef struct report {
    iabn_bn_mode mode;
    iabn_session_mem m;         /* scratch: cuDNN's workspace on cuda */
    row *rows;
    int nrows;
    size_t *live;
    int nsteps, boundary;
    long max_batch, max_crop;
} report;

typedef struct mem_args {
    const char *arch;
    int batch, h, w, classes, blocks, steps;
    double budget;
    const iabn_backend *be;     /* planning backend of --device */
    const char *device;
    int world, global_batch;    /* --world: ranks sharing --batch */
} mem_args;

/* The session description of --device's step for mode at batch x h x w. */
static void step_cfg(const mem_args *a, iabn_bn_mode mode, int batch, int h, int w,
                     iabn_model_cfg *mc, iabn_session_cfg *c)
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
    if (a->world > 1) c->grad_bucket_bytes = IABN_BUCKET_BYTES_DEFAULT;
}

/* Plans one training step; fills r (rows and live when full). */
static int plan_step(const mem_args *a, iabn_bn_mode mode, int batch, int h, int w, int full,
                     report *r, iabn_err *e)
{
    iabn_model_cfg mc;
    iabn_session_cfg c;
    step_cfg(a, mode, batch, h, w, &mc, &c);
    iabn_session ss;
    int rc = iabn_session_build(&c, &ss, e);
    if (!rc) {
        iabn_graph *g = ss.graph;
        const iabn_plan *p = ss.plan;
        memset(r, 0, sizeof *r);
        r->mode = mode;
        r->m = ss.mem;
        if (full) {
            int nb = iabn_graph_block_count(g);
            iabn_block_mem *bm = calloc((size_t)nb + 1, sizeof *bm);
            iabn_model_block *mb = calloc((size_t)nb + 1, sizeof *mb);
            r->rows = calloc((size_t)nb + 1, sizeof *r->rows);
            r->live = malloc((size_t)p->nsteps * sizeof *r->live);
            if (!bm || !mb || !r->rows || !r->live) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
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
                }
            }
            free(bm);
            free(mb);
        }
    }
    iabn_session_free(&ss);
    return rc;
}

/* The largest batch, or square crop at --batch, whose step fits --budget. */
static int search(const mem_args *a, iabn_bn_mode mode, int crop, long *out, iabn_err *e)
{
    iabn_model_cfg mc;
    iabn_session_cfg c;
    step_cfg(a, mode, a->batch, a->h, a->w, &mc, &c);
    int v = 0;
    int rc = iabn_session_largest(&c, crop ? IABN_SEARCH_SIDE : IABN_SEARCH_BATCH,
                                  (size_t)a->budget, &v, e);
    *out = v;
    return rc;
}

static double mib(size_t b) { return (double)b / 1048576.0; }

static void print_table(const mem_args *a, report *r, int n)
{
    printf("%s, batch %d, %dx%d, training step (forward + backward), float32, %s backend\n",
           a->arch, a->batch, a->h, a->w, a->be->name);
    if (a->world > 1)
        printf("per rank of %d: global batch %d split %d per rank (the largest share)\n",
               a->world, a->global_batch, a->batch);
    printf("\n");
    printf("%-34s", "");
    for (int i = 0; i < n; i++) printf(" %16s", iabn_bn_mode_name(r[i].mode));
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
    LINE("total step MiB", mib(r[i].m.total), "%16.1f");
    if (n > 1) { LINE("kept / first mode", (double)r[i].m.saved / (double)r[0].m.saved, "%16.3f"); }
    if (a->budget > 0) {
        char lab[64];
        snprintf(lab, sizeof lab, "largest batch in %.1f GiB", a->budget / 1073741824.0);
        LINE(lab, (double)r[i].max_batch, "%16.0f");
        snprintf(lab, sizeof lab, "largest square crop at batch %d", a->batch);
        LINE(lab, (double)r[i].max_crop, "%16.0f");
    }
#undef LINE
    printf("\n%-34s", a->blocks ? "block: kept MiB / buffers / copies" : "module: kept MiB / buffers / copies");
    for (int i = 0; i < n; i++) printf(" %16s", iabn_bn_mode_name(r[i].mode));
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
                snprintf(cell, sizeof cell, "%.1f/%d/%d", mib(w->kept), w->buffers, w->copies);
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
            cJSON_AddItemToArray(rows, w);
        }
        cJSON_AddItemToArray(out, o);
    }
    char *s = cJSON_Print(out);
    printf("%s\n", s);
    free(s);
    cJSON_Delete(out);
}

static int write_svg(const char *path, const mem_args *a, report *r, int n)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    static const char *colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
    const double W = 900, H = 420, L = 70, T = 40, PW = W - L - 20, PH = H - T - 60;
    size_t peak = 1;
    for (int i = 0; i < n; i++)
        for (int s = 0; s < r[i].nsteps; s++)
            if (r[i].live[s] > peak) peak = r[i].live[s];
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
               "font-family='sans-serif' font-size='12'>\n<rect width='100%%' height='100%%' fill='white'/>\n",
            W, H);
    fprintf(f, "<text x='%.0f' y='20' font-size='14'>%s, batch %d, %dx%d: live activation memory "
               "over the schedule (forward | backward)</text>\n", L, a->arch, a->batch, a->h, a->w);
    for (int t = 0; t <= 4; t++) {
        double y = T + PH - PH * t / 4.0;
        fprintf(f, "<line x1='%.0f' x2='%.0f' y1='%.1f' y2='%.1f' stroke='#ddd'/>"
                   "<text x='5' y='%.1f'>%.0f MiB</text>\n", L, L + PW, y, y, y + 4, mib(peak) * t / 4.0);
    }
    for (int i = 0; i < n; i++) {
        double bx = L + PW * r[i].boundary / (double)r[i].nsteps;
        fprintf(f, "<line x1='%.1f' x2='%.1f' y1='%.0f' y2='%.0f' stroke='%s' stroke-dasharray='4,3'/>\n",
                bx, bx, T, T + PH, colors[i % 6]);
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='1.5' points='", colors[i % 6]);
        for (int s = 0; s < r[i].nsteps; s++)
            fprintf(f, "%.1f,%.1f ", L + PW * s / (double)r[i].nsteps,
                    T + PH - PH * (double)r[i].live[s] / (double)peak);
        fprintf(f, "'/>\n<text x='%.0f' y='%.0f' fill='%s'>%s: peak %.1f MiB</text>\n", L + 10 + 200.0 * i,
                H - 20, colors[i % 6], iabn_bn_mode_name(r[i].mode), mib(r[i].m.arena));
    }
    fprintf(f, "<text x='%.0f' y='%.0f'>schedule step (forward, then backward; dashed: first backward step)</text>\n",
            L, T + PH + 18);
    fprintf(f, "</svg>\n");
    return fclose(f);
}

static void usage(void)
{
    printf("usage: iabn mem MODEL [--batch N] [--size HxW] [--bn MODE[,MODE...]] [--classes N]\n"
           "                [--budget 12GiB] [--blocks] [--steps] [--json] [--plot FILE.svg]\n"
           "                [--device cpu|cuda]   (cuda: the CUDA plan; no GPU needed)\n"
           "                [--world N]   (per rank of N: --batch split, gradient buckets)\n"
           "       iabn mem --list\n"
           "  Plans a training step without allocating and reports its memory per BN mode.\n"
           "  Defaults: batch 32, 224x224 (segmentation nets 512x512), modes standard,inplace_abn_ii.\n");
}

int iabn_cmd_mem(int argc, char **argv)
{
    mem_args a = {NULL, 32, 0, 0, 0, 0, 0, 0, NULL, "cpu", 1, 32};
    const char *modes_s = "standard,inplace_abn_ii", *plot = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i], *v;
        long long n;
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) { usage(); return 0; }
        else if (!strcmp(s, "--list")) {
            int cnt;
            const char *const *names = iabn_model_names(&cnt);
            for (int k = 0; k < cnt; k++) {
                const char *d = iabn_model_describe(names[k]);
                printf("%-32s %s\n", names[k], d ? d : "");
            }
            return 0;
        } else if (!strcmp(s, "--json")) json = 1;
        else if (!strcmp(s, "--blocks")) a.blocks = 1;
        else if (!strcmp(s, "--steps")) a.steps = 1;
        else if (!strcmp(s, "--world")) {
            if (!(v = iabn_flag_value(argc, argv, &i, "mem"))) return 2;
            if (iabn_parse_int(v, &n) || n < 1 || n > 65536) {
                fprintf(stderr, "iabn mem: --world %s (a number of ranks, 1 to 65536)\n", v);
                return 2;
            }
            a.world = (int)n;
        } else if (!strcmp(s, "--batch") || !strcmp(s, "--classes")) {
            if (!(v = iabn_flag_value(argc, argv, &i, "mem"))) return 2;
            if (iabn_parse_int(v, &n) || n < 1) { fprintf(stderr, "iabn mem: %s %s\n", s, v); return 2; }
            if (s[2] == 'b') a.batch = (int)n;
            else a.classes = (int)n;
        } else if (!strcmp(s, "--size")) {
            if (!(v = iabn_flag_value(argc, argv, &i, "mem"))) return 2;
            if (iabn_parse_hw(v, &a.h, &a.w)) { fprintf(stderr, "iabn mem: --size %s (HxW)\n", v); return 2; }
        } else if (!strcmp(s, "--bn")) {
            if (!(modes_s = iabn_flag_value(argc, argv, &i, "mem"))) return 2;
        } else if (!strcmp(s, "--budget")) {
            if (!(v = iabn_flag_value(argc, argv, &i, "mem"))) return 2;
            if ((a.budget = iabn_parse_bytes(v)) <= 0) { fprintf(stderr, "iabn mem: --budget %s\n", v); return 2; }
        } else if (!strcmp(s, "--plot")) {
            if (!(plot = iabn_flag_value(argc, argv, &i, "mem"))) return 2;
        } else if (!strcmp(s, "--device")) {
            if (!(v = iabn_flag_value(argc, argv, &i, "mem")) || iabn_check_device(v, "mem")) return 2;
            a.device = v;
        } else if (s[0] == '-') { fprintf(stderr, "iabn mem: unknown flag %s\n", s); return 2; }
        else if (!a.arch) a.arch = s;
        else { fprintf(stderr, "iabn mem: unexpected argument %s\n", s); return 2; }
    }
    if (!a.arch) { usage(); return 2; }
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
    iabn_bn_mode modes[MAX_MODES];
    int nm = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", modes_s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        iabn_err pe = {0};
        if (nm == MAX_MODES || iabn_bn_mode_parse(tok, &modes[nm], &pe)) {
            fprintf(stderr, "iabn mem: --bn: %s\n", nm == MAX_MODES ? "too many modes" : pe.msg);
            return 2;
        }
        nm++;
    }
    report r[MAX_MODES];
    memset(r, 0, sizeof r);
    int rc = 0;
    iabn_err e = {0};
    for (int i = 0; i < nm && !rc; i++) {
        rc = plan_step(&a, modes[i], a.batch, a.h, a.w, 1, &r[i], &e);
        if (!rc && a.budget > 0) rc = search(&a, modes[i], 0, &r[i].max_batch, &e);
        if (!rc && a.budget > 0) rc = search(&a, modes[i], 1, &r[i].max_crop, &e);
    }
    if (rc) fprintf(stderr, "iabn mem: %s\n", e.msg);
    else if (json) print_json(&a, r, nm);
    else print_table(&a, r, nm);
    if (!rc && plot && write_svg(plot, &a, r, nm)) {
        fprintf(stderr, "iabn mem: cannot write %s\n", plot);
        rc = 1;
    }
    for (int i = 0; i < nm; i++) {
        free(r[i].rows);
        free(r[i].live);
    }
    return rc ? 1 : 0;
}
