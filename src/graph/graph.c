/* graph.c: graph storage (tensors, nodes, schedule, report blocks) and the
 * calls layers use to build it.  Building never stops halfway on an error:
 * the first error is recorded, later calls return -1, and the model builder
 * checks iabn_graph_ok() once. */
#include "graph/graph_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

iabn_graph *iabn_graph_new(iabn_store *s, iabn_mode mode)
{
    iabn_graph *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->store = s;
    g->mode = mode;
    g->cur_block = -1;
    g->building_fwd = -1;
    g->offload.lookahead = 1;
    return g;
}

static void *dup_array(const void *src, size_t n, size_t elem)
{
    void *d = malloc(n ? n * elem : 1);
    if (d && n) memcpy(d, src, n * elem);
    return d;
}

iabn_graph *iabn_graph_clone(const iabn_graph *g)
{
    iabn_graph *c = malloc(sizeof *c);
    if (!c) return NULL;
    *c = *g;
    c->t = dup_array(g->t, (size_t)g->nt, sizeof *g->t);
    c->n = dup_array(g->n, (size_t)g->nn, sizeof *g->n);
    c->sched = dup_array(g->sched, (size_t)g->ns, sizeof *g->sched);
    c->blocks = dup_array(g->blocks, (size_t)g->nb, sizeof *g->blocks);
    c->tcap = g->nt;
    c->ncap = g->nn;
    c->scap = g->ns;
    c->bcap = g->nb;
    if (!c->t || !c->n || !c->sched || !c->blocks) {
        iabn_graph_free(c);
        return NULL;
    }
    return c;
}

void iabn_graph_free(iabn_graph *g)
{
    if (!g) return;
    free(g->t);
    free(g->n);
    free(g->sched);
    free(g->buckets);
    free(g->bucket_members);
    free(g->blocks);
    free(g);
}

iabn_store *iabn_graph_store(const iabn_graph *g) { return g->store; }
iabn_mode iabn_graph_mode(const iabn_graph *g) { return g->mode; }
void iabn_graph_set_fusion(iabn_graph *g, int on) { g->no_fusion = !on; }
int iabn_graph_fusion(const iabn_graph *g) { return !g->no_fusion; }
const iabn_err *iabn_graph_error(const iabn_graph *g) { return &g->err; }
int iabn_graph_ok(const iabn_graph *g) { return g->err.code == 0; }

int iabn_graph_fail(iabn_graph *g, int code, const char *fmt, ...)
{
    if (g->err.code == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g->err.msg, sizeof g->err.msg, fmt, ap);
        va_end(ap);
        g->err.code = code;
    }
    return -1;
}

static int grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap) return 0;
    int nc = *cap ? *cap * 2 : 64;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

static int add_tensor(iabn_graph *g, const char *name, iabn_dtype dt, int nd,
                      const int *shape, iabn_tkind kind)
{
    if (g->err.code) return -1;
    if (nd < 1 || nd > IABN_MAX_DIMS)
        return iabn_graph_fail(g, IABN_EINVAL, "tensor %s: %d dimensions (1..4 allowed)",
                               name, nd);
    size_t count = 1;
    int big = 0;             /* count past IABN_MAX_ELEMS (then count is not exact) */
    int dims[IABN_MAX_DIMS]; /* shape may point into g->t, which grow() moves */
    for (int i = 0; i < nd; i++) {
        if (shape[i] <= 0)
            return iabn_graph_fail(g, IABN_EINVAL, "tensor %s: dimension %d is %d", name, i,
                                   shape[i]);
        dims[i] = shape[i];
        if (count > IABN_MAX_ELEMS / (size_t)shape[i]) big = 1;
        count = big ? IABN_MAX_ELEMS + 1 : count * (size_t)shape[i];
    }
    if (big) {
        /* the exact need, in double (it may exceed size_t), for the message */
        char sh[64];
        size_t k = 0;
        double need = (double)iabn_dtype_size(dt);
        for (int i = 0; i < nd; i++) {
            need *= (double)dims[i];
            k += (size_t)snprintf(sh + k, sizeof sh - k, i ? "x%d" : "%d", dims[i]);
            if (k >= sizeof sh) k = sizeof sh - 1;
        }
        return iabn_graph_fail(g, IABN_ENOMEM,
                               "tensor %s (%s) does not fit: needs %.0f bytes; one tensor holds "
                               "at most %zu elements",
                               name, sh, need, (size_t)IABN_MAX_ELEMS);
    }
    if (grow((void **)&g->t, &g->tcap, g->nt + 1, sizeof *g->t))
        return iabn_graph_fail(g, IABN_ENOMEM, "out of memory adding tensor %s", name);
    iabn_tensor *t = &g->t[g->nt];
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->nd = nd;
    for (int i = 0; i < nd; i++) t->shape[i] = dims[i];
    t->nbytes = count * iabn_dtype_size(dt);
    t->kind = kind;
    t->policy = IABN_KEEP;
    t->producer = -1;
    t->store_id = -1;
    t->view_of = -1;
    t->grad = -1;
    t->layout = IABN_LAYOUT_NCHW;
    t->block = g->building_fwd >= 0 ? g->n[g->building_fwd].block : g->cur_block;
    snprintf(t->name, sizeof t->name, "%s", name);
    return g->nt++;
}

int iabn_graph_input(iabn_graph *g, const char *name, iabn_dtype dt, int nd, const int *shape)
{
    return add_tensor(g, name, dt, nd, shape, IABN_T_INPUT);
}

int iabn_graph_input_requires_grad(iabn_graph *g, int t, iabn_err *e)
{
    if (g->err.code) {
        *e = g->err;
        return e->code;
    }
    if (t < 0 || t >= g->nt || g->t[t].kind != IABN_T_INPUT || g->t[t].dtype != IABN_F32)
        return iabn_err_set(e, IABN_EINVAL, "tensor %d is not a float graph input", t);
    if (g->mode != IABN_TRAIN)
        return iabn_err_set(e, IABN_EINVAL, "input %s: gradients need a training graph",
                            g->t[t].name);
    for (int i = 0; i < g->nn; i++)
        for (int k = 0; k < g->n[i].nin; k++)
            if (g->n[i].in[k] == t)
                return iabn_err_set(e, IABN_EINVAL,
                                    "input %s: ask for its gradient before node %s reads it",
                                    g->t[t].name, g->n[i].name);
    g->t[t].requires_grad = 1;
    return 0;
}

int iabn_graph_input_grad(const iabn_graph *g, int t)
{
    return t >= 0 && t < g->nt ? g->t[t].grad : -1;
}

int iabn_graph_tensor(iabn_graph *g, const char *name, iabn_dtype dt, int nd, const int *shape)
{
    return add_tensor(g, name, dt, nd, shape, IABN_T_ACT);
}

int iabn_graph_param(iabn_graph *g, const char *name, iabn_pkind kind, int nd, const int *shape)
{
    if (g->err.code) return -1;
    int sid;
    if (iabn_store_param(g->store, name, kind, nd, shape, &sid, &g->err)) return -1;
    /* one graph tensor per store entry */
    for (int i = 0; i < g->nt; i++)
        if ((g->t[i].kind == IABN_T_PARAM || g->t[i].kind == IABN_T_STATE) &&
            g->t[i].store_id == sid)
            return i;
    int t = add_tensor(g, name, IABN_F32, nd, shape,
                       kind == IABN_P_BUFFER ? IABN_T_STATE : IABN_T_PARAM);
    if (t < 0) return -1;
    g->t[t].store_id = sid;
    const iabn_param *p = iabn_store_get(g->store, sid);
    g->t[t].requires_grad = kind != IABN_P_BUFFER && !p->frozen && g->mode == IABN_TRAIN;
    return t;
}

int iabn_graph_param_grad(iabn_graph *g, int t)
{
    if (t < 0 || g->err.code) return -1;
    const iabn_tensor *pt = &g->t[t];
    if (pt->kind != IABN_T_PARAM)
        return iabn_graph_fail(g, IABN_EINVAL, "%s is not a parameter", pt->name);
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].kind == IABN_T_GRAD && g->t[i].store_id == pt->store_id) return i;
    char name[IABN_NAME_LEN];
    snprintf(name, sizeof name, "grad.%.80s", pt->name);
    int sid = pt->store_id;
    int nd = pt->nd, shape[IABN_MAX_DIMS];
    memcpy(shape, pt->shape, sizeof shape);
    int gt = add_tensor(g, name, IABN_F32, nd, shape, IABN_T_GRAD);
    if (gt >= 0) g->t[gt].store_id = sid;
    return gt;
}

int iabn_graph_view(iabn_graph *g, int t, const char *name, int nd, const int *shape)
{
    if (t < 0 || g->err.code) return -1;
    size_t nb = g->t[t].nbytes;
    int v = add_tensor(g, name, g->t[t].dtype, nd, shape, g->t[t].kind);
    if (v < 0) return -1;
    if (g->t[v].nbytes != nb)
        return iabn_graph_fail(g, IABN_EINVAL, "view %s: %zu bytes, base %s has %zu", name,
                               g->t[v].nbytes, g->t[t].name, nb);
    while (g->t[t].view_of >= 0) t = g->t[t].view_of;
    g->t[v].view_of = t;
    g->t[v].store_id = g->t[t].store_id;
    g->t[v].producer = g->t[t].producer;
    g->t[v].requires_grad = g->t[t].requires_grad;
    return v;
}

void iabn_graph_mark_output(iabn_graph *g, int t)
{
    if (t >= 0 && t < g->nt && g->t[t].kind == IABN_T_ACT) g->t[t].kind = IABN_T_OUTPUT;
}

int iabn_graph_node(iabn_graph *g, const iabn_op_def *op, const char *name, int nin,
                    const int *in, int nout, const int *out, const void *params,
                    size_t params_size)
{
    if (g->err.code) return -1;
    if (nin > IABN_MAX_IN || nout > IABN_MAX_OUT || params_size > IABN_PARAMS_BYTES)
        return iabn_graph_fail(g, IABN_EINVAL, "node %s: too many operands", name);
    for (int i = 0; i < nin; i++)
        if (in[i] < 0 || in[i] >= g->nt)
            return iabn_graph_fail(g, IABN_EINVAL, "node %s: input %d is not a tensor", name, i);
    for (int i = 0; i < nout; i++)
        if (out[i] < 0 || out[i] >= g->nt)
            return iabn_graph_fail(g, IABN_EINVAL, "node %s: output %d is not a tensor", name, i);
    if (grow((void **)&g->n, &g->ncap, g->nn + 1, sizeof *g->n) ||
        grow((void **)&g->sched, &g->scap, g->ns + 1, sizeof *g->sched))
        return iabn_graph_fail(g, IABN_ENOMEM, "out of memory adding node %s", name);
    iabn_node *n = &g->n[g->nn];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->nin = nin;
    n->nout = nout;
    if (nin) memcpy(n->in, in, (size_t)nin * sizeof *in); /* in / out may be NULL when empty */
    if (nout) memcpy(n->out, out, (size_t)nout * sizeof *out);
    for (int j = 0; j < IABN_MAX_OUT; j++) n->inplace[j] = -1;
    n->phase = g->building_phase;
    n->fwd = g->building_fwd;
    n->scratch = -1;
    /* backward and recompute nodes belong to the block of the node they serve */
    n->block = g->building_fwd >= 0 ? g->n[g->building_fwd].block : g->cur_block;
    snprintf(n->name, sizeof n->name, "%s", name);
    if (params_size) memcpy(n->params, params, params_size);
    int rg = 0;
    for (int i = 0; i < nin; i++) rg |= g->t[in[i]].requires_grad;
    for (int i = 0; i < nout; i++) {
        iabn_tensor *t = &g->t[out[i]];
        t->producer = g->nn;
        if (n->phase == IABN_PHASE_FWD && t->kind != IABN_T_GRAD) t->requires_grad = rg;
    }
    g->sched[g->ns++] = g->nn;
    return g->nn++;
}

void iabn_graph_inplace(iabn_graph *g, int node, int j, int k, int must)
{
    if (node < 0 || g->err.code) return;
    g->n[node].inplace[j] = k;
    g->n[node].must[j] = (unsigned char)(must != 0);
}

void iabn_graph_set_policy(iabn_graph *g, int t, iabn_policy p)
{
    if (t >= 0 && t < g->nt) g->t[t].policy = p;
}

void iabn_graph_begin_block(iabn_graph *g, const char *name)
{
    if (g->err.code) return;
    if (grow((void **)&g->blocks, &g->bcap, g->nb + 1, sizeof *g->blocks)) {
        iabn_graph_fail(g, IABN_ENOMEM, "out of memory adding block %s", name);
        return;
    }
    snprintf(g->blocks[g->nb], sizeof g->blocks[0], "%s", name);
    g->cur_block = g->nb++;
}

int iabn_graph_block_count(const iabn_graph *g) { return g->nb; }
const char *iabn_graph_block_name(const iabn_graph *g, int b)
{
    return b >= 0 && b < g->nb ? g->blocks[b] : "(none)";
}

int iabn_graph_ntensors(const iabn_graph *g) { return g->nt; }
int iabn_graph_nnodes(const iabn_graph *g) { return g->nn; }
const iabn_tensor *iabn_graph_t(const iabn_graph *g, int t) { return &g->t[t]; }
iabn_tensor *iabn_graph_t_mut(iabn_graph *g, int t) { return &g->t[t]; }
const iabn_node *iabn_graph_n(const iabn_graph *g, int n) { return &g->n[n]; }
iabn_node *iabn_graph_n_mut(iabn_graph *g, int n) { return &g->n[n]; }
int iabn_graph_schedule_len(const iabn_graph *g) { return g->ns; }
const int *iabn_graph_schedule(const iabn_graph *g) { return g->sched; }
int iabn_graph_copies(const iabn_graph *g) { return g->ncopies; }

int iabn_graph_find(const iabn_graph *g, const char *name)
{
    for (int i = 0; i < g->nt; i++)
        if (strcmp(g->t[i].name, name) == 0) return i;
    return -1;
}

int iabn_graph_insert_before(iabn_graph *g, int node, int pos)
{
    int cur = -1;
    for (int s = g->ns - 1; s >= 0 && cur < 0; s--)
        if (g->sched[s] == node) cur = s;
    if (cur < 0 || pos < 0 || pos > g->ns - 1) return -1;
    if (cur < pos) pos--; /* removing it shifts the target left */
    memmove(&g->sched[cur], &g->sched[cur + 1], (size_t)(g->ns - 1 - cur) * sizeof *g->sched);
    memmove(&g->sched[pos + 1], &g->sched[pos], (size_t)(g->ns - 1 - pos) * sizeof *g->sched);
    g->sched[pos] = node;
    return 0;
}

void iabn_graph_set_comm(iabn_graph *g, iabn_comm *c) { g->comm = c; }
iabn_comm *iabn_graph_comm(const iabn_graph *g) { return g->comm; }
