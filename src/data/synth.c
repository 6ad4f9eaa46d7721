/* synth.c: small synthetic data sets on disk, learnable from pixels.
 *
 * Used by the tests and by the trainer's built-in demo, so they are real
 * files in the real layouts (JPEG and PNG, Cityscapes labelIds, a Vistas
 * config.json with palette label PNGs), not in-memory stand-ins.
 * Classification: a class-specific hue and stripe orientation under noise.
 * Segmentation: a textured background with rectangles and discs whose colour
 * gives their class, labelled pixel for pixel.
 */
#include "data/data_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

static int mkdirs(const char *path, iabn_err *e)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n >= sizeof buf) return iabn_err_set(e, IABN_EINVAL, "path too long: %s", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != 0) continue;
        char c = buf[i];
        buf[i] = 0;
        if (mkdir(buf, 0755) && errno != EEXIST)
            return iabn_err_set(e, IABN_EIO, "cannot create directory %s: %s", buf,
                                strerror(errno));
        buf[i] = c;
    }
    return 0;
}

static uint8_t clamp8(double v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5); }

static void hsv_rgb(double h, double s, double v, double rgb[3])
{
    h = fmod(h, 1.0) * 6.0;
    int i = (int)h;
    double f = h - i, p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
    double tab[6][3] = {{v, t, p}, {q, v, p}, {p, v, t}, {p, q, v}, {t, p, v}, {v, p, q}};
    memcpy(rgb, tab[i % 6], sizeof tab[0]);
}

/* ---- classification ------------------------------------------------------------------ */

static void class_image(iabn_image *im, int c, int classes, iabn_draw *d)
{
    double col[3], dark[3];
    hsv_rgb((double)c / classes, 0.75, 0.95, col);
    hsv_rgb((double)c / classes + 0.5, 0.4, 0.35, dark);
    double theta = M_PI * c / classes + iabn_draw_uniform(d, -0.15, 0.15) * M_PI / classes;
    double freq = iabn_draw_uniform(d, 3.0, 6.0) * 2 * M_PI / im->width;
    double phase = iabn_draw_uniform(d, 0, 2 * M_PI), gain = iabn_draw_uniform(d, 0.75, 1.1);
    double ct = cos(theta), st = sin(theta);
    for (int y = 0; y < im->height; y++)
        for (int x = 0; x < im->width; x++) {
            double s = 0.5 + 0.5 * sin((x * ct + y * st) * freq + phase);
            uint8_t *p = im->data + ((size_t)y * im->width + x) * 3;
            for (int k = 0; k < 3; k++) {
                double v = 255 * gain * (s * col[k] + (1 - s) * dark[k]);
                p[k] = clamp8(v + iabn_draw_uniform(d, -24, 24));
            }
        }
}

int iabn_data_make_synthetic_folder(const char *root, int classes, int per_class_train,
                                    int per_class_val, int size, uint64_t seed, iabn_err *e)
{
    if (classes < 1 || classes > 1000 || per_class_train < 0 || per_class_val < 0 ||
        size < 8 || size > 4096)
        return iabn_err_set(e, IABN_EINVAL, "synthetic folder: bad classes %d, counts %d/%d or "
                            "size %d", classes, per_class_train, per_class_val, size);
    iabn_image im;
    int rc = iabn_image_alloc(&im, size, size, 3, 1, e);
    if (rc) return rc;
    static const char *const splits[2] = {"train", "val"};
    for (int sp = 0; !rc && sp < 2; sp++) {
        int per = sp ? per_class_val : per_class_train;
        for (int c = 0; !rc && c < classes; c++) {
            char dir[4096], path[4200];
            snprintf(dir, sizeof dir, "%s/%s/class_%03d", root, splits[sp], c);
            rc = mkdirs(dir, e);
            for (int i = 0; !rc && i < per; i++) {
                iabn_draw d = {seed, ((uint64_t)sp << 56) ^ ((uint64_t)c << 32) ^ (uint64_t)i, 0};
                class_image(&im, c, classes, &d);
                int png = i % 4 == 3;
                snprintf(path, sizeof path, "%s/img_%05d.%s", dir, i, png ? "png" : "jpg");
                rc = png ? iabn_image_write_png(path, &im, NULL, 0, e)
                         : iabn_image_write_jpeg(path, &im, 90, e);
            }
        }
    }
    iabn_image_free(&im);
    return rc;
}

/* ---- shapes (the demo's task) ------------------------------------------------------------ */

#define NSHAPES 8

/* Whether (u, v), in the shape's own frame (unit radius), lies in shape k. */
static int in_shape(int k, double u, double v)
{
    double au = fabs(u), av = fabs(v), r2 = u * u + v * v;
    switch (k) {
    case 0: return r2 <= 1;                                     /* disc     */
    case 1: return au <= 0.8 && av <= 0.8;                      /* square   */
    case 2: return v <= 0.7 && v >= 1.9 * au - 1.0;             /* triangle */
    case 3: return (au <= 0.25 && av <= 0.95) || (av <= 0.25 && au <= 0.95); /* cross */
    case 4: return r2 <= 1 && r2 >= 0.4;                        /* ring     */
    case 5: return au + av <= 1;                                /* diamond  */
    case 6: return au <= 0.95 && av <= 0.3;                     /* bar      */
    default: return au <= 0.85 && av <= 0.85 && (au >= 0.5 || av >= 0.5); /* frame */
    }
}

static void paint_shape(iabn_image *im, int k, int stripes, double cx, double cy, double r,
                        const double col[3], double alpha, iabn_draw *d)
{
    double ang = iabn_draw_uniform(d, -0.35, 0.35), ca = cos(ang), sa = sin(ang);
    for (int y = (int)(cy - r - 1); y <= (int)(cy + r + 1); y++)
        for (int x = (int)(cx - r - 1); x <= (int)(cx + r + 1); x++) {
            if (x < 0 || y < 0 || x >= im->width || y >= im->height) continue;
            double dx = (x - cx) / r, dy = (y - cy) / r;
            if (!in_shape(k, dx * ca + dy * sa, -dx * sa + dy * ca)) continue;
            /* stripes across (x) or along (y) the shape: the class's second half */
            double t = stripes ? 0.75 + 0.25 * ((stripes == 1 ? x : y) % 3 == 0 ? -1 : 1) : 1;
            uint8_t *p = im->data + ((size_t)y * im->width + x) * 3;
            for (int c = 0; c < 3; c++) p[c] = clamp8((1 - alpha) * p[c] + alpha * 255 * col[c] * t);
        }
}

static void shape_image(iabn_image *im, int c, int classes, iabn_draw *d)
{
    double bg[3];
    hsv_rgb(iabn_draw_u01(d), iabn_draw_uniform(d, 0.1, 0.6), iabn_draw_uniform(d, 0.2, 0.8), bg);
    for (size_t i = 0; i < (size_t)im->width * im->height; i++)
        for (int k = 0; k < 3; k++) im->data[3 * i + k] = clamp8(255 * bg[k]);
    int w = im->width, h = im->height;
    /* distractors: smaller shapes of any kind, half transparent */
    int nd = iabn_draw_int(d, 1, 3);
    for (int i = 0; i < nd; i++) {
        double col[3];
        hsv_rgb(iabn_draw_u01(d), iabn_draw_uniform(d, 0.3, 1), iabn_draw_uniform(d, 0.3, 1), col);
        paint_shape(im, iabn_draw_int(d, 0, NSHAPES - 1), 0, iabn_draw_uniform(d, 0, w),
                    iabn_draw_uniform(d, 0, h), iabn_draw_uniform(d, 0.12, 0.22) * w, col,
                    iabn_draw_uniform(d, 0.4, 0.8), d);
    }
    /* the object: its kind (and stripe direction) is the class */
    double col[3], hue = iabn_draw_u01(d);
    /* half the objects carry their class's hue: a quick first cue, not enough alone */
    if (iabn_draw_u01(d) < 0.5) hue = (double)c / classes + iabn_draw_uniform(d, -0.02, 0.02);
    hsv_rgb(hue + 1.0, iabn_draw_uniform(d, 0.4, 1), iabn_draw_uniform(d, 0.5, 1), col);
    int stripes = classes > NSHAPES ? 1 + (c / NSHAPES) % 2 : 0;
    double r = iabn_draw_uniform(d, 0.22, 0.36) * w;
    paint_shape(im, c % NSHAPES, stripes, iabn_draw_uniform(d, r * 0.8, w - r * 0.8),
                iabn_draw_uniform(d, r * 0.8, h - r * 0.8), r, col, iabn_draw_uniform(d, 0.7, 1), d);
    /* a distractor may overlap the object too */
    if (iabn_draw_u01(d) < 0.5) {
        hsv_rgb(iabn_draw_u01(d), 0.8, 0.9, col);
        paint_shape(im, iabn_draw_int(d, 0, NSHAPES - 1), 0, iabn_draw_uniform(d, 0, w),
                    iabn_draw_uniform(d, 0, h), iabn_draw_uniform(d, 0.1, 0.18) * w, col, 0.6, d);
    }
    for (size_t i = 0; i < (size_t)im->width * im->height * 3; i++)
        im->data[i] = clamp8(im->data[i] + iabn_draw_uniform(d, -40, 40));
}

int iabn_data_make_synthetic_shapes(const char *root, int classes, int per_class_train,
                                    int per_class_val, int size, double label_noise,
                                    uint64_t seed, iabn_err *e)
{
    if (classes < 2 || classes > 2 * NSHAPES || per_class_train < 0 || per_class_val < 0 ||
        size < 16 || size > 4096 || !(label_noise >= 0 && label_noise < 1))
        return iabn_err_set(e, IABN_EINVAL, "synthetic shapes: classes %d (2..%d), counts %d/%d, "
                            "size %d (16..4096) or label noise %g out of range", classes,
                            2 * NSHAPES, per_class_train, per_class_val, size, label_noise);
    iabn_image im;
    int rc = iabn_image_alloc(&im, size, size, 3, 1, e);
    if (rc) return rc;
    static const char *const splits[2] = {"train", "val"};
    for (int sp = 0; !rc && sp < 2; sp++) {
        for (int c = 0; !rc && c < classes; c++) {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s/%s/class_%03d", root, splits[sp], c);
            rc = mkdirs(dir, e);
        }
        int per = sp ? per_class_val : per_class_train;
        for (int c = 0; !rc && c < classes; c++)
            for (int i = 0; !rc && i < per; i++) {
                iabn_draw d = {seed, ((uint64_t)sp << 56) ^ ((uint64_t)c << 32) ^ (uint64_t)i, 0};
                shape_image(&im, c, classes, &d);
                /* the file goes to a random class with probability label_noise */
                int lc = iabn_draw_u01(&d) < label_noise ? iabn_draw_int(&d, 0, classes - 1) : c;
                char path[4200];
                snprintf(path, sizeof path, "%s/%s/class_%03d/img_%03d_%05d.png", root,
                         splits[sp], lc, c, i);
                rc = iabn_image_write_png(path, &im, NULL, 0, e);
            }
    }
    iabn_image_free(&im);
    return rc;
}

/* ---- segmentation --------------------------------------------------------------------- */

typedef struct painter {
    iabn_image *im;
    uint8_t *lbl;
    iabn_draw *d;
    int noise;
} painter;

static void put(painter *p, int x, int y, const uint8_t col[3], uint8_t id)
{
    if (x < 0 || y < 0 || x >= p->im->width || y >= p->im->height) return;
    size_t i = (size_t)y * p->im->width + x;
    for (int k = 0; k < 3; k++)
        p->im->data[3 * i + k] = clamp8(col[k] + iabn_draw_uniform(p->d, -p->noise, p->noise));
    p->lbl[i] = id;
}

static void rect(painter *p, int x0, int y0, int x1, int y1, const uint8_t col[3], uint8_t id)
{
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) put(p, x, y, col, id);
}

static void disc(painter *p, int cx, int cy, int r, const uint8_t col[3], uint8_t id)
{
    for (int y = cy - r; y <= cy + r; y++)
        for (int x = cx - r; x <= cx + r; x++)
            if ((x - cx) * (x - cx) + (y - cy) * (y - cy) <= r * r) put(p, x, y, col, id);
}

/* Cityscapes labelIds and colours (helpers/labels.py palette) used here. */
typedef struct cs_class {
    uint8_t id, col[3];
} cs_class;

static const cs_class cs_sky = {23, {70, 130, 180}}, cs_road = {7, {128, 64, 128}},
                      cs_building = {11, {70, 70, 70}}, cs_sidewalk = {8, {244, 35, 232}},
                      cs_veg = {21, {107, 142, 35}}, cs_unlabeled = {0, {0, 0, 0}},
                      cs_ego = {1, {20, 20, 20}}, cs_static = {4, {111, 74, 0}};
static const cs_class cs_objects[5] = {{26, {0, 0, 142}},     /* car */
                                       {24, {220, 20, 60}},   /* person */
                                       {17, {153, 153, 153}}, /* pole */
                                       {20, {220, 220, 0}},   /* traffic sign */
                                       {33, {119, 11, 32}}};  /* bicycle */

static void cs_scene(painter *p, iabn_draw *d)
{
    int W = p->im->width, H = p->im->height;
    int horizon = (int)(H * iabn_draw_uniform(d, 0.3, 0.45));
    int ground = (int)(H * iabn_draw_uniform(d, 0.6, 0.7));
    rect(p, 0, 0, W, horizon, cs_sky.col, cs_sky.id);
    rect(p, 0, horizon, W, ground, cs_building.col, cs_building.id);
    rect(p, 0, ground, W, H, cs_road.col, cs_road.id);
    int sw = (int)(H * 0.06) + 1;
    rect(p, 0, ground, W, ground + sw, cs_sidewalk.col, cs_sidewalk.id);
    disc(p, iabn_draw_int(d, 0, W), horizon, H / 8 + 1, cs_veg.col, cs_veg.id);
    rect(p, iabn_draw_int(d, 0, W - 1), horizon - H / 20, W, horizon, cs_static.col,
         cs_static.id);
    int nobj = 3 + iabn_draw_int(d, 0, 3);
    for (int k = 0; k < nobj; k++) {
        const cs_class *c = &cs_objects[iabn_draw_int(d, 0, 4)];
        int cx = iabn_draw_int(d, 0, W - 1), cy = iabn_draw_int(d, horizon, H - 1);
        int s = (int)(H * iabn_draw_uniform(d, 0.05, 0.15)) + 2;
        if (c->id == 17)
            rect(p, cx, cy - 3 * s, cx + s / 4 + 1, cy + s, c->col, c->id);
        else if (c->id == 24 || c->id == 33)
            disc(p, cx, cy, s / 2 + 1, c->col, c->id);
        else
            rect(p, cx - s, cy - s / 2, cx + s, cy + s / 2, c->col, c->id);
    }
    /* ignored ids (-> 255): the ego vehicle and a frame of unlabeled pixels */
    rect(p, 0, H - H / 12 - 1, W, H, cs_ego.col, cs_ego.id);
    rect(p, 0, 0, W, 1, cs_unlabeled.col, cs_unlabeled.id);
    rect(p, 0, 0, 1, H, cs_unlabeled.col, cs_unlabeled.id);
}

int iabn_data_make_synthetic_cityscapes(const char *root, int n_train, int n_val, int width,
                                        int height, uint64_t seed, iabn_err *e)
{
    if (n_train < 0 || n_val < 0 || width < 16 || height < 16 || width > 4096 || height > 4096)
        return iabn_err_set(e, IABN_EINVAL, "synthetic Cityscapes: bad counts %d/%d or size "
                            "%dx%d", n_train, n_val, width, height);
    iabn_image im, lb;
    int rc = iabn_image_alloc(&im, width, height, 3, 1, e);
    if (!rc) rc = iabn_image_alloc(&lb, width, height, 1, 1, e);
    if (rc) {
        iabn_image_free(&im);
        return rc;
    }
    static const char *const splits[2] = {"train", "val"};
    static const char *const cities[2] = {"synthA", "synthB"};
    for (int sp = 0; !rc && sp < 2; sp++) {
        int n = sp ? n_val : n_train;
        for (int i = 0; !rc && i < n; i++) {
            const char *city = cities[i % 2];
            char di[4096], dl[4096], pi[4300], pl[4300];
            snprintf(di, sizeof di, "%s/leftImg8bit/%s/%s", root, splits[sp], city);
            snprintf(dl, sizeof dl, "%s/gtFine/%s/%s", root, splits[sp], city);
            rc = mkdirs(di, e);
            if (!rc) rc = mkdirs(dl, e);
            if (rc) break;
            iabn_draw d = {seed, ((uint64_t)sp << 56) ^ (uint64_t)i ^ 0xC17Eull, 0};
            painter p = {&im, lb.data, &d, 12};
            cs_scene(&p, &d);
            snprintf(pi, sizeof pi, "%s/%s_%06d_%06d_leftImg8bit.png", di, city, i / 2, 19);
            snprintf(pl, sizeof pl, "%s/%s_%06d_%06d_gtFine_labelIds.png", dl, city, i / 2, 19);
            rc = iabn_image_write_png(pi, &im, NULL, 0, e);
            if (!rc) rc = iabn_image_write_png(pl, &lb, NULL, 0, e);
        }
    }
    iabn_image_free(&im);
    iabn_image_free(&lb);
    return rc;
}

static int write_vistas_config(const char *path, int classes, const uint8_t *pal, iabn_err *e)
{
    cJSON *root = cJSON_CreateObject(), *labels = cJSON_AddArrayToObject(root, "labels");
    for (int i = 0; i <= classes && labels; i++) {
        cJSON *l = cJSON_CreateObject();
        char name[64], readable[64];
        int is_void = i == classes;
        snprintf(name, sizeof name, is_void ? "void--unlabeled" : "synthetic--class-%02d", i);
        snprintf(readable, sizeof readable, is_void ? "Unlabeled" : "Class %d", i);
        cJSON *col = cJSON_AddArrayToObject(l, "color");
        for (int k = 0; k < 3; k++) cJSON_AddItemToArray(col, cJSON_CreateNumber(pal[3 * i + k]));
        cJSON_AddBoolToObject(l, "instances", 0);
        cJSON_AddStringToObject(l, "readable", readable);
        cJSON_AddStringToObject(l, "name", name);
        cJSON_AddBoolToObject(l, "evaluate", !is_void);
        cJSON_AddItemToArray(labels, l);
    }
    cJSON_AddStringToObject(root, "version", "synthetic-1.2");
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return iabn_err_set(e, IABN_ENOMEM, "out of memory writing %s", path);
    FILE *f = fopen(path, "w");
    int rc = 0;
    if (!f || fputs(text, f) < 0) rc = iabn_err_set(e, IABN_EIO, "cannot write %s", path);
    if (f && fclose(f)) rc = iabn_err_set(e, IABN_EIO, "cannot write %s", path);
    free(text);
    return rc;
}

int iabn_data_make_synthetic_vistas(const char *root, int classes, int n_train, int n_val,
                                    int width, int height, int v12_layout, uint64_t seed,
                                    iabn_err *e)
{
    if (classes < 2 || classes > 254 || n_train < 0 || n_val < 0 || width < 16 || height < 16 ||
        width > 4096 || height > 4096)
        return iabn_err_set(e, IABN_EINVAL, "synthetic Vistas: bad classes %d, counts %d/%d or "
                            "size %dx%d", classes, n_train, n_val, width, height);
    uint8_t pal[3 * 256];
    for (int i = 0; i < classes; i++) {
        double c[3];
        hsv_rgb((double)i / classes, 0.8, 0.9, c);
        for (int k = 0; k < 3; k++) pal[3 * i + k] = clamp8(255 * c[k]);
    }
    memset(pal + 3 * classes, 0, 3); /* void */
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/%s", root, v12_layout ? "config_v1.2.json" : "config.json");
    int rc = mkdirs(root, e);
    if (!rc) rc = write_vistas_config(cfg, classes, pal, e);
    if (rc) return rc;
    iabn_image im, lb;
    rc = iabn_image_alloc(&im, width, height, 3, 1, e);
    if (!rc) rc = iabn_image_alloc(&lb, width, height, 1, 1, e);
    if (rc) {
        iabn_image_free(&im);
        return rc;
    }
    static const char *const splits[2] = {"training", "validation"};
    for (int sp = 0; !rc && sp < 2; sp++) {
        int n = sp ? n_val : n_train;
        char di[4096], dl[4096], pi[4300], pl[4300];
        snprintf(di, sizeof di, "%s/%s/images", root, splits[sp]);
        snprintf(dl, sizeof dl, "%s/%s/%s", root, splits[sp], v12_layout ? "v1.2/labels"
                                                                           : "labels");
        rc = mkdirs(di, e);
        if (!rc) rc = mkdirs(dl, e);
        for (int i = 0; !rc && i < n; i++) {
            iabn_draw d = {seed, ((uint64_t)sp << 56) ^ (uint64_t)i ^ 0x7157A5ull, 0};
            painter p = {&im, lb.data, &d, 10};
            rect(&p, 0, 0, width, height, pal, 0);
            int nobj = 2 + iabn_draw_int(&d, 0, 4);
            for (int k = 0; k < nobj; k++) {
                int c = iabn_draw_int(&d, 1, classes - 1);
                int cx = iabn_draw_int(&d, 0, width - 1), cy = iabn_draw_int(&d, 0, height - 1);
                int s = (int)(height * iabn_draw_uniform(&d, 0.08, 0.25)) + 2;
                if (k % 2)
                    disc(&p, cx, cy, s, pal + 3 * c, (uint8_t)c);
                else
                    rect(&p, cx - s, cy - s / 2, cx + s, cy + s / 2, pal + 3 * c, (uint8_t)c);
            }
            rect(&p, 0, height - height / 10 - 1, width, height, pal + 3 * classes,
                 (uint8_t)classes); /* void: ignored */
            snprintf(pi, sizeof pi, "%s/s%06d.jpg", di, i);
            snprintf(pl, sizeof pl, "%s/s%06d.png", dl, i);
            rc = iabn_image_write_jpeg(pi, &im, 92, e);
            if (!rc) rc = iabn_image_write_png(pl, &lb, pal, classes + 1, e);
        }
    }
    iabn_image_free(&im);
    iabn_image_free(&lb);
    return rc;
}

int iabn_data_make_synthetic(const char *root, const iabn_synth_opts *o, iabn_err *e)
{
    int seg = o->kind != IABN_DATASET_IMAGEFOLDER, w = o->width ? o->width : 256;
    int h = o->height ? o->height : 128, nt = o->n_train >= 0 ? o->n_train : 20;
    int nv = o->n_val >= 0 ? o->n_val : seg ? 6 : 5;
    switch (o->kind) {
    case IABN_DATASET_IMAGEFOLDER:
        return iabn_data_make_synthetic_folder(root, o->classes ? o->classes : 10, nt, nv,
                                               o->size ? o->size : 64, o->seed, e);
    case IABN_DATASET_CITYSCAPES:
        return iabn_data_make_synthetic_cityscapes(root, nt, nv, w, h, o->seed, e);
    default:
        return iabn_data_make_synthetic_vistas(root, o->classes ? o->classes : 6, nt, nv, w, h,
                                               o->v12_layout, o->seed, e);
    }
}
