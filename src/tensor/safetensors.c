/* safetensors.c: the safetensors reader (whole file in one aligned buffer,
 * every field of the header checked before any tensor is handed out) and the
 * typed copy-out helpers.  The writer is in safetensors_write.c.
 *
 * The host is assumed little-endian (x86-64, aarch64), as the format is. */
#include "tensor/tensor.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The reference reader refuses larger headers; a bigger length field is far
 * more likely corruption than a real file. */
#define ST_MAX_HEADER 100000000ull
#define ST_MAX_NDIM 8

struct iabn_st_file {
    unsigned char *buf; /* whole file, 64-byte aligned */
    size_t len;
    char *path;         /* for error messages */
    iabn_st_tensor *t;  /* sorted by name */
    int n;
    char **meta_key;    /* sorted by key */
    char **meta_val;
    int nmeta;
};

/* ---- small helpers -------------------------------------------------------- */

static char *st_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static int st_dtype_parse(const char *s, int *out)
{
    static const struct { const char *name; int dt; } tab[] = {
        {"F32", IABN_F32}, {"I32", IABN_I32}, {"U8", IABN_U8}, {"I64", IABN_I64}};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(s, tab[i].name)) {
            *out = tab[i].dt;
            return 0;
        }
    return -1;
}

/* a*b into *out, false on size_t overflow */
static int st_mul(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

/* A JSON number that is a non-negative integer exactly representable in a
 * double (2^53) and in size_t; false otherwise. */
static int st_json_uint(const cJSON *it, size_t *out)
{
    if (!cJSON_IsNumber(it)) return 0;
    double d = it->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != (double)(uint64_t)d) return 0;
    if ((uint64_t)d > SIZE_MAX) return 0;
    *out = (size_t)d;
    return 1;
}

static int st_cmp_name(const void *a, const void *b)
{
    return strcmp(((const iabn_st_tensor *)a)->name, ((const iabn_st_tensor *)b)->name);
}

/* ---- reading ---------------------------------------------------------------- */

typedef struct st_span {
    size_t begin, end;
    const char *name;
    int idx; /* into iabn_st_file.t */
} st_span;

static int st_cmp_span(const void *a, const void *b)
{
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int st_parse_meta(iabn_st_file *f, const cJSON *m, iabn_err *e)
{
    if (!cJSON_IsObject(m))
        return iabn_err_set(e, IABN_EFORMAT, "%s: __metadata__ is not a JSON object", f->path);
    int n = cJSON_GetArraySize(m);
    f->meta_key = calloc((size_t)n + 1, sizeof *f->meta_key);
    f->meta_val = calloc((size_t)n + 1, sizeof *f->meta_val);
    if (!f->meta_key || !f->meta_val)
        return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory for metadata", f->path);
    const cJSON *it;
    cJSON_ArrayForEach(it, m) {
        if (!it->string)
            return iabn_err_set(e, IABN_EFORMAT, "%s: __metadata__ entry without a key", f->path);
        if (!cJSON_IsString(it) || !it->valuestring)
            return iabn_err_set(e, IABN_EFORMAT, "%s: __metadata__ value for '%s' is not a string",
                                f->path, it->string);
        for (int j = 0; j < f->nmeta; j++)
            if (!strcmp(f->meta_key[j], it->string))
                return iabn_err_set(e, IABN_EFORMAT, "%s: duplicate __metadata__ key '%s'",
                                    f->path, it->string);
        f->meta_key[f->nmeta] = st_strdup(it->string);
        f->meta_val[f->nmeta] = st_strdup(it->valuestring);
        f->nmeta++;
        if (!f->meta_key[f->nmeta - 1] || !f->meta_val[f->nmeta - 1])
            return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory for metadata", f->path);
    }
    return 0;
}

/* One tensor entry; fills t (name excepted) and its byte span. */
static int st_parse_entry(const iabn_st_file *f, const cJSON *ent, iabn_st_tensor *t,
                          st_span *sp, iabn_err *e)
{
    const char *nm = ent->string;
    if (!cJSON_IsObject(ent))
        return iabn_err_set(e, IABN_EFORMAT, "%s: tensor '%s': entry is not a JSON object", f->path, nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(ent, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(ent, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(ent, "data_offsets");
    if (!cJSON_IsString(dt) || !dt->valuestring)
        return iabn_err_set(e, IABN_EFORMAT, "%s: tensor '%s': missing or non-string dtype", f->path, nm);
    if (st_dtype_parse(dt->valuestring, &t->dtype))
        return iabn_err_set(e, IABN_EFORMAT,
                            "%s: tensor '%s': unsupported dtype '%.32s' (iabn reads F32, I32, U8, I64)",
                            f->path, nm, dt->valuestring);
    if (!cJSON_IsArray(sh))
        return iabn_err_set(e, IABN_EFORMAT, "%s: tensor '%s': missing or non-array shape", f->path, nm);
    int nd = cJSON_GetArraySize(sh);
    if (nd > ST_MAX_NDIM)
        return iabn_err_set(e, IABN_EFORMAT, "%s: tensor '%s': shape has %d dims (at most %d)",
                            f->path, nm, nd, ST_MAX_NDIM);
    t->ndim = nd;
    size_t numel = 1;
    int k = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh) {
        size_t v;
        if (!st_json_uint(d, &v) || v > (size_t)INT64_MAX)
            return iabn_err_set(e, IABN_EFORMAT,
                                "%s: tensor '%s': shape[%d] is not a non-negative integer", f->path, nm, k);
        t->shape[k++] = (int64_t)v;
        if (!st_mul(numel, v, &numel))
            return iabn_err_set(e, IABN_EFORMAT, "%s: tensor '%s': shape product overflows", f->path, nm);
    }
    if (!st_mul(numel, iabn_dtype_size((iabn_dtype)t->dtype), &t->nbytes))
        return iabn_err_set(e, IABN_EFORMAT, "%s: tensor '%s': byte size overflows", f->path, nm);
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2)
        return iabn_err_set(e, IABN_EFORMAT,
                            "%s: tensor '%s': data_offsets must be an array [begin, end]", f->path, nm);
    if (!st_json_uint(of->child, &sp->begin) || !st_json_uint(of->child->next, &sp->end))
        return iabn_err_set(e, IABN_EFORMAT,
                            "%s: tensor '%s': data_offsets are not non-negative integers", f->path, nm);
    if (sp->begin > sp->end)
        return iabn_err_set(e, IABN_EFORMAT, "%s: tensor '%s': data_offsets begin %zu > end %zu",
                            f->path, nm, sp->begin, sp->end);
    if (sp->end - sp->begin != t->nbytes)
        return iabn_err_set(e, IABN_EFORMAT,
                            "%s: tensor '%s': shape mismatch: %s shape needs %zu bytes, data_offsets span %zu",
                            f->path, nm, dt->valuestring, t->nbytes, sp->end - sp->begin);
    sp->name = nm;
    return 0;
}

static int st_cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Before the tiling check, so that a repeated name is reported as such rather
 * than as overlapping offsets. */
static int st_check_dups(const iabn_st_file *f, iabn_err *e)
{
    if (f->n < 2) return 0;
    const char **nm = malloc((size_t)f->n * sizeof *nm);
    if (!nm) return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory", f->path);
    for (int i = 0; i < f->n; i++) nm[i] = f->t[i].name;
    qsort(nm, (size_t)f->n, sizeof *nm, st_cmp_cstr);
    int rc = 0;
    for (int i = 1; i < f->n && !rc; i++)
        if (!strcmp(nm[i - 1], nm[i]))
            rc = iabn_err_set(e, IABN_EFORMAT, "%s: duplicate tensor name '%s'", f->path, nm[i]);
    free(nm);
    return rc;
}

/* The spans, sorted, must cover [0, total) exactly. */
static int st_check_tiling(const iabn_st_file *f, st_span *sp, int n, size_t total, iabn_err *e)
{
    qsort(sp, (size_t)n, sizeof *sp, st_cmp_span);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (sp[i].begin < at)
            return iabn_err_set(e, IABN_EFORMAT,
                                "%s: tensor '%s': data_offsets [%zu, %zu) overlap the previous tensor (ends at %zu)",
                                f->path, sp[i].name, sp[i].begin, sp[i].end, at);
        if (sp[i].begin > at)
            return iabn_err_set(e, IABN_EFORMAT,
                                "%s: tensor '%s': gap in the data buffer: bytes [%zu, %zu) belong to no tensor",
                                f->path, sp[i].name, at, sp[i].begin);
        at = sp[i].end;
        if (at > total)
            return iabn_err_set(e, IABN_EFORMAT,
                                "%s: tensor '%s': data_offsets end %zu past the end of the data buffer (%zu bytes)",
                                f->path, sp[i].name, at, total);
    }
    if (at != total)
        return iabn_err_set(e, IABN_EFORMAT,
                            "%s: %zu trailing bytes after the last tensor (data buffer %zu bytes, tensors end at %zu)",
                            f->path, total - at, total, at);
    return 0;
}

static int st_parse_header(iabn_st_file *f, const cJSON *root, size_t data_off, iabn_err *e)
{
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        if (!it->string)
            return iabn_err_set(e, IABN_EFORMAT, "%s: header entry without a name", f->path);
        if (strcmp(it->string, "__metadata__") != 0) n++;
    }
    f->t = calloc((size_t)n + 1, sizeof *f->t);
    st_span *sp = calloc((size_t)n + 1, sizeof *sp);
    if (!f->t || !sp) {
        free(sp);
        return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory for %d tensor entries", f->path, n);
    }
    int rc = 0, nmeta_obj = 0;
    cJSON_ArrayForEach(it, root) {
        if (!strcmp(it->string, "__metadata__")) {
            if (nmeta_obj++) {
                rc = iabn_err_set(e, IABN_EFORMAT, "%s: duplicate key '__metadata__'", f->path);
                break;
            }
            if ((rc = st_parse_meta(f, it, e))) break;
            continue;
        }
        iabn_st_tensor *t = &f->t[f->n];
        if ((rc = st_parse_entry(f, it, t, &sp[f->n], e))) break;
        if (!(t->name = st_strdup(it->string))) {
            rc = iabn_err_set(e, IABN_ENOMEM, "%s: out of memory", f->path);
            break;
        }
        sp[f->n].idx = f->n;
        f->n++;
    }
    if (!rc) rc = st_check_dups(f, e);
    if (!rc) rc = st_check_tiling(f, sp, f->n, f->len - data_off, e);
    if (!rc)
        for (int i = 0; i < f->n; i++) f->t[sp[i].idx].data = f->buf + data_off + sp[i].begin;
    free(sp);
    if (rc) return rc;
    qsort(f->t, (size_t)f->n, sizeof *f->t, st_cmp_name);
    return 0;
}

/* Takes ownership of buf (64-byte aligned, len bytes) and validates it. */
static int st_parse_owned(unsigned char *buf, size_t len, const char *path, iabn_st_file **out,
                          iabn_err *e)
{
    *out = NULL;
    iabn_st_file *f = calloc(1, sizeof *f);
    if (!f) {
        iabn_aligned_free(buf);
        return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory", path);
    }
    f->buf = buf;
    f->len = len;
    f->path = st_strdup(path);
    if (!f->path) {
        iabn_st_free(f);
        return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory", path);
    }
    int rc = 0;
    /* A PyTorch checkpoint (zip since torch 1.6, a pickle before) handed
     * where safetensors is expected would otherwise read as a nonsense
     * header length; safetensors has '{' right after the length. */
    if (len >= 4 && (len < 9 || buf[8] != '{') &&
        ((buf[0] == 'P' && buf[1] == 'K' && buf[2] == 3 && buf[3] == 4) ||
         (buf[0] == 0x80 && buf[1] >= 2 && buf[1] <= 5))) {
        rc = iabn_err_set(e, IABN_EFORMAT,
                          "%s: this is a PyTorch checkpoint; convert it with iabn convert", path);
        goto done;
    }
    if (len < 8) {
        rc = iabn_err_set(e, IABN_EFORMAT, "%s: truncated: %zu bytes, less than the 8-byte header length",
                          path, len);
        goto done;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > ST_MAX_HEADER) {
        rc = iabn_err_set(e, IABN_EFORMAT, "%s: header length %llu is over the 100 MB limit",
                          path, (unsigned long long)hlen);
        goto done;
    }
    if (hlen > len - 8) {
        rc = iabn_err_set(e, IABN_EFORMAT,
                          "%s: truncated: header length %llu exceeds the %zu bytes after the length field",
                          path, (unsigned long long)hlen, len - 8);
        goto done;
    }
    const char *hs = (const char *)buf + 8, *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hs, (size_t)hlen, &end, 0);
    if (!root) {
        size_t at = end && end >= hs ? (size_t)(end - hs) : 0;
        rc = iabn_err_set(e, IABN_EFORMAT, "%s: header is not valid JSON (near byte %zu of %llu)",
                          path, at, (unsigned long long)hlen);
        goto done;
    }
    for (const char *p = end; p < hs + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            rc = iabn_err_set(e, IABN_EFORMAT, "%s: header is not valid JSON: trailing bytes after the object",
                              path);
            break;
        }
    if (!rc && !cJSON_IsObject(root))
        rc = iabn_err_set(e, IABN_EFORMAT, "%s: header is not a JSON object", path);
    if (!rc) rc = st_parse_header(f, root, 8 + (size_t)hlen, e);
    cJSON_Delete(root);
done:
    if (rc) {
        iabn_st_free(f);
        return rc;
    }
    *out = f;
    return 0;
}

int iabn_st_parse(const void *bytes, size_t len, iabn_st_file **out, iabn_err *e)
{
    if (!out || (!bytes && len))
        return iabn_err_set(e, IABN_EINVAL, "iabn_st_parse: NULL argument");
    *out = NULL;
    unsigned char *buf = iabn_aligned_alloc(64, len ? len : 1);
    if (!buf) return iabn_err_set(e, IABN_ENOMEM, "<memory>: cannot allocate %zu bytes", len);
    if (len) memcpy(buf, bytes, len);
    return st_parse_owned(buf, len, "<memory>", out, e);
}

int iabn_st_load(const char *path, iabn_st_file **out, iabn_err *e)
{
    if (!path || !out) return iabn_err_set(e, IABN_EINVAL, "iabn_st_load: NULL argument");
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) return iabn_err_set(e, IABN_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(fp);
        return iabn_err_set(e, IABN_EIO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX - 64) {
        fclose(fp);
        return iabn_err_set(e, IABN_ENOMEM, "%s: file too large", path);
    }
    size_t len = (size_t)st.st_size;
    unsigned char *buf = iabn_aligned_alloc(64, len ? len : 1);
    if (!buf) {
        fclose(fp);
        return iabn_err_set(e, IABN_ENOMEM, "%s: cannot allocate %zu bytes", path, len);
    }
    size_t got = len ? fread(buf, 1, len, fp) : 0;
    int bad = ferror(fp);
    fclose(fp);
    if (got != len || bad) {
        iabn_aligned_free(buf);
        return iabn_err_set(e, IABN_EIO, "%s: read %zu of %zu bytes", path, got, len);
    }
    return st_parse_owned(buf, len, path, out, e);
}

void iabn_st_free(iabn_st_file *f)
{
    if (!f) return;
    if (f->t)
        for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    if (f->meta_key)
        for (int i = 0; i < f->nmeta; i++) free(f->meta_key[i]);
    if (f->meta_val)
        for (int i = 0; i < f->nmeta; i++) free(f->meta_val[i]);
    free(f->meta_key);
    free(f->meta_val);
    free(f->path);
    iabn_aligned_free(f->buf);
    free(f);
}

int iabn_st_count(const iabn_st_file *f) { return f ? f->n : 0; }

const iabn_st_tensor *iabn_st_get(const iabn_st_file *f, int i)
{
    if (!f || i < 0 || i >= f->n) return NULL;
    return &f->t[i];
}

const iabn_st_tensor *iabn_st_find(const iabn_st_file *f, const char *name)
{
    if (!f || !name || !f->n) return NULL;
    iabn_st_tensor key = {0};
    key.name = (char *)(uintptr_t)name;
    return bsearch(&key, f->t, (size_t)f->n, sizeof *f->t, st_cmp_name);
}

const char *iabn_st_meta(const iabn_st_file *f, const char *key)
{
    if (!f || !key) return NULL;
    for (int i = 0; i < f->nmeta; i++)
        if (!strcmp(f->meta_key[i], key)) return f->meta_val[i];
    return NULL;
}

const char *iabn_st_path(const iabn_st_file *f) { return f ? f->path : NULL; }

int64_t iabn_st_numel(const iabn_st_tensor *t)
{
    if (!t) return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* Element i of t as a double; memcpy because offsets in third-party files
 * need not be aligned for the element type. */
static double st_elem(const iabn_st_tensor *t, size_t i)
{
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case IABN_F32: { float v; memcpy(&v, p + 4 * i, 4); return v; }
    case IABN_I32: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case IABN_U8: return p[i];
    case IABN_I64: { int64_t v; memcpy(&v, p + 8 * i, 8); return (double)v; }
    }
    return 0;
}

static int st_check_count(const iabn_st_tensor *t, size_t count, iabn_err *e)
{
    if (!t) return iabn_err_set(e, IABN_EINVAL, "safetensors read: NULL tensor");
    size_t numel = t->nbytes / iabn_dtype_size((iabn_dtype)t->dtype);
    if (numel != count)
        return iabn_err_set(e, IABN_EINVAL, "tensor '%s' has %zu elements, the caller expects %zu",
                            t->name, numel, count);
    return 0;
}

int iabn_st_read_f32(const iabn_st_tensor *t, float *dst, size_t count, iabn_err *e)
{
    int rc = st_check_count(t, count, e);
    if (rc) return rc;
    if (t->dtype == IABN_F32) {
        if (count) memcpy(dst, t->data, count * sizeof(float));
        return 0;
    }
    for (size_t i = 0; i < count; i++) dst[i] = (float)st_elem(t, i);
    return 0;
}

int iabn_st_read_i64(const iabn_st_tensor *t, int64_t *dst, size_t count, iabn_err *e)
{
    int rc = st_check_count(t, count, e);
    if (rc) return rc;
    if (t->dtype == IABN_F32)
        return iabn_err_set(e, IABN_EINVAL, "tensor '%s' is F32, an integer tensor was expected", t->name);
    if (t->dtype == IABN_I64) {
        if (count) memcpy(dst, t->data, count * sizeof(int64_t));
        return 0;
    }
    for (size_t i = 0; i < count; i++) dst[i] = (int64_t)st_elem(t, i);
    return 0;
}

int iabn_st_get_f32(const iabn_st_file *f, const char *name, float *dst, size_t count, iabn_err *e)
{
    const iabn_st_tensor *t = iabn_st_find(f, name);
    if (!t)
        return iabn_err_set(e, IABN_EFORMAT, "%s: no tensor named '%s'", f ? f->path : "?",
                            name ? name : "(null)");
    int rc = iabn_st_read_f32(t, dst, count, e);
    if (rc) iabn_err_prefix(e, "%s: ", f->path);
    return rc;
}
