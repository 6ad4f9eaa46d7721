/* cpu/conv_rows.c: grouped 3x3 convs with 8 channels per group, stride 1,
 * padding 1, on maps at most 14 pixels wide (ResNeXt-101's mod4), with the
 * vectors along the rows: the weight pass of the 16-lane blocked kernels
 * (cpu/conv_blocked.c) on nChw16c, the forward and data passes of the
 * 8-lane ones on nChw8c.  (The 16-lane forward and data passes rotate the
 * input in registers instead, cpu/conv_blocked_rot.c: 1.25x-1.5x faster.)
 *
 * Each (image, channel block) is first transposed in registers into planes
 * of its own: one channel per plane, one row per vector (16 lanes) or two
 * (8), row h at plane row h + 1 and column w at lane w + 1, the rest zero
 * (the padding).  A row of up to 14 outputs is then one vector, and a tap
 * is a shifted load of it.  The FMAs waste the lanes past the row's end (2
 * of 16 at 14x14); the transposes cost about a fifth of the time at 14x14.
 * With 8 lanes each row is transposed as two squares of 8 x 8.
 *   fwd (8 lanes): tiles of 4 output channels x 2 rows of one row
 *               vector (8 accumulators; 4 x 3 spilled AVX2's 16
 *               registers): per (input channel, tap) 2 loads, 4 broadcast
 *               weights and 8 FMAs.  The sums go to a staging buffer
 *               ([channel][row][16 lanes]) and each row is transposed back
 *               into y.
 *   bwd-data (8 lanes): the same kernel on dy with the kernel turned by
 *               180 degrees and each group's channels swapped: V[k][t][o] =
 *               w[oc = k][ic = o][8 - t].
 *   bwd-filter (16 lanes; with 8 the blocked kernels' own, which oneDNN
 *               beats in a step, runs only where oneDNN does not):
 *               x and dy transposed the same way (dy at lane w, read
 *               aligned); per (input channel, row tap) 8 output channels x
 *               3 column taps of vector sums over the rows, the shifted x
 *               rows built from aligned ones (valignd).  Kept per block over
 *               the images, summed over their lanes (a transpose and 15
 *               adds per 16 sums) and added to dw at the end.
 * Each of the next item's source lines (and y's, or dy's) is fetched a
 * slice per tile while the FMAs run: in a training step they come from
 * memory, and without it the forward ran at 0.6x its speed on warm data.
 *
 * Each output sums its products in a fixed order (fwd and bwd-data: input
 * channel, then tap, from the bias or zero; bwd-filter: images, rows, then
 * lanes in order) whatever the build (AVX-512, AVX2 or portable,
 * cpu/simd.h) and the threads.  Threads: fwd and bwd-data over (image,
 * channel block), bwd-filter over channel blocks, each owning its slice of
 * dw.  Builds three times: 16 lanes portable (*_portable, the main library)
 * and with IABN_DIRECT_AVX512 (*_avx512), and 8 lanes
 * (IABN_BLOCKED_LANES=8, *_8c: AVX2 in release builds, else portable);
 * conv_blocked.c's entry points call the build of their own.
 */
#include "tensor/cpu/conv_impl.h"

#include "iabn_config.h"

#include <string.h>

#include "tensor/cpu/blocked_isa.h"
#include "tensor/cpu/transpose8.h"

#define CPG 8
#define GPB (BLK / CPG) /* groups per channel block */
#define RW 16           /* floats per plane row: up to 14 columns and their padding */
#define NH (RW / BLK)   /* vectors per plane row */
#define RT 2 /* the forward's output rows per tile */
/* its output channels per tile: 4 x 2 per row vector with AVX2's 16
 * registers (4 x 3 spilled) */
#define OT 4
/* the weight pass's vector sums per block: [group][k][kh][o][kw] */
#define WSUMS (GPB * CPG * 3 * CPG * 3)

#if BLK == 8
#define ONCE(name) name##_8c /* the functions each lane count has once */
#else
#define ONCE(name) name
#endif

#define ALWAYS_INLINE static inline __attribute__((always_inline))

#if BLK == 16 && !defined(IABN_DIRECT_AVX512) /* once */
int iabn_conv_rows_takes(const iabn_conv_geom *g, iabn_conv_pass pass, int lanes)
{
    /* 8 lanes: the forward and data passes (the weight pass along the rows
     * lost to oneDNN's in a step: docs/CPU.md "AVX2 CPUs"); 16: the weight
     * pass (cpu/conv_blocked_rot.c runs the others faster) */
    if ((lanes == 8) == (pass == IABN_CONV_BWD_FILTER)) return 0;
    return g->groups > 1 && g->c_in == g->c_out && g->c_in == g->groups * CPG && g->kh == 3 &&
           g->kw == 3 && g->stride == 1 && g->pad == 1 && g->dil == 1 && g->h_in >= 1 &&
           g->w_in >= 1 && g->w_in <= IABN_CONV_ROWS_MAX_W;
}
#endif

/* A plane: H + 2 rows of 16 floats, then 16 floats that the last row's
 * shifted loads read past its end (zero). */
static size_t plane_floats(int h) { return (size_t)(h + 3) * RW; }

/* One thread's floats: fwd and bwd-data a block's source planes and the
 * staging buffer; bwd-filter the planes of x and dy and the block's vector
 * sums. */
static size_t thread_floats(int h, iabn_conv_pass pass)
{
    size_t planes = iabn_conv_round16(BLK * plane_floats(h));
    if (pass == IABN_CONV_BWD_FILTER) return 2 * planes + (size_t)WSUMS * RW;
    return planes + iabn_conv_round16((size_t)BLK * h * RW);
}

#if !defined(IABN_DIRECT_AVX512)
size_t ONCE(iabn_conv_rows_scratch)(const iabn_conv_geom *g, iabn_conv_pass pass, int threads)
{
    if (threads < 1) threads = 1;
    size_t wp = pass == IABN_CONV_BWD_FILTER ? 0 : iabn_conv_round16((size_t)g->c_in * CPG * 9);
    return wp + thread_floats(g->h_in, pass) * (size_t)threads;
}
#endif

#if SIMD_NATIVE && BLK == 16
/* r[i] lane j becomes r[j] lane i (16 x 16, in registers). */
ALWAYS_INLINE void transpose16(vf r[16])
{
    vf t[16], p[2][4], q[2][4];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    /* per 128-bit lane k of rows 4m..4m+3: r[4m + j] holds column 4k + j */
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++) {
            p[h][j] = _mm512_shuffle_f32x4(r[8 * h + j], r[8 * h + 4 + j], 0x88);
            q[h][j] = _mm512_shuffle_f32x4(r[8 * h + j], r[8 * h + 4 + j], 0xdd);
        }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm512_shuffle_f32x4(p[0][j], p[1][j], 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(p[0][j], p[1][j], 0xdd);
        r[4 + j] = _mm512_shuffle_f32x4(q[0][j], q[1][j], 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(q[0][j], q[1][j], 0xdd);
    }
}
#endif

/* One channel block of one image (h x w pixels of 16) into its 16 planes,
 * column w at lane w + col (col 1: a source with its left padding; 0: the
 * weight pass's dy, whose rows are read aligned). */
static void pack_block(const float *src, int h, int w, int col, float *pk)
{
    size_t ps = plane_floats(h);
#if SIMD_NATIVE && BLK == 8
    /* each row as two squares of 8 pixels x 8 channels, the second from a
     * copy padded with zero pixels (its stores reach the next row's left
     * padding, as with 16 lanes); vector stores of zeros, not memset (its
     * start-up took 63% of this function's samples) */
    for (int c = 0; c < BLK; c++) {
        float *p = pk + c * ps, *q = p + (size_t)(h + 1) * RW;
        for (int j = 0; j < 2 * RW; j += BLK) {
            vst(p + j, vzero()); /* row 0, row 1's left padding */
            vst(q + j, vzero());
        }
    }
    vf sq[2][8]; /* the squares read from copies: their pixels past w zero */
    for (int j = 0; j < 8; j++) sq[0][j] = sq[1][j] = vzero();
    for (int i = 0; i < h; i++) {
        const float *row = src + (size_t)i * w * BLK;
        float *d = pk + (size_t)(i + 1) * RW + col;
        if (w >= 8)
            iabn_tr8(row, BLK, d, ps);
        else {
            for (int j = 0; j < w; j++) sq[0][j] = vld(row + j * BLK);
            iabn_tr8((const float *)sq[0], BLK, d, ps);
        }
        for (int j = 8; j < w; j++) sq[1][j - 8] = vld(row + j * BLK);
        iabn_tr8((const float *)sq[1], BLK, d + 8, ps);
    }
#elif SIMD_NATIVE
    for (int c = 0; c < BLK; c++) {
        float *p = pk + c * ps;
        memset(p, 0, (RW + 1) * sizeof(float)); /* row 0, row 1's left padding */
        memset(p + (size_t)(h + 1) * RW, 0, 2 * RW * sizeof(float));
    }
    for (int i = 0; i < h; i++) {
        vf r[16];
        for (int j = 0; j < 16; j++) r[j] = j < w ? vld(src + ((size_t)i * w + j) * BLK) : vzero();
        transpose16(r);
        /* columns col .. col + 15: the row, zeros past it (and the next
         * row's left padding) */
        for (int c = 0; c < BLK; c++) vst(pk + c * ps + (size_t)(i + 1) * RW + col, r[c]);
    }
#else
    memset(pk, 0, BLK * ps * sizeof(float));
    for (int i = 0; i < h; i++)
        for (int j = 0; j < w; j++)
            for (int c = 0; c < BLK; c++)
                pk[c * ps + (size_t)(i + 1) * RW + col + j] = src[((size_t)i * w + j) * BLK + c];
#endif
}

/* The next item's lines (source and destination, or x and dy), fetched a
 * slice per tile while the FMAs run (in a training step they come from
 * memory). */
typedef struct ahead {
    const float *src, *dst;
    int dst_read; /* the second stream is read (the weight pass's dy) */
    size_t lines, next, per_tile; /* in 64-byte lines */
} ahead;

static void fetch_ahead(ahead *a)
{
    size_t end = a->next + a->per_tile < a->lines ? a->next + a->per_tile : a->lines;
    for (; a->next < end; a->next++) {
        __builtin_prefetch(a->src + a->next * 16, 0, 3);
        if (a->dst_read)
            __builtin_prefetch(a->dst + a->next * 16, 0, 3);
        else
            __builtin_prefetch(a->dst + a->next * 16, 1, 3);
    }
}

#if BLK == 8 /* the forward and data passes: 8 lanes only */
/* The staging buffer ([channel][row][lane = column]) into one block of y. */
static void unpack_block(const float *st, int h, int w, float *dst)
{
#if SIMD_NATIVE
    vf sq[8];
    size_t ss = (size_t)h * RW;
    for (int i = 0; i < h; i++) {
        float *row = dst + (size_t)i * w * BLK;
        const float *s = st + (size_t)i * RW;
        if (w >= 8)
            iabn_tr8(s, ss, row, BLK);
        else {
            iabn_tr8(s, ss, (float *)sq, BLK);
            for (int j = 0; j < w; j++) vst(row + j * BLK, sq[j]);
        }
        if (w > 8) {
            iabn_tr8(s + 8, ss, (float *)sq, BLK);
            for (int j = 8; j < w; j++) vst(row + j * BLK, sq[j - 8]);
        }
    }
#else
    for (int i = 0; i < h; i++)
        for (int j = 0; j < w; j++)
            for (int c = 0; c < BLK; c++)
                dst[((size_t)i * w + j) * BLK + c] = st[((size_t)c * h + i) * RW + j];
#endif
}

/* Rows r0 .. r0 + R - 1, row vector hv, of one group's outputs o0 .. o0 +
 * OT - 1: pk its 8 source planes, V its weights [k][t][o], st its staging
 * rows. */
ALWAYS_INLINE void tile(const float *pk, size_t ps, const float *V, const float *bias, float *st,
                        int h, int r0, const int R, int o0, int hv)
{
    vf a[OT][RT];
    pk += hv * BLK;
    st += (size_t)o0 * h * RW + hv * BLK;
    V += o0;
    if (bias) bias += o0;
    UNROLL(8)
    for (int o = 0; o < OT; o++) {
        vf b = bias ? vbcast(bias + o) : vzero();
        UNROLL(3)
        for (int r = 0; r < R; r++) a[o][r] = b;
    }
    for (int k = 0; k < CPG; k++) {
        const float *P = pk + k * ps + (size_t)r0 * RW;
        UNROLL(9)
        for (int t = 0; t < 9; t++) {
            const float *s = P + (t / 3) * RW + t % 3;
            const float *wv = V + ((size_t)k * 9 + t) * CPG;
            vf x[RT];
            UNROLL(3)
            for (int r = 0; r < R; r++) {
                x[r] = vld(s + (size_t)r * RW);
                VKEEP(x[r]);
            }
            UNROLL(8)
            for (int o = 0; o < OT; o++) {
                vf wb = vbcast(wv + o);
                UNROLL(3)
                for (int r = 0; r < R; r++) a[o][r] = vfma(wb, x[r], a[o][r]);
            }
        }
    }
    UNROLL(8)
    for (int o = 0; o < OT; o++)
        UNROLL(3)
        for (int r = 0; r < R; r++) vst(st + ((size_t)o * h + r0 + r) * RW, a[o][r]);
}

/* One group's outputs, w columns: tiles of rows x OT channels x a row's
 * vectors as far as they hold outputs. */
static void run_group(const float *pk, size_t ps, const float *V, const float *bias, float *st,
                      int h, int w, ahead *a)
{
    int small, big, n = iabn_conv_tile_split(h, RT, &small, &big);
    for (int k = 0, r0 = 0, R; k < n; k++, r0 += R) {
        R = small + (k < big);
        fetch_ahead(a);
        for (int hv = 0; hv * BLK < w; hv++)
            for (int o0 = 0; o0 < CPG; o0 += OT) {
#if SIMD_NATIVE
                if (R == 2)
                    tile(pk, ps, V, bias, st, h, r0, 2, o0, hv);
                else
                    tile(pk, ps, V, bias, st, h, r0, 1, o0, hv);
#else
                tile(pk, ps, V, bias, st, h, r0, R, o0, hv);
#endif
            }
    }
}

/* Group gr's weights as [k][t][o] (the top), at V + gr * CPG * 9 * CPG. */
static void pack_weights(int gr, int bwd, const float *w, float *V)
{
    for (int k = 0; k < CPG; k++)
        for (int t = 0; t < 9; t++)
            for (int o = 0; o < CPG; o++) {
                int oc = gr * CPG + (bwd ? k : o), ic = bwd ? o : k;
                V[(((size_t)gr * CPG + k) * 9 + t) * CPG + o] =
                    w[((size_t)oc * CPG + ic) * 9 + (bwd ? 8 - t : t)];
            }
}

void ISA(iabn_conv_rows)(const iabn_conv_geom *g, iabn_conv_pass pass, int threads,
                         const float *src, const float *w, const float *bias, float *dst,
                         float *scratch)
{
    int h = g->h_in, wd = g->w_in, nb = g->c_in / BLK;
    float *V = scratch, *bufs = scratch + iabn_conv_round16((size_t)g->c_in * CPG * 9);
    int bwd = pass == IABN_CONV_BWD_DATA;
    if (bwd) bias = NULL;
    size_t ps = plane_floats(h), plane = (size_t)h * wd * BLK;
    long items = (long)g->n * nb;
#pragma omp parallel num_threads(threads)
    {
        float *pk = bufs + thread_floats(h, pass) * (size_t)iabn_conv_tid();
        float *st = pk + iabn_conv_round16(BLK * ps);
#pragma omp for schedule(static)
        for (int gr = 0; gr < g->c_in / CPG; gr++) pack_weights(gr, bwd, w, V);
#pragma omp for schedule(static)
        for (long it = 0; it < items; it++) {
            int b = (int)(it % nb);
            size_t nx = it + 1 < items ? (size_t)it + 1 : (size_t)it;
            size_t lines = plane / 16, tiles = GPB * (size_t)((h + RT - 1) / RT);
            ahead a = {src + nx * plane, dst + nx * plane, 0, lines, 0,
                       (lines + tiles - 1) / tiles};
            pack_block(src + (size_t)it * plane, h, wd, 1, pk);
            for (int gi = 0; gi < GPB; gi++) {
                int gr = b * GPB + gi;
                run_group(pk + (size_t)gi * CPG * ps, ps, V + (size_t)gr * CPG * 9 * CPG,
                          bias ? bias + gr * CPG : NULL, st + (size_t)gi * CPG * h * RW, h, wd,
                          &a);
            }
            unpack_block(st, h, wd, dst + (size_t)it * plane);
        }
    }
}
#endif

#if BLK == 16 /* the weight pass: 16 lanes only */
/* Lanes k .. 15 of a, then lanes 0 .. k - 1 of b. */
#if SIMD_NATIVE
#define shift_in(a, b, k)                                                                       \
    _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(b), _mm512_castps_si512(a), k))
#else
static inline vf shift_in(vf a, vf b, int k)
{
    vf r;
    for (int l = 0; l < BLK; l++) r.f[l] = l + k < BLK ? a.f[l + k] : b.f[l + k - BLK];
    return r;
}
#endif

/* The weight pass, one (group, input channel k, row tap kh) of one image:
 * S[o][kw] += dy(o) row i times x(k) row i + kh shifted by kw, over the
 * rows, lane by lane (lanes past the row: dy's zeros).  S: [o][kw][16],
 * from zero where `first`. */
ALWAYS_INLINE void wtile(const float *xk, const float *dyg, size_t ps, int h, int kh, float *S,
                         int first)
{
    vf a[CPG][3];
    UNROLL(8)
    for (int o = 0; o < CPG; o++)
        UNROLL(3)
        for (int kw = 0; kw < 3; kw++) a[o][kw] = first ? vzero() : vld(S + (o * 3 + kw) * BLK);
    vf x0 = vld(xk + (size_t)kh * BLK);
    for (int i = 0; i < h; i++) {
        /* the row shifted by 1 and 2 from it and the next row, read aligned */
        vf nx = vld(xk + (size_t)(i + kh + 1) * BLK), x1 = shift_in(x0, nx, 1),
           x2 = shift_in(x0, nx, 2);
        UNROLL(8)
        for (int o = 0; o < CPG; o++) {
            vf d = vld(dyg + o * ps + (size_t)(i + 1) * BLK);
            a[o][0] = vfma(d, x0, a[o][0]);
            a[o][1] = vfma(d, x1, a[o][1]);
            a[o][2] = vfma(d, x2, a[o][2]);
        }
        x0 = nx;
    }
    UNROLL(8)
    for (int o = 0; o < CPG; o++)
        UNROLL(3)
        for (int kw = 0; kw < 3; kw++) vst(S + (o * 3 + kw) * BLK, a[o][kw]);
}

/* Each of block b's WSUMS vector sums summed over its lanes, in lane order,
 * added to dw. */
static void wsums_to_dw(const float *S, int b, float *dw)
{
    float tot[WSUMS];
    for (int q = 0; q < WSUMS; q += 16) {
        float *sum = tot + q;
#if SIMD_NATIVE
        vf r[16];
        for (int i = 0; i < 16; i++) r[i] = vld(S + (size_t)(q + i) * BLK);
        transpose16(r); /* r[j] lane i: sum q + i's lane j */
        vf acc = r[0];
        for (int j = 1; j < 16; j++) acc = vadd(acc, r[j]);
        vst(sum, acc);
#else
        for (int i = 0; i < 16; i++) {
            const float *v = S + (size_t)(q + i) * RW;
            float acc = v[0];
            for (int j = 1; j < RW; j++) acc += v[j];
            sum[i] = acc;
        }
#endif
    }
    const float *t = tot; /* [group][k][kh][o][kw] */
    for (int gi = 0; gi < GPB; gi++)
        for (int k = 0; k < CPG; k++)
            for (int kh = 0; kh < 3; kh++)
                for (int o = 0; o < CPG; o++, t += 3) {
                    float *d = dw + ((size_t)(b * BLK + gi * CPG + o) * CPG + k) * 9 + kh * 3;
                    d[0] += t[0];
                    d[1] += t[1];
                    d[2] += t[2];
                }
}

void ISA(iabn_conv_rows_bwd_filter)(const iabn_conv_geom *g, int threads, const float *x,
                                    const float *dy, float *dw, float *dbias, float *scratch)
{
    int h = g->h_in, wd = g->w_in, nb = g->c_in / BLK;
    size_t ps = plane_floats(h), plane = (size_t)h * wd * BLK;
    size_t planes = iabn_conv_round16(BLK * ps), pixels = (size_t)h * wd, lines = plane / 16;
#pragma omp parallel num_threads(threads)
    {
        float *xp = scratch + thread_floats(h, IABN_CONV_BWD_FILTER) * (size_t)iabn_conv_tid();
        float *dp = xp + planes, *S = dp + planes;
#pragma omp for schedule(static)
        for (int b = 0; b < nb; b++) {
            for (int n = 0; n < g->n; n++) {
                size_t off = ((size_t)n * nb + b) * plane;
                /* the next item in this thread's order: the next image, or
                 * the next block's first */
                size_t nx = n + 1 < g->n ? off + (size_t)nb * plane
                            : b + 1 < nb ? (size_t)(b + 1) * plane
                                         : off;
                ahead a = {x + nx, dy + nx, 1, lines, 0, (lines + 47) / 48};
                pack_block(x + off, h, wd, 1, xp);
                pack_block(dy + off, h, wd, 0, dp);
                for (int gi = 0; gi < GPB; gi++)
                    for (int k = 0; k < CPG; k++)
                        for (int kh = 0; kh < 3; kh++) {
                            fetch_ahead(&a);
                            wtile(xp + (size_t)(gi * CPG + k) * ps, dp + (size_t)gi * CPG * ps, ps,
                                  h, kh, S + (size_t)((gi * CPG + k) * 3 + kh) * CPG * 3 * RW,
                                  n == 0);
                        }
            }
            wsums_to_dw(S, b, dw);
            if (dbias)
                iabn_conv_bias_grad_blocked(g->n, g->c_out, pixels, BLK, dy, dbias, b, b + 1);
        }
    }
}
#endif
