/* transform.c: per-sample augmentation, from file bytes to normalised floats.
 *
 * Every transform is first planned as geometry on the original image (which
 * source rectangle maps onto which output, and which window of that output
 * is kept), then rendered: the fast path decodes only the JPEG rows and
 * columns the window reads, at the coarsest DCT scale that still leaves at
 * least one source pixel per output pixel; the exact path decodes everything
 * and reproduces PIL/torchvision.  Colour jitter and lighting follow the
 * InPlace-ABN recipe (fb.resnet.torch style, on [0, 1] floats after ToTensor,
 * before Normalize).  The random draws of a sample come from (seed, key), so
 * they do not depend on which thread runs it or when.
 */
#include "data/data_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct iabn_sample_ctx {
    iabn_decode_scratch img, lbl;
    iabn_buf rgb;    /* rendered 8-bit window */
    iabn_buf lmap;   /* label mapped to train ids */
    iabn_buf lwin;   /* label window */
    iabn_buf flip;   /* flipped copy for ten-crop */
    iabn_buf coef, tmp;
};

int iabn_sample_ctx_new(iabn_sample_ctx **out, iabn_err *e)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return iabn_err_set(e, IABN_ENOMEM, "out of memory (sample context)");
    return 0;
}

void iabn_sample_ctx_free(iabn_sample_ctx *c)
{
    if (!c) return;
    iabn_buf *bufs[] = {&c->img.pixels, &c->img.row, &c->lbl.pixels, &c->lbl.row, &c->rgb,
                        &c->lmap, &c->lwin, &c->flip, &c->coef, &c->tmp};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) iabn_buf_free(bufs[i]);
    free(c);
}

/* ---- random draws ------------------------------------------------------------ */

uint64_t iabn_sample_key(int64_t epoch, int64_t index)
{
    return (uint64_t)epoch * 0x9E3779B97F4A7C15ull + (uint64_t)index;
}

double iabn_draw_u01(iabn_draw *d)
{
    return (double)(iabn_rng_u64(d->seed, d->key, d->n++) >> 11) * 0x1p-53;
}

double iabn_draw_uniform(iabn_draw *d, double lo, double hi)
{
    return lo + (hi - lo) * iabn_draw_u01(d);
}

int iabn_draw_int(iabn_draw *d, int lo, int hi)
{
    if (hi <= lo) return lo;
    int v = lo + (int)(iabn_draw_u01(d) * ((double)hi - lo + 1));
    return v > hi ? hi : v;
}

double iabn_draw_normal(iabn_draw *d)
{
    return iabn_rng_normal(d->seed, d->key, d->n++);
}

/* ---- configuration -------------------------------------------------------------- */

void iabn_transform_defaults(iabn_transform_cfg *c, iabn_transform_kind kind)
{
    static const float imagenet_mean[3] = {0.485f, 0.456f, 0.406f};
    static const float imagenet_std[3] = {0.229f, 0.224f, 0.225f};
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->rrc_scale[0] = 0.08f;
    c->rrc_scale[1] = 1.0f;
    c->rrc_ratio[0] = 3.0f / 4.0f;
    c->rrc_ratio[1] = 4.0f / 3.0f;
    c->seg_scale[0] = 0.7f;
    c->seg_scale[1] = 2.0f;
    memcpy(c->mean, imagenet_mean, sizeof c->mean);
    memcpy(c->std, imagenet_std, sizeof c->std);
    c->fast_decode = 1;
    switch (kind) {
    case IABN_TF_CLASSIFY_TRAIN:
        c->out_h = c->out_w = 224;
        c->hflip = 1;
        break;
    case IABN_TF_CLASSIFY_EVAL:
        c->out_h = c->out_w = 224;
        c->scale = 256;
        break;
    case IABN_TF_SEGMENT_TRAIN:
        c->out_h = c->out_w = 512;
        c->hflip = 1;
        break;
    case IABN_TF_SEGMENT_EVAL:
        c->out_h = 1024;
        c->out_w = 2048;
        break;
    }
}

int iabn_transform_check(const iabn_transform_cfg *c, iabn_err *e)
{
    if (c->kind < IABN_TF_CLASSIFY_TRAIN || c->kind > IABN_TF_SEGMENT_EVAL)
        return iabn_err_set(e, IABN_EINVAL, "transform: unknown kind %d", (int)c->kind);
    if (c->out_h <= 0 || c->out_w <= 0 || c->out_h > 16384 || c->out_w > 16384)
        return iabn_err_set(e, IABN_EINVAL, "transform: output size %dx%d out of range",
                            c->out_w, c->out_h);
    if (c->kind == IABN_TF_CLASSIFY_EVAL && c->scale < (c->out_h > c->out_w ? c->out_h
                                                                              : c->out_w))
        return iabn_err_set(e, IABN_EINVAL, "transform: scale_val %d smaller than the crop "
                            "%dx%d", c->scale, c->out_w, c->out_h);
    if (!(c->rrc_scale[0] > 0 && c->rrc_scale[0] <= c->rrc_scale[1] && c->rrc_ratio[0] > 0 &&
          c->rrc_ratio[0] <= c->rrc_ratio[1] && c->seg_scale[0] > 0 &&
          c->seg_scale[0] <= c->seg_scale[1]))
        return iabn_err_set(e, IABN_EINVAL, "transform: bad scale / ratio ranges");
    if (c->brightness < 0 || c->contrast < 0 || c->saturation < 0 || c->lighting_std < 0)
        return iabn_err_set(e, IABN_EINVAL, "transform: negative jitter or lighting");
    for (int i = 0; i < 3; i++)
        if (!(c->std[i] > 0) || !isfinite(c->mean[i]))
            return iabn_err_set(e, IABN_EINVAL, "transform: std[%d] must be > 0", i);
    return 0;
}

int iabn_transform_images_per_sample(const iabn_transform_cfg *c)
{
    return c->kind == IABN_TF_CLASSIFY_EVAL && c->ten_crop ? 10 : 1;
}

/* ---- geometry and rendering --------------------------------------------------------- */

/* Renders g's window as packed RGB8 (win_w x win_h) into c->rgb. */
static int render(iabn_sample_ctx *c, const uint8_t *bytes, size_t len,
                  const iabn_image_info *info, const iabn_sample_geom *g, int fast,
                  uint8_t **out, iabn_err *e)
{
    iabn_resample_job j;
    iabn_region r;
    int rc, sx0, sy0;
    int num = 8;
    if (info->format == IABN_IMAGE_JPEG && fast) {
        for (int k = 1; k < 8; k *= 2)
            if ((double)g->crop_w * k / 8 >= g->resized_w &&
                (double)g->crop_h * k / 8 >= g->resized_h) {
                num = k;
                break;
            }
    }
    if (num < 8) {
        /* DCT-scaled source: the whole scaled image, box scaled to it */
        double f = num / 8.0;
        iabn_resample_job_init(&j, iabn_jpeg_scaled(info->width, num),
                               iabn_jpeg_scaled(info->height, num), g->resized_w, g->resized_h);
        j.box[0] = g->crop_x * f;
        j.box[1] = g->crop_y * f;
        j.box[2] = (g->crop_x + g->crop_w) * f;
        j.box[3] = (g->crop_y + g->crop_h) * f;
        sx0 = sy0 = 0;
    } else {
        iabn_resample_job_init(&j, g->crop_w, g->crop_h, g->resized_w, g->resized_h);
        sx0 = g->crop_x;
        sy0 = g->crop_y;
    }
    j.win_x = g->win_x;
    j.win_y = g->win_y;
    j.win_w = g->win_w;
    j.win_h = g->win_h;
    if (info->format == IABN_IMAGE_JPEG && fast) {
        int x0, y0, x1, y1;
        iabn_resample_needs(&j, IABN_RESAMPLE_BILINEAR, &x0, &y0, &x1, &y1);
        rc = iabn_jpeg_decode_region(bytes, len, num, x0 + sx0, y0 + sy0, x1 + sx0, y1 + sy0,
                                     &c->img, &r, e);
    } else {
        rc = iabn_decode_into(bytes, len, 0, 0, &c->img, &r, e);
    }
    if (rc) return rc;
    uint8_t *dst = iabn_buf_reserve(&c->rgb, (size_t)g->win_w * g->win_h * 3);
    if (!dst) return iabn_err_set(e, IABN_ENOMEM, "out of memory (sample)");
    /* region pixel (x, y) of the (scaled) image is its data at (x - r.x0, y - r.y0);
     * the job's source starts at (sx0, sy0) of that image */
    rc = iabn_resample_run(&j, IABN_RESAMPLE_BILINEAR, r.img.data, r.x0 - sx0, r.y0 - sy0,
                       (size_t)r.img.width * 3, 3, 1, dst, (size_t)g->win_w * 3, &c->coef,
                       &c->tmp, e);
    if (rc) return rc;
    *out = dst;
    return 0;
}

/* ---- colour -------------------------------------------------------------------------- */

static const float eigval[3] = {0.2175f, 0.0188f, 0.0045f};
static const float eigvec[3][3] = {{-0.5675f, 0.7192f, 0.4009f},
                                   {-0.5808f, -0.0045f, -0.8140f},
                                   {-0.5836f, -0.6948f, 0.4203f}};

/* Jitter and lighting on the [0, 1] planes (h x w valid pixels, planes
 * `plane` floats apart, rows `row` floats apart). */
static void colour(const iabn_transform_cfg *cfg, iabn_draw *d, float *x, size_t plane,
                   int row, int w, int h)
{
    int ops[3], n = 0;
    if (cfg->brightness > 0) ops[n++] = 0;
    if (cfg->contrast > 0) ops[n++] = 1;
    if (cfg->saturation > 0) ops[n++] = 2;
    for (int i = n - 1; i > 0; i--) { /* random order */
        int k = iabn_draw_int(d, 0, i), t = ops[i];
        ops[i] = ops[k];
        ops[k] = t;
    }
    float *R = x, *G = x + plane, *B = x + 2 * plane;
    for (int o = 0; o < n; o++) {
        if (ops[o] == 0) {
            float a = (float)iabn_draw_uniform(d, -cfg->brightness, cfg->brightness);
            for (int y = 0; y < h; y++)
                for (int i = y * row; i < y * row + w; i++) {
                    R[i] -= a * R[i];
                    G[i] -= a * G[i];
                    B[i] -= a * B[i];
                }
        } else if (ops[o] == 1) {
            double sum = 0;
            for (int y = 0; y < h; y++)
                for (int i = y * row; i < y * row + w; i++)
                    sum += 0.299f * R[i] + 0.587f * G[i] + 0.114f * B[i];
            float m = (float)(sum / ((double)w * h));
            float a = (float)iabn_draw_uniform(d, -cfg->contrast, cfg->contrast);
            for (int y = 0; y < h; y++)
                for (int i = y * row; i < y * row + w; i++) {
                    R[i] += a * (m - R[i]);
                    G[i] += a * (m - G[i]);
                    B[i] += a * (m - B[i]);
                }
        } else {
            float a = (float)iabn_draw_uniform(d, -cfg->saturation, cfg->saturation);
            for (int y = 0; y < h; y++)
                for (int i = y * row; i < y * row + w; i++) {
                    float gs = 0.299f * R[i] + 0.587f * G[i] + 0.114f * B[i];
                    R[i] += a * (gs - R[i]);
                    G[i] += a * (gs - G[i]);
                    B[i] += a * (gs - B[i]);
                }
        }
    }
    if (cfg->lighting_std > 0) {
        float alpha[3], rgb[3];
        for (int k = 0; k < 3; k++) alpha[k] = (float)(iabn_draw_normal(d) * cfg->lighting_std);
        for (int c = 0; c < 3; c++)
            rgb[c] = eigvec[c][0] * alpha[0] * eigval[0] + eigvec[c][1] * alpha[1] * eigval[1] +
                     eigvec[c][2] * alpha[2] * eigval[2];
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < h; y++)
                for (int i = y * row; i < y * row + w; i++) x[c * plane + i] += rgb[c];
    }
}

/* RGB8 window (w x h) -> normalised float planes of an out_w x out_h canvas,
 * the window at its top-left (mirrored when flip), the rest 0 (the mean). */
static void finish(const iabn_transform_cfg *cfg, iabn_draw *d, const uint8_t *rgb, int w,
                   int h, int flip, float *out, int out_w, int out_h)
{
    size_t plane = (size_t)out_w * out_h;
    int jitter = cfg->brightness > 0 || cfg->contrast > 0 || cfg->saturation > 0 ||
                 cfg->lighting_std > 0;
    if (w < out_w || h < out_h) memset(out, 0, 3 * plane * sizeof(float));
    float lut[3][256];
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) {
            float x = (float)v / 255.0f;
            lut[c][v] = jitter ? x : (x - cfg->mean[c]) / cfg->std[c];
        }
    for (int y = 0; y < h; y++) {
        const uint8_t *s = rgb + (size_t)y * w * 3;
        float *r = out + (size_t)y * out_w, *g = r + plane, *b = g + plane;
        if (flip) {
            for (int x = 0; x < w; x++) {
                const uint8_t *p = s + (size_t)(w - 1 - x) * 3;
                r[x] = lut[0][p[0]];
                g[x] = lut[1][p[1]];
                b[x] = lut[2][p[2]];
            }
        } else {
            for (int x = 0; x < w; x++) {
                r[x] = lut[0][s[3 * x]];
                g[x] = lut[1][s[3 * x + 1]];
                b[x] = lut[2][s[3 * x + 2]];
            }
        }
    }
    if (!jitter) return;
    colour(cfg, d, out, plane, out_w, w, h);
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < h; y++) {
            float *p = out + c * plane + (size_t)y * out_w;
            for (int x = 0; x < w; x++) p[x] = (p[x] - cfg->mean[c]) / cfg->std[c];
        }
}

/* ---- classification ----------------------------------------------------------------- */

/* torchvision RandomResizedCrop.get_params, with our draws. */
static void rrc_params(const iabn_transform_cfg *cfg, iabn_draw *d, int W, int H,
                       iabn_sample_geom *g)
{
    double area = (double)W * H;
    double lr0 = log(cfg->rrc_ratio[0]), lr1 = log(cfg->rrc_ratio[1]);
    for (int t = 0; t < 10; t++) {
        double target = area * iabn_draw_uniform(d, cfg->rrc_scale[0], cfg->rrc_scale[1]);
        double ar = exp(iabn_draw_uniform(d, lr0, lr1));
        int ww = (int)rint(sqrt(target * ar)), hh = (int)rint(sqrt(target / ar));
        if (ww > 0 && ww <= W && hh > 0 && hh <= H) {
            g->crop_y = iabn_draw_int(d, 0, H - hh);
            g->crop_x = iabn_draw_int(d, 0, W - ww);
            g->crop_h = hh;
            g->crop_w = ww;
            return;
        }
    }
    double in_ratio = (double)W / H;
    int ww = W, hh = H;
    if (in_ratio < cfg->rrc_ratio[0]) {
        hh = (int)rint(ww / (double)cfg->rrc_ratio[0]);
    } else if (in_ratio > cfg->rrc_ratio[1]) {
        ww = (int)rint(hh * (double)cfg->rrc_ratio[1]);
    }
    if (hh > H) hh = H;
    if (ww > W) ww = W;
    g->crop_y = (H - hh) / 2;
    g->crop_x = (W - ww) / 2;
    g->crop_h = hh;
    g->crop_w = ww;
}

static void whole(iabn_sample_geom *g, int W, int H, int rw, int rh)
{
    memset(g, 0, sizeof *g);
    g->crop_w = W;
    g->crop_h = H;
    g->resized_w = g->win_w = rw;
    g->resized_h = g->win_h = rh;
}

/* The geometry part of a sample's draws; the colour draws follow in d. */
static int plan(const iabn_transform_cfg *cfg, int W, int H, iabn_draw *d, iabn_sample_geom *g,
                iabn_err *e)
{
    int ow = cfg->out_w, oh = cfg->out_h;
    if (W <= 0 || H <= 0) return iabn_err_set(e, IABN_EINVAL, "bad image size %dx%d", W, H);
    switch (cfg->kind) {
    case IABN_TF_CLASSIFY_TRAIN:
        if (cfg->scale > 0) {
            int nw, nh;
            iabn_resize_short_side(W, H, cfg->scale, &nw, &nh);
            whole(g, W, H, nw, nh);
            g->win_w = ow < nw ? ow : nw;
            g->win_h = oh < nh ? oh : nh;
            g->win_y = iabn_draw_int(d, 0, nh - g->win_h);
            g->win_x = iabn_draw_int(d, 0, nw - g->win_w);
        } else {
            whole(g, W, H, ow, oh);
            rrc_params(cfg, d, W, H, g);
        }
        g->flip = cfg->hflip && iabn_draw_u01(d) < 0.5;
        return 0;
    case IABN_TF_CLASSIFY_EVAL: {
        int nw, nh, x, y;
        iabn_resize_short_side(W, H, cfg->scale, &nw, &nh);
        whole(g, W, H, nw, nh);
        if (!cfg->ten_crop) {
            /* scale >= crop (checked), so the centre crop lies inside */
            iabn_center_crop_offset(nw, nh, ow, oh, &x, &y);
            g->win_x = x;
            g->win_y = y;
            g->win_w = ow;
            g->win_h = oh;
        }
        return 0;
    }
    case IABN_TF_SEGMENT_TRAIN:
    case IABN_TF_SEGMENT_EVAL: {
        int train = cfg->kind == IABN_TF_SEGMENT_TRAIN;
        double f = cfg->scale > 0 ? (double)cfg->scale / (W > H ? W : H) : 1.0;
        if (train) f *= iabn_draw_uniform(d, cfg->seg_scale[0], cfg->seg_scale[1]);
        int sw = (int)(W * f + 0.5), sh = (int)(H * f + 0.5);
        if (sw < 1) sw = 1;
        if (sh < 1) sh = 1;
        whole(g, W, H, sw, sh);
        if (train) {
            g->win_w = sw < ow ? sw : ow;
            g->win_h = sh < oh ? sh : oh;
            g->win_x = iabn_draw_int(d, 0, sw - g->win_w);
            g->win_y = iabn_draw_int(d, 0, sh - g->win_h);
            g->flip = cfg->hflip && iabn_draw_u01(d) < 0.5;
        } else if (sw > ow || sh > oh) {
            return iabn_err_set(e, IABN_EINVAL, "image is %dx%d after resizing, larger than "
                                "the %dx%d evaluation canvas", sw, sh, ow, oh);
        }
        return 0;
    }
    }
    return iabn_err_set(e, IABN_EINVAL, "transform: unknown kind %d", (int)cfg->kind);
}

int iabn_transform_plan(const iabn_transform_cfg *cfg, int width, int height, uint64_t seed,
                        uint64_t key, iabn_sample_geom *out, iabn_err *e)
{
    iabn_draw d = {seed, key, 0};
    return plan(cfg, width, height, &d, out, e);
}

static int classify_ten(iabn_sample_ctx *c, const iabn_transform_cfg *cfg, const uint8_t *b,
                        size_t len, const iabn_image_info *info, const iabn_sample_geom *g,
                        iabn_draw *d, float *out, iabn_err *e)
{
    int ow = cfg->out_w, oh = cfg->out_h, nw = g->resized_w, nh = g->resized_h, x, y;
    uint8_t *rgb = NULL;
    int rc = render(c, b, len, info, g, cfg->fast_decode, &rgb, e);
    if (rc) return rc;
    uint8_t *crop = iabn_buf_reserve(&c->flip, (size_t)ow * oh * 3);
    if (!crop) return iabn_err_set(e, IABN_ENOMEM, "out of memory (ten-crop)");
    iabn_center_crop_offset(nw, nh, ow, oh, &x, &y);
    /* torchvision TenCrop: tl, tr, bl, br, centre, then the same five crops of
     * the flipped image, which are the mirrored crops at mirrored places */
    const int cx[5] = {0, nw - ow, 0, nw - ow, x}, cy[5] = {0, 0, nh - oh, nh - oh, y};
    size_t per = (size_t)3 * ow * oh;
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < 5; k++) {
            int x0 = f ? nw - ow - cx[k] : cx[k], y0 = cy[k];
            for (int r = 0; r < oh; r++)
                memcpy(crop + (size_t)r * ow * 3, rgb + ((size_t)(y0 + r) * nw + x0) * 3,
                       (size_t)ow * 3);
            finish(cfg, d, crop, ow, oh, f, out + (size_t)(f * 5 + k) * per, ow, oh);
        }
    return 0;
}

int iabn_sample_classify(iabn_sample_ctx *c, const iabn_transform_cfg *cfg, const void *bytes,
                         size_t len, uint64_t seed, uint64_t key, float *out, iabn_err *e)
{
    if (cfg->kind != IABN_TF_CLASSIFY_TRAIN && cfg->kind != IABN_TF_CLASSIFY_EVAL)
        return iabn_err_set(e, IABN_EINVAL, "iabn_sample_classify: not a classification "
                            "transform");
    iabn_image_info info;
    int rc = iabn_image_probe(bytes, len, &info, e);
    if (rc) return rc;
    iabn_draw d = {seed, key, 0};
    iabn_sample_geom g;
    rc = plan(cfg, info.width, info.height, &d, &g, e);
    if (rc) return rc;
    if (cfg->kind == IABN_TF_CLASSIFY_EVAL && cfg->ten_crop)
        return classify_ten(c, cfg, bytes, len, &info, &g, &d, out, e);
    uint8_t *rgb = NULL;
    rc = render(c, bytes, len, &info, &g, cfg->fast_decode, &rgb, e);
    if (rc) return rc;
    finish(cfg, &d, rgb, g.win_w, g.win_h, g.flip, out, cfg->out_w, cfg->out_h);
    return 0;
}

/* ---- segmentation --------------------------------------------------------------------- */

/* Label file -> train ids (8-bit, same size as the image). */
static int map_label(iabn_sample_ctx *c, const uint8_t *bytes, size_t len,
                     const iabn_label_map *map, int W, int H, uint8_t **out, iabn_err *e)
{
    iabn_region r;
    int rc = iabn_decode_into(bytes, len, 1, 0, &c->lbl, &r, e);
    if (rc) return iabn_err_prefix(e, "label: ");
    if (r.img.width != W || r.img.height != H)
        return iabn_err_set(e, IABN_EINVAL, "label is %dx%d but its image is %dx%d",
                            r.img.width, r.img.height, W, H);
    size_t n = (size_t)W * H;
    uint8_t *m = iabn_buf_reserve(&c->lmap, n);
    if (!m) return iabn_err_set(e, IABN_ENOMEM, "out of memory (label)");
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (r.img.depth == 2) {
            uint16_t u;
            memcpy(&u, r.img.data + 2 * i, 2);
            v = u;
        } else {
            v = r.img.data[i];
        }
        int t = v < 256 ? map->lut[v] : -1;
        if (t < 0) {
            if (!map->unknown_to_ignore)
                return iabn_err_set(e, IABN_EINVAL, "label has unknown class id %u at "
                                    "(x=%zu, y=%zu)", v, i % (size_t)W, i / (size_t)W);
            t = IABN_IGNORE_LABEL;
        }
        m[i] = (uint8_t)t;
    }
    *out = m;
    return 0;
}

int iabn_sample_segment(iabn_sample_ctx *c, const iabn_transform_cfg *cfg,
                        const void *img_bytes, size_t img_len, const void *lbl_bytes,
                        size_t lbl_len, const iabn_label_map *map, uint64_t seed,
                        uint64_t key, float *out, int32_t *labels, int32_t valid_hw[2],
                        iabn_err *e)
{
    if (cfg->kind != IABN_TF_SEGMENT_TRAIN && cfg->kind != IABN_TF_SEGMENT_EVAL)
        return iabn_err_set(e, IABN_EINVAL, "iabn_sample_segment: not a segmentation "
                            "transform");
    iabn_image_info info;
    int rc = iabn_image_probe(img_bytes, img_len, &info, e);
    if (rc) return rc;
    iabn_draw d = {seed, key, 0};
    int W = info.width, H = info.height, ow = cfg->out_w, oh = cfg->out_h;
    iabn_sample_geom g;
    rc = plan(cfg, W, H, &d, &g, e);
    if (rc) return rc;
    uint8_t *lm = NULL;
    rc = map_label(c, lbl_bytes, lbl_len, map, W, H, &lm, e);
    if (rc) return rc;
    uint8_t *rgb = NULL;
    rc = render(c, img_bytes, img_len, &info, &g, cfg->fast_decode, &rgb, e);
    if (rc) return rc;
    finish(cfg, &d, rgb, g.win_w, g.win_h, g.flip, out, ow, oh);

    iabn_resample_job j;
    iabn_resample_job_init(&j, W, H, g.resized_w, g.resized_h);
    j.win_x = g.win_x;
    j.win_y = g.win_y;
    j.win_w = g.win_w;
    j.win_h = g.win_h;
    uint8_t *lw = iabn_buf_reserve(&c->lwin, (size_t)g.win_w * g.win_h);
    if (!lw) return iabn_err_set(e, IABN_ENOMEM, "out of memory (label)");
    rc = iabn_resample_run(&j, IABN_RESAMPLE_NEAREST, lm, 0, 0, (size_t)W, 1, 1, lw,
                       (size_t)g.win_w, &c->coef, &c->tmp, e);
    if (rc) return rc;
    for (int y = 0; y < oh; y++) {
        int32_t *o = labels + (size_t)y * ow;
        if (y >= g.win_h) {
            for (int x = 0; x < ow; x++) o[x] = IABN_IGNORE_LABEL;
            continue;
        }
        const uint8_t *s = lw + (size_t)y * g.win_w;
        for (int x = 0; x < g.win_w; x++) o[x] = s[g.flip ? g.win_w - 1 - x : x];
        for (int x = g.win_w; x < ow; x++) o[x] = IABN_IGNORE_LABEL;
    }
    valid_hw[0] = g.win_h;
    valid_hw[1] = g.win_w;
    return 0;
}
