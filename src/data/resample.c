/* resample.c: PIL-compatible geometric operations.
 *
 * The bilinear resize reproduces Pillow's ImagingResample (the arithmetic, not
 * its code): a triangle filter whose support widens with the downscale factor
 * (so downscaling is antialiased, unlike plain bilinear interpolation),
 * coefficients normalised per output pixel and rounded to 22-bit fixed point,
 * a horizontal pass rounded to 8 bits, then a vertical pass.  The result is
 * bit-identical to PIL for integer boxes.  The resampler can compute just a
 * window of the output, which is how crops of a resized image avoid resizing
 * what is cropped away.  Nearest follows PIL's affine scaling (source
 * coordinate accumulated in double, then floored).
 */
#include "data/data_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define PREC 22 /* Pillow's PRECISION_BITS for 8-bit images */

void iabn_resample_job_init(iabn_resample_job *j, int src_w, int src_h, int out_w, int out_h)
{
    j->src_w = src_w;
    j->src_h = src_h;
    j->box[0] = 0;
    j->box[1] = 0;
    j->box[2] = src_w;
    j->box[3] = src_h;
    j->out_w = out_w;
    j->out_h = out_h;
    j->win_x = 0;
    j->win_y = 0;
    j->win_w = out_w;
    j->win_h = out_h;
}

/* Filter geometry of one axis; the box edges pass through float as in PIL. */
typedef struct axis {
    double in0, scale, support, inv_fs;
    int in_size, ksize;
} axis;

static void axis_init(axis *a, int in_size, double b0, double b1, int out_size)
{
    float f0 = (float)b0, f1 = (float)b1;
    double scale = (double)(f1 - f0) / out_size;
    double fs = scale < 1.0 ? 1.0 : scale;
    a->in0 = f0;
    a->scale = scale;
    a->support = fs; /* the triangle's support is 1 */
    a->inv_fs = 1.0 / fs;
    a->in_size = in_size;
    a->ksize = (int)ceil(a->support) * 2 + 1;
}

static void axis_bounds(const axis *a, int xx, int *lo, int *n)
{
    double center = a->in0 + (xx + 0.5) * a->scale;
    int xmin = (int)(center - a->support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = (int)(center + a->support + 0.5);
    if (xmax > a->in_size) xmax = a->in_size;
    xmax -= xmin;
    if (xmax < 0) xmax = 0;
    if (xmax > a->ksize) xmax = a->ksize;
    *lo = xmin;
    *n = xmax;
}

/* Fixed-point taps of output positions [from, from + count). */
static void axis_coeffs(const axis *a, int from, int count, int *bounds, int32_t *kk)
{
    double w[64];
    for (int i = 0; i < count; i++) {
        int xmin, n;
        axis_bounds(a, from + i, &xmin, &n);
        double center = a->in0 + (from + i + 0.5) * a->scale, ww = 0;
        for (int x = 0; x < n; x++) {
            double t = fabs((x + xmin - center + 0.5) * a->inv_fs);
            w[x] = t < 1.0 ? 1.0 - t : 0.0;
            ww += w[x];
        }
        int32_t *k = kk + (size_t)i * a->ksize;
        for (int x = 0; x < a->ksize; x++) {
            double v = x < n ? (ww != 0.0 ? w[x] / ww : w[x]) : 0.0;
            k[x] = (int32_t)(v < 0 ? -0.5 + v * (1 << PREC) : 0.5 + v * (1 << PREC));
        }
        bounds[2 * i] = xmin;
        bounds[2 * i + 1] = n;
    }
}

static inline uint8_t clip8(int32_t v)
{
    v >>= PREC;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One row of the horizontal pass (portable). */
static void hrow(const uint8_t *s, int src_x0, int ch, const int *hb, const int32_t *hk,
                 int ksize, int n_out, uint8_t *d)
{
    for (int x = 0; x < n_out; x++) {
        const int32_t *k = hk + (size_t)x * ksize;
        const uint8_t *p = s + (size_t)(hb[2 * x] - src_x0) * ch;
        int n = hb[2 * x + 1];
        if (ch == 3) {
            int32_t s0 = 1 << (PREC - 1), s1 = s0, s2 = s0;
            for (int t = 0; t < n; t++, p += 3) {
                s0 += p[0] * k[t];
                s1 += p[1] * k[t];
                s2 += p[2] * k[t];
            }
            d[3 * x] = clip8(s0);
            d[3 * x + 1] = clip8(s1);
            d[3 * x + 2] = clip8(s2);
        } else {
            for (int c = 0; c < ch; c++) {
                int32_t s0 = 1 << (PREC - 1);
                for (int t = 0; t < n; t++) s0 += p[t * ch + c] * k[t];
                d[x * ch + c] = clip8(s0);
            }
        }
    }
}

#if defined(__AVX2__)
/* The horizontal pass is where the time goes (it runs over every source row
 * the crop covers).  Widened to 4 bytes per pixel, two taps of one output
 * pixel are one 8-lane multiply; integer sums in another order, so the
 * result is the same to the bit. */
static size_t hpass_avx2_bytes(const axis *ax, int n_out)
{
    return (size_t)n_out * ((ax->ksize + 1) / 2) * 8 * sizeof(int32_t) +
           ((size_t)ax->in_size + 4) * 4 + 64;
}

/* mem: hpass_avx2_bytes() of scratch */
static void hpass_avx2(const axis *ax, const int *hb, const int32_t *hk, int n_out,
                       const uint8_t *src, int src_x0, int src_y0, size_t src_row, int ry0,
                       int ry1, uint8_t *out, size_t orow, uint8_t *mem)
{
    int ks = ax->ksize, np = (ks + 1) / 2;
    int cx0 = hb[0], cx1 = hb[0];
    for (int x = 0; x < n_out; x++)
        if (hb[2 * x] + hb[2 * x + 1] > cx1) cx1 = hb[2 * x] + hb[2 * x + 1];
    size_t kbytes = (size_t)n_out * np * 8 * sizeof(int32_t);
    size_t rbytes = ((size_t)(cx1 - cx0) + 4) * 4;
    int32_t *kp = (int32_t *)(((uintptr_t)mem + 31) & ~(uintptr_t)31);
    uint8_t *row = (uint8_t *)kp + kbytes;
    for (int x = 0; x < n_out; x++) {
        const int32_t *k = hk + (size_t)x * ks;
        int n = hb[2 * x + 1];
        for (int p = 0; p < np; p++)
            for (int l = 0; l < 8; l++) {
                int t = 2 * p + l / 4;
                kp[((size_t)x * np + p) * 8 + l] = t < n ? k[t] : 0;
            }
    }
    memset(row, 0, rbytes);
    const __m128i half = _mm_set1_epi32(1 << (PREC - 1));
    const __m128i widen = _mm_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
    for (int y = ry0; y < ry1; y++) {
        const uint8_t *s = src + (size_t)(y - src_y0) * src_row + (size_t)(cx0 - src_x0) * 3;
        int nx = cx1 - cx0, i = 0;
        for (; i + 6 <= nx; i += 4) /* 16-byte loads stay inside the row */
            _mm_storeu_si128((__m128i *)(row + 4 * i),
                             _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + 3 * i)),
                                              widen));
        for (; i < nx; i++) memcpy(row + 4 * i, s + 3 * i, 3);
        uint8_t *d = out + (size_t)(y - ry0) * orow;
        for (int x = 0; x < n_out; x++) {
            const uint8_t *p = row + (size_t)(hb[2 * x] - cx0) * 4;
            const __m256i *k = (const __m256i *)(kp + (size_t)x * np * 8);
            int pairs = (hb[2 * x + 1] + 1) / 2;
            __m256i acc = _mm256_setzero_si256();
            for (int q = 0; q < pairs; q++) {
                __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8 * q)));
                acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(v, _mm256_load_si256(k + q)));
            }
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(acc),
                                       _mm256_extracti128_si256(acc, 1));
            s4 = _mm_srai_epi32(_mm_add_epi32(s4, half), PREC);
            s4 = _mm_packus_epi16(_mm_packs_epi32(s4, s4), s4);
            if (x + 1 < n_out) { /* the next pixel overwrites the 4th byte */
                _mm_storeu_si32(d + 3 * x, s4);
            } else {
                uint32_t v = (uint32_t)_mm_cvtsi128_si32(s4);
                memcpy(d + 3 * x, &v, 3);
            }
        }
    }
}
#endif

static int identity_axis(int in_size, double b0, double b1, int out_size)
{
    return out_size == in_size && b0 == 0 && b1 == in_size;
}

/* Nearest source index of output positions [0, upto): PIL accumulates. */
static void nearest_index(int in_size, double b0, double b1, int out_size, int upto, int *idx)
{
    float f0 = (float)b0, f1 = (float)b1;
    double a = ((double)f1 - (double)f0) / out_size;
    double xo = (double)f0 + a * 0.5;
    for (int x = 0; x < upto; x++) {
        int v = (int)floor(xo);
        idx[x] = v < 0 ? 0 : v >= in_size ? in_size - 1 : v;
        xo += a;
    }
}

void iabn_resample_needs(const iabn_resample_job *j, iabn_resample mode, int *x0, int *y0,
                         int *x1, int *y1)
{
    int lo[2], hi[2];
    for (int ax = 0; ax < 2; ax++) {
        int in = ax ? j->src_h : j->src_w, out = ax ? j->out_h : j->out_w;
        int w0 = ax ? j->win_y : j->win_x, wn = ax ? j->win_h : j->win_w;
        double b0 = j->box[ax], b1 = j->box[ax + 2];
        if (identity_axis(in, b0, b1, out)) {
            lo[ax] = w0;
            hi[ax] = w0 + wn;
        } else if (mode == IABN_RESAMPLE_NEAREST) {
            /* monotone, so the ends suffice; small margin for the accumulation */
            double a = (b1 - b0) / out;
            lo[ax] = (int)floor(b0 + a * (w0 + 0.5)) - 1;
            hi[ax] = (int)floor(b0 + a * (w0 + wn - 0.5)) + 2;
        } else {
            axis a;
            axis_init(&a, in, b0, b1, out);
            int s, n;
            axis_bounds(&a, w0, &s, &n);
            lo[ax] = s;
            axis_bounds(&a, w0 + wn - 1, &s, &n);
            hi[ax] = s + n;
        }
        if (lo[ax] < 0) lo[ax] = 0;
        if (hi[ax] > in) hi[ax] = in;
        if (hi[ax] < lo[ax]) hi[ax] = lo[ax];
    }
    *x0 = lo[0];
    *y0 = lo[1];
    *x1 = hi[0];
    *y1 = hi[1];
}

static int resample_nearest(const iabn_resample_job *j, const uint8_t *src, int sx0, int sy0,
                            size_t srow, int ch, int depth, uint8_t *dst, size_t drow,
                            iabn_buf *coef, iabn_err *e)
{
    int nx = j->win_x + j->win_w, ny = j->win_y + j->win_h;
    int *ix = iabn_buf_reserve(coef, sizeof(int) * ((size_t)nx + ny));
    if (!ix) return iabn_err_set(e, IABN_ENOMEM, "out of memory (resize)");
    int *iy = ix + nx;
    nearest_index(j->src_w, j->box[0], j->box[2], j->out_w, nx, ix);
    nearest_index(j->src_h, j->box[1], j->box[3], j->out_h, ny, iy);
    size_t px = (size_t)ch * depth;
    for (int y = 0; y < j->win_h; y++) {
        const uint8_t *s = src + (size_t)(iy[j->win_y + y] - sy0) * srow;
        uint8_t *d = dst + (size_t)y * drow;
        for (int x = 0; x < j->win_w; x++)
            memcpy(d + x * px, s + (size_t)(ix[j->win_x + x] - sx0) * px, px);
    }
    return 0;
}

int iabn_resample_run(const iabn_resample_job *j, iabn_resample mode, const uint8_t *src,
                  int src_x0, int src_y0, size_t src_row, int channels, int depth,
                  uint8_t *dst, size_t dst_row, iabn_buf *coef, iabn_buf *tmp, iabn_err *e)
{
    if (j->win_w <= 0 || j->win_h <= 0 || j->out_w <= 0 || j->out_h <= 0 || j->src_w <= 0 ||
        j->src_h <= 0 || j->win_x < 0 || j->win_y < 0 || j->win_x + j->win_w > j->out_w ||
        j->win_y + j->win_h > j->out_h)
        return iabn_err_set(e, IABN_EINVAL, "resize: bad window %dx%d+%d+%d of %dx%d",
                            j->win_w, j->win_h, j->win_x, j->win_y, j->out_w, j->out_h);
    if (mode == IABN_RESAMPLE_NEAREST)
        return resample_nearest(j, src, src_x0, src_y0, src_row, channels, depth, dst,
                                dst_row, coef, e);
    if (depth != 1) return iabn_err_set(e, IABN_EINVAL, "bilinear resize needs 8-bit samples");
    const int ch = channels;
    int hid = identity_axis(j->src_w, j->box[0], j->box[2], j->out_w);
    int vid = identity_axis(j->src_h, j->box[1], j->box[3], j->out_h);
    axis ax, ay;
    axis_init(&ax, j->src_w, j->box[0], j->box[2], j->out_w);
    axis_init(&ay, j->src_h, j->box[1], j->box[3], j->out_h);
    if (ax.ksize > 64 || ay.ksize > 64)
        return iabn_err_set(e, IABN_EINVAL, "resize: downscale factor above 31 (%dx%d to "
                            "%dx%d)", j->src_w, j->src_h, j->out_w, j->out_h);
    size_t nh = hid ? 0 : (size_t)j->win_w, nv = vid ? 0 : (size_t)j->win_h;
    size_t cbytes = (nh * (2 * sizeof(int) + ax.ksize * sizeof(int32_t))) +
                    (nv * (2 * sizeof(int) + ay.ksize * sizeof(int32_t))) +
                    (size_t)j->win_w * ch * sizeof(int32_t) + 64;
#if defined(__AVX2__)
    size_t simd_at = cbytes;
    if (!hid && ch == 3) cbytes += hpass_avx2_bytes(&ax, j->win_w);
#endif
    uint8_t *cb = iabn_buf_reserve(coef, cbytes);
    if (!cb) return iabn_err_set(e, IABN_ENOMEM, "out of memory (resize)");
    int *hb = (int *)cb;
    int32_t *hk = (int32_t *)(hb + 2 * nh);
    int *vb = (int *)(hk + nh * ax.ksize);
    int32_t *vk = (int32_t *)(vb + 2 * nv);
    int32_t *acc = vk + nv * ay.ksize;
    if (!hid) axis_coeffs(&ax, j->win_x, j->win_w, hb, hk);
    if (!vid) axis_coeffs(&ay, j->win_y, j->win_h, vb, vk);

    /* rows of the source the vertical pass reads */
    int ry0, ry1;
    if (vid) {
        ry0 = j->win_y;
        ry1 = j->win_y + j->win_h;
    } else {
        ry0 = vb[0];
        ry1 = vb[0];
        for (size_t i = 0; i < nv; i++)
            if (vb[2 * i] + vb[2 * i + 1] > ry1) ry1 = vb[2 * i] + vb[2 * i + 1];
    }

    /* horizontal pass into mid (rows ry0..ry1, window columns), or straight
     * into dst when there is no vertical pass */
    const uint8_t *mid;
    size_t mid_row;
    int mid_y0;
    if (hid) {
        mid = src + (size_t)(j->win_x - src_x0) * ch;
        mid_row = src_row;
        mid_y0 = src_y0;
    } else {
        uint8_t *out;
        size_t orow;
        if (vid) {
            out = dst;
            orow = dst_row;
        } else {
            orow = (size_t)j->win_w * ch;
            out = iabn_buf_reserve(tmp, orow * (size_t)(ry1 - ry0 > 0 ? ry1 - ry0 : 1));
            if (!out) return iabn_err_set(e, IABN_ENOMEM, "out of memory (resize)");
        }
#if defined(__AVX2__)
        if (ch == 3) {
            hpass_avx2(&ax, hb, hk, j->win_w, src, src_x0, src_y0, src_row, ry0, ry1, out, orow,
                       cb + simd_at);
        } else
#endif
        for (int y = ry0; y < ry1; y++)
            hrow(src + (size_t)(y - src_y0) * src_row, src_x0, ch, hb, hk, ax.ksize, j->win_w,
                 out + (size_t)(y - ry0) * orow);
        if (vid) return 0;
        mid = out;
        mid_row = orow;
        mid_y0 = ry0;
    }
    if (vid) { /* both identity: a copy of the window */
        for (int y = 0; y < j->win_h; y++)
            memcpy(dst + (size_t)y * dst_row,
                   mid + (size_t)(j->win_y + y - mid_y0) * mid_row, (size_t)j->win_w * ch);
        return 0;
    }
    /* vertical pass: one coefficient per source row, so the inner loop runs
     * along the row and vectorises */
    size_t n = (size_t)j->win_w * ch;
    for (int y = 0; y < j->win_h; y++) {
        const int32_t *k = vk + (size_t)y * ay.ksize;
        int y0 = vb[2 * y], taps = vb[2 * y + 1];
        for (size_t i = 0; i < n; i++) acc[i] = 1 << (PREC - 1);
        for (int t = 0; t < taps; t++) {
            const uint8_t *s = mid + (size_t)(y0 + t - mid_y0) * mid_row;
            int32_t kt = k[t];
            for (size_t i = 0; i < n; i++) acc[i] += s[i] * kt;
        }
        uint8_t *d = dst + (size_t)y * dst_row;
        for (size_t i = 0; i < n; i++) d[i] = clip8(acc[i]);
    }
    return 0;
}

/* ---- whole-image operations ------------------------------------------------------ */

int iabn_image_resize(const iabn_image *src, int out_w, int out_h, iabn_resample mode,
                      iabn_image *dst, iabn_err *e)
{
    if (!src || !src->data || out_w <= 0 || out_h <= 0)
        return iabn_err_set(e, IABN_EINVAL, "resize: bad arguments (%dx%d)", out_w, out_h);
    if (mode == IABN_RESAMPLE_BILINEAR && src->depth != 1)
        return iabn_err_set(e, IABN_EINVAL, "resize: bilinear needs 8-bit samples");
    int rc = iabn_image_alloc(dst, out_w, out_h, src->channels, src->depth, e);
    if (rc) return rc;
    iabn_resample_job j;
    iabn_resample_job_init(&j, src->width, src->height, out_w, out_h);
    iabn_buf coef = {0}, tmp = {0};
    size_t row = (size_t)src->width * src->channels * src->depth;
    rc = iabn_resample_run(&j, mode, src->data, 0, 0, row, src->channels, src->depth, dst->data,
                       (size_t)out_w * src->channels * src->depth, &coef, &tmp, e);
    iabn_buf_free(&coef);
    iabn_buf_free(&tmp);
    if (rc) iabn_image_free(dst);
    return rc;
}

int iabn_image_crop(const iabn_image *src, int x, int y, int w, int h, iabn_image *dst,
                    iabn_err *e)
{
    if (!src || !src->data) return iabn_err_set(e, IABN_EINVAL, "crop: no image");
    int rc = iabn_image_alloc(dst, w, h, src->channels, src->depth, e);
    if (rc) return rc;
    size_t px = (size_t)src->channels * src->depth;
    memset(dst->data, 0, (size_t)w * h * px);
    for (int r = 0; r < h; r++) {
        int sy = y + r;
        if (sy < 0 || sy >= src->height) continue;
        int a = x < 0 ? -x : 0, b = x + w > src->width ? src->width - x : w;
        if (b <= a) continue;
        memcpy(dst->data + ((size_t)r * w + a) * px,
               src->data + ((size_t)sy * src->width + x + a) * px, (size_t)(b - a) * px);
    }
    return 0;
}

void iabn_image_hflip(iabn_image *img)
{
    size_t px = (size_t)img->channels * img->depth;
    uint8_t t[8];
    for (int y = 0; y < img->height; y++) {
        uint8_t *r = img->data + (size_t)y * img->width * px;
        for (int a = 0, b = img->width - 1; a < b; a++, b--) {
            memcpy(t, r + a * px, px);
            memcpy(r + a * px, r + b * px, px);
            memcpy(r + b * px, t, px);
        }
    }
}

void iabn_image_to_chw(const iabn_image *img, const float mean[3], const float std[3],
                       float *out)
{
    float lut[3][256];
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) lut[c][v] = ((float)v / 255.0f - mean[c]) / std[c];
    size_t hw = (size_t)img->width * img->height;
    for (size_t i = 0; i < hw; i++)
        for (int c = 0; c < 3; c++) out[c * hw + i] = lut[c][img->data[3 * i + c]];
}

void iabn_resize_short_side(int w, int h, int size, int *out_w, int *out_h)
{
    int s = w <= h ? w : h, l = w <= h ? h : w;
    int nl = (int)((double)size * l / s);
    if (w <= h) {
        *out_w = size;
        *out_h = nl;
    } else {
        *out_w = nl;
        *out_h = size;
    }
}

void iabn_center_crop_offset(int w, int h, int crop_w, int crop_h, int *x, int *y)
{
    /* torchvision pads a too-small image on both sides first */
    *x = crop_w > w ? -((crop_w - w) / 2) : (int)rint((w - crop_w) / 2.0);
    *y = crop_h > h ? -((crop_h - h) / 2) : (int)rint((h - crop_h) / 2.0);
}
