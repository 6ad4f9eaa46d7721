/* weights.c: a store's tensors to and from safetensors, by name.
 *
 * Loading checks the whole file against the store before writing anything,
 * so a failed load leaves the model as it was, and the error lists every
 * problem at once (missing, mismatched, extra): converting weights from
 * another framework usually gets several names wrong together. */
#include "models/models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An error message built from name lists, capped to what fits. */
typedef struct namelist {
    char buf[640];
    size_t len;
    int count;
} namelist;

/* appends name + detail */
static void nl_add(namelist *l, const char *name, const char *detail)
{
    l->count++;
    if (l->len >= sizeof l->buf - 1) return;
    int k = snprintf(l->buf + l->len, sizeof l->buf - l->len, "%s%s%s",
                     l->count > 1 ? ", " : "", name, detail);
    if (k < 0 || (size_t)k >= sizeof l->buf - l->len) {
        /* mark truncation where the list was cut */
        l->len = sizeof l->buf - 1;
        memcpy(l->buf + sizeof l->buf - 5, "...", 4);
    } else {
        l->len += (size_t)k;
    }
}

static void shape_str(char *buf, size_t n, int nd, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static int same_shape(const iabn_param *p, const iabn_st_tensor *t)
{
    if (t->ndim != p->nd) return 0;
    for (int i = 0; i < p->nd; i++)
        if (t->shape[i] != p->shape[i]) return 0;
    return 1;
}

int iabn_weights_is_counter(const iabn_store *s, const char *name)
{
    static const char suffix[] = ".num_batches_tracked";
    size_t n = strlen(name), k = sizeof suffix - 1;
    if (n <= k || strcmp(name + n - k, suffix) != 0 || n - k + 14 > IABN_NAME_LEN) return 0;
    char mean[IABN_NAME_LEN];
    snprintf(mean, sizeof mean, "%.*s.running_mean", (int)(n - k), name);
    return iabn_store_find(s, mean) >= 0;
}

int iabn_weights_load(iabn_store *s, const char *path, int strict, iabn_err *e)
{
    iabn_st_file *f = NULL;
    int rc = iabn_st_load(path, &f, e);
    if (rc) return rc;
    namelist missing = {0}, bad = {0}, extra = {0};
    int np = iabn_store_count(s);
    for (int i = 0; i < np; i++) {
        const iabn_param *p = iabn_store_get(s, i);
        const iabn_st_tensor *t = iabn_st_find(f, p->name);
        if (!t) {
            if (strict) nl_add(&missing, p->name, "");
            continue;
        }
        if (t->dtype != IABN_F32 || !same_shape(p, t)) {
            char fs[96], ms[96], desc[240];
            int64_t ps[IABN_MAX_DIMS];
            for (int d = 0; d < p->nd; d++) ps[d] = p->shape[d];
            shape_str(fs, sizeof fs, t->ndim, t->shape);
            shape_str(ms, sizeof ms, p->nd, ps);
            snprintf(desc, sizeof desc, " (file %s %s, model F32 %s)",
                     iabn_dtype_name((iabn_dtype)t->dtype), fs, ms);
            nl_add(&bad, p->name, desc);
        }
    }
    if (strict)
        for (int i = 0; i < iabn_st_count(f); i++) {
            const iabn_st_tensor *t = iabn_st_get(f, i);
            if (iabn_store_find(s, t->name) < 0 && !iabn_weights_is_counter(s, t->name))
                nl_add(&extra, t->name, "");
        }
    if (missing.count || bad.count || extra.count) {
        iabn_err_set(e, IABN_EFORMAT,
                     "%s does not fit the model: %d missing%s%s%s; %d of another shape or "
                     "dtype%s%s%s; %d not in the model%s%s%s",
                     path, missing.count, missing.count ? " (" : "", missing.buf,
                     missing.count ? ")" : "", bad.count, bad.count ? " (" : "", bad.buf,
                     bad.count ? ")" : "", extra.count, extra.count ? " (" : "", extra.buf,
                     extra.count ? ")" : "");
        iabn_st_free(f);
        return IABN_EFORMAT;
    }
    /* plain-gamma weights an in-place unit cannot reproduce: refused here,
     * before anything is written */
    if ((rc = iabn_bn_gamma_check(s, f, e))) {
        iabn_st_free(f);
        return rc;
    }
    float *host = NULL;
    size_t cap = 0;
    for (int i = 0; i < np && !rc; i++) {
        const iabn_param *p = iabn_store_get(s, i);
        const iabn_st_tensor *t = iabn_st_find(f, p->name);
        if (!t) continue;
        if (p->count > cap) {
            free(host);
            cap = p->count;
            host = malloc(cap * sizeof *host);
            if (!host) {
                rc = iabn_err_set(e, IABN_ENOMEM, "out of memory loading %s from %s", p->name, path);
                break;
            }
        }
        rc = iabn_st_read_f32(t, host, p->count, e);
        if (!rc) rc = iabn_bn_gamma_convert(f, p->name, p, host, e);
        if (!rc) rc = iabn_store_write(s, i, host, e);
        if (rc) iabn_err_prefix(e, "loading %s from %s: ", p->name, path);
    }
    free(host);
    iabn_st_free(f);
    return rc;
}

int iabn_weights_save(iabn_store *s, const char *path, const char *const *meta_kv, iabn_err *e)
{
    iabn_st_writer *w = iabn_st_writer_new();
    if (!w) return iabn_err_set(e, IABN_ENOMEM, "out of memory saving %s", path);
    int rc = 0;
    float *host = NULL;
    size_t cap = 0;
    for (int i = 0; i < iabn_store_count(s) && !rc; i++) {
        const iabn_param *p = iabn_store_get(s, i);
        if (p->count > cap) {
            free(host);
            cap = p->count;
            host = malloc(cap * sizeof *host);
            if (!host) {
                rc = iabn_err_set(e, IABN_ENOMEM, "out of memory saving %s to %s", p->name, path);
                break;
            }
        }
        int64_t shape[IABN_MAX_DIMS];
        for (int d = 0; d < p->nd; d++) shape[d] = p->shape[d];
        rc = iabn_store_read(s, i, host, e);
        if (!rc) rc = iabn_st_writer_add(w, p->name, IABN_F32, p->nd, shape, host, e);
    }
    if (!rc) rc = iabn_bn_gamma_write_meta(s, w, e);
    for (int i = 0; !rc && meta_kv && meta_kv[i]; i += 2) {
        if (!meta_kv[i + 1]) {
            rc = iabn_err_set(e, IABN_EINVAL, "saving %s: metadata key '%s' has no value", path,
                              meta_kv[i]);
            break;
        }
        rc = iabn_st_writer_meta(w, meta_kv[i], meta_kv[i + 1], e);
    }
    if (!rc) rc = iabn_st_writer_save(w, path, e);
    free(host);
    iabn_st_writer_free(w);
    return rc;
}
