/* fuzz_checkpoint.c: libFuzzer target for what a checkpoint's metadata feeds:
 * the training position (epoch, steps, best metric), the BN gamma convention
 * (bn_gamma, bn_gamma.<name>) and the stored experiment config, read by the
 * checkpoint and weight loaders into a small store (a conv and a BN unit in
 * an in-place mode and in standard mode, so that conversions run both ways).
 * The input is the whole safetensors file; the loaders read files, so it is
 * written to a private temporary file first.  Every load either fails with a
 * message or loads whatever values the file held, but never traps. */
#include "iabn.h"
#include "models/train/checkpoint.h"
#include "models/train/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];

static iabn_store *unit_store(iabn_bn_mode mode)
{
    iabn_store *s = iabn_store_new(iabn_backend_cpu(), NULL);
    if (!s) abort();
    iabn_graph *g = iabn_graph_new(s, IABN_EVAL);
    int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){1, 3, 4, 4});
    int h = iabn_conv2d(g, "conv", x, 4, 1, 1, 0, 1, 1, 0);
    iabn_norm_act_cfg bn = iabn_norm_act_defaults(mode);
    if (iabn_norm_act(g, "bn", h, &bn) < 0) abort();
    iabn_graph_free(g);
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static iabn_store *st[2];
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/fuzz_checkpoint.%ld.safetensors", (long)getpid());
        st[0] = unit_store(IABN_BN_INPLACE_II);
        st[1] = unit_store(IABN_BN_STANDARD);
    }
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    size_t w = fwrite(data, 1, size, f);
    if (fclose(f) || w != size) return 0;
    for (int k = 0; k < 2; k++) {
        iabn_err e = {0};
        iabn_ckpt_pos pos;
        if (iabn_ckpt_load(st[k], path, 1, &pos, &e)) {
            if (!e.msg[0]) abort();
        } else if (pos.epoch < 0 || pos.step_in_epoch < 0 || pos.global_step < 0) {
            abort(); /* the loader refuses a negative position */
        }
        memset(&e, 0, sizeof e);
        if (iabn_weights_load(st[k], path, 0, &e) && !e.msg[0]) abort();
    }
    iabn_st_file *sf = NULL;
    iabn_err e = {0};
    if (iabn_st_parse(data, size, &sf, &e) == 0) {
        const char *cj = iabn_st_meta(sf, "config");
        iabn_config c;
        iabn_config_defaults(&c);
        if (cj && iabn_config_parse(&c, cj, "checkpoint config", &e) && !e.msg[0]) abort();
        iabn_st_free(sf);
    }
    unlink(path);
    return 0;
}
