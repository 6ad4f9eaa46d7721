/* test_dnnl.h: the start the oneDNN convolution tests share (test_conv_dnnl,
 * test_conv_dnnl_flat, test_conv_winograd): skipped (77) in a build without
 * oneDNN, two threads, and where asked a plan cache for the test's calls. */
#ifndef IABN_TEST_DNNL_H
#define IABN_TEST_DNNL_H

#include "tensor/cpu/conv.h"
#include "tensor/tensor.h"
#include "test_util.h"

/* 0 when the test runs (*cache made if cache is given), 77 to skip it. */
static inline int t_dnnl_start(iabn_conv_cache **cache)
{
    if (!iabn_conv_have_dnnl()) {
        printf("SKIP: this build has no oneDNN\n");
        return 77;
    }
    iabn_set_num_threads(2);
    iabn_err e = {0};
    if (cache) CHECK_OK(iabn_conv_cache_new(cache, &e));
    return 0;
}

#endif
