/* cpu/blas.c: which kernels OpenBLAS runs (tensor.h).
 *
 * Debian's OpenBLAS is built for every x86 core it knows and picks its
 * kernels when it is loaded, from the CPU or from OPENBLAS_CORETYPE.  The
 * native convolution paths (im2col, per-tap GEMMs) and the linear layers
 * run on it, so their speed depends on that choice: on a 2-core Zen 5, the
 * per-tap path's forward ran at 274 GFLOP/s with the Haswell (AVX2) kernels
 * and at 412 with the SkylakeX (AVX-512) ones (docs/CPU.md).  `iabn version`
 * and `iabn bench conv` print it. */
#include "tensor/tensor.h"

#include <cblas.h>

const char *iabn_blas_core(void)
{
    const char *c = openblas_get_corename();
    return c && *c ? c : "unknown";
}
