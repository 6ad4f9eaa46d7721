/* fake_cuda_module.c: a stand-in for libiabn_cuda.so as an incremental build
 * can leave it: compiled against a src/tensor/backend.h whose kernel table
 * was one entry shorter (test_cuda_module.c).  Only its sizes are read. */
#include "tensor/cuda/backend.h"

const iabn_cuda_api *iabn_cuda_api_get(void);

const iabn_cuda_api *iabn_cuda_api_get(void)
{
    static const iabn_cuda_api api = {
        .version = IABN_CUDA_API_VERSION,
        .backend_bytes = sizeof(iabn_backend),
        .kernels_bytes = sizeof(iabn_kernels) - sizeof(void *),
    };
    return &api;
}
