/* optim.c: SGD over a store's trainable parameters, on the store's backend.
 *
 * One step: gradients scaled (1 / micro-batches), the global L2 norm taken
 * and clipped, then the PyTorch SGD update (momentum, Nesterov, weight
 * decay) per parameter with the learning rate of its lr_group.  The
 * array operations are the backend's kernels (scale, sumsq, sgd_update,
 * which also zeroes each gradient it reads, for the next step),
 * whose per-element formula is math/optim.h on every backend, so all take
 * the same step up to the order of the norm's sum. */
#include "graph/graph.h"

#include <math.h>
#include <stdlib.h>

static int trainable(const iabn_param *p) { return p->grad && !p->frozen; }

/* The squared norms of every trainable gradient, in store order, in one
 * call: on a device each answer is a round trip, and one per parameter
 * (over 300 in ResNeXt-101) was 7.5 ms of a 123 ms GPU step. */
static int grad_sumsq(iabn_store *s, const iabn_backend *be, double *sq, iabn_err *e)
{
    size_t cap = iabn_store_count(s) ? (size_t)iabn_store_count(s) : 1;
    const float **x = malloc(cap * sizeof *x);
    size_t *count = malloc(cap * sizeof *count);
    double *q = malloc(cap * sizeof *q);
    int n = 0, rc = 0;
    if (!x || !count || !q)
        rc = iabn_err_set(e, IABN_ENOMEM, "out of memory for the gradient norm's %zu arrays", cap);
    for (int i = 0; i < iabn_store_count(s) && !rc; i++) {
        iabn_param *p = iabn_store_get(s, i);
        if (trainable(p)) x[n] = p->grad, count[n++] = p->count;
    }
    if (!rc && n) rc = be->k->sumsq(be->ctx, n, x, count, q, e);
    *sq = 0;
    /* always: a NaN or Inf gradient must not reach the weights; the j-th
     * answer is the j-th trainable parameter's */
    for (int i = 0, j = 0; i < iabn_store_count(s) && !rc; i++) {
        iabn_param *p = iabn_store_get(s, i);
        if (!trainable(p)) continue;
        if (!isfinite(q[j]))
            rc = iabn_err_set(e, IABN_ENUM, "the gradient of %s is not finite: no update made",
                              p->name);
        *sq += q[j++];
    }
    free(x), free(count), free(q);
    return rc;
}

int iabn_store_sgd_step(iabn_store *s, const iabn_sgd_opts *o, double *grad_norm, iabn_err *e)
{
    const iabn_backend *be = iabn_store_backend(s);
    if (iabn_store_is_virtual(s))
        return iabn_err_set(e, IABN_EINVAL, "an SGD step needs a real store, not a planning one");
    int rc = 0;
    for (int i = 0; i < iabn_store_count(s) && !rc && o->grad_scale != 1.f; i++) {
        iabn_param *p = iabn_store_get(s, i);
        if (trainable(p)) rc = be->k->scale(be->ctx, p->count, o->grad_scale, p->grad, e);
    }
    double sq = 0;
    if (!rc) rc = grad_sumsq(s, be, &sq, e);
    if (rc) return rc;
    double norm = sqrt(sq);
    if (grad_norm) *grad_norm = norm;
    float clip_scale = 1.f;
    if (o->clip > 0 && norm > o->clip) clip_scale = (float)(o->clip / (norm + 1e-6));
    for (int i = 0; i < iabn_store_count(s) && !rc; i++) {
        iabn_param *p = iabn_store_get(s, i);
        if (!p->grad) continue;
        if (p->frozen) { /* no update consumes it: zeroed here for the next step */
            if (be->fill(be->ctx, p->grad, 0, p->count * sizeof(float)))
                rc = iabn_err_set(e, IABN_EDEVICE, "zeroing the gradient of %s failed", p->name);
            continue;
        }
        if (clip_scale != 1.f && (rc = be->k->scale(be->ctx, p->count, clip_scale, p->grad, e))) break;
        int first = p->mom == NULL;
        if (first && !(p->mom = be->alloc(be->ctx, p->count * sizeof(float))))
            return iabn_err_set(e, IABN_ENOMEM, "out of memory for the momentum of %s (%zu bytes)",
                                p->name, p->count * sizeof(float));
        float lr = o->lr[p->lr_group == 1 ? 1 : 0];
        rc = be->k->sgd_update(be->ctx, p->count, lr, o->momentum, o->weight_decay, o->nesterov,
                               first, p->data, p->grad, p->mom, e);
        if (rc) iabn_err_prefix(e, "SGD update of %s: ", p->name);
    }
    return rc;
}
