/* common.c: errors, dtypes, activation names, the counter-based RNG, aligned
 * allocation and the thread count.  Nothing here keeps state between calls. */
#include "tensor/tensor.h"
#include "tensor/math/elementwise.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    }
    return "?";
}

const char *iabn_act_name(iabn_act_kind k)
{
    switch (k) {
    case IABN_ACT_IDENTITY: return "identity";
    case IABN_ACT_RELU: return "relu";
    case IABN_ACT_LEAKY_RELU: return "leaky_relu";
    case IABN_ACT_ELU: return "elu";
    }
    return "?";
}

int iabn_act_parse(const char *s, iabn_act_kind *out)
{
    static const struct { const char *name; iabn_act_kind k; } tab[] = {
        {"identity", IABN_ACT_IDENTITY}, {"none", IABN_ACT_IDENTITY},
        {"relu", IABN_ACT_RELU}, {"leaky_relu", IABN_ACT_LEAKY_RELU},
        {"elu", IABN_ACT_ELU},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(s, tab[i].name) == 0) { *out = tab[i].k; return 0; }
    return IABN_EINVAL;
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
