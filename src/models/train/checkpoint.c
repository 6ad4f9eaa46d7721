/* checkpoint.c: see checkpoint.h. */
#include "models/train/checkpoint.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers/layers.h"

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
        /* a NaN or Inf state is never saved: the last good checkpoint stays */
        if (!rc && !iabn_all_finite(p->count, host))
            rc = iabn_err_set(e, IABN_ENUM, "%s holds NaN or Inf: %s not written", p->name, path);
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
    META("train_images", "%lld", pos->train_images);
    META("val_pending", "%lld", pos->val_pending);
#undef META
    if (!rc) rc = iabn_bn_gamma_write_meta(s, w, e);
    if (!rc && config_json) rc = iabn_st_writer_meta(w, "config", config_json, e);
    if (!rc) rc = iabn_st_writer_save(w, path, e);
    iabn_st_writer_free(w);
    return rc;
}

/* A position field: absent is 0; otherwise a whole integer >= lo. */
static int meta_ll(const iabn_st_file *f, const char *k, long long lo, long long *out,
                   iabn_err *e)
{
    const char *v = iabn_st_meta(f, k);
    *out = 0;
    if (!v) return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno || x < lo)
        return iabn_err_set(e, IABN_EFORMAT, "%s: metadata %s is '%.32s', not a count",
                            iabn_st_path(f), k, v);
    *out = x;
    return 0;
}

/* The training position, checked before anything is loaded. */
static int read_pos(const iabn_st_file *f, iabn_ckpt_pos *pos, iabn_err *e)
{
    memset(pos, 0, sizeof *pos);
    int rc = meta_ll(f, "epoch", 0, &pos->epoch, e);
    if (!rc) rc = meta_ll(f, "step_in_epoch", 0, &pos->step_in_epoch, e);
    if (!rc) rc = meta_ll(f, "global_step", 0, &pos->global_step, e);
    if (!rc) rc = meta_ll(f, "runs", 0, &pos->runs, e);
    if (!rc) rc = meta_ll(f, "best_epoch", -1, &pos->best_epoch, e);
    if (!rc) rc = meta_ll(f, "train_images", 0, &pos->train_images, e);
    if (!rc) rc = meta_ll(f, "world_size", 0, &pos->world_size, e);
    if (!rc) rc = meta_ll(f, "global_batch", 0, &pos->global_batch, e);
    if (!rc) rc = meta_ll(f, "val_pending", 0, &pos->val_pending, e);
    /* written at an epoch's end only: the epoch just finished */
    if (!rc && pos->val_pending && (pos->val_pending != pos->epoch || pos->step_in_epoch))
        rc = iabn_err_set(e, IABN_EFORMAT, "%s: metadata val_pending is %lld at epoch %lld, "
                          "step %lld: not the end of that epoch", iabn_st_path(f),
                          pos->val_pending, pos->epoch, pos->step_in_epoch);
    const char *b = iabn_st_meta(f, "best");
    if (!rc && b) {
        char *end;
        pos->best = strtod(b, &end);
        if (end == b || *end || !isfinite(pos->best))
            rc = iabn_err_set(e, IABN_EFORMAT, "%s: metadata best is '%.32s', not a finite number",
                              iabn_st_path(f), b);
    }
    return rc;
}

int iabn_ckpt_load(iabn_store *s, const char *path, int optimizer, iabn_ckpt_pos *pos,
                   iabn_err *e)
{
    iabn_st_file *f = NULL;
    int rc = iabn_st_load(path, &f, e);
    if (rc) return rc;
    /* check everything before writing anything */
    iabn_ckpt_pos p0;
    if (pos) rc = read_pos(f, &p0, e);
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
    if (!rc) rc = iabn_bn_gamma_check(s, f, e);
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
        if (!rc) rc = iabn_bn_gamma_convert(f, p->name, p, host, e);
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
    if (!rc && pos) *pos = p0;
    iabn_st_free(f);
    return rc;
}
