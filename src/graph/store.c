/* store.c: the persistent tensors of a model (parameters, their gradients,
 * optimizer state, running statistics), by name, on one backend.  Graphs of
 * the same model (training, evaluation, other input sizes) share one store. */
#include "graph/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct iabn_store {
    const iabn_backend *be;
    int virtual_only; /* shapes only: planning and reports allocate nothing */
    iabn_param *p;
    int np, cap;
};

iabn_store *iabn_store_new(const iabn_backend *be, iabn_err *e)
{
    iabn_store *s = calloc(1, sizeof *s);
    if (!s) {
        iabn_err_set(e, IABN_ENOMEM, "out of memory creating the parameter store");
        return NULL;
    }
    s->be = be;
    return s;
}

void iabn_store_free(iabn_store *s)
{
    if (!s) return;
    for (int i = 0; i < s->np; i++) {
        if (s->p[i].data) s->be->free(s->be->ctx, s->p[i].data);
        if (s->p[i].grad) s->be->free(s->be->ctx, s->p[i].grad);
        if (s->p[i].mom) s->be->free(s->be->ctx, s->p[i].mom);
    }
    free(s->p);
    free(s);
}

iabn_store *iabn_store_new_virtual(const iabn_backend *be, iabn_err *e)
{
    iabn_store *s = iabn_store_new(be, e);
    if (s) s->virtual_only = 1;
    return s;
}

int iabn_store_is_virtual(const iabn_store *s) { return s->virtual_only; }

const iabn_backend *iabn_store_backend(const iabn_store *s) { return s->be; }
int iabn_store_count(const iabn_store *s) { return s->np; }
iabn_param *iabn_store_get(iabn_store *s, int id) { return &s->p[id]; }

int iabn_store_find(const iabn_store *s, const char *name)
{
    for (int i = 0; i < s->np; i++)
        if (strcmp(s->p[i].name, name) == 0) return i;
    return -1;
}

static void shape_str(char *buf, size_t n, int nd, const int *shape)
{
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ", %d" : "%d", shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static float *zalloc(const iabn_backend *be, size_t count)
{
    float *p = be->alloc(be->ctx, count * sizeof(float));
    if (p && be->fill(be->ctx, p, 0, count * sizeof(float))) {
        be->free(be->ctx, p);
        return NULL;
    }
    return p;
}

int iabn_store_param(iabn_store *s, const char *name, iabn_pkind kind, int nd,
                     const int *shape, int *id, iabn_err *e)
{
    int i = iabn_store_find(s, name);
    if (i >= 0) {
        iabn_param *p = &s->p[i];
        int same = p->nd == nd;
        for (int d = 0; same && d < nd; d++) same = p->shape[d] == shape[d];
        if (!same) {
            char a[64], b[64];
            shape_str(a, sizeof a, p->nd, p->shape);
            shape_str(b, sizeof b, nd, shape);
            return iabn_err_set(e, IABN_EINVAL, "parameter %s exists with shape %s, asked %s",
                                name, a, b);
        }
        *id = i;
        return 0;
    }
    if (nd < 1 || nd > IABN_MAX_DIMS)
        return iabn_err_set(e, IABN_EINVAL, "parameter %s: %d dimensions (1..4 allowed)", name, nd);
    double need = sizeof(float);
    for (int d = 0; d < nd; d++) {
        if (shape[d] <= 0)
            return iabn_err_set(e, IABN_EINVAL, "parameter %s: dimension %d is %d", name, d,
                                shape[d]);
        need *= (double)shape[d];
    }
    /* doubles are exact to 2^53: well past the limit */
    if (need > (double)IABN_MAX_ELEMS * sizeof(float))
        return iabn_err_set(e, IABN_ENOMEM,
                            "parameter %s does not fit: needs %.0f bytes; one tensor holds at "
                            "most %zu elements",
                            name, need, (size_t)IABN_MAX_ELEMS);
    if (s->np == s->cap) {
        int nc = s->cap ? s->cap * 2 : 64;
        iabn_param *q = realloc(s->p, (size_t)nc * sizeof *q);
        if (!q) return iabn_err_set(e, IABN_ENOMEM, "out of memory adding parameter %s", name);
        s->p = q;
        s->cap = nc;
    }
    iabn_param *p = &s->p[s->np];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->kind = kind;
    p->nd = nd;
    p->count = 1;
    for (int d = 0; d < nd; d++) {
        p->shape[d] = shape[d];
        p->count *= (size_t)shape[d];
    }
    if (s->virtual_only) {
        *id = s->np++;
        return 0;
    }
    p->data = zalloc(s->be, p->count);
    if (kind != IABN_P_BUFFER) p->grad = zalloc(s->be, p->count);
    if (!p->data || (kind != IABN_P_BUFFER && !p->grad)) {
        if (p->data) s->be->free(s->be->ctx, p->data);
        if (p->grad) s->be->free(s->be->ctx, p->grad);
        return iabn_err_set(e, IABN_ENOMEM, "out of memory allocating parameter %s (%zu floats)",
                            name, p->count);
    }
    *id = s->np++;
    return 0;
}

void iabn_store_totals(const iabn_store *s, size_t *params, size_t *param_bytes,
                       size_t *grad_bytes, size_t *opt_bytes, size_t *buffer_bytes)
{
    size_t np = 0, buf = 0;
    for (int i = 0; i < s->np; i++) {
        if (s->p[i].kind == IABN_P_BUFFER) buf += s->p[i].count;
        else np += s->p[i].count;
    }
    if (params) *params = np;
    if (param_bytes) *param_bytes = np * sizeof(float);
    if (grad_bytes) *grad_bytes = np * sizeof(float);
    if (opt_bytes) *opt_bytes = np * sizeof(float); /* one momentum buffer per parameter */
    if (buffer_bytes) *buffer_bytes = buf * sizeof(float);
}

int iabn_store_zero_grads(iabn_store *s, iabn_err *e)
{
    for (int i = 0; i < s->np; i++)
        if (s->p[i].grad && s->be->fill(s->be->ctx, s->p[i].grad, 0, s->p[i].count * sizeof(float)))
            return iabn_err_set(e, IABN_EDEVICE, "zeroing gradient of %s failed", s->p[i].name);
    return 0;
}

int iabn_store_read(iabn_store *s, int id, float *host, iabn_err *e)
{
    const iabn_param *p = &s->p[id];
    if (s->be->d2h(s->be->ctx, host, p->data, p->count * sizeof(float)))
        return iabn_err_set(e, IABN_EDEVICE, "reading %s from the device failed", p->name);
    return 0;
}

int iabn_store_write(iabn_store *s, int id, const float *host, iabn_err *e)
{
    const iabn_param *p = &s->p[id];
    if (s->be->h2d(s->be->ctx, p->data, host, p->count * sizeof(float)))
        return iabn_err_set(e, IABN_EDEVICE, "writing %s to the device failed", p->name);
    return 0;
}

int iabn_store_read_grad(iabn_store *s, int id, float *host, iabn_err *e)
{
    const iabn_param *p = &s->p[id];
    if (!p->grad) return iabn_err_set(e, IABN_EINVAL, "%s has no gradient", p->name);
    if (s->be->d2h(s->be->ctx, host, p->grad, p->count * sizeof(float)))
        return iabn_err_set(e, IABN_EDEVICE, "reading grad of %s failed", p->name);
    return 0;
}
