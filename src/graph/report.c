/* report.c: human-readable dumps of a schedule and its plan (the per-step
 * table of `iabn mem --steps` and a debugging aid). */
#include "graph/graph_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
            /* the layout pass's choice, where it is not NCHW */
            if (g->t[t].layout != IABN_LAYOUT_NCHW)
                fprintf(f, ":%s", iabn_layout_name(g->t[t].layout));
        }
        fprintf(f, "  <-");
        for (int k = 0; k < n->nin; k++) fprintf(f, " %s", g->t[n->in[k]].name);
        fputc('\n', f);
    }
}

void iabn_plan_blocks(const iabn_graph *g, const iabn_plan *p, iabn_block_mem *rows)
{
    memset(rows, 0, (size_t)g->nb * sizeof *rows);
    /* A kept buffer belongs to the block whose backward reads it first: the
     * input of a BN is stored for that BN's backward, the logits for the
     * loss's, whichever block produced them. */
    char *seen = calloc((size_t)p->ntensors, 1);
    if (!seen) return;
    for (int s = p->boundary; s < g->ns; s++) {
        const iabn_node *n = &g->n[g->sched[s]];
        for (int k = 0; k < n->nin; k++) {
            int r = p->group[n->in[k]];
            if (r < 0 || seen[r]) continue;
            seen[r] = 1;
            if (p->first[r] >= p->boundary || n->block < 0) continue;
            rows[n->block].kept_bytes += p->gsize[r];
            if (g->t[r].nd >= 2 && !g->t[r].scratch) rows[n->block].kept_buffers++;
        }
    }
    free(seen);
    for (int s = 0; s < g->ns; s++) {
        const iabn_node *n = &g->n[g->sched[s]];
        if (n->block >= 0 && (n->op == &iabn_op_copy || n->own_buffer) &&
            n->phase == IABN_PHASE_FWD)
            rows[n->block].copies++;
    }
    for (int i = 0; i < p->nnotes; i++) {
        int b = g->n[p->notes[i].node].block;
        if (b < 0) continue;
        if (p->notes[i].granted) rows[b].inplace_granted++;
        else rows[b].inplace_refused++;
    }
}
