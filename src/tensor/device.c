/* device.c: opening a device by name.  The CUDA backend is a separate
 * library (libiabn_cuda.so, built when the toolkit, cuBLAS and cuDNN are
 * found) that this file loads on the first use of a CUDA device, so that a
 * CPU run never maps cudart, cuBLAS or cuDNN.  This is the one C file
 * outside src/tensor/cuda/ that reads IABN_HAVE_CUDA; the commands only see
 * an iabn_backend and iabn_backend_available(). */
#define _GNU_SOURCE /* dladdr */
#include "tensor/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iabn_config.h"
#include "tensor/cuda/backend.h"

#if IABN_HAVE_CUDA
#include <dlfcn.h>

/* The CUDA backend's entry points, from libiabn_cuda.so: the file beside
 * this library (build tree and install alike), or $IABN_CUDA_MODULE.  The
 * module is opened with RTLD_NODELETE and our reference dropped at once, so
 * it stays mapped for the process once loaded and the dynamic loader, not a
 * variable of ours, remembers it: a second call costs a lookup. */
static const iabn_cuda_api *cuda_api(iabn_err *e)
{
    char path[4096];
    const char *env = getenv("IABN_CUDA_MODULE");
    Dl_info self;
    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
    } else if (dladdr((void *)cuda_api, &self) && self.dli_fname && strrchr(self.dli_fname, '/')) {
        int dir = (int)(strrchr(self.dli_fname, '/') - self.dli_fname);
        snprintf(path, sizeof path, "%.*s/libiabn_cuda.so", dir, self.dli_fname);
    } else {
        snprintf(path, sizeof path, "libiabn_cuda.so");
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        iabn_err_set(e, IABN_EDEVICE, "the CUDA backend could not be loaded: %s", dlerror());
        return NULL;
    }
    const iabn_cuda_api *(*get)(void);
    void *sym = dlsym(h, "iabn_cuda_api_get");
    memcpy(&get, &sym, sizeof get);
    dlclose(h);
    if (!sym) {
        iabn_err_set(e, IABN_EDEVICE, "%s is not the CUDA backend of iabn (no iabn_cuda_api_get)",
                     path);
        return NULL;
    }
    const iabn_cuda_api *api = get();
    if (api->version != IABN_CUDA_API_VERSION) {
        iabn_err_set(e, IABN_EDEVICE, "%s speaks CUDA backend interface %d, this library %d",
                     path, api->version, IABN_CUDA_API_VERSION);
        return NULL;
    }
    if (api->backend_bytes != sizeof(iabn_backend) || api->kernels_bytes != sizeof(iabn_kernels)) {
        iabn_err_set(e, IABN_EDEVICE,
                     "%s was compiled against another src/tensor/backend.h (a backend of %zu "
                     "bytes and a kernel table of %zu, this library's %zu and %zu): rebuild it "
                     "(docs/GPU.md: an incremental build may miss the header change)",
                     path, api->backend_bytes, api->kernels_bytes, sizeof(iabn_backend),
                     sizeof(iabn_kernels));
        return NULL;
    }
    return api;
}
#else
static int no_cuda(iabn_err *e)
{
    return iabn_err_set(e, IABN_EDEVICE, "this build of iabn has no CUDA backend (no CUDA "
                                         "toolkit with cuDNN was found when it was configured)");
}

static const iabn_cuda_api *cuda_api(iabn_err *e)
{
    no_cuda(e);
    return NULL;
}
#endif

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

int iabn_backend_available(iabn_device_kind kind, iabn_err *why)
{
    if (kind == IABN_DEV_CPU) return 1;
    if (kind != IABN_DEV_CUDA) {
        iabn_err_set(why, IABN_EINVAL, "unknown device kind %d (valid: cpu, cuda)", (int)kind);
        return 0;
    }
    const iabn_cuda_api *api = cuda_api(why);
    int count = 0;
    return api && api->device_count(&count, why) == 0;
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
        int rc = iabn_cpu_backend_new(&d->be, e); /* its context caches conv primitives */
        if (rc) return iabn_err_prefix(e, "--device cpu: ");
        snprintf(d->name, sizeof d->name, "cpu");
        return 0;
    }
    const iabn_cuda_api *api = cuda_api(e);
    iabn_cuda_ctx *cu = NULL;
    if (!api || api->ctx_new(index, &cu, e)) return iabn_err_prefix(e, "--device %s: ", spec);
    d->cuda = cu;
    d->cuda_api = api;
    d->be = api->backend(cu);
    char dev[128] = "?";
    iabn_err ignore = {0};
    api->device_name(cu, dev, sizeof dev, &ignore);
    snprintf(d->name, sizeof d->name, "cuda:%d %s", index, dev);
    return 0;
}

int iabn_device_open_rank(const char *spec, int local_rank, int ranks, iabn_device *d,
                          iabn_err *e)
{
    char own[32];
    if (ranks > 1 && spec && !strcmp(spec, "cuda")) {
        snprintf(own, sizeof own, "cuda:%d", local_rank);
        spec = own;
    }
    return iabn_device_open(spec, d, e);
}

void iabn_device_close(iabn_device *d)
{
    if (d->cuda) d->cuda_api->ctx_free((iabn_cuda_ctx *)d->cuda);
    else if (d->be) iabn_cpu_backend_free(d->be);
    memset(d, 0, sizeof *d);
}

/* MemAvailable of /proc/meminfo: what can be had without swapping. */
size_t iabn_host_available(void)
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
    iabn_err e = {0};
    if (d->cuda && d->cuda_api->mem_info((iabn_cuda_ctx *)d->cuda, free_b, total, &e))
        *free_b = *total = 0;
}

size_t iabn_device_available(const iabn_device *d)
{
    if (!d->cuda) return iabn_host_available();
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
    return d->cuda ? d->cuda_api->tf32((const iabn_cuda_ctx *)d->cuda) : 0;
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
    if (d->cuda) {
        *alloc = d->cuda_api->host_alloc;
        *release = d->cuda_api->host_free;
        *user_out = d->cuda;
    }
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
    const iabn_cuda_api *api = cuda_api(e);
    if (!api) return iabn_err_prefix(e, "--device %s: ", spec);
    *be = api->backend_planning();
    return 0;
}
