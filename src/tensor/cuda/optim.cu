/* cuda/optim.cu: the SGD update over one parameter array on CUDA, twin of
 * cpu/optim.c (the per-element formula is math/optim.h's).
 */
#include <math.h>

#include "tensor/cuda/internal.h"
#include "tensor/cuda/kernels.h"
#include "tensor/math/optim.h"

namespace {

/* consumes g: zero afterwards unless it is w's or buf's storage, as on the
 * CPU (backend.h) */
__global__ void sgd_k(size_t n, float lr, float mom, float wd, int nesterov, int first, float *w,
                      float *g, float *buf, int zero)
{
    IABN_CUDA_GRID_LOOP(i, n) {
        float b = mom != 0.f ? buf[i] : 0.f;
        iabn_sgd_elem(lr, mom, wd, nesterov, first, &w[i], g[i], &b);
        if (mom != 0.f) buf[i] = b;
        if (zero) g[i] = 0.f;
    }
}

} // namespace

extern "C" {

int iabn_cuda_sgd_update(iabn_cuda_ctx *ctx, size_t count, float lr, float momentum, float wd,
                         int nesterov, int first_step, float *w, float *grad, float *buf,
                         iabn_err *e)
{
    int zero = grad != w && grad != buf;
    IABN_CUDA_LAUNCH(sgd_k, count, count, lr, momentum, wd, nesterov, first_step, w, grad, buf,
                     zero);
}

} // extern "C"
