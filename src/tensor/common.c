/* common.c: errors, dtypes, activation names, the counter-based RNG, aligned
 * allocation and the thread count.  Nothing here keeps state between calls. */
#include "tensor/tensor.h"
#include "tensor/math/elementwise.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

int iabn_err_set(iabn_err *e, int code, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        e->code = code;
    }
    return code;
}

int iabn_err_prefix(iabn_err *e, const char *fmt, ...)
{
    if (!e) return IABN_EINVAL;
    char head[512], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    snprintf(e->msg, sizeof e->msg, "%.400s%.600s", head, old);
    return e->code;
}

const char *iabn_err_name(int code)
{
    switch (code) {
    case IABN_OK: return "ok";
    case IABN_EINVAL: return "invalid argument";
    case IABN_ENOMEM: return "out of memory";
    case IABN_EIO: return "i/o error";
    case IABN_EFORMAT: return "bad format";
    case IABN_EDEVICE: return "device error";
    case IABN_ENUM: return "non-finite value";
    case IABN_EINTR: return "interrupted";
    default: return "unknown error";
    }
}

size_t iabn_dtype_size(iabn_dtype dt)
{
    switch (dt) {
    case IABN_F32: case IABN_I32: return 4;
    case IABN_U8: return 1;
    case IABN_I64: return 8;
    case IABN_BF16: return 2;
    }
    return 0;
}

const char *iabn_dtype_name(iabn_dtype dt)
{
    switch (dt) {
    case IABN_F32: return "F32";
    case IABN_I32: return "I32";
    case IABN_U8: return "U8";
    case IABN_I64: return "I64";
    case IABN_BF16: return "BF16";
    }
    return "?";
}

const char *iabn_act_name(iabn_act_kind k)
{
    switch (k) {
#define X(E, l, name, alias, def, inv) case IABN_ACT_##E: return name;
        IABN_ACTIVATIONS(X)
#undef X
    case IABN_ACT_COUNT: break;
    }
    return "?";
}

const char *iabn_layout_name(iabn_layout l)
{
    switch (l) {
#define X(id, name, block) case id: return name;
        IABN_LAYOUTS(X)
#undef X
    case IABN_LAYOUT_COUNT: break;
    }
    return "?";
}

int iabn_layout_block(iabn_layout l)
{
    switch (l) {
#define X(id, name, block) case id: return block;
        IABN_LAYOUTS(X)
#undef X
    case IABN_LAYOUT_COUNT: break;
    }
    return 0;
}

int iabn_name_matches(const char *s, const char *name, const char *aliases)
{
    if (!strcasecmp(s, name)) return 1;
    size_t n = strlen(s);
    for (const char *a = aliases; *a;) {
        size_t len = strcspn(a, ",");
        if (len == n && !strncasecmp(a, s, n)) return 1;
        a += len;
        if (*a == ',') a++;
    }
    return 0;
}

int iabn_act_parse(const char *s, iabn_act_kind *out, iabn_err *e)
{
#define X(E, l, name, alias, def, inv)                                                     \
    if (iabn_name_matches(s, name, alias)) {                                               \
        *out = IABN_ACT_##E;                                                               \
        return 0;                                                                          \
    }
    IABN_ACTIVATIONS(X)
#undef X
    char valid[256] = "";
#define X(E, l, name, alias, def, inv) strcat(valid, *valid ? ", " name : name);
    IABN_ACTIVATIONS(X)
#undef X
    return iabn_err_set(e, IABN_EINVAL, "unknown activation '%s' (valid: %s)", s, valid);
}

int iabn_act_check(iabn_act act, iabn_err *e)
{
    if ((int)act.kind >= 0 && act.kind < IABN_ACT_COUNT) return 0;
    char valid[256] = "";
#define X(E, l, name, alias, def, inv) strcat(valid, *valid ? ", " name : name);
    IABN_ACTIVATIONS(X)
#undef X
    return iabn_err_set(e, IABN_EINVAL, "unknown activation kind %d (valid: %s)", (int)act.kind,
                        valid);
}

/* The mixer lives in math/<family>.h so that CUDA kernels draw the identical bits. */
uint64_t iabn_rng_u64(uint64_t seed, uint64_t stream, uint64_t index)
{
    return iabn_rng_bits(seed, stream, index);
}

float iabn_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    return iabn_rng_unit(iabn_rng_bits(seed, stream, index));
}

float iabn_rng_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint64_t r = iabn_rng_u64(seed, stream, index);
    double u1 = ((double)(r >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(iabn_rng_u64(seed, stream ^ 0x5bd1e995u, index) >> 11) *
                (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void *iabn_aligned_alloc(size_t align, size_t bytes)
{
    void *p = NULL;
    if (bytes == 0) bytes = align;
    if (posix_memalign(&p, align, bytes) != 0) return NULL;
    return p;
}

void iabn_aligned_free(void *p) { free(p); }

int iabn_num_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

void iabn_set_num_threads(int n)
{
#ifdef _OPENMP
    if (n > 0) omp_set_num_threads(n);
#else
    (void)n;
#endif
}

double iabn_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
