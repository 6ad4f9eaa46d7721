/* segmetrics.h: the official segmentation metrics: a confusion matrix
 * accumulated over all images (ground-truth pixels equal to the ignore label
 * excluded), per-class IoU = TP / (TP + FP + FN), mean IoU over the classes
 * present in the ground truth or the prediction (classes absent from both are
 * skipped), and pixel accuracy. */
#ifndef IABN_MODELS_TRAIN_SEGMETRICS_H
#define IABN_MODELS_TRAIN_SEGMETRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct iabn_confusion {
    int k;
    uint64_t *m;   /* k x k, row = ground truth, column = prediction */
} iabn_confusion;

int iabn_confusion_init(iabn_confusion *c, int k);
void iabn_confusion_free(iabn_confusion *c);
/* Adds n pixels; ground truth values outside [0,k) (255) are skipped;
 * predictions must be in [0,k). */
void iabn_confusion_add(iabn_confusion *c, const int32_t *gt, const int32_t *pred, size_t n);
/* Per-class IoU into iou[k] (NAN for skipped classes); returns the mean IoU
 * (0..1) and the pixel accuracy in *pixel_acc. */
double iabn_confusion_miou(const iabn_confusion *c, double *iou, double *pixel_acc);
/* Argmax over channels of logits (K, HW) for one image. */
void iabn_argmax_channels(int k, size_t hw, const float *logits, int32_t *pred);

#endif
