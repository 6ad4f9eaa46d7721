/* cpu/conv_taps.c: convolution as one GEMM per kernel tap, each over the
 * window of outputs for which that tap reads inside the image.
 *
 * Used for dilated convs on small maps (DeepLab's ASPP: dilation 12/24/36 on
 * 33x33), where im2col would multiply mostly padding: a tap whose rows or
 * columns fall in the padding for part of the output simply gets a smaller
 * window, and one that never reads the image is skipped.  Each GEMM is
 * C_out x window x C_in deep, so the path is only chosen for wide layers.
 * When a tap's window is whole rows of the image (stride 1, no column shift)
 * the GEMM reads x and writes y in place; otherwise the window is gathered.
 * The sgemm calls run threaded; gathers and scatters use OpenMP over channels.
 */
#include "tensor/cpu/blas.h"
#include "tensor/cpu/conv_impl.h"

#include <string.h>

/* wt[g][co][t][ci] = w[g*cout + co][ci][t]: a tap's weights become a plain
 * cout x cin matrix with leading dimension T*cin. */
static void pack_w(const iabn_conv_gd *c, const float *w, float *wt, int threads)
{
    int T = c->kh * c->kw;
    long rows = (long)c->G * c->cout;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long q = 0; q < rows; q++) {
        const float *src = w + (size_t)q * c->cin * T;
        float *dst = wt + (size_t)q * c->cin * T;
        for (int t = 0; t < T; t++)
            for (int ci = 0; ci < c->cin; ci++) dst[(size_t)t * c->cin + ci] = src[(size_t)ci * T + t];
    }
}

static void unpack_dw_add(const iabn_conv_gd *c, const float *dwt, float *dw, int threads)
{
    int T = c->kh * c->kw;
    long rows = (long)c->G * c->cout;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long q = 0; q < rows; q++) {
        const float *src = dwt + (size_t)q * c->cin * T;
        float *dst = dw + (size_t)q * c->cin * T;
        for (int ci = 0; ci < c->cin; ci++)
            for (int t = 0; t < T; t++) dst[(size_t)ci * T + t] += src[(size_t)t * c->cin + ci];
    }
}

/* A window of nimg images x rows x cols positions inside channel planes of
 * width w: element (i, oy, ox) of channel ch sits at
 * base[i*img + ch*plane + (y0 + oy*ys)*w + x0 + ox*xs]. */
typedef struct win {
    int nimg, rows, cols;
    long y0, ys, x0, xs, w;
    size_t plane, img;
} win;

static void win_gather(const float *base, const win *v, int channels, float *dst, int threads)
{
    size_t nt = (size_t)v->nimg * v->rows * v->cols;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int ch = 0; ch < channels; ch++) {
        for (int i = 0; i < v->nimg; i++) {
            for (int oy = 0; oy < v->rows; oy++) {
                const float *src =
                    base + i * v->img + ch * v->plane + (v->y0 + oy * v->ys) * v->w + v->x0;
                float *d = dst + ch * nt + ((size_t)i * v->rows + oy) * v->cols;
                if (v->xs == 1) {
                    memcpy(d, src, sizeof(float) * v->cols);
                } else {
                    for (int ox = 0; ox < v->cols; ox++) d[ox] = src[ox * v->xs];
                }
            }
        }
    }
}

static void win_add(float *base, const win *v, int channels, const float *src, int threads)
{
    size_t nt = (size_t)v->nimg * v->rows * v->cols;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int ch = 0; ch < channels; ch++) {
        for (int i = 0; i < v->nimg; i++) {
            for (int oy = 0; oy < v->rows; oy++) {
                float *d = base + i * v->img + ch * v->plane + (v->y0 + oy * v->ys) * v->w + v->x0;
                const float *s = src + ch * nt + ((size_t)i * v->rows + oy) * v->cols;
                for (int ox = 0; ox < v->cols; ox++) d[ox * v->xs] += s[ox];
            }
        }
    }
}

typedef struct tapwin {
    int r, s, r0, r1, c0, c1;
    int rowcopy; /* window = whole rows, same columns in x and y */
} tapwin;

/* Returns 0 when tap t never reads inside the image. */
static int tap_window(const iabn_conv_gd *c, int t, tapwin *tw)
{
    tw->r = t / c->kw;
    tw->s = t % c->kw;
    iabn_conv_tap_range(c->ho, c->hi, tw->r, c->s, c->pt, c->d, &tw->r0, &tw->r1);
    iabn_conv_tap_range(c->wo, c->wi, tw->s, c->s, c->pl, c->d, &tw->c0, &tw->c1);
    tw->rowcopy = c->s == 1 && c->wo == c->wi && (long)tw->s * c->d == c->pl;
    return tw->r1 > tw->r0 && tw->c1 > tw->c0;
}

/* The window of tap tw in the output (yside) or input (!yside) planes. */
static win make_win(const iabn_conv_gd *c, const tapwin *tw, int nimg, int yside)
{
    win v;
    v.nimg = nimg;
    v.rows = tw->r1 - tw->r0;
    v.cols = tw->c1 - tw->c0;
    if (yside) {
        v.y0 = tw->r0; v.ys = 1; v.x0 = tw->c0; v.xs = 1; v.w = c->wo;
        v.plane = (size_t)c->ho * c->wo;
        v.img = v.plane * c->cout * c->G;
    } else {
        v.y0 = (long)tw->r0 * c->s + (long)tw->r * c->d - c->pt; v.ys = c->s;
        v.x0 = (long)tw->c0 * c->s + (long)tw->s * c->d - c->pl; v.xs = c->s;
        v.w = c->wi;
        v.plane = (size_t)c->hi * c->wi;
        v.img = v.plane * c->cin * c->G;
    }
    return v;
}

/* The forward (y from x) and the data pass (dx from dy): the same GEMMs with
 * the two sides swapped.  Per tap, the source side's window is multiplied by
 * the tap's weights (transposed for the data pass) and added into the
 * destination side's window, which starts from the bias (the forward) or
 * zero.  Each side keeps its own buffer: xb holds C_in rows, cb C_out. */
static void taps_data(const iabn_conv_gd *c, const iabn_conv_plan *p, int bwd, const float *src,
                      const float *w, const float *bias, float *dst, float *scratch)
{
    int T = c->kh * c->kw, nt_ = p->threads, lda = T * c->cin;
    size_t hwi = (size_t)c->hi * c->wi, hwo = (size_t)c->ho * c->wo;
    float *wt = scratch, *xb = scratch + p->wbuf + p->dwbuf, *cb = xb + p->col;
    int cs = bwd ? c->cout : c->cin, cd = bwd ? c->cin : c->cout; /* source, destination */
    size_t hs = bwd ? hwo : hwi, hd = bwd ? hwi : hwo;
    float *bs = bwd ? cb : xb, *bd = bwd ? xb : cb;
    pack_w(c, w, wt, nt_);
    long planes = (long)c->n * c->G * cd;
#pragma omp parallel for schedule(static) num_threads(nt_)
    for (long q = 0; q < planes; q++) {
        float v = bias ? bias[q % ((long)c->G * cd)] : 0.0f, *dp = dst + (size_t)q * hd;
        for (size_t i = 0; i < hd; i++) dp[i] = v;
    }
    for (int g0 = 0; g0 < c->G; g0++) {
        for (int n0 = 0; n0 < c->n; n0 += p->nb) {
            int nbb = c->n - n0 < p->nb ? c->n - n0 : p->nb;
            const float *sg = src + ((size_t)n0 * c->G + g0) * cs * hs;
            float *dg = dst + ((size_t)n0 * c->G + g0) * cd * hd;
            for (int t = 0; t < T; t++) {
                tapwin tw;
                if (!tap_window(c, t, &tw)) continue;
                const float *a = wt + ((size_t)g0 * c->cout * T + t) * c->cin;
                win vx = make_win(c, &tw, nbb, 0), vy = make_win(c, &tw, nbb, 1);
                const win *vs = bwd ? &vy : &vx, *vd = bwd ? &vx : &vy;
                if (tw.rowcopy) {
                    for (int i = 0; i < nbb; i++)
                        iabn_sgemm(bwd, 0, cd, vy.rows * c->wo, cs, 1.0f, a, lda,
                                   sg + i * vs->img + vs->y0 * vs->w, (int)hs, 1.0f,
                                   dg + i * vd->img + vd->y0 * vd->w, (int)hd);
                    continue;
                }
                int ntot = nbb * vy.rows * vy.cols;
                win_gather(sg, vs, cs, bs, nt_);
                iabn_sgemm(bwd, 0, cd, ntot, cs, 1.0f, a, lda, bs, ntot, 0.0f, bd, ntot);
                win_add(dg, vd, cd, bd, nt_);
            }
        }
    }
}

void iabn_conv_taps_fwd(const iabn_conv_gd *c, const iabn_conv_plan *p, const float *x,
                        const float *w, const float *bias, float *y, float *scratch)
{
    taps_data(c, p, 0, x, w, bias, y, scratch);
}

void iabn_conv_taps_bwd_data(const iabn_conv_gd *c, const iabn_conv_plan *p, const float *dy,
                             const float *w, float *dx, float *scratch)
{
    taps_data(c, p, 1, dy, w, NULL, dx, scratch);
}

void iabn_conv_taps_bwd_filter(const iabn_conv_gd *c, const iabn_conv_plan *p, const float *x,
                               const float *dy, float *dw, float *scratch)
{
    int T = c->kh * c->kw, nt_ = p->threads, ldc = T * c->cin;
    size_t hwi = (size_t)c->hi * c->wi, hwo = (size_t)c->ho * c->wo;
    float *dwt = scratch + p->wbuf, *xb = scratch + p->wbuf + p->dwbuf, *cb = xb + p->col;
    size_t wtot = (size_t)c->G * c->cout * T * c->cin;
#pragma omp parallel for schedule(static) num_threads(nt_)
    for (size_t i = 0; i < wtot; i++) dwt[i] = 0.0f;
    for (int g0 = 0; g0 < c->G; g0++) {
        for (int n0 = 0; n0 < c->n; n0 += p->nb) {
            int nbb = c->n - n0 < p->nb ? c->n - n0 : p->nb;
            const float *xg = x + ((size_t)n0 * c->G + g0) * c->cin * hwi;
            const float *dyg = dy + ((size_t)n0 * c->G + g0) * c->cout * hwo;
            for (int t = 0; t < T; t++) {
                tapwin tw;
                if (!tap_window(c, t, &tw)) continue;
                float *cw = dwt + ((size_t)g0 * c->cout * T + t) * c->cin;
                win vx = make_win(c, &tw, nbb, 0), vy = make_win(c, &tw, nbb, 1);
                if (tw.rowcopy) {
                    for (int i = 0; i < nbb; i++)
                        iabn_sgemm(0, 1, c->cout, c->cin, vy.rows * c->wo, 1.0f,
                                   dyg + i * vy.img + vy.y0 * c->wo, (int)hwo,
                                   xg + i * vx.img + vx.y0 * c->wi, (int)hwi, 1.0f, cw, ldc);
                    continue;
                }
                int ntot = nbb * vy.rows * vy.cols;
                win_gather(dyg, &vy, c->cout, cb, nt_);
                win_gather(xg, &vx, c->cin, xb, nt_);
                iabn_sgemm(0, 1, c->cout, c->cin, ntot, 1.0f, cb, ntot, xb, ntot, 1.0f, cw, ldc);
            }
        }
    }
    unpack_dw_add(c, dwt, dw, nt_);
}
