/* image.c: image and label decoding.
 *
 * The format comes from the magic bytes (ImageNet has a PNG named .JPEG).
 * JPEG goes through libjpeg-turbo, with DCT scaling and region decoding for
 * the fast training path; PNG through libpng; binary PGM/PPM by hand.  Images
 * end as 8-bit RGB with PIL's conversions (CMYK inverted as Adobe writes it,
 * alpha dropped, palette expanded, 16-bit to the high byte); labels keep their
 * stored values in one 8- or 16-bit channel.  libjpeg and libpng report errors
 * by longjmp into a per-call context, so no state outlives a call.
 */
#include "data/data_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

void *iabn_buf_reserve(iabn_buf *b, size_t bytes)
{
    if (b->p && bytes <= b->cap) return b->p;
    size_t n = b->cap ? b->cap : 4096;
    while (n < bytes) {
        if (n > SIZE_MAX / 2) return NULL;
        n *= 2;
    }
    void *p = realloc(b->p, n);
    if (!p) return NULL;
    b->p = p;
    b->cap = n;
    return p;
}

void iabn_buf_free(iabn_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->cap = 0;
}

const char *iabn_image_format_name(iabn_image_format f)
{
    switch (f) {
    case IABN_IMAGE_JPEG: return "JPEG";
    case IABN_IMAGE_PNG: return "PNG";
    case IABN_IMAGE_PNM: return "PNM";
    default: return "unknown";
    }
}

/* ---- probing ---------------------------------------------------------------- */

static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Names the formats we recognise but do not decode, for the message. */
static const char *other_format(const uint8_t *b, size_t n)
{
    if (n >= 2 && b[0] == 'B' && b[1] == 'M') return "BMP";
    if (n >= 4 && !memcmp(b, "GIF8", 4)) return "GIF";
    if (n >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4)) return "WebP";
    if (n >= 4 && (!memcmp(b, "II*\0", 4) || !memcmp(b, "MM\0*", 4))) return "TIFF";
    return NULL;
}

/* Netpbm header: magic, width, height, maxval, one whitespace; '#' comments. */
static int pnm_header(const uint8_t *b, size_t n, int v[3], size_t *data_off)
{
    size_t i = 2;
    for (int k = 0; k < 3; k++) {
        for (;;) {
            while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r'))
                i++;
            if (i < n && b[i] == '#') {
                while (i < n && b[i] != '\n') i++;
                continue;
            }
            break;
        }
        if (i >= n || b[i] < '0' || b[i] > '9') return -1;
        long x = 0;
        while (i < n && b[i] >= '0' && b[i] <= '9') {
            x = x * 10 + (b[i++] - '0');
            if (x > 1000000) return -1;
        }
        v[k] = (int)x;
    }
    if (i >= n) return -1;
    *data_off = i + 1;
    return 0;
}

typedef struct jpeg_ctx {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
    int hit_eof;
} jpeg_ctx;

static void jpeg_on_error(j_common_ptr c)
{
    jpeg_ctx *x = (jpeg_ctx *)c->err;
    c->err->format_message(c, x->msg);
    longjmp(x->jump, 1);
}

/* Warnings are counted, not printed; only a premature end of data matters
 * (PIL refuses truncated files too; other corrupt-data warnings it ignores). */
static void jpeg_on_message(j_common_ptr c, int level)
{
    jpeg_ctx *x = (jpeg_ctx *)c->err;
    if (level < 0) {
        if (c->err->msg_code == JWRN_JPEG_EOF) x->hit_eof = 1;
        c->err->num_warnings++;
    }
}

static void jpeg_on_output(j_common_ptr c) { (void)c; }

typedef struct jpeg_job {
    struct jpeg_decompress_struct ci;
    jpeg_ctx err;
    const uint8_t *bytes;
    size_t len;
    int num;                 /* scale num/8; 0 = only read the header */
    int rx0, ry0, rx1, ry1;  /* wanted region (scaled coordinates) */
    iabn_decode_scratch *s;
    iabn_region *out;
    iabn_image_info *info;
    const char *fail;        /* our own error, outside libjpeg */
} jpeg_job;

/* An end-of-image marker after the first scan: without it the file was cut.
 * Entropy-coded data cannot contain FF D9 (0xFF is always stuffed). */
static int jpeg_has_eoi(const uint8_t *p, size_t n)
{
    for (size_t i = n; i >= 2; i--)
        if (p[i - 2] == 0xFF && p[i - 1] == 0xD9) return 1;
    return 0;
}

/* PIL's CMYK -> RGB on Adobe's inverted CMYK: v = k' - c*k'/255 with
 * c = 255 - stored and k' = stored k. */
static void cmyk_row_to_rgb(const uint8_t *in, uint8_t *out, int n)
{
    for (int x = 0; x < n; x++, in += 4, out += 3) {
        int nk = in[3];
        for (int c = 0; c < 3; c++) {
            int t = (255 - in[c]) * nk + 128;
            int v = nk - (((t >> 8) + t) >> 8);
            out[c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

static int jpeg_run(jpeg_job *j)
{
    struct jpeg_decompress_struct *ci = &j->ci;
    ci->err = jpeg_std_error(&j->err.pub);
    j->err.pub.error_exit = jpeg_on_error;
    j->err.pub.emit_message = jpeg_on_message;
    j->err.pub.output_message = jpeg_on_output;
    if (setjmp(j->err.jump)) {
        jpeg_destroy_decompress(ci);
        return -1;
    }
    jpeg_create_decompress(ci);
    jpeg_mem_src(ci, j->bytes, (unsigned long)j->len);
    jpeg_read_header(ci, TRUE);
    int cmyk = ci->num_components == 4 &&
               (ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK);
    if ((int64_t)ci->image_width * ci->image_height > IABN_IMAGE_MAX_PIXELS) {
        j->fail = "image too large";
        jpeg_destroy_decompress(ci);
        return -1;
    }
    if (j->info) {
        j->info->format = IABN_IMAGE_JPEG;
        j->info->width = (int)ci->image_width;
        j->info->height = (int)ci->image_height;
        j->info->channels = ci->num_components;
        j->info->bit_depth = ci->data_precision;
        j->info->palette = 0;
        j->info->cmyk = cmyk;
    }
    if (j->num == 0) {
        jpeg_destroy_decompress(ci);
        return 0;
    }
    size_t scan = (size_t)(ci->src->next_input_byte - j->bytes);
    if (!jpeg_has_eoi(j->bytes + scan, j->len - scan)) {
        j->fail = "truncated JPEG (no end-of-image marker)";
        jpeg_destroy_decompress(ci);
        return -1;
    }
    if (ci->num_components != 1 && ci->num_components != 3 && !cmyk) {
        j->fail = "unsupported JPEG colour space";
        jpeg_destroy_decompress(ci);
        return -1;
    }
    ci->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    ci->scale_num = (unsigned)j->num;
    ci->scale_denom = 8;
    ci->dct_method = JDCT_ISLOW;
    jpeg_start_decompress(ci);
    int W = (int)ci->output_width, H = (int)ci->output_height;
    /* A margin around the wanted region keeps its pixels identical to a full
     * decode: the chroma upsampler reads neighbours across the cut. */
    int x0 = j->rx0 - 16, x1 = j->rx1 + 16, y0 = j->ry0 - 16, y1 = j->ry1;
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > W) x1 = W;
    if (y1 > H) y1 = H;
    if (x1 <= x0 || y1 <= y0) {
        j->fail = "empty decode region";
        jpeg_destroy_decompress(ci);
        return -1;
    }
    JDIMENSION xoff = (JDIMENSION)x0, cw = (JDIMENSION)(x1 - x0);
    if (x0 > 0 || x1 < W) jpeg_crop_scanline(ci, &xoff, &cw);
    if (y0 > 0) jpeg_skip_scanlines(ci, (JDIMENSION)y0);
    int rw = (int)cw, rh = y1 - y0;
    uint8_t *pix = iabn_buf_reserve(&j->s->pixels, (size_t)rw * 3 * (size_t)rh);
    uint8_t *row4 = cmyk ? iabn_buf_reserve(&j->s->row, (size_t)rw * 4 * 16) : NULL;
    if (!pix || (cmyk && !row4)) {
        j->fail = "out of memory";
        jpeg_destroy_decompress(ci);
        return -1;
    }
    while ((int)ci->output_scanline < y1) {
        int at = (int)ci->output_scanline - y0;
        int want = y1 - (int)ci->output_scanline;
        if (want > 16) want = 16;
        JSAMPROW rows[16];
        for (int r = 0; r < want; r++)
            rows[r] = cmyk ? row4 + (size_t)r * rw * 4 : pix + (size_t)(at + r) * rw * 3;
        int got = (int)jpeg_read_scanlines(ci, rows, (JDIMENSION)want);
        if (got <= 0) {
            j->fail = "JPEG decoder returned no rows";
            jpeg_destroy_decompress(ci);
            return -1;
        }
        if (cmyk)
            for (int r = 0; r < got; r++)
                cmyk_row_to_rgb(rows[r], pix + (size_t)(at + r) * rw * 3, rw);
    }
    if ((int)ci->output_scanline < (int)ci->output_height)
        jpeg_abort_decompress(ci);
    else
        jpeg_finish_decompress(ci);
    if (j->err.hit_eof) {
        j->fail = "truncated JPEG (premature end of data)";
        jpeg_destroy_decompress(ci);
        return -1;
    }
    jpeg_destroy_decompress(ci);
    iabn_region *o = j->out;
    o->img.width = rw;
    o->img.height = rh;
    o->img.channels = 3;
    o->img.depth = 1;
    o->img.data = pix;
    o->x0 = (int)xoff;
    o->y0 = y0;
    o->full_w = W;
    o->full_h = H;
    return 0;
}

static int jpeg_fail(jpeg_job *j, iabn_err *e)
{
    if (j->fail) return iabn_err_set(e, IABN_EFORMAT, "%s", j->fail);
    return iabn_err_set(e, IABN_EFORMAT, "corrupt JPEG: %s", j->err.msg);
}

int iabn_jpeg_scaled(int size, int num) { return (int)(((int64_t)size * num + 7) / 8); }

int iabn_jpeg_decode_region(const uint8_t *bytes, size_t len, int num, int rx0, int ry0,
                            int rx1, int ry1, iabn_decode_scratch *s, iabn_region *out,
                            iabn_err *e)
{
    if (num != 1 && num != 2 && num != 4 && num != 8)
        return iabn_err_set(e, IABN_EINVAL, "JPEG scale %d/8 not in {1, 2, 4, 8}/8", num);
    jpeg_job j;
    memset(&j, 0, sizeof j);
    j.bytes = bytes;
    j.len = len;
    j.num = num;
    j.rx0 = rx0;
    j.ry0 = ry0;
    j.rx1 = rx1;
    j.ry1 = ry1;
    j.s = s;
    j.out = out;
    if (jpeg_run(&j)) return jpeg_fail(&j, e);
    return 0;
}

int iabn_image_probe(const void *bytes_, size_t len, iabn_image_info *out, iabn_err *e)
{
    const uint8_t *b = bytes_;
    memset(out, 0, sizeof *out);
    if (len == 0) return iabn_err_set(e, IABN_EFORMAT, "empty file (0 bytes)");
    if (len >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) {
        jpeg_job j;
        memset(&j, 0, sizeof j);
        j.bytes = b;
        j.len = len;
        j.info = out;
        if (jpeg_run(&j)) return jpeg_fail(&j, e);
        return 0;
    }
    if (len >= 8 && !memcmp(b, png_sig, 8)) {
        if (len < 33 || memcmp(b + 12, "IHDR", 4) || be32(b + 8) != 13)
            return iabn_err_set(e, IABN_EFORMAT, "corrupt PNG: no IHDR chunk");
        uint32_t w = be32(b + 16), h = be32(b + 20);
        int depth = b[24], type = b[25];
        static const int comps[7] = {1, 0, 3, 1, 2, 0, 4};
        if (w == 0 || h == 0 || w > 0x7fffffffu || h > 0x7fffffffu || type > 6 ||
            comps[type] == 0 || (depth != 1 && depth != 2 && depth != 4 && depth != 8 &&
                                 depth != 16))
            return iabn_err_set(e, IABN_EFORMAT, "corrupt PNG: bad IHDR (%ux%u, depth %d, "
                                "colour type %d)", w, h, depth, type);
        if ((int64_t)w * h > IABN_IMAGE_MAX_PIXELS)
            return iabn_err_set(e, IABN_EFORMAT, "PNG too large (%ux%u)", w, h);
        out->format = IABN_IMAGE_PNG;
        out->width = (int)w;
        out->height = (int)h;
        out->channels = comps[type];
        out->bit_depth = depth;
        out->palette = type == 3;
        return 0;
    }
    if (len >= 2 && b[0] == 'P' && (b[1] == '5' || b[1] == '6')) {
        int v[3];
        size_t off;
        if (pnm_header(b, len, v, &off) || v[0] <= 0 || v[1] <= 0 || v[2] <= 0 ||
            v[2] > 65535)
            return iabn_err_set(e, IABN_EFORMAT, "corrupt PNM header");
        if ((int64_t)v[0] * v[1] > IABN_IMAGE_MAX_PIXELS)
            return iabn_err_set(e, IABN_EFORMAT, "PNM too large (%dx%d)", v[0], v[1]);
        out->format = IABN_IMAGE_PNM;
        out->width = v[0];
        out->height = v[1];
        out->channels = b[1] == '6' ? 3 : 1;
        out->bit_depth = v[2] > 255 ? 16 : 8;
        return 0;
    }
    const char *other = other_format(b, len);
    if (other) return iabn_err_set(e, IABN_EFORMAT, "unsupported image format (%s)", other);
    return iabn_err_set(e, IABN_EFORMAT, "not an image (unknown magic bytes %02x %02x %02x)",
                        b[0], len > 1 ? b[1] : 0, len > 2 ? b[2] : 0);
}

/* ---- PNG ------------------------------------------------------------------------ */

typedef struct png_job {
    const uint8_t *bytes;
    size_t len, pos;
    int label;
    iabn_decode_scratch *s;
    iabn_region *out;
    char msg[200];
    const char *fail;
    png_structp png;
    png_infop info;
} png_job;

static void png_on_error(png_structp p, png_const_charp m)
{
    png_job *j = png_get_error_ptr(p);
    snprintf(j->msg, sizeof j->msg, "%s", m);
    png_longjmp(p, 1);
}

static void png_on_warning(png_structp p, png_const_charp m)
{
    (void)p;
    (void)m;
}

static void png_read_mem(png_structp p, png_bytep dst, size_t n)
{
    png_job *j = png_get_io_ptr(p);
    if (n > j->len - j->pos) png_error(p, "truncated file");
    memcpy(dst, j->bytes + j->pos, n);
    j->pos += n;
}

/* One decoded row (after libpng's transforms: `ch` samples of `bps` bytes) to
 * RGB8, or to the label's single channel. */
static void png_row_out(const uint8_t *in, uint8_t *out, int w, int ch, int bps, int label)
{
    if (label) {
        if (bps == 2) {
            for (int x = 0; x < w; x++) memcpy(out + 2 * x, in + (size_t)x * ch * 2, 2);
        } else {
            for (int x = 0; x < w; x++) out[x] = in[(size_t)x * ch];
        }
        return;
    }
    for (int x = 0; x < w; x++, out += 3) {
        const uint8_t *p = in + (size_t)x * ch;
        if (ch <= 2) {
            out[0] = out[1] = out[2] = p[0];
        } else {
            out[0] = p[0];
            out[1] = p[1];
            out[2] = p[2];
        }
    }
}

static int png_run(png_job *j)
{
    j->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, j, png_on_error, png_on_warning);
    if (!j->png) {
        j->fail = "out of memory";
        return -1;
    }
    j->info = png_create_info_struct(j->png);
    if (!j->info) {
        png_destroy_read_struct(&j->png, NULL, NULL);
        j->fail = "out of memory";
        return -1;
    }
    if (setjmp(png_jmpbuf(j->png))) {
        png_destroy_read_struct(&j->png, &j->info, NULL);
        return -1;
    }
    png_set_read_fn(j->png, j, png_read_mem);
    png_set_user_limits(j->png, 1u << 20, 1u << 20);
    png_read_info(j->png, j->info);
    png_uint_32 w, h;
    int depth, type, interlace;
    png_get_IHDR(j->png, j->info, &w, &h, &depth, &type, &interlace, NULL, NULL);
    if ((int64_t)w * h > IABN_IMAGE_MAX_PIXELS) png_error(j->png, "image too large");
    if (j->label) {
        if (type == PNG_COLOR_TYPE_RGB || type == PNG_COLOR_TYPE_RGB_ALPHA)
            png_error(j->png, "label PNG is colour (RGB); expected one channel (gray or "
                              "palette indices)");
        if (depth < 8) png_set_packing(j->png);
        if (depth == 16) png_set_swap(j->png);
    } else {
        if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(j->png);
        if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(j->png);
        if (depth == 16) png_set_strip_16(j->png);
    }
    int passes = png_set_interlace_handling(j->png);
    png_read_update_info(j->png, j->info);
    int ch = png_get_channels(j->png, j->info);
    size_t rowbytes = png_get_rowbytes(j->png, j->info);
    int bps = png_get_bit_depth(j->png, j->info) == 16 ? 2 : 1;
    int out_ch = j->label ? 1 : 3, out_bps = j->label ? bps : 1;
    size_t out_row = (size_t)w * out_ch * out_bps;
    uint8_t *pix = iabn_buf_reserve(&j->s->pixels, out_row * h);
    if (!pix) png_error(j->png, "out of memory");
    if (passes > 1) {
        /* Interlaced rows arrive in several passes: keep the whole image. */
        size_t at = (rowbytes * h + 15) & ~(size_t)15; /* the row pointers, aligned */
        uint8_t *all = iabn_buf_reserve(&j->s->row, at + sizeof(png_bytep) * h);
        if (!all) png_error(j->png, "out of memory");
        png_bytep *rows = (png_bytep *)(all + at);
        for (png_uint_32 y = 0; y < h; y++) rows[y] = all + rowbytes * y;
        png_read_image(j->png, rows);
        for (png_uint_32 y = 0; y < h; y++)
            png_row_out(rows[y], pix + out_row * y, (int)w, ch, bps, j->label);
    } else {
        uint8_t *row = iabn_buf_reserve(&j->s->row, rowbytes);
        if (!row) png_error(j->png, "out of memory");
        for (png_uint_32 y = 0; y < h; y++) {
            png_read_row(j->png, row, NULL);
            png_row_out(row, pix + out_row * y, (int)w, ch, bps, j->label);
        }
    }
    png_read_end(j->png, NULL);
    png_destroy_read_struct(&j->png, &j->info, NULL);
    iabn_region *o = j->out;
    o->img.width = (int)w;
    o->img.height = (int)h;
    o->img.channels = out_ch;
    o->img.depth = out_bps;
    o->img.data = pix;
    o->x0 = o->y0 = 0;
    o->full_w = (int)w;
    o->full_h = (int)h;
    return 0;
}

/* ---- PNM ------------------------------------------------------------------------- */

static int pnm_decode(const uint8_t *b, size_t len, int label, iabn_decode_scratch *s,
                      iabn_region *out, iabn_err *e)
{
    int v[3];
    size_t off;
    if (pnm_header(b, len, v, &off) || v[0] <= 0 || v[1] <= 0 || v[2] <= 0 || v[2] > 65535)
        return iabn_err_set(e, IABN_EFORMAT, "corrupt PNM header");
    int w = v[0], h = v[1], maxval = v[2], in_ch = b[1] == '6' ? 3 : 1;
    int bps = maxval > 255 ? 2 : 1;
    if ((int64_t)w * h > IABN_IMAGE_MAX_PIXELS)
        return iabn_err_set(e, IABN_EFORMAT, "PNM too large (%dx%d)", w, h);
    size_t need = (size_t)w * h * in_ch * bps;
    if (len - off < need)
        return iabn_err_set(e, IABN_EFORMAT, "truncated PNM (%zu of %zu data bytes)",
                            len - off, need);
    if (label && in_ch != 1)
        return iabn_err_set(e, IABN_EFORMAT, "label PNM is colour (P6); expected P5");
    int out_ch = label ? 1 : 3, out_bps = label ? bps : 1;
    uint8_t *pix = iabn_buf_reserve(&s->pixels, (size_t)w * h * out_ch * out_bps);
    if (!pix) return iabn_err_set(e, IABN_ENOMEM, "out of memory decoding PNM");
    const uint8_t *p = b + off;
    size_t n = (size_t)w * h;
    for (size_t i = 0; i < n; i++) {
        for (int c = 0; c < in_ch; c++, p += bps) {
            unsigned x = bps == 2 ? ((unsigned)p[0] << 8 | p[1]) : p[0];
            if (label) {
                if (bps == 2) {
                    uint16_t u = (uint16_t)x;
                    memcpy(pix + 2 * i, &u, 2);
                } else {
                    pix[i] = (uint8_t)x;
                }
            } else {
                unsigned y = x > (unsigned)maxval ? 255u : (x * 255u + maxval / 2) / maxval;
                if (in_ch == 1)
                    pix[3 * i] = pix[3 * i + 1] = pix[3 * i + 2] = (uint8_t)y;
                else
                    pix[3 * i + c] = (uint8_t)y;
            }
        }
    }
    out->img.width = w;
    out->img.height = h;
    out->img.channels = out_ch;
    out->img.depth = out_bps;
    out->img.data = pix;
    out->x0 = out->y0 = 0;
    out->full_w = w;
    out->full_h = h;
    return 0;
}

/* ---- entry points ------------------------------------------------------------------- */

int iabn_decode_into(const uint8_t *bytes, size_t len, int label, int min_side_hint,
                     iabn_decode_scratch *s, iabn_region *out, iabn_err *e)
{
    iabn_image_info info;
    int rc = iabn_image_probe(bytes, len, &info, e);
    if (rc) return rc;
    if (info.format == IABN_IMAGE_JPEG) {
        if (label)
            return iabn_err_set(e, IABN_EFORMAT, "label file is a JPEG; labels must be "
                                "lossless (PNG)");
        int num = 8;
        int short_side = info.width < info.height ? info.width : info.height;
        if (min_side_hint > 0)
            for (int k = 1; k < 8; k *= 2)
                if (iabn_jpeg_scaled(short_side, k) >= min_side_hint) {
                    num = k;
                    break;
                }
        int w = iabn_jpeg_scaled(info.width, num), h = iabn_jpeg_scaled(info.height, num);
        return iabn_jpeg_decode_region(bytes, len, num, 0, 0, w, h, s, out, e);
    }
    if (info.format == IABN_IMAGE_PNG) {
        png_job j;
        memset(&j, 0, sizeof j);
        j.bytes = bytes;
        j.len = len;
        j.label = label;
        j.s = s;
        j.out = out;
        if (png_run(&j)) {
            if (j.fail) return iabn_err_set(e, IABN_EFORMAT, "%s", j.fail);
            return iabn_err_set(e, IABN_EFORMAT, "corrupt PNG: %s", j.msg);
        }
        return 0;
    }
    return pnm_decode(bytes, len, label, s, out, e);
}

static int decode_owned(const void *bytes, size_t len, int label, int hint, iabn_image *out,
                        iabn_err *e)
{
    iabn_decode_scratch s = {{0}, {0}};
    iabn_region r;
    memset(out, 0, sizeof *out);
    int rc = iabn_decode_into(bytes, len, label, hint, &s, &r, e);
    iabn_buf_free(&s.row);
    if (rc) {
        iabn_buf_free(&s.pixels);
        return rc;
    }
    *out = r.img; /* the region starts at the buffer's first byte */
    return 0;
}

int iabn_image_decode(const void *bytes, size_t len, int min_side_hint, iabn_image *out,
                      iabn_err *e)
{
    return decode_owned(bytes, len, 0, min_side_hint, out, e);
}

int iabn_label_decode(const void *bytes, size_t len, iabn_image *out, iabn_err *e)
{
    return decode_owned(bytes, len, 1, 0, out, e);
}

int iabn_file_read(const char *path, uint8_t **buf, size_t *len, size_t *cap, iabn_err *e)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return iabn_err_set(e, IABN_EIO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) {
        int er = errno;
        close(fd);
        return iabn_err_set(e, IABN_EIO, "cannot stat %s: %s", path, strerror(er));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return iabn_err_set(e, IABN_EIO, "%s is a directory", path);
    }
    size_t want = (size_t)st.st_size, got = 0;
    if (want + 1 > *cap || !*buf) {
        uint8_t *p = realloc(*buf, want + 1);
        if (!p) {
            close(fd);
            return iabn_err_set(e, IABN_ENOMEM, "out of memory reading %s (%zu bytes)", path,
                                want);
        }
        *buf = p;
        *cap = want + 1;
    }
    while (got < want) {
        ssize_t r = read(fd, *buf + got, want - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int er = errno;
            close(fd);
            return iabn_err_set(e, IABN_EIO, "cannot read %s: %s", path, strerror(er));
        }
        if (r == 0) break; /* shrank while reading: take what is there */
        got += (size_t)r;
    }
    close(fd);
    *len = got;
    return 0;
}

static int load(const char *path, int label, int hint, iabn_image *out, iabn_err *e)
{
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = iabn_file_read(path, &buf, &len, &cap, e);
    if (!rc) {
        rc = decode_owned(buf, len, label, hint, out, e);
        if (rc) iabn_err_prefix(e, "%s: ", path);
    }
    free(buf);
    return rc;
}

int iabn_image_load(const char *path, int min_side_hint, iabn_image *out, iabn_err *e)
{
    return load(path, 0, min_side_hint, out, e);
}

int iabn_label_load(const char *path, iabn_image *out, iabn_err *e)
{
    return load(path, 1, 0, out, e);
}

int iabn_image_alloc(iabn_image *img, int width, int height, int channels, int depth,
                     iabn_err *e)
{
    memset(img, 0, sizeof *img);
    if (width <= 0 || height <= 0 || (channels != 1 && channels != 3) ||
        (depth != 1 && depth != 2) || (int64_t)width * height > IABN_IMAGE_MAX_PIXELS)
        return iabn_err_set(e, IABN_EINVAL, "bad image shape %dx%dx%d depth %d", width,
                            height, channels, depth);
    img->data = malloc((size_t)width * height * channels * depth);
    if (!img->data) return iabn_err_set(e, IABN_ENOMEM, "out of memory (image %dx%d)", width,
                                        height);
    img->width = width;
    img->height = height;
    img->channels = channels;
    img->depth = depth;
    return 0;
}

void iabn_image_free(iabn_image *img)
{
    if (!img) return;
    free(img->data);
    memset(img, 0, sizeof *img);
}
