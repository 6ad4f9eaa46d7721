/* cuda_ktrace.c: device time per kernel name for any CUDA program, without
 * Nsight Systems (the lent GPU machines have none; docs/GPU.md).
 *
 *     LD_PRELOAD=build-gpu/tools/libiabn_ktrace.so build-gpu/tools/iabn bench step ...
 *     LD_PRELOAD=... python3 tools/bench_step_torch.py ...   (PyTorch's kernels, the same way)
 *
 * A preloaded library: its constructor asks CUPTI for activity records of
 * every kernel, memset and memcpy of the process; its destructor flushes
 * them and writes one line per name to stderr (or to $IABN_KTRACE_OUT):
 * total microseconds, count, the mangled name (c++filt makes it readable).
 * The records' times are the device's own start and end stamps.  A run
 * includes its warm-up and its algorithm trials, so the steady state is
 * the difference of two runs that differ only in their step count
 * (tools/gpu_check.sh's `kernels` step does that). */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BUF_BYTES = 8 << 20, MAX_NAMES = 4096 };

typedef struct {
    char *name;
    uint64_t ns, count;
} ktrace_row;

/* One table per process, filled by CUPTI's buffer callback: a preloaded
 * probe has no context to hold it in (the only such state in the tree,
 * outside libiabn). */
static ktrace_row rows[MAX_NAMES];
static int nrows, dropped;

static void add(const char *name, uint64_t ns)
{
    for (int i = 0; i < nrows; i++)
        if (!strcmp(rows[i].name, name)) {
            rows[i].ns += ns;
            rows[i].count++;
            return;
        }
    char *copy = nrows < MAX_NAMES ? strdup(name) : NULL;
    if (!copy) {
        dropped++;
        return;
    }
    rows[nrows++] = (ktrace_row){copy, ns, 1};
}

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
    *buf = aligned_alloc(8, BUF_BYTES);
    *size = *buf ? BUF_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
                                      size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            add(k->name ? k->name : "?", k->end - k->start);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            add("[memset]", m->end - m->start);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            add(m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "[memcpy HtoD]"
                : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "[memcpy DtoH]"
                                                                 : "[memcpy other]",
                m->end - m->start);
        }
    }
    size_t lost = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &lost) == CUPTI_SUCCESS && lost)
        dropped += (int)lost;
    free(buf);
}

static void report(CUptiResult st, const char *what)
{
    const char *msg = NULL;
    cuptiGetResultString(st, &msg);
    fprintf(stderr, "ktrace: %s failed: %s\n", what, msg ? msg : "?");
}

__attribute__((constructor)) static void ktrace_start(void)
{
    CUptiResult st = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (st != CUPTI_SUCCESS) {
        report(st, "cuptiActivityRegisterCallbacks");
        return;
    }
    const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                        CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_MEMCPY};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if ((st = cuptiActivityEnable(kinds[i])) != CUPTI_SUCCESS) report(st, "cuptiActivityEnable");
}

static int by_time(const void *a, const void *b)
{
    const ktrace_row *x = a, *y = b;
    return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : 0;
}

__attribute__((destructor)) static void ktrace_stop(void)
{
    cuptiActivityFlushAll(1);
    const char *path = getenv("IABN_KTRACE_OUT");
    FILE *f = path && *path ? fopen(path, "w") : stderr;
    if (!f) {
        fprintf(stderr, "ktrace: cannot write %s\n", path);
        f = stderr;
    }
    qsort(rows, (size_t)nrows, sizeof rows[0], by_time);
    uint64_t total = 0;
    for (int i = 0; i < nrows; i++) total += rows[i].ns;
    fprintf(f, "# ktrace: %d names, %.3f ms of device time in all, %d records lost\n", nrows,
            (double)total / 1e6, dropped);
    for (int i = 0; i < nrows; i++) {
        fprintf(f, "%.1f\t%llu\t%s\n", (double)rows[i].ns / 1e3,
                (unsigned long long)rows[i].count, rows[i].name);
        free(rows[i].name);
    }
    if (f != stderr) fclose(f);
}
