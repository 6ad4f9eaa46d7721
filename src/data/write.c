/* write.c: PNG and JPEG writers, for the synthetic data sets and for label
 * predictions.  Files are written to "<path>.tmp" and renamed, so a reader
 * never sees half a file. */
#include "data/data_internal.h"

#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

typedef struct png_wjob {
    FILE *f;
    const iabn_image *img;
    const uint8_t *palette;
    int n_palette;
    char msg[200];
    png_structp png;
    png_infop info;
} png_wjob;

static void pngw_on_error(png_structp p, png_const_charp m)
{
    png_wjob *j = png_get_error_ptr(p);
    snprintf(j->msg, sizeof j->msg, "%s", m);
    png_longjmp(p, 1);
}

static void pngw_on_warning(png_structp p, png_const_charp m)
{
    (void)p;
    (void)m;
}

static int png_write_run(png_wjob *j)
{
    const iabn_image *im = j->img;
    j->png = png_create_write_struct(PNG_LIBPNG_VER_STRING, j, pngw_on_error, pngw_on_warning);
    if (!j->png) {
        snprintf(j->msg, sizeof j->msg, "out of memory");
        return -1;
    }
    j->info = png_create_info_struct(j->png);
    if (!j->info) {
        png_destroy_write_struct(&j->png, NULL);
        snprintf(j->msg, sizeof j->msg, "out of memory");
        return -1;
    }
    if (setjmp(png_jmpbuf(j->png))) {
        png_destroy_write_struct(&j->png, &j->info);
        return -1;
    }
    png_init_io(j->png, j->f);
    int type = im->channels == 3 ? PNG_COLOR_TYPE_RGB
               : j->palette     ? PNG_COLOR_TYPE_PALETTE
                                : PNG_COLOR_TYPE_GRAY;
    png_set_IHDR(j->png, j->info, (png_uint_32)im->width, (png_uint_32)im->height,
                 im->depth * 8, type, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (type == PNG_COLOR_TYPE_PALETTE) {
        png_color pal[256];
        for (int i = 0; i < j->n_palette; i++) {
            pal[i].red = j->palette[3 * i];
            pal[i].green = j->palette[3 * i + 1];
            pal[i].blue = j->palette[3 * i + 2];
        }
        png_set_PLTE(j->png, j->info, pal, j->n_palette);
    }
    /* Synthetic data is written often and read once: favour speed. */
    png_set_compression_level(j->png, 3);
    png_write_info(j->png, j->info);
    if (im->depth == 2) png_set_swap(j->png);
    size_t row = (size_t)im->width * im->channels * im->depth;
    for (int y = 0; y < im->height; y++) png_write_row(j->png, im->data + row * y);
    png_write_end(j->png, NULL);
    png_destroy_write_struct(&j->png, &j->info);
    return 0;
}

static int open_tmp(const char *path, char *tmp, size_t n, FILE **f, iabn_err *e)
{
    if ((size_t)snprintf(tmp, n, "%s.tmp", path) >= n)
        return iabn_err_set(e, IABN_EINVAL, "path too long: %s", path);
    *f = fopen(tmp, "wb");
    if (!*f) return iabn_err_set(e, IABN_EIO, "cannot create %s: %s", tmp, strerror(errno));
    return 0;
}

static int close_rename(FILE *f, const char *tmp, const char *path, int failed, iabn_err *e)
{
    int bad = ferror(f);
    if (fclose(f)) bad = 1;
    if (failed || bad) {
        remove(tmp);
        if (!failed) return iabn_err_set(e, IABN_EIO, "cannot write %s: %s", tmp,
                                         strerror(errno));
        return e ? e->code : IABN_EIO;
    }
    if (rename(tmp, path)) {
        int er = errno;
        remove(tmp);
        return iabn_err_set(e, IABN_EIO, "cannot rename %s to %s: %s", tmp, path,
                            strerror(er));
    }
    return 0;
}

int iabn_image_write_png(const char *path, const iabn_image *img, const uint8_t *palette,
                         int n_palette, iabn_err *e)
{
    if (!img || !img->data || (img->channels != 1 && img->channels != 3) ||
        (img->depth != 1 && img->depth != 2) || (img->channels == 3 && img->depth != 1))
        return iabn_err_set(e, IABN_EINVAL, "%s: cannot write this image as PNG", path);
    if (palette && (img->channels != 1 || img->depth != 1 || n_palette < 1 || n_palette > 256))
        return iabn_err_set(e, IABN_EINVAL, "%s: a palette needs an 8-bit single-channel "
                            "image and 1..256 entries", path);
    char tmp[4096];
    FILE *f;
    int rc = open_tmp(path, tmp, sizeof tmp, &f, e);
    if (rc) return rc;
    png_wjob j;
    memset(&j, 0, sizeof j);
    j.f = f;
    j.img = img;
    j.palette = palette;
    j.n_palette = n_palette;
    int failed = png_write_run(&j);
    if (failed) iabn_err_set(e, IABN_EIO, "%s: PNG encoder: %s", path, j.msg);
    return close_rename(f, tmp, path, failed, e);
}

typedef struct jpeg_wctx {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} jpeg_wctx;

static void jpegw_on_error(j_common_ptr c)
{
    jpeg_wctx *x = (jpeg_wctx *)c->err;
    c->err->format_message(c, x->msg);
    longjmp(x->jump, 1);
}

static void jpegw_on_output(j_common_ptr c) { (void)c; }

typedef struct jpeg_wjob {
    struct jpeg_compress_struct ci;
    jpeg_wctx err;
    FILE *f;
    const iabn_image *img;
    int quality;
} jpeg_wjob;

static int jpeg_write_run(jpeg_wjob *j)
{
    j->ci.err = jpeg_std_error(&j->err.pub);
    j->err.pub.error_exit = jpegw_on_error;
    j->err.pub.output_message = jpegw_on_output;
    if (setjmp(j->err.jump)) {
        jpeg_destroy_compress(&j->ci);
        return -1;
    }
    jpeg_create_compress(&j->ci);
    jpeg_stdio_dest(&j->ci, j->f);
    j->ci.image_width = (JDIMENSION)j->img->width;
    j->ci.image_height = (JDIMENSION)j->img->height;
    j->ci.input_components = j->img->channels;
    j->ci.in_color_space = j->img->channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_set_defaults(&j->ci);
    jpeg_set_quality(&j->ci, j->quality, TRUE);
    jpeg_start_compress(&j->ci, TRUE);
    size_t row = (size_t)j->img->width * j->img->channels;
    while (j->ci.next_scanline < j->ci.image_height) {
        JSAMPROW r = j->img->data + row * j->ci.next_scanline;
        jpeg_write_scanlines(&j->ci, &r, 1);
    }
    jpeg_finish_compress(&j->ci);
    jpeg_destroy_compress(&j->ci);
    return 0;
}

int iabn_image_write_jpeg(const char *path, const iabn_image *img, int quality, iabn_err *e)
{
    if (!img || !img->data || img->depth != 1 || (img->channels != 1 && img->channels != 3))
        return iabn_err_set(e, IABN_EINVAL, "%s: JPEG needs an 8-bit gray or RGB image", path);
    if (quality < 1 || quality > 100)
        return iabn_err_set(e, IABN_EINVAL, "%s: JPEG quality %d not in 1..100", path, quality);
    char tmp[4096];
    FILE *f;
    int rc = open_tmp(path, tmp, sizeof tmp, &f, e);
    if (rc) return rc;
    jpeg_wjob j;
    memset(&j, 0, sizeof j);
    j.f = f;
    j.img = img;
    j.quality = quality;
    int failed = jpeg_write_run(&j);
    if (failed) iabn_err_set(e, IABN_EIO, "%s: JPEG encoder: %s", path, j.err.msg);
    return close_rename(f, tmp, path, failed, e);
}
