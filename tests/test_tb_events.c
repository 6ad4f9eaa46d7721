/* test_tb_events.c: the TensorBoard event writer (tools/tb_events.c).
 *
 * Checks CRC-32C against its published check value, one record against the
 * bytes worked out by hand in docs/FORMATS.md, every
 * record through a decoder in this file (bitwise CRC, generic protobuf walk),
 * and, when /usr/bin/python3 exists, through the independent reader
 * tests/fixtures/read_tb_events.py, which must also reject a corrupted copy.
 */
#include "models/train/tb_events.h"
#include "tensor/tensor.h"
#include "test_util.h"

#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef TB_FIXTURE_DIR
#define TB_FIXTURE_DIR "tests/fixtures"
#endif
#define PYTHON "/usr/bin/python3"

static char tmpdir[256];

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

static void rm_rf(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        remove(path);
        return;
    }
    struct dirent *de;
    char p[1024];
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", path, de->d_name);
            rm_rf(p);
        }
    closedir(d);
    rmdir(path);
}

static uint32_t crc_bitwise(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
}

static uint32_t mask(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int get_varint(const unsigned char *p, size_t n, size_t *i, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*i >= n) return -1;
        unsigned char b = p[(*i)++];
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return 0;
    }
    return -1;
}

typedef struct ev {
    double wall;
    int64_t step;
    char version[32];
    char tag[128];
    float value;
    int has_scalar;
} ev;

/* Event -> ev; only the fields the writer may emit are accepted. */
static int decode(const unsigned char *p, size_t n, ev *out)
{
    memset(out, 0, sizeof *out);
    size_t i = 0;
    int have_wall = 0;
    while (i < n) {
        uint64_t key, len;
        if (get_varint(p, n, &i, &key)) return -1;
        if (key == 0x09 && i + 8 <= n) {
            uint64_t u = le(p + i, 8);
            memcpy(&out->wall, &u, 8);
            i += 8;
            have_wall = 1;
        } else if (key == 0x10) {
            if (get_varint(p, n, &i, &len)) return -1;
            out->step = (int64_t)len;
        } else if (key == 0x1a) {
            if (get_varint(p, n, &i, &len) || len >= sizeof out->version || i + len > n) return -1;
            memcpy(out->version, p + i, len);
            i += len;
        } else if (key == 0x2a) {
            uint64_t sl, vl, tl;
            if (get_varint(p, n, &i, &sl) || i + sl != n) return -1;
            if (p[i++] != 0x0a || get_varint(p, n, &i, &vl) || i + vl != n) return -1;
            if (p[i++] != 0x0a || get_varint(p, n, &i, &tl) || tl >= sizeof out->tag || i + tl + 5 != n)
                return -1;
            memcpy(out->tag, p + i, tl);
            i += tl;
            if (p[i++] != 0x15) return -1;
            uint32_t u = (uint32_t)le(p + i, 4);
            memcpy(&out->value, &u, 4);
            i += 4;
            out->has_scalar = 1;
        } else {
            return -1;
        }
    }
    return have_wall ? 0 : -1;
}

/* All records of a file; returns their count or -1 on a framing/CRC error. */
static int read_events(const char *path, ev *evs, int max)
{
    size_t len = 0, i = 0;
    unsigned char *b = read_all(path, &len);
    if (!b) return -1;
    int n = 0;
    while (i < len) {
        if (i + 12 > len || n == max) goto bad;
        uint64_t dl = le(b + i, 8);
        if (le(b + i + 8, 4) != mask(crc_bitwise(b + i, 8))) goto bad;
        if (dl > len || i + 16 + dl > len) goto bad;
        if (le(b + i + 12 + dl, 4) != mask(crc_bitwise(b + i + 12, dl))) goto bad;
        if (decode(b + i + 12, dl, &evs[n])) goto bad;
        n++;
        i += 16 + dl;
    }
    free(b);
    return n;
bad:
    free(b);
    return -1;
}

static void test_crc(void)
{
    CHECK(iabn_crc32c("123456789", 9) == 0xe3069283u);
    CHECK(iabn_crc32c("", 0) == 0);
    unsigned char buf[300];
    for (int i = 0; i < 300; i++) buf[i] = (unsigned char)(i * 7 + 3);
    for (size_t n = 0; n <= 300; n += 37) CHECK(iabn_crc32c(buf, n) == crc_bitwise(buf, n));
    CHECK(iabn_crc32c_masked(buf, 100) == mask(crc_bitwise(buf, 100)));
}

static const struct {
    const char *tag;
    int64_t step;
    float value;
    double wall;
} scal[] = {
    {"loss", 1, 0.5f, 1.0},
    {"train/loss", 0, 2.25f, 1700000000.125},
    {"train/lr", 300, 1e-3f, 1700000001.5},
    {"val/mIoU", 1234567890123LL, -0.75f, 1700000002.0},
    {"weird tag \xc3\xa9", -5, 3.0e38f, 1700000003.0},
};
#define NSCAL (int)(sizeof scal / sizeof scal[0])

static void test_write_and_decode(void)
{
    char logdir[512];
    snprintf(logdir, sizeof logdir, "%s/runs/a", tmpdir);
    iabn_tb *tb = NULL;
    iabn_err e = {0};
    int rc = iabn_tb_open(logdir, &tb, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (rc) return;
    const char *path = iabn_tb_path(tb);
    const char *base = strrchr(path, '/') + 1;
    CHECK(!strncmp(base, "events.out.tfevents.", 20));
    CHECK(strlen(base) > 20 + 10 + 1 && base[30] == '.');
    char saved[600];
    snprintf(saved, sizeof saved, "%s", path);
    for (int i = 0; i < NSCAL; i++)
        CHECK_OK(iabn_tb_scalar(tb, scal[i].tag, scal[i].step, scal[i].value, scal[i].wall, &e_));
    CHECK_OK(iabn_tb_scalar(tb, "now", 7, 1.0f, 0, &e_));
    CHECK(iabn_tb_scalar(tb, "", 7, 1.0f, 0, &e) == IABN_EINVAL);
    CHECK_OK(iabn_tb_flush(tb, &e_));

    /* readable while open (TensorBoard tails the file) */
    ev evs[16];
    CHECK(read_events(saved, evs, 16) == NSCAL + 2);
    CHECK_OK(iabn_tb_close(tb, &e_));

    int n = read_events(saved, evs, 16);
    CHECK(n == NSCAL + 2);
    if (n != NSCAL + 2) return;
    CHECK(!strcmp(evs[0].version, "brain.Event:2") && !evs[0].has_scalar);
    CHECK(evs[0].wall > 1.6e9);
    for (int i = 0; i < NSCAL; i++) {
        const ev *v = &evs[i + 1];
        CHECK(v->has_scalar && !strcmp(v->tag, scal[i].tag));
        CHECK(v->step == scal[i].step && v->value == scal[i].value && v->wall == scal[i].wall);
    }
    CHECK(evs[NSCAL + 1].step == 7 && fabs(evs[NSCAL + 1].wall - evs[0].wall) < 60);

    /* the record worked out by hand in docs/FORMATS.md */
    static const unsigned char want[] = {
        0x1a, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x9b, 0xd8, 0x2d,
        0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0x10, 0x01, 0x2a, 0x0d, 0x0a, 0x0b, 0x0a, 0x04,
        'l', 'o', 's', 's', 0x15, 0, 0, 0, 0x3f,
        0x27, 0xf9, 0x5d, 0xb1};
    size_t len = 0;
    unsigned char *b = read_all(saved, &len);
    size_t first = b ? 16 + (size_t)le(b, 8) : 0;
    CHECK(b && len >= first + sizeof want && !memcmp(b + first, want, sizeof want));
    free(b);
}

static void test_python_reader(void)
{
    if (access(PYTHON, X_OK) != 0) {
        fprintf(stderr, "  (no %s: Python cross-check skipped)\n", PYTHON);
        return;
    }
    char logdir[512], cmd[2048], line[512];
    snprintf(logdir, sizeof logdir, "%s/runs/py", tmpdir);
    iabn_tb *tb = NULL;
    CHECK_OK(iabn_tb_open(logdir, &tb, &e_));
    if (!tb) return;
    for (int i = 0; i < NSCAL; i++)
        CHECK_OK(iabn_tb_scalar(tb, scal[i].tag, scal[i].step, scal[i].value, scal[i].wall, &e_));
    char path[600];
    snprintf(path, sizeof path, "%s", iabn_tb_path(tb));
    CHECK_OK(iabn_tb_close(tb, &e_));

    snprintf(cmd, sizeof cmd, PYTHON " '%s/read_tb_events.py' '%s'", TB_FIXTURE_DIR, path);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    if (!p) return;
    int n = 0;
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        char want[512];
        if (n == 0) {
            CHECK_MSG(!strncmp(line, "version ", 8) && strstr(line, " brain.Event:2"), "%s", line);
        } else if (n <= NSCAL) {
            const int i = n - 1;
            snprintf(want, sizeof want, "scalar %.6f %lld %s %.9g", scal[i].wall, (long long)scal[i].step,
                     scal[i].tag, (double)scal[i].value);
            CHECK_MSG(!strcmp(line, want), "python read '%s', expected '%s'", line, want);
        }
        n++;
    }
    CHECK(pclose(p) == 0);
    CHECK(n == NSCAL + 1);

    /* the reader must notice a flipped byte (so the check above means something) */
    size_t len = 0;
    unsigned char *b = read_all(path, &len);
    CHECK(b && len > 60);
    if (!b) return;
    b[len - 7] ^= 0x01;
    char bad[700];
    snprintf(bad, sizeof bad, "%s/corrupt.tfevents", logdir);
    FILE *f = fopen(bad, "wb");
    fwrite(b, 1, len, f);
    fclose(f);
    free(b);
    snprintf(cmd, sizeof cmd, PYTHON " '%s/read_tb_events.py' '%s' >/dev/null 2>&1", TB_FIXTURE_DIR, bad);
    CHECK(system(cmd) != 0);
    ev evs[16];
    CHECK(read_events(bad, evs, 16) == -1);
}

static void test_open_cases(void)
{
    char logdir[1024];
    snprintf(logdir, sizeof logdir, "%s/runs/two", tmpdir);
    iabn_tb *a = NULL, *b = NULL;
    CHECK_OK(iabn_tb_open(logdir, &a, &e_));
    CHECK_OK(iabn_tb_open(logdir, &b, &e_));
    CHECK(a && b && strcmp(iabn_tb_path(a), iabn_tb_path(b)) != 0);
    CHECK_OK(iabn_tb_close(a, &e_));
    CHECK_OK(iabn_tb_close(b, &e_));
    CHECK_OK(iabn_tb_close(NULL, &e_));

    char file[512];
    snprintf(file, sizeof file, "%s/plainfile", tmpdir);
    FILE *f = fopen(file, "wb");
    fclose(f);
    iabn_err e = {0};
    iabn_tb *c = NULL;
    snprintf(logdir, sizeof logdir, "%s/sub", file);
    CHECK(iabn_tb_open(logdir, &c, &e) == IABN_EIO && c == NULL);
    CHECK(strstr(e.msg, file) != NULL);
    CHECK(iabn_tb_open(file, &c, &e) == IABN_EIO && strstr(e.msg, "not a directory"));
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/iabn_tb_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_crc);
    RUN(test_write_and_decode);
    RUN(test_python_reader);
    RUN(test_open_cases);
    rm_rf(tmpdir);
    return TEST_END();
}
