/* test_safetensors.c: the safetensors reader and writer.
 *
 * Round trips, the writer's exact bytes, the Python-written fixture
 * (tests/fixtures/st_basic.safetensors from make_st_fixtures.py, with an
 * unaligned F32 tensor), every malformed-file case the reader must turn into an error
 * naming the problem, truncations and byte flips that must never crash, and
 * the atomic save leaving no temporary file behind.
 */
#include "tensor/tensor.h"
#include "test_util.h"

#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef ST_FIXTURE_DIR
#define ST_FIXTURE_DIR "tests/fixtures"
#endif

static char tmpdir[256];

static void make_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/iabn_st_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        exit(1);
    }
}

static void remove_tmpdir(void)
{
    DIR *d = opendir(tmpdir);
    if (!d) return;
    struct dirent *de;
    char p[512];
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", tmpdir, de->d_name);
            remove(p);
        }
    closedir(d);
    rmdir(tmpdir);
}

/* Entries in tmpdir other than . and .. */
static int count_dir(void)
{
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

/* A file image: 8-byte length, the header text, then ndata bytes 0,1,2,... */
static unsigned char *image(const char *header, size_t ndata, size_t *len)
{
    size_t hl = strlen(header);
    *len = 8 + hl + ndata;
    unsigned char *b = malloc(*len);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    for (size_t i = 0; i < ndata; i++) b[8 + hl + i] = (unsigned char)i;
    return b;
}

/* Parsing must fail with a message containing want. */
static void expect_bad(const unsigned char *b, size_t len, const char *want, int line)
{
    iabn_st_file *f = NULL;
    iabn_err e = {0};
    int rc = iabn_st_parse(b, len, &f, &e);
    t_checks++;
    if (rc >= 0 || f || !strstr(e.msg, want)) {
        t_failed++;
        fprintf(stderr, "%s:%d: expected an error containing '%s', got rc=%d msg='%s'\n", __FILE__,
                line, want, rc, e.msg);
    }
    iabn_st_free(f);
}

static void bad_header(const char *header, size_t ndata, const char *want, int line)
{
    size_t len;
    unsigned char *b = image(header, ndata, &len);
    expect_bad(b, len, want, line);
    free(b);
}
#define BAD(h, nd, want) bad_header(h, nd, want, __LINE__)

static void test_round_trip(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/rt.safetensors", tmpdir);
    float w[2 * 3 * 4];
    t_fill(w, 24, 7);
    int32_t idx[5] = {-3, 0, 1, 2147483647, -2147483647 - 1};
    uint8_t mask[3] = {0, 1, 255};
    int64_t cnt = 123456789012345LL;
    float scalar = -2.5f;
    int64_t sw[3] = {2, 3, 4}, si[1] = {5}, sm[2] = {3, 1}, sz[2] = {0, 7};

    iabn_st_writer *wr = iabn_st_writer_new();
    CHECK(wr != NULL);
    CHECK_OK(iabn_st_writer_add(wr, "z.weight", IABN_F32, 3, sw, w, &e_));
    CHECK_OK(iabn_st_writer_add(wr, "idx", IABN_I32, 1, si, idx, &e_));
    CHECK_OK(iabn_st_writer_add(wr, "mask", IABN_U8, 2, sm, mask, &e_));
    CHECK_OK(iabn_st_writer_add(wr, "bn.num_batches_tracked", IABN_I64, 0, NULL, &cnt, &e_));
    CHECK_OK(iabn_st_writer_add(wr, "scalar", IABN_F32, 0, NULL, &scalar, &e_));
    CHECK_OK(iabn_st_writer_add(wr, "empty", IABN_F32, 2, sz, NULL, &e_));
    CHECK_OK(iabn_st_writer_add(wr, "we\"ird\\name\n", IABN_U8, 1, sm, mask, &e_));
    CHECK_OK(iabn_st_writer_meta(wr, "format", "pt", &e_));
    CHECK_OK(iabn_st_writer_meta(wr, "step", "1", &e_));
    CHECK_OK(iabn_st_writer_meta(wr, "step", "42", &e_));
    iabn_err e = {0};
    CHECK(iabn_st_writer_add(wr, "idx", IABN_I32, 1, si, idx, &e) == IABN_EINVAL);
    CHECK(strstr(e.msg, "duplicate") != NULL);
    CHECK(iabn_st_writer_add(wr, "bad", 9, 1, si, idx, &e) == IABN_EINVAL);
    CHECK(iabn_st_writer_add(wr, "__metadata__", IABN_U8, 1, sm, mask, &e) == IABN_EINVAL);
    CHECK_OK(iabn_st_writer_save(wr, path, &e_));
    iabn_st_writer_free(wr);

    iabn_st_file *f = NULL;
    e.msg[0] = 0;
    int rc = iabn_st_load(path, &f, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (rc) return;
    CHECK(iabn_st_count(f) == 7);
    CHECK(!strcmp(iabn_st_path(f), path));
    for (int i = 1; i < iabn_st_count(f); i++)
        CHECK(strcmp(iabn_st_get(f, i - 1)->name, iabn_st_get(f, i)->name) < 0);
    CHECK(iabn_st_get(f, 7) == NULL && iabn_st_get(f, -1) == NULL);

    const iabn_st_tensor *t = iabn_st_find(f, "z.weight");
    CHECK(t && t->dtype == IABN_F32 && t->ndim == 3 && t->shape[0] == 2 && t->shape[2] == 4);
    CHECK(t && t->nbytes == sizeof w && !memcmp(t->data, w, sizeof w));
    for (int i = 0; i < iabn_st_count(f); i++) {
        const iabn_st_tensor *x = iabn_st_get(f, i);
        CHECK_MSG((uintptr_t)x->data % iabn_dtype_size((iabn_dtype)x->dtype) == 0, "%s unaligned", x->name);
    }
    float back[24];
    CHECK_OK(iabn_st_get_f32(f, "z.weight", back, 24, &e_));
    CHECK(!memcmp(back, w, sizeof w));
    e.msg[0] = 0;
    CHECK(iabn_st_get_f32(f, "z.weight", back, 23, &e) == IABN_EINVAL);
    CHECK(strstr(e.msg, "z.weight") && strstr(e.msg, path));
    CHECK(iabn_st_get_f32(f, "nope", back, 1, &e) < 0 && strstr(e.msg, "nope"));

    t = iabn_st_find(f, "idx");
    CHECK(t && t->dtype == IABN_I32 && t->ndim == 1 && !memcmp(t->data, idx, sizeof idx));
    float fi[5];
    int64_t li[5];
    CHECK_OK(iabn_st_read_f32(t, fi, 5, &e_));
    CHECK(fi[0] == -3.0f && fi[3] == 2147483647.0f);
    CHECK_OK(iabn_st_read_i64(t, li, 5, &e_));
    CHECK(li[3] == 2147483647 && li[4] == -2147483647LL - 1);

    t = iabn_st_find(f, "mask");
    CHECK(t && t->dtype == IABN_U8 && t->shape[0] == 3 && t->shape[1] == 1 && !memcmp(t->data, mask, 3));
    t = iabn_st_find(f, "bn.num_batches_tracked");
    CHECK(t && t->dtype == IABN_I64 && t->ndim == 0 && iabn_st_numel(t) == 1);
    int64_t c2 = 0;
    CHECK_OK(iabn_st_read_i64(t, &c2, 1, &e_));
    CHECK(c2 == cnt);
    t = iabn_st_find(f, "scalar");
    float s2 = 0;
    CHECK(t && t->ndim == 0);
    CHECK_OK(iabn_st_read_f32(t, &s2, 1, &e_));
    CHECK(s2 == scalar);
    CHECK(iabn_st_read_i64(t, &c2, 1, &e) == IABN_EINVAL);
    t = iabn_st_find(f, "empty");
    CHECK(t && t->nbytes == 0 && iabn_st_numel(t) == 0 && t->shape[1] == 7);
    CHECK_OK(iabn_st_read_f32(t, back, 0, &e_));
    t = iabn_st_find(f, "we\"ird\\name\n");
    CHECK(t && t->nbytes == 3);
    CHECK(!strcmp(iabn_st_meta(f, "format"), "pt"));
    CHECK(!strcmp(iabn_st_meta(f, "step"), "42"));
    CHECK(iabn_st_meta(f, "absent") == NULL);
    CHECK(iabn_st_find(f, "absent") == NULL);
    iabn_st_free(f);
}

/* Layout: widest dtype first, then name; metadata last, keys sorted. */
static void test_exact_bytes(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/exact.safetensors", tmpdir);
    uint8_t u[2] = {1, 2};
    float a = 1.0f;
    int64_t c = 5, s1 = 1, s2 = 2;
    iabn_st_writer *wr = iabn_st_writer_new();
    CHECK_OK(iabn_st_writer_add(wr, "b", IABN_U8, 1, &s2, u, &e_));
    CHECK_OK(iabn_st_writer_add(wr, "a", IABN_F32, 1, &s1, &a, &e_));
    CHECK_OK(iabn_st_writer_add(wr, "c", IABN_I64, 0, NULL, &c, &e_));
    CHECK_OK(iabn_st_writer_meta(wr, "step", "3", &e_));
    CHECK_OK(iabn_st_writer_meta(wr, "format", "pt", &e_));
    CHECK_OK(iabn_st_writer_save(wr, path, &e_));
    iabn_st_writer_free(wr);
    const char *hdr = "{\"c\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
                      "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[12,14]},"
                      "\"__metadata__\":{\"format\":\"pt\",\"step\":\"3\"}}";
    size_t hl = strlen(hdr), pad = (8 - hl % 8) % 8, len = 0;
    unsigned char *b = read_all(path, &len);
    CHECK(b && len == 8 + hl + pad + 14);
    if (!b || len != 8 + hl + pad + 14) {
        free(b);
        return;
    }
    CHECK(b[0] == (unsigned char)(hl + pad) && !b[1] && !b[7]);
    CHECK_MSG(!memcmp(b + 8, hdr, hl), "header: %.*s", (int)(hl + pad), (const char *)b + 8);
    for (size_t i = 0; i < pad; i++) CHECK(b[8 + hl + i] == ' ');
    const unsigned char *d = b + 8 + hl + pad;
    CHECK(d[0] == 5 && d[7] == 0 && !memcmp(d + 8, &a, 4) && d[12] == 1 && d[13] == 2);
    free(b);
    /* and the Python reader of the fixtures agrees (where /usr/bin/python3
     * has numpy, which stio.py reads with: Debian's python3-numpy, which
     * tools/setup.sh installs; a machine without it skips this check) */
    if (access("/usr/bin/python3", X_OK) == 0 &&
        system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 -c \"import sys; sys.path.insert(0, '%s'); import stio; "
                 "d = stio.load('%s'); "
                 "assert d['c'].tolist() == 5 and d['a'].tolist() == [1.0] and d['b'].tolist() == [1, 2]\"",
                 ST_FIXTURE_DIR, path);
        CHECK_MSG(system(cmd) == 0, "%s", cmd);
    }
    remove(path);
}

static void test_empty_file_contents(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/empty.safetensors", tmpdir);
    iabn_st_writer *wr = iabn_st_writer_new();
    CHECK_OK(iabn_st_writer_save(wr, path, &e_));
    iabn_st_writer_free(wr);
    size_t len = 0;
    unsigned char *b = read_all(path, &len);
    CHECK(b && len == 16 && !memcmp(b + 8, "{}      ", 8));
    free(b);
    iabn_st_file *f = NULL;
    CHECK_OK(iabn_st_load(path, &f, &e_));
    CHECK(iabn_st_count(f) == 0 && iabn_st_find(f, "x") == NULL);
    iabn_st_free(f);
    remove(path);
}

/* Values from tests/fixtures/make_st_fixtures.py. */
static void test_python_fixture(void)
{
    const char *path = ST_FIXTURE_DIR "/st_basic.safetensors";
    iabn_st_file *f = NULL;
    iabn_err e = {0};
    int rc = iabn_st_load(path, &f, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (rc) return;
    CHECK(iabn_st_count(f) == 6);
    CHECK(!strcmp(iabn_st_meta(f, "format"), "pt"));
    CHECK(!strcmp(iabn_st_meta(f, "note"), "iabn fixture"));

    const iabn_st_tensor *t = iabn_st_find(f, "a_u8");
    CHECK(t && t->dtype == IABN_U8 && t->ndim == 1 && t->shape[0] == 3);
    CHECK(t && ((const uint8_t *)t->data)[2] == 255);

    /* starts at data byte 3: unaligned, so read through read_f32 */
    t = iabn_st_find(f, "b_f32");
    CHECK(t && t->dtype == IABN_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3);
    float b[6];
    CHECK_OK(iabn_st_read_f32(t, b, 6, &e_));
    for (int i = 0; i < 6; i++) CHECK(b[i] == i * 0.5f - 1.0f);

    t = iabn_st_find(f, "c_i64");
    int64_t c[4];
    float cf[4];
    CHECK(t && t->dtype == IABN_I64 && t->shape[0] == 4);
    CHECK_OK(iabn_st_read_i64(t, c, 4, &e_));
    CHECK(c[0] == -1 && c[1] == 0 && c[2] == (int64_t)1 << 40 && c[3] == 7);
    CHECK_OK(iabn_st_read_f32(t, cf, 4, &e_));
    CHECK(cf[2] == 1099511627776.0f && cf[0] == -1.0f);

    t = iabn_st_find(f, "d_i32");
    float d[4];
    CHECK(t && t->dtype == IABN_I32 && t->ndim == 2);
    CHECK_OK(iabn_st_read_f32(t, d, 4, &e_));
    CHECK(d[0] == -5 && d[1] == 6 && d[2] == 7 && d[3] == -8);

    float one = 0;
    CHECK_OK(iabn_st_get_f32(f, "e_one", &one, 1, &e_));
    CHECK(one == 3.25f);
    t = iabn_st_find(f, "f_empty");
    CHECK(t && t->nbytes == 0 && t->shape[0] == 0 && t->shape[1] == 4);

    /* Rewriting and reloading keeps every tensor and the metadata. */
    char out[512];
    snprintf(out, sizeof out, "%s/again.safetensors", tmpdir);
    iabn_st_writer *wr = iabn_st_writer_new();
    for (int i = 0; i < iabn_st_count(f); i++) {
        const iabn_st_tensor *x = iabn_st_get(f, i);
        CHECK_OK(iabn_st_writer_add(wr, x->name, x->dtype, x->ndim, x->shape, x->data, &e_));
    }
    CHECK_OK(iabn_st_writer_meta(wr, "note", "iabn fixture", &e_));
    CHECK_OK(iabn_st_writer_meta(wr, "format", "pt", &e_));
    CHECK_OK(iabn_st_writer_save(wr, out, &e_));
    iabn_st_writer_free(wr);
    iabn_st_file *g = NULL;
    CHECK_OK(iabn_st_load(out, &g, &e_));
    CHECK(iabn_st_count(g) == iabn_st_count(f));
    for (int i = 0; g && i < iabn_st_count(f); i++) {
        const iabn_st_tensor *x = iabn_st_get(f, i), *y = iabn_st_get(g, i);
        CHECK(!strcmp(x->name, y->name) && x->dtype == y->dtype && x->ndim == y->ndim);
        CHECK(!memcmp(x->shape, y->shape, sizeof x->shape) && x->nbytes == y->nbytes);
        CHECK(!memcmp(x->data, y->data, x->nbytes));
    }
    CHECK(g && !strcmp(iabn_st_meta(g, "note"), "iabn fixture") && !strcmp(iabn_st_meta(g, "format"), "pt"));
    iabn_st_free(g);
    remove(out);
    iabn_st_free(f);
}

static void test_malformed(void)
{
    unsigned char small[5] = {1, 0, 0, 0, 0};
    expect_bad(small, 0, "truncated", __LINE__);
    expect_bad(small, 5, "truncated", __LINE__);

    unsigned char huge[16] = {0, 0, 0, 0, 0, 0, 0, 0x80, '{', '}'};
    expect_bad(huge, 16, "100 MB", __LINE__);
    unsigned char over[16] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    expect_bad(over, 16, "exceeds", __LINE__);
    unsigned char zero[8] = {0};
    expect_bad(zero, 8, "not valid JSON", __LINE__);

    BAD("this is not json", 0, "not valid JSON");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, "not valid JSON");
    BAD("{} x", 0, "trailing bytes");
    BAD("[1,2]", 0, "not a JSON object");
    BAD("\"str\"", 0, "not a JSON object");

    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}";
    size_t len;
    unsigned char *img = image(ok, 12, &len);
    iabn_st_file *f = NULL;
    CHECK_OK(iabn_st_parse(img, len, &f, &e_));
    CHECK(iabn_st_count(f) == 2 && !strcmp(iabn_st_path(f), "<memory>"));
    iabn_st_free(f);
    expect_bad(img, len - 1, "past the end", __LINE__);
    free(img);
    BAD(ok, 13, "trailing bytes");

    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
        8, "overlap");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[9,13]}}",
        13, "gap");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", 8, "gap");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "past the end");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "shape mismatch");
    BAD("{\"a\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "shape mismatch");
    BAD("{\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}}", 8, "unsupported dtype 'F16'");
    BAD("{\"a\":{\"dtype\":\"XYZ\",\"shape\":[4],\"data_offsets\":[0,8]}}", 8, "unsupported dtype");
    BAD("{\"a\":{\"dtype\":5,\"shape\":[4],\"data_offsets\":[0,8]}}", 8, "dtype");
    BAD("{\"a\":{\"shape\":[4],\"data_offsets\":[0,8]}}", 8, "dtype");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
        "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
        8, "duplicate tensor name 'a'");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0, "shape[0]");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,0]}}", 0, "shape[0]");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[\"4\"],\"data_offsets\":[0,4]}}", 4, "shape[0]");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":4,\"data_offsets\":[0,4]}}", 4, "shape");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "9 dims");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
        "overflows");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, "begin 4 > end 0");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4,8]}}", 4, "data_offsets");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[4]}}", 4, "data_offsets");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,1e300]}}", 4, "data_offsets");
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[-4,0]}}", 4, "data_offsets");
    BAD("{\"a\":[1,2]}", 0, "tensor 'a': entry is not a JSON object");
    BAD("{\"__metadata__\":[\"x\"]}", 0, "__metadata__ is not a JSON object");
    BAD("{\"__metadata__\":{\"k\":1}}", 0, "value for 'k' is not a string");
    BAD("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, "duplicate __metadata__ key 'k'");
    BAD("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate key '__metadata__'");

    /* accepted: empty tensors anywhere, rank 0, extra fields, metadata only */
    const char *fine = "{\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
                       "\"s\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4],\"extra\":1},"
                       "\"__metadata__\":{\"k\":\"v\"}}    ";
    img = image(fine, 4, &len);
    f = NULL;
    iabn_err e = {0};
    CHECK_MSG(iabn_st_parse(img, len, &f, &e) == 0, "%s", e.msg);
    CHECK(iabn_st_count(f) == 2 && !strcmp(iabn_st_meta(f, "k"), "v"));
    iabn_st_free(f);
    free(img);
}

/* The metadata-only header above parses; check that separately. */
static void test_metadata_only(void)
{
    size_t len;
    unsigned char *img = image("{\"__metadata__\":{\"k\":\"v\"}}", 0, &len);
    iabn_st_file *f = NULL;
    CHECK_OK(iabn_st_parse(img, len, &f, &e_));
    CHECK(iabn_st_count(f) == 0 && !strcmp(iabn_st_meta(f, "k"), "v"));
    iabn_st_free(f);
    free(img);
}

static void test_files(void)
{
    char path[512];
    iabn_err e = {0};
    iabn_st_file *f = NULL;
    snprintf(path, sizeof path, "%s/missing.safetensors", tmpdir);
    CHECK(iabn_st_load(path, &f, &e) == IABN_EIO && f == NULL);
    CHECK(strstr(e.msg, path) && strstr(e.msg, "cannot open"));

    snprintf(path, sizeof path, "%s/zero.safetensors", tmpdir);
    FILE *fp = fopen(path, "wb");
    fclose(fp);
    CHECK(iabn_st_load(path, &f, &e) == IABN_EFORMAT && f == NULL);
    CHECK(strstr(e.msg, path) && strstr(e.msg, "truncated"));
    remove(path);

    /* a corrupt tensor entry in a file: the message names file and tensor */
    size_t len;
    unsigned char *img =
        image("{\"conv1.weight\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, &len);
    snprintf(path, sizeof path, "%s/bad.safetensors", tmpdir);
    fp = fopen(path, "wb");
    fwrite(img, 1, len, fp);
    fclose(fp);
    free(img);
    CHECK(iabn_st_load(path, &f, &e) == IABN_EFORMAT);
    CHECK(strstr(e.msg, path) && strstr(e.msg, "conv1.weight") && strstr(e.msg, "BF16"));
    remove(path);

    CHECK(iabn_st_load(tmpdir, &f, &e) == IABN_EIO);
}

/* Every prefix of a good file is rejected; single-byte changes anywhere never
 * crash (under ASan in the fuzz build this is a cheap smoke test). */
static void test_truncations_and_flips(void)
{
    size_t len = 0;
    unsigned char *b = read_all(ST_FIXTURE_DIR "/st_basic.safetensors", &len);
    CHECK(b && len > 100);
    if (!b) return;
    int bad_prefix = 0;
    for (size_t n = 0; n < len; n++) {
        iabn_st_file *f = NULL;
        iabn_err e = {0};
        if (iabn_st_parse(b, n, &f, &e) == 0 || f || !e.msg[0]) bad_prefix++;
        iabn_st_free(f);
    }
    CHECK_MSG(bad_prefix == 0, "%d truncated prefixes were accepted", bad_prefix);
    static const unsigned char vals[] = {0, '"', '{', ']', '9', '-', 0xff};
    unsigned char *m = malloc(len);
    int accepted = 0;
    for (size_t i = 0; i < len; i++)
        for (size_t v = 0; v < sizeof vals; v++) {
            memcpy(m, b, len);
            m[i] = vals[v];
            iabn_st_file *f = NULL;
            iabn_err e = {0};
            if (iabn_st_parse(m, len, &f, &e) == 0) {
                accepted++;
                for (int k = 0; k < iabn_st_count(f); k++) {
                    const iabn_st_tensor *t = iabn_st_get(f, k);
                    volatile unsigned char sink = 0;
                    for (size_t j = 0; j < t->nbytes; j++) sink ^= ((const unsigned char *)t->data)[j];
                    (void)sink;
                }
            } else {
                CHECK(f == NULL && e.msg[0] != 0);
            }
            iabn_st_free(f);
        }
    CHECK(accepted > 0); /* flips inside the data buffer stay valid */
    free(m);
    free(b);
}

static void test_atomic_save(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/atomic.safetensors", tmpdir);
    int before = count_dir();
    float v[4] = {1, 2, 3, 4};
    int64_t s[1] = {4};
    iabn_st_writer *wr = iabn_st_writer_new();
    CHECK_OK(iabn_st_writer_add(wr, "v", IABN_F32, 1, s, v, &e_));
    CHECK_OK(iabn_st_writer_save(wr, path, &e_));
    CHECK(count_dir() == before + 1);
    /* overwrite in place: still one file, new contents */
    v[0] = 9;
    iabn_st_writer_free(wr);
    wr = iabn_st_writer_new();
    CHECK_OK(iabn_st_writer_add(wr, "v", IABN_F32, 1, s, v, &e_));
    CHECK_OK(iabn_st_writer_save(wr, path, &e_));
    CHECK(count_dir() == before + 1);
    iabn_st_file *f = NULL;
    CHECK_OK(iabn_st_load(path, &f, &e_));
    float back[4] = {0};
    CHECK_OK(iabn_st_get_f32(f, "v", back, 4, &e_));
    CHECK(back[0] == 9 && back[3] == 4);
    iabn_st_free(f);

    /* the rename fails (target is a non-empty directory): error, old state
     * kept, and the temporary file removed */
    char sub[512], inner[600];
    snprintf(sub, sizeof sub, "%s/dir.safetensors", tmpdir);
    mkdir(sub, 0700);
    snprintf(inner, sizeof inner, "%s/x", sub);
    FILE *fp = fopen(inner, "wb");
    fclose(fp);
    int n2 = count_dir();
    iabn_err e = {0};
    CHECK(iabn_st_writer_save(wr, sub, &e) == IABN_EIO);
    CHECK(strstr(e.msg, sub) != NULL);
    CHECK(count_dir() == n2);
    remove(inner);
    rmdir(sub);

    snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", tmpdir);
    CHECK(iabn_st_writer_save(wr, path, &e) == IABN_EIO);
    CHECK(strstr(e.msg, "cannot create") != NULL);
    iabn_st_writer_free(wr);
}

int main(void)
{
    make_tmpdir();
    RUN(test_round_trip);
    RUN(test_exact_bytes);
    RUN(test_empty_file_contents);
    RUN(test_python_fixture);
    RUN(test_malformed);
    RUN(test_metadata_only);
    RUN(test_files);
    RUN(test_truncations_and_flips);
    RUN(test_atomic_save);
    remove_tmpdir();
    return TEST_END();
}
