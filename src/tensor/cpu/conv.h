/* cpu/conv.h: 2-D convolution on the CPU, float32 activations in NCHW,
 * nChw16c or nChw8c, raw pointers (PyTorch conv2d semantics: zero padding, dilation,
 * groups).
 *
 * Paths, chosen per geometry and pass (same choice in scratch_bytes and the
 * kernels; docs/CPU.md gives the measurements behind the rule):
 *   - oneDNN (cpu/conv_dnnl.c, in builds that found it) for dense convs
 *     (groups 1, 16+ channels) whose taps mostly read the image: primitives that pick their own blocked layouts, with
 *     reorders from and to the NCHW tensors, all three passes;
 *   - a hand-written weight pass of dense convs on blocked operands
 *     (cpu/conv_wgrad.c): 1x1 ones on nChw8c (AVX2 builds) and on nChw16c
 *     up to 14x14 maps, the others (3x3, dilated, strided) on nChw16c
 *     (AVX-512 CPUs);
 *   - Winograd F(2x2, 3x3) on nChw8c (cpu/conv_wino.c) for dense 3x3
 *     convs with the winograd flag on CPUs without AVX-512, all three
 *     passes;
 *   - hand-written direct kernels (AVX2/FMA, scalar fallback), all three
 *     passes, for grouped convs with <= 16 channels per group: on nChw16c
 *     activations (cpu/conv_blocked.c) where they have 1 to 8 per group
 *     (AVX-512), on nChw8c where they have 1 to 4 (AVX2), else on NCHW
 *     (cpu/conv_direct.c);
 *   - one sgemm per kernel tap over the window where that tap reads the
 *     image, for wide dilated convs on small maps (ASPP): taps lying in the
 *     padding cost nothing, so d=12/24/36 on 33x33 do only the useful work;
 *   - im2col + OpenBLAS sgemm for the rest (grouped convs with many channels
 *     per group, small dilated ones).
 *
 * Scratch comes from the caller (the memory planner accounts for it): ask
 * iabn_conv_scratch_bytes() for the pass and thread count, pass a buffer of at
 * least that size and its size (64-byte aligned for speed; any float
 * alignment works).  Kernels never allocate tensor memory; the oneDNN path
 * allocates only its primitives (once per geometry with a cache).
 *
 * Cache: oneDNN primitives are built once per (geometry, pass, threads) and
 * kept in an iabn_conv_cache (a CPU device context owns one: cpu/backend.c);
 * a call without a cache (NULL) builds them for the call and frees them.  A
 * cache is used by one thread at a time.
 *
 * Threads: a call runs in the caller's thread and opens OpenMP regions of at
 * most `threads` threads, where `threads` must be the value given to
 * iabn_conv_scratch_bytes(), and must equal omp_get_max_threads() (i.e.
 * iabn_num_threads()) at the time of the call: the kernels plan with that
 * value (a larger one than the scratch was sized for is an error on the
 * oneDNN path).  Call from outside any parallel region.  Results are
 * deterministic for a given thread count.
 *
 * Errors: the entry points return 0 or an iabn_err code (oneDNN failures,
 * a scratch smaller than the plan needs).
 *
 * Aliasing: outputs must not overlap inputs or the scratch (an accumulating
 * forward reads y's own values: that is not an overlap).
 */
#ifndef IABN_CPU_CONV_H
#define IABN_CPU_CONV_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iabn_err iabn_err;

typedef struct iabn_conv_geom {
    int n, c_in, h_in, w_in;     /* input  N x C_in x H_in x W_in          */
    int c_out, h_out, w_out;     /* output N x C_out x H_out x W_out       */
    int kh, kw;                  /* kernel                                  */
    int stride, pad, dil;        /* same along H and W                      */
    int groups;                  /* c_in and c_out divisible by groups      */
    /* Layouts of the activations: x_layout for x and dx, y_layout for y
     * and dy (iabn_conv_geom_init: NCHW).  A blocked one needs the oneDNN
     * path, Winograd on nChw8c or the blocked grouped kernels
     * (iabn_conv_layout_vote says which convs take it); the others refuse
     * it. */
    iabn_layout x_layout, y_layout;
    /* 1: Winograd where iabn_conv_winograd() says it runs, all three
     * passes: oneDNN's F(4x4, 3x3) on CPUs with its Winograd kernels
     * (AVX-512; dense 3x3, stride 1, channels in multiples of 16), else
     * cpu/conv_wino.c's F(2x2, 3x3) on nChw8c operands (dense 3x3, stride 1,
     * padding equal to the dilation, 128 channels or more, 64 for the weight
     * pass); it rounds differently from the
     * direct convolution (docs/CPU.md).  0 (iabn_conv_geom_init): direct.  Backends without
     * such a choice ignore it (cuDNN ranks its algorithms itself). */
    int winograd;
    /* Where oneDNN's Winograd kernels run: at most this many images per
     * call, for less scratch (it holds the transforms of every tile of a
     * call) at some speed; 0 (iabn_conv_geom_init): the fastest slice.
     * Never fewer images than give 196 output tiles, where the calls ran
     * 1.2x slower than on 784, and fewer would lose to the direct kernels
     * (cpu/conv_dnnl_plan.c wino_slice).  The graph's Winograd auto
     * (graph/winograd.c) asks for fewer where the fastest does not fit. */
    int wino_images;
    /* 1: the forward adds its result to what y holds (y += conv(x, w) +
     * bias): a residual add fused into the convolution's output pass
     * (layers.h iabn_conv2d_add).  CPU: oneDNN's sum post-op, on the
     * geometries iabn_conv_accumulates() takes; any other path or pass
     * refuses it; iabn_conv_fwd_add() takes the residual from a buffer of
     * its own (2 inside conv_dnnl.c: oneDNN's binary post-op).  0
     * (iabn_conv_geom_init): y is overwritten. */
    int accumulate;
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

/* The blocked activation layout of this CPU (iabn_conv_layout_vote's 1):
 * nChw16c where it has AVX-512, nChw8c elsewhere.  oneDNN's direct kernels
 * block channels by the CPU's vector of floats (docs/LAYOUTS.md). */
iabn_layout iabn_conv_blocked_layout(void);

/* How a pass of a geometry (its layouts NCHW) takes a blocked layout on its
 * x side (x, dx; y_side 0) or its y side (y, dy; y_side 1), for the graph's
 * layout pass: -1 not at all (NCHW only: the native paths), 0 it takes one
 * but its primitive works in NCHW there (a blocked tensor costs a reorder in
 * its scratch), 1 its primitive works in iabn_conv_blocked_layout() (a
 * blocked tensor saves the reorder), 2 its primitive works in another layout
 * (a reorder either way). */
int iabn_conv_layout_vote(const iabn_conv_geom *g, iabn_conv_pass pass, int y_side);

/* Whether a pass of g runs with g's layouts: NCHW on both sides always
 * does; a blocked side needs oneDNN or the blocked grouped kernels, and
 * oneDNN's copy cap counts the NCHW side, so a mix the votes allow may
 * have no kernel (the layout pass then sends the blocked side back). */
int iabn_conv_layouts_ok(const iabn_conv_geom *g, iabn_conv_pass pass);

/* Whether a pass of g runs Winograd kernels: g->winograd set and the
 * geometry one that oneDNN's (AVX-512 CPUs) or cpu/conv_wino.c's (nChw8c
 * operands) take; 0 means the pass runs direct. */
int iabn_conv_winograd(const iabn_conv_geom *g, iabn_conv_pass pass);

/* Whether the forward of g runs with g->accumulate set: on the oneDNN path
 * (dense convs, whatever the activation layouts), where the addition is
 * the primitive's sum post-op, read with y's store. */
int iabn_conv_accumulates(const iabn_conv_geom *g);

/* Whether this build has the oneDNN path (libdnnl found when configured). */
int iabn_conv_have_dnnl(void);

/* oneDNN primitives per geometry (cpu/conv_dnnl.c). */
typedef struct iabn_conv_cache iabn_conv_cache;
int iabn_conv_cache_new(iabn_conv_cache **out, iabn_err *e);
void iabn_conv_cache_free(iabn_conv_cache *c); /* NULL is fine */
/* Plans held (for tests: a second call of a geometry builds nothing). */
int iabn_conv_cache_size(const iabn_conv_cache *c);

/* Bytes of scratch one call of `pass` needs when run with `threads` threads
 * (with or without bias). */
size_t iabn_conv_scratch_bytes(const iabn_conv_geom *g, iabn_conv_pass pass, int threads);

/* y = conv(x, w) (+ bias per output channel if bias != NULL).
 * x: N,C_in,H_in,W_in; w: C_out, C_in/groups, kh, kw; y: N,C_out,H_out,W_out. */
int iabn_conv_fwd(iabn_conv_cache *c, const iabn_conv_geom *g, const float *x, const float *w,
                  const float *bias, float *y, void *scratch, size_t scratch_bytes,
                  iabn_err *e);

/* y = r + conv(x, w) (+ bias), g->accumulate set (a geometry
 * iabn_conv_accumulates() takes), r a buffer of y's size and layout: the
 * residual add of a block whose shortcut is still needed elsewhere, so that
 * the sum cannot overwrite it.  oneDNN's binary post-op reads r where the
 * primitive writes y in the caller's layout, with the same bits as the
 * convolution and then the add; elsewhere r is copied into y first.  r == y
 * is iabn_conv_fwd(); otherwise r and y must not overlap.  Scratch:
 * iabn_conv_scratch_bytes() of g. */
int iabn_conv_fwd_add(iabn_conv_cache *c, const iabn_conv_geom *g, const float *x,
                      const float *w, const float *bias, const float *r, float *y,
                      void *scratch, size_t scratch_bytes, iabn_err *e);

/* dx = conv_transpose(dy, w); dx is overwritten (beta 0). */
int iabn_conv_bwd_data(iabn_conv_cache *c, const iabn_conv_geom *g, const float *dy,
                       const float *w, float *dx, void *scratch, size_t scratch_bytes,
                       iabn_err *e);

/* dw += correlation(x, dy); dbias += sum over N,H,W of dy (if dbias != NULL).
 * Accumulates: parameter gradients add up over fan-in and micro-batches. */
int iabn_conv_bwd_filter(iabn_conv_cache *c, const iabn_conv_geom *g, const float *x,
                         const float *dy, float *dw, float *dbias, void *scratch,
                         size_t scratch_bytes, iabn_err *e);

#ifdef __cplusplus
}
#endif
#endif
