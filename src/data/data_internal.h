/* data_internal.h: what the files of src/data share and nobody else sees:
 * growable scratch buffers, the region decoders behind the fast JPEG path,
 * the windowed PIL resampler and the sample RNG. */
#ifndef IABN_DATA_INTERNAL_H
#define IABN_DATA_INTERNAL_H

#include "data/data.h"

#include <stdint.h>

/* A reusable allocation: grows, never shrinks, freed once. */
typedef struct iabn_buf {
    void *p;
    size_t cap;
} iabn_buf;

void *iabn_buf_reserve(iabn_buf *b, size_t bytes);
void iabn_buf_free(iabn_buf *b);

/* ---- decoding ------------------------------------------------------------ */

/* A decoded rectangle of a (possibly DCT-scaled) image: pixel (x, y) of the
 * full scaled image, x0 <= x < x0 + img.width, is at img.data[(y - y0) * row
 * + (x - x0) * channels].  img.data points into a caller's iabn_buf. */
typedef struct iabn_region {
    iabn_image img;
    int x0, y0;
    int full_w, full_h; /* size of the whole image at the decoded scale */
} iabn_region;

/* Scratch of the decoders, kept per thread. */
typedef struct iabn_decode_scratch {
    iabn_buf pixels; /* the region */
    iabn_buf row;    /* CMYK / 16-bit rows */
} iabn_decode_scratch;

/* JPEG size at scale num/8 (libjpeg rounds up). */
int iabn_jpeg_scaled(int size, int num);
/* Decodes rows [ry0, ry1) and at least columns [rx0, rx1) of the image scaled
 * by num/8 (num = 1, 2, 4 or 8) to RGB. */
int iabn_jpeg_decode_region(const uint8_t *bytes, size_t len, int num, int rx0, int ry0,
                            int rx1, int ry1, iabn_decode_scratch *s, iabn_region *out,
                            iabn_err *e);
/* Whole image, any format: RGB (label = 0) or one channel (label = 1). */
int iabn_decode_into(const uint8_t *bytes, size_t len, int label, int min_side_hint,
                     iabn_decode_scratch *s, iabn_region *out, iabn_err *e);

/* ---- resampling ------------------------------------------------------------ */

/* Resize of a virtual source (src_w x src_h; filter taps are clamped to it) to
 * out_w x out_h, the source rectangle box mapped onto the output; only output
 * columns [win_x, win_x + win_w) and rows [win_y, win_y + win_h) are made. */
typedef struct iabn_resample_job {
    int src_w, src_h;
    double box[4];
    int out_w, out_h;
    int win_x, win_y, win_w, win_h;
} iabn_resample_job;

void iabn_resample_job_init(iabn_resample_job *j, int src_w, int src_h, int out_w, int out_h);
/* The source rectangle [x0, x1) x [y0, y1) the job reads. */
void iabn_resample_needs(const iabn_resample_job *j, iabn_resample mode, int *x0, int *y0,
                         int *x1, int *y1);
/* src points at virtual source pixel (src_x0, src_y0); rows are src_row bytes
 * apart.  Bilinear needs 8-bit samples; nearest takes any depth. */
int iabn_resample_run(const iabn_resample_job *j, iabn_resample mode, const uint8_t *src,
                  int src_x0, int src_y0, size_t src_row, int channels, int depth,
                  uint8_t *dst, size_t dst_row, iabn_buf *coef, iabn_buf *tmp, iabn_err *e);

/* ---- sample RNG ------------------------------------------------------------ */

typedef struct iabn_draw {
    uint64_t seed, key, n;
} iabn_draw;

double iabn_draw_u01(iabn_draw *d);                   /* [0, 1), 53 bits */
double iabn_draw_uniform(iabn_draw *d, double lo, double hi);
int iabn_draw_int(iabn_draw *d, int lo, int hi);       /* [lo, hi] */
double iabn_draw_normal(iabn_draw *d);

#endif
