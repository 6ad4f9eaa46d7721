/* test_data_ref.c: pixel agreement of decoding and the deterministic
 * transforms with PIL / torchvision.
 *
 * tests/fixtures/make_data_fixtures.py wrote the source images and what PIL
 * 9.4 and torchvision 0.14 make of them.  What we match: Image.open(..)
 * .convert("RGB") (except 16-bit gray, where PIL clips at 255 and we keep the
 * high byte), Image.resize with BILINEAR (PIL's antialiased filter, which is
 * what torchvision.transforms.Resize uses on PIL images, not plain bilinear
 * interpolation) and NEAREST, Image.crop, ToTensor + Normalize, and the
 * pipelines Resize + CenterCrop, TenCrop and resized_crop + hflip.  The
 * tolerance held is 1 level of 8 bits (the results are in fact identical).
 * The fused per-sample path is checked against the composition of the
 * separate operations for the geometry its draws give (iabn_transform_plan).
 */
#include "test_util.h"

#include "data/data.h"
#include "iabn.h"

#ifndef DATA_FIXTURE_DIR
#error "DATA_FIXTURE_DIR must be defined"
#endif

static iabn_st_file *fx;
static const float MEAN[3] = {0.485f, 0.456f, 0.406f}, STD[3] = {0.229f, 0.224f, 0.225f};

static const iabn_st_tensor *get(const char *name)
{
    const iabn_st_tensor *t = iabn_st_find(fx, name);
    CHECK_MSG(t != NULL, "fixture tensor %s missing", name);
    return t;
}

static void path_of(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", DATA_FIXTURE_DIR, name);
}

/* max |a - b| over n bytes */
static int max_diff_u8(const uint8_t *a, const uint8_t *b, size_t n)
{
    int m = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        if (d > m) m = d;
    }
    return m;
}

static int same_shape(const iabn_st_tensor *t, int h, int w, int c)
{
    return t && t->shape[0] == h && t->shape[1] == w && (t->ndim == 2 ? c == 1 : t->shape[2] == c);
}

static void test_decode_formats(void)
{
    static const char *const names[] = {
        "src_rgb.png",  "src_q90.jpg",     "src_444.jpg",        "src_prog.jpg",
        "src_gray.jpg", "src_cmyk.jpg",    "src_gray.png",       "src_pal.png",
        "src_rgba.png", "src_la.png",      "src_bw.png",         "src_gray16.png",
        "src_interlaced.png", "png_named.JPEG"};
    int worst = 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char p[512], key[128];
        path_of(p, sizeof p, names[i]);
        snprintf(key, sizeof key, "decode/%s", names[i]);
        iabn_image im;
        iabn_err e = {0};
        int rc = iabn_image_load(p, 0, &im, &e);
        CHECK_MSG(rc == 0, "%s: %s", names[i], e.msg);
        if (rc) continue;
        const iabn_st_tensor *t = get(key);
        CHECK_MSG(same_shape(t, im.height, im.width, 3), "%s: shape %dx%d", names[i], im.width,
                  im.height);
        if (t && same_shape(t, im.height, im.width, 3)) {
            int d = max_diff_u8(im.data, t->data, t->nbytes);
            CHECK_MSG(d <= 1, "%s: max diff %d against PIL", names[i], d);
            if (d > worst) worst = d;
        }
        iabn_image_free(&im);
    }
    fprintf(stderr, "  decoding vs PIL (%zu files): max diff %d level(s)\n",
            sizeof names / sizeof *names, worst);
}

static void test_probe(void)
{
    char p[512];
    path_of(p, sizeof p, "png_named.JPEG");
    uint8_t *buf = NULL;
    size_t len, cap = 0;
    iabn_err e = {0};
    CHECK(iabn_file_read(p, &buf, &len, &cap, &e) == 0);
    iabn_image_info info;
    CHECK(iabn_image_probe(buf, len, &info, &e) == 0);
    CHECK(info.format == IABN_IMAGE_PNG); /* magic bytes, not the name */
    CHECK(info.width == 61 && info.height == 45);
    path_of(p, sizeof p, "src_cmyk.jpg");
    CHECK(iabn_file_read(p, &buf, &len, &cap, &e) == 0);
    CHECK(iabn_image_probe(buf, len, &info, &e) == 0);
    CHECK(info.format == IABN_IMAGE_JPEG && info.cmyk && info.channels == 4);
    path_of(p, sizeof p, "src_gray16.png");
    CHECK(iabn_file_read(p, &buf, &len, &cap, &e) == 0);
    CHECK(iabn_image_probe(buf, len, &info, &e) == 0);
    CHECK(info.bit_depth == 16 && info.channels == 1);
    free(buf);
}

static void test_labels(void)
{
    static const char *const names[] = {"label_pal.png", "label_gray.png", "label_16.png"};
    for (int i = 0; i < 3; i++) {
        char p[512], key[128];
        path_of(p, sizeof p, names[i]);
        snprintf(key, sizeof key, "label/%s", names[i]);
        iabn_image im;
        iabn_err e = {0};
        int rc = iabn_label_load(p, &im, &e);
        CHECK_MSG(rc == 0, "%s: %s", names[i], e.msg);
        if (rc) continue;
        const iabn_st_tensor *t = get(key);
        CHECK(im.channels == 1 && im.depth == (i == 2 ? 2 : 1));
        if (!t || !same_shape(t, im.height, im.width, 1)) {
            CHECK(0);
        } else if (i == 2) {
            int64_t *want = malloc(sizeof(int64_t) * im.width * im.height);
            CHECK(iabn_st_read_i64(t, want, (size_t)im.width * im.height, &e) == 0);
            int bad = 0;
            for (int k = 0; k < im.width * im.height; k++) {
                uint16_t v;
                memcpy(&v, im.data + 2 * k, 2);
                bad += v != want[k];
            }
            CHECK_MSG(bad == 0, "16-bit label: %d values differ", bad);
            free(want);
        } else {
            CHECK(max_diff_u8(im.data, t->data, t->nbytes) == 0);
        }
        iabn_image_free(&im);
    }
    /* colour and lossy files are not labels */
    char p[512];
    iabn_image im;
    iabn_err e = {0};
    path_of(p, sizeof p, "src_rgb.png");
    CHECK(iabn_label_load(p, &im, &e) == IABN_EFORMAT);
    CHECK(strstr(e.msg, "src_rgb.png") != NULL);
    path_of(p, sizeof p, "src_q90.jpg");
    CHECK(iabn_label_load(p, &im, &e) == IABN_EFORMAT);
}

static void test_resize_bilinear(void)
{
    char p[512];
    path_of(p, sizeof p, "src_rgb.png");
    iabn_image src;
    iabn_err e = {0};
    CHECK(iabn_image_load(p, 0, &src, &e) == 0);
    static const int sizes[][2] = {{50, 40}, {150, 110}, {61, 30}, {20, 45},
                                   {80, 80}, {13, 7},    {59, 44}, {3, 90}};
    int worst = 0;
    for (int i = 0; i < 8; i++) {
        int w = sizes[i][0], h = sizes[i][1];
        char key[64];
        snprintf(key, sizeof key, "resize/%dx%d", w, h);
        iabn_image out;
        CHECK(iabn_image_resize(&src, w, h, IABN_RESAMPLE_BILINEAR, &out, &e) == 0);
        const iabn_st_tensor *t = get(key);
        if (t && same_shape(t, h, w, 3)) {
            int d = max_diff_u8(out.data, t->data, t->nbytes);
            if (d > worst) worst = d;
            CHECK_MSG(d <= 1, "bilinear %dx%d: max diff %d", w, h, d);
        }
        iabn_image_free(&out);
    }
    fprintf(stderr, "  bilinear resize vs PIL: max diff %d level(s)\n", worst);
    iabn_image_free(&src);
}

static void test_resize_nearest(void)
{
    char p[512];
    path_of(p, sizeof p, "label_pal.png");
    iabn_image src;
    iabn_err e = {0};
    CHECK(iabn_label_load(p, &src, &e) == 0);
    static const int sizes[][2] = {{50, 40}, {150, 110}, {61, 30}, {21, 45}, {80, 80}, {13, 7}};
    for (int i = 0; i < 6; i++) {
        int w = sizes[i][0], h = sizes[i][1];
        char key[64];
        snprintf(key, sizeof key, "nearest/%dx%d", w, h);
        iabn_image out;
        CHECK(iabn_image_resize(&src, w, h, IABN_RESAMPLE_NEAREST, &out, &e) == 0);
        const iabn_st_tensor *t = get(key);
        if (t && same_shape(t, h, w, 1))
            CHECK_MSG(max_diff_u8(out.data, t->data, t->nbytes) == 0, "nearest %dx%d", w, h);
        iabn_image_free(&out);
    }
    iabn_image_free(&src);
}

static void test_crop_and_chw(void)
{
    char p[512];
    path_of(p, sizeof p, "src_rgb.png");
    iabn_image src, out;
    iabn_err e = {0};
    CHECK(iabn_image_load(p, 0, &src, &e) == 0);
    CHECK(iabn_image_crop(&src, -5, 10, 40, 50, &out, &e) == 0);
    const iabn_st_tensor *t = get("crop/-5_10_40x50");
    if (t && same_shape(t, 50, 40, 3)) CHECK(max_diff_u8(out.data, t->data, t->nbytes) == 0);
    iabn_image_free(&out);
    size_t n = (size_t)3 * src.width * src.height;
    float *got = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
    iabn_image_to_chw(&src, MEAN, STD, got);
    CHECK(iabn_st_get_f32(fx, "chw/src_rgb.png", want, n, &e) == 0);
    CHECK_MSG(t_max_err(got, want, n, 1e-6, 0) <= 1, "ToTensor+Normalize differs");
    free(got);
    free(want);
    iabn_image_free(&src);
}

/* fused output (normalised floats) against 8-bit expected pixels [h][w][3] */
static double diff_levels(const float *got, const uint8_t *want, int h, int w)
{
    double worst = 0;
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < h * w; i++) {
            float ref = ((float)want[3 * i + c] / 255.0f - MEAN[c]) / STD[c];
            double d = fabs((double)got[(size_t)c * h * w + i] - ref) * STD[c] * 255.0;
            if (d > worst) worst = d;
        }
    return worst;
}

static int read_file(const char *name, uint8_t **buf, size_t *len)
{
    char p[512];
    path_of(p, sizeof p, name);
    size_t cap = 0;
    iabn_err e = {0};
    *buf = NULL;
    int rc = iabn_file_read(p, buf, len, &cap, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    return rc;
}

static void test_eval_pipelines(void)
{
    static const char *const names[] = {"src_rgb.png", "src_q90.jpg", "src_cmyk.jpg",
                                        "src_gray.png"};
    iabn_sample_ctx *ctx;
    iabn_err e = {0};
    CHECK(iabn_sample_ctx_new(&ctx, &e) == 0);
    for (int fast = 0; fast < 2; fast++)
        for (int i = 0; i < 4; i++) {
            uint8_t *buf;
            size_t len;
            if (read_file(names[i], &buf, &len)) continue;
            iabn_transform_cfg cfg;
            iabn_transform_defaults(&cfg, IABN_TF_CLASSIFY_EVAL);
            cfg.scale = 56;
            cfg.out_h = cfg.out_w = 48;
            cfg.fast_decode = fast;
            float out[3 * 48 * 48];
            char key[64];
            snprintf(key, sizeof key, "eval/%s", names[i]);
            CHECK(iabn_sample_classify(ctx, &cfg, buf, len, 1, 2, out, &e) == 0);
            const iabn_st_tensor *t = get(key);
            if (t) {
                double d = diff_levels(out, t->data, 48, 48);
                CHECK_MSG(d <= 1.001, "Resize+CenterCrop %s (fast %d): %.3f levels", names[i],
                          fast, d);
            }
            if (i < 2) { /* ten-crop */
                cfg.scale = 40;
                cfg.out_h = cfg.out_w = 32;
                cfg.ten_crop = 1;
                float ten[10 * 3 * 32 * 32];
                CHECK(iabn_transform_images_per_sample(&cfg) == 10);
                CHECK(iabn_sample_classify(ctx, &cfg, buf, len, 1, 2, ten, &e) == 0);
                snprintf(key, sizeof key, "tencrop/%s", names[i]);
                t = get(key);
                for (int k = 0; t && k < 10; k++) {
                    double d = diff_levels(ten + (size_t)k * 3 * 32 * 32,
                                           (const uint8_t *)t->data + (size_t)k * 32 * 32 * 3, 32,
                                           32);
                    CHECK_MSG(d <= 1.001, "TenCrop %s crop %d: %.3f levels", names[i], k, d);
                }
            }
            free(buf);
        }
    iabn_sample_ctx_free(ctx);
}

static void test_rrc_whole(void)
{
    static const char *const names[] = {"src_rgb.png", "src_q90.jpg", "src_cmyk.jpg",
                                        "src_gray.png"};
    iabn_sample_ctx *ctx;
    iabn_err e = {0};
    CHECK(iabn_sample_ctx_new(&ctx, &e) == 0);
    int flips = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t *buf;
        size_t len;
        if (read_file(names[i], &buf, &len)) continue;
        iabn_image_info info;
        CHECK(iabn_image_probe(buf, len, &info, &e) == 0);
        for (uint64_t key = 0; key < 4; key++) {
            iabn_transform_cfg cfg;
            iabn_transform_defaults(&cfg, IABN_TF_CLASSIFY_TRAIN);
            cfg.out_h = cfg.out_w = 40;
            cfg.rrc_scale[0] = cfg.rrc_scale[1] = 1.0f;
            cfg.rrc_ratio[0] = cfg.rrc_ratio[1] = (float)info.width / info.height;
            cfg.fast_decode = 0;
            iabn_sample_geom g;
            CHECK(iabn_transform_plan(&cfg, info.width, info.height, 7, key, &g, &e) == 0);
            CHECK(g.crop_x == 0 && g.crop_y == 0 && g.crop_w == info.width &&
                  g.crop_h == info.height);
            flips += g.flip;
            float out[3 * 40 * 40];
            CHECK(iabn_sample_classify(ctx, &cfg, buf, len, 7, key, out, &e) == 0);
            char k[64];
            snprintf(k, sizeof k, "%s/%s", g.flip ? "rrc_whole_flip" : "rrc_whole", names[i]);
            const iabn_st_tensor *t = get(k);
            if (t) {
                double d = diff_levels(out, t->data, 40, 40);
                CHECK_MSG(d <= 1.001, "resized_crop %s: %.3f levels", k, d);
            }
        }
        free(buf);
    }
    CHECK(flips > 0 && flips < 16); /* both branches seen */
    iabn_sample_ctx_free(ctx);
}

/* The transform from its plan through the separate operations. */
static int compose(const iabn_image *src, const iabn_sample_geom *g, iabn_image *out)
{
    iabn_err e = {0};
    iabn_image a, b;
    if (iabn_image_crop(src, g->crop_x, g->crop_y, g->crop_w, g->crop_h, &a, &e)) return -1;
    int rc = iabn_image_resize(&a, g->resized_w, g->resized_h,
                               src->depth == 1 && src->channels == 3 ? IABN_RESAMPLE_BILINEAR
                                                                      : IABN_RESAMPLE_NEAREST,
                               &b, &e);
    iabn_image_free(&a);
    if (rc) return rc;
    rc = iabn_image_crop(&b, g->win_x, g->win_y, g->win_w, g->win_h, out, &e);
    iabn_image_free(&b);
    if (!rc && g->flip) iabn_image_hflip(out);
    return rc;
}

static void test_fused_matches_ops(void)
{
    static const char *const names[] = {"src_q90.jpg", "src_rgb.png", "src_prog.jpg",
                                        "src_cmyk.jpg", "src_gray.jpg", "src_444.jpg"};
    iabn_sample_ctx *ctx;
    iabn_err e = {0};
    CHECK(iabn_sample_ctx_new(&ctx, &e) == 0);
    double dct_mean = 0;
    int dct_n = 0;
    for (int i = 0; i < 6; i++) {
        uint8_t *buf;
        size_t len;
        if (read_file(names[i], &buf, &len)) continue;
        iabn_image full;
        CHECK(iabn_image_decode(buf, len, 0, &full, &e) == 0);
        for (int mode = 0; mode < 3; mode++)
            for (uint64_t key = 0; key < 12; key++) {
                /* mode 0: exact; 1: fast, crops too small for DCT scaling (the
                 * region decode must then be exact); 2: fast with DCT scaling */
                iabn_transform_cfg cfg;
                iabn_transform_defaults(&cfg, IABN_TF_CLASSIFY_TRAIN);
                cfg.out_h = cfg.out_w = mode == 2 ? 12 : 40;
                cfg.fast_decode = mode > 0;
                if (key % 3 == 2) cfg.scale = mode == 2 ? 30 : 50; /* short side + crop */
                iabn_sample_geom g;
                CHECK(iabn_transform_plan(&cfg, full.width, full.height, 3, key, &g, &e) == 0);
                int ow = cfg.out_w;
                float out[3 * 40 * 40];
                CHECK(iabn_sample_classify(ctx, &cfg, buf, len, 3, key, out, &e) == 0);
                iabn_image ref;
                if (compose(&full, &g, &ref)) {
                    CHECK(0);
                    continue;
                }
                if (mode < 2) {
                    double d = diff_levels(out, ref.data, ow, ow);
                    CHECK_MSG(d <= 0.001, "%s key %d mode %d: fused differs by %.3f levels",
                              names[i], (int)key, mode, d);
                } else {
                    double s = 0;
                    for (int c = 0; c < 3; c++)
                        for (int k = 0; k < ow * ow; k++)
                            s += fabs(((double)out[c * ow * ow + k] * STD[c] + MEAN[c]) * 255 -
                                      ref.data[3 * k + c]);
                    dct_mean += s / (3.0 * ow * ow);
                    dct_n++;
                }
                iabn_image_free(&ref);
            }
        iabn_image_free(&full);
        free(buf);
    }
    /* DCT-domain downscaling is a different (box-like) filter: close, not equal */
    if (dct_n) dct_mean /= dct_n;
    fprintf(stderr, "  fast path with DCT scaling: mean |diff| %.2f levels\n", dct_mean);
    CHECK(dct_n > 0 && dct_mean < 6.0);
    iabn_sample_ctx_free(ctx);
}

static void test_segment_matches_ops(void)
{
    uint8_t *ib, *lb;
    size_t il, ll;
    if (read_file("src_rgb.png", &ib, &il) || read_file("label_pal.png", &lb, &ll)) return;
    iabn_err e = {0};
    iabn_image img, lab;
    CHECK(iabn_image_decode(ib, il, 0, &img, &e) == 0);
    CHECK(iabn_label_decode(lb, ll, &lab, &e) == 0);
    iabn_label_map map;
    for (int v = 0; v < 256; v++) map.lut[v] = v < 65 ? v : v == 65 ? 255 : -1;
    map.unknown_to_ignore = 0;
    iabn_sample_ctx *ctx;
    CHECK(iabn_sample_ctx_new(&ctx, &e) == 0);
    for (int kind = 0; kind < 2; kind++)
        for (uint64_t key = 0; key < 10; key++) {
            iabn_transform_cfg cfg;
            iabn_transform_defaults(&cfg, kind ? IABN_TF_SEGMENT_EVAL : IABN_TF_SEGMENT_TRAIN);
            cfg.out_h = kind ? 64 : 32;
            cfg.out_w = kind ? 64 : 48;
            if (kind) cfg.scale = key % 2 ? 0 : 64; /* whole, or longest side 64 */
            cfg.fast_decode = 0;
            int H = cfg.out_h, W = cfg.out_w;
            iabn_sample_geom g;
            CHECK(iabn_transform_plan(&cfg, img.width, img.height, 5, key, &g, &e) == 0);
            float *out = malloc(sizeof(float) * 3 * H * W);
            int32_t *lo = malloc(sizeof(int32_t) * H * W);
            int32_t vhw[2];
            int rc = iabn_sample_segment(ctx, &cfg, ib, il, lb, ll, &map, 5, key, out, lo, vhw,
                                         &e);
            CHECK_MSG(rc == 0, "%s", e.msg);
            iabn_image ri, rl;
            CHECK(compose(&img, &g, &ri) == 0);
            CHECK(compose(&lab, &g, &rl) == 0);
            CHECK(vhw[0] == g.win_h && vhw[1] == g.win_w);
            int bad = 0;
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++) {
                    int in = y < g.win_h && x < g.win_w;
                    int32_t want = in ? map.lut[rl.data[y * g.win_w + x]] : 255;
                    bad += lo[y * W + x] != want;
                    for (int c = 0; c < 3; c++) {
                        float ref = in ? ((float)ri.data[(y * g.win_w + x) * 3 + c] / 255.0f -
                                          MEAN[c]) / STD[c]
                                       : 0.0f;
                        bad += fabsf(out[(c * H + y) * W + x] - ref) > 1e-5f;
                    }
                }
            CHECK_MSG(bad == 0, "segmentation kind %d key %d: %d values differ", kind,
                      (int)key, bad);
            iabn_image_free(&ri);
            iabn_image_free(&rl);
            free(out);
            free(lo);
        }
    iabn_sample_ctx_free(ctx);
    iabn_image_free(&img);
    iabn_image_free(&lab);
    free(ib);
    free(lb);
}

int main(void)
{
    iabn_err e = {0};
    if (iabn_st_load(DATA_FIXTURE_DIR "/expected.safetensors", &fx, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    RUN(test_decode_formats);
    RUN(test_probe);
    RUN(test_labels);
    RUN(test_resize_bilinear);
    RUN(test_resize_nearest);
    RUN(test_crop_and_chw);
    RUN(test_eval_pipelines);
    RUN(test_rrc_whole);
    RUN(test_fused_matches_ops);
    RUN(test_segment_matches_ops);
    iabn_st_free(fx);
    return TEST_END();
}
