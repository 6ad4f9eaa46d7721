/* cmd_predict.c: `iabn predict CHECKPOINT IN_DIR OUT_DIR`: every .png / .jpg /
 * .jpeg of IN_DIR and its sub-folders (a Cityscapes split holds one folder per
 * city), sorted, to a PNG label map of the same relative path in OUT_DIR:
 * raw class ids by default, the data set's palette with --color, Cityscapes
 * labelIds (for the official evaluation scripts) with --labelids.  The model
 * and its input normalisation come from the configuration stored in the
 * checkpoint; --scales and --flip average the logits over test-time
 * augmentations. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "iabn.h"
#include "tools/cli.h"
#include "tools/commands.h"

/* Cityscapes colours of the 19 train ids, and their labelIds. */
static const uint8_t cs_palette[19][3] = {
    {128, 64, 128}, {244, 35, 232}, {70, 70, 70}, {102, 102, 156}, {190, 153, 153},
    {153, 153, 153}, {250, 170, 30}, {220, 220, 0}, {107, 142, 35}, {152, 251, 152},
    {70, 130, 180}, {220, 20, 60}, {255, 0, 0}, {0, 0, 142}, {0, 0, 70},
    {0, 60, 100}, {0, 80, 100}, {0, 0, 230}, {119, 11, 32}};
static const uint8_t cs_label_ids[19] = {7, 8, 11, 12, 13, 17, 19, 20, 21, 22,
                                         23, 24, 25, 26, 27, 28, 31, 32, 33};

static int has_image_ext(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct namelist {
    char **v;
    int n, cap;
} namelist;

/* Adds the images under root/rel (rel "" for root itself) to l, as paths
 * relative to root.  Real directories only (a symlinked one could loop);
 * depth bounds a pathological tree. */
static int collect(const char *root, const char *rel, int depth, namelist *l, iabn_err *e)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *d = opendir(dir);
    if (!d) return iabn_err_set(e, IABN_EIO, "cannot read directory %s: %s", dir, strerror(errno));
    int rc = 0;
    for (struct dirent *de; !rc && (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        char r[4096], full[8192];
        int k = snprintf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", de->d_name);
        if (k < 0 || (size_t)k >= sizeof r) continue;
        snprintf(full, sizeof full, "%s/%s", root, r);
        struct stat st;
        if (lstat(full, &st)) continue;
        if (S_ISDIR(st.st_mode)) {
            if (depth < 16) rc = collect(root, r, depth + 1, l, e);
            continue;
        }
        if (!has_image_ext(de->d_name)) continue;
        if (l->n == l->cap) {
            int nc = l->cap ? 2 * l->cap : 64;
            char **q = realloc(l->v, (size_t)nc * sizeof *q);
            if (!q) {
                rc = iabn_err_set(e, IABN_ENOMEM, "out of memory listing %s", dir);
                break;
            }
            l->v = q;
            l->cap = nc;
        }
        if (!(l->v[l->n] = strdup(r))) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory listing %s", dir);
        else l->n++;
    }
    closedir(d);
    return rc;
}

/* mkdir -p of out/<the directories of rel> */
static int make_parents(const char *out, const char *rel, iabn_err *e)
{
    char p[8192];
    int k = snprintf(p, sizeof p, "%s/%s", out, rel);
    if (k < 0 || (size_t)k >= sizeof p) return iabn_err_set(e, IABN_EIO, "path too long: %s/%s", out, rel);
    for (char *c = p + strlen(out) + 1; (c = strchr(c, '/')); c++) {
        *c = '\0';
        if (mkdir(p, 0777) && errno != EEXIST) return iabn_err_set(e, IABN_EIO, "cannot create %s: %s", p, strerror(errno));
        *c = '/';
    }
    return 0;
}

static void usage(void)
{
    printf("usage: iabn predict CHECKPOINT IN_DIR OUT_DIR [--scales 0.7,1,1.2] [--flip]\n"
           "                    [--color | --labelids] [--threads T] [--device cpu|cuda[:N]]\n"
           "                    [--window HxW] [--pooling-size HxW|0]\n"
           "  --scales 0.7,1,1.2 --flip: the reference's test-time augmentation (class\n"
           "  probabilities averaged); --window: sliding-window inference; --pooling-size:\n"
           "  the DeepLabV3 head's pooling windows (84x84 by default, as the reference).\n");
}

int iabn_cmd_predict(int argc, char **argv)
{
    const char *pos[3];
    int npos = 0, flip = 0, color = 0, labelids = 0, ns = 0;
    float scales[8] = {1.f};
    int win[4] = {0, 0, 0, 0}, pool_set = 0; /* --window h, w; --pooling-size h, w */
    const char *device = "cpu";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "--flip")) flip = 1;
        else if (!strcmp(a, "--color")) color = 1;
        else if (!strcmp(a, "--labelids")) labelids = 1;
        else if (!strcmp(a, "--window") || !strcmp(a, "--pooling-size")) {
            if (!(v = iabn_flag_value(argc, argv, &i, "predict"))) return 2;
            int zero = !strcmp(v, "0") && a[2] == 'p';
            if (!zero && (iabn_parse_hw(v, &win[a[2] == 'p' ? 2 : 0], &win[a[2] == 'p' ? 3 : 1]) ||
                          win[a[2] == 'p' ? 2 : 0] < 1 || win[a[2] == 'p' ? 3 : 1] < 1)) {
                fprintf(stderr, "iabn predict: %s must be HxW%s, not '%s'\n", a,
                        a[2] == 'p' ? " or 0 (the global mean)" : "", v);
                return 2;
            }
            if (a[2] == 'p') pool_set = 1;
        } else if (!strcmp(a, "--scales")) {
            if (!(v = iabn_flag_value(argc, argv, &i, "predict"))) return 2;
            if ((ns = iabn_parse_floats(v, scales, 8)) < 1) { fprintf(stderr, "iabn predict: --scales %s\n", v); return 2; }
        } else if (!strcmp(a, "--threads")) {
            long long n;
            if (!(v = iabn_flag_value(argc, argv, &i, "predict")) || iabn_parse_int(v, &n) || n < 1) return 2;
            iabn_set_num_threads((int)n);
        } else if (!strcmp(a, "--device")) {
            if (!(device = iabn_flag_value(argc, argv, &i, "predict"))) return 2;
        } else if (a[0] == '-') { fprintf(stderr, "iabn predict: unknown flag %s\n", a); return 2; }
        else if (npos < 3) pos[npos++] = a;
        else { fprintf(stderr, "iabn predict: unexpected argument %s\n", a); return 2; }
    }
    if (npos != 3 || (color && labelids)) { usage(); return 2; }
    if (ns == 0) ns = 1;
    iabn_predictor *pr = NULL;
    iabn_err e = {0};
    iabn_predict_opts po = {device, win[0], win[1], pool_set, win[2], win[3]};
    int rc = iabn_predictor_open(pos[0], &po, &pr, &e);
    const iabn_config *cfg = pr ? iabn_predictor_config(pr) : NULL;
    int classes = cfg ? cfg->classes : 0;
    if (!rc && labelids && classes != 19)
        rc = iabn_err_set(&e, IABN_EINVAL, "--labelids needs a 19-class Cityscapes model (%d classes)", classes);
    namelist l = {0};
    if (!rc) rc = collect(pos[1], "", 0, &l, &e);
    if (!rc && l.n == 0)
        rc = iabn_err_set(&e, IABN_EIO, "no .png, .jpg or .jpeg image in %s or its sub-folders",
                          pos[1]);
    char **names = l.v;
    int n = l.n;
    if (n) qsort(names, (size_t)n, sizeof *names, cmp_str);
    if (!rc && mkdir(pos[2], 0777) && errno != EEXIST)
        rc = iabn_err_set(&e, IABN_EIO, "cannot create %s", pos[2]);
    uint8_t palette[256 * 3];
    for (int c = 0; c < 256; c++)
        for (int k = 0; k < 3; k++)
            palette[3 * c + k] = c < 19 && classes == 19 ? cs_palette[c][k]
                                                            : (uint8_t)((c * (37 + 61 * k) + 50 * k) & 0xff);
    int written = 0;
    for (int i = 0; i < n && !rc; i++) {
        char in[8192], out[8192];
        snprintf(in, sizeof in, "%s/%s", pos[1], names[i]);
        snprintf(out, sizeof out, "%s/%.*s.png", pos[2], (int)(strrchr(names[i], '.') - names[i]), names[i]);
        if ((rc = make_parents(pos[2], names[i], &e))) break;
        iabn_image img = {0}, lab = {0};
        if ((rc = iabn_image_load(in, 0, &img, &e))) break;
        size_t hw = (size_t)img.width * img.height;
        float *x = malloc(3 * hw * sizeof *x), *acc = malloc((size_t)classes * hw * sizeof *acc);
        int32_t *pred = malloc(hw * sizeof *pred);
        if (!x || !acc || !pred) rc = iabn_err_set(&e, IABN_ENOMEM, "out of memory for %s", in);
        if (!rc) {
            iabn_image_to_chw(&img, cfg->mean, cfg->std, x);
            rc = iabn_predictor_logits(pr, x, img.height, img.width, scales, ns, flip, acc, &e);
        }
        if (!rc) rc = iabn_image_alloc(&lab, img.width, img.height, 1, 1, &e);
        if (!rc) {
            iabn_argmax_channels(classes, hw, acc, pred);
            for (size_t k = 0; k < hw; k++)
                lab.data[k] = (uint8_t)(labelids ? cs_label_ids[pred[k]] : pred[k]);
            rc = iabn_image_write_png(out, &lab, color ? palette : NULL, color ? classes : 0, &e);
            written += !rc;
        }
        free(x);
        free(acc);
        free(pred);
        iabn_image_free(&img);
        iabn_image_free(&lab);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    iabn_predictor_close(pr);
    if (rc) {
        fprintf(stderr, "iabn predict: %s\n", e.msg);
        return 1;
    }
    printf("%d label maps written to %s\n", written, pos[2]);
    return 0;
}
