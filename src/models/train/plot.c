/* plot.c: see plot.h.  Axes get "nice" ticks (1, 2, 5 x 10^k), a log axis
 * gets its decades; every number is printed with %g so the file stays small
 * and diffable. */
#include "models/train/plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#define W 820
#define PH 230     /* panel height */
#define ML 74      /* margins */
#define MR 20
#define MT 34
#define MB 46
#define LEGEND_ROW 18

static const char *palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};
#define NPAL (int)(sizeof palette / sizeof palette[0])

static double nice_step(double span, int target)
{
    double raw = span / target, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

static void draw_panel(FILE *f, const iabn_plot_panel *p, int top)
{
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int s = 0; s < p->nseries; s++)
        for (int i = 0; i < p->series[s].n; i++) {
            double x = p->series[s].x[i], y = p->series[s].y[i];
            if (!isfinite(x) || !isfinite(y) || (p->logy && y <= 0)) continue;
            if (p->logy) y = log10(y);
            x0 = fmin(x0, x), x1 = fmax(x1, x), y0 = fmin(y0, y), y1 = fmax(y1, y);
        }
    int left = ML, right = W - MR, ptop = top + MT, bottom = top + PH - MB;
    fprintf(f, "<g class=\"panel\">\n<text x=\"%d\" y=\"%d\" font-weight=\"bold\">", left, top + 20);
    xml_text(f, p->title);
    fprintf(f, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
               "stroke=\"#888\"/>\n", left, ptop, right - left, bottom - ptop);
    if (!(x1 >= x0)) { /* nothing to draw yet */
        fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#888\">no data</text>\n</g>\n", left + 10,
                (ptop + bottom) / 2);
        return;
    }
    if (x1 == x0) x0 -= 0.5, x1 += 0.5;
    if (y1 == y0) y0 -= p->logy ? 0.5 : fmax(fabs(y0) * 0.1, 0.5), y1 += p->logy ? 0.5 : fmax(fabs(y1) * 0.1, 0.5);
    double pad = (y1 - y0) * 0.05;
    y0 -= pad, y1 += pad;
#define SX(x) (left + ((x) - x0) / (x1 - x0) * (right - left))
#define SY(y) (bottom - ((y) - y0) / (y1 - y0) * (bottom - ptop))
    /* ticks and grid */
    double xs = nice_step(x1 - x0, 8);
    for (double t = ceil(x0 / xs) * xs; t <= x1 + 1e-9 * xs; t += xs) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>"
                   "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\">%g</text>\n",
                SX(t), ptop, SX(t), bottom, SX(t), bottom + 14, t);
    }
    double ys = p->logy ? fmax(1.0, round(nice_step(y1 - y0, 5))) : nice_step(y1 - y0, 5);
    for (double t = ceil(y0 / ys) * ys; t <= y1 + 1e-9 * ys; t += ys) {
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eee\"/>"
                   "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%g</text>\n",
                left, SY(t), right, SY(t), left - 4, SY(t) + 4, p->logy ? pow(10, t) : t);
    }
    for (int m = 0; m < p->nmarks; m++) {
        double x = p->marks[m];
        if (x < x0 || x > x1) continue;
        fprintf(f, "<line class=\"mark\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
                   "stroke=\"#bbb\" stroke-dasharray=\"2,3\"/>", SX(x), ptop, SX(x), bottom);
        if (p->mark_labels && p->mark_labels[m]) {
            fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"9\" fill=\"#777\" "
                       "transform=\"rotate(-90 %.1f %d)\">", SX(x) - 2, ptop + 4, SX(x) - 2, ptop + 4);
            xml_text(f, p->mark_labels[m]);
            fprintf(f, "</text>");
        }
        fprintf(f, "\n");
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\">", (left + right) / 2,
            bottom + 32);
    xml_text(f, p->xlabel);
    fprintf(f, "</text>\n<text x=\"16\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\" "
               "transform=\"rotate(-90 16 %d)\">", (ptop + bottom) / 2, (ptop + bottom) / 2);
    xml_text(f, p->ylabel);
    fprintf(f, "</text>\n");
    for (int s = 0; s < p->nseries; s++) {
        const iabn_plot_series *se = &p->series[s];
        const char *col = palette[se->color % NPAL];
        fprintf(f, "<polyline class=\"series\" data-label=\"");
        xml_text(f, se->label);
        fprintf(f, "\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"", col,
                se->dashed ? " stroke-dasharray=\"6,3\"" : "");
        for (int i = 0; i < se->n; i++) {
            double y = se->y[i];
            if (!isfinite(se->x[i]) || !isfinite(y) || (p->logy && y <= 0)) continue;
            if (p->logy) y = log10(y);
            fprintf(f, "%.1f,%.1f ", SX(se->x[i]), SY(y));
        }
        fprintf(f, "\"/>\n");
        for (int i = 0; se->points && i < se->n; i++)
            if (isfinite(se->y[i]) && !(p->logy && se->y[i] <= 0))
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>", SX(se->x[i]),
                        SY(p->logy ? log10(se->y[i]) : se->y[i]), col);
        if (se->points) fprintf(f, "\n");
    }
#undef SX
#undef SY
    fprintf(f, "</g>\n");
}

int iabn_plot_svg(const char *path, const char *title, const iabn_plot_panel *panels, int np,
                  iabn_err *e)
{
    /* the legend: each distinct label once */
    const iabn_plot_series *leg[64];
    int nleg = 0;
    for (int p = 0; p < np; p++)
        for (int s = 0; s < panels[p].nseries && nleg < 64; s++) {
            int seen = 0;
            for (int k = 0; k < nleg && !seen; k++) seen = !strcmp(leg[k]->label, panels[p].series[s].label);
            if (!seen) leg[nleg++] = &panels[p].series[s];
        }
    int per_row = 3, rows = (nleg + per_row - 1) / per_row;
    int head = 30 + rows * LEGEND_ROW + 6, height = head + np * PH;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return iabn_err_set(e, IABN_EIO, "cannot write %s", tmp);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
               "<text x=\"%d\" y=\"20\" font-size=\"15\" font-weight=\"bold\">", W, height, W, height, ML);
    xml_text(f, title);
    fprintf(f, "</text>\n<g class=\"legend\">\n");
    for (int k = 0; k < nleg; k++) {
        int x = ML + (k % per_row) * ((W - ML - MR) / per_row), y = 30 + (k / per_row) * LEGEND_ROW;
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s/>"
                   "<text x=\"%d\" y=\"%d\" font-size=\"11\">", x, y + 8, x + 22, y + 8,
                palette[leg[k]->color % NPAL], leg[k]->dashed ? " stroke-dasharray=\"6,3\"" : "",
                x + 28, y + 12);
        xml_text(f, leg[k]->label);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</g>\n");
    for (int p = 0; p < np; p++) draw_panel(f, &panels[p], head + p * PH);
    fprintf(f, "</svg>\n");
    int bad = ferror(f);
    if (fclose(f) || bad || rename(tmp, path)) {
        remove(tmp);
        return iabn_err_set(e, IABN_EIO, "cannot write %s", path);
    }
    return 0;
}

/* ---- runs ------------------------------------------------------------------ */

typedef struct curve {
    double *x, *y;
    int n, cap;
} curve;

static int push(curve *c, double x, double y)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 256;
        double *nx = realloc(c->x, (size_t)cap * sizeof *nx);
        if (!nx) return -1;
        c->x = nx;
        double *ny = realloc(c->y, (size_t)cap * sizeof *ny);
        if (!ny) return -1;
        c->y = ny;
        c->cap = cap;
    }
    c->x[c->n] = x;
    c->y[c->n++] = y;
    return 0;
}

enum { C_LOSS, C_VLOSS, C_METRIC, C_LR, C_EPOCH, NCURVES };

typedef struct run {
    char name[256];
    curve c[NCURVES];          /* C_EPOCH: x = step at an epoch's end, y = epoch */
    int seg;                   /* the metric is mIoU */
} run;

static double num(const cJSON *o, const char *k, int *ok)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    *ok = cJSON_IsNumber(v);
    return *ok ? v->valuedouble : NAN;
}

static int read_run(const char *dir, run *r, iabn_err *e)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    if (!f) return iabn_err_set(e, IABN_EIO, "cannot read %s (not a run directory?)", path);
    const char *base = strrchr(dir, '/');
    snprintf(r->name, sizeof r->name, "%s", base && base[1] ? base + 1 : dir);
    char line[4096];
    int rc = 0, lineno = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] == '\n' || !line[0]) continue;
        cJSON *o = cJSON_Parse(line);
        if (!o) {
            rc = iabn_err_set(e, IABN_EFORMAT, "%s:%d is not a JSON line", path, lineno);
            break;
        }
        int has_step, ok, oke;
        double step = num(o, "step", &has_step), v;
        if (has_step) {
            if (!isnan(v = num(o, "loss", &ok)) && ok) rc |= push(&r->c[C_LOSS], step, v);
            if (!isnan(v = num(o, "lr", &ok)) && ok) rc |= push(&r->c[C_LR], step, v);
            if (!isnan(v = num(o, "val_loss", &ok)) && ok) rc |= push(&r->c[C_VLOSS], step, v);
            v = num(o, "top1", &ok);
            if (!ok) {
                v = num(o, "val_miou", &ok);
                if (ok) r->seg = 1;
            }
            if (ok) {
                rc |= push(&r->c[C_METRIC], step, v);
                double ep = num(o, "epoch", &oke);
                if (oke) rc |= push(&r->c[C_EPOCH], step, ep);
            }
        }
        cJSON_Delete(o);
        if (rc > 0) rc = 0;
        if (rc < 0) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory reading %s", path);
    }
    fclose(f);
    return rc;
}

int iabn_plot_runs(const char *const *dirs, int ndirs, const char *out, iabn_err *e)
{
    if (ndirs < 1) return iabn_err_set(e, IABN_EINVAL, "no run directory to plot");
    run *runs = calloc((size_t)ndirs, sizeof *runs);
    iabn_plot_series *ser = calloc((size_t)ndirs * 4, sizeof *ser);
    char (*labels)[300] = calloc((size_t)ndirs * 4, sizeof *labels);
    char (*ep_text)[24] = NULL;
    const char **ep_labels = NULL;
    int rc = runs && ser && labels ? 0 : iabn_err_set(e, IABN_ENOMEM, "out of memory");
    int seg = 0;
    for (int i = 0; i < ndirs && !rc; i++) {
        rc = read_run(dirs[i], &runs[i], e);
        seg |= runs[i].seg;
    }
    iabn_plot_panel panels[3];
    memset(panels, 0, sizeof panels);
    if (!rc) {
        /* the epochs of the first run mark every panel */
        const curve *ep = &runs[0].c[C_EPOCH];
        ep_text = calloc((size_t)ep->n + 1, sizeof *ep_text);
        ep_labels = calloc((size_t)ep->n + 1, sizeof *ep_labels);
        if (!ep_text || !ep_labels) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
        for (int k = 0; !rc && k < ep->n; k++) {
            snprintf(ep_text[k], sizeof ep_text[k], "epoch %g", ep->y[k]);
            ep_labels[k] = ep_text[k];
        }
        iabn_plot_series *loss = ser, *metric = ser + 2 * ndirs, *lr = ser + 3 * ndirs;
        int nl = 0;
        for (int i = 0; !rc && i < ndirs; i++) {
            const char *nm = ndirs > 1 ? runs[i].name : "";
            const char *sep = ndirs > 1 ? ": " : "";
            snprintf(labels[4 * i], 300, "%s%strain loss", nm, sep);
            snprintf(labels[4 * i + 1], 300, "%s%sval loss", nm, sep);
            snprintf(labels[4 * i + 2], 300, "%s%sval %s", nm, sep, runs[i].seg ? "mIoU" : "top-1");
            snprintf(labels[4 * i + 3], 300, "%s%slearning rate", nm, sep);
            loss[nl++] = (iabn_plot_series){labels[4 * i], runs[i].c[C_LOSS].x, runs[i].c[C_LOSS].y,
                                            runs[i].c[C_LOSS].n, i, 0, 0};
            if (runs[i].c[C_VLOSS].n)
                loss[nl++] = (iabn_plot_series){labels[4 * i + 1], runs[i].c[C_VLOSS].x,
                                                runs[i].c[C_VLOSS].y, runs[i].c[C_VLOSS].n, i, 1, 1};
            metric[i] = (iabn_plot_series){labels[4 * i + 2], runs[i].c[C_METRIC].x,
                                           runs[i].c[C_METRIC].y, runs[i].c[C_METRIC].n, i, 1, 1};
            lr[i] = (iabn_plot_series){labels[4 * i + 3], runs[i].c[C_LR].x, runs[i].c[C_LR].y,
                                       runs[i].c[C_LR].n, i, 0, 0};
        }
        panels[0] = (iabn_plot_panel){"loss", "step", "cross-entropy", loss, nl, 0,
                                      ep->x, ep_labels, ep->n};
        panels[1] = (iabn_plot_panel){seg ? "validation mIoU" : "validation top-1", "step",
                                      "%", metric, ndirs, 0, ep->x, ep_labels, ep->n};
        panels[2] = (iabn_plot_panel){"learning rate", "step", "lr (log)", lr, ndirs, 1,
                                      ep->x, ep_labels, ep->n};
    }
    if (!rc) {
        char title[512];
        snprintf(title, sizeof title, "%s%s", ndirs > 1 ? "runs compared: " : "run ",
                 ndirs > 1 ? "" : runs[0].name);
        for (int i = 0; ndirs > 1 && i < ndirs; i++) {
            size_t k = strlen(title);
            snprintf(title + k, sizeof title - k, "%s%s", i ? ", " : "", runs[i].name);
        }
        rc = iabn_plot_svg(out, title, panels, 3, e);
    }
    for (int i = 0; runs && i < ndirs; i++)
        for (int c = 0; c < NCURVES; c++) {
            free(runs[i].c[c].x);
            free(runs[i].c[c].y);
        }
    free(runs);
    free(ser);
    free(labels);
    free(ep_text);
    free(ep_labels);
    return rc;
}
