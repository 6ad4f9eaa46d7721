/* math/optim.h: the SGD update per element, shared by cpu/optim.c and
 * cuda/optim.cu.  IABN_HD conventions: math/hd.h.
 */
#ifndef IABN_MATH_OPTIM_H
#define IABN_MATH_OPTIM_H

#include "tensor/math/hd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- SGD ---------------------------------------------------------------------
 * PyTorch's torch.optim.SGD (dampening 0) for one element:
 *   g = grad + wd*w; buf = first ? g : momentum*buf + g;
 *   step = nesterov ? g + momentum*buf : buf; w -= lr*step.
 * momentum == 0 leaves buf untouched (it may point anywhere then). */
IABN_HD void iabn_sgd_elem(float lr, float momentum, float wd, int nesterov, int first,
                           float *w, float grad, float *buf)
{
    float g = grad + wd * *w;
    float step = g;
    if (momentum != 0.f) {
        float b = first ? g : momentum * *buf + g;
        *buf = b;
        step = nesterov ? g + momentum * b : b;
    }
    *w = *w - lr * step;
}

#ifdef __cplusplus
}
#endif
#endif
