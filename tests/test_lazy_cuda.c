/* test_lazy_cuda.c: CPU work never maps a CUDA library (the CUDA backend is
 * loaded on the first use of a CUDA device, src/tensor/device.c), and in a
 * build with the CUDA backend that first use does load it. */
#include "graph_test_util.h"
#include "tensor/device.h"

/* Whether a mapping of the process names a file containing `lib`. */
static int mapped(const char *lib)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[1024];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, lib) != NULL;
    fclose(f);
    return found;
}

static void test_cpu_maps_no_cuda(void)
{
    iabn_err e = {0};
    iabn_device d;
    CHECK_OK(iabn_device_open("cpu", &d, &e));
    /* a small training step on the CPU device */
    iabn_store *s = iabn_store_new(d.be, &e);
    iabn_graph *g = iabn_graph_new(s, IABN_TRAIN);
    int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){2, 3, 8, 8});
    int lab = iabn_graph_input(g, "labels", IABN_I32, 1, (int[]){2});
    iabn_norm_act_cfg bn = iabn_norm_act_defaults(IABN_BN_INPLACE_II);
    int y = iabn_conv2d(g, "conv", x, 4, 3, 1, 1, 1, 1, 0);
    y = iabn_norm_act(g, "bn", y, &bn);
    y = iabn_global_avgpool(g, "gap", y);
    y = iabn_linear(g, "fc", y, 5, 1);
    int loss = iabn_softmax_xent(g, "loss", y, lab, 255, 1.f);
    CHECK_OK(iabn_graph_backward(g, loss, &e));
    CHECK_OK(iabn_graph_finalize(g, &e));
    iabn_plan *p = NULL;
    CHECK_OK(iabn_plan_build(g, NULL, &p, &e));
    iabn_exec *ex = NULL;
    CHECK_OK(iabn_exec_new(g, p, &ex, &e));
    CHECK_OK(iabn_exec_run(ex, &e));
    iabn_exec_free(ex);
    iabn_plan_free(p);
    iabn_graph_free(g);
    iabn_store_free(s);
    CHECK(iabn_backend_available(IABN_DEV_CPU, NULL));
    iabn_device_close(&d);
    const char *libs[] = {"libcudart", "libcublas", "libcudnn", "libiabn_cuda", "libcuda.so"};
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++)
        CHECK_MSG(mapped(libs[i]) == 0, "%s is mapped after CPU work only", libs[i]);
}

/* Asking for CUDA loads the backend when the build has one, and otherwise
 * says the build has none. */
static void test_cuda_loaded_on_use(void)
{
    iabn_err e = {0};
    const iabn_backend *be = NULL;
    int rc = iabn_device_planning_backend("cuda", &be, &e);
    if (rc == 0) {
        CHECK(be && be->kind == IABN_DEV_CUDA);
        CHECK(mapped("libiabn_cuda") == 1);
    } else {
        CHECK_MSG(strstr(e.msg, "no CUDA backend") != NULL, "%s", e.msg);
        CHECK(mapped("libiabn_cuda") == 0);
    }
}

/* Under several ranks a bare "cuda" opens the rank's own GPU, cuda:<local
 * rank>; one rank, or a numbered spec, opens what it names.  Opened, the
 * device's name starts with `name`; not (no such GPU, or no CUDA), the error
 * names the spec that was opened, `spec_opened`. */
static void open_rank_names(const char *spec, int local, int ranks, const char *spec_opened,
                            const char *name)
{
    iabn_err e = {0};
    iabn_device d;
    if (iabn_device_open_rank(spec, local, ranks, &d, &e) == 0) {
        CHECK_MSG(!strncmp(d.name, name, strlen(name)), "%s at rank %d of %d opened %s", spec,
                  local, ranks, d.name);
        iabn_device_close(&d);
    } else {
        char msg[64];
        snprintf(msg, sizeof msg, "--device %s: ", spec_opened);
        CHECK_MSG(strstr(e.msg, msg), "%s at rank %d of %d: %s", spec, local, ranks, e.msg);
    }
}

/* last: it may load the CUDA backend */
static void test_open_rank(void)
{
    open_rank_names("cuda", 1, 2, "cuda:1", "cuda:1");
    open_rank_names("cuda:0", 1, 2, "cuda:0", "cuda:0");
    open_rank_names("cuda", 1, 1, "cuda", "cuda:0");
    open_rank_names("cpu", 1, 2, "cpu", "cpu");
}

int main(void)
{
    iabn_set_num_threads(2);
    RUN(test_cpu_maps_no_cuda);
    RUN(test_cuda_loaded_on_use);
    RUN(test_open_rank);
    return TEST_END();
}
