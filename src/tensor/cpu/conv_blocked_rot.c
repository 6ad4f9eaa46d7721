/* cpu/conv_blocked_rot.c: grouped 3x3 convs with 2 or 4 channels per
 * group (cpg), stride 1, padding 1, on nChw8c: the forward and data passes
 * of the 8-lane blocked kernels (cpu/conv_blocked.c) with the rotation on
 * the input side.
 *
 * With rot_j the rotation by j within each group of cpg lanes (lane m takes
 * lane base(m) + (m + j) % cpg), an output pixel is
 *     y = sum over taps t and j < cpg of V[t][j] * rot_j(x(at tap t)),
 *     V[t][j][m] = w[oc = m][ic = (m + j) % cpg][t]   (lane by lane).
 * Each source row is rotated once into cpg planes of a ring of 3 rows, with
 * a zero column at each end (cpg - 1 permutes per source pixel).  A tile of
 * up to 12 outputs of a row keeps one accumulator per output and, per (row
 * tap, j), the three column taps' weights: each rotated source pixel is
 * loaded once and feeds the three outputs whose taps read it.  That is
 * about 1.5 instructions per FMA, where the output-side rotation of
 * conv_blocked.c spends about 2.5 on 4 per group with AVX2's 16 registers
 * (tiles of 2 pixels, 4 weights and 8 accumulators; docs/CPU.md "AVX2
 * CPUs").
 * The data pass is the same kernel on dy with the kernel turned by 180
 * degrees and the group's channels swapped: V[t][j][m] = w[oc = (m + j) %
 * cpg][ic = m][8 - t].
 *
 * Each output sums its products in a fixed order (row tap, j, column tap),
 * whatever the build (AVX2 or portable, cpu/simd.h) and the threads; the
 * order is not the output-side kernels', so its bits are its own.
 * Threads: over (image, channel block, row band), as conv_blocked.c.
 */
#include "tensor/cpu/conv_impl.h"

#include <string.h>

#define BLK 8
#define CPG_MAX 4
#define PW 12 /* outputs per tile: 12 accumulators, 3 weights, a source vector */

#define SIMD_LANES BLK
#include "tensor/cpu/simd.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

int iabn_conv_blocked_rot_takes(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    int cpg = g->groups > 0 ? g->c_in / g->groups : 0;
    return pass != IABN_CONV_BWD_FILTER && g->groups > 1 && g->c_in == g->c_out &&
           g->c_in % BLK == 0 && (cpg == 2 || cpg == 4) && g->kh == 3 && g->kw == 3 &&
           g->stride == 1 && g->pad == 1 && g->dil == 1;
}

/* One thread's ring: 3 rows x cpg rotations x (w + 2) pixels. */
static size_t ring_floats(int w, int cpg)
{
    return iabn_conv_round16((size_t)3 * cpg * (w + 2) * BLK);
}

size_t iabn_conv_blocked_rot_scratch(const iabn_conv_geom *g, int threads)
{
    int cpg = g->c_in / g->groups;
    if (threads < 1) threads = 1;
    return iabn_conv_round16((size_t)g->c_in * cpg * 9) +
           ring_floats(g->w_in, cpg) * (size_t)threads;
}

/* Source row `row` (w pixels) into a ring slot: cpg planes of w + 2 pixels
 * (plane j rotated by j), a zero pixel at each end. */
static void rotate_row(const float *row, int w, int cpg, const vidx *rot, float *slot)
{
    size_t js = (size_t)(w + 2) * BLK;
    for (int j = 0; j < cpg; j++) {
        vst(slot + j * js, vzero());
        vst(slot + j * js + (size_t)(w + 1) * BLK, vzero());
    }
    for (int c = 0; c < w; c++) {
        vf x = vld(row + (size_t)c * BLK);
        vst(slot + (size_t)(c + 1) * BLK, x);
        for (int j = 1; j < cpg; j++) vst(slot + j * js + (size_t)(c + 1) * BLK, vperm(rot[j], x));
    }
}

/* Outputs q0 .. q0 + P - 1 of a row: rows[r] the ring slot of row tap r
 * (NULL: in the padding), V the block's weights [t][j][8]. */
ALWAYS_INLINE void tile(const float *const *rows, size_t js, int cpg, int q0, const float *V,
                        const float *bias, float *out, const int P)
{
    vf acc[PW];
    vf b0 = bias ? vld(bias) : vzero();
    UNROLL(12)
    for (int q = 0; q < P; q++) acc[q] = b0;
    for (int r = 0; r < 3; r++) {
        if (!rows[r]) continue;
        for (int j = 0; j < cpg; j++) {
            /* padded column c + 1 holds source column c: R[k] is column q0 - 1 + k */
            const float *R = rows[r] + j * js + (size_t)q0 * BLK;
            const float *wt = V + ((size_t)r * 3 * cpg + j) * BLK;
            vf w0 = vld(wt), w1 = vld(wt + cpg * BLK), w2 = vld(wt + 2 * cpg * BLK);
            UNROLL(14)
            for (int k = 0; k < P + 2; k++) {
                vf x = vld(R + (size_t)k * BLK);
                VKEEP(x);
                if (k < P) acc[k] = vfma(w0, x, acc[k]);                 /* output k, tap 0 */
                if (k >= 1 && k <= P) acc[k - 1] = vfma(w1, x, acc[k - 1]); /* k - 1, tap 1 */
                if (k >= 2) acc[k - 2] = vfma(w2, x, acc[k - 2]);        /* k - 2, tap 2 */
            }
        }
    }
    UNROLL(12)
    for (int q = 0; q < P; q++) vst(out + (size_t)q * BLK, acc[q]);
}

/* A row's wo outputs in as few tiles of at most PW as possible, as even as
 * they go, each inlined with its width (and cpg) fixed where the build is
 * native (cpg as a variable cost 2-7% on 4 per group). */
ALWAYS_INLINE void row_tiles(const float *const *rows, size_t js, const int cpg, int wo,
                             const float *V, const float *bias, float *out)
{
    int small, big, n = iabn_conv_tile_split(wo, PW, &small, &big);
    for (int k = 0, q = 0, P; k < n; k++, q += P) {
        P = small + (k < big);
        float *o = out + (size_t)q * BLK;
#if SIMD_NATIVE
#define C(W) case W: tile(rows, js, cpg, q, V, bias, o, W); break;
        switch (P) {
        C(1) C(2) C(3) C(4) C(5) C(6) C(7) C(8) C(9) C(10) C(11) C(12)
        default: break;
        }
#undef C
#else
        tile(rows, js, cpg, q, V, bias, o, P);
#endif
    }
}

static void run_row(const float *const *rows, size_t js, int cpg, int wo, const float *V,
                    const float *bias, float *out)
{
#if SIMD_NATIVE
    if (cpg == 2)
        row_tiles(rows, js, 2, wo, V, bias, out);
    else
        row_tiles(rows, js, 4, wo, V, bias, out);
#else
    row_tiles(rows, js, cpg, wo, V, bias, out);
#endif
}

/* The weights of every block as [block][t][j][8] (see the top). */
static void pack(const iabn_conv_geom *g, int bwd, const float *w, float *V)
{
    int nb = g->c_in / BLK, cpg = g->c_in / g->groups;
    for (int b = 0; b < nb; b++)
        for (int t = 0; t < 9; t++)
            for (int j = 0; j < cpg; j++)
                for (int m = 0; m < BLK; m++) {
                    int r = iabn_conv_rot_lane(m, j, cpg); /* input lane m reads lane r */
                    int oc = b * BLK + (bwd ? r : m), ic = (bwd ? m : r) & (cpg - 1);
                    V[(((size_t)b * 9 + t) * cpg + j) * BLK + m] =
                        w[((size_t)oc * cpg + ic) * 9 + (bwd ? 8 - t : t)];
                }
}

void iabn_conv_blocked_rot(const iabn_conv_geom *g, iabn_conv_pass pass, int threads,
                           const float *src, const float *w, const float *bias, float *dst,
                           float *scratch)
{
    int nb = g->c_in / BLK, H = g->h_in, W = g->w_in; /* the same size in and out */
    int cpg = g->c_in / g->groups;
    float *V = scratch, *rings = scratch + iabn_conv_round16((size_t)g->c_in * cpg * 9);
    pack(g, pass == IABN_CONV_BWD_DATA, w, V);
    size_t js = (size_t)(W + 2) * BLK, slot = cpg * js, plane = (size_t)H * W * BLK;
    long planes = (long)g->n * nb;
    int bands = iabn_conv_row_bands(planes, H, threads);
    long items = planes * bands;
#pragma omp parallel num_threads(threads)
    {
        float *ring = rings + ring_floats(W, cpg) * (size_t)iabn_conv_tid();
        vidx rot[CPG_MAX];
        for (int j = 0; j < cpg; j++) {
            int lanes[BLK];
            for (int l = 0; l < BLK; l++) lanes[l] = iabn_conv_rot_lane(l, j, cpg);
            rot[j] = vidx_make(lanes);
        }
#pragma omp for schedule(static)
        for (long it = 0; it < items; it++) {
            long pl = it / bands;
            int band = (int)(it % bands), b = (int)(pl % nb);
            int i0 = (int)((long)H * band / bands), i1 = (int)((long)H * (band + 1) / bands);
            const float *s = src + (size_t)pl * plane;
            const float *Vb = V + (size_t)b * 9 * cpg * BLK;
            const float *bb = bias ? bias + b * BLK : NULL;
            int tag[3] = {-1, -1, -1};
            for (int i = i0; i < i1; i++) {
                const float *rows[3];
                for (int r = 0; r < 3; r++) {
                    int sr = i - 1 + r;
                    rows[r] = NULL;
                    if (sr < 0 || sr >= H) continue;
                    float *sl = ring + (size_t)(sr % 3) * slot;
                    if (tag[sr % 3] != sr) {
                        rotate_row(s + (size_t)sr * W * BLK, W, cpg, rot, sl);
                        tag[sr % 3] = sr;
                    }
                    rows[r] = sl;
                }
                run_row(rows, js, cpg, W, Vb, bb, dst + (size_t)pl * plane + (size_t)i * W * BLK);
            }
        }
    }
}
