/* data.h: the interface of src/data.
 *
 * Image decoding (JPEG through libjpeg-turbo, PNG through libpng, binary
 * PGM/PPM; the format comes from the magic bytes, never the file name), the
 * PIL-compatible geometric operations, the per-sample augmentations of
 * classification and segmentation training, the data sets (torchvision
 * ImageFolder, Cityscapes, Mapillary Vistas), the threaded batch loader and
 * generators of small synthetic data sets.
 *
 * Usage (classification training):
 *     iabn_dataset *ds;  iabn_loader *ld;  iabn_batch *b;
 *     iabn_dataset_open_imagefolder("/data/imagenet/train", &ds, &e);
 *     iabn_loader_cfg cfg;  iabn_loader_cfg_defaults(&cfg, IABN_TF_CLASSIFY_TRAIN);
 *     cfg.batch_size = 64;  cfg.workers = 8;
 *     iabn_loader_open(&cfg, ds, &ld, &e);
 *     for (epoch...) {
 *         iabn_loader_start_epoch(ld, epoch, &e);
 *         while (iabn_loader_next(ld, &b, &e) == 0) { ...; iabn_loader_release(ld, b); }
 *     }
 *     iabn_loader_close(ld);  iabn_dataset_free(ds);
 *
 * Errors: calls return 0 or a negative IABN_E* code with a message naming the
 * file.  Undecodable files are IABN_EFORMAT or IABN_EIO (the loader skips them
 * unless strict); inconsistent data sets (a label of the wrong size, an unknown
 * class id, a missing label file) are IABN_EINVAL, always an error.
 */
#ifndef IABN_DATA_H
#define IABN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/device.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- images ---------------------------------------------------------------- */

typedef enum iabn_image_format {
    IABN_IMAGE_UNKNOWN = 0,
    IABN_IMAGE_JPEG = 1,
    IABN_IMAGE_PNG = 2,
    IABN_IMAGE_PNM = 3 /* binary PGM (P5) / PPM (P6) */
} iabn_image_format;

/* What a file's header says, before any pixel is decoded. */
typedef struct iabn_image_info {
    iabn_image_format format;
    int width, height;
    int channels;  /* stored components: 1 gray, 2 gray+alpha, 3 colour, 4 RGBA or CMYK */
    int bit_depth; /* bits per stored sample (PNG: 1, 2, 4, 8, 16) */
    int palette;   /* PNG colour type 3 */
    int cmyk;      /* JPEG with four colour components (Adobe CMYK / YCCK) */
} iabn_image_info;

/* Packed rows, row-major, interleaved channels; 16-bit samples in host order. */
typedef struct iabn_image {
    int width, height;
    int channels; /* 3: RGB;  1: single channel (labels) */
    int depth;    /* bytes per sample: 1, or 2 for 16-bit labels */
    uint8_t *data;
} iabn_image;

/* Largest image accepted (pixels), so that a forged header cannot make a
 * decoder allocate gigabytes. */
#define IABN_IMAGE_MAX_PIXELS ((int64_t)1 << 27)

const char *iabn_image_format_name(iabn_image_format f);
int iabn_image_probe(const void *bytes, size_t len, iabn_image_info *out, iabn_err *e);

/* Decodes to 8-bit RGB whatever the stored form (grayscale, CMYK, palette,
 * alpha dropped, 16-bit to its high byte).  min_side_hint > 0 lets a JPEG be
 * decoded at the smallest DCT scale (1/8, 1/4, 1/2) whose shorter side is
 * still >= min_side_hint; 0 decodes at full size. */
int iabn_image_decode(const void *bytes, size_t len, int min_side_hint, iabn_image *out,
                      iabn_err *e);
/* Decodes a label map: one channel, 8 or 16 bits, the stored values unchanged
 * (a palette PNG gives its indices).  Colour or lossy (JPEG) files are errors. */
int iabn_label_decode(const void *bytes, size_t len, iabn_image *out, iabn_err *e);
int iabn_image_load(const char *path, int min_side_hint, iabn_image *out, iabn_err *e);
int iabn_label_load(const char *path, iabn_image *out, iabn_err *e);

int iabn_image_alloc(iabn_image *img, int width, int height, int channels, int depth,
                     iabn_err *e);
void iabn_image_free(iabn_image *img);

/* Reads a whole file into *buf (grown with realloc; *cap is its capacity, so a
 * worker can reuse one buffer). */
int iabn_file_read(const char *path, uint8_t **buf, size_t *len, size_t *cap, iabn_err *e);

/* Writers, for the synthetic data sets and for predictions.  palette (RGB
 * triples, n_palette entries) makes an 8-bit single-channel image a palette
 * PNG; 16-bit single-channel images are written as 16-bit grayscale. */
int iabn_image_write_png(const char *path, const iabn_image *img, const uint8_t *palette,
                         int n_palette, iabn_err *e);
int iabn_image_write_jpeg(const char *path, const iabn_image *img, int quality, iabn_err *e);

/* ---- geometric operations (PIL semantics) ---------------------------------- */

typedef enum iabn_resample {
    /* PIL's BILINEAR: a triangle filter widened by the scale factor when
     * downscaling (antialiased), 22-bit fixed point, rounded to 8 bits
     * between the horizontal and the vertical pass, as Image.resize does. */
    IABN_RESAMPLE_BILINEAR = 0,
    /* PIL's NEAREST (source = floor((x + 0.5) * in / out)); labels use it. */
    IABN_RESAMPLE_NEAREST = 1
} iabn_resample;

/* Image.resize((w, h)): bilinear for 8-bit images, nearest for any. */
int iabn_image_resize(const iabn_image *src, int out_w, int out_h, iabn_resample mode,
                      iabn_image *dst, iabn_err *e);
/* Image.crop((x, y, x + w, y + h)): outside the source is filled with 0. */
int iabn_image_crop(const iabn_image *src, int x, int y, int w, int h, iabn_image *dst,
                    iabn_err *e);
void iabn_image_hflip(iabn_image *img);
/* ToTensor + Normalize: 8-bit RGB HWC -> float CHW, (v / 255 - mean) / std. */
void iabn_image_to_chw(const iabn_image *img, const float mean[3], const float std[3],
                       float *out);
/* torchvision's Resize(int): the shorter side becomes `size`, the longer
 * int(size * long / short). */
void iabn_resize_short_side(int w, int h, int size, int *out_w, int *out_h);
/* torchvision's CenterCrop offsets (round half to even, as Python's round). */
void iabn_center_crop_offset(int w, int h, int crop_w, int crop_h, int *x, int *y);

/* ---- per-sample transforms -------------------------------------------------- */

typedef enum iabn_transform_kind {
    IABN_TF_CLASSIFY_TRAIN = 0,
    IABN_TF_CLASSIFY_EVAL = 1,
    IABN_TF_SEGMENT_TRAIN = 2,
    IABN_TF_SEGMENT_EVAL = 3
} iabn_transform_kind;

typedef struct iabn_transform_cfg {
    iabn_transform_kind kind;
    /* Output size.  Classification: crop_train / crop_val (224).  Segmentation
     * train: the crop (height, width), padded (0 after normalisation, label
     * 255) where the scaled image is smaller.  Segmentation eval: the batch
     * canvas the image is placed in, top-left and padded the same way; an image
     * larger than it is an error (with scale > 0, scale x scale always fits). */
    int out_h, out_w;
    /* Classification train: scale_train; <= 0 selects RandomResizedCrop, > 0
     * "resize the shorter side to scale, then a random out_h x out_w crop".
     * Classification eval: scale_val (256), the shorter side before the centre
     * crop.  Segmentation eval: the longer side is resized to scale (0 = the
     * whole image at its own size). */
    int scale;
    float rrc_scale[2];  /* RandomResizedCrop area fraction (0.08, 1) */
    float rrc_ratio[2];  /* and aspect ratio (3/4, 4/3); 10 tries, then centre */
    float seg_scale[2];  /* segmentation train: random scale (0.7, 2.0) */
    int hflip;           /* train: horizontal flip with probability 1/2 */
    float brightness, contrast, saturation; /* colour jitter strengths, random order */
    float lighting_std;  /* PCA lighting noise alphastd (0.1); 0 = off */
    int ten_crop;        /* classification eval: 4 corners + centre, and flipped */
    float mean[3], std[3];
    /* JPEG: decode only the rows and columns the output needs, at a reduced DCT
     * scale when the crop allows it (fast; pixels then differ slightly from a
     * full decode).  0 = full decode, PIL/torchvision exact. */
    int fast_decode;
} iabn_transform_cfg;

/* ImageNet defaults (224, 256, RRC 0.08-1 / 3/4-4/3, flip, ImageNet mean/std,
 * no jitter or lighting, fast decode) or segmentation ones (crop 512x512,
 * scale 0.7-2.0, flip). */
void iabn_transform_defaults(iabn_transform_cfg *cfg, iabn_transform_kind kind);
int iabn_transform_check(const iabn_transform_cfg *cfg, iabn_err *e);

/* Raw label id -> train id.  Values outside the table (and 16-bit values >=
 * 256) are unknown: mapped to ignore when unknown_to_ignore, else an error. */
#define IABN_IGNORE_LABEL 255
typedef struct iabn_label_map {
    int16_t lut[256]; /* -1: unknown id */
    int unknown_to_ignore;
} iabn_label_map;

/* Per-thread scratch of the transforms (decode buffers, coefficient tables). */
typedef struct iabn_sample_ctx iabn_sample_ctx;
int iabn_sample_ctx_new(iabn_sample_ctx **out, iabn_err *e);
void iabn_sample_ctx_free(iabn_sample_ctx *ctx);

/* The random draws of one sample are iabn_rng_*(seed, key, 0, 1, 2, ...), so a
 * sample's augmentation depends on (seed, key) only. */
uint64_t iabn_sample_key(int64_t epoch, int64_t index);

/* Classification: decodes the file bytes and writes images_per_sample x 3 x
 * out_h x out_w normalised floats to out. */
int iabn_sample_classify(iabn_sample_ctx *ctx, const iabn_transform_cfg *cfg,
                         const void *bytes, size_t len, uint64_t seed, uint64_t key,
                         float *out, iabn_err *e);
/* Segmentation: image and label file bytes -> 3 x H x W floats and H x W train
 * ids (255 = ignore, also in padding).  valid_hw receives the size of the
 * image inside the output (smaller than it when padded). */
int iabn_sample_segment(iabn_sample_ctx *ctx, const iabn_transform_cfg *cfg,
                        const void *img_bytes, size_t img_len, const void *lbl_bytes,
                        size_t lbl_len, const iabn_label_map *map, uint64_t seed,
                        uint64_t key, float *out, int32_t *labels, int32_t valid_hw[2],
                        iabn_err *e);
/* The geometry of a sample's transform, as its draws give it: the rectangle
 * crop_* of the original image is resized (PIL bilinear; nearest for labels)
 * to resized_w x resized_h, the window win_* of that is kept, and mirrored
 * when flip.  RandomResizedCrop: crop = its box, resized = the output.  The
 * other transforms crop nothing and choose the window (ten-crop: the whole
 * resized image, from which the ten crops are cut).  For tests and for
 * looking at augmentations. */
typedef struct iabn_sample_geom {
    int crop_x, crop_y, crop_w, crop_h;
    int resized_w, resized_h;
    int win_x, win_y, win_w, win_h;
    int flip;
} iabn_sample_geom;
int iabn_transform_plan(const iabn_transform_cfg *cfg, int width, int height, uint64_t seed,
                        uint64_t key, iabn_sample_geom *out, iabn_err *e);
/* 10 for ten-crop evaluation, else 1. */
int iabn_transform_images_per_sample(const iabn_transform_cfg *cfg);

/* ---- data sets ---------------------------------------------------------------- */

typedef enum iabn_dataset_kind {
    IABN_DATASET_IMAGEFOLDER = 0,
    IABN_DATASET_CITYSCAPES = 1,
    IABN_DATASET_VISTAS = 2
} iabn_dataset_kind;

typedef struct iabn_dataset {
    iabn_dataset_kind kind;
    char *root;          /* the directory that was scanned */
    size_t count;
    int num_classes;
    char **class_names;  /* num_classes entries */
    char **paths;        /* image file of each item */
    int32_t *labels;     /* classification: class index of each item, else NULL */
    char **label_paths;  /* segmentation: label PNG of each item, else NULL */
    iabn_label_map label_map; /* segmentation: stored id -> train id */
} iabn_dataset;

/* torchvision ImageFolder on dir: classes = sorted sub-directories, files found
 * recursively (directories in sorted path order, names sorted), extensions
 * .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp matched case-insensitively. */
int iabn_dataset_open_imagefolder(const char *dir, iabn_dataset **out, iabn_err *e);
/* root/leftImg8bit/<split>/<city>/<name>_leftImg8bit.png with their
 * root/gtFine/<split>/<city>/<name>_gtFine_labelIds.png; 19 train ids. */
int iabn_dataset_open_cityscapes(const char *root, const char *split, iabn_dataset **out,
                                 iabn_err *e);
/* root/<split>/images/<key>.jpg with root/<split>/labels/<key>.png and root/config.json
 * (v1.0-1.2 research edition), or root/<split>/v1.2/labels + config_v1.2.json
 * (the v2.0 download).  split: training / validation (train / val accepted). */
int iabn_dataset_open_vistas(const char *root, const char *split, iabn_dataset **out,
                             iabn_err *e);
/* Dispatch by kind; for image folders the directory is root/split (root when
 * split is NULL or empty). */
int iabn_dataset_open(iabn_dataset_kind kind, const char *root, const char *split,
                      iabn_dataset **out, iabn_err *e);
/* The same, but an image folder without a <split> sub-folder is root itself
 * (`iabn data` on a folder of class folders). */
int iabn_dataset_open_lenient(iabn_dataset_kind kind, const char *root, const char *split,
                              iabn_dataset **out, iabn_err *e);
void iabn_dataset_free(iabn_dataset *ds);
/* Every image file (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp) under
 * root and its sub-folders, as paths relative to root, sorted: n strings in
 * *out, freed with iabn_strings_free. */
int iabn_list_images(const char *root, char ***out, size_t *n, iabn_err *e);
void iabn_strings_free(char **v, size_t n);
const char *iabn_dataset_kind_name(iabn_dataset_kind kind);
int iabn_dataset_kind_parse(const char *s, iabn_dataset_kind *out);

/* Cityscapes labelId -> trainId (helpers/labels.py; ids above 33 -> 255) and
 * the names of the 19 train ids. */
void iabn_cityscapes_label_map(iabn_label_map *map);
const char *iabn_cityscapes_class_name(int train_id);
/* The labelId of a train id (the first in helpers/labels.py's order), -1
 * for none: what the official evaluation scripts read. */
int iabn_cityscapes_label_id(int train_id);
/* Colours of the class ids 0..255 of a label map: Cityscapes' own for a
 * 19-class model, distinct generated ones otherwise. */
void iabn_label_palette(int classes, uint8_t rgb[256 * 3]);

/* A Vistas config.json: class i is the i-th entry of "labels" that has
 * "evaluate": true (absent = true); entries with false (65 void--unlabeled in
 * v1.2) map to ignore; ids past the list are unknown (an error).  names
 * receives the num_classes evaluated names (free each and the array). */
int iabn_vistas_config_parse(const char *json, size_t len, iabn_label_map *map,
                             int *num_classes, char ***names, iabn_err *e);

/* ---- distributed sampler (sampler.c) ------------------------------------------
 * One permutation per epoch from (seed, epoch); rank r of world reads
 * positions r, r + world, ... of it, so step t of all ranks together reads
 * what one process with a world-times-larger batch reads at step t.  With
 * drop_last every rank keeps floor(count / world) samples and full batches
 * (the same number of steps on every rank); without, the shards cover every
 * sample once and the last batch of a rank may be short. */
void iabn_sampler_perm(int64_t count, uint64_t seed, int64_t epoch, int shuffle, int64_t *perm);
int64_t iabn_sampler_shard_size(int64_t count, int rank, int world, int drop_last);
/* order receives rank's shard (shard_size entries); returns its size. */
int64_t iabn_sampler_shard(const int64_t *perm, int64_t count, int rank, int world,
                           int drop_last, int64_t *order);
int64_t iabn_sampler_batches(int64_t count, int rank, int world, int batch, int drop_last);

/* ---- loader ----------------------------------------------------------------- */

typedef struct iabn_batch {
    int n;                 /* samples (the last batch of an epoch may be short) */
    int images_per_sample; /* 10 with ten-crop */
    int channels, height, width;
    float *images;         /* n * images_per_sample x 3 x H x W, normalised */
    int32_t *labels;       /* classification: n;  segmentation: n x H x W */
    int64_t *indices;      /* data set index of each sample (after replacement) */
    int32_t *valid_hw;     /* n x 2: image size inside the output (segmentation) */
    int64_t epoch, index;  /* index: position of the batch in this rank's epoch */
} iabn_batch;

typedef struct iabn_loader_cfg {
    iabn_transform_cfg transform;
    int batch_size;
    int workers;    /* decoding threads, >= 1 */
    int prefetch;   /* batches in the ring; 0 = workers + 2 */
    uint64_t seed;
    int shuffle;    /* a new permutation each epoch, from (seed, epoch) */
    int drop_last;
    int rank, world_size;
    /* A corrupt, truncated, empty or non-image file is skipped (one warning
     * per file, counted) and its slot filled by the next sample of the shard
     * that decodes; strict makes it an error of iabn_loader_next. */
    int strict;
    /* Evaluation: an undecodable file is not replaced (that would change the
     * metric) but left out: its slot holds zeros, labels IABN_IGNORE_LABEL
     * and index -1, and stats.skipped_files counts it. */
    int leave_out;
    /* Warnings go here (default: stderr with an "iabn: warning:" prefix). */
    void (*warn)(void *user, const char *msg);
    void *warn_user;
    /* Batch memory (images, labels), e.g. cudaHostAlloc for pinned buffers;
     * default: 64-byte aligned host memory. */
    void *(*alloc)(size_t bytes, void *user);
    void (*free)(void *ptr, void *user);
    void *alloc_user;
} iabn_loader_cfg;

typedef struct iabn_loader_stats {
    int64_t skipped_files;    /* distinct files found undecodable */
    int64_t replaced_samples; /* slots filled by a replacement sample */
    int64_t samples;          /* samples delivered */
    int64_t batches;
    double wait_seconds;      /* time iabn_loader_next spent waiting */
} iabn_loader_stats;

typedef struct iabn_loader iabn_loader;

void iabn_loader_cfg_defaults(iabn_loader_cfg *cfg, iabn_transform_kind kind);
/* ds must outlive the loader. */
/* Points the batch allocation at the device's pinned host memory on a GPU
 * (the copies to the device then run asynchronously); nothing on the CPU. */
void iabn_device_loader_cfg(const iabn_device *d, iabn_loader_cfg *lc);
int iabn_loader_open(const iabn_loader_cfg *cfg, const iabn_dataset *ds, iabn_loader **out,
                     iabn_err *e);
/* Starts (or restarts) an epoch: batches of a previous one not yet taken are
 * dropped.  Each rank reads shard positions rank, rank + world, ... of the
 * epoch's order: disjoint across ranks.  With drop_last every rank gets
 * floor(count / world) samples and full batches only; without it the shards
 * cover every sample exactly once and the last batch may be short. */
int iabn_loader_start_epoch(iabn_loader *ld, int64_t epoch, iabn_err *e);
/* 0: *out is the next batch (in order);  1: the epoch is over (*out = NULL);
 * < 0: an error (strict mode or an inconsistent data set). */
int iabn_loader_next(iabn_loader *ld, iabn_batch **out, iabn_err *e);
void iabn_loader_release(iabn_loader *ld, iabn_batch *b);
void iabn_loader_close(iabn_loader *ld);
int64_t iabn_loader_batches_per_epoch(const iabn_loader *ld);
int64_t iabn_loader_samples_per_epoch(const iabn_loader *ld);
void iabn_loader_get_stats(iabn_loader *ld, iabn_loader_stats *out);

/* ---- synthetic data sets ---------------------------------------------------- */

/* root/train/<class>/ and root/val/<class>/ image folders (JPEG, every fourth
 * image a PNG) of size x size images whose class shows in the pixels: a
 * class-specific colour and stripe orientation, with noise and jitter. */
int iabn_data_make_synthetic_folder(const char *root, int classes, int per_class_train,
                                    int per_class_val, int size, uint64_t seed, iabn_err *e);
/* The same layout with a task that is not solved at a glance (the demo's):
 * the class is a shape (disc, square, triangle, cross, ring, diamond, bar,
 * frame) and, past 8 classes, the direction of the stripes inside it; colours
 * and positions are random, smaller shapes of other classes overlap it, pixel
 * noise is strong, and label_noise (0..1) of the labels are replaced by a
 * random class, so accuracy tops out below 100%. */
int iabn_data_make_synthetic_shapes(const char *root, int classes, int per_class_train,
                                    int per_class_val, int size, double label_noise,
                                    uint64_t seed, iabn_err *e);
/* A Cityscapes tree (leftImg8bit + gtFine labelIds, cities "synthA"/"synthB")
 * of width x height images: a textured road/sky background with rectangles and
 * discs whose colour gives their class; the labelIds use the real ids, some of
 * them ignored ones, so the trainId mapping is exercised. */
int iabn_data_make_synthetic_cityscapes(const char *root, int n_train, int n_val, int width,
                                        int height, uint64_t seed, iabn_err *e);
/* A Vistas tree with `classes` evaluated labels plus void--unlabeled last in
 * the config; v12_layout selects training/v1.2/labels + config_v1.2.json. */
int iabn_data_make_synthetic_vistas(const char *root, int classes, int n_train, int n_val,
                                    int width, int height, int v12_layout, uint64_t seed,
                                    iabn_err *e);
/* One of the three by kind (`iabn data synth`); a field left 0 (the image
 * counts: < 0) takes the kind's default: 10 classes (Vistas 6), 20 training
 * and 5 validation images (segmentation 6), 64 px squares, 256 x 128. */
typedef struct iabn_synth_opts {
    iabn_dataset_kind kind;
    int classes, n_train, n_val, size, width, height, v12_layout;
    uint64_t seed;
} iabn_synth_opts;
int iabn_data_make_synthetic(const char *root, const iabn_synth_opts *o, iabn_err *e);

#ifdef __cplusplus
}
#endif

#endif
