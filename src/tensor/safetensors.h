/* safetensors.h: read and write the safetensors format natively.
 *
 * Format: 8-byte little-endian header length, a JSON header
 * {"name": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}, ...,
 *  "__metadata__": {"k": "v"}}, then the data buffer.  Reading validates
 * everything (header length against the file size, JSON, dtypes, shapes,
 * offsets tiling the buffer exactly without overlap, names unique) and turns a
 * bad file into an error naming the problem, never a crash.
 * Writing is atomic: temporary file, fsync, rename.
 *
 * Alignment: the file is read into one 64-byte-aligned buffer and each
 * tensor's data points into it, at 8 + header length + begin.  Files written
 * here (and by the reference writer) place every tensor at an offset aligned
 * for its element type, but third-party files need not (tests/fixtures/stio.py
 * does not): read through iabn_st_read_f32 / iabn_st_read_i64 (or memcpy)
 * rather than casting data.
 */
#ifndef IABN_SAFETENSORS_H
#define IABN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct iabn_err;

typedef struct iabn_st_tensor {
    char *name;
    int dtype;          /* iabn_dtype (F32, I32, U8, I64); others are rejected */
    int ndim;
    int64_t shape[8];
    size_t nbytes;
    const void *data;   /* points into the file's buffer */
} iabn_st_tensor;

typedef struct iabn_st_file iabn_st_file;

/* Loads and validates path; *out owns the buffer.  On error returns <0 and
 * fills e with the path and the problem. */
int iabn_st_load(const char *path, iabn_st_file **out, struct iabn_err *e);
/* Same from memory (the fuzz target and tests use it); copies the bytes. */
int iabn_st_parse(const void *bytes, size_t len, iabn_st_file **out, struct iabn_err *e);
void iabn_st_free(iabn_st_file *f);
int iabn_st_count(const iabn_st_file *f);
const iabn_st_tensor *iabn_st_get(const iabn_st_file *f, int i);
const iabn_st_tensor *iabn_st_find(const iabn_st_file *f, const char *name);
/* Metadata value for key, or NULL. */
const char *iabn_st_meta(const iabn_st_file *f, const char *key);
/* The path given to iabn_st_load ("<memory>" after iabn_st_parse). */
const char *iabn_st_path(const iabn_st_file *f);
/* Product of the shape (1 for rank 0). */
int64_t iabn_st_numel(const iabn_st_tensor *t);

/* Copy t into dst (count must equal its element count), converting I32, U8,
 * I64 to float32; safe for unaligned data. */
int iabn_st_read_f32(const iabn_st_tensor *t, float *dst, size_t count, struct iabn_err *e);
/* Same into int64 from I64, I32, U8; an F32 tensor is an error. */
int iabn_st_read_i64(const iabn_st_tensor *t, int64_t *dst, size_t count, struct iabn_err *e);
/* find + read_f32; a missing tensor is an error naming the file and name. */
int iabn_st_get_f32(const iabn_st_file *f, const char *name, float *dst, size_t count,
                    struct iabn_err *e);

/* Writer: collect tensors (the data is copied at add time), then save.  A
 * repeated tensor name is an error; a repeated metadata key replaces the value. */
typedef struct iabn_st_writer iabn_st_writer;
iabn_st_writer *iabn_st_writer_new(void);
int iabn_st_writer_add(iabn_st_writer *w, const char *name, int dtype, int ndim,
                       const int64_t *shape, const void *data, struct iabn_err *e);
int iabn_st_writer_meta(iabn_st_writer *w, const char *key, const char *value,
                        struct iabn_err *e);
/* Tensors are laid out widest dtype first, then by name, so each is aligned
 * for its type and the same contents give the same bytes.  Atomic: writes path.tmp.<pid>, fsyncs,
 * renames over path; on failure the temporary file is removed. */
int iabn_st_writer_save(iabn_st_writer *w, const char *path, struct iabn_err *e);
void iabn_st_writer_free(iabn_st_writer *w);

#ifdef __cplusplus
}
#endif
#endif
