/* cmd_predict.c: `iabn predict CHECKPOINT IN_DIR OUT_DIR`: every .png / .jpg /
 * .jpeg of IN_DIR and its sub-folders (a Cityscapes split holds one folder per
 * city), sorted, to a PNG label map of the same relative path in OUT_DIR:
 * raw class ids by default, the data set's palette with --color, Cityscapes
 * labelIds (for the official evaluation scripts) with --labelids.  The model
 * and its input normalisation come from the configuration stored in the
 * checkpoint (--config: from that file instead); --scales and --flip average
 * the logits over test-time augmentations. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "iabn.h"
#include "tools/cmd_train.h"
#include "tools/commands.h"
#include "tools/options.h"

/* mkdir -p of out/<the directories of rel> */
static int make_parents(const char *out, const char *rel, iabn_err *e)
{
    char p[8192];
    int k = snprintf(p, sizeof p, "%s/%s", out, rel);
    if (k < 0 || (size_t)k >= sizeof p) return iabn_err_set(e, IABN_EIO, "path too long: %s/%s", out, rel);
    for (char *c = p + strlen(out) + 1; (c = strchr(c, '/')); c++) {
        *c = '\0';
        if (mkdir(p, 0777) && errno != EEXIST) return iabn_err_set(e, IABN_EIO, "cannot create %s: %s", p, strerror(errno));
        *c = '/';
    }
    return 0;
}

int iabn_cmd_predict(int argc, char **argv)
{
    iabn_args a;
    int prc = iabn_args_parse(&a, IABN_C_PREDICT, argc, argv);
    if (prc) return prc == IABN_ARGS_HELP ? 0 : 2;
    const char *const *pos = a.pos;
    int flip = a.v[IABN_O_FLIP].set, color = a.v[IABN_O_COLOR].set;
    int labelids = a.v[IABN_O_LABELIDS].set, ns = 1;
    float scales[8] = {1.f};
    if (a.v[IABN_O_SCALES].set) {
        ns = a.v[IABN_O_SCALES].n;
        memcpy(scales, a.v[IABN_O_SCALES].list, sizeof scales);
    }
    if (a.v[IABN_O_THREADS].set) iabn_set_num_threads((int)a.v[IABN_O_THREADS].i);
    const char *device = a.v[IABN_O_DEVICE].set ? a.v[IABN_O_DEVICE].s : "cpu";
    /* --window h, w; --pooling-size h, w */
    int win[4] = {a.v[IABN_O_WINDOW].h, a.v[IABN_O_WINDOW].w, a.v[IABN_O_POOLING_SIZE].h,
                  a.v[IABN_O_POOLING_SIZE].w};
    int pool_set = a.v[IABN_O_POOLING_SIZE].set;
    if (color && labelids) {
        fprintf(stderr, "iabn predict: --color or --labelids, not both\n");
        return 2;
    }
    iabn_predictor *pr = NULL;
    iabn_err e = {0};
    iabn_config own; /* --config: instead of the checkpoint's */
    iabn_config_defaults(&own);
    if (a.v[IABN_O_CONFIG].set && iabn_config_from_args(&a, &own, 1, "predict", &e)) {
        fprintf(stderr, "iabn predict: %s\n", e.msg);
        return 2;
    }
    iabn_predict_opts po = {device, win[0], win[1], pool_set, win[2], win[3],
                            a.v[IABN_O_CONFIG].set ? &own : NULL};
    int rc = iabn_predictor_open(pos[0], &po, &pr, &e);
    const iabn_config *cfg = pr ? iabn_predictor_config(pr) : NULL;
    int classes = cfg ? cfg->classes : 0;
    if (!rc && labelids && classes != 19)
        rc = iabn_err_set(&e, IABN_EINVAL, "--labelids needs a 19-class Cityscapes model (%d classes)", classes);
    char **names = NULL;
    size_t n = 0;
    if (!rc) rc = iabn_list_images(pos[1], &names, &n, &e);
    if (!rc && n == 0)
        rc = iabn_err_set(&e, IABN_EIO, "no image in %s or its sub-folders", pos[1]);
    if (!rc && mkdir(pos[2], 0777) && errno != EEXIST)
        rc = iabn_err_set(&e, IABN_EIO, "cannot create %s", pos[2]);
    uint8_t palette[256 * 3];
    iabn_label_palette(classes, palette);
    int written = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        char in[8192], out[8192];
        snprintf(in, sizeof in, "%s/%s", pos[1], names[i]);
        snprintf(out, sizeof out, "%s/%.*s.png", pos[2], (int)(strrchr(names[i], '.') - names[i]), names[i]);
        if ((rc = make_parents(pos[2], names[i], &e))) break;
        iabn_image img = {0}, lab = {0};
        if ((rc = iabn_image_load(in, 0, &img, &e))) break;
        size_t hw = (size_t)img.width * img.height;
        float *x = malloc(3 * hw * sizeof *x), *acc = malloc((size_t)classes * hw * sizeof *acc);
        int32_t *pred = malloc(hw * sizeof *pred);
        if (!x || !acc || !pred) rc = iabn_err_set(&e, IABN_ENOMEM, "out of memory for %s", in);
        if (!rc) {
            iabn_image_to_chw(&img, cfg->mean, cfg->std, x);
            rc = iabn_predictor_logits(pr, x, img.height, img.width, scales, ns, flip, acc, &e);
        }
        if (!rc) rc = iabn_image_alloc(&lab, img.width, img.height, 1, 1, &e);
        if (!rc) {
            iabn_argmax_channels(classes, hw, acc, pred);
            for (size_t k = 0; k < hw; k++)
                lab.data[k] = (uint8_t)(labelids ? iabn_cityscapes_label_id(pred[k]) : pred[k]);
            rc = iabn_image_write_png(out, &lab, color ? palette : NULL, color ? classes : 0, &e);
            written += !rc;
        }
        free(x);
        free(acc);
        free(pred);
        iabn_image_free(&img);
        iabn_image_free(&lab);
    }
    iabn_strings_free(names, n);
    iabn_predictor_close(pr);
    if (rc) {
        fprintf(stderr, "iabn predict: %s\n", e.msg);
        return 1;
    }
    printf("%d label maps written to %s\n", written, pos[2]);
    return 0;
}
