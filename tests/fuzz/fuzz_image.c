/* fuzz_image.c: libFuzzer target for the image decoders (JPEG, PNG, PNM) and
 * the fused per-sample transforms behind them (region and DCT-scaled JPEG
 * decoding, the windowed resampler, ten-crop).  Any input must give a clean
 * error (with a message) or a well-formed image; nothing may crash. */
#include "data/data.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void decoded(int rc, iabn_image *im, const iabn_err *e, int channels)
{
    if (rc) {
        if (!e->msg[0]) abort();
        return;
    }
    if (im->width <= 0 || im->height <= 0 || !im->data) abort();
    if (channels && im->channels != channels) abort();
    iabn_image_free(im);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    iabn_err e = {0};
    iabn_image_info info;
    if (iabn_image_probe(data, size, &info, &e)) {
        if (!e.msg[0]) abort();
        return 0;
    }
    /* big declared sizes only cost time, not coverage */
    if ((int64_t)info.width * info.height > (1 << 20)) return 0;
    iabn_image im;
    decoded(iabn_image_decode(data, size, 0, &im, &e), &im, &e, 3);
    decoded(iabn_image_decode(data, size, 7, &im, &e), &im, &e, 3);
    decoded(iabn_label_decode(data, size, &im, &e), &im, &e, 1);

    iabn_sample_ctx *ctx;
    if (iabn_sample_ctx_new(&ctx, &e)) return 0;
    float *out = malloc(sizeof(float) * 10 * 3 * 24 * 24);
    iabn_transform_cfg cfg;
    for (int k = 0; k < 3 && out; k++) {
        iabn_transform_defaults(&cfg, IABN_TF_CLASSIFY_TRAIN);
        cfg.out_h = cfg.out_w = k == 2 ? 4 : 24; /* 4: crops allow DCT scaling */
        if (k == 1) cfg.scale = 30;
        cfg.brightness = cfg.contrast = cfg.saturation = 0.4f;
        cfg.lighting_std = 0.1f;
        if (iabn_sample_classify(ctx, &cfg, data, size, 1, (uint64_t)size + k, out, &e) &&
            !e.msg[0])
            abort();
    }
    if (out) {
        iabn_transform_defaults(&cfg, IABN_TF_CLASSIFY_EVAL);
        cfg.scale = 28;
        cfg.out_h = cfg.out_w = 24;
        cfg.ten_crop = 1;
        if (iabn_sample_classify(ctx, &cfg, data, size, 1, 0, out, &e) && !e.msg[0]) abort();
    }
    free(out);
    iabn_sample_ctx_free(ctx);
    return 0;
}
