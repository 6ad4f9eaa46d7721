/* tb_events.c: TensorBoard event files written by hand: CRC-32C, TFRecord
 * framing, and the few Event / Summary protobuf fields a scalar needs.
 *
 * Framing (tensorflow record_writer.cc): u64le length, u32le masked CRC of
 * those 8 bytes, the data, u32le masked CRC of the data.  Event fields:
 * wall_time (1, double), step (2, varint), file_version (3, string),
 * summary (5) -> value (1) -> { tag (1, string), simple_value (2, float) }.
 */
#include "models/train/tb_events.h"

#include "tensor/tensor.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* Reflected polynomial 0x82F63B78, one entry per byte value. */
static const uint32_t crc32c_tab[256] = {
    0x00000000, 0xf26b8303, 0xe13b70f7, 0x1350f3f4, 0xc79a971f, 0x35f1141c,
    0x26a1e7e8, 0xd4ca64eb, 0x8ad958cf, 0x78b2dbcc, 0x6be22838, 0x9989ab3b,
    0x4d43cfd0, 0xbf284cd3, 0xac78bf27, 0x5e133c24, 0x105ec76f, 0xe235446c,
    0xf165b798, 0x030e349b, 0xd7c45070, 0x25afd373, 0x36ff2087, 0xc494a384,
    0x9a879fa0, 0x68ec1ca3, 0x7bbcef57, 0x89d76c54, 0x5d1d08bf, 0xaf768bbc,
    0xbc267848, 0x4e4dfb4b, 0x20bd8ede, 0xd2d60ddd, 0xc186fe29, 0x33ed7d2a,
    0xe72719c1, 0x154c9ac2, 0x061c6936, 0xf477ea35, 0xaa64d611, 0x580f5512,
    0x4b5fa6e6, 0xb93425e5, 0x6dfe410e, 0x9f95c20d, 0x8cc531f9, 0x7eaeb2fa,
    0x30e349b1, 0xc288cab2, 0xd1d83946, 0x23b3ba45, 0xf779deae, 0x05125dad,
    0x1642ae59, 0xe4292d5a, 0xba3a117e, 0x4851927d, 0x5b016189, 0xa96ae28a,
    0x7da08661, 0x8fcb0562, 0x9c9bf696, 0x6ef07595, 0x417b1dbc, 0xb3109ebf,
    0xa0406d4b, 0x522bee48, 0x86e18aa3, 0x748a09a0, 0x67dafa54, 0x95b17957,
    0xcba24573, 0x39c9c670, 0x2a993584, 0xd8f2b687, 0x0c38d26c, 0xfe53516f,
    0xed03a29b, 0x1f682198, 0x5125dad3, 0xa34e59d0, 0xb01eaa24, 0x42752927,
    0x96bf4dcc, 0x64d4cecf, 0x77843d3b, 0x85efbe38, 0xdbfc821c, 0x2997011f,
    0x3ac7f2eb, 0xc8ac71e8, 0x1c661503, 0xee0d9600, 0xfd5d65f4, 0x0f36e6f7,
    0x61c69362, 0x93ad1061, 0x80fde395, 0x72966096, 0xa65c047d, 0x5437877e,
    0x4767748a, 0xb50cf789, 0xeb1fcbad, 0x197448ae, 0x0a24bb5a, 0xf84f3859,
    0x2c855cb2, 0xdeeedfb1, 0xcdbe2c45, 0x3fd5af46, 0x7198540d, 0x83f3d70e,
    0x90a324fa, 0x62c8a7f9, 0xb602c312, 0x44694011, 0x5739b3e5, 0xa55230e6,
    0xfb410cc2, 0x092a8fc1, 0x1a7a7c35, 0xe811ff36, 0x3cdb9bdd, 0xceb018de,
    0xdde0eb2a, 0x2f8b6829, 0x82f63b78, 0x709db87b, 0x63cd4b8f, 0x91a6c88c,
    0x456cac67, 0xb7072f64, 0xa457dc90, 0x563c5f93, 0x082f63b7, 0xfa44e0b4,
    0xe9141340, 0x1b7f9043, 0xcfb5f4a8, 0x3dde77ab, 0x2e8e845f, 0xdce5075c,
    0x92a8fc17, 0x60c37f14, 0x73938ce0, 0x81f80fe3, 0x55326b08, 0xa759e80b,
    0xb4091bff, 0x466298fc, 0x1871a4d8, 0xea1a27db, 0xf94ad42f, 0x0b21572c,
    0xdfeb33c7, 0x2d80b0c4, 0x3ed04330, 0xccbbc033, 0xa24bb5a6, 0x502036a5,
    0x4370c551, 0xb11b4652, 0x65d122b9, 0x97baa1ba, 0x84ea524e, 0x7681d14d,
    0x2892ed69, 0xdaf96e6a, 0xc9a99d9e, 0x3bc21e9d, 0xef087a76, 0x1d63f975,
    0x0e330a81, 0xfc588982, 0xb21572c9, 0x407ef1ca, 0x532e023e, 0xa145813d,
    0x758fe5d6, 0x87e466d5, 0x94b49521, 0x66df1622, 0x38cc2a06, 0xcaa7a905,
    0xd9f75af1, 0x2b9cd9f2, 0xff56bd19, 0x0d3d3e1a, 0x1e6dcdee, 0xec064eed,
    0xc38d26c4, 0x31e6a5c7, 0x22b65633, 0xd0ddd530, 0x0417b1db, 0xf67c32d8,
    0xe52cc12c, 0x1747422f, 0x49547e0b, 0xbb3ffd08, 0xa86f0efc, 0x5a048dff,
    0x8ecee914, 0x7ca56a17, 0x6ff599e3, 0x9d9e1ae0, 0xd3d3e1ab, 0x21b862a8,
    0x32e8915c, 0xc083125f, 0x144976b4, 0xe622f5b7, 0xf5720643, 0x07198540,
    0x590ab964, 0xab613a67, 0xb831c993, 0x4a5a4a90, 0x9e902e7b, 0x6cfbad78,
    0x7fab5e8c, 0x8dc0dd8f, 0xe330a81a, 0x115b2b19, 0x020bd8ed, 0xf0605bee,
    0x24aa3f05, 0xd6c1bc06, 0xc5914ff2, 0x37faccf1, 0x69e9f0d5, 0x9b8273d6,
    0x88d28022, 0x7ab90321, 0xae7367ca, 0x5c18e4c9, 0x4f48173d, 0xbd23943e,
    0xf36e6f75, 0x0105ec76, 0x12551f82, 0xe03e9c81, 0x34f4f86a, 0xc69f7b69,
    0xd5cf889d, 0x27a40b9e, 0x79b737ba, 0x8bdcb4b9, 0x988c474d, 0x6ae7c44e,
    0xbe2da0a5, 0x4c4623a6, 0x5f16d052, 0xad7d5351,
};

uint32_t iabn_crc32c(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) c = crc32c_tab[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

/* The mask keeps a CRC stored next to the data it covers from being a
 * fixed point of CRCs of CRCs. */
uint32_t iabn_crc32c_masked(const void *data, size_t n)
{
    uint32_t c = iabn_crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

struct iabn_tb {
    FILE *fp;
    char *path;
    unsigned char *buf; /* one encoded Event */
    size_t cap;
};

/* ---- protobuf encoding --------------------------------------------------- */

static size_t pb_varint(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (unsigned char)v;
    return n;
}

static size_t pb_varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static size_t pb_fixed(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
    return (size_t)bytes;
}

static size_t pb_double(unsigned char *p, double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    return pb_fixed(p, u, 8);
}

static size_t pb_float(unsigned char *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return pb_fixed(p, u, 4);
}

static size_t pb_bytes(unsigned char *p, unsigned key, const void *s, size_t n)
{
    size_t k = 0;
    p[k++] = (unsigned char)key;
    k += pb_varint(p + k, n);
    memcpy(p + k, s, n);
    return k + n;
}

static int tb_reserve(iabn_tb *tb, size_t need, iabn_err *e)
{
    if (need <= tb->cap) return 0;
    unsigned char *b = realloc(tb->buf, need);
    if (!b) return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory for an event of %zu bytes", tb->path, need);
    tb->buf = b;
    tb->cap = need;
    return 0;
}

/* One TFRecord holding the n bytes of tb->buf. */
static int tb_write_record(iabn_tb *tb, size_t n, iabn_err *e)
{
    unsigned char head[12], tail[4];
    pb_fixed(head, n, 8);
    pb_fixed(head + 8, iabn_crc32c_masked(head, 8), 4);
    pb_fixed(tail, iabn_crc32c_masked(tb->buf, n), 4);
    if (fwrite(head, 1, 12, tb->fp) != 12 || fwrite(tb->buf, 1, n, tb->fp) != n ||
        fwrite(tail, 1, 4, tb->fp) != 4)
        return iabn_err_set(e, IABN_EIO, "%s: write failed: %s", tb->path, strerror(errno));
    return 0;
}

static double tb_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

/* The fields every Event starts with; step 0 is left out, as proto3 leaves
 * out defaults. */
static size_t tb_event_head(unsigned char *p, double wall_time, int64_t step)
{
    size_t k = 0;
    p[k++] = 0x09;
    k += pb_double(p + k, wall_time);
    if (step) {
        p[k++] = 0x10;
        k += pb_varint(p + k, (uint64_t)step);
    }
    return k;
}

int iabn_tb_scalar(iabn_tb *tb, const char *tag, int64_t step, float value, double wall_time,
                   iabn_err *e)
{
    if (!tb || !tag || !*tag) return iabn_err_set(e, IABN_EINVAL, "iabn_tb_scalar: NULL tb or empty tag");
    size_t tl = strlen(tag);
    size_t val = 1 + pb_varint_len(tl) + tl + 5;   /* Summary.Value */
    size_t sum = 1 + pb_varint_len(val) + val;     /* Summary */
    size_t need = 9 + 11 + 1 + pb_varint_len(sum) + sum;
    int rc = tb_reserve(tb, need, e);
    if (rc) return rc;
    unsigned char *p = tb->buf;
    size_t k = tb_event_head(p, wall_time > 0 ? wall_time : tb_now(), step);
    p[k++] = 0x2a;
    k += pb_varint(p + k, sum);
    p[k++] = 0x0a;
    k += pb_varint(p + k, val);
    k += pb_bytes(p + k, 0x0a, tag, tl);
    p[k++] = 0x15;
    k += pb_float(p + k, value);
    return tb_write_record(tb, k, e);
}

int iabn_tb_flush(iabn_tb *tb, iabn_err *e)
{
    if (!tb) return iabn_err_set(e, IABN_EINVAL, "iabn_tb_flush: NULL tb");
    if (fflush(tb->fp) != 0) return iabn_err_set(e, IABN_EIO, "%s: flush failed: %s", tb->path, strerror(errno));
    return 0;
}

int iabn_tb_close(iabn_tb *tb, iabn_err *e)
{
    if (!tb) return 0;
    int rc = 0;
    if (tb->fp && fclose(tb->fp) != 0)
        rc = iabn_err_set(e, IABN_EIO, "%s: close failed: %s", tb->path, strerror(errno));
    free(tb->buf);
    free(tb->path);
    free(tb);
    return rc;
}

const char *iabn_tb_path(const iabn_tb *tb) { return tb ? tb->path : NULL; }

/* mkdir -p */
static int tb_mkdirs(const char *dir, iabn_err *e)
{
    char *d = malloc(strlen(dir) + 1);
    if (!d) return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory", dir);
    strcpy(d, dir);
    int rc = 0;
    for (char *p = d + 1;; p++) {
        if (*p != '/' && *p != 0) continue;
        char c = *p;
        *p = 0;
        if (mkdir(d, 0777) != 0 && errno != EEXIST) {
            rc = iabn_err_set(e, IABN_EIO, "%s: cannot create directory %s: %s", dir, d, strerror(errno));
            break;
        }
        *p = c;
        if (!c) break;
    }
    struct stat st;
    if (!rc && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)))
        rc = iabn_err_set(e, IABN_EIO, "%s: not a directory", dir);
    free(d);
    return rc;
}

int iabn_tb_open(const char *logdir, iabn_tb **out, iabn_err *e)
{
    if (!logdir || !*logdir || !out) return iabn_err_set(e, IABN_EINVAL, "iabn_tb_open: NULL argument");
    *out = NULL;
    int rc = tb_mkdirs(logdir, e);
    if (rc) return rc;
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) strcpy(host, "localhost");
    host[sizeof host - 1] = 0;
    for (char *h = host; *h; h++)
        if (*h == '/') *h = '_';
    iabn_tb *tb = calloc(1, sizeof *tb);
    size_t plen = strlen(logdir) + strlen(host) + 64;
    if (tb) tb->path = malloc(plen);
    if (!tb || !tb->path) {
        iabn_tb_close(tb, NULL);
        return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory", logdir);
    }
    long now = (long)time(NULL);
    for (int n = 0; n < 1000 && !tb->fp; n++) {
        if (n)
            snprintf(tb->path, plen, "%s/events.out.tfevents.%010ld.%s.%d", logdir, now, host, n);
        else
            snprintf(tb->path, plen, "%s/events.out.tfevents.%010ld.%s", logdir, now, host);
        tb->fp = fopen(tb->path, "wbx");
        if (!tb->fp && errno != EEXIST) break;
    }
    if (!tb->fp) {
        rc = iabn_err_set(e, IABN_EIO, "%s: cannot create: %s", tb->path, strerror(errno));
        iabn_tb_close(tb, NULL);
        return rc;
    }
    static const char version[] = "brain.Event:2";
    rc = tb_reserve(tb, 64, e);
    if (!rc) {
        size_t k = tb_event_head(tb->buf, tb_now(), 0);
        k += pb_bytes(tb->buf + k, 0x1a, version, sizeof version - 1);
        rc = tb_write_record(tb, k, e);
    }
    if (!rc) rc = iabn_tb_flush(tb, e);
    if (rc) {
        remove(tb->path);
        iabn_tb_close(tb, NULL);
        return rc;
    }
    *out = tb;
    return 0;
}
