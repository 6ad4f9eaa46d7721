/* cpu/backend.c: the CPU backend: host memory (64-byte aligned), copies
 * that are memmove, no streams.  A constant vtable with no state. */
#include "tensor/backend.h"
#include "tensor/tensor.h"

#include <string.h>

static void *cpu_alloc(void *ctx, size_t bytes)
{
    (void)ctx;
    return iabn_aligned_alloc(64, bytes);
}
static void cpu_free(void *ctx, void *p)
{
    (void)ctx;
    iabn_aligned_free(p);
}
static int cpu_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    if (bytes) memmove(dst, src, bytes);
    return 0;
}
static int cpu_fill(void *ctx, void *dst, int byte, size_t bytes)
{
    (void)ctx;
    if (bytes) memset(dst, byte, bytes);
    return 0;
}
static int cpu_sync(void *ctx)
{
    (void)ctx;
    return 0;
}

/* No copy stream: event and async members stay NULL (copies are memcpy). */
static const iabn_backend cpu_backend = {
    .kind = IABN_DEV_CPU, .name = "cpu", .align = 64, .ctx = NULL,
    .alloc = cpu_alloc, .free = cpu_free, .h2d = cpu_copy, .d2h = cpu_copy,
    .fill = cpu_fill, .sync = cpu_sync,
};

const iabn_backend *iabn_backend_cpu(void) { return &cpu_backend; }
