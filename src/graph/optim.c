/* optim.c: SGD over a store's trainable parameters, on the store's backend.
 *
 * One step: gradients scaled (1 / micro-batches), the global L2 norm taken
 * and clipped, then the PyTorch SGD update (momentum, Nesterov, weight
 * decay) per parameter with the learning rate of its lr_group.  The
 * per-element formulas are the shared ones of the CPU and CUDA kernels
 * (iabn_sgd_update / iabn_cuda_sgd_update), so both backends take the same
 * step up to the order of the norm's sum. */
#include "graph/graph.h"
#include "iabn_config.h"

#include <math.h>

#if IABN_HAVE_CUDA
#include "tensor/cuda/kernels.h"
#endif

/* The three array operations of a step, on the parameter's backend. */
static int dev_scale(const iabn_backend *be, iabn_param *p, float s, iabn_err *e)
{
#if IABN_HAVE_CUDA
    if (be->kind == IABN_DEV_CUDA)
        return iabn_cuda_scale((iabn_cuda_ctx *)be->ctx, p->count, s, p->grad, e);
#endif
    (void)be;
    (void)e;
    iabn_scale(p->count, s, p->grad);
    return 0;
}

static int dev_sumsq(const iabn_backend *be, const iabn_param *p, double *out, iabn_err *e)
{
#if IABN_HAVE_CUDA
    if (be->kind == IABN_DEV_CUDA)
        return iabn_cuda_sumsq((iabn_cuda_ctx *)be->ctx, p->count, p->grad, out, e);
#endif
    (void)be;
    (void)e;
    *out = iabn_sumsq(p->count, p->grad);
    return 0;
}

static int dev_update(const iabn_backend *be, iabn_param *p, float lr, const iabn_sgd_opts *o,
                      int first, iabn_err *e)
{
#if IABN_HAVE_CUDA
    if (be->kind == IABN_DEV_CUDA)
        return iabn_cuda_sgd_update((iabn_cuda_ctx *)be->ctx, p->count, lr, o->momentum,
                                    o->weight_decay, o->nesterov, first, p->data, p->grad, p->mom,
                                    e);
#endif
    (void)be;
    (void)e;
    iabn_sgd_update(p->count, lr, o->momentum, o->weight_decay, o->nesterov, first, p->data,
                    p->grad, p->mom);
    return 0;
}

static int trainable(const iabn_param *p) { return p->grad && !p->frozen; }

int iabn_store_sgd_step(iabn_store *s, const iabn_sgd_opts *o, double *grad_norm, iabn_err *e)
{
    const iabn_backend *be = iabn_store_backend(s);
    if (iabn_store_is_virtual(s))
        return iabn_err_set(e, IABN_EINVAL, "an SGD step needs a real store, not a planning one");
    int rc = 0;
    double sq = 0;
    for (int i = 0; i < iabn_store_count(s) && !rc; i++) {
        iabn_param *p = iabn_store_get(s, i);
        if (!trainable(p)) continue;
        if (o->grad_scale != 1.f) rc = dev_scale(be, p, o->grad_scale, e);
        double q = 0;
        if (!rc && (o->clip > 0 || grad_norm)) rc = dev_sumsq(be, p, &q, e);
        sq += q;
    }
    if (rc) return rc;
    double norm = sqrt(sq);
    if (grad_norm) *grad_norm = norm;
    float clip_scale = 1.f;
    if (o->clip > 0 && norm > o->clip) clip_scale = (float)(o->clip / (norm + 1e-6));
    for (int i = 0; i < iabn_store_count(s) && !rc; i++) {
        iabn_param *p = iabn_store_get(s, i);
        if (!trainable(p)) continue;
        if (clip_scale != 1.f && (rc = dev_scale(be, p, clip_scale, e))) break;
        int first = p->mom == NULL;
        if (first && !(p->mom = be->alloc(be->ctx, p->count * sizeof(float))))
            return iabn_err_set(e, IABN_ENOMEM, "out of memory for the momentum of %s (%zu bytes)",
                                p->name, p->count * sizeof(float));
        float lr = o->lr[p->lr_group == 1 ? 1 : 0];
        rc = dev_update(be, p, lr, o, first, e);
        if (rc) iabn_err_prefix(e, "SGD update of %s: ", p->name);
    }
    return rc ? rc : iabn_store_zero_grads(s, e);
}
