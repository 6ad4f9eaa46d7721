/* segmetrics.c: see segmetrics.h. */
#include "models/train/segmetrics.h"

#include <math.h>
#include <stdlib.h>

int iabn_confusion_init(iabn_confusion *c, int k)
{
    c->k = k;
    c->m = calloc((size_t)k * (size_t)k, sizeof *c->m);
    return c->m ? 0 : -1;
}

void iabn_confusion_free(iabn_confusion *c)
{
    free(c->m);
    c->m = NULL;
}

void iabn_confusion_add(iabn_confusion *c, const int32_t *gt, const int32_t *pred, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int g = gt[i];
        if (g < 0 || g >= c->k) continue;
        int p = pred[i];
        if (p < 0 || p >= c->k) continue;
        c->m[(size_t)g * c->k + p]++;
    }
}

double iabn_confusion_miou(const iabn_confusion *c, double *iou, double *pixel_acc)
{
    int k = c->k, counted = 0;
    double sum = 0, tp_all = 0, total = 0;
    for (int i = 0; i < k; i++) {
        double tp = (double)c->m[(size_t)i * k + i], row = 0, col = 0;
        for (int j = 0; j < k; j++) {
            row += (double)c->m[(size_t)i * k + j];
            col += (double)c->m[(size_t)j * k + i];
        }
        double den = row + col - tp;
        tp_all += tp;
        total += row;
        double v = den > 0 ? tp / den : NAN;
        if (iou) iou[i] = v;
        if (den > 0) {
            sum += v;
            counted++;
        }
    }
    if (pixel_acc) *pixel_acc = total > 0 ? tp_all / total : 0;
    return counted ? sum / counted : 0;
}

void iabn_argmax_channels(int k, size_t hw, const float *logits, int32_t *pred)
{
    for (size_t i = 0; i < hw; i++) {
        int best = 0;
        float bv = logits[i];
        for (int c = 1; c < k; c++) {
            float v = logits[(size_t)c * hw + i];
            if (v > bv) {
                bv = v;
                best = c;
            }
        }
        pred[i] = best;
    }
}
