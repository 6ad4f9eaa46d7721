/* cuda/optim.cu: the SGD update over one parameter array on CUDA, twin of
 * cpu/optim.c (the per-element formula is math/optim.h's).
 */
#include <math.h>

#include "tensor/cuda/internal.h"
#include "tensor/cuda/kernels.h"
#include "tensor/math/optim.h"

namespace {

__global__ void sgd_k(size_t n, float lr, float mom, float wd, int nesterov, int first, float *w,
                      const float *g, float *buf)
{
    IABN_CUDA_GRID_LOOP(i, n) {
        float b = mom != 0.f ? buf[i] : 0.f;
        iabn_sgd_elem(lr, mom, wd, nesterov, first, &w[i], g[i], &b);
        if (mom != 0.f) buf[i] = b;
    }
}

} // namespace

extern "C" {

int iabn_cuda_sgd_update(iabn_cuda_ctx *ctx, size_t count, float lr, float momentum, float wd,
                         int nesterov, int first_step, float *w, const float *grad, float *buf,
                         iabn_err *e)
{
    IABN_CUDA_LAUNCH(sgd_k, count, count, lr, momentum, wd, nesterov, first_step, w, grad, buf);
}

} // extern "C"
