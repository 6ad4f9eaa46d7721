/* train_graphs.c: the trainer's steps.  Each is a session (session.h): one
 * model graph (training with its loss, or evaluation) for one batch size and
 * input size, planned and bound; memory_for() plans without binding, which
 * is how the trainer finds the micro-batch that fits and the largest batch
 * that would. */
#include "models/train/train_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The session description of the trainer's step (store and shapes aside). */
static void step_cfg(const trainer *tr, int train, int n, int h, int w, iabn_session_cfg *c)
{
    iabn_session_cfg_defaults(c);
    c->model_cfg = &tr->mcfg;
    c->train = train;
    c->batch = n;
    c->height = h;
    c->width = w;
    c->labels = tr->task == IABN_TASK_SEGMENT ? IABN_LABELS_PER_PIXEL : IABN_LABELS_PER_IMAGE;
    c->ignore_index = IABN_IGNORE_LABEL;
    c->keep_fraction = tr->task == IABN_TASK_SEGMENT && train ? tr->cfg.bootstrap : 1.f;
    /* label smoothing shapes the training loss only; evaluation reports the plain one */
    c->label_smoothing = train ? tr->cfg.label_smoothing : 0.f;
    c->keep_logits = !train || tr->task == IABN_TASK_CLASSIFY;
    c->storage = tr->storage;
    c->strategy = &tr->sopts;
    c->layout_mode = tr->cfg.layout;
    c->winograd = tr->cfg.winograd;
    /* data parallel: only the training step talks to the other ranks (the
     * evaluation of a shard runs alone; its counts are summed at the end) */
    if (train && tr->world > 1) {
        c->comm = tr->comm;
        c->grad_bucket_bytes = IABN_BUCKET_BYTES_DEFAULT;
    }
}

int gset_build(trainer *tr, int train, int n, int h, int w, int bind, iabn_session *gs,
               iabn_err *e)
{
    iabn_session_cfg c;
    step_cfg(tr, train, n, h, w, &c);
    c.store = tr->s;
    c.bind = bind;
    return iabn_session_build(&c, gs, e);
}

void trainer_say(const trainer *tr, const char *fmt, ...)
{
    if (!tr->log || tr->rank > 0) return; /* rank 0 reports for the job */
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    tr->log(tr->user, line);
}

void trainer_model_cfg(trainer *tr)
{
    tr->mcfg = iabn_model_defaults(tr->cfg.arch);
    tr->mcfg.classes = tr->classes;
    tr->mcfg.bn = tr->cfg.bn_mode;
    tr->mcfg.act = tr->cfg.act;
    tr->mcfg.input_3x3 = tr->cfg.input_3x3;
    tr->mcfg.dilation = tr->cfg.dilation > 1;
    if (tr->pool_set) {
        tr->mcfg.pool_h = tr->pool_h;
        tr->mcfg.pool_w = tr->pool_w;
    }
}

int trainer_load_weights(trainer *tr, const char *ckpt, int side, iabn_err *e)
{
    trainer_model_cfg(tr);
    tr->s = iabn_store_new(tr->dev.be, e);
    if (!tr->s) return e->code;
    /* a throwaway graph creates the store's tensors for the checkpoint to fill */
    iabn_session probe;
    int rc = gset_build(tr, 0, 1, side, side, 0, &probe, e);
    iabn_session_free(&probe);
    return rc ? rc : iabn_ckpt_load(tr->s, ckpt, 0, NULL, e);
}

int gset_fetch(iabn_session *gs, int t, float **buf, size_t *cap, iabn_err *e)
{
    size_t nb = iabn_graph_t(gs->graph, t)->nbytes;
    if (nb > *cap) {
        float *p = realloc(*buf, nb);
        if (!p) return iabn_err_set(e, IABN_ENOMEM, "out of memory for %zu bytes of %s", nb,
                                    iabn_graph_t(gs->graph, t)->name);
        *buf = p;
        *cap = nb;
    }
    return iabn_exec_get(gs->exec, t, *buf, nb, e);
}

/* The bytes of the training step at batch n, planned on a shapes-only store:
 * nothing is allocated to measure. */
int memory_for(trainer *tr, int n, size_t *bytes, iabn_err *e)
{
    iabn_session_cfg c;
    step_cfg(tr, 1, n, tr->in_h, tr->in_w, &c);
    c.backend = iabn_store_backend(tr->s);
    c.plan_only = 1;
    iabn_session gs;
    int rc = iabn_session_build(&c, &gs, e);
    if (!rc) *bytes = gs.mem.total;
    iabn_session_free(&gs);
    return rc;
}

int choose_micro_batches(trainer *tr, iabn_err *e)
{
    size_t budget = tr->o->budget_bytes > 0 ? (size_t)tr->o->budget_bytes
                                            : iabn_device_available(&tr->dev);
    int b = tr->batch;
    for (int k = 1; k <= b; k++) {
        if (b % k) continue;
        size_t need;
        int rc = memory_for(tr, b / k, &need, e);
        if (rc == IABN_EINVAL && k > 1) break; /* micro-batches this small are impossible */
        if (rc) return rc;
        if (need <= budget) {
            tr->micro = b / k;
            tr->nmicro = k;
            tr->need_bytes = need;
            return 0;
        }
        if (k == 1) tr->need_bytes = need;
        if (tr->o->no_accumulate) break;
    }
    int fit = 0;
    iabn_session_cfg c;
    step_cfg(tr, 1, b, tr->in_h, tr->in_w, &c);
    c.backend = iabn_store_backend(tr->s);
    int rc = iabn_session_largest(&c, IABN_SEARCH_BATCH, budget, &fit, e);
    if (rc) return rc;
    return iabn_err_set(e, IABN_ENOMEM,
                        "the training step of %s at batch %d (%dx%d) needs %.1f MiB, %.1f MiB "
                        "available on %s%s; the largest batch that fits is %d",
                        tr->cfg.arch, b, tr->in_h, tr->in_w, (double)tr->need_bytes / 1048576.0,
                        (double)budget / 1048576.0, tr->dev.name,
                        tr->o->no_accumulate ? " (micro-batching disabled)" : "", fit);
}
