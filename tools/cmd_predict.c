/* cmd_predict.c: `iabn predict CHECKPOINT IN_DIR OUT_DIR`: every image of
 * IN_DIR and its sub-folders to a PNG label map of the same relative path in
 * OUT_DIR (models/train/predict.h writes them): raw class ids by default, the
 * data set's palette with --color, Cityscapes labelIds with --labelids.  The
 * model and its input normalisation come from the configuration stored in
 * the checkpoint (--config: from that file instead); --scales and --flip
 * average the logits over test-time augmentations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iabn.h"
#include "tools/cmd_train.h"
#include "tools/commands.h"
#include "tools/options.h"

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
    int rc = iabn_predictor_open(pos[0], &po, &pr, &e), written = 0;
    iabn_predict_folder_opts fo = {scales, ns, flip,
                                   labelids ? IABN_LABELS_CITYSCAPES_IDS
                                   : color  ? IABN_LABELS_COLOR
                                            : IABN_LABELS_IDS};
    if (!rc) rc = iabn_predict_folder(pr, pos[1], pos[2], &fo, &written, &e);
    iabn_predictor_close(pr);
    if (rc) {
        fprintf(stderr, "iabn predict: %s\n", e.msg);
        return 1;
    }
    printf("%d label maps written to %s\n", written, pos[2]);
    return 0;
}
