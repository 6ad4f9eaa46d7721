/* cpu/conv_direct.c: direct convolution kernels, for grouped convolutions
 * with few channels per group (ResNeXt's 3x3 with 4 channels per group,
 * depthwise), where any GEMM formulation is too thin to run well.
 *
 * Per (image, group) the input planes are copied into a zero-padded buffer,
 * split into stride x stride phase planes so that every tap reads contiguous
 * memory: with Wq the padded row width, output (oh, ow) of tap (r, s) reads
 * the packed input at oh*Wq + ow plus a per-tap offset.
 *   fwd:        register tiles of up to 4 output channels x 3 vectors of 8
 *               along a row, accumulated over (ci, tap) from the bias and
 *               stored straight into y (non-temporal for outputs larger than
 *               the cache).
 *   bwd-data:   the same kernel on dy (zero-upsampled when strided) with
 *               flipped, transposed weights.
 *   bwd-filter: dw[co][ci][t] = sum over rows of dy[co] (read in place, the
 *               last vector of a row masked) times the packed x[ci] row at
 *               tap t's offset; tiles of 4 co x 3 taps over L1-sized row
 *               bands, accumulated as vectors and summed once per item.
 * Threads: fwd / bwd-data over (image, group[, output-channel chunk]) items;
 * bwd-filter over (group[, output-channel chunk]), each owning its slice of
 * dw, so no reduction and no dependence of the result on the thread count.
 *
 * The file builds twice (meson.build): for AVX2 (entry points *_avx2; the
 * portable code where the build has no AVX2), and with IABN_DIRECT_AVX512
 * for AVX-512 (*_avx512: 16-float vectors, forward and bwd-data only).  The
 * unsuffixed entry points, in the AVX2 build, run the AVX-512 forward and
 * bwd-data where the CPU has it: 1.25-1.4x faster on 4 channels per group
 * (`iabn bench conv --case grouped3x3`, docs/CPU.md), and the same bits,
 * since every output sums its (channel, tap) products in the same order
 * whatever the vector width.  The bwd-filter stays AVX2: its 16-wide
 * version was up to 1.5x slower on 8 channels per group.
 */
#include "tensor/cpu/conv_impl.h"

#include "iabn_config.h"

#include <stdint.h>
#include <string.h>

/* VL: floats per vector of the build (16 with AVX-512, 8 with AVX2).  A
 * packed channel block ends in SLACK floats: a tile's vectors read, and the
 * packing's zero stores write, less than VL (at most 16) floats past the
 * phase planes.  SLACK and the bwd-filter's row bands (AVX2 only, sized in
 * floats) are the same in both builds, so that the planned scratch and the
 * AVX2 build's summation order do not depend on which build runs. */
#define SLACK 32
#define WCHUNK_FLOATS 512 /* floats of the flat grid per bwd-filter chunk */

/* The vectors (cpu/simd.h): 16 lanes in the AVX-512 build, 8 in the AVX2
 * one, 8 floats of portable code where the build has neither. */
#if defined(__AVX512F__)
#define SIMD_LANES 16
#else
#define SIMD_LANES 8
#endif
#include "tensor/cpu/simd.h"
#define VL SIMD_LANES

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Short row copies: a libc call per 50-float row costs as much as the copy. */
static inline void copy_f(float *d, const float *src, long n)
{
    long i = 0;
    for (; i + VL <= n; i += VL) vst(d + i, vld(src + i));
    for (; i < n; i++) d[i] = src[i];
}

static inline void zero_f(float *d, long n)
{
    long i = 0;
    for (; i + VL <= n; i += VL) vst(d + i, vzero());
    for (; i < n; i++) d[i] = 0.0f;
}

/* One direct convolution as run (for bwd-data: dy -> dx). */
typedef struct dplan {
    int cin, cout;    /* channels per group, of the conv as run            */
    int hs, ws;       /* source plane                                       */
    int up;           /* source zero-upsampling factor (bwd-data stride)    */
    int st;           /* conv stride = phases per axis                      */
    int pt, pl;       /* virtual top / left padding (may be negative)       */
    int hq, wq;       /* phase plane                                        */
    int ho, wo;       /* outputs                                            */
    int nt;           /* taps                                               */
    size_t cs;        /* packed channel block: st*st planes + slack         */
    int toff[IABN_CONV_DIRECT_MAX_TAPS];
} dplan;

static void dplan_finish(dplan *d, int hp, int wp)
{
    d->hq = (hp + d->st - 1) / d->st;
    d->wq = (wp + d->st - 1) / d->st;
    /* Vectors run past the last output into the next block or the slack. */
    d->cs = iabn_conv_round16((size_t)d->st * d->st * d->hq * d->wq + d->wq + SLACK);
}

static void dplan_fwd(const iabn_conv_geom *g, dplan *d)
{
    int S = g->stride, dl = g->dil;
    d->cin = g->c_in / g->groups; d->cout = g->c_out / g->groups;
    d->hs = g->h_in; d->ws = g->w_in; d->up = 1; d->st = S;
    d->pt = d->pl = g->pad; d->ho = g->h_out; d->wo = g->w_out;
    d->nt = g->kh * g->kw;
    dplan_finish(d, (g->h_out - 1) * S + (g->kh - 1) * dl + 1,
                 (g->w_out - 1) * S + (g->kw - 1) * dl + 1);
    size_t plane = (size_t)d->hq * d->wq;
    for (int r = 0; r < g->kh; r++)
        for (int s = 0; s < g->kw; s++) {
            int b = r * dl % S, a = s * dl % S;
            d->toff[r * g->kw + s] =
                (int)((b * S + a) * plane + (size_t)(r * dl / S) * d->wq + s * dl / S);
        }
}

static void dplan_bwd_data(const iabn_conv_geom *g, dplan *d)
{
    int dl = g->dil;
    d->cin = g->c_out / g->groups; d->cout = g->c_in / g->groups;
    d->hs = g->h_out; d->ws = g->w_out; d->up = g->stride; d->st = 1;
    d->pt = dl * (g->kh - 1) - g->pad; d->pl = dl * (g->kw - 1) - g->pad;
    d->ho = g->h_in; d->wo = g->w_in;
    d->nt = g->kh * g->kw;
    dplan_finish(d, g->h_in + (g->kh - 1) * dl, g->w_in + (g->kw - 1) * dl);
    for (int r = 0; r < g->kh; r++)
        for (int s = 0; s < g->kw; s++) d->toff[r * g->kw + s] = r * dl * d->wq + s * dl;
}

/* Source index of virtual coordinate v, or -1 if it is padding / a hole. */
static inline long src_index(long v, int pad, int up, int n)
{
    long sr = v - pad;
    if (sr < 0) return -1;
    if (up > 1) { /* a division per row costs more than the row's copy */
        if (sr % up) return -1;
        sr /= up;
    }
    return sr < n ? sr : -1;
}

/* Stride 2: one source row into its even (p0) and odd (p1) phase rows
 * (virtual column v = c + pl goes to phase v % 2, column v / 2), eight
 * pairs per step.  The rows are zero already. */
static void split_row2(const float *src, int n, int pl, float *p0, float *p1)
{
    /* Source columns 2k (even) land at phase (pl % 2), column k + pl/2;
     * odd ones at phase 1 - pl % 2, column k + (pl + 1) / 2. */
    float *pe = pl % 2 ? p1 : p0, *po = pl % 2 ? p0 : p1;
    int oe = pl / 2, oo = (pl + 1) / 2, k = 0;
#if defined(__AVX2__) && defined(__FMA__)
    for (; 2 * k + 16 <= n; k += 8) {
        __m256 lo = _mm256_loadu_ps(src + 2 * k), hi = _mm256_loadu_ps(src + 2 * k + 8);
        __m256 ev = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
        __m256 od = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
        /* lanes come out as (lo0-3 | hi0-3 | lo4-7 | hi4-7) pairs: reorder 64-bit quads */
        ev = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), _MM_SHUFFLE(3, 1, 2, 0)));
        od = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), _MM_SHUFFLE(3, 1, 2, 0)));
        _mm256_storeu_ps(pe + oe + k, ev);
        _mm256_storeu_ps(po + oo + k, od);
    }
#endif
    for (; 2 * k < n; k++) {
        pe[oe + k] = src[2 * k];
        if (2 * k + 1 < n) po[oo + k] = src[2 * k + 1];
    }
}

/* Copies channels source planes into packed blocks (phases, padding, slack). */
static void pack_src(const dplan *d, const float *src, int channels, float *dst)
{
    size_t plane = (size_t)d->hq * d->wq, hw = (size_t)d->hs * d->ws;
    for (int c = 0; c < channels; c++) {
        const float *sp = src + c * hw;
        float *blk = dst + c * d->cs;
        if (d->st == 1 && d->up == 1) {
            long jl = d->pl > 0 ? d->pl : 0, jh = (long)d->ws + d->pl;
            if (jh > d->wq) jh = d->wq;
            if (jh < jl) jh = jl;
            for (int i = 0; i < d->hq; i++) {
                float *row = blk + (size_t)i * d->wq;
                long sr = (long)i - d->pt;
                if (sr < 0 || sr >= d->hs || jh == jl) {
                    zero_f(row, d->wq);
                    continue;
                }
                const float *sr_p = sp + sr * d->ws + (jl - d->pl);
                long n = jh - jl;
                if (jl <= VL && d->wq - jh <= VL && n >= VL) {
                    /* Whole vectors only: the right zero vector spills into
                     * the next row (rewritten next) or the slack. */
                    vst(row, vzero());
                    long k = 0;
                    for (; k + VL <= n; k += VL) vst(row + jl + k, vld(sr_p + k));
                    if (k < n) vst(row + jl + n - VL, vld(sr_p + n - VL));
                    vst(row + jh, vzero());
                } else {
                    zero_f(row, jl);
                    copy_f(row + jl, sr_p, n);
                    zero_f(row + jh, d->wq - jh);
                }
            }
        } else {
            for (int b = 0; b < d->st; b++)
                for (int a = 0; a < d->st; a++) {
                    float *pp = blk + (size_t)(b * d->st + a) * plane;
                    /* Phase column j holds virtual column j*st + a. */
                    int jl, jh;
                    iabn_conv_tap_range(d->wq, d->ws, a, d->st, d->pl, 1, &jl, &jh);
                    for (int i = 0; i < d->hq; i++) {
                        long sr = src_index((long)i * d->st + b, d->pt, d->up, d->hs);
                        float *row = pp + (size_t)i * d->wq;
                        if (!(d->st == 2 && d->up == 1 && a == 1)) zero_f(row, d->wq);
                        if (d->st == 2 && d->up == 1 && a == 0) zero_f(row + plane, d->wq);
                        if (sr < 0) continue;
                        const float *srow = sp + sr * d->ws;
                        if (d->st == 2 && d->up == 1) {
                            if (a == 0) split_row2(srow, d->ws, d->pl, row, row + plane);
                        } else if (d->up == 1) {
                            for (int j = jl; j < jh; j++)
                                row[j] = srow[(long)j * d->st + a - d->pl];
                        } else {
                            /* Zero-upsampled source: scatter its columns. */
                            for (long c2 = 0; c2 < d->ws; c2++) {
                                long vc = c2 * d->up + d->pl - a;
                                if (vc < 0 || vc % d->st) continue;
                                if (vc / d->st >= d->wq) break;
                                row[vc / d->st] = srow[c2];
                            }
                        }
                    }
                }
        }
        size_t used = (size_t)d->st * d->st * plane;
        memset(blk + used, 0, sizeof(float) * (d->cs - used));
    }
}

/* Output channel blocks: 4, then 2, then 1. */
static inline int block_size(int rem) { return rem >= 4 ? 4 : rem >= 2 ? 2 : 1; }

/* wp for group g0: per output-channel block [ci][t][cb], blocks in order.
 * flip: the weights of the bwd-data conv (in/out swapped, taps reversed). */
static void pack_weights(const iabn_conv_geom *g, const dplan *d, int flip, const float *w,
                         float *wp, int threads)
{
    int G = g->groups, cpi = g->c_in / G, cpo = g->c_out / G, T = d->nt;
    size_t gsz = (size_t)d->cout * d->cin * T;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int g0 = 0; g0 < G; g0++) {
        float *dst = wp + g0 * gsz;
        for (int o0 = 0; o0 < d->cout;) {
            int cb = block_size(d->cout - o0);
            for (int ci = 0; ci < d->cin; ci++)
                for (int t = 0; t < T; t++)
                    for (int c = 0; c < cb; c++) {
                        size_t idx = flip ? (((size_t)g0 * cpo + ci) * cpi + o0 + c) * T + (T - 1 - t)
                                          : (((size_t)g0 * cpo + o0 + c) * cpi + ci) * T + t;
                        *dst++ = w[idx];
                    }
            o0 += cb;
        }
    }
}

/* A tile: up to TV output vectors, anywhere in the plane (a row's last
 * vectors and the next row's first share a tile, so every tile but the
 * item's last has TV vectors and 4 x TV FMA chains).  TV is 3 with AVX2's 16
 * registers, 6 with AVX-512's 32 (24 accumulators, 6 inputs, a weight).
 * io / oo: offsets of each vector in the packed input and in the output
 * plane; nl: its valid lanes. */
#if VL == 16
#define TV 6
#else
#define TV 3
#endif
typedef struct ftile_pos {
    int io[TV], oo[TV], nl[TV];
} ftile_pos;

/* COB output channels of one tile, accumulated over (ci, tap) from the bias
 * and written straight to the destination planes (stride dplane). */
ALWAYS_INLINE void ftile(const float *in, size_t cs, int cin, const int *toff, int nt,
                         const float *wp, const float *bias, float *out, size_t dplane,
                         const ftile_pos *p, int stream, const int COB, const int V)
{
    vf acc[4][TV];
#pragma GCC unroll 4
    for (int c = 0; c < COB; c++) {
        vf b = bias ? vbcast(bias + c) : vzero();
#pragma GCC unroll 6
        for (int v = 0; v < V; v++) acc[c][v] = b;
    }
    long io[TV];
#pragma GCC unroll 6
    for (int v = 0; v < V; v++) io[v] = p->io[v];
    for (int ci = 0; ci < cin; ci++) {
        const float *ip = in + ci * cs;
        for (int t = 0; t < nt; t++, wp += COB) {
            const float *xp = ip + toff[t];
            vf xv[TV];
#pragma GCC unroll 6
            for (int v = 0; v < V; v++) xv[v] = vld(xp + io[v]);
#pragma GCC unroll 4
            for (int c = 0; c < COB; c++) {
                vf wv = vbcast(wp + c);
#pragma GCC unroll 6
                for (int v = 0; v < V; v++) acc[c][v] = vfma(wv, xv[v], acc[c][v]);
            }
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < COB; c++) {
#pragma GCC unroll 6
        for (int v = 0; v < V; v++) {
            float *o = out + c * dplane + p->oo[v];
            if (p->nl[v] < VL)
                vst_n(o, acc[c][v], p->nl[v]);
            else if (stream)
                vst_nt(o, acc[c][v]);
            else
                vst(o, acc[c][v]);
        }
    }
}

ALWAYS_INLINE void ftile_v(const dplan *d, const float *in, const float *wp, const float *bias,
                           float *out, size_t dplane, const ftile_pos *p, int stream,
                           const int COB, int V)
{
#define FT(n) ftile(in, d->cs, d->cin, d->toff, d->nt, wp, bias, out, dplane, p, stream, COB, n)
    switch (V) {
#if TV == 6
    case 6: FT(6); break;
    case 5: FT(5); break;
    case 4: FT(4); break;
#endif
    case 3: FT(3); break;
    case 2: FT(2); break;
    default: FT(1); break;
    }
#undef FT
}

static void fwd_tile(const dplan *d, const float *in, const float *wp, const float *bias,
                     float *out, size_t dplane, const ftile_pos *p, int stream, int cb, int V)
{
    switch (cb) {
    case 4: ftile_v(d, in, wp, bias, out, dplane, p, stream, 4, V); break;
    case 2: ftile_v(d, in, wp, bias, out, dplane, p, stream, 2, V); break;
    default: ftile_v(d, in, wp, bias, out, dplane, p, stream, 1, V); break;
    }
}

/* Output channels [c0, c1) of one (image, group): src planes -> dst planes
 * (+ bias).  Tiles outside, channel blocks inside, so that a tile's input
 * stays in L1 across the blocks.  next: the source of the item that follows
 * on this thread (NULL if none). */
static void run_item(const dplan *d, const float *src, const float *next, const float *wg,
                     const float *bias, float *dst, int c0, int c1, float *buf, int stream)
{
    size_t hw = (size_t)d->ho * d->wo;
    size_t lines = ((size_t)d->cin * d->hs * d->ws * sizeof(float) + 63) / 64;
    int nvec = (d->wo + VL - 1) / VL, last = d->wo - (nvec - 1) * VL;
    long total = (long)d->ho * nvec, ntiles = (total + TV - 1) / TV;
    pack_src(d, src, d->cin, buf);
    for (long k = 0; k < ntiles; k++) {
        /* Pull the next item's input towards L2 while this one computes. */
        if (next)
            for (size_t l = k * lines / ntiles; l < (k + 1) * lines / ntiles; l++)
                __builtin_prefetch((const char *)next + l * 64, 0, 2);
        ftile_pos p;
        int V = total - TV * k < TV ? (int)(total - TV * k) : TV;
        for (int v = 0; v < V; v++) {
            long q = TV * k + v;
            int oh = (int)(q / nvec), vc = (int)(q % nvec);
            p.io[v] = oh * d->wq + vc * VL;
            p.oo[v] = oh * d->wo + vc * VL;
            p.nl[v] = vc == nvec - 1 ? last : VL;
        }
        for (int o0 = c0; o0 < c1;) {
            int cb = block_size(c1 - o0);
            fwd_tile(d, buf, wg + (size_t)o0 * d->cin * d->nt, bias ? bias + o0 : NULL,
                     dst + o0 * hw, hw, &p, stream, cb, V);
            o0 += cb;
        }
    }
}

static size_t item_floats(const dplan *d) { return iabn_conv_round16((size_t)d->cin * d->cs); }

/* Output-channel chunks (multiples of 4) per (image, group), so that a small
 * batch of dense convs still gives every thread work. */
static int out_chunks(int items, int cout, int threads)
{
    int want = 4 * threads, blocks = (cout + 3) / 4;
    if (items >= want) return 1;
    int k = (want + items - 1) / items;
    return k < blocks ? k : blocks;
}

static void chunk_range(int cout, int nch, int c, int *c0, int *c1)
{
    int per = ((cout + nch - 1) / nch + 3) / 4 * 4;
    *c0 = c * per < cout ? c * per : cout;
    *c1 = (c + 1) * per < cout ? (c + 1) * per : cout;
}

static void run_items(const iabn_conv_geom *g, const dplan *d, int threads, const float *src,
                      const float *wp, const float *bias, float *dst, float *scratch)
{
    int G = g->groups, items = g->n * G, nch = out_chunks(items, d->cout, threads);
    size_t wsz = iabn_conv_round16((size_t)G * d->cout * d->cin * d->nt);
    size_t per = item_floats(d);
    size_t sblk = (size_t)d->cin * d->hs * d->ws, dblk = (size_t)d->cout * d->ho * d->wo;
    int stream = (size_t)items * dblk * sizeof(float) >= IABN_CONV_STREAM_BYTES;
#pragma omp parallel num_threads(threads)
    {
        float *buf = scratch + wsz + per * (size_t)iabn_conv_tid();
#pragma omp for schedule(static)
        for (int it = 0; it < items * nch; it++) {
            /* Items are consecutive blocks of src, so the next one follows. */
            int blk = it / nch, c0, c1;
            chunk_range(d->cout, nch, it % nch, &c0, &c1);
            if (c0 >= c1) continue;
            const float *s = src + (size_t)blk * sblk;
            run_item(d, s, blk + 1 < items ? s + sblk : NULL,
                     wp + (size_t)(blk % G) * d->cout * d->cin * d->nt,
                     bias ? bias + (size_t)(blk % G) * d->cout : NULL, dst + (size_t)blk * dblk,
                     c0, c1, buf, stream);
        }
        vfence();
    }
}

#if defined(IABN_DIRECT_AVX512)
#define ISA(name) name##_avx512
#else
#define ISA(name) name##_avx2
#endif

void ISA(iabn_conv_direct_fwd)(const iabn_conv_geom *g, int threads, const float *x,
                               const float *w, const float *bias, float *y, float *scratch)
{
    dplan d;
    dplan_fwd(g, &d);
    pack_weights(g, &d, 0, w, scratch, threads);
    run_items(g, &d, threads, x, scratch, bias, y, scratch);
}

void ISA(iabn_conv_direct_bwd_data)(const iabn_conv_geom *g, int threads, const float *dy,
                                    const float *w, float *dx, float *scratch)
{
    dplan d;
    dplan_bwd_data(g, &d);
    pack_weights(g, &d, 1, w, scratch, threads);
    run_items(g, &d, threads, dy, scratch, NULL, dx, scratch);
}

#if !defined(IABN_DIRECT_AVX512) /* the rest: the AVX2 build only */

/* ---- bwd-filter ----------------------------------------------------------- */

/* One vector position: x for the TB taps held, dy loaded per channel, so at
 * most 12 accumulators + 3 x + 1 dy registers are live (no spills). */
ALWAYS_INLINE void wstep(vf acc[4][3], const float *dr, size_t dys, const float *xr,
                         const int *toff, int nl, const int COB, const int TB)
{
    vf xv[3];
#pragma GCC unroll 3
    for (int t = 0; t < TB; t++) xv[t] = vld(xr + toff[t]);
#pragma GCC unroll 4
    for (int c = 0; c < COB; c++) {
        vf dv = nl == VL ? vld(dr + c * dys) : vld_n(dr + c * dys, nl);
#pragma GCC unroll 3
        for (int t = 0; t < TB; t++) acc[c][t] = vfma(dv, xv[t], acc[c][t]);
    }
}

/* acc[c][tb] = sum over output rows [r0, r1) of dy[c] * x shifted by tap tb,
 * added to the vector accumulators va (layout [co][ci][t]).  dy is read in
 * place (planes of stride dys, rows of wo); a row's last vector is loaded
 * masked when w_out is not a multiple of 8, so the lanes past the row add 0. */
ALWAYS_INLINE void wtile(const dplan *d, const float *dyp, size_t dys, size_t dyi,
                         const float *xp, size_t xi, int nimg, const int *toff, int r0, int r1,
                         float *va, size_t va_co, const int COB, const int TB)
{
    int nfull = d->wo / VL, last = d->wo - nfull * VL;
    vf acc[4][3];
#pragma GCC unroll 4
    for (int c = 0; c < COB; c++)
#pragma GCC unroll 3
        for (int t = 0; t < TB; t++) acc[c][t] = vzero();
    for (int i = 0; i < nimg; i++) {
        for (int oh = r0; oh < r1; oh++) {
            const float *dr = dyp + i * dyi + (size_t)oh * d->wo;
            const float *xr = xp + i * xi + (size_t)oh * d->wq;
            for (int k = 0; k < nfull; k++)
                wstep(acc, dr + k * VL, dys, xr + k * VL, toff, VL, COB, TB);
            if (last)
                wstep(acc, dr + nfull * VL, dys, xr + nfull * VL, toff, last, COB, TB);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < COB; c++)
#pragma GCC unroll 3
        for (int t = 0; t < TB; t++) {
            float *p = va + (c * va_co + t) * VL;
            vst(p, vadd(vld(p), acc[c][t]));
        }
}

/* What one sweep covers: nimg images (dy image stride dyi, packed x image
 * stride xi) x output rows [r0, r1). */
typedef struct wjob {
    size_t dys, dyi, xi;
    int nimg, r0, r1;
} wjob;

ALWAYS_INLINE void wblock_n(const dplan *d, const float *dyp, const float *xin, const wjob *j,
                            float *va, const int COB)
{
    size_t va_co = (size_t)d->cin * d->nt;
    for (int ci = 0; ci < d->cin; ci++) {
        const float *xp = xin + ci * d->cs;
        float *vp = va + (size_t)ci * d->nt * VL;
        int t = 0;
        for (; t + 3 <= d->nt; t += 3)
            wtile(d, dyp, j->dys, j->dyi, xp, j->xi, j->nimg, d->toff + t, j->r0, j->r1,
                  vp + t * VL, va_co, COB, 3);
        for (; t < d->nt; t++)
            wtile(d, dyp, j->dys, j->dyi, xp, j->xi, j->nimg, d->toff + t, j->r0, j->r1,
                  vp + t * VL, va_co, COB, 1);
    }
}

static void wblock(const dplan *d, const float *dyp, const float *xin, const wjob *j, float *va,
                   int cb)
{
    switch (cb) {
    case 4: wblock_n(d, dyp, xin, j, va, 4); break;
    case 2: wblock_n(d, dyp, xin, j, va, 2); break;
    default: wblock_n(d, dyp, xin, j, va, 1); break;
    }
}

/* Rows per sweep, sized so that a sweep's dy and x stay in L1 across the
 * taps; small maps put several images in one sweep instead. */
static int filter_band(const dplan *d)
{
    int band = WCHUNK_FLOATS / d->wq;
    return band < 1 ? 1 : band;
}

static int filter_images(const dplan *d, int n)
{
    int band = filter_band(d), nb = band >= d->ho ? band / d->ho : 1;
    return nb < n ? nb : n;
}

static size_t filter_floats(const dplan *d, int n)
{
    return iabn_conv_round16((size_t)filter_images(d, n) * d->cin * d->cs) +
           iabn_conv_round16((size_t)d->cout * d->cin * d->nt * VL);
}

void iabn_conv_direct_bwd_filter(const iabn_conv_geom *g, int threads, const float *x,
                                 const float *dy, float *dw, float *scratch)
{
    dplan d;
    dplan_fwd(g, &d);
    int G = g->groups;
    /* Items are (group, output-channel chunk): each owns its slice of dw, so
     * no reduction is needed; a dense conv is split into one chunk per thread. */
    int nch = G >= threads ? 1 : (threads + G - 1) / G, blocks = (d.cout + 3) / 4;
    if (nch > blocks) nch = blocks;
    int band = filter_band(&d), nbands = (d.ho + band - 1) / band;
    int nb = filter_images(&d, g->n);
    size_t per = filter_floats(&d, g->n), xi = (size_t)d.cin * d.cs;
    size_t hwi = (size_t)g->h_in * g->w_in, hwo = (size_t)g->h_out * g->w_out;
    size_t ximg = (size_t)G * d.cin * hwi, dyimg = (size_t)G * d.cout * hwo;
#pragma omp parallel num_threads(threads)
    {
        float *xin = scratch + per * (size_t)iabn_conv_tid();
        float *va = xin + iabn_conv_round16((size_t)nb * xi);
        size_t xlines = (d.cin * hwi * sizeof(float) + 63) / 64;
#pragma omp for schedule(static)
        for (int it = 0; it < G * nch; it++) {
            int g0 = it / nch, c0, c1;
            chunk_range(d.cout, nch, it % nch, &c0, &c1);
            if (c0 >= c1) continue;
            size_t ylines = ((size_t)(c1 - c0) * hwo * sizeof(float) + 63) / 64;
            memset(va, 0, sizeof(float) * (size_t)(c1 - c0) * d.cin * d.nt * VL);
            for (int n0 = 0; n0 < g->n; n0 += nb) {
                int nimg = g->n - n0 < nb ? g->n - n0 : nb;
                for (int i = 0; i < nimg; i++)
                    pack_src(&d, x + (size_t)(n0 + i) * ximg + (size_t)g0 * d.cin * hwi, d.cin,
                             xin + i * xi);
                const float *dsrc = dy + (size_t)n0 * dyimg + ((size_t)g0 * d.cout + c0) * hwo;
                /* The next image's x and dy, fetched while this one computes. */
                const char *pfx = NULL, *pfy = NULL;
                if (nb == 1 && n0 + 1 < g->n) {
                    pfx = (const char *)(x + (size_t)(n0 + 1) * ximg + (size_t)g0 * d.cin * hwi);
                    pfy = (const char *)(dsrc + dyimg);
                }
                for (int b = 0; b < nbands; b++) {
                    wjob j = {hwo, dyimg, xi, nimg, b * band, (b + 1) * band};
                    if (j.r1 > d.ho) j.r1 = d.ho;
                    if (pfx) {
                        for (size_t l = b * xlines / nbands; l < (b + 1) * xlines / nbands; l++)
                            __builtin_prefetch(pfx + l * 64, 0, 2);
                        for (size_t l = b * ylines / nbands; l < (b + 1) * ylines / nbands; l++)
                            __builtin_prefetch(pfy + l * 64, 0, 2);
                    }
                    for (int o0 = 0; o0 < c1 - c0;) {
                        int cb = block_size(c1 - c0 - o0);
                        wblock(&d, dsrc + o0 * hwo, xin, &j, va + (size_t)o0 * d.cin * d.nt * VL,
                               cb);
                        o0 += cb;
                    }
                }
            }
            for (int co = 0; co < c1 - c0; co++)
                for (int ci = 0; ci < d.cin; ci++)
                    for (int t = 0; t < d.nt; t++) {
                        const float *lane = va + (((size_t)co * d.cin + ci) * d.nt + t) * VL;
                        float s = 0;
                        for (int l = 0; l < VL; l++) s += lane[l];
                        dw[(((size_t)g0 * d.cout + c0 + co) * d.cin + ci) * d.nt + t] += s;
                    }
        }
    }
}

size_t iabn_conv_direct_scratch(const iabn_conv_geom *g, iabn_conv_pass pass, int threads)
{
    dplan d;
    if (threads < 1) threads = 1;
    if (pass == IABN_CONV_BWD_FILTER) {
        dplan_fwd(g, &d);
        return filter_floats(&d, g->n) * (size_t)threads;
    }
    if (pass == IABN_CONV_FWD)
        dplan_fwd(g, &d);
    else
        dplan_bwd_data(g, &d);
    size_t wsz = iabn_conv_round16((size_t)g->groups * d.cout * d.cin * d.nt);
    return wsz + item_floats(&d) * (size_t)threads;
}

int iabn_cpu_avx512(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
}

int iabn_conv_direct_avx512(void)
{
    return IABN_HAVE_DIRECT_AVX512 && iabn_cpu_avx512();
}

void iabn_conv_direct_fwd(const iabn_conv_geom *g, int threads, const float *x,
                          const float *w, const float *bias, float *y, float *scratch)
{
#if IABN_HAVE_DIRECT_AVX512
    if (iabn_conv_direct_avx512()) {
        iabn_conv_direct_fwd_avx512(g, threads, x, w, bias, y, scratch);
        return;
    }
#endif
    iabn_conv_direct_fwd_avx2(g, threads, x, w, bias, y, scratch);
}

void iabn_conv_direct_bwd_data(const iabn_conv_geom *g, int threads, const float *dy,
                               const float *w, float *dx, float *scratch)
{
#if IABN_HAVE_DIRECT_AVX512
    if (iabn_conv_direct_avx512()) {
        iabn_conv_direct_bwd_data_avx512(g, threads, dy, w, dx, scratch);
        return;
    }
#endif
    iabn_conv_direct_bwd_data_avx2(g, threads, dy, w, dx, scratch);
}
#endif
