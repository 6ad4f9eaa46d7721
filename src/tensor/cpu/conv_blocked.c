/* cpu/conv_blocked.c: direct kernels for grouped convolutions with few
 * channels per group (ResNeXt's 3x3 with 2, 4 or 8 per group) on nChw16c
 * or nChw8c activations, all three passes.
 *
 * In nChw16c (BLK = 16 lanes; nChw8c: 8) one vector holds one pixel of BLK
 * channels, i.e. of BLK/cpg whole groups (cpg = channels per group, a power
 * of two up to BLK, the same in and out).  Output lane l sums over the cpg
 * input channels of its own group.  With rot_j the rotation by j within each group of cpg
 * lanes (lane l takes lane base(l) + (l + j) % cpg):
 *     y = sum over j < cpg of rot_j(A_j),
 *     A_j = sum over taps t of V[t][j] * x(at tap t)   (lane by lane)
 * where V[t][j][m] = w[oc = rot_{-j}(m)][ic = m % cpg][t]: input lane m's
 * product for the output lane that will read it after the rotation.  So a
 * pixel loaded once feeds cpg FMAs of BLK useful multiply-adds each, every
 * load is one aligned pixel, no lane is wasted at a row's end (the NCHW
 * kernels of cpu/conv_direct.c vectorise along rows: 56 = 3.5 vectors), and
 * the cpg - 1 rotations are paid once per output pixel, not per tap.
 *
 * fwd and bwd-data read the source rows themselves; bwd-filter reads them
 * through a ring of zero-padded copies.  The rows PF_ROWS ahead are
 * prefetched a few lines at a time between the FMAs.
 *   fwd:        tiles of at most P pixels along a row (cpg x P accumulators:
 *               with 16 lanes 24 for cpg 1 to 4, 16 for 8; with 8, 12 or
 *               8), as few and as even as they go,
 *               with the tap's cpg weight vectors in registers; the bias
 *               starts A_0.  The outputs at a row's ends whose taps reach
 *               into the padding are tiles of one pixel over the taps
 *               inside the row.
 *   bwd-data:   the same kernel on dy, V[t][j][m] = w[oc = m][ic =
 *               rot_{-j}(m) % cpg][t], the taps' offsets mirrored; with stride
 *               S the dx columns of one phase (iw % S) form a row of outputs
 *               whose taps are those of matching parity.
 *   bwd-filter: in input lanes, B[t][j][m] += rot_{-j}(dy)[m] * x(at tap
 *               t)[m]: each dy pixel is rotated once per row into cpg planes,
 *               x is read from the ring as it is, three column taps x cpg
 *               accumulators per sweep of a row; summed over rows and images
 *               in order into a per-block buffer, added to dw at the end (and
 *               dy's sums to dbias).
 * Threads: fwd / bwd-data over (image, channel block, row band); bwd-filter
 * over channel blocks, each owning its slice of dw: results do not depend on
 * the thread count.
 *
 * Builds three times (the vectors: cpu/simd.h).  16 lanes like
 * conv_direct.c: portable (16-float structs, fmaf; *_portable, and the entry
 * points without suffix, which run the AVX-512 build where the CPU has it)
 * and with IABN_DIRECT_AVX512 (*_avx512).  8 lanes with
 * IABN_BLOCKED_LANES=8 (*_8c): AVX2 where the build has it (release), else
 * portable.  Each lane count sums in the same order with fused
 * multiply-adds whatever the build, so its builds give the same bits.
 */
#include "tensor/cpu/conv_impl.h"

#include "iabn_config.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tensor/cpu/blocked_isa.h"

#define PF_ROWS 2 /* source rows fetched ahead */

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* The native builds (AVX-512 for 16 lanes, AVX2 for 8) specialise the
 * tiles for each (cpg, pixels) and unroll them; the portable one (tests,
 * CPUs the graph does not give these kernels) runs the same operations in
 * the same order through one generic function, which compiles in seconds,
 * instrumented or not. */
#define SPECIALISED SIMD_NATIVE

/* One pass as the kernels run it: outputs (ho x wo) from a source (hs x ws)
 * (x for fwd and bwd-filter, dy for bwd-data). */
typedef struct bplan {
    int bwd;          /* bwd-data: taps of matching parity, mirrored          */
    int cpg, nb;      /* channels per group, channel blocks                   */
    int hs, ws, ho, wo;
    int kh, kw, s, d, p;
    int ss;           /* source columns between consecutive outputs           */
    int nph;          /* column phases (bwd-data: stride; else 1)             */
    int pl, wp;       /* bwd-filter's ring rows: left zero columns, columns   */
    int rs;           /* its slots, one padded row (wp x BLK floats) each     */
} bplan;

/* Output columns of phase ph: ph + q*nph, q < count. */
static int phase_count(const bplan *b, int ph) { return (b->wo - ph + b->nph - 1) / b->nph; }

/* Column tap s of phase ph: whether it contributes, and the source column
 * of output q = 0 (relative; q adds q*ss). */
static int col_tap(const bplan *b, int ph, int s, int *off)
{
    if (!b->bwd) {
        *off = s * b->d - b->p;
        return 1;
    }
    int num = ph + b->p - s * b->d;
    if (((num % b->s) + b->s) % b->s) return 0;
    *off = num / b->s; /* exact */
    return 1;
}

/* The column taps of phase ph: their number, offsets (col_tap), kernel
 * columns, and the offsets' range [*cmin, *cmax] (0, 0 without taps). */
static int phase_cols(const bplan *b, int ph, int *coff, int *ctap, int *cmin, int *cmax)
{
    int nc = 0;
    for (int s = 0; s < b->kw; s++)
        if (col_tap(b, ph, s, &coff[nc])) ctap[nc++] = s;
    *cmin = *cmax = 0;
    for (int c = 0; c < nc; c++) {
        *cmin = c == 0 || coff[c] < *cmin ? coff[c] : *cmin;
        *cmax = c == 0 || coff[c] > *cmax ? coff[c] : *cmax;
    }
    return nc;
}

static int tile_width(int cpg);

/* Row tap r of output row i: its source row, or -1. */
static int row_tap(const bplan *b, int i, int r)
{
    int sr;
    if (!b->bwd) {
        sr = i * b->s - b->p + r * b->d;
    } else {
        int num = i + b->p - r * b->d;
        if (num < 0 || num % b->s) return -1;
        sr = num / b->s;
    }
    return sr >= 0 && sr < b->hs ? sr : -1;
}

static void bplan_make(const iabn_conv_geom *g, iabn_conv_pass pass, bplan *b)
{
    memset(b, 0, sizeof *b);
    b->bwd = pass == IABN_CONV_BWD_DATA;
    b->cpg = g->c_in / g->groups;
    b->nb = g->c_in / BLK;
    b->kh = g->kh; b->kw = g->kw; b->s = g->stride; b->d = g->dil; b->p = g->pad;
    if (b->bwd) {
        b->hs = g->h_out; b->ws = g->w_out; b->ho = g->h_in; b->wo = g->w_in;
        b->ss = 1; b->nph = g->stride;
        b->rs = (g->kh - 1) * g->dil / g->stride + 1;
    } else {
        b->hs = g->h_in; b->ws = g->w_in; b->ho = g->h_out; b->wo = g->w_out;
        b->ss = g->stride; b->nph = 1;
        b->rs = (g->kh - 1) * g->dil + 1;
    }
    int lo = 0, hi = b->ws - 1;
    for (int ph = 0; ph < b->nph; ph++) {
        int nq = phase_count(b, ph);
        for (int s = 0; s < b->kw && nq > 0; s++) {
            int off;
            if (!col_tap(b, ph, s, &off)) continue;
            if (off < lo) lo = off;
            if ((nq - 1) * b->ss + off > hi) hi = (nq - 1) * b->ss + off;
        }
    }
    b->pl = -lo;
    b->wp = hi - lo + 1;
}

/* bwd-filter's ring (fwd and bwd-data read the source itself) */
static size_t ring_floats(const bplan *b)
{
    return iabn_conv_round16((size_t)b->rs * b->wp * BLK);
}

/* ---- one (image, block)'s source plane ---------------------------------- */

typedef struct source {
    const bplan *b;
    const float *src; /* the plane, hs x ws x BLK */
    int pf_next;      /* fwd / bwd-data: the first source row not prefetched */
    vidx rot[BLK];
} source;

static void source_init(source *r, const bplan *b)
{
    r->b = b;
    for (int j = 0; j < b->cpg; j++) {
        int lanes[BLK];
        for (int l = 0; l < BLK; l++) lanes[l] = iabn_conv_rot_lane(l, j, b->cpg);
        r->rot[j] = vidx_make(lanes);
    }
}

static void source_reset(source *r, const float *src)
{
    r->src = src;
    r->pf_next = 0;
}

/* ---- bwd-filter's ring of zero-padded source rows ------------------------ */

typedef struct ring {
    source s;
    float *buf;
    int tag[IABN_CONV_DIRECT_MAX_TAPS];
} ring;

static void ring_init(ring *r, const bplan *b, float *buf)
{
    source_init(&r->s, b);
    r->buf = buf;
}

static void ring_reset(ring *r, const float *src)
{
    source_reset(&r->s, src);
    for (int k = 0; k < r->s.b->rs; k++) r->tag[k] = -1;
}

/* Source row `row` into slot, zeros around it. */
static void ring_copy(const bplan *b, float *slot, const float *row)
{
    for (int c = 0; c < b->wp; c++) {
        int sc = c - b->pl;
        vf v = sc >= 0 && sc < b->ws ? vld(row + (size_t)sc * BLK) : vzero();
        vst(slot + (size_t)c * BLK, v);
    }
}

/* Slot holding source row sr (copied into it if it is not there yet). */
static const float *ring_row(ring *r, int sr)
{
    const bplan *b = r->s.b;
    int k = sr % b->rs;
    float *slot = r->buf + (size_t)k * b->wp * BLK;
    if (r->tag[k] == sr) return slot;
    r->tag[k] = sr;
    const float *row = r->s.src + (size_t)sr * b->ws * BLK;
    ring_copy(b, slot, row);
    return slot;
}

/* ---- forward and bwd-data ------------------------------------------------ */

/* Pixels per tile by channels per group: CPG x P accumulators beside CPG
 * weights and a source vector in the registers (32 with AVX-512: 24
 * accumulators, 16 with 8 weights; 16 with AVX2: 12, 8 with 4 weights) */
#if BLK == 16
#define P1 24
#define P2 12
#define P4 6
#define P8 2
#else
#define P1 12
#define P2 6
#define P4 2
#define P8 1
#endif
#define P16 1
#define ACC_MAX 24

/* P outputs (os vectors apart) of one row: tap k reads the source at
 * base + off[k] + q*xs floats (q < P) with the weights wt[k]: CPG vectors V[j],
 * A_j[q] += V[j] * x, and then y[q] = sum over j of rot_j(A_j[q]) (the
 * bias in A_0).  CPG x P accumulators and CPG weights stay in registers. */
ALWAYS_INLINE void tile(const float *base, const ptrdiff_t *off, const float *const *wt, int nt,
                        size_t xs, const vidx *rot, const float *bias, float *out, int os,
                        int stream, const int CPG, const int P)
{
    /* flat, fixed-size arrays (a VLA would live on the stack) */
    vf acc[ACC_MAX];
    vf b0 = bias ? vld(bias) : vzero();
    UNROLL(24)
    for (int q = 0; q < P; q++) {
        acc[q] = b0;
        UNROLL(16)
        for (int j = 1; j < CPG; j++) acc[j * P + q] = vzero();
    }
    for (int k = 0; k < nt; k++) {
        const float *sp = base + off[k], *wp = wt[k];
        vf wv[BLK];
        UNROLL(16)
        for (int j = 0; j < CPG; j++) wv[j] = vld(wp + j * BLK);
        UNROLL(24)
        for (int q = 0; q < P; q++) {
            vf xv = vld(sp + q * xs);
            VKEEP(xv); /* one load feeding CPG FMAs, not CPG folded loads (2 per group: 13%) */
            UNROLL(16)
            for (int j = 0; j < CPG; j++) acc[j * P + q] = vfma(wv[j], xv, acc[j * P + q]);
        }
    }
    UNROLL(24)
    for (int q = 0; q < P; q++) {
        vf y = acc[q];
        UNROLL(16)
        for (int j = 1; j < CPG; j++) y = vadd(y, vperm(rot[j], acc[j * P + q]));
        if (stream) vst_nt(out + (size_t)q * os * BLK, y);
        else vst(out + (size_t)q * os * BLK, y);
    }
}

/* Pixels per tile for cpg channels per group. */
static int tile_width(int cpg)
{
    return cpg == 1 ? P1 : cpg == 2 ? P2 : cpg == 4 ? P4 : cpg == 8 ? P8 : P16;
}

/* Outputs q0 .. of one row phase for run_rows: ntile tiles, the first big
 * of them small + 1 wide, the others small; tap t of output q reads the
 * source at src + off[t] + q*xs with the weights wt[t], and each tile
 * prefetches its columns (cmin, cmax: the taps' offsets) of source rows
 * pf0..pf1. */
typedef struct row_job {
    const bplan *b;
    const source *sp;
    const ptrdiff_t *off;
    const float *const *wt;
    int nt;
    size_t xs;
    const float *bias;
    float *out; /* output 0 of the phase; output q at out + q * os * 16 */
    int os, stream;
    int q0, ntile, small, big, cmin, cmax, pf0, pf1;
} row_job;

/* The tiles of a row phase, with CPG channels per group and tiles at most
 * PW wide: one call per row whose tiles are inlined with their width fixed
 * (a call per tile through a table of tile functions cost 6% of a forward
 * in cache, docs/CPU.md). */
ALWAYS_INLINE void row_tiles(const row_job *j, const int CPG, const int PW)
{
    const bplan *b = j->b;
    for (int k = 0, q = j->q0, P; k < j->ntile; k++, q += P) {
        P = j->small + (k < j->big);
        int c0 = q * b->ss + j->cmin, c1 = (q + P - 1) * b->ss + j->cmax;
        c0 = c0 > 0 ? c0 : 0;
        c1 = c1 < b->ws - 1 ? c1 : b->ws - 1;
        for (int r = j->pf0; r <= j->pf1; r++) { /* by lines: an 8-lane pixel is half of one */
            const float *row = j->sp->src + (size_t)r * b->ws * BLK;
            uintptr_t l0 = (uintptr_t)(row + (size_t)c0 * BLK) & ~(uintptr_t)63;
            uintptr_t l1 = (uintptr_t)(row + (size_t)c1 * BLK + BLK - 1) & ~(uintptr_t)63;
            for (uintptr_t l = l0; l <= l1; l += 64) __builtin_prefetch((const void *)l, 0, 3);
        }
        const float *base = j->sp->src + (size_t)q * j->xs, *const *wt = j->wt;
        const ptrdiff_t *off = j->off;
        float *out = j->out + (size_t)q * j->os * BLK;
#define T(W) tile(base, off, wt, j->nt, j->xs, j->sp->rot, j->bias, out, j->os, j->stream, CPG, W)
#if SPECIALISED
        /* widths above PW never come (iabn_conv_tile_split), and their cases compile to nothing */
#define C(W) case W: if (W <= PW) T(W); break;
        switch (P) {
        C(1) C(2) C(3) C(4) C(5) C(6) C(7) C(8) C(9) C(10) C(11) C(12)
        C(13) C(14) C(15) C(16) C(17) C(18) C(19) C(20) C(21) C(22) C(23) C(24)
        default: break;
        }
#undef C
#else
        T(P);
#endif
#undef T
    }
}

#if SPECIALISED
#define ROW_FN(C, PW) \
    static void row_##C(const row_job *j) { row_tiles(j, C, PW); }
ROW_FN(1, P1) ROW_FN(2, P2) ROW_FN(4, P4) ROW_FN(8, P8)
#if BLK == 16
ROW_FN(16, P16)
#endif
#undef ROW_FN
#endif

static void run_row(const row_job *j)
{
#if SPECIALISED
    switch (j->b->cpg) {
    case 1: row_1(j); break;
    case 2: row_2(j); break;
    case 4: row_4(j); break;
#if BLK == 16
    case 8: row_8(j); break;
    default: row_16(j); break;
#else
    default: row_8(j); break;
#endif
    }
#else
    row_tiles(j, j->b->cpg, tile_width(j->b->cpg));
#endif
}

/* Weights for block bk as [t][j][BLK], in the input lanes m of A_j:
 * fwd V[t][j][m] = w[oc = rot(m, -j)][ic = m % cpg][t], bwd-data
 * w[oc = m][ic = rot(m, -j) % cpg][t] (rot(m, -j) = rot(m, cpg - j)). */
static void pack_weights(const iabn_conv_geom *g, int bwd, const float *w, float *wp,
                         int threads)
{
    int cpg = g->c_in / g->groups, T = g->kh * g->kw, nb = g->c_in / BLK;
    /* w's index for (block bk, tap t, j, lane m) is bk * BLK * cpg * T +
     * off[j][m] + t: the lane arithmetic once, not per weight (it was a
     * third of a 1x512x14x14 forward's time) */
    int off[BLK * BLK];
    for (int j = 0; j < cpg; j++)
        for (int m = 0; m < BLK; m++) {
            int back = iabn_conv_rot_lane(m, cpg - j, cpg);
            int oc = bwd ? m : back, ic = (bwd ? back : m) % cpg;
            off[j * BLK + m] = (oc * cpg + ic) * T;
        }
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int bk = 0; bk < nb; bk++) {
        const float *wb = w + (size_t)bk * BLK * cpg * T;
        float *out = wp + (size_t)bk * T * cpg * BLK;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < cpg; j++)
                for (int m = 0; m < BLK; m++) *out++ = wb[off[j * BLK + m] + t];
    }
}

/* Output rows [i0, i1) of one (image, block).  Every tap reads the source
 * itself: the outputs whose taps all fall inside the row go in tiles with
 * all taps, and each output at a row's ends (the columns of the padding:
 * one at each end of a 3x3 with pad 1) is a tile of its own over the taps
 * inside the row.  A zero-padded copy of the row's ends cost 2-3% of a
 * 2-per-group forward in cache, and 6-10% from memory (docs/CPU.md). */
static void run_rows(const bplan *b, source *sp, const float *wblk, const float *bias, float *dst,
                     int i0, int i1, int stream)
{
    /* tap t of output q reads src + soff[t] + q*xs, source column q*ss + tcol[t] */
    ptrdiff_t soff[IABN_CONV_DIRECT_MAX_TAPS], eoff[IABN_CONV_DIRECT_MAX_TAPS];
    const float *wt[IABN_CONV_DIRECT_MAX_TAPS], *ewt[IABN_CONV_DIRECT_MAX_TAPS];
    int tcol[IABN_CONV_DIRECT_MAX_TAPS], rtap[IABN_CONV_DIRECT_MAX_TAPS];
    int srow[IABN_CONV_DIRECT_MAX_TAPS];
    size_t tsz = (size_t)b->cpg * BLK, xs = (size_t)b->ss * BLK;
    int pw = tile_width(b->cpg);
    for (int i = i0; i < i1; i++) {
        int nr = 0, last = -1;
        for (int r = 0; r < b->kh; r++) {
            int sr = row_tap(b, i, r);
            if (sr < 0) continue;
            srow[nr] = sr;
            rtap[nr++] = r;
            last = sr > last ? sr : last;
        }
        /* the rows after this row's, PF_ROWS ahead, a tile's columns with
         * each tile: spread between the FMAs, not in a burst that waits */
        int pf0 = sp->pf_next > last + 1 ? sp->pf_next : last + 1;
        int pf1 = last + PF_ROWS < b->hs - 1 ? last + PF_ROWS : b->hs - 1;
        if (nr == 0) pf1 = pf0 - 1;
        if (pf1 >= pf0) sp->pf_next = pf1 + 1;
        float *orow = dst + (size_t)i * b->wo * BLK;
        for (int ph = 0; ph < b->nph; ph++) {
            int nq = phase_count(b, ph), nt = 0;
            if (nq <= 0) continue;
            int coff[IABN_CONV_DIRECT_MAX_TAPS], ctap[IABN_CONV_DIRECT_MAX_TAPS], cmin, cmax;
            int nc = phase_cols(b, ph, coff, ctap, &cmin, &cmax);
            for (int a = 0; a < nr; a++)
                for (int c = 0; c < nc; c++, nt++) {
                    soff[nt] = ((ptrdiff_t)srow[a] * b->ws + coff[c]) * BLK;
                    tcol[nt] = coff[c];
                    wt[nt] = wblk + (size_t)(rtap[a] * b->kw + ctap[c]) * tsz;
                }
            /* outputs [lo, hi] read no padding: q*ss + cmin >= 0 and
             * q*ss + cmax <= ws - 1 */
            int lo = cmin < 0 ? (-cmin + b->ss - 1) / b->ss : 0;
            int hi = b->ws - 1 - cmax < 0 ? -1 : (b->ws - 1 - cmax) / b->ss;
            hi = hi < nq - 1 ? hi : nq - 1;
            row_job j = {b, sp, soff, wt, nt, xs, bias, orow + (size_t)ph * BLK, b->nph, stream,
                         lo, 0, 0, 0, cmin, cmax, pf0, pf1};
            if (hi >= lo) {
                j.ntile = iabn_conv_tile_split(hi - lo + 1, pw, &j.small, &j.big);
                run_row(&j);
            }
            /* the ends: one output each, over the taps inside the row */
            j.off = eoff;
            j.wt = ewt;
            j.ntile = j.small = 1;
            j.big = 0;
            for (int q = 0; q < nq; q++) {
                if (q == lo && hi >= lo) q = hi + 1;
                if (q >= nq) break;
                j.nt = 0;
                for (int t = 0; t < nt; t++) {
                    int col = q * b->ss + tcol[t];
                    if (col < 0 || col >= b->ws) continue;
                    eoff[j.nt] = soff[t];
                    ewt[j.nt++] = wt[t];
                }
                j.q0 = q;
                run_row(&j);
            }
        }
    }
}

/* Row bands per (image, block), so that a small batch still gives every
 * thread work. */
static int row_bands(const bplan *b, int n, int threads)
{
    return iabn_conv_row_bands((long)n * b->nb, b->ho, threads);
}

static void run_pass(const iabn_conv_geom *g, iabn_conv_pass pass, int threads,
                     const float *src, const float *w, const float *bias, float *dst,
                     float *scratch)
{
    bplan b;
    bplan_make(g, pass, &b);
    float *wp = scratch;
    pack_weights(g, b.bwd, w, wp, threads);
    size_t T = (size_t)g->kh * g->kw;
    size_t splane = (size_t)b.hs * b.ws * BLK, dplane = (size_t)b.ho * b.wo * BLK;
    int nbands = row_bands(&b, g->n, threads);
    long items = (long)g->n * b.nb * nbands;
    int stream = (size_t)g->n * b.nb * dplane * sizeof(float) >= IABN_CONV_STREAM_BYTES;
#pragma omp parallel num_threads(threads)
    {
        source sp;
        source_init(&sp, &b);
#pragma omp for schedule(static)
        for (long it = 0; it < items; it++) {
            long plane = it / nbands;
            int band = (int)(it % nbands), bk = (int)(plane % b.nb);
            int i0 = (int)((long)b.ho * band / nbands), i1 = (int)((long)b.ho * (band + 1) / nbands);
            source_reset(&sp, src + (size_t)plane * splane);
            run_rows(&b, &sp, wp + (size_t)bk * T * b.cpg * BLK, bias ? bias + bk * BLK : NULL,
                     dst + (size_t)plane * dplane, i0, i1, stream);
        }
        vfence();
    }
}

/* 3x3 stride 1 rotates the input instead where cpu/conv_blocked_rot.c takes
 * it (8 lanes: 2 and 4 per group, 1.1x-2.3x faster with AVX2's 16
 * registers; 16 lanes: up to 16 per group on maps up to 28 wide); 8 per
 * group on maps up to 14 wide runs along the rows (cpu/conv_rows.c: the
 * 8-lane forward and data passes, the 16-lane weight pass). */
#define ROT(pass) iabn_conv_blocked_rot_takes(g, pass, BLK)
#define ROWS(pass) iabn_conv_rows_takes(g, pass, BLK)

void ISA(iabn_conv_blocked_fwd)(const iabn_conv_geom *g, int threads, const float *x,
                                const float *w, const float *bias, float *y, float *scratch)
{
    if (ROT(IABN_CONV_FWD))
        ISA(iabn_conv_blocked_rot)(g, IABN_CONV_FWD, threads, x, w, bias, y, scratch);
#if BLK == 8
    else if (ROWS(IABN_CONV_FWD))
        iabn_conv_rows_8c(g, IABN_CONV_FWD, threads, x, w, bias, y, scratch);
#endif
    else
        run_pass(g, IABN_CONV_FWD, threads, x, w, bias, y, scratch);
}

void ISA(iabn_conv_blocked_bwd_data)(const iabn_conv_geom *g, int threads, const float *dy,
                                     const float *w, float *dx, float *scratch)
{
    if (ROT(IABN_CONV_BWD_DATA))
        ISA(iabn_conv_blocked_rot)(g, IABN_CONV_BWD_DATA, threads, dy, w, NULL, dx, scratch);
#if BLK == 8
    else if (ROWS(IABN_CONV_BWD_DATA))
        iabn_conv_rows_8c(g, IABN_CONV_BWD_DATA, threads, dy, w, NULL, dx, scratch);
#endif
    else
        run_pass(g, IABN_CONV_BWD_DATA, threads, dy, w, NULL, dx, scratch);
}

/* ---- bwd-filter ----------------------------------------------------------- */

/* One output row's share of KC consecutive column taps of one row tap:
 * B[k][j] += dyrot_j * x(at tap k), summed over the row in KC x CPG
 * accumulators, added to dwt ([k][j][BLK]).  dyrot: cpg planes (jst apart)
 * of the row's rotated dy; xk[k]: tap k's source column for output 0. */
ALWAYS_INLINE void filter_taps(const float *dyrot, size_t jst, const float *const *xk, int wo,
                               size_t xs, float *dwt, const float *pf, const int KC,
                               const int CPG)
{
    vf acc[ACC_MAX];
    UNROLL(24)
    for (int a = 0; a < KC * CPG; a++) acc[a] = vzero();
    for (int q = 0; q < wo; q++) {
        if (pf) __builtin_prefetch(pf + q * xs, 0, 3); /* a row ahead, spread */
        vf xv[3];
        UNROLL(3)
        for (int k = 0; k < KC; k++) xv[k] = vld(xk[k] + q * xs);
        UNROLL(16)
        for (int j = 0; j < CPG; j++) {
            vf dv = vld(dyrot + j * jst + (size_t)q * BLK);
            VKEEP(dv);
            UNROLL(3)
            for (int k = 0; k < KC; k++) acc[k * CPG + j] = vfma(dv, xv[k], acc[k * CPG + j]);
        }
    }
    UNROLL(24)
    for (int a = 0; a < KC * CPG; a++) vst(dwt + a * BLK, vadd(vld(dwt + a * BLK), acc[a]));
}

/* Column taps s of row tap r (dW at dwr, [s][j][BLK]), three at a time
 * where 3 x cpg accumulators fit (and 3 source vectors and a dy vector:
 * cpg up to 8 in 32 registers, 4 in 16), else one; the first sweep
 * prefetches the source row at pf (NULL: none), a pixel's columns with each
 * pixel. */
static void filter_row(const bplan *b, const float *dyrot, const float *xrow, float *dwr,
                       const float *pf)
{
    size_t jst = (size_t)b->wo * BLK, xs = (size_t)b->ss * BLK;
    int kc = b->cpg <= (BLK == 16 ? 8 : 4) ? 3 : 1;
    for (int s0 = 0; s0 < b->kw;) {
        int n = b->kw - s0 < kc ? 1 : kc;
        const float *xk[3];
        for (int k = 0; k < n; k++)
            xk[k] = xrow + (size_t)((s0 + k) * b->d - b->p + b->pl) * BLK;
        float *dwt = dwr + (size_t)s0 * b->cpg * BLK;
        const float *pfs = s0 == 0 ? pf : NULL;
#define FT(KC, C) filter_taps(dyrot, jst, xk, b->wo, xs, dwt, pfs, KC, C)
        if (!SPECIALISED) {
            FT(n, b->cpg);
        } else if (n == 3) {
            switch (b->cpg) {
            case 1: FT(3, 1); break;
            case 2: FT(3, 2); break;
#if BLK == 16
            case 4: FT(3, 4); break;
            default: FT(3, 8); break;
#else
            default: FT(3, 4); break;
#endif
            }
        } else {
            switch (b->cpg) {
            case 1: FT(1, 1); break;
            case 2: FT(1, 2); break;
            case 4: FT(1, 4); break;
#if BLK == 16
            case 8: FT(1, 8); break;
            default: FT(1, 16); break;
#else
            default: FT(1, 8); break;
#endif
            }
        }
#undef FT
        s0 += n;
    }
}

/* dW in input lanes: B[t][j][m] = sum of rot_{-j}(dy)[m] * x(at tap t)[m]
 * (the output lane rot_{-j}(m) against input channel m), so the x rows are
 * read as they are and each dy pixel is rotated once for all taps. */
void ISA(iabn_conv_blocked_bwd_filter)(const iabn_conv_geom *g, int threads, const float *x,
                                       const float *dy, float *dw, float *dbias,
                                       float *scratch)
{
#if BLK == 16
    if (ROWS(IABN_CONV_BWD_FILTER)) {
        ISA(iabn_conv_rows_bwd_filter)(g, threads, x, dy, dw, dbias, scratch);
        return;
    }
#endif
    bplan b;
    bplan_make(g, IABN_CONV_BWD_FILTER, &b);
    int T = g->kh * g->kw, cpg = b.cpg;
    size_t dyr = iabn_conv_round16((size_t)cpg * b.wo * BLK);
    size_t per = ring_floats(&b) + dyr + iabn_conv_round16((size_t)T * cpg * BLK);
    size_t xplane = (size_t)b.hs * b.ws * BLK, yplane = (size_t)b.ho * b.wo * BLK;
#pragma omp parallel num_threads(threads)
    {
        float *buf = scratch + per * (size_t)iabn_conv_tid();
        float *dyrot = buf + ring_floats(&b), *dwb = dyrot + dyr;
        ring rg;
        ring_init(&rg, &b, buf);
#pragma omp for schedule(static)
        for (int bk = 0; bk < b.nb; bk++) {
            memset(dwb, 0, sizeof(float) * (size_t)T * cpg * BLK);
            double bsum[BLK] = {0};
            for (int n = 0; n < g->n; n++) {
                size_t plane = (size_t)n * b.nb + bk;
                const float *dyp = dy + plane * yplane;
                ring_reset(&rg, x + plane * xplane);
                vf bs = vzero();
                for (int i = 0; i < b.ho; i++) {
                    const float *dr = dyp + (size_t)i * b.wo * BLK;
                    for (int q = 0; q < b.wo; q++) {
                        vf v = vld(dr + (size_t)q * BLK);
                        bs = vadd(bs, v);
                        vst(dyrot + (size_t)q * BLK, v);
                        for (int j = 1; j < cpg; j++)
                            vst(dyrot + ((size_t)j * b.wo + q) * BLK, vperm(rg.s.rot[cpg - j], v));
                    }
                    /* the source rows this output row does not read yet, PF_ROWS
                     * ahead, spread over its first sweep(s): ss rows, one per
                     * row tap from the first (a stride of 2 reads two new rows
                     * per output row) */
                    int last = row_tap(&b, i, b.kh - 1);
                    for (int r = 0; r < b.kh; r++) {
                        int sr = row_tap(&b, i, r), pr = last + PF_ROWS - (b.ss - 1) + r;
                        const float *pf = last >= 0 && r < b.ss && pr < b.hs
                                              ? x + plane * xplane + (size_t)pr * b.ws * BLK
                                              : NULL;
                        if (sr >= 0)
                            filter_row(&b, dyrot, ring_row(&rg, sr),
                                       dwb + (size_t)r * b.kw * cpg * BLK, pf);
                    }
                }
                if (dbias) { /* per image in float, over images in double */
                    float lanes[BLK];
                    vst(lanes, bs);
                    for (int l = 0; l < BLK; l++) bsum[l] += lanes[l];
                }
            }
            for (int t = 0; t < T; t++)
                for (int j = 0; j < cpg; j++)
                    for (int m = 0; m < BLK; m++) {
                        int oc = bk * BLK + iabn_conv_rot_lane(m, cpg - j, cpg), ic = m % cpg;
                        dw[((size_t)oc * cpg + ic) * T + t] += dwb[((size_t)t * cpg + j) * BLK + m];
                    }
            if (dbias)
                for (int l = 0; l < BLK; l++) dbias[bk * BLK + l] += (float)bsum[l];
        }
    }
}

#if !defined(IABN_DIRECT_AVX512) /* once per lane count */

size_t ISA(iabn_conv_blocked_scratch)(const iabn_conv_geom *g, iabn_conv_pass pass, int threads)
{
    bplan b;
    if (threads < 1) threads = 1;
    if (ROT(pass)) return iabn_conv_blocked_rot_scratch(g, BLK, threads);
    if (ROWS(pass))
        return BLK == 8 ? iabn_conv_rows_scratch_8c(g, pass, threads)
                        : iabn_conv_rows_scratch(g, pass, threads);
    bplan_make(g, pass, &b);
    if (pass == IABN_CONV_BWD_FILTER)
        return (ring_floats(&b) + iabn_conv_round16((size_t)b.cpg * b.wo * BLK) +
                iabn_conv_round16((size_t)g->kh * g->kw * b.cpg * BLK)) *
               (size_t)threads;
    /* the packed weights (fwd and bwd-data read the source itself) */
    return iabn_conv_round16((size_t)g->c_in * (g->c_in / g->groups) * g->kh * g->kw);
}
#endif

#if BLK == 8
int iabn_conv_blocked_native_8c(void) { return SIMD_NATIVE; }
#elif !defined(IABN_DIRECT_AVX512) /* the rest: the portable 16-lane build */

int iabn_conv_blocked_takes(const iabn_conv_geom *g, iabn_layout L)
{
    int G = g->groups, lanes = iabn_layout_block(L);
    if (G < 2 || g->c_in != g->c_out || lanes < 8 || g->c_in % lanes) return 0;
    int cpg = g->c_in / G;
    return (cpg & (cpg - 1)) == 0 && cpg <= lanes && (g->stride == 1 || g->stride == 2) &&
           g->kh * g->kw <= IABN_CONV_DIRECT_MAX_TAPS &&
           (g->kh - 1) * g->dil + 1 <= IABN_CONV_DIRECT_MAX_TAPS;
}

/* nChw8c where a side has it (the other NCHW or the same), else nChw16c */
static int lanes8(const iabn_conv_geom *g)
{
    return g->x_layout == IABN_LAYOUT_NCHW8C || g->y_layout == IABN_LAYOUT_NCHW8C;
}

size_t iabn_conv_blocked_scratch(const iabn_conv_geom *g, iabn_conv_pass pass, int threads)
{
    return lanes8(g) ? iabn_conv_blocked_scratch_8c(g, pass, threads)
                     : iabn_conv_blocked_scratch_portable(g, pass, threads);
}

/* 8 lanes where the operands are nChw8c; else the AVX-512 build where the
 * CPU has it, else the portable one. */
#if IABN_HAVE_DIRECT_AVX512
#define PICK(name)                                                                     \
    (lanes8(g) ? name##_8c : iabn_conv_direct_avx512() ? name##_avx512 : name##_portable)
#else
#define PICK(name) (lanes8(g) ? name##_8c : name##_portable)
#endif

void iabn_conv_blocked_fwd(const iabn_conv_geom *g, int threads, const float *x, const float *w,
                           const float *bias, float *y, float *scratch)
{
    PICK(iabn_conv_blocked_fwd)(g, threads, x, w, bias, y, scratch);
}

void iabn_conv_blocked_bwd_data(const iabn_conv_geom *g, int threads, const float *dy,
                                const float *w, float *dx, float *scratch)
{
    PICK(iabn_conv_blocked_bwd_data)(g, threads, dy, w, dx, scratch);
}

void iabn_conv_blocked_bwd_filter(const iabn_conv_geom *g, int threads, const float *x,
                                  const float *dy, float *dw, float *dbias, float *scratch)
{
    PICK(iabn_conv_blocked_bwd_filter)(g, threads, x, dy, dw, dbias, scratch);
}
#endif
