/* cpu/conv_blocked_rot.c: grouped 3x3 convs, stride 1, padding 1, with the
 * rotation on the input side: the forward and data passes of the blocked
 * kernels (cpu/conv_blocked.c) with 2 or 4 channels per group (cpg) on
 * nChw8c, and 2 to 16 on nChw16c maps at most IABN_CONV_ROT_MAX_W wide.
 *
 * With rot_j the rotation by j within each group of cpg lanes (lane m takes
 * lane base(m) + (m + j) % cpg), an output pixel is
 *     y = sum over taps t and j < cpg of V[t][j] * rot_j(x(at tap t)),
 *     V[t][j][m] = w[oc = m][ic = (m + j) % cpg][t]   (lane by lane).
 * A tile of up to PW outputs of a row keeps one accumulator per output and,
 * per (row tap, j), the three column taps' weights: each rotated source
 * pixel is loaded once and feeds the three outputs whose taps read it
 * (columns outside the map are skipped).  Where the rotated pixels come
 * from depends on the registers:
 *   8 lanes (AVX2's 16 registers: 12 accumulators, 3 weights, a source):
 *     each source row is rotated once into cpg planes of a ring of 3 rows
 *     (cpg - 1 permutes and cpg stores per source pixel).  That is about
 *     1.5 instructions per FMA, where the output-side rotation of
 *     conv_blocked.c spends about 2.5 on 4 per group with AVX2's 16
 *     registers (tiles of 2 pixels, 4 weights and 8 accumulators;
 *     docs/CPU.md "AVX2 CPUs").
 *   16 lanes (AVX-512's 32: 14 accumulators): each pixel is rotated in a
 *     register as it is loaded, a permute beside its three FMAs, and
 *     nothing is stored but the outputs.  On the Zen 5 of 2026-12-03 the
 *     permutes ran beside the FMAs and the ring's stores did not (8 per
 *     group at 14x14: the ring 1.1x-1.3x slower than along the rows,
 *     cpu/conv_rows.c, the registers 0.65x-0.8x; docs/CPU.md).
 * The data pass is the same kernel on dy with the kernel turned by 180
 * degrees and the group's channels swapped: V[t][j][m] = w[oc = (m + j) %
 * cpg][ic = m][8 - t].
 *
 * Each output sums its products in a fixed order (row tap, j, column tap),
 * whatever the lanes (8 or 16), the build (AVX2, AVX-512 or portable,
 * cpu/simd.h) and the threads; the order is not the output-side kernels',
 * so its bits are its own.  Threads: over (image, channel block, row band),
 * as conv_blocked.c.  Builds three times, as conv_blocked.c: 16 lanes
 * portable (*_portable, the main library) and with IABN_DIRECT_AVX512
 * (*_avx512), and 8 lanes (IABN_BLOCKED_LANES=8, *_8c).
 */
#include "tensor/cpu/conv_impl.h"

#include <string.h>

#include "tensor/cpu/blocked_isa.h"

#define RING(lanes) ((lanes) == 8) /* rotated rows stored in a ring (above) */
#define PW (BLK == 8 ? 12 : 14)    /* outputs per tile */

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* One thread's ring: 3 rows x cpg rotations x w pixels (none with 16 lanes). */
static inline size_t ring_floats(int w, int cpg, int lanes)
{
    return RING(lanes) ? iabn_conv_round16((size_t)3 * cpg * w * lanes) : 0;
}

#if BLK == 16 && !defined(IABN_DIRECT_AVX512) /* once */
int iabn_conv_blocked_rot_takes(const iabn_conv_geom *g, iabn_conv_pass pass, int lanes)
{
    int cpg = g->groups > 0 ? g->c_in / g->groups : 0;
    int ok = lanes == 8 ? cpg == 2 || cpg == 4
                        : (cpg == 2 || cpg == 4 || cpg == 8 || cpg == 16) &&
                              g->w_in <= IABN_CONV_ROT_MAX_W;
    return ok && pass != IABN_CONV_BWD_FILTER && g->groups > 1 && g->c_in == g->c_out &&
           g->c_in % lanes == 0 && g->kh == 3 && g->kw == 3 && g->stride == 1 && g->pad == 1 &&
           g->dil == 1;
}

size_t iabn_conv_blocked_rot_scratch(const iabn_conv_geom *g, int lanes, int threads)
{
    int cpg = g->c_in / g->groups;
    if (threads < 1) threads = 1;
    return iabn_conv_round16((size_t)g->c_in * cpg * 9) +
           ring_floats(g->w_in, cpg, lanes) * (size_t)threads;
}
#endif

#if RING(BLK)
/* Source row `row` (w pixels) into a ring slot: cpg planes of w pixels,
 * plane j rotated by j. */
static void rotate_row(const float *row, int w, int cpg, const vidx *rot, float *slot)
{
    size_t js = (size_t)w * BLK;
    for (int c = 0; c < w; c++) {
        vf x = vld(row + (size_t)c * BLK);
        vst(slot + (size_t)c * BLK, x);
        for (int j = 1; j < cpg; j++) vst(slot + j * js + (size_t)c * BLK, vperm(rot[j], x));
    }
}
#endif

/* Outputs q0 .. q0 + P - 1 of a row of W: rows[r] the source row of row tap
 * r (NULL: in the padding), with 8 lanes its ring slot (plane j js floats
 * on); V the block's weights [t][j][BLK]. */
ALWAYS_INLINE void tile(const float *const *rows, size_t js, const vidx *rot, int cpg, int q0,
                        int W, const float *V, const float *bias, float *out, const int P)
{
    vf acc[PW];
    vf b0 = bias ? vld(bias) : vzero();
    const int lp = q0 == 0, rp = q0 + P == W; /* columns q0 - 1, q0 + P outside */
    UNROLL(14)
    for (int q = 0; q < P; q++) acc[q] = b0;
    for (int r = 0; r < 3; r++) {
        if (!rows[r]) continue;
        for (int j = 0; j < cpg; j++) {
            /* R[k - 1]: source column q0 - 1 + k, rotated by j (the ring's
             * plane j, or in a register below) */
            const float *R = rows[r] + (RING(BLK) ? j * js : 0) + (size_t)q0 * BLK;
            const float *wt = V + ((size_t)r * 3 * cpg + j) * BLK;
            vf w0 = vld(wt), w1 = vld(wt + cpg * BLK), w2 = vld(wt + 2 * cpg * BLK);
            UNROLL(16)
            for (int k = 0; k < P + 2; k++) {
                if ((k == 0 && lp) || (k == P + 1 && rp)) continue;
                vf x = vld(R + ((long)k - 1) * BLK);
                if (!RING(BLK) && j) x = vperm(rot[j], x);
                VKEEP(x);
                if (k < P) acc[k] = vfma(w0, x, acc[k]);                 /* output k, tap 0 */
                if (k >= 1 && k <= P) acc[k - 1] = vfma(w1, x, acc[k - 1]); /* k - 1, tap 1 */
                if (k >= 2) acc[k - 2] = vfma(w2, x, acc[k - 2]);        /* k - 2, tap 2 */
            }
        }
    }
    UNROLL(14)
    for (int q = 0; q < P; q++) vst(out + (size_t)q * BLK, acc[q]);
}

/* A row's W outputs in as few tiles of at most PW as possible, as even as
 * they go, each inlined with its width (and cpg) fixed where the build is
 * native (cpg as a variable cost 2-7% on 4 per group). */
ALWAYS_INLINE void row_tiles(const float *const *rows, size_t js, const vidx *rot, const int cpg,
                             int W, const float *V, const float *bias, float *out)
{
    int small, big, n = iabn_conv_tile_split(W, PW, &small, &big);
    for (int k = 0, q = 0, P; k < n; k++, q += P) {
        P = small + (k < big);
        float *o = out + (size_t)q * BLK;
#if SIMD_NATIVE
#define C(w) case w: tile(rows, js, rot, cpg, q, W, V, bias, o, w); break;
        switch (P) {
        C(1) C(2) C(3) C(4) C(5) C(6) C(7) C(8) C(9) C(10) C(11) C(12)
#if BLK == 16
        C(13) C(14)
#endif
        default: break;
        }
#undef C
#else
        tile(rows, js, rot, cpg, q, W, V, bias, o, P);
#endif
    }
}

static void run_row(const float *const *rows, size_t js, const vidx *rot, int cpg, int W,
                    const float *V, const float *bias, float *out)
{
#if SIMD_NATIVE
    switch (cpg) {
    case 2: row_tiles(rows, js, rot, 2, W, V, bias, out); break;
    case 4: row_tiles(rows, js, rot, 4, W, V, bias, out); break;
#if BLK == 16
    case 8: row_tiles(rows, js, rot, 8, W, V, bias, out); break;
    case 16: row_tiles(rows, js, rot, 16, W, V, bias, out); break;
#endif
    default: break;
    }
#else
    row_tiles(rows, js, rot, cpg, W, V, bias, out);
#endif
}

/* The weights of every block as [block][t][j][BLK] (see the top): lane m
 * of (t, j) reads the block's w at off[j][m] + its tap.  Inside a parallel
 * region: the threads share the blocks, and wait for each other at the
 * end. */
static void pack(const iabn_conv_geom *g, int bwd, const float *w, float *V)
{
    int nb = g->c_in / BLK, cpg = g->c_in / g->groups, k = cpg * 9;
    int off[BLK][BLK];
    for (int j = 0; j < cpg; j++)
        for (int m = 0; m < BLK; m++) {
            int r = iabn_conv_rot_lane(m, j, cpg); /* input lane m reads lane r */
            off[j][m] = bwd ? r * k + (m & (cpg - 1)) * 9 : m * k + (r & (cpg - 1)) * 9;
        }
#pragma omp for schedule(static)
    for (int b = 0; b < nb; b++) {
        const float *wb = w + (size_t)b * BLK * k;
        float *Vb = V + (size_t)b * 9 * cpg * BLK;
        for (int t = 0; t < 9; t++)
            for (int j = 0; j < cpg; j++)
                for (int m = 0; m < BLK; m++)
                    Vb[(t * cpg + j) * BLK + m] = wb[off[j][m] + (bwd ? 8 - t : t)];
    }
}

void ISA(iabn_conv_blocked_rot)(const iabn_conv_geom *g, iabn_conv_pass pass, int threads,
                                const float *src, const float *w, const float *bias, float *dst,
                                float *scratch)
{
    int nb = g->c_in / BLK, H = g->h_in, W = g->w_in; /* the same size in and out */
    int cpg = g->c_in / g->groups;
    float *V = scratch;
    size_t js = (size_t)W * BLK, plane = (size_t)H * W * BLK;
    long planes = (long)g->n * nb;
    int bands = iabn_conv_row_bands(planes, H, threads);
    long items = planes * bands;
#pragma omp parallel num_threads(threads)
    {
        vidx rot[BLK];
        for (int j = 0; j < cpg; j++) {
            int lanes[BLK];
            for (int l = 0; l < BLK; l++) lanes[l] = iabn_conv_rot_lane(l, j, cpg);
            rot[j] = vidx_make(lanes);
        }
#if RING(BLK)
        /* this thread's ring, past the packed weights: 3 slots of cpg planes */
        float *ring = V + iabn_conv_round16((size_t)g->c_in * cpg * 9) +
                      ring_floats(W, cpg, BLK) * (size_t)iabn_conv_tid();
        size_t slot = cpg * js;
#endif
        pack(g, pass == IABN_CONV_BWD_DATA, w, V);
#pragma omp for schedule(static)
        for (long it = 0; it < items; it++) {
            long pl = it / bands;
            int band = (int)(it % bands), b = (int)(pl % nb);
            int i0 = (int)((long)H * band / bands), i1 = (int)((long)H * (band + 1) / bands);
            const float *s = src + (size_t)pl * plane;
            const float *Vb = V + (size_t)b * 9 * cpg * BLK;
            const float *bb = bias ? bias + b * BLK : NULL;
#if RING(BLK)
            int tag[3] = {-1, -1, -1}; /* the source row each slot holds */
#endif
            for (int i = i0; i < i1; i++) {
                const float *rows[3];
                for (int r = 0; r < 3; r++) {
                    int sr = i - 1 + r;
                    rows[r] = NULL;
                    if (sr < 0 || sr >= H) continue;
#if RING(BLK)
                    float *sl = ring + (size_t)(sr % 3) * slot;
                    if (tag[sr % 3] != sr) {
                        rotate_row(s + (size_t)sr * W * BLK, W, cpg, rot, sl);
                        tag[sr % 3] = sr;
                    }
                    rows[r] = sl;
#else
                    rows[r] = s + (size_t)sr * W * BLK;
#endif
                }
#if !RING(BLK)
                /* the row two ahead (past the plane's end, the next
                 * plane's), fetched while this one's FMAs run */
                const float *ahead = NULL;
                if (i + 2 < H)
                    ahead = s + (size_t)(i + 2) * W * BLK;
                else if (pl + 1 < planes && i + 2 - H < H)
                    ahead = s + plane + (size_t)(i + 2 - H) * W * BLK;
                if (ahead)
                    for (int c = 0; c < W; c++) __builtin_prefetch(ahead + (size_t)c * BLK);
#endif
                run_row(rows, js, rot, cpg, W, Vb, bb,
                        dst + (size_t)pl * plane + (size_t)i * W * BLK);
            }
        }
    }
}
