/* dataset.c: finding the samples of a data set on disk.
 *
 * ImageFolder follows torchvision exactly (class = sorted sub-directory, files
 * from a recursive walk visited in sorted directory-path order, then sorted
 * names, extensions case-insensitive), except that an unreadable directory is
 * an error here, where os.walk would skip it silently.  Cityscapes pairs
 * every leftImg8bit image with its gtFine labelIds file; Vistas accepts both
 * the research-edition layout and the v2.0 download's v1.2 sub-tree.
 */
#include "data/data_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

typedef struct strvec {
    char **v;
    size_t n, cap;
} strvec;

static int sv_push(strvec *s, char *str)
{
    if (!str) return -1;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v) {
            free(str);
            return -1;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = str;
    return 0;
}

static void sv_free(strvec *s)
{
    for (size_t i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);
    if (!s) return NULL;
    memcpy(s, a, la);
    s[la] = '/';
    memcpy(s + la + 1, b, lb + 1);
    return s;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Sorted entry names of dir: directories (following links) when want_dirs,
 * otherwise everything else. */
static int list_dir(const char *dir, int want_dirs, strvec *out, iabn_err *e)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return iabn_err_set(e, IABN_EIO, "directory %s does not exist", dir);
        return iabn_err_set(e, IABN_EIO, "cannot read directory %s: %s", dir, strerror(errno));
    }
    struct dirent *ent;
    int rc = 0;
    errno = 0;
    while ((ent = readdir(d))) {
        if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..")) continue;
        char *full = join(dir, ent->d_name);
        if (!full) {
            rc = iabn_err_set(e, IABN_ENOMEM, "out of memory listing %s", dir);
            break;
        }
        int isd = is_dir(full);
        free(full);
        if (isd != want_dirs) continue;
        if (sv_push(out, strdup(ent->d_name))) {
            rc = iabn_err_set(e, IABN_ENOMEM, "out of memory listing %s", dir);
            break;
        }
        errno = 0;
    }
    if (!rc && errno)
        rc = iabn_err_set(e, IABN_EIO, "cannot read directory %s: %s", dir, strerror(errno));
    closedir(d);
    if (!rc && out->n) qsort(out->v, out->n, sizeof *out->v, cmp_str);
    return rc;
}

static int ends_with_ci(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcasecmp(s + a - b, suffix);
}

static int has_image_ext(const char *name)
{
    static const char *const ext[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                      ".pgm", ".tif", ".tiff", ".webp"};
    for (size_t i = 0; i < sizeof ext / sizeof *ext; i++)
        if (ends_with_ci(name, ext[i])) return 1;
    return 0;
}

static iabn_dataset *ds_new(iabn_dataset_kind kind, const char *root)
{
    iabn_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return NULL;
    ds->kind = kind;
    ds->root = strdup(root);
    if (!ds->root) {
        free(ds);
        return NULL;
    }
    return ds;
}

void iabn_dataset_free(iabn_dataset *ds)
{
    if (!ds) return;
    for (int i = 0; i < ds->num_classes && ds->class_names; i++) free(ds->class_names[i]);
    free(ds->class_names);
    for (size_t i = 0; i < ds->count; i++) {
        if (ds->paths) free(ds->paths[i]);
        if (ds->label_paths) free(ds->label_paths[i]);
    }
    free(ds->paths);
    free(ds->label_paths);
    free(ds->labels);
    free(ds->root);
    free(ds);
}

/* ---- ImageFolder ------------------------------------------------------------------ */

/* All directories under dir (itself included), for os.walk's visiting set. */
static int walk_dirs(const char *dir, int depth, strvec *dirs, iabn_err *e)
{
    if (depth > 64)
        return iabn_err_set(e, IABN_EINVAL, "directory tree under %s is deeper than 64 levels "
                            "(a symbolic-link loop?)", dir);
    char *copy = strdup(dir);
    if (sv_push(dirs, copy)) return iabn_err_set(e, IABN_ENOMEM, "out of memory");
    strvec sub = {0};
    int rc = list_dir(dir, 1, &sub, e);
    for (size_t i = 0; !rc && i < sub.n; i++) {
        char *p = join(dir, sub.v[i]);
        if (!p) {
            rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
            break;
        }
        rc = walk_dirs(p, depth + 1, dirs, e);
        free(p);
    }
    sv_free(&sub);
    return rc;
}

int iabn_list_images(const char *root, char ***out, size_t *n, iabn_err *e)
{
    *out = NULL;
    *n = 0;
    strvec dirs = {0}, paths = {0};
    int rc = walk_dirs(root, 0, &dirs, e);
    size_t skip = strlen(root) + 1;
    for (size_t d = 0; !rc && d < dirs.n; d++) {
        strvec files = {0};
        rc = list_dir(dirs.v[d], 0, &files, e);
        for (size_t f = 0; !rc && f < files.n; f++) {
            if (!has_image_ext(files.v[f])) continue;
            char *full = join(dirs.v[d], files.v[f]);
            if (sv_push(&paths, full ? strdup(full + skip) : NULL))
                rc = iabn_err_set(e, IABN_ENOMEM, "out of memory listing %s", root);
            free(full);
        }
        sv_free(&files);
    }
    sv_free(&dirs);
    if (rc) {
        sv_free(&paths);
        return rc;
    }
    if (paths.n) qsort(paths.v, paths.n, sizeof *paths.v, cmp_str);
    *out = paths.v;
    *n = paths.n;
    return 0;
}

void iabn_strings_free(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

int iabn_dataset_open_imagefolder(const char *dir, iabn_dataset **out, iabn_err *e)
{
    *out = NULL;
    strvec classes = {0}, paths = {0};
    int32_t *labels = NULL;
    size_t nlab = 0, cap = 0;
    int rc = list_dir(dir, 1, &classes, e);
    if (rc) return rc;
    if (classes.n == 0) {
        sv_free(&classes);
        return iabn_err_set(e, IABN_EINVAL, "no class folders in %s (ImageFolder expects "
                            "%s/<class>/<image>)", dir, dir);
    }
    if (classes.n > INT32_MAX) {
        sv_free(&classes);
        return iabn_err_set(e, IABN_EINVAL, "too many classes in %s", dir);
    }
    for (size_t c = 0; !rc && c < classes.n; c++) {
        char *cdir = join(dir, classes.v[c]);
        strvec dirs = {0};
        size_t before = paths.n;
        rc = cdir ? walk_dirs(cdir, 0, &dirs, e) : iabn_err_set(e, IABN_ENOMEM, "out of memory");
        if (!rc && dirs.n) qsort(dirs.v, dirs.n, sizeof *dirs.v, cmp_str);
        for (size_t d = 0; !rc && d < dirs.n; d++) {
            strvec files = {0};
            rc = list_dir(dirs.v[d], 0, &files, e);
            for (size_t f = 0; !rc && f < files.n; f++) {
                if (!has_image_ext(files.v[f])) continue;
                if (sv_push(&paths, join(dirs.v[d], files.v[f]))) {
                    rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
                    break;
                }
                if (nlab == cap) {
                    cap = cap ? cap * 2 : 1024;
                    int32_t *l = realloc(labels, cap * sizeof *l);
                    if (!l) {
                        rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
                        break;
                    }
                    labels = l;
                }
                labels[nlab++] = (int32_t)c;
            }
            sv_free(&files);
        }
        if (!rc && paths.n == before)
            rc = iabn_err_set(e, IABN_EINVAL, "class folder %s has no image files (.jpg .jpeg "
                              ".png .ppm .bmp .pgm .tif .tiff .webp)", cdir);
        sv_free(&dirs);
        free(cdir);
    }
    iabn_dataset *ds = rc ? NULL : ds_new(IABN_DATASET_IMAGEFOLDER, dir);
    if (!rc && !ds) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
    if (rc) {
        sv_free(&classes);
        sv_free(&paths);
        free(labels);
        return rc;
    }
    ds->count = paths.n;
    ds->paths = paths.v;
    ds->labels = labels;
    ds->num_classes = (int)classes.n;
    ds->class_names = classes.v;
    *out = ds;
    return 0;
}

/* ---- Cityscapes -------------------------------------------------------------------- */

int iabn_dataset_open_cityscapes(const char *root, const char *split, iabn_dataset **out,
                                 iabn_err *e)
{
    *out = NULL;
    if (!split || !*split) split = "train";
    char img_root[4096], lbl_root[4096];
    snprintf(img_root, sizeof img_root, "%s/leftImg8bit/%s", root, split);
    snprintf(lbl_root, sizeof lbl_root, "%s/gtFine/%s", root, split);
    strvec cities = {0}, imgs = {0}, lbls = {0};
    int rc = list_dir(img_root, 1, &cities, e);
    if (rc) return iabn_err_prefix(e, "Cityscapes: ");
    static const char suffix[] = "_leftImg8bit.png";
    for (size_t c = 0; !rc && c < cities.n; c++) {
        char *cdir = join(img_root, cities.v[c]);
        strvec files = {0};
        rc = cdir ? list_dir(cdir, 0, &files, e) : iabn_err_set(e, IABN_ENOMEM, "out of memory");
        for (size_t f = 0; !rc && f < files.n; f++) {
            const char *name = files.v[f];
            size_t n = strlen(name), ls = sizeof suffix - 1;
            if (n <= ls || strcmp(name + n - ls, suffix)) continue;
            char lbl[4096];
            int w = snprintf(lbl, sizeof lbl, "%s/%s/%.*s_gtFine_labelIds.png", lbl_root,
                             cities.v[c], (int)(n - ls), name);
            char *img = join(cdir, name);
            if (!img || w >= (int)sizeof lbl) {
                free(img);
                rc = iabn_err_set(e, IABN_ENOMEM, "out of memory or path too long");
                break;
            }
            if (!exists(lbl)) {
                rc = iabn_err_set(e, IABN_EINVAL, "Cityscapes: image %s has no label (expected "
                                  "%s)", img, lbl);
                free(img);
                break;
            }
            if (sv_push(&imgs, img) || sv_push(&lbls, strdup(lbl)))
                rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
        }
        sv_free(&files);
        free(cdir);
    }
    if (!rc && imgs.n == 0)
        rc = iabn_err_set(e, IABN_EINVAL, "Cityscapes: no *%s images under %s", suffix,
                          img_root);
    if (!rc && imgs.n != lbls.n) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
    iabn_dataset *ds = rc ? NULL : ds_new(IABN_DATASET_CITYSCAPES, root);
    char **names = rc ? NULL : calloc(19, sizeof *names);
    if (!rc && (!ds || !names)) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < 19; i++)
        if (!(names[i] = strdup(iabn_cityscapes_class_name(i))))
            rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
    sv_free(&cities);
    if (rc) {
        if (names)
            for (int i = 0; i < 19; i++) free(names[i]);
        free(names);
        iabn_dataset_free(ds);
        sv_free(&imgs);
        sv_free(&lbls);
        return rc;
    }
    ds->count = imgs.n;
    ds->paths = imgs.v;
    ds->label_paths = lbls.v;
    ds->num_classes = 19;
    ds->class_names = names;
    iabn_cityscapes_label_map(&ds->label_map);
    *out = ds;
    return 0;
}

/* ---- Mapillary Vistas ------------------------------------------------------------------ */

static int read_text(const char *path, char **out, size_t *len, iabn_err *e)
{
    uint8_t *buf = NULL;
    size_t cap = 0;
    int rc = iabn_file_read(path, &buf, len, &cap, e);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[*len] = 0;
    *out = (char *)buf;
    return 0;
}

int iabn_dataset_open_vistas(const char *root, const char *split, iabn_dataset **out,
                             iabn_err *e)
{
    *out = NULL;
    if (!split || !*split || !strcmp(split, "train")) split = "training";
    else if (!strcmp(split, "val")) split = "validation";
    char img_dir[4096], lbl_a[4096], lbl_b[4096], cfg_a[4096], cfg_b[4096];
    snprintf(img_dir, sizeof img_dir, "%s/%s/images", root, split);
    snprintf(lbl_a, sizeof lbl_a, "%s/%s/labels", root, split);
    snprintf(lbl_b, sizeof lbl_b, "%s/%s/v1.2/labels", root, split);
    snprintf(cfg_a, sizeof cfg_a, "%s/config.json", root);
    snprintf(cfg_b, sizeof cfg_b, "%s/config_v1.2.json", root);
    const char *lbl_dir, *cfg;
    if (is_dir(lbl_b) && exists(cfg_b)) {
        lbl_dir = lbl_b;
        cfg = cfg_b;
    } else if (is_dir(lbl_a) && exists(cfg_a)) {
        lbl_dir = lbl_a;
        cfg = cfg_a;
    } else {
        return iabn_err_set(e, IABN_EINVAL, "Vistas: found neither %s with %s nor %s with %s",
                            lbl_a, cfg_a, lbl_b, cfg_b);
    }
    char *json;
    size_t jlen;
    int rc = read_text(cfg, &json, &jlen, e);
    if (rc) return rc;
    iabn_label_map map;
    int ncls;
    char **names;
    rc = iabn_vistas_config_parse(json, jlen, &map, &ncls, &names, e);
    free(json);
    if (rc) return iabn_err_prefix(e, "Vistas config %s: ", cfg);
    strvec files = {0}, imgs = {0}, lbls = {0};
    rc = list_dir(img_dir, 0, &files, e);
    for (size_t f = 0; !rc && f < files.n; f++) {
        const char *name = files.v[f];
        if (!ends_with_ci(name, ".jpg") && !ends_with_ci(name, ".jpeg") &&
            !ends_with_ci(name, ".png"))
            continue;
        const char *dot = strrchr(name, '.');
        char lbl[4096];
        int w = snprintf(lbl, sizeof lbl, "%s/%.*s.png", lbl_dir, (int)(dot - name), name);
        char *img = join(img_dir, name);
        if (!img || w >= (int)sizeof lbl) {
            free(img);
            rc = iabn_err_set(e, IABN_ENOMEM, "out of memory or path too long");
            break;
        }
        if (!exists(lbl)) {
            rc = iabn_err_set(e, IABN_EINVAL, "Vistas: image %s has no label (expected %s)",
                              img, lbl);
            free(img);
            break;
        }
        if (sv_push(&imgs, img) || sv_push(&lbls, strdup(lbl)))
            rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
    }
    sv_free(&files);
    if (!rc && imgs.n == 0) rc = iabn_err_set(e, IABN_EINVAL, "Vistas: no images in %s", img_dir);
    if (!rc && imgs.n != lbls.n) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
    iabn_dataset *ds = rc ? NULL : ds_new(IABN_DATASET_VISTAS, root);
    if (!rc && !ds) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
    if (rc) {
        for (int i = 0; i < ncls; i++) free(names[i]);
        free(names);
        sv_free(&imgs);
        sv_free(&lbls);
        return rc;
    }
    ds->count = imgs.n;
    ds->paths = imgs.v;
    ds->label_paths = lbls.v;
    ds->num_classes = ncls;
    ds->class_names = names;
    ds->label_map = map;
    *out = ds;
    return 0;
}

/* ---- dispatch ------------------------------------------------------------------------- */

int iabn_dataset_open(iabn_dataset_kind kind, const char *root, const char *split,
                      iabn_dataset **out, iabn_err *e)
{
    switch (kind) {
    case IABN_DATASET_IMAGEFOLDER: {
        if (!split || !*split) return iabn_dataset_open_imagefolder(root, out, e);
        char *dir = join(root, split);
        if (!dir) return iabn_err_set(e, IABN_ENOMEM, "out of memory");
        int rc = iabn_dataset_open_imagefolder(dir, out, e);
        free(dir);
        return rc;
    }
    case IABN_DATASET_CITYSCAPES: return iabn_dataset_open_cityscapes(root, split, out, e);
    case IABN_DATASET_VISTAS: return iabn_dataset_open_vistas(root, split, out, e);
    }
    return iabn_err_set(e, IABN_EINVAL, "unknown data set kind %d", (int)kind);
}

const char *iabn_dataset_kind_name(iabn_dataset_kind kind)
{
    switch (kind) {
    case IABN_DATASET_IMAGEFOLDER: return "imagefolder";
    case IABN_DATASET_CITYSCAPES: return "cityscapes";
    case IABN_DATASET_VISTAS: return "vistas";
    }
    return "?";
}

int iabn_dataset_open_lenient(iabn_dataset_kind kind, const char *root, const char *split,
                              iabn_dataset **out, iabn_err *e)
{
    char *dir = kind == IABN_DATASET_IMAGEFOLDER && split && *split ? join(root, split) : NULL;
    int rc = dir && is_dir(dir) ? iabn_dataset_open_imagefolder(dir, out, e)
             : kind == IABN_DATASET_IMAGEFOLDER ? iabn_dataset_open_imagefolder(root, out, e)
                                                : iabn_dataset_open(kind, root, split, out, e);
    free(dir);
    return rc;
}

int iabn_dataset_kind_parse(const char *s, iabn_dataset_kind *out)
{
    if (!strcmp(s, "imagefolder") || !strcmp(s, "imagenet") || !strcmp(s, "folder"))
        *out = IABN_DATASET_IMAGEFOLDER;
    else if (!strcmp(s, "cityscapes"))
        *out = IABN_DATASET_CITYSCAPES;
    else if (!strcmp(s, "vistas") || !strcmp(s, "mapillary"))
        *out = IABN_DATASET_VISTAS;
    else
        return IABN_EINVAL;
    return 0;
}
