/* train_graphs.c: the trainer's graphs.  A graph set is one model graph
 * (training with its loss, or evaluation) for one batch size and input size,
 * planned and bound; memory_for() plans without binding, which is how the
 * trainer finds the micro-batch that fits and the largest batch that would. */
#include "models/train/train_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gset_free(gset *gs)
{
    iabn_exec_free(gs->ex);
    iabn_plan_free(gs->p);
    iabn_graph_free(gs->g);
    memset(gs, 0, sizeof *gs);
}

int gset_build(trainer *tr, int train, int n, int h, int w, int bind, gset *gs, iabn_err *e)
{
    memset(gs, 0, sizeof *gs);
    gs->n = n;
    gs->h = h;
    gs->w = w;
    gs->oh = tr->mcfg.out_h;
    gs->ow = tr->mcfg.out_w;
    gs->g = iabn_graph_new(tr->s, train ? IABN_TRAIN : IABN_EVAL);
    if (!gs->g) return iabn_err_set(e, IABN_ENOMEM, "out of memory building the graph");
    iabn_graph *g = gs->g;
    int xs[4] = {n, 3, h, w};
    gs->x = iabn_graph_input(g, "input", IABN_F32, 4, xs);
    if (tr->task == IABN_TASK_SEGMENT) {
        int ls[3] = {n, gs->oh > 0 ? gs->oh : h, gs->ow > 0 ? gs->ow : w};
        gs->labels = iabn_graph_input(g, "labels", IABN_I32, 3, ls);
    } else {
        int ls[1] = {n};
        gs->labels = iabn_graph_input(g, "labels", IABN_I32, 1, ls);
    }
    int rc = iabn_model_build(g, &tr->mcfg, gs->x, &gs->logits);
    if (rc) {
        *e = *iabn_graph_error(g);
        return rc;
    }
    float frac = tr->task == IABN_TASK_SEGMENT && train ? tr->cfg.bootstrap : 1.f;
    iabn_graph_begin_block(g, "loss");
    gs->loss = iabn_softmax_xent(g, "loss", gs->logits, gs->labels, IABN_IGNORE_LABEL, frac);
    if (!train || tr->task == IABN_TASK_CLASSIFY) iabn_graph_mark_output(g, gs->logits);
    if (!iabn_graph_ok(g)) {
        *e = *iabn_graph_error(g);
        return e->code;
    }
    if (train && (rc = iabn_graph_backward(g, gs->loss, e))) return rc;
    if ((rc = iabn_graph_finalize(g, e))) return rc;
    if ((rc = iabn_plan_build(g, NULL, &gs->p, e))) return rc;
    if (bind && (rc = iabn_exec_new(g, gs->p, &gs->ex, e))) return rc;
    return 0;
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
    gset probe;
    int rc = gset_build(tr, 0, 1, side, side, 0, &probe, e);
    gset_free(&probe);
    return rc ? rc : iabn_ckpt_load(tr->s, ckpt, 0, NULL, e);
}

size_t gset_bytes(const trainer *tr, const gset *gs)
{
    size_t params, pb, gb, ob, bb;
    iabn_store_totals(tr->s, &params, &pb, &gb, &ob, &bb);
    size_t staging = iabn_device_staging_bytes(
        iabn_store_backend(tr->s),
        iabn_graph_t(gs->g, gs->x)->nbytes + iabn_graph_t(gs->g, gs->labels)->nbytes);
    return gs->p->arena_bytes + gs->p->io_bytes + staging + pb + gb + ob + bb;
}

int gset_fetch(gset *gs, int t, float **buf, size_t *cap, iabn_err *e)
{
    size_t nb = iabn_graph_t(gs->g, t)->nbytes;
    if (nb > *cap) {
        float *p = realloc(*buf, nb);
        if (!p) return iabn_err_set(e, IABN_ENOMEM, "out of memory for %zu bytes of %s", nb,
                                    iabn_graph_t(gs->g, t)->name);
        *buf = p;
        *cap = nb;
    }
    return iabn_exec_get(gs->ex, t, *buf, nb, e);
}

int memory_for(trainer *tr, int n, size_t *bytes, iabn_err *e)
{
    /* plan on a shapes-only store: nothing is allocated to measure */
    trainer probe = *tr;
    probe.s = iabn_store_new_virtual(iabn_store_backend(tr->s), e);
    if (!probe.s) return e->code;
    gset gs;
    int rc = gset_build(&probe, 1, n, tr->in_h, tr->in_w, 0, &gs, e);
    if (!rc) *bytes = gset_bytes(&probe, &gs);
    gset_free(&gs);
    iabn_store_free(probe.s);
    return rc;
}

int largest_fitting_batch(trainer *tr, size_t budget, int *out, iabn_err *e)
{
    size_t b;
    int lo = 0, hi = 1;
    /* grow until it does not fit, then bisect; a batch too small for the
     * model (BN over one value per channel) counts as not fitting */
    for (;;) {
        int rc = memory_for(tr, hi, &b, e);
        if (rc == IABN_EINVAL && hi < 4) {
            hi *= 2;
            continue;
        }
        if (rc) return rc;
        if (b > budget) break;
        lo = hi;
        if (hi >= 65536) break;
        hi *= 2;
    }
    if (lo == 0) {
        *out = 0;
        return 0;
    }
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        int rc = memory_for(tr, mid, &b, e);
        if (rc) return rc;
        if (b <= budget) lo = mid;
        else hi = mid;
    }
    *out = lo;
    return 0;
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
    int rc = largest_fitting_batch(tr, budget, &fit, e);
    if (rc) return rc;
    return iabn_err_set(e, IABN_ENOMEM,
                        "the training step of %s at batch %d (%dx%d) needs %.1f MiB, %.1f MiB "
                        "available on %s%s; the largest batch that fits is %d",
                        tr->cfg.arch, b, tr->in_h, tr->in_w, (double)tr->need_bytes / 1048576.0,
                        (double)budget / 1048576.0, tr->dev.name,
                        tr->o->no_accumulate ? " (micro-batching disabled)" : "", fit);
}
