/* cuda_test_util.h: what the CUDA tests share (test_cuda.c, graphs on both
 * backends; test_cuda_kernels.c, kernel calls): the context, device buffers
 * to and from host arrays, and the comparison with the CPU's result.  TF32
 * is off (the default), so fp32 agreement is expected up to summation
 * order: tolerance 1e-4 of the array's largest magnitude plus 1e-3
 * relative. */
#ifndef IABN_CUDA_TEST_UTIL_H
#define IABN_CUDA_TEST_UTIL_H

#include "iabn.h"
#include "tensor/cuda/backend.h"
#include "tensor/cuda/kernels.h"
#include "test_util.h"

/* the layout of every kernel call here (test_layout_kernels.c covers nChw16c) */
#define NCHW IABN_LAYOUT_NCHW

static iabn_cuda_ctx *cu;

static inline double compare(const char *what, const char *name, const float *got, const float *ref,
                      size_t n)
{
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
    double err = t_max_err(got, ref, n, 1e-4 * mx + 1e-6, 1e-3);
    CHECK_MSG(err <= 1.0, "%s: %s %s differs (error %.3g of tolerance, max |ref| %.3g)", what,
              name, "cuda vs cpu", err, mx);
    return err;
}

static inline float *dev_up(const float *h, size_t n)
{
    const iabn_backend *be = iabn_cuda_backend(cu);
    float *d = be->alloc(be->ctx, n * sizeof *d);
    if (d && h && be->h2d(be->ctx, d, h, n * sizeof *d)) {
        be->free(be->ctx, d);
        d = NULL;
    }
    CHECK_MSG(d != NULL, "device buffer of %zu floats", n);
    return d;
}

static inline void dev_free(void *d)
{
    const iabn_backend *be = iabn_cuda_backend(cu);
    be->free(be->ctx, d);
}

/* compare() of a device array with a host reference */
static inline void dev_cmp(const char *what, const char *name, const float *d, const float *ref,
                    size_t n)
{
    const iabn_backend *be = iabn_cuda_backend(cu);
    float *h = malloc(n * sizeof *h);
    CHECK(h != NULL);
    if (!h) return;
    if (be->d2h(be->ctx, h, d, n * sizeof *h) == 0) compare(what, name, h, ref, n);
    else CHECK_MSG(0, "%s: reading %s back", what, name);
    free(h);
}

#endif
