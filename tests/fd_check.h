/* fd_check.h: the finite-difference check the op kernel tests share
 * (test_ops_kernels.c, test_loss_kernels.c): the scalar L = sum(r * y) with a
 * random r, so one central difference per input element checks the whole
 * backward at once. */
#ifndef IABN_TESTS_FD_CHECK_H
#define IABN_TESTS_FD_CHECK_H

#include "test_util.h"

typedef void (*fwd_fn)(const void *ctx, const float *x, float *y);

static inline float *falloc(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof *p);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static inline double dot_d(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* Worst |fd - g| / (atol + rtol |g|) over (up to ~300 of) the elements of x. */
static inline double fd_check(const void *ctx, fwd_fn f, float *x, size_t nx, size_t ny,
                       const float *r, const float *g, float eps, double atol, double rtol)
{
    float *y = falloc(ny);
    size_t step = nx > 300 ? nx / 300 : 1;
    double worst = 0;
    for (size_t i = 0; i < nx; i += step) {
        float s = x[i], hi = s + eps, lo = s - eps;
        x[i] = hi;
        f(ctx, x, y);
        double lp = dot_d(r, y, ny);
        x[i] = lo;
        f(ctx, x, y);
        double lm = dot_d(r, y, ny);
        x[i] = s;
        double fd = (lp - lm) / ((double)hi - (double)lo);
        double d = fabs(fd - g[i]) / (atol + rtol * fabs(g[i]));
        if (!(d <= 1)) fprintf(stderr, "  element %zu: fd %.7g analytic %.7g\n", i, fd, g[i]);
        if (!(d <= worst)) worst = d;
    }
    free(y);
    return worst;
}

#define FD_OK(worst) CHECK_MSG((worst) <= 1.0, "worst ratio %g", (worst))

#endif
