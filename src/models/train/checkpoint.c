/* checkpoint.c: see checkpoint.h. */
#include "models/train/checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int iabn_ckpt_save(iabn_store *s, const char *path, const iabn_ckpt_pos *pos,
                   const char *config_json, iabn_err *e)
{
    iabn_st_writer *w = iabn_st_writer_new();
    if (!w) return iabn_err_set(e, IABN_ENOMEM, "out of memory writing %s", path);
    int rc = 0;
    size_t cap = 0;
    float *host = NULL;
    for (int i = 0; i < iabn_store_count(s) && !rc; i++) {
        iabn_param *p = iabn_store_get(s, i);
        if (p->count > cap) {
            free(host);
            cap = p->count;
            host = malloc(cap * sizeof(float));
            if (!host) {
                rc = iabn_err_set(e, IABN_ENOMEM, "out of memory writing %s", path);
                break;
            }
        }
        int64_t shape[IABN_MAX_DIMS];
        for (int d = 0; d < p->nd; d++) shape[d] = p->shape[d];
        rc = iabn_store_read(s, i, host, e);
        if (!rc) rc = iabn_st_writer_add(w, p->name, IABN_F32, p->nd, shape, host, e);
        if (!rc && p->mom) {
            const iabn_backend *be = iabn_store_backend(s);
            char name[IABN_NAME_LEN + 32];
            snprintf(name, sizeof name, "optimizer.momentum.%s", p->name);
            if (be->d2h(be->ctx, host, p->mom, p->count * sizeof(float)))
                rc = iabn_err_set(e, IABN_EDEVICE, "reading momentum of %s failed", p->name);
            else
                rc = iabn_st_writer_add(w, name, IABN_F32, p->nd, shape, host, e);
        }
    }
    free(host);
    char buf[64];
#define META(k, fmt, v)                                              \
    if (!rc) {                                                       \
        snprintf(buf, sizeof buf, fmt, v);                           \
        rc = iabn_st_writer_meta(w, k, buf, e);                      \
    }
    META("format", "%s", "iabn-checkpoint-1");
    META("epoch", "%lld", pos->epoch);
    META("step_in_epoch", "%lld", pos->step_in_epoch);
    META("global_step", "%lld", pos->global_step);
    META("runs", "%lld", pos->runs);
    META("best", "%.17g", pos->best);
    META("best_epoch", "%lld", pos->best_epoch);
    META("world_size", "%lld", pos->world_size > 0 ? pos->world_size : 1);
    META("global_batch", "%lld", pos->global_batch);
#undef META
    if (!rc && config_json) rc = iabn_st_writer_meta(w, "config", config_json, e);
    if (!rc) rc = iabn_st_writer_save(w, path, e);
    iabn_st_writer_free(w);
    return rc;
}

static long long meta_ll(const iabn_st_file *f, const char *k)
{
    const char *v = iabn_st_meta(f, k);
    return v ? atoll(v) : 0;
}

int iabn_ckpt_load(iabn_store *s, const char *path, int optimizer, iabn_ckpt_pos *pos,
                   iabn_err *e)
{
    iabn_st_file *f = NULL;
    int rc = iabn_st_load(path, &f, e);
    if (rc) return rc;
    /* check everything before writing anything */
    for (int i = 0; i < iabn_store_count(s) && !rc; i++) {
        const iabn_param *p = iabn_store_get(s, i);
        const iabn_st_tensor *t = iabn_st_find(f, p->name);
        if (!t) {
            rc = iabn_err_set(e, IABN_EFORMAT, "%s has no tensor %s (wrong model or config?)",
                              path, p->name);
            break;
        }
        int same = t->ndim == p->nd;
        for (int d = 0; same && d < p->nd; d++) same = t->shape[d] == p->shape[d];
        if (!same)
            rc = iabn_err_set(e, IABN_EFORMAT, "%s: tensor %s has another shape than the model's",
                              path, p->name);
    }
    float *host = NULL;
    for (int i = 0; i < iabn_store_count(s) && !rc; i++) {
        iabn_param *p = iabn_store_get(s, i);
        free(host);
        host = malloc(p->count * sizeof(float));
        if (!host) {
            rc = iabn_err_set(e, IABN_ENOMEM, "out of memory loading %s", path);
            break;
        }
        rc = iabn_st_read_f32(iabn_st_find(f, p->name), host, p->count, e);
        if (!rc) rc = iabn_store_write(s, i, host, e);
        if (rc || !optimizer) continue;
        char name[IABN_NAME_LEN + 32];
        snprintf(name, sizeof name, "optimizer.momentum.%s", p->name);
        const iabn_st_tensor *m = iabn_st_find(f, name);
        if (!m) continue;
        const iabn_backend *be = iabn_store_backend(s);
        if (!p->mom) p->mom = be->alloc(be->ctx, p->count * sizeof(float));
        if (!p->mom) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory for momentum of %s", p->name);
        if (!rc) rc = iabn_st_read_f32(m, host, p->count, e);
        if (!rc && be->h2d(be->ctx, p->mom, host, p->count * sizeof(float)))
            rc = iabn_err_set(e, IABN_EDEVICE, "writing momentum of %s failed", p->name);
    }
    free(host);
    if (!rc && pos) {
        memset(pos, 0, sizeof *pos);
        pos->epoch = meta_ll(f, "epoch");
        pos->step_in_epoch = meta_ll(f, "step_in_epoch");
        pos->global_step = meta_ll(f, "global_step");
        pos->runs = meta_ll(f, "runs");
        const char *b = iabn_st_meta(f, "best");
        pos->best = b ? atof(b) : 0;
        pos->best_epoch = meta_ll(f, "best_epoch");
        pos->world_size = meta_ll(f, "world_size");
        pos->global_batch = meta_ll(f, "global_batch");
    }
    iabn_st_free(f);
    return rc;
}
