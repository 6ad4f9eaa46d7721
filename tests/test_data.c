/* test_data.c: decoding of bad and tricky files, and the data set layouts
 * (ImageFolder, Cityscapes, both Vistas layouts) on trees the test writes
 * into a temporary directory, including every error the loader must name. */
#include "test_util.h"

#include "data/data.h"
#include "iabn.h"
#include "test_data_util.h"

#ifndef DATA_FIXTURE_DIR
#error "DATA_FIXTURE_DIR must be defined"
#endif

static uint8_t *fixture(const char *name, size_t *n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", DATA_FIXTURE_DIR, name);
    uint8_t *b = t_slurp(p, n);
    CHECK_MSG(b != NULL, "fixture %s missing", p);
    return b;
}

/* Decoding must fail cleanly with `want`, never crash. */
static void expect_bad(const uint8_t *b, size_t n, int want, const char *what)
{
    iabn_image im;
    iabn_err e = {0};
    int rc = iabn_image_decode(b, n, 0, &im, &e);
    CHECK_MSG(rc == want, "%s: rc %d (%s)", what, rc, e.msg);
    CHECK_MSG(e.msg[0] != 0, "%s: no message", what);
    if (!rc) iabn_image_free(&im);
}

static void test_bad_files(void)
{
    size_t nj, np;
    uint8_t *jpg = fixture("src_q90.jpg", &nj), *png = fixture("src_rgb.png", &np);
    if (!jpg || !png) return;
    expect_bad(jpg, 0, IABN_EFORMAT, "zero bytes");
    for (size_t cut = 3; cut < nj - 2; cut += nj / 9) /* truncated JPEG, header to tail */
        expect_bad(jpg, cut, IABN_EFORMAT, "truncated JPEG");
    expect_bad(jpg, nj - 2, IABN_EFORMAT, "JPEG without its end marker");
    for (size_t cut = 8; cut < np - 4; cut += np / 7) expect_bad(png, cut, IABN_EFORMAT, "cut PNG");
    const char *text = "this is not an image\n";
    expect_bad((const uint8_t *)text, strlen(text), IABN_EFORMAT, "text file");
    expect_bad((const uint8_t *)"BM\x36\x00\x00\x00", 6, IABN_EFORMAT, "BMP");
    expect_bad((const uint8_t *)"GIF89a\x01\x00", 8, IABN_EFORMAT, "GIF");
    iabn_err e = {0};
    iabn_image im;
    CHECK(iabn_image_decode("BM..", 4, 0, &im, &e) == IABN_EFORMAT && strstr(e.msg, "BMP"));

    /* a corrupt JPEG header (the frame's size zeroed) */
    uint8_t *c = malloc(nj);
    memcpy(c, jpg, nj);
    for (size_t i = 2; i + 9 < nj; i++)
        if (c[i] == 0xFF && c[i + 1] == 0xC0) {
            memset(c + i + 5, 0, 4);
            break;
        }
    expect_bad(c, nj, IABN_EFORMAT, "JPEG with a zero-sized frame");
    /* corrupt entropy-coded data decodes (as PIL does, grey blocks), no crash */
    memcpy(c, jpg, nj);
    for (size_t i = nj / 2; i < nj / 2 + 64; i++) c[i] ^= 0x5A;
    int rc = iabn_image_decode(c, nj, 0, &im, &e);
    if (!rc) iabn_image_free(&im);
    CHECK(rc == 0 || rc == IABN_EFORMAT);
    /* bytes after the end marker are fine */
    uint8_t *tail = malloc(nj + 100);
    memcpy(tail, jpg, nj);
    memset(tail + nj, 0xAB, 100);
    CHECK(iabn_image_decode(tail, nj + 100, 0, &im, &e) == 0);
    iabn_image_free(&im);
    free(tail);
    /* PNG with a broken IHDR CRC and with garbage after the signature */
    memcpy(c, png, np < nj ? np : nj);
    c[29] ^= 0xFF;
    expect_bad(c, np < nj ? np : nj, IABN_EFORMAT, "PNG IHDR CRC");
    memcpy(c, png, 8);
    memset(c + 8, 0x11, 40);
    expect_bad(c, 48, IABN_EFORMAT, "PNG garbage");
    /* JPEG magic followed by noise */
    uint32_t s = 12345;
    for (size_t i = 3; i < nj; i++) {
        s = s * 1103515245u + 12345u;
        c[i] = (uint8_t)(s >> 16);
    }
    c[0] = 0xFF, c[1] = 0xD8, c[2] = 0xFF;
    expect_bad(c, nj, IABN_EFORMAT, "JPEG magic + noise");
    free(c);

    /* load names the file */
    t_write(t_path("%s", "empty.jpg"), "", 0);
    CHECK(iabn_image_load(t_path("%s", "empty.jpg"), 0, &im, &e) == IABN_EFORMAT);
    CHECK(strstr(e.msg, "empty.jpg") != NULL);
    CHECK(iabn_image_load(t_path("%s", "missing.jpg"), 0, &im, &e) == IABN_EIO);
    CHECK(strstr(e.msg, "missing.jpg") != NULL);
    CHECK(iabn_image_load(t_tmp, 0, &im, &e) == IABN_EIO); /* a directory */
    free(jpg);
    free(png);
}

static void test_decode_hint_and_writers(void)
{
    size_t n;
    uint8_t *jpg = fixture("src_q90.jpg", &n); /* 83 x 67 */
    if (!jpg) return;
    iabn_image im;
    iabn_err e = {0};
    CHECK(iabn_image_decode(jpg, n, 20, &im, &e) == 0);
    CHECK_MSG(im.width == 42 && im.height == 34, "DCT-scaled to %dx%d", im.width, im.height);
    iabn_image_free(&im);
    CHECK(iabn_image_decode(jpg, n, 67, &im, &e) == 0);
    CHECK(im.width == 83 && im.height == 67);
    /* round trip through the writers */
    CHECK(iabn_image_write_png(t_path("%s", "rt.png"), &im, NULL, 0, &e) == 0);
    iabn_image back;
    CHECK(iabn_image_load(t_path("%s", "rt.png"), 0, &back, &e) == 0);
    CHECK(back.width == im.width && !memcmp(back.data, im.data, (size_t)n > 0 ? 83 * 67 * 3 : 0));
    iabn_image_free(&back);
    CHECK(iabn_image_write_jpeg(t_path("%s", "rt.jpg"), &im, 95, &e) == 0);
    CHECK(iabn_image_load(t_path("%s", "rt.jpg"), 0, &back, &e) == 0);
    iabn_image_free(&back);
    CHECK(iabn_image_write_jpeg(t_path("%s", "x/none.jpg"), &im, 95, &e) == IABN_EIO);
    iabn_image lab;
    CHECK(iabn_image_alloc(&lab, 5, 4, 1, 2, &e) == 0);
    for (int i = 0; i < 20; i++) {
        uint16_t v = (uint16_t)(i * 3000);
        memcpy(lab.data + 2 * i, &v, 2);
    }
    CHECK(iabn_image_write_png(t_path("%s", "l16.png"), &lab, NULL, 0, &e) == 0);
    CHECK(iabn_label_load(t_path("%s", "l16.png"), &back, &e) == 0);
    CHECK(back.depth == 2 && !memcmp(back.data, lab.data, 40));
    iabn_image_free(&back);
    iabn_image_free(&lab);
    iabn_image_free(&im);
    /* binary PGM/PPM */
    const char pgm[] = "P5\n# c\n3 2\n255\n\x01\x02\x03\x04\x05\x06";
    CHECK(iabn_label_decode(pgm, sizeof pgm - 1, &im, &e) == 0);
    CHECK(im.width == 3 && im.height == 2 && im.data[5] == 6);
    iabn_image_free(&im);
    CHECK(iabn_image_decode(pgm, sizeof pgm - 2, 0, &im, &e) == IABN_EFORMAT); /* short */
    free(jpg);
}

static void touch_img(const char *rel, const uint8_t *b, size_t n)
{
    const char *p = t_path("%s", rel);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", p);
    *strrchr(dir, '/') = 0;
    t_mkdirs(dir);
    t_write(p, b, n);
}

static void test_imagefolder(void)
{
    size_t n;
    uint8_t *png = fixture("src_rgb.png", &n);
    if (!png) return;
    /* torchvision's order: classes sorted; directories visited in sorted path
     * order ("sub" < "sub-dir" < "sub/deeper"), then names; extensions
     * case-insensitive; other files and files at the root ignored */
    touch_img("if/train/b_class/x.JPG", png, n);
    touch_img("if/train/b_class/sub/y.png", png, n);
    touch_img("if/train/b_class/sub-dir/z.jpeg", png, n);
    touch_img("if/train/b_class/sub/deeper/w.PnG", png, n);
    touch_img("if/train/b_class/notes.txt", png, n);
    touch_img("if/train/a/q.jpg", png, n);
    touch_img("if/train/B/k.webp", png, n);
    touch_img("if/train/root_file.jpg", png, n);
    iabn_dataset *ds;
    iabn_err e = {0};
    int rc = iabn_dataset_open(IABN_DATASET_IMAGEFOLDER, t_path("%s", "if"), "train", &ds, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (rc) return;
    CHECK(ds->num_classes == 3);
    CHECK(!strcmp(ds->class_names[0], "B") && !strcmp(ds->class_names[1], "a") &&
          !strcmp(ds->class_names[2], "b_class"));
    CHECK(ds->count == 6);
    static const char *const want[6] = {"B/k.webp", "a/q.jpg", "b_class/x.JPG",
                                        "b_class/sub/y.png", "b_class/sub-dir/z.jpeg",
                                        "b_class/sub/deeper/w.PnG"};
    static const int lab[6] = {0, 1, 2, 2, 2, 2};
    for (size_t i = 0; i < ds->count && i < 6; i++) {
        const char *p = ds->paths[i];
        size_t lp = strlen(p), lw = strlen(want[i]);
        CHECK_MSG(lp >= lw && !strcmp(p + lp - lw, want[i]), "item %zu: %s, want %s", i, p,
                  want[i]);
        CHECK(ds->labels[i] == lab[i]);
    }
    iabn_dataset_free(ds);

    /* errors name the path */
    t_mkdirs(t_path("%s", "if/train/c_empty/nested"));
    CHECK(iabn_dataset_open_imagefolder(t_path("%s", "if/train"), &ds, &e) == IABN_EINVAL);
    CHECK_MSG(strstr(e.msg, "c_empty") != NULL, "%s", e.msg);
    t_mkdirs(t_path("%s", "if/noclass"));
    touch_img("if/noclass/loose.jpg", png, n);
    CHECK(iabn_dataset_open_imagefolder(t_path("%s", "if/noclass"), &ds, &e) == IABN_EINVAL);
    CHECK(strstr(e.msg, "no class folders") && strstr(e.msg, "if/noclass"));
    CHECK(iabn_dataset_open_imagefolder(t_path("%s", "if/absent"), &ds, &e) == IABN_EIO);
    CHECK(strstr(e.msg, "if/absent") != NULL);
    /* a symbolic-link loop is an error, not a hang */
    touch_img("if/loop/c/a.png", png, n);
    CHECK(symlink("..", t_path("%s", "if/loop/c/up")) == 0);
    CHECK(iabn_dataset_open_imagefolder(t_path("%s", "if/loop"), &ds, &e) == IABN_EINVAL);
    CHECK(strstr(e.msg, "deeper than") != NULL);
    /* an unreadable directory (only meaningful when not root) */
    if (geteuid() != 0) {
        touch_img("if/perm/c/a.png", png, n);
        t_mkdirs(t_path("%s", "if/perm/c/locked"));
        chmod(t_path("%s", "if/perm/c/locked"), 0);
        CHECK(iabn_dataset_open_imagefolder(t_path("%s", "if/perm"), &ds, &e) == IABN_EIO);
        CHECK(strstr(e.msg, "locked") != NULL);
    } else {
        fprintf(stderr, "  (running as root: unreadable-directory case not testable)\n");
    }
    free(png);
}

static void test_synthetic_folder(void)
{
    iabn_err e = {0};
    const char *root = t_path("%s", "synth");
    int rc = iabn_data_make_synthetic_folder(root, 3, 4, 2, 32, 9, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    iabn_dataset *tr, *va;
    CHECK(iabn_dataset_open(IABN_DATASET_IMAGEFOLDER, root, "train", &tr, &e) == 0);
    CHECK(iabn_dataset_open(IABN_DATASET_IMAGEFOLDER, root, "val", &va, &e) == 0);
    if (!tr || !va) return;
    CHECK(tr->count == 12 && va->count == 6 && tr->num_classes == 3);
    int pngs = 0;
    for (size_t i = 0; i < tr->count; i++) {
        iabn_image im;
        CHECK(iabn_image_load(tr->paths[i], 0, &im, &e) == 0);
        CHECK(im.width == 32 && im.height == 32);
        iabn_image_free(&im);
        pngs += strstr(tr->paths[i], ".png") != NULL;
    }
    CHECK(pngs == 3);
    iabn_dataset_free(tr);
    iabn_dataset_free(va);
    CHECK(iabn_data_make_synthetic_folder(root, 0, 1, 1, 32, 0, &e) == IABN_EINVAL);
}

static void test_cityscapes(void)
{
    iabn_err e = {0};
    const char *root = t_path("%s", "cs");
    int rc = iabn_data_make_synthetic_cityscapes(root, 4, 2, 64, 32, 3, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    iabn_dataset *ds;
    CHECK(iabn_dataset_open_cityscapes(root, "train", &ds, &e) == 0);
    if (!ds) return;
    CHECK(ds->count == 4 && ds->num_classes == 19 && ds->kind == IABN_DATASET_CITYSCAPES);
    CHECK(!strcmp(ds->class_names[13], "car") && !strcmp(ds->class_names[18], "bicycle"));
    CHECK(strstr(ds->paths[0], "leftImg8bit/train/synthA/synthA_000000_000019_leftImg8bit.png"));
    CHECK(strstr(ds->label_paths[0], "gtFine/train/synthA/synthA_000000_000019_gtFine_labelIds"));
    CHECK(ds->label_map.lut[7] == 0 && ds->label_map.lut[26] == 13 && ds->label_map.lut[33] == 18);
    CHECK(ds->label_map.lut[0] == 255 && ds->label_map.lut[4] == 255 &&
          ds->label_map.lut[34] == 255 && ds->label_map.lut[200] == 255);
    int seen[256] = {0};
    for (size_t i = 0; i < ds->count; i++) {
        iabn_image lab;
        CHECK(iabn_label_load(ds->label_paths[i], &lab, &e) == 0);
        for (int k = 0; k < lab.width * lab.height; k++) seen[lab.data[k]] = 1;
        iabn_image_free(&lab);
    }
    CHECK(seen[0] && seen[1] && seen[7] && seen[23]); /* ignored ids are present */
    char img[1024], lbl[1024];
    snprintf(img, sizeof img, "%s", ds->paths[1]);
    snprintf(lbl, sizeof lbl, "%s", ds->label_paths[1]);
    iabn_dataset_free(ds);
    /* an image without its label: an error naming both */
    rename(lbl, t_path("%s", "moved.png"));
    CHECK(iabn_dataset_open_cityscapes(root, "train", &ds, &e) == IABN_EINVAL);
    CHECK(strstr(e.msg, img) && strstr(e.msg, lbl));
    rename(t_path("%s", "moved.png"), lbl);
    CHECK(iabn_dataset_open_cityscapes(root, "test", &ds, &e) == IABN_EIO);
    CHECK(strstr(e.msg, "leftImg8bit/test") != NULL);
    CHECK(iabn_dataset_open(IABN_DATASET_CITYSCAPES, root, "val", &ds, &e) == 0);
    CHECK(ds && ds->count == 2);
    iabn_dataset_free(ds);
}

static void test_vistas(void)
{
    iabn_err e = {0};
    for (int v12 = 0; v12 < 2; v12++) {
        const char *root = t_path("%s", v12 ? "vistas12" : "vistas10");
        int rc = iabn_data_make_synthetic_vistas(root, 5, 3, 2, 48, 32, v12, 4, &e);
        CHECK_MSG(rc == 0, "%s", e.msg);
        iabn_dataset *ds;
        rc = iabn_dataset_open_vistas(root, "train", &ds, &e);
        CHECK_MSG(rc == 0, "%s", e.msg);
        if (rc) continue;
        CHECK(ds->count == 3 && ds->num_classes == 5);
        CHECK(strstr(ds->label_paths[0], v12 ? "training/v1.2/labels/" : "training/labels/"));
        CHECK(ds->label_map.lut[4] == 4 && ds->label_map.lut[5] == 255 &&
              ds->label_map.lut[6] == -1 && !ds->label_map.unknown_to_ignore);
        iabn_image lab;
        CHECK(iabn_label_load(ds->label_paths[0], &lab, &e) == 0); /* palette indices */
        int maxv = 0;
        for (int k = 0; k < lab.width * lab.height; k++)
            if (lab.data[k] > maxv) maxv = lab.data[k];
        CHECK(maxv == 5);
        iabn_image_free(&lab);
        iabn_dataset_free(ds);
        CHECK(iabn_dataset_open(IABN_DATASET_VISTAS, root, "validation", &ds, &e) == 0);
        CHECK(ds && ds->count == 2);
        iabn_dataset_free(ds);
    }
    /* config errors name the file and the key */
    const char *root = t_path("%s", "vistas10");
    iabn_dataset *ds;
    const char *bad = "{\"labels\": [{\"name\": 3}]}";
    t_write(t_path("%s", "vistas10/config.json"), bad, strlen(bad));
    CHECK(iabn_dataset_open_vistas(root, "train", &ds, &e) == IABN_EFORMAT);
    CHECK_MSG(strstr(e.msg, "config.json") && strstr(e.msg, "labels[0].name"), "%s", e.msg);
    t_write(t_path("%s", "vistas10/config.json"), "{\"labels\": [", 12);
    CHECK(iabn_dataset_open_vistas(root, "train", &ds, &e) == IABN_EFORMAT);
    remove(t_path("%s", "vistas10/config.json"));
    CHECK(iabn_dataset_open_vistas(root, "train", &ds, &e) == IABN_EINVAL);
    CHECK(strstr(e.msg, "config.json") && strstr(e.msg, "config_v1.2.json"));
    /* a missing label names both files */
    root = t_path("%s", "vistas12");
    remove(t_path("%s", "vistas12/training/v1.2/labels/s000001.png"));
    CHECK(iabn_dataset_open_vistas(root, "training", &ds, &e) == IABN_EINVAL);
    CHECK(strstr(e.msg, "s000001.jpg") && strstr(e.msg, "s000001.png"));
}

/* The real v1.2 shape: 66 labels, the last void--unlabeled with evaluate false. */
static void test_vistas_config(void)
{
    char *json = malloc(66 * 120 + 64), *p = json;
    p += sprintf(p, "{\"labels\": [");
    for (int i = 0; i < 66; i++)
        p += sprintf(p, "%s{\"color\": [%d, 0, 0], \"instances\": %s, \"readable\": \"R\", "
                     "\"name\": \"%s%d\", \"evaluate\": %s}",
                     i ? ", " : "", i, i % 2 ? "true" : "false",
                     i == 65 ? "void--unlabeled" : "c--", i, i == 65 ? "false" : "true");
    p += sprintf(p, "], \"version\": 1.2}");
    iabn_label_map map;
    int ncls;
    char **names;
    iabn_err e = {0};
    CHECK(iabn_vistas_config_parse(json, strlen(json), &map, &ncls, &names, &e) == 0);
    CHECK(ncls == 65 && map.lut[0] == 0 && map.lut[64] == 64 && map.lut[65] == 255 &&
          map.lut[66] == -1);
    CHECK(names && !strcmp(names[64], "c--64"));
    for (int i = 0; i < ncls; i++) free(names[i]);
    free(names);
    static const char *const bad[] = {"", "[]", "{\"labels\": 3}", "{\"labels\": []}",
                                      "{\"labels\": [{\"name\": \"a\", \"evaluate\": 1}]}",
                                      "{\"labels\": [{\"name\": \"a\", \"evaluate\": false}]}",
                                      "{\"labels\": [7]}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = iabn_vistas_config_parse(bad[i], strlen(bad[i]), &map, &ncls, NULL, &e);
        CHECK_MSG(rc == IABN_EFORMAT, "config '%s' accepted", bad[i]);
    }
    free(json);
}

/* Label errors are the data set's fault: a hard error (EINVAL), never a skip. */
static void test_label_errors(void)
{
    size_t il, ll;
    uint8_t *img = fixture("src_rgb.png", &il), *lbl = fixture("label_pal.png", &ll);
    if (!img || !lbl) return;
    iabn_sample_ctx *ctx;
    iabn_err e = {0};
    CHECK(iabn_sample_ctx_new(&ctx, &e) == 0);
    iabn_transform_cfg cfg;
    iabn_transform_defaults(&cfg, IABN_TF_SEGMENT_TRAIN);
    cfg.out_h = cfg.out_w = 32;
    float out[3 * 32 * 32];
    int32_t lab[32 * 32];
    int32_t vhw[2];
    iabn_label_map map;
    for (int v = 0; v < 256; v++) map.lut[v] = v < 40 ? v : -1; /* ids >= 40 unknown */
    map.unknown_to_ignore = 0;
    int rc = iabn_sample_segment(ctx, &cfg, img, il, lbl, ll, &map, 1, 1, out, lab, vhw, &e);
    CHECK_MSG(rc == IABN_EINVAL && strstr(e.msg, "unknown class id"), "rc %d: %s", rc, e.msg);
    map.unknown_to_ignore = 1; /* Cityscapes: outside the table -> 255 */
    CHECK(iabn_sample_segment(ctx, &cfg, img, il, lbl, ll, &map, 1, 1, out, lab, vhw, &e) == 0);
    /* a label of another size */
    size_t jl;
    uint8_t *jpg = fixture("src_q90.jpg", &jl);
    rc = iabn_sample_segment(ctx, &cfg, jpg, jl, lbl, ll, &map, 1, 1, out, lab, vhw, &e);
    CHECK_MSG(rc == IABN_EINVAL && strstr(e.msg, "61x45") && strstr(e.msg, "83x67"), "%s",
              e.msg);
    /* a corrupt label is a bad file (skippable), reported as the label's */
    rc = iabn_sample_segment(ctx, &cfg, img, il, lbl, ll / 2, &map, 1, 1, out, lab, vhw, &e);
    CHECK(rc == IABN_EFORMAT && !strncmp(e.msg, "label: ", 7));
    /* a colour image as a label */
    rc = iabn_sample_segment(ctx, &cfg, img, il, img, il, &map, 1, 1, out, lab, vhw, &e);
    CHECK(rc == IABN_EFORMAT && !strncmp(e.msg, "label: ", 7));
    /* the evaluation canvas must hold the image */
    cfg.kind = IABN_TF_SEGMENT_EVAL;
    cfg.scale = 0;
    cfg.out_h = cfg.out_w = 40;
    rc = iabn_sample_segment(ctx, &cfg, img, il, lbl, ll, &map, 1, 1, out, lab, vhw, &e);
    CHECK(rc == IABN_EINVAL && strstr(e.msg, "canvas"));
    iabn_sample_ctx_free(ctx);
    free(img);
    free(lbl);
    free(jpg);
}

static void test_transform_check(void)
{
    iabn_transform_cfg c;
    iabn_err e = {0};
    for (int k = 0; k < 4; k++) {
        iabn_transform_defaults(&c, (iabn_transform_kind)k);
        CHECK(iabn_transform_check(&c, &e) == 0);
    }
    iabn_transform_defaults(&c, IABN_TF_CLASSIFY_EVAL);
    c.scale = 100; /* smaller than the 224 crop */
    CHECK(iabn_transform_check(&c, &e) == IABN_EINVAL);
    iabn_transform_defaults(&c, IABN_TF_CLASSIFY_TRAIN);
    c.std[1] = 0;
    CHECK(iabn_transform_check(&c, &e) == IABN_EINVAL);
    iabn_transform_defaults(&c, IABN_TF_CLASSIFY_TRAIN);
    c.rrc_scale[0] = 2;
    CHECK(iabn_transform_check(&c, &e) == IABN_EINVAL);
    /* a sample's draws depend on (seed, key) only */
    iabn_sample_geom a, b;
    iabn_transform_defaults(&c, IABN_TF_CLASSIFY_TRAIN);
    CHECK(iabn_transform_plan(&c, 500, 375, 1, 42, &a, &e) == 0);
    CHECK(iabn_transform_plan(&c, 500, 375, 1, 42, &b, &e) == 0);
    CHECK(!memcmp(&a, &b, sizeof a));
    int differ = 0, in_range = 1;
    for (uint64_t k = 0; k < 200; k++) {
        CHECK(iabn_transform_plan(&c, 500, 375, 1, k, &b, &e) == 0);
        differ += memcmp(&a, &b, sizeof a) != 0;
        double area = (double)b.crop_w * b.crop_h / (500.0 * 375), r = (double)b.crop_w / b.crop_h;
        if (b.crop_x < 0 || b.crop_y < 0 || b.crop_x + b.crop_w > 500 || b.crop_y + b.crop_h > 375 ||
            area < 0.079 || area > 1.0 || r < 0.74 || r > 1.34)
            in_range = 0;
    }
    CHECK(differ >= 199 && in_range);
}

static void test_colour_ops(void)
{
    size_t n;
    uint8_t *png = fixture("src_rgb.png", &n);
    if (!png) return;
    iabn_sample_ctx *ctx;
    iabn_err e = {0};
    CHECK(iabn_sample_ctx_new(&ctx, &e) == 0);
    iabn_transform_cfg c;
    iabn_transform_defaults(&c, IABN_TF_CLASSIFY_EVAL);
    c.scale = 45;
    c.out_h = c.out_w = 40;
    c.mean[0] = c.mean[1] = c.mean[2] = 0;
    c.std[0] = c.std[1] = c.std[2] = 1;
    float base[3 * 1600], jit[3 * 1600];
    CHECK(iabn_sample_classify(ctx, &c, png, n, 1, 1, base, &e) == 0);
    /* brightness alone scales every value by one factor in [0.6, 1.4] */
    c.brightness = 0.4f;
    CHECK(iabn_sample_classify(ctx, &c, png, n, 1, 1, jit, &e) == 0);
    double f = -1;
    int consistent = 1;
    for (int i = 0; i < 4800; i++)
        if (base[i] > 0.05f) {
            double r = jit[i] / base[i];
            if (f < 0) f = r;
            if (fabs(r - f) > 1e-4) consistent = 0;
        }
    CHECK(consistent && f >= 0.6 && f <= 1.4 && fabs(f - 1) > 1e-6);
    /* lighting alone adds one constant per channel */
    c.brightness = 0;
    c.lighting_std = 0.1f;
    CHECK(iabn_sample_classify(ctx, &c, png, n, 1, 3, jit, &e) == 0);
    for (int ch = 0; ch < 3; ch++) {
        double d0 = jit[ch * 1600] - base[ch * 1600], spread = 0;
        for (int i = 0; i < 1600; i++)
            spread = fmax(spread, fabs(jit[ch * 1600 + i] - base[ch * 1600 + i] - d0));
        CHECK(spread < 1e-5 && fabs(d0) < 0.5);
    }
    /* contrast + saturation keep the mean grey level near */
    c.lighting_std = 0;
    c.contrast = c.saturation = 0.4f;
    CHECK(iabn_sample_classify(ctx, &c, png, n, 1, 5, jit, &e) == 0);
    double mb = 0, mj = 0;
    for (int i = 0; i < 4800; i++) {
        mb += base[i];
        mj += jit[i];
        CHECK(isfinite(jit[i]));
    }
    CHECK(fabs(mb - mj) / 4800 < 0.1);
    iabn_sample_ctx_free(ctx);
    free(png);
}

int main(void)
{
    t_tmp_make();
    RUN(test_bad_files);
    RUN(test_decode_hint_and_writers);
    RUN(test_imagefolder);
    RUN(test_synthetic_folder);
    RUN(test_cityscapes);
    RUN(test_vistas);
    RUN(test_vistas_config);
    RUN(test_label_errors);
    RUN(test_transform_check);
    RUN(test_colour_ops);
    t_tmp_remove();
    return TEST_END();
}
