/* math/upsample.h: PyTorch's bilinear source index (align_corners = false),
 * shared by cpu/upsample.c and cuda/upsample.cu.  IABN_HD conventions:
 * math/hd.h.
 */
#ifndef IABN_MATH_UPSAMPLE_H
#define IABN_MATH_UPSAMPLE_H

#include "tensor/math/hd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- bilinear, align_corners = false ---------------------------------------
 * PyTorch's CPU formula (area_pixel_compute_scale / _source_index): the scale
 * in/out is a float, but the source coordinate scale*(dst+0.5)-0.5 is
 * evaluated in double (dst + 0.5 is a double expression there) and the
 * weight is taken from it before rounding to float.  Computing it in float
 * instead moves weights by an ulp of the coordinate (~1e-6 at 16), which
 * shows at 1e-5 against F.interpolate.  Negative coordinates clamp to 0
 * (border pixels copy the edge); the second tap repeats the first on the last
 * row/column.  The cost is per output row/column, not per element. */
IABN_HD float iabn_bilinear_scale(int in, int out)
{
    return (float)in / (float)out;
}

IABN_HD void iabn_bilinear_src(float scale, int in, int dst, int *i0, int *i1, float *l0,
                               float *l1)
{
    double src = (double)scale * ((double)dst + 0.5) - 0.5;
    if (src < 0.0) src = 0.0;
    int i = (int)src;
    if (i > in - 1) i = in - 1;
    double lambda = src - (double)i;
    if (lambda > 1.0) lambda = 1.0;
    *i0 = i;
    *i1 = i + (i < in - 1 ? 1 : 0);
    *l1 = (float)lambda;
    *l0 = 1.f - (float)lambda;
}

#ifdef __cplusplus
}
#endif
#endif
