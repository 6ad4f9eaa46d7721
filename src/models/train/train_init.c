/* train_init.c: weights a run starts from: an ImageNet body under a
 * segmentation net (--pretrained for segtrain) and a classifier fine-tuned
 * from a checkpoint (--init).  Both convert BN scales saved under the other
 * gamma convention (bn_gamma.c), or refuse them naming the layers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/train/train_internal.h"

/* Appends name to a comma-separated list (bounded). */
static void list_add(char *buf, size_t cap, int *count, const char *name)
{
    size_t len = strlen(buf);
    if (*count < 8 && len + strlen(name) + 3 < cap)
        snprintf(buf + len, cap - len, "%s%s", *count ? ", " : "", name);
    (*count)++;
}

/* ImageNet-trained body weights for a segmentation net: a file tensor N goes to
 * "body.N" (or N).  Model tensors the file lacks must belong to the new head
 * or classifier; file tensors the model lacks must be the ImageNet
 * classifier's; shapes must agree.  Anything else is listed and refused
 * before a value is written. */
int trainer_load_body_weights(iabn_store *s, const char *path, iabn_err *e)
{
    iabn_st_file *f = NULL;
    int rc = iabn_st_load(path, &f, e);
    if (rc) return rc;
    int nst = iabn_store_count(s);
    int *src = malloc((size_t)nst * sizeof *src);
    char extra[512] = "", bad[512] = "", missing[512] = "";
    int n_extra = 0, n_bad = 0, n_missing = 0;
    if (!src) {
        iabn_st_free(f);
        return iabn_err_set(e, IABN_ENOMEM, "out of memory loading %s", path);
    }
    for (int i = 0; i < nst; i++) src[i] = -1;
    for (int k = 0; k < iabn_st_count(f); k++) {
        const iabn_st_tensor *t = iabn_st_get(f, k);
        char name[IABN_NAME_LEN + 8];
        snprintf(name, sizeof name, "body.%s", t->name);
        int id = iabn_store_find(s, name);
        if (id < 0) id = iabn_store_find(s, t->name);
        if (id < 0) {
            if (strncmp(t->name, "classifier.", 11)) list_add(extra, sizeof extra, &n_extra, t->name);
            continue;
        }
        const iabn_param *p = iabn_store_get(s, id);
        int same = t->ndim == p->nd;
        for (int d = 0; same && d < p->nd; d++) same = t->shape[d] == p->shape[d];
        if (!same) list_add(bad, sizeof bad, &n_bad, t->name);
        else src[id] = k;
    }
    for (int i = 0; i < nst; i++) {
        const char *nm = iabn_store_get(s, i)->name;
        if (src[i] < 0 && strncmp(nm, "head.", 5) && strncmp(nm, "cls.", 4))
            list_add(missing, sizeof missing, &n_missing, nm);
    }
    if (n_extra || n_bad || n_missing)
        rc = iabn_err_set(e, IABN_EFORMAT,
                          "%s does not fit the body: %d missing [%s], %d of another shape [%s], "
                          "%d unknown [%s] (only the new head and classifier may be missing)",
                          path, n_missing, missing, n_bad, bad, n_extra, extra);
    for (int i = 0; i < nst && !rc; i++) {
        if (src[i] < 0) continue;
        iabn_param *p = iabn_store_get(s, i);
        float *host = malloc(p->count * sizeof *host);
        if (!host) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory loading %s", path);
        if (!rc) rc = iabn_st_read_f32(iabn_st_get(f, src[i]), host, p->count, e);
        if (!rc) rc = iabn_bn_gamma_convert(f, iabn_st_get(f, src[i])->name, p, host, e);
        if (!rc) rc = iabn_store_write(s, i, host, e);
        free(host);
    }
    free(src);
    iabn_st_free(f);
    return rc;
}

/* Fine-tuning a classifier from a checkpoint (--init): every model tensor
 * whose name and shape the file holds is loaded, the others keep their fresh
 * initialisation (a new head for another number of classes); both lists are
 * printed.  A file that fits nothing is refused. */
int trainer_load_matching_weights(const trainer *tr, iabn_store *s, const char *path, iabn_err *e)
{
    iabn_st_file *f = NULL;
    int rc = iabn_st_load(path, &f, e);
    if (rc) return rc;
    int nst = iabn_store_count(s), loaded = 0, n_new = 0, n_shape = 0;
    char fresh[512] = "", shaped[512] = "";
    for (int i = 0; i < nst && !rc; i++) {
        iabn_param *p = iabn_store_get(s, i);
        const iabn_st_tensor *t = NULL;
        for (int k = 0; k < iabn_st_count(f) && !t; k++)
            if (!strcmp(iabn_st_get(f, k)->name, p->name)) t = iabn_st_get(f, k);
        int same = t && t->ndim == p->nd;
        for (int d = 0; same && d < p->nd; d++) same = t->shape[d] == p->shape[d];
        if (!same) {
            if (t) list_add(shaped, sizeof shaped, &n_shape, p->name);
            else list_add(fresh, sizeof fresh, &n_new, p->name);
            continue;
        }
        float *host = malloc(p->count * sizeof *host);
        if (!host) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory loading %s", path);
        if (!rc) rc = iabn_st_read_f32(t, host, p->count, e);
        /* a BN scale saved under the other gamma convention is converted
         * (or refused when it cannot be), as every other load does */
        if (!rc) rc = iabn_bn_gamma_convert(f, t->name, p, host, e);
        if (!rc) rc = iabn_store_write(s, i, host, e);
        free(host);
        loaded++;
    }
    iabn_st_free(f);
    if (rc) return rc;
    if (!loaded)
        return iabn_err_set(e, IABN_EFORMAT, "--init %s: no tensor matches the model by name and "
                            "shape (another architecture?)", path);
    trainer_say(tr, "init from %s: loaded %d of %d tensors; not loaded (initialised afresh): %d of "
                "another shape%s%s%s, %d not in the file%s%s%s", path, loaded, nst, n_shape,
           n_shape ? " [" : "", shaped, n_shape ? (n_shape > 8 ? ", ...]" : "]") : "", n_new,
           n_new ? " [" : "", fresh, n_new ? (n_new > 8 ? ", ...]" : "]") : "");
    return 0;
}
