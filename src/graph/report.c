/* report.c: human-readable dumps of a schedule and its plan (the per-step
 * table of `iabn mem --steps` and a debugging aid). */
#include "graph/graph_internal.h"

#include <stdio.h>

static const char *phase_name(iabn_phase p)
{
    return p == IABN_PHASE_FWD ? "F" : p == IABN_PHASE_BWD ? "B" : "R";
}

void iabn_plan_dump(const iabn_graph *g, const iabn_plan *p, FILE *f)
{
    fprintf(f, "%5s %s %-28s %-20s %12s  outputs (offset+bytes)\n", "step", "P", "node", "op",
            "live");
    for (int s = 0; s < g->ns; s++) {
        const iabn_node *n = &g->n[g->sched[s]];
        fprintf(f, "%5d %s %-28.28s %-20.20s %12zu ", s, phase_name(n->phase), n->name, n->op->name,
                p ? p->live[s] : 0);
        for (int j = 0; j < n->nout; j++) {
            int t = n->out[j];
            if (p && p->group[t] >= 0)
                fprintf(f, " %s@%zu+%zu", g->t[t].name, p->offset[t], g->t[t].nbytes);
            else
                fprintf(f, " %s", g->t[t].name);
        }
        fprintf(f, "  <-");
        for (int k = 0; k < n->nin; k++) fprintf(f, " %s", g->t[n->in[k]].name);
        fputc('\n', f);
    }
}
