/* cpu/conv_wino.c: Winograd F(2x2, 3x3) for dense 3x3 convolutions (stride
 * 1, padding equal to the dilation) on nChw8c activations, all three passes: the geometry's
 * winograd flag on CPUs without AVX-512, where oneDNN 2.x has no Winograd
 * kernels (docs/CPU.md "Winograd F(2x2, 3x3) on nChw8c").
 *
 * Each 2x2 block of outputs (a tile) is A^T [ (G g G^T) .* (B^T d B) ] A
 * over its 4x4 input patch d: 16 products where the direct convolution has
 * 36, so 2.25x fewer multiply-adds.  The sums over input channels are 16
 * GEMMs, one per point xi of the 4x4 transformed tile:
 *     M_xi (tiles x C_out) = V_xi (tiles x C_in) . U_xi (C_in x C_out)
 * with V the transformed inputs and U the transformed weights.  Laid out
 * as nChw8c (V_xi: [C_in/8][tiles][8], M_xi: [C_out/8][tiles][8]), the
 * operands are the packed panels a register-tiled GEMM reads: a tile of 4
 * rows x 3 panels of 8 columns (12 accumulators, three vector loads and
 * four broadcasts per step, which keeps AVX2's two FMA pipes busy).
 *
 * The weights are transformed once a call (U: 16 x C_in x C_out floats);
 * the tiles go in blocks whose V_xi stays in the L2 cache while the GEMM
 * runs every column panel over it, then the block's outputs are
 * transformed back.  bwd-data is the forward of dy with the weights
 * flipped and transposed (stride 1, padding 1); bwd-filter is F(3x3, 2x2),
 * the same input transform and 16 GEMMs over the tiles (below).  Every
 * output element is
 * summed by one thread in a fixed order: results do not depend on the
 * thread count.  Winograd rounds differently from the direct convolution
 * (its transforms add and subtract inputs first); test_conv_wino bounds
 * the difference.
 *
 * With AVX2 + FMA (release builds, -march=x86-64-v3) the GEMM tiles are
 * unrolled per shape; elsewhere the same operations run through 8-float
 * structs and fmaf, in the same order, with the same bits.
 */
#include "tensor/cpu/conv_impl.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define LANES 8
#define MR 4    /* rows (tiles) of a GEMM tile */
#define NPMAX 3 /* column panels of a GEMM tile */
#define NXI 16  /* points of a transformed 4x4 tile */
/* Where they win (docs/CPU.md): 128 channels or more in and out for the
 * forward and data passes (64 ran them at 0.85x-0.96x oneDNN's direct
 * kernels: the transforms cost as much as the shorter GEMMs save), 64 for
 * the weight pass (1.17x-1.20x the native one there), and maps of 14x14 or
 * more (on 7x7, 512 -> 512 ran 0.95x-1.02x forward and data; wider ones
 * gained 1.2x-1.6x there, for 38-140 MiB of scratch against 2-4). */
#define MIN_CHANNELS 128
#define MIN_CHANNELS_WEIGHTS 64
/* fwd / bwd-data: input blocks of a chunk of the reduction, whose column
 * panels (KC_BLOCKS x 8 x 24 floats, 12 KiB) stay in the L1 cache. */
#ifndef KC_BLOCKS
#define KC_BLOCKS 16
#endif
/* Floats of a block's V_xi (tiles x C_in): kept in the L2 cache. */
#ifndef WINO_BLOCK_FLOATS
#define WINO_BLOCK_FLOATS ((size_t)1 << 16)
#endif

#define SIMD_LANES LANES
#include "tensor/cpu/simd.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* ---- the GEMM tile ---------------------------------------------------------
 * Row r, reduction step (i, j): the broadcast value at a + r*ar + i*a1 +
 * j*a2, panel q's vector at b + q*bq + i*b1 + j*b2; the result of row r,
 * panel q goes to c + r*cr + q*cq. */
typedef struct strides {
    int k1, k2;
    ptrdiff_t ar, a1, a2, b1, b2, bq, cr, cq;
} strides;

ALWAYS_INLINE void tile(const strides *s, int mr, int np, const float *a, const float *b,
                        int add, float *c)
{
    vf acc[MR][NPMAX];
    UNROLL(4)
    for (int r = 0; r < mr; r++) {
        UNROLL(3)
        for (int q = 0; q < np; q++) acc[r][q] = add ? vld(c + r * s->cr + q * s->cq) : vzero();
    }
    /* the strides in locals and the pointers stepped: the inner loop is the
     * loads and FMAs and two additions */
    const ptrdiff_t ar = s->ar, a1 = s->a1, a2 = s->a2, b1 = s->b1, b2 = s->b2, bq = s->bq;
    const int k1 = s->k1, k2 = s->k2;
    for (int i = 0; i < k1; i++) {
        const float *ap = a + i * a1, *bp = b + i * b1;
        for (int j = 0; j < k2; j++, ap += a2, bp += b2) {
            vf bv[NPMAX];
            UNROLL(3)
            for (int q = 0; q < np; q++) {
                bv[q] = vld(bp + q * bq);
                VKEEP(bv[q]);
            }
            UNROLL(4)
            for (int r = 0; r < mr; r++) {
                vf av = vbcast(ap + r * ar);
                UNROLL(3)
                for (int q = 0; q < np; q++) acc[r][q] = vfma(av, bv[q], acc[r][q]);
            }
        }
    }
    UNROLL(4)
    for (int r = 0; r < mr; r++) {
        UNROLL(3)
        for (int q = 0; q < np; q++) vst(c + r * s->cr + q * s->cq, acc[r][q]);
    }
}

#define TILE(mr, np)                                                                         \
    static void tile_##mr##_##np(const strides *s, const float *a, const float *b, int add, \
                                 float *c)                                                  \
    {                                                                                        \
        tile(s, mr, np, a, b, add, c);                                                       \
    }
TILE(1, 1) TILE(1, 2) TILE(1, 3)
TILE(2, 1) TILE(2, 2) TILE(2, 3)
TILE(3, 1) TILE(3, 2) TILE(3, 3)
TILE(4, 1) TILE(4, 2) TILE(4, 3)
#undef TILE

typedef void (*tile_fn)(const strides *, const float *, const float *, int, float *);
static const tile_fn tiles[MR][NPMAX] = {
    {tile_1_1, tile_1_2, tile_1_3},
    {tile_2_1, tile_2_2, tile_2_3},
    {tile_3_1, tile_3_2, tile_3_3},
    {tile_4_1, tile_4_2, tile_4_3},
};

/* ---- one convolution as the transforms see it -------------------------------
 * A forward 3x3 conv, stride 1, dilation d, padding d: ci -> co channels on
 * h x w maps (bwd-data: dy's channels in, dx's out).  With dilation d the
 * map splits into d x d phases (rows py, py + d, ..., columns likewise),
 * each an ordinary 3x3 conv over its own grid of ceil(h/d) x ceil(w/d)
 * points (the last ones past the map where d does not divide it: padding);
 * a tile is 2x2 outputs of one phase. */
typedef struct wconv {
    int n, ci, co, h, w, d;
    int th, tw, T; /* tiles down and across a phase, tiles in all */
    int tb;        /* tiles of a block */
} wconv;

static wconv wconv_make(int n, int ci, int co, int h, int w, int d)
{
    wconv q = {.n = n, .ci = ci, .co = co, .h = h, .w = w, .d = d};
    q.th = ((h + d - 1) / d + 1) / 2;
    q.tw = ((w + d - 1) / d + 1) / 2;
    q.T = n * d * d * q.th * q.tw;
    int tb = (int)(WINO_BLOCK_FLOATS / (size_t)ci) & ~(MR - 1);
    if (tb < MR) tb = MR;
    q.tb = tb < q.T ? tb : q.T;
    return q;
}

/* Tile tt's image and the map position of its first output (its others
 * lie d rows and d columns on). */
static inline void tile_at(const wconv *q, int tt, int *img, int *oy, int *ox)
{
    int per_phase = q->th * q->tw, per_img = per_phase * q->d * q->d;
    int ph = tt % per_img / per_phase, t = tt % per_phase;
    *img = tt / per_img;
    *oy = ph / q->d + 2 * q->d * (t / q->tw);
    *ox = ph % q->d + 2 * q->d * (t % q->tw);
}

/* U [xi][co/8][ci][8], then a block's V [xi][ci/8][tb][8] and M
 * [xi][co/8][tb][8]. */
static size_t u_floats(const wconv *q) { return iabn_conv_round16((size_t)NXI * q->ci * q->co); }
static size_t v_floats(const wconv *q) { return iabn_conv_round16((size_t)NXI * q->tb * q->ci); }
static size_t m_floats(const wconv *q) { return iabn_conv_round16((size_t)NXI * q->tb * q->co); }

static wconv pass_conv(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    return pass == IABN_CONV_BWD_DATA
               ? wconv_make(g->n, g->c_out, g->c_in, g->h_out, g->w_out, g->dil)
               : wconv_make(g->n, g->c_in, g->c_out, g->h_in, g->w_in, g->dil);
}

int iabn_conv_wino_takes(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    /* a phase's grid (dilated: one of dil x dil) of 14x14 points or more */
    long ph = (g->h_out + g->dil - 1) / g->dil, pw = (g->w_out + g->dil - 1) / g->dil;
    int cmin = pass == IABN_CONV_BWD_FILTER ? MIN_CHANNELS_WEIGHTS : MIN_CHANNELS;
    return g->winograd && g->groups == 1 && g->kh == 3 && g->kw == 3 && g->stride == 1 &&
           g->dil >= 1 && g->pad == g->dil && g->x_layout == IABN_LAYOUT_NCHW8C &&
           g->y_layout == IABN_LAYOUT_NCHW8C && g->c_in % LANES == 0 &&
           g->c_out % LANES == 0 && g->c_in >= cmin && g->c_out >= cmin &&
           ph * pw >= 14 * 14;
}

size_t iabn_conv_wino_scratch(const iabn_conv_geom *g, iabn_conv_pass pass, int threads)
{
    (void)threads; /* the blocks are shared by the threads */
    wconv q = pass_conv(g, pass);
    return u_floats(&q) + v_floats(&q) + m_floats(&q);
}

/* U_xi = (G k G^T)_xi for each (output, input) channel pair, with k the
 * forward's kernel: w[o][i] (flip 0, w is co x ci x 3 x 3), or for
 * bwd-data w[i][o] turned by 180 degrees (flip 1, w is ci x co x 3 x 3).
 * G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]. */
static void transform_weights(const wconv *q, const float *w, int flip, float *u, int threads)
{
    int nbo = q->co / LANES, ci = q->ci;
    const vf half = vbcast(&(const float){0.5f});
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int it = 0; it < nbo * ci; it++) {
        int ob = it / ci, i = it % ci;
        float kl[9][LANES]; /* the kernels of the block's 8 output channels */
        for (int l = 0; l < LANES; l++) {
            int o = ob * LANES + l;
            for (int e = 0; e < 9; e++)
                kl[e][l] = flip ? w[((size_t)i * q->co + o) * 9 + (8 - e)]
                                : w[((size_t)o * ci + i) * 9 + e];
        }
        vf k[9], t[4][3];
        for (int e = 0; e < 9; e++) k[e] = vld(kl[e]);
        for (int c = 0; c < 3; c++) { /* G k */
            t[0][c] = k[c];
            t[1][c] = vmul(half, vadd(vadd(k[c], k[3 + c]), k[6 + c]));
            t[2][c] = vmul(half, vadd(vsub(k[c], k[3 + c]), k[6 + c]));
            t[3][c] = k[6 + c];
        }
        float *o = u + ((size_t)ob * ci + i) * LANES;
        size_t xs = (size_t)nbo * ci * LANES; /* between points xi */
        for (int r = 0; r < 4; r++) { /* (G k) G^T */
            vst(o + (size_t)(r * 4 + 0) * xs, t[r][0]);
            vst(o + (size_t)(r * 4 + 1) * xs, vmul(half, vadd(vadd(t[r][0], t[r][1]), t[r][2])));
            vst(o + (size_t)(r * 4 + 2) * xs, vmul(half, vadd(vsub(t[r][0], t[r][1]), t[r][2])));
            vst(o + (size_t)(r * 4 + 3) * xs, t[r][2]);
        }
    }
}

/* V_xi = (B^T d B)_xi for the tiles [t0, t0 + tb) and every input block;
 * d is the tile's 4x4 input patch (zero outside the map).
 * B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. */
static void transform_in(const wconv *q, const float *x, int t0, int tb, float *v, int threads)
{
    int nbi = q->ci / LANES;
    size_t plane = (size_t)q->h * q->w * LANES;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int it = 0; it < tb * nbi; it++) {
        int t = it / nbi, ib = it % nbi, tt = t0 + t;
        int img, oy, ox, dl = q->d;
        tile_at(q, tt, &img, &oy, &ox);
        const float *src = x + ((size_t)img * nbi + ib) * plane;
        vf d[4][4], r[4][4];
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++) {
                int yy = oy + dl * (a - 1), xx = ox + dl * (b - 1);
                d[a][b] = yy >= 0 && yy < q->h && xx >= 0 && xx < q->w
                              ? vld(src + ((size_t)yy * q->w + xx) * LANES)
                              : vzero();
            }
        for (int a = 0; a < 4; a++) { /* d B */
            r[a][0] = vsub(d[a][0], d[a][2]);
            r[a][1] = vadd(d[a][1], d[a][2]);
            r[a][2] = vsub(d[a][2], d[a][1]);
            r[a][3] = vsub(d[a][1], d[a][3]);
        }
        float *o = v + ((size_t)ib * tb + t) * LANES;
        size_t xs = (size_t)nbi * tb * LANES; /* between points xi */
        for (int b = 0; b < 4; b++) { /* B^T (d B) */
            vst(o + (size_t)(0 * 4 + b) * xs, vsub(r[0][b], r[2][b]));
            vst(o + (size_t)(1 * 4 + b) * xs, vadd(r[1][b], r[2][b]));
            vst(o + (size_t)(2 * 4 + b) * xs, vsub(r[2][b], r[1][b]));
            vst(o + (size_t)(3 * 4 + b) * xs, vsub(r[1][b], r[3][b]));
        }
    }
}

/* M_xi = V_xi . U_xi for a block of tb tiles.  The reduction goes in
 * chunks of KC_BLOCKS input blocks, so that the column panels' chunk (KC x
 * 24 floats) stays in the L1 cache while every row of the block runs over
 * it; each chunk adds into M. */
static void gemms(const wconv *q, int tb, const float *v, const float *u, float *m, int threads)
{
    int nbi = q->ci / LANES, nbo = q->co / LANES, ntrip = (nbo + NPMAX - 1) / NPMAX;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int it = 0; it < NXI * ntrip; it++) {
        int xi = it / ntrip, ob = it % ntrip * NPMAX;
        int np = nbo - ob < NPMAX ? nbo - ob : NPMAX;
        const float *a = v + (size_t)xi * nbi * tb * LANES;
        const float *b = u + ((size_t)xi * nbo + ob) * q->ci * LANES;
        float *c = m + ((size_t)xi * nbo + ob) * tb * LANES;
        for (int k0 = 0; k0 < nbi; k0 += KC_BLOCKS) {
            int kb = nbi - k0 < KC_BLOCKS ? nbi - k0 : KC_BLOCKS;
            strides s = {.k1 = kb, .k2 = LANES, .ar = LANES, .a1 = (ptrdiff_t)tb * LANES,
                         .a2 = 1, .b1 = LANES * LANES, .b2 = LANES,
                         .bq = (ptrdiff_t)q->ci * LANES, .cr = LANES,
                         .cq = (ptrdiff_t)tb * LANES};
            const float *ak = a + (size_t)k0 * tb * LANES, *bk = b + (size_t)k0 * LANES * LANES;
            for (int p = 0; p < tb; p += MR) {
                int mr = tb - p < MR ? tb - p : MR;
                tiles[mr - 1][np - 1](&s, ak + (size_t)p * LANES, bk, k0 > 0,
                                      c + (size_t)p * LANES);
            }
        }
    }
}

/* The tiles' outputs: A^T M A (A^T = [1 1 1 0; 0 1 -1 -1]), plus bias and
 * src, into y where they lie inside the map. */
static void transform_out(const wconv *q, const float *m, int t0, int tb, const float *bias,
                          const float *src, float *y, int threads)
{
    int nbo = q->co / LANES;
    size_t plane = (size_t)q->h * q->w * LANES, xs = (size_t)nbo * tb * LANES;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int it = 0; it < tb * nbo; it++) {
        int t = it / nbo, ob = it % nbo, tt = t0 + t;
        int img, oy, ox;
        tile_at(q, tt, &img, &oy, &ox);
        const float *mp = m + ((size_t)ob * tb + t) * LANES;
        vf s[2][4], out[2][2];
        for (int b = 0; b < 4; b++) { /* A^T M */
            vf m0 = vld(mp + (size_t)(0 * 4 + b) * xs), m1 = vld(mp + (size_t)(1 * 4 + b) * xs);
            vf m2 = vld(mp + (size_t)(2 * 4 + b) * xs), m3 = vld(mp + (size_t)(3 * 4 + b) * xs);
            s[0][b] = vadd(vadd(m0, m1), m2);
            s[1][b] = vsub(vsub(m1, m2), m3);
        }
        for (int a = 0; a < 2; a++) { /* (A^T M) A */
            out[a][0] = vadd(vadd(s[a][0], s[a][1]), s[a][2]);
            out[a][1] = vsub(vsub(s[a][1], s[a][2]), s[a][3]);
        }
        size_t base = ((size_t)img * nbo + ob) * plane;
        vf bv = bias ? vld(bias + (size_t)ob * LANES) : vzero();
        for (int a = 0; a < 2; a++)
            for (int c = 0; c < 2; c++) {
                int yy = oy + q->d * a, xx = ox + q->d * c;
                if (yy >= q->h || xx >= q->w) continue;
                size_t o = base + ((size_t)yy * q->w + xx) * LANES;
                vf r = bias ? vadd(out[a][c], bv) : out[a][c];
                vst(y + o, src ? vadd(vld(src + o), r) : r);
            }
    }
}

static void run(const wconv *q, const float *x, const float *w, int flip, const float *bias,
                const float *src, float *y, float *scratch, int threads)
{
    float *u = scratch, *v = u + u_floats(q), *m = v + v_floats(q);
    transform_weights(q, w, flip, u, threads);
    for (int t0 = 0; t0 < q->T; t0 += q->tb) {
        int tb = q->T - t0 < q->tb ? q->T - t0 : q->tb;
        transform_in(q, x, t0, tb, v, threads);
        gemms(q, tb, v, u, m, threads);
        transform_out(q, m, t0, tb, bias, src, y, threads);
    }
}

void iabn_conv_wino_fwd(const iabn_conv_geom *g, int threads, const float *x, const float *w,
                        const float *bias, const float *src, float *y, float *scratch)
{
    wconv q = pass_conv(g, IABN_CONV_FWD);
    run(&q, x, w, 0, bias, src, y, scratch, threads);
}

void iabn_conv_wino_bwd_data(const iabn_conv_geom *g, int threads, const float *dy,
                             const float *w, float *dx, float *scratch)
{
    wconv q = pass_conv(g, IABN_CONV_BWD_DATA);
    run(&q, dy, w, 1, NULL, NULL, dx, scratch, threads);
}

/* ---- bwd-filter: F(3x3, 2x2) -------------------------------------------------
 * The weight gradient of one tile is the correlation of its 4x4 input patch
 * d with its 2x2 output gradient D: differentiating the forward's
 * A^T [U .* V] A with respect to the kernel gives
 *     dw += G^T [ (A D A^T) .* (B^T d B) ] G
 * (the same input transform V; A = [1 0; 1 1; 1 -1; 0 -1]), so the sum
 * over tiles is again 16 GEMMs, M_xi (C_out x C_in) += Dt_xi^T V_xi with
 * the tiles as the reduction, and M goes back through G once at the end. */

/* Dt_xi = (A D A^T)_xi for the tiles [t0, t0 + tb) and every output block
 * (D zero outside the map). */
static void transform_dy(const wconv *q, const float *dy, int t0, int tb, float *dt, int threads)
{
    int nbo = q->co / LANES;
    size_t plane = (size_t)q->h * q->w * LANES, xs = (size_t)nbo * tb * LANES;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int it = 0; it < tb * nbo; it++) {
        int t = it / nbo, ob = it % nbo, tt = t0 + t;
        int img, oy, ox;
        tile_at(q, tt, &img, &oy, &ox);
        const float *src = dy + ((size_t)img * nbo + ob) * plane;
        vf d[2][2], r[2][4];
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) {
                int yy = oy + q->d * a, xx = ox + q->d * b;
                d[a][b] = yy < q->h && xx < q->w ? vld(src + ((size_t)yy * q->w + xx) * LANES)
                                                 : vzero();
            }
        for (int a = 0; a < 2; a++) { /* D A^T */
            r[a][0] = d[a][0];
            r[a][1] = vadd(d[a][0], d[a][1]);
            r[a][2] = vsub(d[a][0], d[a][1]);
            r[a][3] = vsub(vzero(), d[a][1]);
        }
        float *o = dt + ((size_t)ob * tb + t) * LANES;
        for (int b = 0; b < 4; b++) { /* A (D A^T) */
            vst(o + (size_t)(0 * 4 + b) * xs, r[0][b]);
            vst(o + (size_t)(1 * 4 + b) * xs, vadd(r[0][b], r[1][b]));
            vst(o + (size_t)(2 * 4 + b) * xs, vsub(r[0][b], r[1][b]));
            vst(o + (size_t)(3 * 4 + b) * xs, vsub(vzero(), r[1][b]));
        }
    }
}

/* M_xi (co x ci, a row per output channel) += Dt_xi^T V_xi over a block of
 * tb tiles (add 0: the first block, which overwrites M). */
static void gemms_filter(const wconv *q, int tb, const float *dt, const float *v, int add,
                         float *m, int threads)
{
    int nbi = q->ci / LANES, nbo = q->co / LANES, nq = q->co / MR;
    strides s = {.k1 = 1, .k2 = tb, .ar = 1, .a1 = 0, .a2 = LANES, .b1 = 0, .b2 = LANES,
                 .bq = (ptrdiff_t)tb * LANES, .cr = q->ci, .cq = LANES};
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int it = 0; it < NXI * nq; it++) {
        int xi = it / nq, oq = it % nq, ob = oq * MR / LANES, lane = oq * MR % LANES;
        const float *a = dt + (((size_t)xi * nbo + ob) * tb) * LANES + lane;
        const float *b = v + (size_t)xi * nbi * tb * LANES;
        float *c = m + ((size_t)xi * q->co + (size_t)oq * MR) * q->ci;
        for (int ib = 0; ib < nbi; ib += NPMAX) {
            int np = nbi - ib < NPMAX ? nbi - ib : NPMAX;
            tiles[MR - 1][np - 1](&s, a, b + (size_t)ib * tb * LANES, add,
                                  c + (size_t)ib * LANES);
        }
    }
}

/* dw[o][i] += G^T M[o][i] G (4x4 -> 3x3). */
static void transform_dw(const wconv *q, const float *m, float *dw, int threads)
{
    size_t xs = (size_t)q->co * q->ci;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int o = 0; o < q->co; o++)
        for (int i = 0; i < q->ci; i++) {
            const float *mp = m + (size_t)o * q->ci + i;
            float t[3][4];
            for (int b = 0; b < 4; b++) { /* G^T M */
                float m0 = mp[(0 * 4 + b) * xs], m1 = mp[(1 * 4 + b) * xs];
                float m2 = mp[(2 * 4 + b) * xs], m3 = mp[(3 * 4 + b) * xs];
                t[0][b] = m0 + 0.5f * (m1 + m2);
                t[1][b] = 0.5f * (m1 - m2);
                t[2][b] = 0.5f * (m1 + m2) + m3;
            }
            float *o9 = dw + ((size_t)o * q->ci + i) * 9;
            for (int a = 0; a < 3; a++) { /* (G^T M) G */
                o9[a * 3 + 0] += t[a][0] + 0.5f * (t[a][1] + t[a][2]);
                o9[a * 3 + 1] += 0.5f * (t[a][1] - t[a][2]);
                o9[a * 3 + 2] += 0.5f * (t[a][1] + t[a][2]) + t[a][3];
            }
        }
}

void iabn_conv_wino_bwd_filter(const iabn_conv_geom *g, int threads, const float *x,
                               const float *dy, float *dw, float *dbias, float *scratch)
{
    wconv q = pass_conv(g, IABN_CONV_BWD_FILTER);
    float *m = scratch, *v = m + u_floats(&q), *dt = v + v_floats(&q);
    for (int t0 = 0; t0 < q.T; t0 += q.tb) {
        int tb = q.T - t0 < q.tb ? q.T - t0 : q.tb;
        transform_in(&q, x, t0, tb, v, threads);
        transform_dy(&q, dy, t0, tb, dt, threads);
        gemms_filter(&q, tb, dt, v, t0 > 0, m, threads);
    }
    transform_dw(&q, m, dw, threads);
    if (!dbias) return;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int ob = 0; ob < q.co / LANES; ob++)
        iabn_conv_bias_grad_blocked(q.n, q.co, (size_t)q.h * q.w, 8, dy, dbias, ob, ob + 1);
}
