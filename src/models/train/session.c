/* session.c: the one sequence that turns a network into a runnable step:
 * input and labels, the network (registry model or builder), the loss, the
 * backward, finalisation, the plan, the executor, and the step's memory
 * figures; plus the budget search over batch or input size that plans such
 * steps on a shapes-only store. */
#include "models/train/session.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tensor/device.h"

void iabn_session_cfg_defaults(iabn_session_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->train = 1;
    c->batch = 1;
    c->channels = 3;
    c->height = c->width = 224;
    c->loss = IABN_LOSS_SOFTMAX_XENT;
    c->ignore_index = 255;
    c->keep_fraction = 1.f;
    c->bind = 1;
}

void iabn_session_free(iabn_session *s)
{
    iabn_exec_free(s->exec);
    iabn_plan_free(s->plan);
    iabn_graph_free(s->graph);
    if (s->own_store) iabn_store_free(s->store);
    memset(s, 0, sizeof *s);
    s->input = s->labels = s->logits = s->loss = s->input_grad = -1;
}

static void measure(iabn_session *s)
{
    iabn_session_mem *m = &s->mem;
    const iabn_plan *p = s->plan;
    iabn_graph *g = s->graph;
    memset(m, 0, sizeof *m);
    iabn_store_totals(s->store, &m->params, &m->param_bytes, &m->grad_bytes, &m->optim_bytes,
                      &m->buffer_bytes);
    m->arena = p->arena_bytes;
    m->lower_bound = p->lower_bound;
    m->saved = p->saved_bytes;
    m->io = p->io_bytes;
    m->naive = p->naive_bytes;
    m->copies = iabn_graph_copies(g);
    iabn_graph_layout_stats(g, &m->layouts);
    iabn_graph_winograd_count(g, &m->winograd, &m->winograd_possible);
    for (int k = 0; k < iabn_graph_nnodes(g); k++) {
        int sc = iabn_graph_n(g, k)->scratch;
        if (sc < 0) continue;
        size_t nb = iabn_graph_t(g, sc)->nbytes;
        m->scratch_sum += nb;
        if (nb > m->scratch_max) m->scratch_max = nb;
    }
    /* the trainer double-buffers its inputs where there is a copy stream */
    size_t in_bytes = iabn_graph_t(g, s->input)->nbytes;
    if (s->labels >= 0) in_bytes += iabn_graph_t(g, s->labels)->nbytes;
    m->staging = iabn_device_staging_bytes(iabn_store_backend(s->store), in_bytes);
    m->total = m->arena + m->io + m->staging + m->param_bytes + m->grad_bytes + m->optim_bytes +
               m->buffer_bytes;
    m->host = p->host_bytes;
}

static size_t host_limit(const iabn_session_cfg *c)
{
    return c->host_budget_bytes ? c->host_budget_bytes : iabn_host_available();
}

/* The storage strategy of the saved activations (before finalisation). */
static int apply_storage(const iabn_session_cfg *c, iabn_session *s, iabn_err *e)
{
    if (c->storage == IABN_STORAGE_KEEP) return 0;
    iabn_strategy_opts o;
    if (c->strategy) o = *c->strategy;
    else {
        memset(&o, 0, sizeof o);
        o.allow_offload = o.allow_recompute = 1;
        o.lookahead = 1;
    }
    if (c->budget_bytes) o.budget = c->budget_bytes;
    if (!o.host_budget) o.host_budget = host_limit(c);
    if (o.cost.flops_per_s <= 0 && c->storage != IABN_STORAGE_OFFLOAD) {
        int rc = iabn_cost_calibrate(&o.cost, iabn_store_backend(s->store)->kind, e);
        if (rc) return rc;
    }
    return iabn_graph_apply_storage(s->graph, c->storage, &o, &s->strategy, e);
}

/* The over-budget message, with the largest batch that would fit. */
static int over_budget(const iabn_session_cfg *c, const iabn_session *s, iabn_err *e)
{
    iabn_session_cfg q = *c;
    iabn_strategy_opts o;
    if (c->strategy) o = *c->strategy;
    else {
        memset(&o, 0, sizeof o);
        o.allow_offload = o.allow_recompute = 1;
        o.lookahead = 1;
    }
    o.budget = c->budget_bytes; /* what auto aims at, at every batch tried */
    q.strategy = &o;
    int best = 0;
    iabn_err qe = {0};
    int rc = iabn_session_largest(&q, IABN_SEARCH_BATCH, c->budget_bytes, &best, &qe);
    char tail[96] = "";
    if (!rc) snprintf(tail, sizeof tail, "; the largest batch that fits is %d", best);
    return iabn_err_set(e, IABN_ENOMEM, "the step needs %.1f MiB, the budget is %.1f MiB%s",
                        (double)s->mem.total / 1048576.0, (double)c->budget_bytes / 1048576.0,
                        tail);
}

static int per_pixel_labels(const iabn_session_cfg *c, const char *arch)
{
    if (c->labels != IABN_LABELS_AUTO) return c->labels == IABN_LABELS_PER_PIXEL;
    return arch && iabn_model_is_segmentation(arch);
}

/* The network from s->input to s->logits. */
static int build_net(const iabn_session_cfg *c, const iabn_model_cfg *mc, iabn_session *s,
                     iabn_err *e)
{
    iabn_graph *g = s->graph;
    int rc;
    if (mc) {
        rc = iabn_model_build(g, mc, s->input, &s->logits);
    } else {
        e->code = 0;
        rc = c->build(g, s->input, c->build_user, &s->logits, e);
        if (!rc && s->logits < 0 && iabn_graph_ok(g))
            return iabn_err_set(e, IABN_EINVAL, "the graph builder gave no output");
        if (rc && e->code) return rc;
    }
    if (iabn_graph_ok(g) && rc)
        return iabn_err_set(e, IABN_EINVAL, "building the network failed (code %d)", rc);
    if (!iabn_graph_ok(g)) {
        *e = *iabn_graph_error(g);
        return e->code;
    }
    return 0;
}

static int add_loss(const iabn_session_cfg *c, iabn_session *s, iabn_err *e)
{
    iabn_graph *g = s->graph;
    if (c->loss == IABN_LOSS_NONE) return 0;
    iabn_graph_begin_block(g, "loss");
    if (c->loss == IABN_LOSS_SOFTMAX_XENT) {
        /* the labels were declared before the network (see build) */
        s->loss = iabn_softmax_xent_smooth(g, "loss", s->logits, s->labels, c->ignore_index,
                                           c->keep_fraction, c->label_smoothing);
    } else {
        /* a regression target is shaped like the output */
        const iabn_tensor *y = iabn_graph_t(g, s->logits);
        int nd = y->nd, shape[IABN_MAX_DIMS];
        memcpy(shape, y->shape, sizeof shape);
        s->labels = iabn_graph_input(g, "target", IABN_F32, nd, shape);
        s->loss = c->loss == IABN_LOSS_L1 ? iabn_l1_loss(g, "loss", s->logits, s->labels)
                                          : iabn_mse_loss(g, "loss", s->logits, s->labels);
    }
    if (!iabn_graph_ok(g)) {
        *e = *iabn_graph_error(g);
        return e->code;
    }
    return 0;
}

static int check_cfg(const iabn_session_cfg *c, iabn_err *e)
{
    if (!c->model && !c->model_cfg && !c->build)
        return iabn_err_set(e, IABN_EINVAL, "a session needs a model name, a model config or "
                                            "a graph builder");
    if (c->batch < 1 || c->channels < 1 || c->height < 1 || c->width < 1)
        return iabn_err_set(e, IABN_EINVAL, "session input %dx%dx%dx%d: every size must be >= 1",
                            c->batch, c->channels, c->height, c->width);
    if (c->loss < IABN_LOSS_SOFTMAX_XENT || c->loss > IABN_LOSS_NONE)
        return iabn_err_set(e, IABN_EINVAL, "loss %d: not one of softmax_xent, l1, mse, none",
                            (int)c->loss);
    if (c->train && c->loss == IABN_LOSS_NONE)
        return iabn_err_set(e, IABN_EINVAL, "a training session needs a loss");
    if (c->input_grad && !c->train)
        return iabn_err_set(e, IABN_EINVAL, "the input's gradient needs a training session");
    if (iabn_comm_size(c->comm) > 1 && c->train && c->loss != IABN_LOSS_SOFTMAX_XENT)
        return iabn_err_set(e, IABN_EINVAL, "data-parallel training (%d ranks) normalises the "
                                            "softmax cross-entropy over the job; the L1 / MSE "
                                            "losses are per rank only",
                            iabn_comm_size(c->comm));
    if (c->model && !c->model_cfg && !c->build && !iabn_model_exists(c->model))
        return iabn_err_set(e, IABN_EINVAL, "unknown model '%s'", c->model);
    return 0;
}

int iabn_session_build(const iabn_session_cfg *c, iabn_session *s, iabn_err *e)
{
    memset(s, 0, sizeof *s);
    s->input = s->labels = s->logits = s->loss = s->input_grad = -1;
    int rc = check_cfg(c, e);
    if (rc) return rc;
    iabn_model_cfg mc;
    const iabn_model_cfg *mcp = NULL;
    if (!c->build) {
        mc = c->model_cfg ? *c->model_cfg : iabn_model_defaults(c->model);
        mcp = &mc;
    }
    s->batch = c->batch;
    s->height = c->height;
    s->width = c->width;
    if (c->store && !c->plan_only) {
        s->store = c->store;
    } else {
        const iabn_backend *be = c->store ? iabn_store_backend(c->store)
                                 : c->backend ? c->backend : iabn_backend_cpu();
        s->store = c->plan_only ? iabn_store_new_virtual(be, e) : iabn_store_new(be, e);
        if (!s->store) return e->code;
        s->own_store = 1;
    }
    s->graph = iabn_graph_new(s->store, c->train ? IABN_TRAIN : IABN_EVAL);
    if (!s->graph) {
        iabn_session_free(s);
        return iabn_err_set(e, IABN_ENOMEM, "out of memory building the graph");
    }
    iabn_graph *g = s->graph;
    iabn_graph_set_comm(g, c->comm);
    iabn_graph_set_layout_mode(g, c->layout_mode);
    iabn_graph_set_winograd(g, c->winograd);
    int xs[4] = {c->batch, c->channels, c->height, c->width};
    s->input = iabn_graph_input(g, "input", IABN_F32, 4, xs);
    if (c->input_grad) rc = iabn_graph_input_requires_grad(g, s->input, e);
    /* class labels come before the network, as the plans were always made */
    int per_pixel = per_pixel_labels(c, mcp ? mcp->arch : NULL);
    if (!rc && c->loss == IABN_LOSS_SOFTMAX_XENT) {
        /* per-pixel labels at the logits' size (a segmentation model may
         * upsample straight to another size: out_h, out_w) */
        int ls[3] = {c->batch, mcp && mcp->out_h > 0 ? mcp->out_h : c->height,
                     mcp && mcp->out_w > 0 ? mcp->out_w : c->width};
        s->labels = iabn_graph_input(g, "labels", IABN_I32, per_pixel ? 3 : 1, ls);
    }
    if (!rc) rc = build_net(c, mcp, s, e);
    if (!rc) rc = add_loss(c, s, e);
    if (!rc && c->keep_logits) iabn_graph_mark_output(g, s->logits);
    if (!rc && c->train) rc = iabn_graph_backward(g, s->loss, e);
    if (!rc && c->input_grad) s->input_grad = iabn_graph_input_grad(g, s->input);
    if (!rc && c->train) rc = apply_storage(c, s, e);
    if (!rc) rc = iabn_graph_finalize(g, e);
    if (!rc && c->train && c->grad_bucket_bytes > 0)
        rc = iabn_graph_grad_buckets(g, c->grad_bucket_bytes, e);
    if (!rc) rc = iabn_plan_build(g, NULL, &s->plan, e);
    if (!rc) {
        measure(s);
        s->mem.buckets = iabn_graph_nbuckets(g);
        for (int k = 0; k < s->mem.buckets; k++)
            s->mem.bucket_bytes += iabn_graph_bucket_bytes(g, k);
        /* refused here, before the executor allocates anything; Winograd's
         * auto mode may move the arena by a fraction of a per cent
         * (graph.h), so over the budget the session is built again without
         * it first */
        if (c->budget_bytes > 0 && s->mem.total > c->budget_bytes) {
            if (c->winograd == IABN_WINOGRAD_AUTO && s->mem.winograd > 0) {
                iabn_session_cfg q = *c;
                q.winograd = IABN_WINOGRAD_OFF;
                iabn_session_free(s);
                return iabn_session_build(&q, s, e);
            }
            rc = over_budget(c, s, e);
        }
        size_t host = host_limit(c);
        if (!rc && c->bind && !c->plan_only && s->mem.host > host)
            rc = iabn_err_set(e, IABN_ENOMEM,
                              "the offloaded activations need %.1f MiB of pinned host memory, "
                              "%.1f MiB %s",
                              (double)s->mem.host / 1048576.0, (double)host / 1048576.0,
                              c->host_budget_bytes ? "is the host budget"
                                                   : "is available on this machine");
    }
    if (!rc && c->bind && !c->plan_only) rc = iabn_exec_new(g, s->plan, &s->exec, e);
    if (rc) iabn_session_free(s);
    return rc;
}

static int need_exec(const iabn_session *s, iabn_err *e)
{
    return s->exec ? 0 : iabn_err_set(e, IABN_EINVAL, "the session is not bound to a device");
}

int iabn_session_set_inputs(iabn_session *s, const void *input, const void *labels, iabn_err *e)
{
    int rc = need_exec(s, e);
    if (!rc && input)
        rc = iabn_exec_set(s->exec, s->input, input, iabn_graph_t(s->graph, s->input)->nbytes, e);
    if (!rc && labels) {
        if (s->labels < 0) return iabn_err_set(e, IABN_EINVAL, "the session has no labels");
        rc = iabn_exec_set(s->exec, s->labels, labels, iabn_graph_t(s->graph, s->labels)->nbytes,
                           e);
    }
    return rc;
}

int iabn_session_run(iabn_session *s, iabn_err *e)
{
    int rc = need_exec(s, e);
    return rc ? rc : iabn_exec_run(s->exec, e);
}

int iabn_session_loss(const iabn_session *s, float *loss, iabn_err *e)
{
    if (s->loss < 0) return iabn_err_set(e, IABN_EINVAL, "the session has no loss");
    return iabn_session_get(s, s->loss, loss, sizeof *loss, e);
}

int iabn_session_get(const iabn_session *s, int t, void *host, size_t bytes, iabn_err *e)
{
    int rc = need_exec(s, e);
    return rc ? rc : iabn_exec_get(s->exec, t, host, bytes, e);
}

/* The step's bytes at value v of dim, planned without allocating. */
static int bytes_at(const iabn_session_cfg *c, iabn_session_dim dim, int v, size_t *bytes,
                    iabn_err *e)
{
    iabn_session_cfg p = *c;
    p.plan_only = 1;
    p.budget_bytes = 0;
    if (dim == IABN_SEARCH_BATCH) p.batch = v;
    else p.height = p.width = 8 * v;
    iabn_session s;
    int rc = iabn_session_build(&p, &s, e);
    /* the offloaded copies must fit in host memory too */
    if (!rc) *bytes = s.mem.host > host_limit(c) ? SIZE_MAX : s.mem.total;
    iabn_session_free(&s);
    if (rc && e->code == IABN_ENOMEM) { /* a tensor past IABN_MAX_ELEMS: does not fit */
        *bytes = SIZE_MAX;
        rc = 0;
    }
    return rc;
}

int iabn_session_largest(const iabn_session_cfg *c, iabn_session_dim dim, size_t budget,
                         int *out, iabn_err *e)
{
    int cap = dim == IABN_SEARCH_BATCH ? 65536 : 1024;
    int unit = dim == IABN_SEARCH_BATCH ? 1 : 8;
    size_t b;
    int lo = 0, hi = 1;
    /* grow until it does not fit, then bisect */
    for (;;) {
        int rc = bytes_at(c, dim, hi, &b, e);
        if (rc == IABN_EINVAL && hi < 4) {
            hi *= 2;
            continue;
        }
        if (rc) return rc;
        if (b > budget) break;
        lo = hi;
        if (hi >= cap) break;
        hi *= 2;
    }
    if (lo == 0) {
        *out = 0;
        return 0;
    }
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        int rc = bytes_at(c, dim, mid, &b, e);
        if (rc) return rc;
        if (b <= budget) lo = mid;
        else hi = mid;
    }
    *out = unit * lo;
    return 0;
}
