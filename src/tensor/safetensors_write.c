/* safetensors_write.c: the safetensors writer: tensors collected in memory,
 * laid out in a fixed order, saved atomically (temporary file, fsync,
 * rename).  The reader is in safetensors.c. */
#include "tensor/tensor.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ST_MAX_NDIM 8

static char *st_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static int st_dtype_ok(int dt)
{
    return dt == IABN_F32 || dt == IABN_I32 || dt == IABN_U8 || dt == IABN_I64;
}

/* a*b into *out, false on size_t overflow */
static int st_mul(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

static int st_cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

typedef struct st_wentry {
    char *name;
    int dtype, ndim;
    int64_t shape[ST_MAX_NDIM];
    size_t nbytes;
    void *data;
} st_wentry;

struct iabn_st_writer {
    st_wentry *t;
    int n, cap;
    char **meta_key, **meta_val;
    int nmeta, meta_cap;
};

iabn_st_writer *iabn_st_writer_new(void) { return calloc(1, sizeof(iabn_st_writer)); }

void iabn_st_writer_free(iabn_st_writer *w)
{
    if (!w) return;
    for (int i = 0; i < w->n; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    for (int i = 0; i < w->nmeta; i++) {
        free(w->meta_key[i]);
        free(w->meta_val[i]);
    }
    free(w->t);
    free(w->meta_key);
    free(w->meta_val);
    free(w);
}

int iabn_st_writer_add(iabn_st_writer *w, const char *name, int dtype, int ndim,
                       const int64_t *shape, const void *data, iabn_err *e)
{
    if (!w || !name) return iabn_err_set(e, IABN_EINVAL, "safetensors writer: NULL argument");
    if (!*name || !strcmp(name, "__metadata__"))
        return iabn_err_set(e, IABN_EINVAL, "safetensors writer: invalid tensor name '%s'", name);
    if (!st_dtype_ok(dtype))
        return iabn_err_set(e, IABN_EINVAL, "safetensors writer: tensor '%s': bad dtype %d", name, dtype);
    if (ndim < 0 || ndim > ST_MAX_NDIM || (ndim && !shape))
        return iabn_err_set(e, IABN_EINVAL, "safetensors writer: tensor '%s': bad ndim %d", name, ndim);
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (uint64_t)shape[i] > SIZE_MAX || !st_mul(numel, (size_t)shape[i], &numel))
            return iabn_err_set(e, IABN_EINVAL, "safetensors writer: tensor '%s': bad shape[%d] = %lld",
                                name, i, (long long)shape[i]);
    }
    size_t nbytes;
    if (!st_mul(numel, iabn_dtype_size((iabn_dtype)dtype), &nbytes))
        return iabn_err_set(e, IABN_EINVAL, "safetensors writer: tensor '%s': size overflows", name);
    if (nbytes && !data)
        return iabn_err_set(e, IABN_EINVAL, "safetensors writer: tensor '%s': NULL data", name);
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->t[i].name, name))
            return iabn_err_set(e, IABN_EINVAL, "safetensors writer: duplicate tensor name '%s'", name);
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        st_wentry *nt = realloc(w->t, (size_t)cap * sizeof *nt);
        if (!nt) return iabn_err_set(e, IABN_ENOMEM, "safetensors writer: out of memory");
        w->t = nt;
        w->cap = cap;
    }
    st_wentry *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = st_strdup(name);
    t->data = malloc(nbytes ? nbytes : 1);
    if (!t->name || !t->data) {
        free(t->name);
        free(t->data);
        return iabn_err_set(e, IABN_ENOMEM, "safetensors writer: out of memory for '%s' (%zu bytes)",
                            name, nbytes);
    }
    if (nbytes) memcpy(t->data, data, nbytes);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->nbytes = nbytes;
    w->n++;
    return 0;
}

int iabn_st_writer_meta(iabn_st_writer *w, const char *key, const char *value, iabn_err *e)
{
    if (!w || !key || !value) return iabn_err_set(e, IABN_EINVAL, "safetensors writer: NULL argument");
    for (int i = 0; i < w->nmeta; i++)
        if (!strcmp(w->meta_key[i], key)) {
            char *v = st_strdup(value);
            if (!v) return iabn_err_set(e, IABN_ENOMEM, "safetensors writer: out of memory");
            free(w->meta_val[i]);
            w->meta_val[i] = v;
            return 0;
        }
    if (w->nmeta == w->meta_cap) {
        int cap = w->meta_cap ? 2 * w->meta_cap : 8;
        char **k = realloc(w->meta_key, (size_t)cap * sizeof *k);
        if (k) w->meta_key = k;
        char **v = realloc(w->meta_val, (size_t)cap * sizeof *v);
        if (v) w->meta_val = v;
        if (!k || !v) return iabn_err_set(e, IABN_ENOMEM, "safetensors writer: out of memory");
        w->meta_cap = cap;
    }
    char *k = st_strdup(key), *v = st_strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return iabn_err_set(e, IABN_ENOMEM, "safetensors writer: out of memory");
    }
    w->meta_key[w->nmeta] = k;
    w->meta_val[w->nmeta] = v;
    w->nmeta++;
    return 0;
}

/* Growable byte string for the header. */
typedef struct st_buf {
    char *p;
    size_t n, cap;
    int oom;
} st_buf;

static void sb_put(st_buf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(st_buf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* JSON string literal; bytes >= 0x80 pass through (names are UTF-8). */
static void sb_json_str(st_buf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            sb_put(b, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)p, 1);
        }
    }
    sb_put(b, "\"", 1);
}

/* Widest element first, then by name (the reference writer's order): every
 * tensor's bytes are a multiple of its element size, so each one starts
 * naturally aligned in the 8-aligned data buffer. */
static int st_cmp_went(const void *a, const void *b)
{
    const st_wentry *x = *(const st_wentry *const *)a, *y = *(const st_wentry *const *)b;
    size_t sx = iabn_dtype_size((iabn_dtype)x->dtype), sy = iabn_dtype_size((iabn_dtype)y->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Header JSON (padded with spaces to a multiple of 8) for tensors in the
 * given order, then the metadata with keys sorted; compact separators, as
 * tests/fixtures/stio.py writes. */
static int st_build_header(const iabn_st_writer *w, st_wentry **ord, st_buf *b)
{
    char num[64];
    size_t off = 0;
    sb_str(b, "{");
    for (int i = 0; i < w->n; i++) {
        const st_wentry *t = ord[i];
        if (i) sb_str(b, ",");
        sb_json_str(b, t->name);
        sb_str(b, ":{\"dtype\":");
        sb_json_str(b, iabn_dtype_name((iabn_dtype)t->dtype));
        sb_str(b, ",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            sb_str(b, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%zu,%zu]}", off, off + t->nbytes);
        sb_str(b, num);
        off += t->nbytes;
    }
    if (w->nmeta) {
        char **keys = malloc((size_t)w->nmeta * sizeof *keys);
        if (!keys) return -1;
        for (int i = 0; i < w->nmeta; i++) keys[i] = w->meta_key[i];
        qsort(keys, (size_t)w->nmeta, sizeof *keys, st_cmp_cstr);
        sb_str(b, w->n ? ",\"__metadata__\":{" : "\"__metadata__\":{");
        for (int i = 0; i < w->nmeta; i++) {
            const char *val = NULL;
            for (int j = 0; j < w->nmeta; j++)
                if (w->meta_key[j] == keys[i]) val = w->meta_val[j];
            if (i) sb_str(b, ",");
            sb_json_str(b, keys[i]);
            sb_str(b, ":");
            sb_json_str(b, val);
        }
        sb_str(b, "}");
        free(keys);
    }
    sb_str(b, "}");
    while (!b->oom && b->n % 8) sb_put(b, " ", 1);
    return b->oom ? -1 : 0;
}

/* Best effort: makes the rename itself durable. */
static void st_fsync_dir(const char *path)
{
    char *dir = st_strdup(path);
    if (!dir) return;
    char *slash = strrchr(dir, '/');
    const char *d = ".";
    if (slash) {
        slash[slash == dir ? 1 : 0] = 0;
        d = dir;
    }
    int fd = open(d, O_RDONLY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

int iabn_st_writer_save(iabn_st_writer *w, const char *path, iabn_err *e)
{
    if (!w || !path) return iabn_err_set(e, IABN_EINVAL, "safetensors writer: NULL argument");
    st_wentry **ord = malloc(((size_t)w->n + 1) * sizeof *ord);
    size_t plen = strlen(path) + 32;
    char *tmp = malloc(plen);
    st_buf hb = {0};
    int rc = 0;
    FILE *fp = NULL;
    if (!ord || !tmp) {
        rc = iabn_err_set(e, IABN_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    for (int i = 0; i < w->n; i++) ord[i] = &w->t[i];
    qsort(ord, (size_t)w->n, sizeof *ord, st_cmp_went);
    if (st_build_header(w, ord, &hb)) {
        rc = iabn_err_set(e, IABN_ENOMEM, "%s: out of memory building the header", path);
        goto out;
    }
    snprintf(tmp, plen, "%s.tmp.%ld", path, (long)getpid());
    fp = fopen(tmp, "wb");
    if (!fp) {
        rc = iabn_err_set(e, IABN_EIO, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    unsigned char len8[8];
    uint64_t hl = hb.n;
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hl >> (8 * i));
    int ok = fwrite(len8, 1, 8, fp) == 8 && fwrite(hb.p, 1, hb.n, fp) == hb.n;
    for (int i = 0; ok && i < w->n; i++)
        ok = !ord[i]->nbytes || fwrite(ord[i]->data, 1, ord[i]->nbytes, fp) == ord[i]->nbytes;
    ok = ok && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    int err = errno;
    if (fclose(fp) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    fp = NULL;
    if (!ok) {
        rc = iabn_err_set(e, IABN_EIO, "%s: write failed: %s", tmp, strerror(err));
        remove(tmp);
        goto out;
    }
    if (rename(tmp, path) != 0) {
        rc = iabn_err_set(e, IABN_EIO, "%s: cannot rename %s over it: %s", path, tmp, strerror(errno));
        remove(tmp);
        goto out;
    }
    st_fsync_dir(path);
out:
    free(hb.p);
    free(tmp);
    free(ord);
    return rc;
}
