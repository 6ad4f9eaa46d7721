/* cpu/conv_wgrad.c: the hand-written weight pass of dense convolutions
 * (groups 1) on blocked activations, where it replaces oneDNN's: 1x1 convs
 * on nChw8c (AVX2 CPUs) and on nChw16c (AVX-512 CPUs), and k x k convs
 * (3x3, dilated or strided too) on nChw16c (AVX-512 CPUs).
 *
 * The pass is a GEMM over the output pixels k = (image, pixel), one per
 * tap (kh, kw) of the kernel:
 *     dw[co][ci][tap] += sum_k dy[k][co] * x[k shifted by the tap][ci].
 * On nChwBc (B = BLK, 8 or 16) both operands come packed the way a GEMM
 * micro-kernel wants them: x's block of B input channels at a pixel is one
 * vector, and dy's B output channels at k are B consecutive floats to
 * broadcast.  A tile keeps 3 input blocks (vectors) x NO output channels
 * (broadcasts) in 3 x NO accumulators.  Per pixel: 3 vector loads, NO
 * broadcasts, 3 x NO FMAs.  NO is 4 with 8 lanes (16 registers with the 3
 * source vectors and a broadcast) and 8 with 16 (28 of 32).
 *
 * 1x1 (one tap, no padding): the accumulators are rows of dw in OIHW, so
 * the tiles store them as they are, with no weight reorder.  The pixels go
 * in chunks of KC (x's 3 blocks of a chunk stay near the core while the
 * tile sweeps the thread's output channels), each chunk adding into dw.  A
 * strided conv first gathers the pixels it reads into its scratch, and
 * runs as a stride-1 one on them.
 *
 * k x k: a tap reads x shifted, and only the output pixels whose input
 * lies inside the map (so the padding costs nothing: DeepLab's ASPP, whose
 * dilated taps mostly read padding); a row of outputs is one run of pixels
 * per tap.  In OIHW the taps are dw's innermost dimension, so an
 * accumulator (B input channels of one tap) is not a row of dw: the sums go
 * to the thread's scratch as [co][tap][ci] and are added into dw at the
 * end, each run of B input channels as `taps` gathered vectors.  The thread
 * works in groups of output channels x a range of input channels whose
 * sums fit SG_BYTES (the L2's share), shaped so that it reads the fewest
 * bytes of x (once per group of output channels) and dy (once per range of
 * input channels): per tile of NO over all input channels, the ASPP's
 * weight pass read x 16 times per thread and took 4x its time now.
 *
 * Each dw element sums its pixels in order (chunk by chunk, tap by tap),
 * whatever the threads (they split the output channels) and the build of a
 * lane count (AVX2 or AVX-512, or the portable structs of cpu/simd.h): the
 * same bits.  docs/CPU.md ("AVX2 CPUs", "The hand-written weight pass with
 * AVX-512") has the measurements.
 */
#include "tensor/cpu/conv_impl.h"

#include "iabn_config.h"

#include <string.h>

#if defined(IABN_DIRECT_AVX512)
#define IABN_WGRAD_LANES 16
#elif !defined(IABN_WGRAD_LANES)
#define IABN_WGRAD_LANES 8
#endif
#define SIMD_LANES IABN_WGRAD_LANES
#include "tensor/cpu/simd.h"

#define BLK IABN_WGRAD_LANES
#if BLK == 16
#define LAYOUT IABN_LAYOUT_NCHW16C
#define NO 8 /* output channels per tile: 3 x 8 accumulators of 32 registers */
#else
#define LAYOUT IABN_LAYOUT_NCHW8C
#define NO 4 /* 3 x 4 of 16 */
#endif
/* 1x1: output pixels per chunk.  A tile sums a chunk, then the next,
 * loading and storing its dw rows again each time.  With 8 lanes 400 was
 * best of 128-800 on ResNeXt-101's convs.  With 16, 1600 (x's 3 blocks of
 * a chunk: 300 KiB, in L2) beat 400 in a harness by 1-4 points of peak on
 * 14x14 maps and 6 on 56x56 with warm operands; with cold ones -1.5 to +1
 * and 5 (docs/CPU.md). */
#if BLK == 16
#define KC 1600
#else
#define KC 400
#endif
#define KXK_KC 400 /* k x k: output pixels (whole rows) per chunk, both lane counts */
/* dy's pixels prefetched this far ahead in a tile (16 lanes; not measured
 * with 8): a tile reads half of each of dy's lines, in runs of one image's
 * pixels, and waited on memory.  On operands fresh from memory 16 pixels
 * ahead gave ResNeXt's 1x1 weight passes 2-12 points of peak; warm, -3 to
 * +7.  The k x k pass runs the same tile; its bench rows did not move
 * (docs/CPU.md). */
#if BLK == 16
#define DY_AHEAD 16
#else
#define DY_AHEAD 0
#endif
#define MAX_TAPS 16            /* k x k: kh * kw and kw at most this */
#define SG_BYTES (256 * 1024) /* k x k: a group's sums */

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* The builds: the library's (8 lanes, no suffix; AVX2 in release builds),
 * its AVX-512 one (IABN_DIRECT_AVX512: 16 lanes, entry points ending in
 * _avx512), and test_conv_wgrad's portable copies (IABN_WGRAD_SFX and
 * IABN_WGRAD_LANES set) that hold a build to the same bits. */
#if defined(IABN_DIRECT_AVX512)
#define IABN_WGRAD_SFX _avx512
#elif !defined(IABN_WGRAD_SFX)
#define IABN_WGRAD_SFX
#define LIBRARY_BUILD 1 /* its _takes, _scratch, _bwd_filter also send nChw16c on */
#endif
#ifndef LIBRARY_BUILD
#define LIBRARY_BUILD 0
#endif
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define ENTRY(name) CAT(name, IABN_WGRAD_SFX)

/* One tap and no padding: the 1x1 kernel (dw rows stored as they are). */
static int one_tap(const iabn_conv_geom *g) { return g->kh * g->kw == 1 && g->pad == 0; }

int ENTRY(iabn_conv_wgrad_geometry)(const iabn_conv_geom *g)
{
    return g->groups == 1 && g->c_in % BLK == 0 && g->c_out % BLK == 0 &&
           g->x_layout == LAYOUT && g->y_layout == LAYOUT && g->kh * g->kw <= MAX_TAPS &&
           g->kw <= MAX_TAPS;
}

#if LIBRARY_BUILD
/* 1x1: nChw8c where this build is native (AVX2); nChw16c where the CPU has
 * AVX-512 (with dy prefetched, on 28x28 and 56x56 maps too: those rows of a
 * ResNeXt-101 step took 0.89x-0.99x oneDNN's time).  k x k: nChw16c where
 * the CPU has AVX-512, unless the pass runs oneDNN's Winograd (1.1x-2.4x
 * oneDNN's direct weight pass in WideResNet-38 and DeepLabV3 steps, 4x its
 * GEMM fallback on the ASPP; not measured on an AVX2 CPU, where oneDNN
 * keeps it).  docs/CPU.md. */
int iabn_conv_wgrad_takes(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    if (pass != IABN_CONV_BWD_FILTER) return 0;
    if (iabn_conv_wgrad_geometry(g)) return SIMD_NATIVE && one_tap(g);
#if IABN_HAVE_DIRECT_AVX512
    if (!iabn_conv_direct_avx512() || !iabn_conv_wgrad_geometry_avx512(g)) return 0;
    return one_tap(g) || !iabn_conv_dnnl_winograd(g, pass);
#else
    return 0;
#endif
}
#endif

#if LIBRARY_BUILD && IABN_HAVE_DIRECT_AVX512
/* Whether g's operands are nChw16c, for the AVX-512 build. */
static int wide(const iabn_conv_geom *g) { return g->x_layout == IABN_LAYOUT_NCHW16C; }
#endif

/* acc[b][j] += x block b at the len pixels from xp (xs floats apart) x dy
 * channel j at the pixels from dp, for nb (1 to 3, a constant where inlined)
 * blocks xbs floats apart.  The accumulators are an array indexed by
 * constants only, so GCC keeps them in registers. */
ALWAYS_INLINE void run(int nb, vf a[3][NO], const float *xp, const float *dp, int len,
                       size_t xs, size_t xbs)
{
    for (int i = 0; i < len; i++, xp += xs, dp += BLK) {
        if (DY_AHEAD) __builtin_prefetch(dp + DY_AHEAD * BLK);
        vf x0 = vld(xp), x1 = x0, x2 = x0;
        VKEEP(x0);
        if (nb > 1) { x1 = vld(xp + xbs); VKEEP(x1); }
        if (nb > 2) { x2 = vld(xp + 2 * xbs); VKEEP(x2); }
        /* output channel j (a broadcast of dy) against the nb input blocks */
#pragma GCC unroll 8
        for (int j = 0; j < NO; j++) {
            vf b = vbcast(dp + j);
            a[0][j] = vfma(x0, b, a[0][j]);
            if (nb > 1) a[1][j] = vfma(x1, b, a[1][j]);
            if (nb > 2) a[2][j] = vfma(x2, b, a[2][j]);
        }
    }
}

/* The tile's sums in from w (row j at w + j*l, block b at + b*BLK) and
 * back out. */
ALWAYS_INLINE void acc_load(int nb, vf a[3][NO], const float *w, size_t l)
{
#pragma GCC unroll 8
    for (int j = 0; j < NO; j++) {
        a[0][j] = vld(w + j * l);
        a[1][j] = nb > 1 ? vld(w + j * l + BLK) : a[0][j];
        a[2][j] = nb > 2 ? vld(w + j * l + 2 * BLK) : a[0][j];
    }
}

ALWAYS_INLINE void acc_store(int nb, vf a[3][NO], float *w, size_t l)
{
#pragma GCC unroll 8
    for (int j = 0; j < NO; j++) {
        vst(w + j * l, a[0][j]);
        if (nb > 1) vst(w + j * l + BLK, a[1][j]);
        if (nb > 2) vst(w + j * l + 2 * BLK, a[2][j]);
    }
}

/* ---- 1x1 ---- */

typedef struct dims {
    int hw;     /* output pixels per image (x's: strided convs read the gathered copy) */
    int cb, ob; /* blocks of BLK input / output channels      */
    size_t ldw; /* c_in: dw's row                             */
} dims;

/* dw[co .. co+NO][cb*BLK .. cb*BLK + BLK*nb] += the pixels [k0, k1). */
ALWAYS_INLINE void tile(int nb, const dims *d, const float *x, const float *dy, float *dw,
                        int cb, int co, int k0, int k1)
{
    float *w = dw + (size_t)co * d->ldw + (size_t)cb * BLK;
    vf a[3][NO];
    acc_load(nb, a, w, d->ldw);
    size_t xbs = (size_t)d->hw * BLK; /* from one input block to the next */
    for (int k = k0; k < k1;) {
        int n = k / d->hw, p = k - n * d->hw;
        int len = d->hw - p < k1 - k ? d->hw - p : k1 - k;
        const float *xp = x + (((size_t)n * d->cb + cb) * d->hw + p) * BLK;
        const float *dp = dy + (((size_t)n * d->ob + co / BLK) * d->hw + p) * BLK + co % BLK;
        run(nb, a, xp, dp, len, BLK, xbs);
        k += len;
    }
    acc_store(nb, a, w, d->ldw);
}

/* One function per width, not inlined into the loops below: inlined, the
 * loops' own variables left the tile too few registers, and GCC spilled a
 * source vector and reloaded two strides from the stack on every pixel. */
#define TILE_FN(nb)                                                                        \
    static __attribute__((noinline)) void tile##nb(const dims *d, const float *x,          \
                                                   const float *dy, float *dw, int cb,     \
                                                   int co, int k0, int k1)                 \
    {                                                                                      \
        tile(nb, d, x, dy, dw, cb, co, k0, k1);                                            \
    }
TILE_FN(1)
TILE_FN(2)
TILE_FN(3)

/* Output channel blocks [ob0, ob1) of dw, all pixels. */
static void rows(const dims *d, int K, const float *x, const float *dy, float *dw, int ob0,
                 int ob1)
{
    for (int k0 = 0; k0 < K;) {
        int k1 = K - k0 < KC + KC / 2 ? K : k0 + KC; /* no short last chunk */
        for (int cb = 0; cb < d->cb; cb += 3) {
            int nb = d->cb - cb < 3 ? d->cb - cb : 3;
            for (int co = ob0 * BLK; co < ob1 * BLK; co += NO) {
                /* the next tile's dw rows, on their way while this one
                 * runs (in a training step dw is cold, and a tile's first
                 * loads would wait on memory: 2-5% with 16 lanes; with 8
                 * no steady gain, on 2026-11-28) */
                for (int j = 0; BLK == 16 && co + NO < ob1 * BLK && j < NO; j++) {
                    const float *q = dw + (size_t)(co + NO + j) * d->ldw + (size_t)cb * BLK;
                    for (int b = 0; b < nb; b++) __builtin_prefetch(q + b * BLK, 1);
                }
                if (nb == 3) tile3(d, x, dy, dw, cb, co, k0, k1);
                else if (nb == 2) tile2(d, x, dy, dw, cb, co, k0, k1);
                else tile1(d, x, dy, dw, cb, co, k0, k1);
            }
        }
        k0 = k1;
    }
}

/* x at the pixels a strided conv reads, packed as a stride-1 conv's input
 * (nChwBc, h_out x w_out), so that the tiles read consecutive pixels: with
 * the copy, ResNeXt's downsampling 1x1 convs ran 1.05x-1.65x oneDNN, and
 * reading every other pixel in the tiles 0.8x-0.95x (nChw8c; docs/CPU.md). */
static void gather(const iabn_conv_geom *g, const float *x, float *xc)
{
    long planes = (long)g->n * (g->c_in / BLK);
    size_t hwi = (size_t)g->h_in * g->w_in, hwo = (size_t)g->h_out * g->w_out;
#pragma omp for schedule(static)
    for (long pl = 0; pl < planes; pl++)
        for (int oh = 0; oh < g->h_out; oh++) {
            const float *src = x + (size_t)pl * hwi * BLK + (size_t)oh * g->stride * g->w_in * BLK;
            float *dst = xc + (size_t)pl * hwo * BLK + (size_t)oh * g->w_out * BLK;
            for (int ow = 0; ow < g->w_out; ow++)
                vst(dst + (size_t)ow * BLK, vld(src + (size_t)ow * g->stride * BLK));
        }
}

/* ---- k x k ---- */

typedef struct kdims {
    const iabn_conv_geom *g;
    int cb, ob, taps;
    size_t xbs;                       /* from one input block of x to the next */
    int olo[MAX_TAPS], ohi[MAX_TAPS]; /* per kw: the outputs whose input is inside the row */
} kdims;

/* A group's sums: output channels [co0, co1) x taps x input channels
 * [ci0, ci0 + r), the taps r apart, an output channel l = taps * r apart. */
typedef struct ksums {
    float *s;
    int co0, co1, ci0, r;
    size_t l;
} ksums;

/* sums[co .. co + NO][tap][input blocks cb .. cb + nb] += output rows
 * [r0, r1) (row r: image r / h_out, row r % h_out) of tap (kh, kw). */
ALWAYS_INLINE void ktile(int nb, const kdims *d, const float *x, const float *dy,
                         const ksums *k, int cb, int co, int kh, int kw, int r0, int r1)
{
    const iabn_conv_geom *g = d->g;
    float *w = k->s + (size_t)(co - k->co0) * k->l + (size_t)(kh * g->kw + kw) * k->r +
               ((size_t)cb * BLK - k->ci0);
    vf a[3][NO];
    acc_load(nb, a, w, k->l);
    int olo = d->olo[kw], len = d->ohi[kw] - olo;
    int iw0 = olo * g->stride - g->pad + kw * g->dil;
    size_t hwi = (size_t)g->h_in * g->w_in, hwo = (size_t)g->h_out * g->w_out;
    for (int r = r0; r < r1 && len > 0; r++) {
        int n = r / g->h_out, oh = r - n * g->h_out;
        int ih = oh * g->stride - g->pad + kh * g->dil;
        if (ih < 0 || ih >= g->h_in) continue; /* the row reads padding */
        const float *xp = x + (((size_t)n * d->cb + cb) * hwi + (size_t)ih * g->w_in + iw0) * BLK;
        const float *dp = dy + (((size_t)n * d->ob + co / BLK) * hwo + (size_t)oh * g->w_out + olo) *
                                   BLK + co % BLK;
        run(nb, a, xp, dp, len, (size_t)g->stride * BLK, d->xbs);
    }
    acc_store(nb, a, w, k->l);
}

#define KTILE_FN(nb)                                                                        \
    static __attribute__((noinline)) void ktile##nb(const kdims *d, const float *x,         \
                                                    const float *dy, const ksums *k, int cb, \
                                                    int co, int kh, int kw, int r0, int r1) \
    {                                                                                       \
        ktile(nb, d, x, dy, k, cb, co, kh, kw, r0, r1);                                     \
    }
KTILE_FN(1)
KTILE_FN(2)
KTILE_FN(3)

/* dw[co][ci][tap] += sums[co][tap][ci] over the group: per BLK input
 * channels, `taps` vectors of dw, lane e of vector j from tap (BLK j + e) %
 * taps of channel (BLK j + e) / taps. */
static void kxk_add(const kdims *d, const ksums *k, float *dw)
{
    int T = d->taps;
    vidx tr[MAX_TAPS];
    for (int j = 0; j < T; j++) {
        int ix[BLK];
        for (int e = 0; e < BLK; e++) ix[e] = ((BLK * j + e) % T) * k->r + (BLK * j + e) / T;
        tr[j] = vidx_make(ix);
    }
    for (int co = k->co0; co < k->co1; co++) {
        float *wr = dw + ((size_t)co * d->g->c_in + k->ci0) * T;
        const float *sr = k->s + (size_t)(co - k->co0) * k->l;
        for (int c = 0; c < k->r; c += BLK)
            for (int j = 0; j < T; j++) {
                float *q = wr + (size_t)c * T + (size_t)j * BLK;
                vst(q, vadd(vld(q), vgather(sr + c, tr[j])));
            }
    }
}

/* The group's sums over all pixels, then added into dw. */
static void kxk_group(const kdims *d, const float *x, const float *dy, float *dw,
                      const ksums *k)
{
    const iabn_conv_geom *g = d->g;
    memset(k->s, 0, sizeof(float) * (size_t)(k->co1 - k->co0) * k->l);
    int R = g->n * g->h_out, rc = KXK_KC / g->w_out > 1 ? KXK_KC / g->w_out : 1;
    int cb0 = k->ci0 / BLK, cb1 = (k->ci0 + k->r) / BLK;
    for (int r0 = 0; r0 < R;) {
        int r1 = R - r0 < rc + rc / 2 ? R : r0 + rc; /* no short last chunk */
        for (int co = k->co0; co < k->co1; co += NO)
            for (int cb = cb0; cb < cb1;) {
                /* tiles of 3 blocks, the last 4 as 2 + 2 rather than 3 + 1
                 * (a 1-block tile does 8 broadcasts per 8 FMAs: the 64-channel
                 * cases gained 2-3%) */
                int left = cb1 - cb, nb = left == 4 ? 2 : left < 3 ? left : 3;
                for (int kh = 0; kh < g->kh; kh++)
                    for (int kw = 0; kw < g->kw; kw++) {
                        if (nb == 3) ktile3(d, x, dy, k, cb, co, kh, kw, r0, r1);
                        else if (nb == 2) ktile2(d, x, dy, k, cb, co, kh, kw, r0, r1);
                        else ktile1(d, x, dy, k, cb, co, kh, kw, r0, r1);
                    }
                cb += nb;
            }
        r0 = r1;
    }
    kxk_add(d, k, dw);
}

/* A group's shape for a thread with co_t output channels: *r input
 * channels (a multiple of 3 blocks, or all) x *gc output channels (whole
 * tiles of NO) whose sums fit SG_BYTES.  The thread reads x once per group
 * of output channels and its dy once per range of input channels: the
 * shape that reads the fewest bytes.  Summing all input channels at once,
 * DeepLabV3's ASPP (4096 in, 256 out) read x 16 times per thread. */
static void kxk_shape(const iabn_conv_geom *g, int co_t, int *gc, int *r)
{
    int taps = g->kh * g->kw;
    double xb = (double)g->n * g->c_in * g->h_in * g->w_in;
    double yb = (double)g->n * co_t * g->h_out * g->w_out;
    double best = -1;
    *gc = NO;
    *r = g->c_in;
    if (co_t < 1) return; /* a thread with no output channels */
    for (int ri = 3 * BLK;; ri += 3 * BLK) {
        int rr = ri < g->c_in ? ri : g->c_in;
        long n = SG_BYTES / ((long)taps * rr * (long)sizeof(float) * NO);
        if (n < 1 && ri > 3 * BLK) break; /* nor do larger ranges fit */
        int gg = (int)(n < 1 ? 1 : n) * NO;
        if (gg > co_t) gg = (co_t + NO - 1) / NO * NO;
        double t = xb * ((co_t + gg - 1) / gg) + yb * ((g->c_in + rr - 1) / rr);
        if (best < 0 || t <= best) {
            best = t;
            *gc = gg;
            *r = rr;
        }
        if (rr == g->c_in) break;
    }
}

/* Floats of one thread's sums for co_t output channels. */
static size_t kxk_sums(const iabn_conv_geom *g, int co_t)
{
    int gc, r;
    kxk_shape(g, co_t, &gc, &r);
    return iabn_conv_round16((size_t)gc * g->kh * g->kw * r);
}

/* The output channels of thread t of T: whole blocks (dw rows apart). */
static void kxk_share(const iabn_conv_geom *g, int t, int T, int *ob0, int *ob1)
{
    *ob0 = (int)((long)(g->c_out / BLK) * t / T);
    *ob1 = (int)((long)(g->c_out / BLK) * (t + 1) / T);
}

static size_t kxk_scratch(const iabn_conv_geom *g, int threads)
{
    size_t most = 0;
    for (int t = 0; t < threads; t++) {
        int ob0, ob1;
        kxk_share(g, t, threads, &ob0, &ob1);
        size_t f = kxk_sums(g, (ob1 - ob0) * BLK);
        if (f > most) most = f;
    }
    return most * threads;
}

static void kxk_bwd_filter(const iabn_conv_geom *g, int threads, const float *x,
                           const float *dy, float *dw, float *dbias, float *scratch)
{
    kdims d;
    d.g = g;
    d.cb = g->c_in / BLK;
    d.ob = g->c_out / BLK;
    d.taps = g->kh * g->kw;
    d.xbs = (size_t)g->h_in * g->w_in * BLK;
    for (int kw = 0; kw < g->kw; kw++) {
        int off = kw * g->dil - g->pad; /* input column of output 0 */
        int lo = 0, hi = g->w_out;
        while (lo < hi && lo * g->stride + off < 0) lo++;
        while (hi > lo && (hi - 1) * g->stride + off >= g->w_in) hi--;
        d.olo[kw] = lo;
        d.ohi[kw] = hi;
    }
    if (threads < 1) threads = 1;
    size_t per = kxk_scratch(g, threads) / threads;
#pragma omp parallel num_threads(threads)
    {
        int t = iabn_conv_tid(), T = iabn_conv_team();
        int ob0, ob1, gc, r;
        kxk_share(g, t, T, &ob0, &ob1);
        int co_end = ob1 * BLK;
        kxk_shape(g, co_end - ob0 * BLK, &gc, &r);
        ksums k = {scratch + per * t, 0, 0, 0, 0, 0};
        for (k.ci0 = 0; k.ci0 < g->c_in; k.ci0 += r) {
            k.r = g->c_in - k.ci0 < r ? g->c_in - k.ci0 : r;
            k.l = (size_t)d.taps * k.r;
            for (k.co0 = ob0 * BLK; k.co0 < co_end; k.co0 += gc) {
                k.co1 = k.co0 + gc < co_end ? k.co0 + gc : co_end;
                kxk_group(&d, x, dy, dw, &k);
            }
        }
        if (dbias)
            iabn_conv_bias_grad_blocked(g->n, g->c_out, (size_t)g->h_out * g->w_out, BLK, dy,
                                        dbias, ob0, ob1);
    }
}

/* ---- entry points ---- */

size_t ENTRY(iabn_conv_wgrad_scratch)(const iabn_conv_geom *g, int threads)
{
#if LIBRARY_BUILD && IABN_HAVE_DIRECT_AVX512
    if (wide(g)) return iabn_conv_wgrad_scratch_avx512(g, threads);
#endif
    if (threads < 1) threads = 1;
    if (!one_tap(g)) return kxk_scratch(g, threads);
    return g->stride == 1 ? 0
                          : iabn_conv_round16((size_t)g->n * g->c_in * g->h_out * g->w_out);
}

void ENTRY(iabn_conv_wgrad_bwd_filter)(const iabn_conv_geom *g, int threads, const float *x,
                                       const float *dy, float *dw, float *dbias, float *scratch)
{
#if LIBRARY_BUILD && IABN_HAVE_DIRECT_AVX512
    if (wide(g)) {
        iabn_conv_wgrad_bwd_filter_avx512(g, threads, x, dy, dw, dbias, scratch);
        return;
    }
#endif
    if (!one_tap(g)) {
        kxk_bwd_filter(g, threads, x, dy, dw, dbias, scratch);
        return;
    }
    dims d = {g->h_out * g->w_out, g->c_in / BLK, g->c_out / BLK, (size_t)g->c_in};
    int K = g->n * d.hw;
    const float *xs = g->stride == 1 ? x : scratch; /* what the tiles read */
    if (threads < 1) threads = 1;
#pragma omp parallel num_threads(threads)
    {
        int t = iabn_conv_tid(), T = iabn_conv_team();
        if (g->stride != 1) gather(g, x, scratch); /* its loop ends in a barrier */
        /* whole blocks of output channels per thread: dw rows apart */
        int ob0 = (int)((long)d.ob * t / T), ob1 = (int)((long)d.ob * (t + 1) / T);
        rows(&d, K, xs, dy, dw, ob0, ob1);
        if (dbias)
            iabn_conv_bias_grad_blocked(g->n, g->c_out, (size_t)d.hw, BLK, dy, dbias, ob0, ob1);
    }
}
