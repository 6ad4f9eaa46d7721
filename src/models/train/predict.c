/* predict.c: label maps of a folder of images (see predict.h). */
#include "models/train/predict.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* mkdir -p of out/<the directories of rel> */
static int make_parents(const char *out, const char *rel, iabn_err *e)
{
    char p[8192];
    int k = snprintf(p, sizeof p, "%s/%s", out, rel);
    if (k < 0 || (size_t)k >= sizeof p) return iabn_err_set(e, IABN_EIO, "path too long: %s/%s", out, rel);
    for (char *c = p + strlen(out) + 1; (c = strchr(c, '/')); c++) {
        *c = '\0';
        if (mkdir(p, 0777) && errno != EEXIST)
            return iabn_err_set(e, IABN_EIO, "cannot create %s: %s", p, strerror(errno));
        *c = '/';
    }
    return 0;
}

/* One image to one map. */
static int predict_one(iabn_predictor *p, const char *in, const char *out,
                       const iabn_predict_folder_opts *o, const uint8_t *palette, iabn_err *e)
{
    const iabn_config *cfg = iabn_predictor_config(p);
    static const float one = 1.f;
    iabn_image img = {0}, lab = {0};
    int rc = iabn_image_load(in, 0, &img, e), classes = cfg->classes;
    if (rc) return rc;
    size_t hw = (size_t)img.width * img.height;
    float *x = malloc(3 * hw * sizeof *x), *acc = malloc((size_t)classes * hw * sizeof *acc);
    int32_t *pred = malloc(hw * sizeof *pred);
    if (!x || !acc || !pred) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory for %s", in);
    if (!rc) {
        iabn_image_to_chw(&img, cfg->mean, cfg->std, x);
        rc = iabn_predictor_logits(p, x, img.height, img.width, o->scales ? o->scales : &one,
                                   o->scales ? o->nscales : 1, o->flip, acc, e);
    }
    if (!rc) rc = iabn_image_alloc(&lab, img.width, img.height, 1, 1, e);
    if (!rc) {
        iabn_argmax_channels(classes, hw, acc, pred);
        for (size_t k = 0; k < hw; k++)
            lab.data[k] = (uint8_t)(o->output == IABN_LABELS_CITYSCAPES_IDS
                                        ? iabn_cityscapes_label_id(pred[k]) : pred[k]);
        int color = o->output == IABN_LABELS_COLOR;
        rc = iabn_image_write_png(out, &lab, color ? palette : NULL, color ? classes : 0, e);
    }
    free(x);
    free(acc);
    free(pred);
    iabn_image_free(&img);
    iabn_image_free(&lab);
    return rc;
}

int iabn_predict_folder(iabn_predictor *p, const char *in_dir, const char *out_dir,
                        const iabn_predict_folder_opts *o, int *written, iabn_err *e)
{
    *written = 0;
    int classes = iabn_predictor_config(p)->classes;
    if (o->output == IABN_LABELS_CITYSCAPES_IDS && classes != 19)
        return iabn_err_set(e, IABN_EINVAL, "Cityscapes labelIds need a 19-class model (%d classes)",
                            classes);
    char **names = NULL;
    size_t n = 0;
    int rc = iabn_list_images(in_dir, &names, &n, e);
    if (!rc && n == 0) rc = iabn_err_set(e, IABN_EIO, "no image in %s or its sub-folders", in_dir);
    if (!rc && mkdir(out_dir, 0777) && errno != EEXIST)
        rc = iabn_err_set(e, IABN_EIO, "cannot create %s", out_dir);
    uint8_t palette[256 * 3];
    iabn_label_palette(classes, palette);
    for (size_t i = 0; i < n && !rc; i++) {
        char in[8192], out[8192];
        snprintf(in, sizeof in, "%s/%s", in_dir, names[i]);
        snprintf(out, sizeof out, "%s/%.*s.png", out_dir, (int)(strrchr(names[i], '.') - names[i]),
                 names[i]);
        rc = make_parents(out_dir, names[i], e);
        if (!rc) rc = predict_one(p, in, out, o, palette, e);
        *written += !rc;
    }
    iabn_strings_free(names, n);
    return rc;
}
