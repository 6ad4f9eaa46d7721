/* fuzz_safetensors.c: libFuzzer target for the safetensors reader.  Any input
 * must give either a clean error or a file whose every tensor can be read in
 * full through the typed copy-out helpers. */
#include "tensor/tensor.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    iabn_st_file *f = NULL;
    iabn_err e = {0};
    if (iabn_st_parse(data, size, &f, &e) != 0) {
        if (f || !e.msg[0]) abort();
        return 0;
    }
    for (int i = 0; i < iabn_st_count(f); i++) {
        const iabn_st_tensor *t = iabn_st_get(f, i);
        if (iabn_st_find(f, t->name) != t) abort();
        size_t n = t->nbytes / iabn_dtype_size((iabn_dtype)t->dtype);
        if (n > (1u << 20)) continue;
        float *dst = malloc((n ? n : 1) * sizeof *dst);
        if (!dst) continue;
        if (iabn_st_read_f32(t, dst, n, &e) != 0) abort();
        free(dst);
    }
    (void)iabn_st_meta(f, "format");
    iabn_st_free(f);
    return 0;
}
