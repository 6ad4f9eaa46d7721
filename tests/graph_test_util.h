/* graph_test_util.h: helpers for tests that build, plan and run graphs: a
 * random-weighted loss op (sum(r * y), so that normalisation layers get a
 * non-zero gradient), and a runner that owns store, graph, plan and executor. */
#ifndef IABN_GRAPH_TEST_UTIL_H
#define IABN_GRAPH_TEST_UTIL_H

#include "iabn.h"
#include "test_util.h"

/* in: y, r   out: loss (1 float, double accumulation) */
static inline int wsum_cpu(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    (void)e;
    size_t cnt = iabn_graph_t(g, n->in[0])->nbytes / 4;
    const float *y = b->in[0], *r = b->in[1];
    double s = 0;
    for (size_t i = 0; i < cnt; i++) s += (double)y[i] * r[i];
    *(float *)b->out[0] = (float)s;
    return 0;
}

/* in: r   out: dy = r */
static inline int wsum_bwd_cpu(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    (void)e;
    memcpy(b->out[0], b->in[0], iabn_graph_t(g, n->in[0])->nbytes);
    return 0;
}

static const iabn_op_def t_op_wsum_bwd = {.name = "wsum_bwd", .run = wsum_bwd_cpu};

static inline int wsum_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    (void)dout;
    (void)e;
    const iabn_node fw = *iabn_graph_n(g, node);
    const iabn_tensor *y = iabn_graph_t(g, fw.in[0]);
    int nd = y->nd, shape[4];
    memcpy(shape, y->shape, sizeof shape);
    int dy = iabn_graph_tensor(g, "d.wsum", IABN_F32, nd, shape);
    iabn_graph_node(g, &t_op_wsum_bwd, "wsum_bwd", 1, &fw.in[1], 1, &dy, NULL, 0);
    din[0] = dy;
    return 0;
}

static const iabn_op_def t_op_wsum = {.name = "wsum", .backward = wsum_backward,
                                      .run = wsum_cpu};

/* Appends loss = sum(r * y) with r an input named "r"; returns the loss. */
static inline int t_wsum(iabn_graph *g, int y, int *r_out)
{
    const iabn_tensor *yt = iabn_graph_t(g, y);
    int nd = yt->nd, shape[4];
    memcpy(shape, yt->shape, sizeof shape);
    int r = iabn_graph_input(g, "r", IABN_F32, nd, shape);
    int one[1] = {1};
    int loss = iabn_graph_tensor(g, "loss", IABN_F32, 1, one);
    int ins[2] = {y, r};
    iabn_graph_node(g, &t_op_wsum, "wsum", 2, ins, 1, &loss, NULL, 0);
    iabn_graph_mark_output(g, loss);
    if (r_out) *r_out = r;
    return loss;
}

typedef struct t_run {
    iabn_store *s;
    iabn_graph *g;
    iabn_plan *p;
    iabn_exec *ex;
    int loss;
} t_run;

/* Builds backward (if loss >= 0), finalises, plans with opts, binds. */
static inline int t_prepare(t_run *t, const iabn_plan_opts *opts)
{
    iabn_err e = {0};
    if (!iabn_graph_ok(t->g)) {
        fprintf(stderr, "build: %s\n", iabn_graph_error(t->g)->msg);
        return -1;
    }
    if (t->loss >= 0 && iabn_graph_backward(t->g, t->loss, &e)) {
        fprintf(stderr, "backward: %s\n", e.msg);
        return -1;
    }
    if (iabn_graph_finalize(t->g, &e) || iabn_plan_build(t->g, opts, &t->p, &e) ||
        iabn_plan_validate(t->g, t->p, &e) || iabn_exec_new(t->g, t->p, &t->ex, &e)) {
        fprintf(stderr, "prepare: %s\n", e.msg);
        return -1;
    }
    return 0;
}

static inline void t_free(t_run *t)
{
    iabn_exec_free(t->ex);
    iabn_plan_free(t->p);
    iabn_graph_free(t->g);
    iabn_store_free(t->s);
    memset(t, 0, sizeof *t);
}

static inline void t_set_inputs_random(t_run *t, unsigned seed)
{
    for (int i = 0; i < iabn_graph_ntensors(t->g); i++) {
        const iabn_tensor *x = iabn_graph_t(t->g, i);
        if (x->kind != IABN_T_INPUT || x->dtype != IABN_F32) continue;
        /* keyed by name: the same input gets the same values whatever the
         * graph around it (tensor ids differ between BN modes) */
        unsigned h = 2166136261u;
        for (const char *c = x->name; *c; c++) h = (h ^ (unsigned char)*c) * 16777619u;
        float *p = iabn_exec_ptr(t->ex, i);
        t_fill(p, x->nbytes / 4, seed + h);
    }
}

/* Parameters uniform in [-1, 1) (gammas too: negative scales are part of the
 * contract), running variances in [0.5, 1.5). */
static inline void t_set_params_random(iabn_store *s, unsigned seed)
{
    for (int i = 0; i < iabn_store_count(s); i++) {
        iabn_param *p = iabn_store_get(s, i);
        t_fill(p->data, p->count, seed + (unsigned)i * 104729u);
        if (strstr(p->name, "running_var"))
            for (size_t k = 0; k < p->count; k++) p->data[k] = 1.0f + 0.5f * p->data[k];
    }
}

#endif
