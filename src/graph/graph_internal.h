/* graph_internal.h: the graph's private layout, shared by the files of
 * src/graph only (graph.c, autograd.c, plan.c, exec.c, store.c). */
#ifndef IABN_GRAPH_INTERNAL_H
#define IABN_GRAPH_INTERNAL_H

#include "graph/graph.h"

/* A gradient bucket (buckets.c): store ids bucket_members[first ..
 * first+count), elems floats, complete after schedule step ready_step. */
typedef struct iabn_grad_bucket {
    int first, count;
    size_t elems;
    int ready_step;
} iabn_grad_bucket;

struct iabn_graph {
    iabn_store *store;
    iabn_mode mode;
    iabn_err err;
    iabn_tensor *t;
    int nt, tcap;
    iabn_node *n;
    int nn, ncap;
    int *sched;          /* node ids in execution order */
    int ns, scap;
    char (*blocks)[64];
    int nb, bcap, cur_block;
    iabn_phase building_phase;   /* phase stamped on new nodes */
    int building_fwd;            /* forward node stamped on new nodes */
    int ncopies;
    int finalized, has_backward;
    iabn_offload_opts offload;
    iabn_comm *comm;             /* data-parallel job, or NULL */
    iabn_grad_bucket *buckets;
    int nbuckets;
    int *bucket_members;
    int grad_sync_off;
    iabn_layout_mode layout_mode;
    iabn_winograd_mode winograd; /* which convs run Winograd (winograd.c) */
    int no_fusion;               /* iabn_graph_set_fusion(g, 0)            */
    int scratch_last;            /* the planner also tries three more
                                    orders, the nodes' scratch last among
                                    them (plan.c; set by winograd.c)       */
    int conv_reorders;           /* layout.c: see iabn_layout_stats */
};

/* finalize's layout pass (layout.c), before the scratch is sized. */
int iabn_graph_apply_layouts(iabn_graph *g, iabn_err *e);

/* finalize's Winograd steps (winograd.c): the on mode's flags, before the
 * layout pass; the auto mode's choice, after the scratch is sized. */
void iabn_graph_winograd_all(iabn_graph *g);
int iabn_graph_winograd_choose(iabn_graph *g, iabn_err *e);

/* Gives node id a scratch tensor of bytes (autograd.c; 0: none), or resizes
 * the one it has. */
int iabn_graph_size_scratch(iabn_graph *g, int id, size_t bytes, iabn_err *e);

/* finalize's OFFLOAD step (offload.c). */
int iabn_graph_apply_offload(iabn_graph *g, iabn_err *e);

/* Moves node to schedule position pos (before the node that is there now). */
int iabn_graph_insert_before(iabn_graph *g, int node, int pos);

#endif
