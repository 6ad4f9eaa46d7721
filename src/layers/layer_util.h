/* layer_util.h: helpers shared by the layer files of src/layers (private). */
#ifndef IABN_LAYER_UTIL_H
#define IABN_LAYER_UTIL_H

#include <stdio.h>
#include <string.h>

#include "layers/layer_params.h"
#include "layers/layers.h"

/* Copies a node's typed parameters out of its byte buffer. */
#define IABN_PARAMS(type, node) \
    type P; memcpy(&P, (node)->params, sizeof P)

/* In a run function (b: its iabn_bind, e: its iabn_err): calls kernel `fn`
 * of the node's backend with the backend's context first and e last, and
 * returns the error code from the run function if it fails. */
#define IABN_K(fn, ...)                                                                    \
    do {                                                                                   \
        int rc_ = b->backend->k->fn(b->backend->ctx, __VA_ARGS__, e);                     \
        if (rc_) return rc_;                                                               \
    } while (0)

static inline const iabn_tensor *lt(const iabn_graph *g, int t) { return iabn_graph_t(g, t); }

/* A new arena tensor shaped like t, named "<prefix><t's name><suffix>". */
static inline int like(iabn_graph *g, int t, const char *prefix, const char *suffix)
{
    char name[IABN_NAME_LEN];
    const iabn_tensor *x = iabn_graph_t(g, t);
    int nd = x->nd, shape[IABN_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    snprintf(name, sizeof name, "%s%.80s%s", prefix, x->name, suffix);
    return iabn_graph_tensor(g, name, x->dtype, nd, shape);
}

static inline int named(iabn_graph *g, const char *base, const char *suffix, iabn_dtype dt,
                        int nd, const int *shape)
{
    char name[IABN_NAME_LEN];
    snprintf(name, sizeof name, "%.80s%s", base, suffix);
    return iabn_graph_tensor(g, name, dt, nd, shape);
}

static inline int param(iabn_graph *g, const char *base, const char *suffix, iabn_pkind kind,
                        int nd, const int *shape)
{
    char name[IABN_NAME_LEN];
    snprintf(name, sizeof name, "%.80s%s", base, suffix);
    return iabn_graph_param(g, name, kind, nd, shape);
}

/* The backward of an op whose input gradient is one node: dx, shaped like
 * input 0 of the forward node fw, = op(ins) with params; inplace_in >= 0 lets
 * dx overwrite that input (permitted, not required).  Returns 0, or -1 with
 * the error recorded in the graph. */
static inline int grad_node(iabn_graph *g, const iabn_node *fw, const iabn_op_def *op, int nin,
                            const int *ins, const void *params, size_t psize, int inplace_in,
                            int *din)
{
    int dx = like(g, fw->in[0], "d.", "");
    int b = iabn_graph_node(g, op, fw->name, nin, ins, 1, &dx, params, psize);
    if (inplace_in >= 0) iabn_graph_inplace(g, b, 0, inplace_in, 0);
    din[0] = dx;
    return iabn_graph_ok(g) ? 0 : -1;
}

static inline int needs_grad(const iabn_graph *g, int t) { return iabn_graph_t(g, t)->requires_grad; }

/* N, C, H*W of a 2-D (N,C) or 4-D (N,C,H,W) tensor */
static inline void nchw(const iabn_tensor *t, int *n, int *c, int *hw)
{
    *n = t->shape[0];
    *c = t->nd > 1 ? t->shape[1] : 1;
    *hw = 1;
    for (int i = 2; i < t->nd; i++) *hw *= t->shape[i];
}

#endif
