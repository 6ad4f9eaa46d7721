/* device.c: --device for the commands.  Everything CUDA-specific the tools
 * need is here (the one C file outside src/tensor/cuda/ that reads
 * IABN_HAVE_CUDA), so the commands themselves only see
 * an iabn_backend. */
#include "tensor/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iabn_config.h"
#include "tensor/cuda/backend.h"

int iabn_device_parse(const char *spec, iabn_device_kind *kind, int *index)
{
    *index = 0;
    if (!spec || !strcmp(spec, "cpu")) {
        *kind = IABN_DEV_CPU;
        return 0;
    }
    if (strncmp(spec, "cuda", 4)) return -1;
    *kind = IABN_DEV_CUDA;
    if (!spec[4]) return 0;
    if (spec[4] != ':' || !spec[5]) return -1;
    char *end;
    long v = strtol(spec + 5, &end, 10);
    if (*end || v < 0 || v > 1023) return -1;
    *index = (int)v;
    return 0;
}

#if !IABN_HAVE_CUDA
static int no_cuda(iabn_err *e)
{
    return iabn_err_set(e, IABN_EDEVICE, "this build of iabn has no CUDA backend (no CUDA "
                                         "toolkit with cuDNN was found when it was configured)");
}
#endif

int iabn_backend_available(iabn_device_kind kind, iabn_err *why)
{
    if (kind == IABN_DEV_CPU) return 1;
    if (kind != IABN_DEV_CUDA) {
        iabn_err_set(why, IABN_EINVAL, "unknown device kind %d (valid: cpu, cuda)", (int)kind);
        return 0;
    }
#if IABN_HAVE_CUDA
    int count = 0;
    return iabn_cuda_device_count(&count, why) == 0;
#else
    no_cuda(why);
    return 0;
#endif
}

const char *iabn_device_kind_name(int kind)
{
    switch (kind) {
    case IABN_DEV_CPU: return "cpu";
    case IABN_DEV_CUDA: return "cuda";
    }
    return NULL;
}

int iabn_device_open(const char *spec, iabn_device *d, iabn_err *e)
{
    memset(d, 0, sizeof *d);
    iabn_device_kind kind;
    int index;
    if (iabn_device_parse(spec, &kind, &index))
        return iabn_err_set(e, IABN_EINVAL, "--device must be cpu, cuda or cuda:N, not '%s'", spec);
    if (kind == IABN_DEV_CPU) {
        d->be = iabn_backend_cpu();
        snprintf(d->name, sizeof d->name, "cpu");
        return 0;
    }
#if IABN_HAVE_CUDA
    iabn_cuda_ctx *cu = NULL;
    int rc = iabn_cuda_ctx_new(index, &cu, e);
    if (rc) return iabn_err_prefix(e, "--device %s: ", spec);
    d->cuda = cu;
    d->be = iabn_cuda_backend(cu);
    char dev[128] = "?";
    iabn_err ignore = {0};
    iabn_cuda_device_name(cu, dev, sizeof dev, &ignore);
    snprintf(d->name, sizeof d->name, "cuda:%d %s", index, dev);
    return 0;
#else
    no_cuda(e);
    return iabn_err_prefix(e, "--device %s: ", spec);
#endif
}

void iabn_device_close(iabn_device *d)
{
#if IABN_HAVE_CUDA
    if (d->cuda) iabn_cuda_ctx_free((iabn_cuda_ctx *)d->cuda);
#endif
    memset(d, 0, sizeof *d);
}

/* MemAvailable of /proc/meminfo: what can be had without swapping. */
static size_t host_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return (size_t)1 << 40;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb ? kb * 1024 : (size_t)1 << 40;
}

/* Device memory the plan does not see (cuBLAS's workspace, cuDNN's
 * internal buffers) stays below this. */
#define CUDA_MARGIN ((size_t)256 << 20)

/* Free and total bytes of the GPU; both 0 on the CPU or when unreadable. */
static void gpu_mem(const iabn_device *d, size_t *free_b, size_t *total)
{
    *free_b = *total = 0;
#if IABN_HAVE_CUDA
    iabn_err e = {0};
    if (d->cuda && iabn_cuda_mem_info((iabn_cuda_ctx *)d->cuda, free_b, total, &e))
        *free_b = *total = 0;
#else
    (void)d;
#endif
}

size_t iabn_device_available(const iabn_device *d)
{
    if (!d->cuda) return host_available();
    size_t free_b, total;
    gpu_mem(d, &free_b, &total);
    return free_b > CUDA_MARGIN ? free_b - CUDA_MARGIN : 0;
}

size_t iabn_device_used(const iabn_device *d)
{
    size_t free_b, total;
    gpu_mem(d, &free_b, &total);
    return total - free_b;
}

int iabn_device_tf32(const iabn_device *d)
{
#if IABN_HAVE_CUDA
    if (d->cuda) return iabn_cuda_tf32((const iabn_cuda_ctx *)d->cuda);
#else
    (void)d;
#endif
    return 0;
}

size_t iabn_device_staging_bytes(const iabn_backend *be, size_t input_bytes)
{
    return be->kind == IABN_DEV_CUDA ? input_bytes : 0;
}

void iabn_device_host_allocator(const iabn_device *d, void *(**alloc)(size_t bytes, void *user),
                                void (**release)(void *ptr, void *user), void **user_out)
{
    *alloc = NULL;
    *release = NULL;
    *user_out = NULL;
#if IABN_HAVE_CUDA
    if (d->cuda) {
        *alloc = iabn_cuda_host_alloc;
        *release = iabn_cuda_host_free;
        *user_out = d->cuda;
    }
#else
    (void)d;
#endif
}

int iabn_device_planning_backend(const char *spec, const iabn_backend **be, iabn_err *e)
{
    iabn_device_kind kind;
    int index;
    if (iabn_device_parse(spec, &kind, &index))
        return iabn_err_set(e, IABN_EINVAL, "--device must be cpu, cuda or cuda:N, not '%s'", spec);
    if (kind == IABN_DEV_CPU) {
        *be = iabn_backend_cpu();
        return 0;
    }
#if IABN_HAVE_CUDA
    *be = iabn_cuda_backend_planning();
    return 0;
#else
    no_cuda(e);
    return iabn_err_prefix(e, "--device %s: ", spec);
#endif
}
