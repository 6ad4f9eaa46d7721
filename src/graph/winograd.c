/* winograd.c: the Winograd modes (graph.h) and finalize's two Winograd
 * steps.
 *
 * A node's winograd flag asks its op for Winograd kernels (a conv's
 * geometry flag, cpu/conv.h); the op's .winograd hook says whether it gets
 * them on the backend.  on: every node has the flag from the start, so the
 * layout votes and the scratch see it.  auto: finalize plans the graph
 * without any, then gives the flag to each node that runs Winograd with it
 * and whose larger scratch fits at its step: the live bytes there, less the
 * old scratch, plus the new, at most the plan's lower bound (the most bytes
 * live at any step).  A scratch lives only during its node, so these checks
 * do not interact, and the lower bound stays what it was.  The placement is
 * greedy, and larger scratch buffers reorder it, so the planner is told to
 * try three more orders, the nodes' scratch last among them (graph_internal.h
 * scratch_last, plan.c).  Even so the arena moves a little: by -0.03% to +0.12% on
 * ResNeXt-101 and WideResNet-38 at batch 4 (docs/CPU.md).  So it may grow by
 * 0.25% at most.  Where it grows more, the nodes with the most room keep
 * the flag: the largest number of them, loosest first, that plans within
 * that (a bisection); then the nodes left out try to join, in the same
 * order, and stay where the plan still fits.  Dropping the tightest half of
 * the rest at a time, as this did before, kept 36 of the 76 passes that fit
 * on WideResNet-38-A2 at batch 16 (standard BN); this keeps 70, with the
 * same arena.  A pass may also run on fewer images per call (the node's
 * wino_images, cpu/conv.h): less scratch, somewhat slower, still faster
 * than without Winograd.  Each candidate enters with the fastest of its
 * options that fits at its step, and those left out at the end try their
 * slower ones in turn; in-place II on WideResNet-38 at batch 16 went from
 * 57 passes to 67 so (docs/CPU.md).  Each try is one plan of the graph,
 * milliseconds.  The
 * storage strategy plans its candidates with off (strategy.c), and a
 * session over its budget with auto's choice is built again with off
 * (session.c).
 */
#include "graph/graph_internal.h"

#include <stdlib.h>
#include <strings.h>

const char *iabn_winograd_mode_name(iabn_winograd_mode m)
{
    switch (m) {
#define X(id, name) case id: return name;
        IABN_WINOGRAD_MODES(X)
#undef X
    case IABN_WINOGRAD_MODE_COUNT: break;
    }
    return "?";
}

int iabn_winograd_mode_parse(const char *s, iabn_winograd_mode *out, iabn_err *e)
{
    for (int m = 0; m < IABN_WINOGRAD_MODE_COUNT; m++)
        if (s && !strcasecmp(s, iabn_winograd_mode_name((iabn_winograd_mode)m))) {
            *out = (iabn_winograd_mode)m;
            return 0;
        }
    return iabn_err_set(e, IABN_EINVAL, "unknown Winograd mode '%s' (auto, off or on)",
                        s ? s : "");
}

void iabn_graph_set_winograd(iabn_graph *g, iabn_winograd_mode m) { g->winograd = m; }
iabn_winograd_mode iabn_graph_winograd(const iabn_graph *g) { return g->winograd; }

/* Whether node n runs Winograd kernels with the flag set. */
static int can(iabn_graph *g, iabn_node *n, const iabn_backend *be)
{
    if (!n->op->winograd) return 0;
    int was = n->winograd;
    n->winograd = 1;
    int r = n->op->winograd(g, n, be);
    n->winograd = was;
    return r;
}

void iabn_graph_winograd_count(const iabn_graph *g, int *running, int *possible)
{
    const iabn_backend *be = iabn_store_backend(g->store);
    *running = *possible = 0;
    for (int id = 0; id < g->nn; id++) {
        iabn_node *n = &g->n[id];
        if (!can((iabn_graph *)g, n, be)) continue;
        (*possible)++;
        *running += n->winograd;
    }
}

void iabn_graph_winograd_all(iabn_graph *g)
{
    for (int id = 0; id < g->nn; id++) g->n[id].winograd = g->winograd == IABN_WINOGRAD_ON;
}

/* What a scratch of b bytes takes in the plan (autograd.c rounds it to
 * whole KiB; the planner adds its guard and aligns). */
static size_t planned(size_t b, const iabn_plan *p, size_t align)
{
    if (!b) return 0;
    size_t v = (b + 1023) / 1024 * 1024 + p->opts.guard;
    return (v + align - 1) / align * align;
}

/* A node's ways to run Winograd: at most MAX_OPTS, the first with the
 * kernel's fastest slice of the batch (images 0), then fewer images per
 * call for less scratch (cpu/conv.h wino_images). */
#define MAX_OPTS 8
typedef struct cand {
    int id;
    size_t old_bytes;
    int nopt, opt;               /* options, and the one in use            */
    int images[MAX_OPTS];
    size_t bytes[MAX_OPTS];      /* its scratch with each                  */
    size_t need;                 /* live bytes at its step with opt's      */
} cand;

/* loosest first: the least live bytes with the new scratch */
static int by_need(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    return x->need != y->need ? (x->need < y->need ? -1 : 1) : x->id - y->id;
}

/* Gives node c's flag the state `on`, with option c->opt, and its scratch
 * the matching size. */
static int set_on(iabn_graph *g, const cand *c, int on, iabn_err *e)
{
    iabn_node *n = &g->n[c->id];
    int images = on ? c->images[c->opt] : 0;
    if (n->winograd == on && n->wino_images == images) return 0;
    n->winograd = on;
    n->wino_images = images;
    return iabn_graph_size_scratch(g, c->id, on ? c->bytes[c->opt] : c->old_bytes, e);
}

/* The options of node n (its flag set): the fastest slice, then at most
 * half as many images as the batch, a quarter, ..., each kept where it
 * needs less scratch than the one before (the kernel does not go below
 * the slice it still runs fast enough on; cpu/conv.h). */
static void options(iabn_graph *g, iabn_node *n, const iabn_backend *be, cand *c)
{
    int batch = 1;
    for (int i = 0; i < n->nin; i++)
        if (g->t[n->in[i]].nd == 4 && g->t[n->in[i]].shape[0] > batch)
            batch = g->t[n->in[i]].shape[0];
    c->nopt = 0;
    n->winograd = 1;
    for (int images = 0; c->nopt < MAX_OPTS; images = images ? images / 2 : batch / 2) {
        n->wino_images = images;
        size_t b = n->op->scratch_bytes ? n->op->scratch_bytes(g, n, be) : 0;
        if (!c->nopt || b < c->bytes[c->nopt - 1]) {
            c->images[c->nopt] = images;
            c->bytes[c->nopt++] = b;
        }
        if (images == 1 || (images == 0 && batch < 2)) break;
    }
    n->winograd = 0;
    n->wino_images = 0;
}

/* Plans g with the candidates' current states; *fits: within `arena`. */
static int try_plan(iabn_graph *g, size_t arena, int *fits, iabn_err *e)
{
    iabn_plan *p = NULL;
    int rc = iabn_plan_build(g, NULL, &p, e);
    *fits = !rc && p->arena_bytes <= arena;
    iabn_plan_free(p);
    return rc;
}

/* Of the first m candidates (loosest first), flags on; the rest off. */
static int set_prefix(iabn_graph *g, cand *c, int nc, int m, iabn_err *e)
{
    int rc = 0;
    for (int i = 0; i < nc && !rc; i++) rc = set_on(g, &c[i], i < m, e);
    g->scratch_last = m > 0;
    return rc;
}

int iabn_graph_winograd_choose(iabn_graph *g, iabn_err *e)
{
    if (g->winograd != IABN_WINOGRAD_AUTO) return 0;
    const iabn_backend *be = iabn_store_backend(g->store);
    int any = 0;
    for (int id = 0; id < g->nn && !any; id++) any = can(g, &g->n[id], be);
    if (!any) return 0;
    iabn_plan *p = NULL;
    int rc = iabn_plan_build(g, NULL, &p, e);
    if (rc) return rc;
    /* the bound the live bytes keep, and the arena's allowance for the
     * greedy placement's noise (see the top of the file) */
    size_t bound = p->lower_bound, arena = p->arena_bytes + p->arena_bytes / 400;
    size_t align = p->opts.align ? p->opts.align : be->align;
    cand *c = malloc(sizeof *c * (size_t)g->ns);
    if (!c) {
        iabn_plan_free(p);
        return iabn_err_set(e, IABN_ENOMEM, "out of memory choosing the Winograd convs");
    }
    int nc = 0;
    for (int s = 0; s < g->ns; s++) {
        int id = g->sched[s];
        iabn_node *n = &g->n[id];
        if (!can(g, n, be)) continue;
        cand *k = &c[nc];
        k->id = id;
        k->old_bytes = n->scratch >= 0 ? g->t[n->scratch].nbytes : 0;
        options(g, n, be, k);
        /* the fastest option whose scratch fits at its step */
        for (k->opt = 0; k->opt < k->nopt; k->opt++) {
            k->need = p->live[s] - planned(k->old_bytes, p, align) +
                      planned(k->bytes[k->opt], p, align);
            if (k->need <= bound) break;
        }
        nc += k->opt < k->nopt;
    }
    iabn_plan_free(p);
    qsort(c, (size_t)nc, sizeof *c, by_need);
    /* The largest m whose loosest m candidates plan within the allowance,
     * by bisection (m = 0 is the plan above, which does); then each
     * candidate left out, loosest first, joins where the plan still fits.
     * The greedy placement is not monotone in the set, so the second sweep
     * finds nodes that a tighter one had shut out. */
    int lo = 0, hi = nc + 1, fits = 0;
    for (int m = nc; !rc && hi - lo > 1; m = lo + (hi - lo) / 2) {
        rc = set_prefix(g, c, nc, m, e);
        if (!rc) rc = try_plan(g, arena, &fits, e);
        if (fits) lo = m;
        else hi = m;
    }
    if (!rc) rc = set_prefix(g, c, nc, lo, e);
    /* the sweep tries runs of candidates, doubling while they fit and
     * halving where they do not, down to the one that does not: a plan per
     * candidate left out (times the log of the run), not per candidate */
    for (int i = lo + 1, run = 1; i < nc && !rc;) {
        int j = i + run < nc ? i + run : nc;
        g->scratch_last = 1;
        for (int k = i; k < j && !rc; k++) rc = set_on(g, &c[k], 1, e);
        if (!rc) rc = try_plan(g, arena, &fits, e);
        if (rc || fits) {
            i = j;
            run *= 2;
            continue;
        }
        for (int k = i; k < j && !rc; k++) rc = set_on(g, &c[k], 0, e);
        if (j - i == 1) i++;
        run = (j - i + 1) / 2 > 1 ? (j - i + 1) / 2 : 1;
    }
    /* each one still left out tries its slower options, with less scratch,
     * in turn, and keeps the first that plans within the allowance */
    for (int i = 0; i < nc && !rc; i++) {
        cand *k = &c[i];
        if (g->n[k->id].winograd) continue;
        g->scratch_last = 1;
        for (k->opt++; k->opt < k->nopt && !rc; k->opt++) {
            rc = set_on(g, k, 1, e);
            if (!rc) rc = try_plan(g, arena, &fits, e);
            if (rc || fits) break;
            if (!rc) rc = set_on(g, k, 0, e);
        }
    }
    int kept = 0;
    for (int i = 0; i < nc; i++) kept += g->n[c[i].id].winograd;
    g->scratch_last = kept > 0;
    free(c);
    return rc;
}
