/* predict.h: label maps of a folder of images through an opened predictor
 * (trainer.h's iabn_predictor): what `iabn predict` writes.  Every image
 * under the input folder and its sub-folders (a Cityscapes split holds one
 * folder per city), sorted, becomes a PNG of the same relative path in the
 * output folder: raw class ids, Cityscapes labelIds (for the official
 * evaluation scripts; a 19-class model), or the palette's colours. */
#ifndef IABN_MODELS_TRAIN_PREDICT_H
#define IABN_MODELS_TRAIN_PREDICT_H

#include "models/train/segmetrics.h"
#include "models/train/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum iabn_label_output {
    IABN_LABELS_IDS = 0,         /* class ids                                    */
    IABN_LABELS_CITYSCAPES_IDS,  /* Cityscapes labelIds                          */
    IABN_LABELS_COLOR            /* iabn_label_palette's colours                 */
} iabn_label_output;

typedef struct iabn_predict_folder_opts {
    const float *scales;         /* test-time scales, logits averaged (NULL: 1)  */
    int nscales;
    int flip;                    /* also the mirrored image                      */
    iabn_label_output output;
} iabn_predict_folder_opts;

/* Writes the maps; *written counts them.  No image at all is an error. */
int iabn_predict_folder(iabn_predictor *p, const char *in_dir, const char *out_dir,
                        const iabn_predict_folder_opts *o, int *written, iabn_err *e);

#ifdef __cplusplus
}
#endif
#endif
