/* bn_gamma.c: the BN scale convention of weight files (layers.h).
 *
 * standard, checkpoint and checkpoint_opt scale by gamma, the in-place modes
 * by |gamma| + eps.  A file written by iabn says which convention each BN
 * weight was trained with, so that loading it into a unit of the other
 * convention computes the same function:
 *   plain -> |gamma|+eps   gamma' = gamma - eps, only where gamma >= eps (the
 *                          in-place scale cannot be below eps); gamma' is the
 *                          float whose |gamma'| + eps rounds to gamma exactly
 *   |gamma|+eps -> plain   gamma' = |gamma| + eps, the very float the kernels
 *                          computed (the sign of gamma is lost: the function
 *                          is not)
 * A file without the metadata (a reference or torchvision state dict) is read
 * in the convention of the unit that loads it: the reference's plain BN into
 * standard, its InPlaceABN into the in-place modes.  Checkpoints of format
 * iabn-checkpoint-1 without the key predate plain gamma: |gamma| + eps.
 */
#include "layers/layer_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY "bn_gamma"
#define PLAIN "plain"
#define ABS "abs+eps="

static int is_bn_weight(const iabn_param *p) { return p->kind == IABN_P_BN_WEIGHT; }

static void conv_str(char *buf, size_t n, const iabn_param *p)
{
    if (p->bn_abs) snprintf(buf, n, ABS "%.9g", (double)p->bn_eps);
    else snprintf(buf, n, PLAIN);
}

int iabn_bn_gamma_write_meta(iabn_store *s, iabn_st_writer *w, iabn_err *e)
{
    char first[48] = "", cur[48];
    int uniform = 1, any = 0;
    for (int i = 0; i < iabn_store_count(s); i++) {
        const iabn_param *p = iabn_store_get(s, i);
        if (!is_bn_weight(p)) continue;
        conv_str(cur, sizeof cur, p);
        if (!any) memcpy(first, cur, sizeof cur);
        else if (strcmp(first, cur)) uniform = 0;
        any = 1;
    }
    if (!any) return 0;
    if (uniform) return iabn_st_writer_meta(w, KEY, first, e);
    for (int i = 0; i < iabn_store_count(s); i++) {
        const iabn_param *p = iabn_store_get(s, i);
        if (!is_bn_weight(p)) continue;
        char key[IABN_NAME_LEN + 16];
        snprintf(key, sizeof key, KEY ".%s", p->name);
        conv_str(cur, sizeof cur, p);
        int rc = iabn_st_writer_meta(w, key, cur, e);
        if (rc) return rc;
    }
    return 0;
}

/* The file's convention for tensor fname: *abs and *eps.  Returns 0, or
 * IABN_EFORMAT for a value that is neither form. */
static int file_conv(const iabn_st_file *f, const char *fname, const iabn_param *p, int *abs,
                     float *eps, iabn_err *e)
{
    char key[IABN_NAME_LEN + 16];
    snprintf(key, sizeof key, KEY ".%s", fname);
    const char *v = iabn_st_meta(f, key);
    if (!v) v = iabn_st_meta(f, KEY);
    if (!v) {
        const char *fmt = iabn_st_meta(f, "format");
        int legacy = fmt && strcmp(fmt, "iabn-checkpoint-1") == 0;
        *abs = legacy ? 1 : p->bn_abs;
        *eps = p->bn_eps;
        return 0;
    }
    if (strcmp(v, PLAIN) == 0) {
        *abs = 0;
        *eps = 0.f;
        return 0;
    }
    if (strncmp(v, ABS, strlen(ABS)) == 0) {
        char *end;
        *eps = strtof(v + strlen(ABS), &end);
        *abs = 1;
        if (*end == '\0' && end != v + strlen(ABS) && *eps > 0.f) return 0;
    }
    return iabn_err_set(e, IABN_EFORMAT,
                        "%s: metadata %s of %s is '%.40s'; valid: '" PLAIN "', '" ABS "<eps>'",
                        iabn_st_path(f), key, fname, v);
}

/* The value g2 whose scale under p's convention equals `scale` exactly.
 * Returns 0, or -1 when there is none (in-place scale below eps). */
static int to_target(const iabn_param *p, float scale, float *g2)
{
    if (!p->bn_abs) {
        *g2 = scale;
        return 0;
    }
    if (!(scale >= p->bn_eps)) return -1; /* also NaN */
    float t = scale - p->bn_eps;
    /* fl(t + eps) is monotone in t and t's grid is at least as fine as the
     * scale's, so a neighbour of the rounded difference hits it */
    float c[5] = {t, nextafterf(t, 0.f), nextafterf(t, 2.f * scale), 0.f, 0.f};
    c[3] = nextafterf(c[1], 0.f);
    c[4] = nextafterf(c[2], 2.f * scale);
    for (int i = 0; i < 5; i++)
        if (c[i] >= 0.f && iabn_bn_scale(c[i], p->bn_eps, 1) == scale) {
            *g2 = c[i];
            return 0;
        }
    return -1;
}

int iabn_bn_gamma_convert(const iabn_st_file *f, const char *fname, const iabn_param *p,
                          float *v, iabn_err *e)
{
    if (!is_bn_weight(p)) return 0;
    int abs;
    float eps;
    int rc = file_conv(f, fname, p, &abs, &eps, e);
    if (rc) return rc;
    if (abs == p->bn_abs && (!abs || eps == p->bn_eps)) return 0;
    /* check every value before changing any */
    size_t bad = p->count;
    for (size_t i = 0; i < p->count && bad == p->count; i++) {
        float g2;
        if (to_target(p, iabn_bn_scale(v[i], eps, abs), &g2)) bad = i;
    }
    if (bad < p->count)
        return iabn_err_set(e, IABN_EFORMAT,
                            "%s: %s was saved with %s gamma and holds %g at [%zu]: the in-place "
                            "modes scale by |gamma|+eps (>= %g), so they cannot compute the same "
                            "function; load it with --bn standard, checkpoint or checkpoint_opt",
                            iabn_st_path(f), fname, abs ? "|gamma|+eps" : "plain",
                            (double)v[bad], bad, (double)p->bn_eps);
    for (size_t i = 0; i < p->count; i++) to_target(p, iabn_bn_scale(v[i], eps, abs), &v[i]);
    return 0;
}

int iabn_bn_gamma_check(iabn_store *s, const iabn_st_file *f, iabn_err *e)
{
    char names[512] = "";
    size_t len = 0;
    int nbad = 0;
    float *host = NULL;
    size_t cap = 0;
    int rc = 0;
    for (int i = 0; i < iabn_store_count(s) && !rc; i++) {
        const iabn_param *p = iabn_store_get(s, i);
        const iabn_st_tensor *t = is_bn_weight(p) ? iabn_st_find(f, p->name) : NULL;
        if (!t || !p->bn_abs || (size_t)iabn_st_numel(t) != p->count) continue;
        int abs;
        float eps;
        if ((rc = file_conv(f, p->name, p, &abs, &eps, e))) break;
        if (abs) continue; /* |gamma|+eps always converts */
        if (p->count > cap) {
            free(host);
            cap = p->count;
            host = malloc(cap * sizeof *host);
            if (!host) {
                rc = iabn_err_set(e, IABN_ENOMEM, "out of memory checking %s", p->name);
                break;
            }
        }
        if ((rc = iabn_st_read_f32(t, host, p->count, e))) break;
        float g2;
        int ok = 1;
        for (size_t k = 0; k < p->count && ok; k++) ok = !to_target(p, host[k], &g2);
        if (ok) continue;
        nbad++;
        if (len + strlen(p->name) + 8 < sizeof names)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", nbad > 1 ? ", " : "",
                                    p->name);
        else if (len + 5 < sizeof names && names[len - 1] != '.')
            len += (size_t)snprintf(names + len, sizeof names - len, ", ...");
    }
    free(host);
    if (!rc && nbad)
        rc = iabn_err_set(e, IABN_EFORMAT,
                          "%s was saved with plain gamma (standard BN) and %d layer%s negative "
                          "gamma (or one below eps): %s.  The in-place modes scale by "
                          "|gamma|+eps, which cannot reproduce them; use --bn standard, "
                          "checkpoint or checkpoint_opt",
                          iabn_st_path(f), nbad, nbad > 1 ? "s have" : " has", names);
    return rc;
}
