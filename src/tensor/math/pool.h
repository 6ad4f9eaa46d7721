/* math/pool.h: the index arithmetic of windowed average pooling
 * (backend.h's avgpool_fwd / avgpool_bwd), shared by cpu/pool.c and
 * cuda/pool.cu (IABN_HD, math/hd.h).
 *
 * One axis at a time: `ncell` pooled cells, cell p averaging the window
 * [p * s, p * s + k) of the input; output o shows cell clamp(o - off, 0,
 * ncell - 1), so the first and last cells are repeated at the borders (the
 * DeepLabV3 head's replicate padding; off = 0 and nout = ncell for a plain
 * k x k / stride s pool). */
#ifndef IABN_MATH_POOL_H
#define IABN_MATH_POOL_H

#include "tensor/math/hd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* the pooled cell output o shows */
IABN_HD int iabn_avgwin_cell(int o, int off, int ncell)
{
    int p = o - off;
    return p < 0 ? 0 : p > ncell - 1 ? ncell - 1 : p;
}

/* the outputs [*lo, *hi) that show cell p (the inverse of iabn_avgwin_cell) */
IABN_HD void iabn_avgwin_outputs(int p, int off, int ncell, int nout, int *lo, int *hi)
{
    int a = p == 0 ? 0 : p + off, b = p == ncell - 1 ? nout : p + off + 1;
    *lo = a > nout ? nout : a;
    *hi = b > nout ? nout : b;
}

/* the cells [*lo, *hi) whose window [p * s, p * s + k) holds input r */
IABN_HD void iabn_avgwin_cells_over(int r, int k, int s, int ncell, int *lo, int *hi)
{
    int a = r - k + 1 <= 0 ? 0 : (r - k + s) / s, b = r / s + 1;
    *lo = a;
    *hi = b > ncell ? ncell : b;
}

#ifdef __cplusplus
}
#endif

#endif
