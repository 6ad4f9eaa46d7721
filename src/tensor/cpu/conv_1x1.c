/* cpu/conv_1x1.c: the weight pass of 1x1 convolutions (groups 1, no
 * padding) on nChw8c activations, the hand-written kernel that replaces
 * oneDNN's there on AVX2 CPUs.  A strided conv first gathers the pixels it
 * reads into its scratch, and runs as a stride-1 one on them.
 *
 * The pass is a GEMM over the output pixels k = (image, pixel):
 *     dw[co][ci] += sum_k dy[k][co] * x[k][ci].
 * On nChw8c both operands come packed the way a GEMM micro-kernel wants
 * them: x's block of 8 input channels at pixel k is one vector, and dy's 8
 * output channels at k are 8 consecutive floats to broadcast.  A tile keeps
 * 3 input blocks (24 ci, vectors) x 4 output channels (broadcasts) in 12
 * accumulators, which are rows of dw in OIHW: it stores them as they are,
 * with no weight reorder.  Per pixel: 3 vector loads, 4 broadcasts, 12 FMAs
 * (16 registers with the 3 source vectors and a broadcast).
 *
 * Blocking: the pixels go in chunks of KC (x's 3 blocks of a chunk, 37 KiB,
 * stay near the core while the tile sweeps the thread's output channels),
 * each chunk adding into dw.  oneDNN's jit_1x1:avx2 weight pass writes
 * blocked weights that are then reordered to OIHW; docs/CPU.md "AVX2 CPUs"
 * has the measurements.
 *
 * Each dw element sums its pixels in order (chunk by chunk, each added to
 * what dw held), whatever the threads (they split the output channels) and
 * the build (AVX2 or the portable structs of cpu/simd.h): the same bits.
 */
#include "tensor/cpu/conv_impl.h"

#include <string.h>

#define SIMD_LANES 8
#include "tensor/cpu/simd.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define BLK 8
#define KC 400 /* output pixels per chunk (best of 128-800 on ResNeXt-101's) */

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* The entry points' suffix: none in the library; test_conv_1x1 builds a
 * portable copy (_portable) to hold the two builds to the same bits. */
#ifndef IABN_1X1_SFX
#define IABN_1X1_SFX
#endif
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define ENTRY(name) CAT(name, IABN_1X1_SFX)

int ENTRY(iabn_conv_1x1_geometry)(const iabn_conv_geom *g)
{
    return g->groups == 1 && g->kh == 1 && g->kw == 1 && g->pad == 0 &&
           g->c_in % BLK == 0 && g->c_out % BLK == 0 && g->x_layout == IABN_LAYOUT_NCHW8C &&
           g->y_layout == IABN_LAYOUT_NCHW8C;
}

int ENTRY(iabn_conv_1x1_takes)(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    return SIMD_NATIVE && pass == IABN_CONV_BWD_FILTER && ENTRY(iabn_conv_1x1_geometry)(g);
}

typedef struct dims {
    int hw;     /* output pixels per image (x's: strided convs read the gathered copy) */
    int cb, ob; /* blocks of 8 input / output channels        */
    size_t ldw; /* c_in: dw's row                             */
} dims;

/* dw[co .. co+4][cb*8 .. cb*8 + 8*nb] += the pixels [k0, k1) (nb 1 to 3,
 * a constant where inlined). */
ALWAYS_INLINE void tile(int nb, const dims *d, const float *x, const float *dy, float *dw,
                        int cb, int co, int k0, int k1)
{
    float *w = dw + (size_t)co * d->ldw + (size_t)cb * BLK;
    size_t l = d->ldw;
    vf a00 = vld(w), a01 = vld(w + l), a02 = vld(w + 2 * l), a03 = vld(w + 3 * l);
    vf a10 = a00, a11 = a00, a12 = a00, a13 = a00, a20 = a00, a21 = a00, a22 = a00, a23 = a00;
    if (nb > 1) {
        a10 = vld(w + 8); a11 = vld(w + l + 8); a12 = vld(w + 2 * l + 8); a13 = vld(w + 3 * l + 8);
    }
    if (nb > 2) {
        a20 = vld(w + 16); a21 = vld(w + l + 16);
        a22 = vld(w + 2 * l + 16); a23 = vld(w + 3 * l + 16);
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
#define COL(j, r0, r1, r2)                                                                 \
    {                                                                                      \
        vf b = vbcast(dp + (j));                                                           \
        r0 = vfma(x0, b, r0);                                                              \
        if (nb > 1) r1 = vfma(x1, b, r1);                                                  \
        if (nb > 2) r2 = vfma(x2, b, r2);                                                  \
    }
            COL(0, a00, a10, a20)
            COL(1, a01, a11, a21)
            COL(2, a02, a12, a22)
            COL(3, a03, a13, a23)
#undef COL
        }
        k += len;
    }
    vst(w, a00); vst(w + l, a01); vst(w + 2 * l, a02); vst(w + 3 * l, a03);
    if (nb > 1) {
        vst(w + 8, a10); vst(w + l + 8, a11); vst(w + 2 * l + 8, a12); vst(w + 3 * l + 8, a13);
    }
    if (nb > 2) {
        vst(w + 16, a20); vst(w + l + 16, a21); vst(w + 2 * l + 16, a22); vst(w + 3 * l + 16, a23);
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
            for (int co = ob0 * BLK; co < ob1 * BLK; co += 4) {
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
    return g->stride == 1 ? 0
                          : iabn_conv_round16((size_t)g->n * g->c_in * g->h_out * g->w_out);
}

/* x at the pixels a strided conv reads, packed as a stride-1 conv's input
 * (nChw8c, h_out x w_out), so that the tiles read consecutive pixels: with
 * the copy, ResNeXt's downsampling 1x1 convs ran 1.05x-1.65x oneDNN, and
 * reading every other pixel in the tiles 0.8x-0.95x (docs/CPU.md). */
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
        if (dbias) iabn_conv_bias_grad_8c(g->n, g->c_out, (size_t)d.hw, dy, dbias, ob0, ob1);
    }
}
