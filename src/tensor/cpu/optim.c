/* cpu/optim.c: the SGD update over one parameter array, CPU (the per-element
 * formula is math/optim.h's, shared with cuda/optim.cu).  The step over a
 * whole store (scaling, clipping, learning-rate groups) is src/graph/optim.c.
 */
#include "tensor/tensor.h"
#include "tensor/math/optim.h"

/* Below this many elements a parallel region costs more than it saves. */
#define PAR_MIN ((size_t)1 << 15)

void iabn_sgd_update(size_t count, float lr, float momentum, float wd, int nesterov,
                     int first_step, float *w, float *grad, float *buf)
{
    /* a gradient stored in w or buf is their value now, not to be zeroed */
    int zero = grad != w && grad != buf;
#pragma omp parallel for schedule(static) if (count >= PAR_MIN)
    for (size_t i = 0; i < count; i++) {
        float dummy = 0.f;
        iabn_sgd_elem(lr, momentum, wd, nesterov, first_step, &w[i], grad[i],
                      momentum != 0.f ? &buf[i] : &dummy);
        if (zero) grad[i] = 0.f;
    }
}
