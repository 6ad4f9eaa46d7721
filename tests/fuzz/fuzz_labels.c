/* fuzz_labels.c: libFuzzer target for the label side: the Vistas config.json
 * parser, label-map decoding (palette / 8-bit / 16-bit PNG, PGM) and the
 * segmentation transform with the Cityscapes and a Vistas id table (unknown
 * ids must be clean errors).  The input is tried as each. */
#include "data/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    iabn_err e = {0};
    iabn_label_map vmap;
    int ncls = 0;
    char **names = NULL;
    if (iabn_vistas_config_parse((const char *)data, size, &vmap, &ncls, &names, &e) == 0) {
        if (ncls < 1 || ncls > 255 || !names) abort();
        for (int i = 0; i < 256; i++)
            if (vmap.lut[i] < -1 || vmap.lut[i] > 255) abort();
        for (int i = 0; i < ncls; i++) {
            if (!names[i]) abort();
            free(names[i]);
        }
        free(names);
    } else {
        if (!e.msg[0]) abort();
        for (int i = 0; i < 256; i++) vmap.lut[i] = i < 20 ? (int16_t)i : -1;
        vmap.unknown_to_ignore = 0;
    }

    iabn_image_info info;
    if (iabn_image_probe(data, size, &info, &e) || (int64_t)info.width * info.height > (1 << 18))
        return 0;
    iabn_image lab;
    if (iabn_label_decode(data, size, &lab, &e)) {
        if (!e.msg[0]) abort();
        return 0;
    }
    /* an image of the label's size, as binary PPM */
    size_t px = (size_t)lab.width * lab.height;
    char head[64];
    int hn = snprintf(head, sizeof head, "P6 %d %d 255\n", lab.width, lab.height);
    uint8_t *ppm = malloc((size_t)hn + 3 * px);
    iabn_sample_ctx *ctx = NULL;
    float *img = malloc(sizeof(float) * 3 * 20 * 28);
    int32_t *ids = malloc(sizeof(int32_t) * 20 * 28);
    if (ppm && img && ids && !iabn_sample_ctx_new(&ctx, &e)) {
        memcpy(ppm, head, (size_t)hn);
        for (size_t i = 0; i < 3 * px; i++) ppm[hn + i] = (uint8_t)(i * 7);
        iabn_label_map cmap;
        iabn_cityscapes_label_map(&cmap);
        for (int k = 0; k < 2; k++) {
            iabn_transform_cfg cfg;
            iabn_transform_defaults(&cfg, IABN_TF_SEGMENT_TRAIN);
            cfg.out_h = 20;
            cfg.out_w = 28;
            int32_t hw[2];
            int rc = iabn_sample_segment(ctx, &cfg, ppm, (size_t)hn + 3 * px, data, size,
                                         k ? &vmap : &cmap, 3, (uint64_t)size, img, ids, hw, &e);
            if (rc && !e.msg[0]) abort();
            if (!rc)
                for (int i = 0; i < 20 * 28; i++)
                    if (ids[i] < 0 || ids[i] > 255) abort();
            if (!k && rc) abort(); /* Cityscapes maps every id; the pair is consistent */
        }
    }
    iabn_sample_ctx_free(ctx);
    free(ppm);
    free(img);
    free(ids);
    iabn_image_free(&lab);
    return 0;
}
