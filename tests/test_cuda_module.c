/* test_cuda_module.c: a CUDA module compiled against another backend.h is
 * refused with a message that says so, not called through a shifted kernel
 * table (which crashed `iabn mem --device cuda` after an incremental build:
 * src/tensor/device.c).  IABN_CUDA_MODULE names fake_cuda_module.c's build. */
#include <string.h>

#include "graph_test_util.h"
#include "tensor/device.h"

static void test_stale_module_refused(void)
{
    iabn_err e = {0};
    iabn_device d;
    int rc = iabn_device_open("cuda", &d, &e);
    CHECK_MSG(rc == IABN_EDEVICE, "open gave %d: %s", rc, e.msg);
    CHECK_MSG(strstr(e.msg, "compiled against another src/tensor/backend.h") != NULL, "%s",
              e.msg);
    if (!rc) iabn_device_close(&d);
}

int main(void)
{
    RUN(test_stale_module_refused);
    return TEST_END();
}
