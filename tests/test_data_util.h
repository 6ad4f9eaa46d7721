/* test_data_util.h: temporary directories and small file helpers shared by
 * the data tests (everything they make lives under one mkdtemp directory,
 * removed at the end). */
#ifndef IABN_TEST_DATA_UTIL_H
#define IABN_TEST_DATA_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char t_tmp[256];

static inline void t_tmp_make(void)
{
    snprintf(t_tmp, sizeof t_tmp, "/tmp/iabn_data_test_XXXXXX");
    if (!mkdtemp(t_tmp)) {
        perror("mkdtemp");
        exit(1);
    }
}

static inline void t_rm_tree(const char *p)
{
    struct stat st;
    if (lstat(p, &st)) return;
    if (S_ISDIR(st.st_mode)) {
        chmod(p, 0755);
        DIR *d = opendir(p);
        struct dirent *ent;
        while (d && (ent = readdir(d))) {
            if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..")) continue;
            size_t n = strlen(p) + strlen(ent->d_name) + 2;
            char *sub = malloc(n);
            snprintf(sub, n, "%s/%s", p, ent->d_name);
            t_rm_tree(sub);
            free(sub);
        }
        if (d) closedir(d);
    }
    remove(p);
}

static inline void t_tmp_remove(void)
{
    if (t_tmp[0]) t_rm_tree(t_tmp);
}

/* path under the temporary directory; a rotating set of buffers */
static inline const char *t_path(const char *fmt, const char *a)
{
    static char bufs[8][1024];
    static int k;
    char rel[512];
    snprintf(rel, sizeof rel, fmt, a);
    char *b = bufs[k++ % 8];
    snprintf(b, 1024, "%s/%s", t_tmp, rel);
    return b;
}

static inline void t_mkdirs(const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(buf, 0755);
            *p = '/';
        }
    mkdir(buf, 0755);
}

static inline void t_write(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static inline uint8_t *t_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(len > 0 ? (size_t)len : 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

static inline void t_copy(const char *from, const char *to)
{
    size_t n;
    uint8_t *b = t_slurp(from, &n);
    if (!b) {
        perror(from);
        exit(1);
    }
    t_write(to, b, n);
    free(b);
}

#endif
