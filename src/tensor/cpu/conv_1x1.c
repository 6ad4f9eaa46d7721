/* cpu/conv_1x1.c: the weight pass of 1x1 convolutions (groups 1, no
 * padding) on blocked activations, the hand-written kernel that replaces
 * oneDNN's there: on nChw8c (AVX2 CPUs), and on nChw16c with output maps up
 * to 14x14 (AVX-512 CPUs).  A strided conv first gathers the pixels it
 * reads into its scratch, and runs as a stride-1 one on them.
 *
 * The pass is a GEMM over the output pixels k = (image, pixel):
 *     dw[co][ci] += sum_k dy[k][co] * x[k][ci].
 * On nChwBc (B = BLK, 8 or 16) both operands come packed the way a GEMM
 * micro-kernel wants them: x's block of B input channels at pixel k is one
 * vector, and dy's B output channels at k are B consecutive floats to
 * broadcast.  A tile keeps 3 input blocks (vectors) x NO output channels
 * (broadcasts) in 3 x NO accumulators, which are rows of dw in OIHW: it
 * stores them as they are, with no weight reorder.  Per pixel: 3 vector
 * loads, NO broadcasts, 3 x NO FMAs.  NO is 4 with 8 lanes (16 registers
 * with the 3 source vectors and a broadcast) and 8 with 16 (28 of 32).
 *
 * Blocking: the pixels go in chunks of KC (x's 3 blocks of a chunk, 37 KiB
 * with 8 lanes, stay near the core while the tile sweeps the thread's
 * output channels), each chunk adding into dw.  oneDNN's 1x1 weight pass
 * writes blocked weights that are then added to the OIHW gradient through
 * a reorder; docs/CPU.md ("AVX2 CPUs", and the AVX-512 build under the 1x1
 * convs) has the measurements.
 *
 * Each dw element sums its pixels in order (chunk by chunk, each added to
 * what dw held), whatever the threads (they split the output channels) and
 * the build of a lane count (AVX2 or AVX-512, or the portable structs of
 * cpu/simd.h): the same bits.
 */
#include "tensor/cpu/conv_impl.h"

#include "iabn_config.h"

#include <string.h>

#if defined(IABN_DIRECT_AVX512)
#define IABN_1X1_LANES 16
#elif !defined(IABN_1X1_LANES)
#define IABN_1X1_LANES 8
#endif
#define SIMD_LANES IABN_1X1_LANES
#include "tensor/cpu/simd.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define BLK IABN_1X1_LANES
#if BLK == 16
#define LAYOUT IABN_LAYOUT_NCHW16C
#define NO 8 /* output channels per tile: 3 x 8 accumulators of 32 registers */
#else
#define LAYOUT IABN_LAYOUT_NCHW8C
#define NO 4 /* 3 x 4 of 16 */
#endif
#define KC 400 /* output pixels per chunk (best of 128-800 on ResNeXt-101's with
                * 8 lanes; 160 lost and 400-1600 tied with 16) */

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* The builds: the library's (8 lanes, no suffix; AVX2 in release builds),
 * its AVX-512 one (IABN_DIRECT_AVX512: 16 lanes, entry points ending in
 * _avx512), and test_conv_1x1's portable copies (IABN_1X1_SFX and
 * IABN_1X1_LANES set) that hold a build to the same bits. */
#if defined(IABN_DIRECT_AVX512)
#define IABN_1X1_SFX _avx512
#elif !defined(IABN_1X1_SFX)
#define IABN_1X1_SFX
#define LIBRARY_BUILD 1 /* its _takes, _scratch, _bwd_filter also send nChw16c on */
#endif
#ifndef LIBRARY_BUILD
#define LIBRARY_BUILD 0
#endif
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define ENTRY(name) CAT(name, IABN_1X1_SFX)

int ENTRY(iabn_conv_1x1_geometry)(const iabn_conv_geom *g)
{
    return g->groups == 1 && g->kh == 1 && g->kw == 1 && g->pad == 0 && g->c_in % BLK == 0 &&
           g->c_out % BLK == 0 && g->x_layout == LAYOUT && g->y_layout == LAYOUT;
}

#if LIBRARY_BUILD
/* nChw8c where this build is native (AVX2); nChw16c on output maps up to
 * 14x14 where the CPU has AVX-512.  On larger maps oneDNN's weight pass
 * runs as fast or faster inside a ResNeXt-101 step (docs/CPU.md). */
int iabn_conv_1x1_takes(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    if (pass != IABN_CONV_BWD_FILTER) return 0;
    if (iabn_conv_1x1_geometry(g)) return SIMD_NATIVE;
#if IABN_HAVE_DIRECT_AVX512
    return iabn_conv_direct_avx512() && iabn_conv_1x1_geometry_avx512(g) &&
           (long)g->h_out * g->w_out <= 14 * 14;
#else
    return 0;
#endif
}
#endif

#if LIBRARY_BUILD && IABN_HAVE_DIRECT_AVX512
/* Whether g's operands are nChw16c, for the AVX-512 build. */
static int wide(const iabn_conv_geom *g) { return g->x_layout == IABN_LAYOUT_NCHW16C; }
#endif

typedef struct dims {
    int hw;     /* output pixels per image (x's: strided convs read the gathered copy) */
    int cb, ob; /* blocks of BLK input / output channels      */
    size_t ldw; /* c_in: dw's row                             */
} dims;

/* dw[co .. co+NO][cb*BLK .. cb*BLK + BLK*nb] += the pixels [k0, k1) (nb 1
 * to 3, a constant where inlined).  The accumulators are an array indexed
 * by constants only, so GCC keeps them in registers. */
ALWAYS_INLINE void tile(int nb, const dims *d, const float *x, const float *dy, float *dw,
                        int cb, int co, int k0, int k1)
{
    float *w = dw + (size_t)co * d->ldw + (size_t)cb * BLK;
    size_t l = d->ldw;
    vf a[3][NO];
#pragma GCC unroll 8
    for (int j = 0; j < NO; j++) {
        a[0][j] = vld(w + j * l);
        a[1][j] = nb > 1 ? vld(w + j * l + BLK) : a[0][j];
        a[2][j] = nb > 2 ? vld(w + j * l + 2 * BLK) : a[0][j];
    }
    size_t xbs = (size_t)d->hw * BLK; /* from one input block to the next */
    for (int k = k0; k < k1;) {
        int n = k / d->hw, p = k - n * d->hw;
        int len = d->hw - p < k1 - k ? d->hw - p : k1 - k;
        const float *xp = x + (((size_t)n * d->cb + cb) * d->hw + p) * BLK;
        const float *dp = dy + (((size_t)n * d->ob + co / BLK) * d->hw + p) * BLK + co % BLK;
        for (int i = 0; i < len; i++, xp += BLK, dp += BLK) {
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
        k += len;
    }
#pragma GCC unroll 8
    for (int j = 0; j < NO; j++) {
        vst(w + j * l, a[0][j]);
        if (nb > 1) vst(w + j * l + BLK, a[1][j]);
        if (nb > 2) vst(w + j * l + 2 * BLK, a[2][j]);
    }
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

size_t ENTRY(iabn_conv_1x1_scratch)(const iabn_conv_geom *g)
{
#if LIBRARY_BUILD && IABN_HAVE_DIRECT_AVX512
    if (wide(g)) return iabn_conv_1x1_scratch_avx512(g);
#endif
    return g->stride == 1 ? 0
                          : iabn_conv_round16((size_t)g->n * g->c_in * g->h_out * g->w_out);
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

void ENTRY(iabn_conv_1x1_bwd_filter)(const iabn_conv_geom *g, int threads, const float *x,
                                     const float *dy, float *dw, float *dbias, float *scratch)
{
#if LIBRARY_BUILD && IABN_HAVE_DIRECT_AVX512
    if (wide(g)) {
        iabn_conv_1x1_bwd_filter_avx512(g, threads, x, dy, dw, dbias, scratch);
        return;
    }
#endif
    dims d = {g->h_out * g->w_out, g->c_in / BLK, g->c_out / BLK, (size_t)g->c_in};
    int K = g->n * d.hw;
    const float *xs = g->stride == 1 ? x : scratch; /* what the tiles read */
    if (threads < 1) threads = 1;
#pragma omp parallel num_threads(threads)
    {
        int t = 0, T = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        T = omp_get_num_threads();
#endif
        if (g->stride != 1) gather(g, x, scratch); /* its loop ends in a barrier */
        /* whole blocks of output channels per thread: dw rows apart */
        int ob0 = (int)((long)d.ob * t / T), ob1 = (int)((long)d.ob * (t + 1) / T);
        rows(&d, K, xs, dy, dw, ob0, ob1);
        if (dbias)
            iabn_conv_bias_grad_blocked(g->n, g->c_out, (size_t)d.hw, BLK, dy, dbias, ob0, ob1);
    }
}
