/* cpu/conv.h: 2-D convolution on the CPU, NCHW float32, raw pointers
 * (PyTorch conv2d semantics: zero padding, dilation, groups).
 *
 * Paths, chosen per geometry and pass (same choice in scratch_bytes and the
 * kernels):
 *   - hand-written direct kernels (AVX2/FMA, scalar fallback), all three
 *     passes, for grouped convs with <= 16 channels per group and for convs
 *     with <= 64 channels per group in and out (not 1x1, not mostly padding;
 *     strided bwd-data of the latter goes to im2col);
 *   - one sgemm per kernel tap over the window where that tap reads the
 *     image, for wide dilated convs on small maps (ASPP): taps lying in the
 *     padding cost nothing, so d=12/24/36 on 33x33 do only the useful work;
 *   - im2col + OpenBLAS sgemm for the rest (wide dense convs, 1x1 convs,
 *     which skip im2col at stride 1 pad 0); stride-1 bwd-data runs as a
 *     forward conv of dy with flipped weights.
 *
 * Scratch comes from the caller (the memory planner accounts for it): ask
 * iabn_conv_scratch_bytes() for the pass and thread count, pass a buffer of at
 * least that size (64-byte aligned for speed; any float alignment works).
 * Kernels never allocate.
 *
 * Threads: a call runs in the caller's thread and opens OpenMP regions of at
 * most `threads` threads, where `threads` must be the value given to
 * iabn_conv_scratch_bytes(), and must equal omp_get_max_threads() (i.e.
 * iabn_num_threads()) at the time of the call: the kernels plan with that
 * value, and a larger one than the scratch was sized for would overrun it.
 * Call from outside any parallel region.  Results are deterministic for a
 * given thread count (static schedules, fixed reduction orders).
 *
 * Aliasing: outputs must not overlap inputs or the scratch.
 */
#ifndef IABN_CPU_CONV_H
#define IABN_CPU_CONV_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iabn_conv_geom {
    int n, c_in, h_in, w_in;     /* input  N x C_in x H_in x W_in          */
    int c_out, h_out, w_out;     /* output N x C_out x H_out x W_out       */
    int kh, kw;                  /* kernel                                  */
    int stride, pad, dil;        /* same along H and W                      */
    int groups;                  /* c_in and c_out divisible by groups      */
} iabn_conv_geom;

typedef enum iabn_conv_pass {
    IABN_CONV_FWD = 0,
    IABN_CONV_BWD_DATA = 1,
    IABN_CONV_BWD_FILTER = 2
} iabn_conv_pass;

/* Fills h_out / w_out; returns 0, or -1 if the geometry is impossible
 * (non-positive output, channels not divisible by groups). */
int iabn_conv_geom_init(iabn_conv_geom *g, int n, int c_in, int h_in, int w_in,
                        int c_out, int kh, int kw, int stride, int pad, int dil,
                        int groups);

/* Bytes of scratch one call of `pass` needs when run with `threads` threads. */
size_t iabn_conv_scratch_bytes(const iabn_conv_geom *g, iabn_conv_pass pass, int threads);

/* y = conv(x, w) (+ bias per output channel if bias != NULL).
 * x: N,C_in,H_in,W_in; w: C_out, C_in/groups, kh, kw; y: N,C_out,H_out,W_out. */
void iabn_conv_fwd(const iabn_conv_geom *g, const float *x, const float *w,
                   const float *bias, float *y, void *scratch);

/* dx = conv_transpose(dy, w); dx is overwritten (beta 0). */
void iabn_conv_bwd_data(const iabn_conv_geom *g, const float *dy, const float *w,
                        float *dx, void *scratch);

/* dw += correlation(x, dy); dbias += sum over N,H,W of dy (if dbias != NULL).
 * Accumulates: parameter gradients add up over fan-in and micro-batches. */
void iabn_conv_bwd_filter(const iabn_conv_geom *g, const float *x, const float *dy,
                          float *dw, float *dbias, void *scratch);

#ifdef __cplusplus
}
#endif
#endif
