/* test_seg.c: segmentation end to end.
 *  - the mIoU of tools/segmetrics.c agrees with an independent
 *    implementation of the official definition (per-class pixel sets) on
 *    generated cases: ignored ground truth excluded, classes absent from both
 *    prediction and ground truth skipped;
 *  - segtrain on a generated Cityscapes-layout set (shapes whose class shows
 *    in their colour) reaches a validation mIoU of at least twice what the
 *    best constant prediction gets, and at least 0.35 absolute; the same run
 *    in both Vistas layouts trains and evaluates;
 *  - predict writes PNG label maps that decode to ids whose mIoU against the
 *    ground truth equals segeval's; with --config the file's settings
 *    replace the checkpoint's (another normalisation, other maps). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data.h"
#include "test_util.h"
#include "tools/commands.h"
#include "models/train/config.h"
#include "models/train/predict.h"
#include "models/train/segmetrics.h"
#include "models/train/trainer.h"

static char tmpdir[256];

/* Independent: IoU_c = |pred=c AND gt=c| / |pred=c OR gt=c| over labelled pixels. */
static double ref_miou(const int32_t *gt, const int32_t *pr, size_t n, int k, double *acc)
{
    double sum = 0, tp_all = 0, labelled = 0;
    int counted = 0;
    for (int c = 0; c < k; c++) {
        double inter = 0, uni = 0;
        for (size_t i = 0; i < n; i++) {
            if (gt[i] < 0 || gt[i] >= k) continue;
            int a = pr[i] == c, b = gt[i] == c;
            inter += a && b;
            uni += a || b;
        }
        if (uni > 0) {
            sum += inter / uni;
            counted++;
        }
        tp_all += inter;
    }
    for (size_t i = 0; i < n; i++) labelled += gt[i] >= 0 && gt[i] < k;
    *acc = labelled ? tp_all / labelled : 0;
    return counted ? sum / counted : 0;
}

static void test_miou_definition(void)
{
    unsigned s = 12345;
    for (int trial = 0; trial < 50; trial++) {
        int k = 2 + trial % 9;
        size_t n = 200 + (size_t)trial * 37;
        int32_t *gt = malloc(n * sizeof *gt), *pr = malloc(n * sizeof *pr);
        for (size_t i = 0; i < n; i++) {
            s = s * 1103515245u + 12345u;
            int r = (int)((s >> 8) % 100);
            gt[i] = r < 10 ? 255 : (int32_t)((s >> 16) % (unsigned)(k - (trial % 3 == 0)));
            s = s * 1103515245u + 12345u;
            pr[i] = (s >> 12) % 4 == 0 ? (int32_t)((s >> 16) % (unsigned)k) : (gt[i] == 255 ? 0 : gt[i]);
        }
        iabn_confusion cm;
        CHECK(iabn_confusion_init(&cm, k) == 0);
        /* accumulate in two halves: the matrix adds up over images */
        iabn_confusion_add(&cm, gt, pr, n / 2);
        iabn_confusion_add(&cm, gt + n / 2, pr + n / 2, n - n / 2);
        double pa, rpa;
        double m = iabn_confusion_miou(&cm, NULL, &pa);
        double r = ref_miou(gt, pr, n, k, &rpa);
        CHECK_CLOSE(m, r, 1e-12, 0);
        CHECK_CLOSE(pa, rpa, 1e-12, 0);
        iabn_confusion_free(&cm);
        free(gt);
        free(pr);
    }
    /* all ignored: nothing counted, no NaN */
    int32_t g[4] = {255, 255, 255, 255}, p[4] = {0, 1, 0, 1};
    iabn_confusion cm;
    iabn_confusion_init(&cm, 3);
    iabn_confusion_add(&cm, g, p, 4);
    double pa;
    CHECK(iabn_confusion_miou(&cm, NULL, &pa) == 0 && pa == 0);
    iabn_confusion_free(&cm);
}

static void seg_config(iabn_config *c, int epochs)
{
    iabn_config_defaults(c);
    snprintf(c->arch, sizeof c->arch, "deeplabv3_resnext_tiny");
    c->act.kind = IABN_ACT_LEAKY_RELU;
    c->act.param = 0.01f;
    c->input_3x3 = 1;
    c->bn_mode = IABN_BN_INPLACE_II;
    c->batch_size = 4;
    c->learning_rate = 0.02f;
    c->nesterov = 0;
    c->clip = 0;
    c->schedule.kind = IABN_SCHED_POLY;
    c->schedule.per_step = 1;
    c->schedule.power = 0.9f;
    c->schedule.epochs = epochs;
    c->crop_h = c->crop_w = 64;
    c->scale_min = 0.8f;
    c->scale_max = 1.25f;
    c->bootstrap = 0.5f;
    c->eval_every = epochs;
}

/* best constant prediction: the most frequent ground-truth class */
static double constant_miou(const iabn_dataset *ds)
{
    iabn_confusion cm;
    iabn_confusion_init(&cm, ds->num_classes);
    long *count = calloc((size_t)ds->num_classes, sizeof *count);
    for (int pass = 0; pass < 2; pass++) {
        int best = 0;
        for (int c = 1; c < ds->num_classes; c++)
            if (count[c] > count[best]) best = c;
        for (size_t i = 0; i < ds->count; i++) {
            iabn_image lb = {0};
            if (iabn_label_load(ds->label_paths[i], &lb, NULL)) continue;
            size_t n = (size_t)lb.width * lb.height;
            int32_t *gt = malloc(n * sizeof *gt), *pr = malloc(n * sizeof *pr);
            for (size_t p = 0; p < n; p++) {
                int v = ds->label_map.lut[lb.data[p]];
                gt[p] = v < 0 ? 255 : v;
                pr[p] = best;
                if (pass == 0 && gt[p] != 255) count[gt[p]]++;
            }
            if (pass == 1) iabn_confusion_add(&cm, gt, pr, n);
            free(gt);
            free(pr);
            iabn_image_free(&lb);
        }
    }
    double m = iabn_confusion_miou(&cm, NULL, NULL);
    iabn_confusion_free(&cm);
    free(count);
    return 100.0 * m;
}

static void train_layout(const char *data, iabn_dataset_kind kind, int epochs, double *miou_out,
                         const char *out)
{
    iabn_config c;
    seg_config(&c, epochs);
    iabn_train_opts o;
    iabn_trainer_opts_defaults(&o);
    o.task = IABN_TASK_SEGMENT;
    o.dataset = kind;
    o.config = &c;
    o.data_dir = data;
    o.output_dir = out;
    o.quiet = 1;
    iabn_train_result r;
    iabn_err e = {0};
    int rc = iabn_trainer_run(&o, &r, &e);
    CHECK_MSG(rc == 0, "segtrain %s: %s", data, e.msg);
    *miou_out = r.last_metric;
}

/* The bytes of a file (NULL when unreadable); *n its size. */
static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = malloc(1 << 22);
    *n = b ? fread(b, 1, 1 << 22, f) : 0;
    fclose(f);
    return b;
}

/* The config as JSON into path, or fails the test. */
static void write_config(const iabn_config *c, const char *path)
{
    char *js = iabn_config_to_json(c);
    FILE *f = fopen(path, "w");
    CHECK(js && f);
    if (js && f) fputs(js, f);
    if (f) fclose(f);
    free(js);
}

/* iabn predict --config (issue 18.3): the file replaces the checkpoint's own
 * config.  The same settings give the same label maps; another input
 * normalisation gives other ones; a config naming a classification network
 * is refused, naming it. */
static void predict_with_config(const char *run_cfg, const char *ckpt, const char *imgs,
                                const char *pred, const char *first_image)
{
    iabn_config c;
    iabn_err e = {0};
    iabn_config_defaults(&c);
    CHECK_MSG(iabn_config_load(&c, run_cfg, &e) == 0, "%s", e.msg);
    const char *city = strrchr(first_image, '/');
    while (city > first_image && city[-1] != '/') city--;
    char same[400], other[400], bad[400], out1[400], out2[400], png[1200];
    snprintf(same, sizeof same, "%s/same.json", tmpdir);
    snprintf(other, sizeof other, "%s/other_mean.json", tmpdir);
    snprintf(bad, sizeof bad, "%s/classifier.json", tmpdir);
    snprintf(out1, sizeof out1, "%s/pred_same", tmpdir);
    snprintf(out2, sizeof out2, "%s/pred_other", tmpdir);
    write_config(&c, same);
    for (int k = 0; k < 3; k++) c.mean[k] = 0.9f, c.std[k] = 0.05f;
    write_config(&c, other);
    snprintf(c.arch, sizeof c.arch, "resnet18");
    write_config(&c, bad);
    char *a1[] = {"predict", "--config", same, (char *)ckpt, (char *)imgs, out1, NULL};
    char *a2[] = {"predict", "--config", other, (char *)ckpt, (char *)imgs, out2, NULL};
    char *a3[] = {"predict", "--config", bad, (char *)ckpt, (char *)imgs, out2, NULL};
    CHECK(iabn_cmd_predict(6, a1) == 0);
    CHECK(iabn_cmd_predict(6, a2) == 0);
    CHECK(iabn_cmd_predict(6, a3) != 0);
    /* the first image's map under each of the three runs */
    size_t n0 = 0, n1 = 0, n2 = 0;
    const char *dirs[3] = {pred, out1, out2};
    char *b[3];
    size_t *ns[3] = {&n0, &n1, &n2};
    for (int k = 0; k < 3; k++) {
        snprintf(png, sizeof png, "%s/%.*s.png", dirs[k],
                 (int)(strrchr(first_image, '.') - city), city);
        b[k] = slurp(png, ns[k]);
        CHECK_MSG(b[k] != NULL, "%s", png);
    }
    CHECK(b[0] && b[1] && n0 == n1 && !memcmp(b[0], b[1], n0));
    CHECK(b[0] && b[2] && (n0 != n2 || memcmp(b[0], b[2], n0)));
    for (int k = 0; k < 3; k++) free(b[k]);
    /* the library call behind it: Cityscapes labelIds of the same maps */
    iabn_predictor *pr = NULL;
    iabn_predict_opts po = {0};
    CHECK_MSG(iabn_predictor_open(ckpt, &po, &pr, &e) == 0, "%s", e.msg);
    iabn_predict_folder_opts fo = {NULL, 0, 0, IABN_LABELS_CITYSCAPES_IDS};
    int written = 0;
    char ids_dir[400], ids_png[1200];
    snprintf(ids_dir, sizeof ids_dir, "%s/pred_ids", tmpdir);
    CHECK_MSG(pr && iabn_predict_folder(pr, imgs, ids_dir, &fo, &written, &e) == 0, "%s", e.msg);
    iabn_predictor_close(pr);
    CHECK(written > 0);
    snprintf(png, sizeof png, "%s/%.*s.png", pred, (int)(strrchr(first_image, '.') - city), city);
    snprintf(ids_png, sizeof ids_png, "%s/%.*s.png", ids_dir,
             (int)(strrchr(first_image, '.') - city), city);
    iabn_image tid = {0}, lid = {0};
    CHECK_MSG(iabn_label_load(png, &tid, &e) == 0 && iabn_label_load(ids_png, &lid, &e) == 0,
              "%s", e.msg);
    int match = tid.data && lid.data && tid.width == lid.width && tid.height == lid.height;
    for (size_t k = 0; match && k < (size_t)tid.width * tid.height; k++)
        match = lid.data[k] == iabn_cityscapes_label_id(tid.data[k]);
    CHECK(match);
    iabn_image_free(&tid);
    iabn_image_free(&lid);
}

static void test_cityscapes(void)
{
    char data[300], out[300];
    snprintf(data, sizeof data, "%s/cityscapes", tmpdir);
    snprintf(out, sizeof out, "%s/run_cs", tmpdir);
    iabn_err e = {0};
    CHECK(iabn_data_make_synthetic_cityscapes(data, 24, 6, 96, 64, 3, &e) == 0);
    iabn_dataset *val = NULL;
    CHECK(iabn_dataset_open_cityscapes(data, "val", &val, &e) == 0);
    double base = val ? constant_miou(val) : 0;
    iabn_dataset_free(val);
    double miou = 0;
    train_layout(data, IABN_DATASET_CITYSCAPES, 12, &miou, out);
    fprintf(stderr, "  cityscapes layout: val mIoU %.1f%% (best constant prediction %.1f%%)\n", miou, base);
    CHECK_MSG(miou >= 2 * base && miou >= 35.0, "mIoU %.1f%% vs constant %.1f%%", miou, base);

    /* segeval on the checkpoint, then predict: the PNGs give the same mIoU */
    char cfg[400], ckpt[400], pred[400], imgs[400];
    snprintf(cfg, sizeof cfg, "%s/config.json", out);
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint_last.safetensors", out);
    iabn_eval_opts eo;
    memset(&eo, 0, sizeof eo);
    eo.task = IABN_TASK_SEGMENT;
    eo.dataset = IABN_DATASET_CITYSCAPES;
    eo.config_path = cfg;
    eo.checkpoint = ckpt;
    eo.data_dir = data;
    iabn_train_result er;
    CHECK_MSG(iabn_trainer_evaluate(&eo, &er, &e) == 0, "segeval: %s", e.msg);
    snprintf(pred, sizeof pred, "%s/pred", tmpdir);
    iabn_dataset *ds = NULL;
    CHECK(iabn_dataset_open_cityscapes(data, "val", &ds, &e) == 0);
    iabn_confusion cm;
    iabn_confusion_init(&cm, 19);
    /* the whole split: predict walks the city folders (issue 16.8) and
     * mirrors them in its output */
    snprintf(imgs, sizeof imgs, "%s/leftImg8bit/val", data);
    char *argv[] = {"predict", ckpt, imgs, pred, NULL};
    CHECK(iabn_cmd_predict(4, argv) == 0);
    /* no image at all is an error, not "0 label maps written" */
    char empty[400];
    snprintf(empty, sizeof empty, "%s/empty_split", tmpdir);
    mkdir(empty, 0777);
    char *argv0[] = {"predict", ckpt, empty, pred, NULL};
    CHECK(iabn_cmd_predict(4, argv0) != 0);
    for (size_t i = 0; ds && i < ds->count; i++) {
        const char *base_name = strrchr(ds->paths[i], '/') + 1;
        const char *city = base_name - 2;
        while (city > ds->paths[i] && city[-1] != '/') city--;
        char p[900];
        snprintf(p, sizeof p, "%s/%.*s%.*s.png", pred, (int)(base_name - city), city,
                 (int)(strrchr(base_name, '.') - base_name), base_name);
        iabn_image pi = {0}, gi = {0};
        CHECK_MSG(iabn_label_load(p, &pi, &e) == 0, "%s: %s", p, e.msg);
        CHECK(iabn_label_load(ds->label_paths[i], &gi, &e) == 0);
        if (pi.data && gi.data && pi.width == gi.width && pi.height == gi.height) {
            size_t n = (size_t)pi.width * pi.height;
            int32_t *g = malloc(n * sizeof *g), *q = malloc(n * sizeof *q);
            int bad = 0;
            for (size_t k = 0; k < n; k++) {
                int v = ds->label_map.lut[gi.data[k]];
                g[k] = v < 0 ? 255 : v;
                q[k] = pi.data[k];
                bad += q[k] >= 19;
            }
            CHECK(bad == 0);
            iabn_confusion_add(&cm, g, q, n);
            free(g);
            free(q);
        } else {
            CHECK_MSG(0, "%s has another size than its label", p);
        }
        iabn_image_free(&pi);
        iabn_image_free(&gi);
    }
    double m = 100.0 * iabn_confusion_miou(&cm, NULL, NULL);
    CHECK_CLOSE(m, er.last_metric, 1e-6, 0);
    iabn_confusion_free(&cm);
    if (ds && ds->count) predict_with_config(cfg, ckpt, imgs, pred, ds->paths[0]);
    iabn_dataset_free(ds);
}

static void test_vistas(void)
{
    for (int v12 = 0; v12 < 2; v12++) {
        char data[300], out[300];
        snprintf(data, sizeof data, "%s/vistas%d", tmpdir, v12);
        snprintf(out, sizeof out, "%s/run_v%d", tmpdir, v12);
        iabn_err e = {0};
        CHECK(iabn_data_make_synthetic_vistas(data, 6, 16, 4, 96, 64, v12, 5, &e) == 0);
        iabn_dataset *val = NULL;
        CHECK(iabn_dataset_open_vistas(data, "validation", &val, &e) == 0);
        double base = val ? constant_miou(val) : 0;
        iabn_dataset_free(val);
        double miou = 0;
        train_layout(data, IABN_DATASET_VISTAS, 10, &miou, out);
        fprintf(stderr, "  vistas layout %s: val mIoU %.1f%% (best constant prediction %.1f%%)\n",
                v12 ? "v1.2" : "v1.0", miou, base);
        CHECK_MSG(miou > base, "mIoU %.1f%% vs constant %.1f%%", miou, base);
    }
}

int main(void)
{
    iabn_set_num_threads(2);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/iabn_test_seg_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    RUN(test_miou_definition);
    RUN(test_cityscapes);
    RUN(test_vistas);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
    return TEST_END();
}
