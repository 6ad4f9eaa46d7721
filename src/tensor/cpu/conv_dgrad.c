/* cpu/conv_dgrad.c: the hand-written data pass of dense 1x1 convs (groups 1,
 * stride 1, no padding) on nChw16c, on AVX-512 CPUs, where it replaces
 * oneDNN's: the weights are read in OIHW as they are, with no copy into
 * oneDNN's 16 x 16 blocks.
 *
 * The pass is a GEMM over the output channels o:
 *     dx[pixel][ci] = sum_o dy[pixel][o] * w[o][ci].
 * A row of w in OIHW holds the input channels in order, so 16 of them are
 * one vector; on nChw16c dy's 16 channels at a pixel are 16 consecutive
 * floats to broadcast.  A tile keeps NP pixels x NB input blocks in NP x NB
 * accumulators (6 x 4 = 24 of 32 registers); per output channel: NB vector
 * loads, NP broadcasts, NP x NB FMAs.  It is the weight pass's tile
 * (cpu/conv_wgrad.c) with the pixels and the output channels swapped.
 *
 * Blocking: the threads split the tiles, which run over the batch's pixels
 * in order, from one image into the next (each pixel of a tile has its own
 * pointers): a tile per image's last few pixels left 7x7 maps with one
 * tile of one pixel in nine, 0.92x-0.99x oneDNN at batch 16.  The output
 * channels go in runs of KB blocks: for each run and each group of NB input
 * blocks, a thread sweeps its tiles with the run's weights for the group
 * (KB x 16 rows of NB x 16 floats: 128 KiB, in L2), adding into dx; a run
 * starts from the sums of the runs before it (the first from zero).  Every
 * dx element thus sums its output channels in order, in one FMA chain,
 * whatever the threads or the run length: the same bits.  Without the runs
 * (each tile over all output channels) the weights of ResNeXt-101's mod5
 * (8 MiB) came from memory again for every chunk of tiles: 0.62x-0.90x
 * oneDNN.  dy is prefetched PF_AHEAD pixels ahead: a tile reads NP lines of
 * each output block, and the blocks lie a map (h x w x 64 bytes) apart, a
 * stride the hardware prefetcher does not follow.  The next group's weights
 * are prefetched into L2 while a group runs, a share after each tile: in a
 * step they come cold from memory (the SGD step wrote them last), and each
 * group's first tiles waited on them (7x7 maps, whose mod5 weights are the
 * largest, ran 0.90x-0.97x the time with it in a harness).  docs/CPU.md
 * ("The 1x1 data pass with AVX-512") has the measurements.
 */
#include "tensor/cpu/conv_impl.h"

#include "iabn_config.h"

/* Where the path takes it: up to 784 pixels a call (4 images of 14x14,
 * 16 of 7x7), where oneDNN's copy of the weights weighs most.  There the
 * kernel ran 1.01x-1.18x as fast as oneDNN with its copy (a harness, cold
 * operands, ResNeXt's shapes at batch 1, 2, 4 and 16, each build's best
 * over the rounds); at 1568 pixels (batch 8 at 14x14) 0.96x-1.07x; at 3136
 * and more 0.85x-1.01x in a ResNeXt-50 step at batch 16, and about even in
 * a ResNeXt-101 step at batch 4.  oneDNN keeps those. */
#define MAX_PIXELS 784

/* The builds: the library's (the rule only), its AVX-512 one
 * (IABN_DIRECT_AVX512: the kernel, entry points ending in _avx512), and
 * test_conv_dgrad's portable copy (IABN_DGRAD_SFX set: cpu/simd.h's float
 * structs, the same bits), which the builds without the AVX-512 kernels
 * (the sanitizer build) test too. */
#if defined(IABN_DIRECT_AVX512)
#define IABN_DGRAD_SFX _avx512
#endif

#if !defined(IABN_DGRAD_SFX) /* the library's build: the rule only */

int iabn_conv_dgrad_takes(const iabn_conv_geom *g, iabn_conv_pass pass)
{
#if IABN_HAVE_DIRECT_AVX512
    return pass == IABN_CONV_BWD_DATA && iabn_conv_direct_avx512() &&
           iabn_conv_dgrad_geometry_avx512(g) && (long)g->n * g->h_out * g->w_out <= MAX_PIXELS;
#else
    (void)g;
    (void)pass;
    return 0;
#endif
}

#else /* the kernel */

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define ENTRY(name) CAT(name, IABN_DGRAD_SFX)

#define SIMD_LANES 16
#include "tensor/cpu/simd.h"

#define BLK 16
#define NP 6        /* pixels per tile                                    */
#define NB 4        /* input blocks per tile: c_in a multiple of 64       */
#define KB 32       /* output blocks per run (512 channels)               */
#define PF_AHEAD 12 /* dy prefetched this many pixels ahead (two tiles)   */

#define ALWAYS_INLINE static inline __attribute__((always_inline))

int ENTRY(iabn_conv_dgrad_geometry)(const iabn_conv_geom *g)
{
    return g->groups == 1 && g->kh == 1 && g->kw == 1 && g->stride == 1 && g->pad == 0 &&
           g->c_in % (NB * BLK) == 0 && g->c_out % BLK == 0 &&
           g->x_layout == IABN_LAYOUT_NCHW16C && g->y_layout == IABN_LAYOUT_NCHW16C;
}

typedef struct dims {
    int hw;     /* pixels per image (input and output: stride 1) */
    int cb, ob; /* blocks of BLK input / output channels         */
} dims;

/* dx at np consecutive pixels from k0 (counting over the batch: a tile may
 * run from one image into the next), input blocks [ib, ib + NB), plus the
 * output blocks [o0, o1) (from zero where o0 is 0). */
ALWAYS_INLINE void tile(const dims *d, const float *w, const float *dy, float *dx, long k0,
                        int ib, int o0, int o1, const int np)
{
    size_t plane = (size_t)d->hw * BLK, ldw = (size_t)d->cb * BLK;
    const float *dp[NP];
    float *xp[NP];
    for (int j = 0; j < np; j++) {
        long k = k0 + j;
        size_t n = (size_t)(k / d->hw), p = (size_t)(k % d->hw);
        dp[j] = dy + ((n * d->ob + o0) * d->hw + p) * BLK;
        xp[j] = dx + ((n * d->cb + ib) * d->hw + p) * BLK;
    }
    vf a[NP][NB];
    for (int j = 0; j < np; j++)
        for (int b = 0; b < NB; b++) a[j][b] = o0 ? vld(xp[j] + b * plane) : vzero();
    const float *wp = w + (size_t)o0 * BLK * ldw + (size_t)ib * BLK;
    for (int ob = o0; ob < o1; ob++) {
        /* past the batch's last pixel this reads nothing a fault could
         * come from: a prefetch */
        for (int j = 0; j < np; j++) __builtin_prefetch(dp[j] + PF_AHEAD * BLK);
        for (int o = 0; o < BLK; o++, wp += ldw) {
            vf w0 = vld(wp), w1 = vld(wp + BLK), w2 = vld(wp + 2 * BLK), w3 = vld(wp + 3 * BLK);
            VKEEP(w0);
            VKEEP(w1);
            VKEEP(w2);
            VKEEP(w3);
#pragma GCC unroll 6
            for (int j = 0; j < np; j++) {
                vf b = vbcast(dp[j] + o);
                a[j][0] = vfma(w0, b, a[j][0]);
                a[j][1] = vfma(w1, b, a[j][1]);
                a[j][2] = vfma(w2, b, a[j][2]);
                a[j][3] = vfma(w3, b, a[j][3]);
            }
        }
        for (int j = 0; j < np; j++) dp[j] += plane;
    }
    for (int j = 0; j < np; j++)
        for (int b = 0; b < NB; b++) vst(xp[j] + b * plane, a[j][b]);
}

/* One function per tile width, the accumulators in registers (inlined
 * into the loop below, its own variables would crowd them out: the
 * weight pass's finding, cpu/conv_wgrad.c). */
#define TILE_FN(np)                                                                          \
    static __attribute__((noinline)) void tile##np(const dims *d, const float *w,            \
                                                   const float *dy, float *dx, long k0,      \
                                                   int ib, int o0, int o1)                   \
    {                                                                                        \
        tile(d, w, dy, dx, k0, ib, o0, o1, np);                                              \
    }
TILE_FN(1)
TILE_FN(2)
TILE_FN(3)
TILE_FN(4)
TILE_FN(5)
TILE_FN(6)

typedef void (*tile_fn)(const dims *, const float *, const float *, float *, long, int, int, int);

/* The group after (o0, ib) in a thread's sweep: *p its first weight row,
 * the count of its rows' lines (NB 64-byte lines a row); 0 after the last. */
static long next_group(const dims *d, const float *w, int o0, int ib, const float **p)
{
    int nib = ib + NB < d->cb ? ib + NB : 0, no0 = nib ? o0 : o0 + KB;
    if (no0 >= d->ob) return 0;
    *p = w + ((size_t)no0 * BLK * d->cb + nib) * BLK;
    return (long)(d->ob - no0 < KB ? d->ob - no0 : KB) * BLK * NB;
}

/* Lines [l0, l1) of that group's weights, towards L2. */
static inline void prefetch_lines(const dims *d, const float *p, long l0, long l1)
{
    size_t ldw = (size_t)d->cb * BLK;
    for (long l = l0; l < l1; l++)
        __builtin_prefetch(p + (size_t)(l / NB) * ldw + (size_t)(l % NB) * BLK, 0, 2);
}

void ENTRY(iabn_conv_dgrad_bwd_data)(const iabn_conv_geom *g, int threads, const float *dy,
                                     const float *w, float *dx)
{
    static const tile_fn tiles[NP + 1] = {NULL, tile1, tile2, tile3, tile4, tile5, tile6};
    dims d = {g->h_in * g->w_in, g->c_in / BLK, g->c_out / BLK};
    long K = (long)g->n * d.hw, T = (K + NP - 1) / NP;
    if (threads < 1) threads = 1;
#pragma omp parallel num_threads(threads)
    {
        int t = iabn_conv_tid(), nt = iabn_conv_team();
        long t0 = T * t / nt, t1 = T * (t + 1) / nt;
        for (int o0 = 0; o0 < d.ob; o0 += KB) {
            int o1 = d.ob - o0 < KB ? d.ob : o0 + KB;
            for (int ib = 0; ib < d.cb; ib += NB) {
                /* the next group's weights, a share after each tile */
                const float *nw = w;
                long lines = next_group(&d, w, o0, ib, &nw);
                long per = t1 > t0 ? (lines + (t1 - t0) - 1) / (t1 - t0) : 0;
                for (long k = t0; k < t1; k++) {
                    long k0 = k * NP, l0 = (k - t0) * per;
                    tiles[K - k0 < NP ? K - k0 : NP](&d, w, dy, dx, k0, ib, o0, o1);
                    prefetch_lines(&d, nw, l0, l0 + per < lines ? l0 + per : lines);
                }
            }
        }
    }
}

#endif
