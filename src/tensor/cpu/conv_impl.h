/* cpu/conv_impl.h: what the convolution files share internally (not
 * installed): the path a geometry takes, its scratch layout, and the direct
 * grouped kernels.
 *
 * A plan is a pure function of (geometry, pass, threads); the scratch size and
 * the kernels both derive from it, so they cannot disagree.
 */
#ifndef IABN_CPU_CONV_IMPL_H
#define IABN_CPU_CONV_IMPL_H

#include <stddef.h>

#include "tensor/tensor.h"

/* Largest channels-per-group (in and out) of grouped convs routed to the
 * direct kernels, the largest kernel area they accept (tap offsets live on
 * the stack), and the widest dense conv (in and out) they take. */
#ifndef IABN_CONV_DIRECT_MAX_CPG
#define IABN_CONV_DIRECT_MAX_CPG 16
#endif
#define IABN_CONV_DIRECT_MAX_TAPS 128
#ifndef IABN_CONV_DENSE_DIRECT_MAX
#define IABN_CONV_DENSE_DIRECT_MAX 64
/* Outputs of the direct kernels (NCHW and blocked) at least this large are
 * written with non-temporal stores: they would only evict the inputs still
 * to be read.  A build may set another (-D). */
#ifndef IABN_CONV_STREAM_BYTES
#define IABN_CONV_STREAM_BYTES ((size_t)16 << 20)
#endif
#endif

typedef enum iabn_conv_path {
    IABN_CONV_PATH_IM2COL = 0, /* im2col (or none for 1x1) + one GEMM per item  */
    IABN_CONV_PATH_TAPS = 1,   /* one GEMM per kernel tap over its valid window */
    IABN_CONV_PATH_DIRECT = 2, /* hand-written grouped kernels                  */
    IABN_CONV_PATH_DNNL = 3,   /* oneDNN primitives, blocked layouts, reorders  */
    IABN_CONV_PATH_BLOCKED = 4, /* hand-written grouped kernels on nChw16c      */
    IABN_CONV_PATH_WINO = 5,    /* hand-written Winograd F(2x2, 3x3) on nChw8c  */
    IABN_CONV_PATH_WGRAD = 6,   /* hand-written weight pass of dense convs      */
    IABN_CONV_PATH_DGRAD = 7    /* hand-written data pass of dense 1x1 convs    */
} iabn_conv_path;
#define IABN_CONV_NPATHS 8

/* Scratch layout, in floats, each part rounded to 64 bytes:
 *   im2col: [wbuf][col x ncol][part x threads]
 *   taps:   [wbuf][dwbuf][col][col2]
 *   direct: its own layout, `total` floats;
 *   wgrad:  1x1: x gathered at a strided conv's pixels (none with stride
 *           1); k x k: each thread's sums of a group of output channels;
 *   dgrad:  none;
 *   blocked: [the kernels' own layout, col floats][x copy][y copy], the
 *           copies (nChw16c) only for operands the geometry has in NCHW;
 *   dnnl:   cpu/conv_dnnl.c's layout, `total` floats (the larger of the
 *           layouts with and without bias). */
typedef struct iabn_conv_plan {
    iabn_conv_path path;
    int threads;
    int items_parallel; /* OpenMP over (image, group), BLAS single-threaded     */
    int no_col;         /* 1x1, stride 1, pad 0: the input is the GEMM operand  */
    int flip;           /* bwd-data as a forward conv of dy with flipped w      */
    int partials;       /* bwd-filter: per-thread dw partials, reduced in order */
    int nb;             /* taps path: images per GEMM                           */
    int ncol;           /* im2col path: column buffers (1, or one per thread)   */
    size_t wbuf, dwbuf, col, col2, part;
    size_t total;
} iabn_conv_plan;

void iabn_conv_plan_make(const iabn_conv_geom *g, iabn_conv_pass pass, int threads,
                         iabn_conv_plan *p);
/* The plan of the paths other than oneDNN (what the oneDNN path is compared
 * with in tests and the benchmark). */
void iabn_conv_plan_make_native(const iabn_conv_geom *g, iabn_conv_pass pass, int threads,
                                iabn_conv_plan *p);
/* Runs a pass on a given plan (made by either function above). */
int iabn_conv_run_plan(iabn_conv_cache *c, const iabn_conv_plan *p, const iabn_conv_geom *g,
                       iabn_conv_pass pass, const float *a, const float *b, const float *bias,
                       float *out, float *dbias, void *scratch, size_t scratch_bytes,
                       iabn_err *e);

/* Whether a pass of a geometry goes to oneDNN: dense, or grouped with 16+
 * channels per group (8+ on maps up to 14x14) and not dilated; at least
 * 16 channels in and out (its channel block), and not the forward or data
 * pass of a dilated conv with most taps in the padding (the per-tap GEMMs
 * skip those; oneDNN's plain GEMM fallback there computes them).  Building
 * with -DIABN_CONV_DNNL_ALL=1 sends every dense conv there (to run the
 * whole test suite on that path). */
/* Largest blocked copies (input + output of the whole batch, bytes) for
 * which a convolution goes to oneDNN. */
#define IABN_DNNL_COPY_MAX ((size_t)64 << 20)
int iabn_conv_use_dnnl(const iabn_conv_geom *g, iabn_conv_pass pass);
/* Whether oneDNN reads and writes this conv's activations in NCHW (no
 * reorder copies) rather than in its blocked layouts: 1x1 on large maps. */
int iabn_conv_dnnl_plain(const iabn_conv_geom *g);

/* The layout oneDNN's forward primitive for g (no bias) works in on the x
 * side (y_side 0) or the y side (1): 1 `blocked` (nChw16c or nChw8c), 0
 * NCHW (also in a build without oneDNN or when it cannot be built), 2
 * another (nChw8c for 8 channels per group on an AVX-512 CPU, say). */
int iabn_conv_dnnl_blocked(const iabn_conv_geom *g, int y_side, iabn_layout blocked);

/* Whether the forward of g with its residual apart (g->accumulate 2, as
 * iabn_conv_fwd_add runs it) adds the residual inside oneDNN's kernel (the
 * binary post-op) rather than copying it into y for the sum post-op.  0
 * where oneDNN cannot build g, and in a build without oneDNN. */
int iabn_conv_dnnl_add_fused(const iabn_conv_geom *g);

/* oneDNN path (cpu/conv_dnnl.c): scratch bytes of a plan built for
 * `threads` threads, with or without bias, and the implementation oneDNN
 * chose (a static string; impl may be NULL); the passes. */
int iabn_conv_dnnl_scratch(const iabn_conv_geom *g, iabn_conv_pass pass, int bias, int threads,
                           size_t *bytes, const char **impl, iabn_err *e);
/* r: the residual where g->accumulate is 2 (y = r + conv, r apart), else
 * NULL.  The scratch of an accumulate 1 forward covers accumulate 2. */
int iabn_conv_dnnl_fwd(iabn_conv_cache *c, const iabn_conv_geom *g, const float *x,
                       const float *w, const float *bias, const float *r, float *y,
                       void *scratch, size_t scratch_bytes, iabn_err *e);
int iabn_conv_dnnl_bwd_data(iabn_conv_cache *c, const iabn_conv_geom *g, const float *dy,
                            const float *w, float *dx, void *scratch, size_t scratch_bytes,
                            iabn_err *e);
int iabn_conv_dnnl_bwd_filter(iabn_conv_cache *c, const iabn_conv_geom *g, const float *x,
                              const float *dy, float *dw, float *dbias, void *scratch,
                              size_t scratch_bytes, iabn_err *e);

/* Whether a pass of g runs oneDNN's Winograd kernels (the flag set, a
 * geometry they take, and kernels for this CPU: AVX-512): the images each
 * call takes (a slice of the batch, cpu/conv_dnnl_plan.c wino_slice), or 0
 * where it runs direct; 0 without oneDNN. */
int iabn_conv_dnnl_winograd(const iabn_conv_geom *g, iabn_conv_pass pass);

/* Direct kernels (cpu/conv_direct.c).  Scratch in floats for `threads`, the
 * same for both builds.  The forward and bwd-data run the AVX-512 build where
 * iabn_conv_direct_avx512() says the CPU has it (same bits as AVX2); the
 * suffixed entry points run one build (_avx512 only where the CPU has it). */
size_t iabn_conv_direct_scratch(const iabn_conv_geom *g, iabn_conv_pass pass, int threads);
int iabn_conv_direct_avx512(void);
/* Whether the CPU has AVX-512 F, VL, BW and DQ (oneDNN's avx512_core),
 * whatever this build holds: what oneDNN's kernels run on. */
int iabn_cpu_avx512(void);
void iabn_conv_direct_fwd_avx2(const iabn_conv_geom *g, int threads, const float *x,
                               const float *w, const float *bias, float *y, float *scratch);
void iabn_conv_direct_bwd_data_avx2(const iabn_conv_geom *g, int threads, const float *dy,
                                    const float *w, float *dx, float *scratch);
void iabn_conv_direct_fwd_avx512(const iabn_conv_geom *g, int threads, const float *x,
                                 const float *w, const float *bias, float *y, float *scratch);
void iabn_conv_direct_bwd_data_avx512(const iabn_conv_geom *g, int threads, const float *dy,
                                      const float *w, float *dx, float *scratch);
void iabn_conv_direct_fwd(const iabn_conv_geom *g, int threads, const float *x,
                          const float *w, const float *bias, float *y, float *scratch);
void iabn_conv_direct_bwd_data(const iabn_conv_geom *g, int threads, const float *dy,
                               const float *w, float *dx, float *scratch);
void iabn_conv_direct_bwd_filter(const iabn_conv_geom *g, int threads, const float *x,
                                 const float *dy, float *dw, float *scratch);

/* The weight pass of dense convs on blocked activations (cpu/conv_wgrad.c):
 * groups 1, any kernel of at most 16 taps, stride, padding and dilation, x
 * and dy both nChw8c (the library's build, AVX2 in release builds) or both
 * nChw16c (its AVX-512 build, entry points ending in _avx512), channels
 * multiples of the block.
 * _geometry: whether a build's kernel takes g; _takes: whether the conv
 * path runs it for g's pass (the weight pass: of 1x1 convs, no padding, on
 * nChw8c where the library's build is AVX2 and on nChw16c where the CPU
 * has AVX-512; of the others on nChw16c where the CPU has AVX-512, unless
 * oneDNN's Winograd runs the pass); the kernels run in every build (a
 * portable one gives the same bits).  dw += and dbias += (dbias may be
 * NULL).  _scratch: floats of scratch for `threads` threads
 * (1x1: a strided conv's gathered x, none with stride 1; k x k: each
 * thread's sums).  The unsuffixed _scratch and _bwd_filter send what _takes
 * gives the AVX-512 build there. */
int iabn_conv_wgrad_geometry(const iabn_conv_geom *g);
int iabn_conv_wgrad_takes(const iabn_conv_geom *g, iabn_conv_pass pass);
size_t iabn_conv_wgrad_scratch(const iabn_conv_geom *g, int threads);
void iabn_conv_wgrad_bwd_filter(const iabn_conv_geom *g, int threads, const float *x,
                                const float *dy, float *dw, float *dbias, float *scratch);
int iabn_conv_wgrad_geometry_avx512(const iabn_conv_geom *g);
size_t iabn_conv_wgrad_scratch_avx512(const iabn_conv_geom *g, int threads);
void iabn_conv_wgrad_bwd_filter_avx512(const iabn_conv_geom *g, int threads, const float *x,
                                       const float *dy, float *dw, float *dbias,
                                       float *scratch);

/* The data pass of dense 1x1 convs on nChw16c (cpu/conv_dgrad.c): groups
 * 1, stride 1, no padding, c_in a multiple of 64 and c_out of 16, dy and dx
 * both nChw16c, the weights OIHW as they are; its AVX-512 build only.
 * _takes: whether the conv path runs it for g's pass (the data pass, on a
 * CPU with AVX-512, up to 784 pixels a call); _geometry_avx512: whether the
 * kernel takes g.  dx is overwritten; no scratch; the same bits with any thread
 * count. */
int iabn_conv_dgrad_takes(const iabn_conv_geom *g, iabn_conv_pass pass);
int iabn_conv_dgrad_geometry_avx512(const iabn_conv_geom *g);
void iabn_conv_dgrad_bwd_data_avx512(const iabn_conv_geom *g, int threads, const float *dy,
                                     const float *w, float *dx);

/* Blocked direct kernels (cpu/conv_blocked.c): grouped convs with the same
 * power-of-two channels per group in and out (up to the block), channels a
 * multiple of the block, stride 1 or 2, on nChw16c or nChw8c activations
 * (x / dx and y / dy blocked, or NCHW copied through the scratch by the
 * caller).  _takes: whether the kernels for blocked layout L take g;
 * _scratch: floats for `threads`, the same in every build of a lane count.
 * The unsuffixed entry points run 8 lanes (*_8c) where a side of g is
 * nChw8c, else 16: the AVX-512 build where iabn_conv_direct_avx512() says
 * the CPU has it, else the portable one (same bits).  _native_8c: whether
 * the 8-lane build is AVX2 (a release build) rather than portable.
 * bwd-filter accumulates into dw and, when dbias is not NULL, dy's sums
 * into dbias. */
int iabn_conv_blocked_takes(const iabn_conv_geom *g, iabn_layout L);
int iabn_conv_blocked_native_8c(void);
size_t iabn_conv_blocked_scratch(const iabn_conv_geom *g, iabn_conv_pass pass, int threads);
size_t iabn_conv_blocked_scratch_portable(const iabn_conv_geom *g, iabn_conv_pass pass,
                                          int threads);
size_t iabn_conv_blocked_scratch_8c(const iabn_conv_geom *g, iabn_conv_pass pass, int threads);
#define IABN_BLOCKED_DECL(sfx)                                                                  \
    void iabn_conv_blocked_fwd##sfx(const iabn_conv_geom *g, int threads, const float *x,     \
                                    const float *w, const float *bias, float *y,              \
                                    float *scratch);                                          \
    void iabn_conv_blocked_bwd_data##sfx(const iabn_conv_geom *g, int threads,                \
                                         const float *dy, const float *w, float *dx,          \
                                         float *scratch);                                     \
    void iabn_conv_blocked_bwd_filter##sfx(const iabn_conv_geom *g, int threads,              \
                                           const float *x, const float *dy, float *dw,        \
                                           float *dbias, float *scratch);
IABN_BLOCKED_DECL()
IABN_BLOCKED_DECL(_portable)
IABN_BLOCKED_DECL(_avx512)
IABN_BLOCKED_DECL(_8c)
#undef IABN_BLOCKED_DECL

/* The forward and data passes of grouped 3x3 convs, stride 1, padding 1,
 * with the rotation on the input side (cpu/conv_blocked_rot.c): 2 or 4
 * channels per group on nChw8c, 2 to 16 on nChw16c maps at most
 * IABN_CONV_ROT_MAX_W wide (on 56 they ran 1.05x-1.4x slower than
 * conv_blocked.c's kernels with 4 per group).  _takes: whether the build
 * of `lanes` runs g's pass (the blocked entry points send it there);
 * _scratch: floats for `threads`. */
#define IABN_CONV_ROT_MAX_W 28
int iabn_conv_blocked_rot_takes(const iabn_conv_geom *g, iabn_conv_pass pass, int lanes);
size_t iabn_conv_blocked_rot_scratch(const iabn_conv_geom *g, int lanes, int threads);
#define IABN_ROT_DECL(sfx)                                                                      \
    void iabn_conv_blocked_rot##sfx(const iabn_conv_geom *g, iabn_conv_pass pass, int threads, \
                                    const float *src, const float *w, const float *bias,       \
                                    float *dst, float *scratch);
IABN_ROT_DECL(_portable)
IABN_ROT_DECL(_avx512)
IABN_ROT_DECL(_8c)
#undef IABN_ROT_DECL

/* 3x3 convs with 8 channels per group, stride 1, padding 1, on maps at
 * most IABN_CONV_ROWS_MAX_W wide, vectors along the rows (cpu/conv_rows.c):
 * with 16 lanes the weight pass, with 8 (nChw8c) the forward and data
 * passes.  _takes: whether the build of `lanes` runs g's pass (the blocked
 * entry points send it there); _scratch: floats for `threads`.
 * bwd-filter accumulates into dw and, when dbias is not NULL, dy's sums
 * into dbias. */
#define IABN_CONV_ROWS_MAX_W 14
int iabn_conv_rows_takes(const iabn_conv_geom *g, iabn_conv_pass pass, int lanes);
size_t iabn_conv_rows_scratch(const iabn_conv_geom *g, iabn_conv_pass pass, int threads);
#define IABN_ROWS_DECL(sfx)                                                                     \
    void iabn_conv_rows_bwd_filter##sfx(const iabn_conv_geom *g, int threads, const float *x, \
                                        const float *dy, float *dw, float *dbias,             \
                                        float *scratch);
IABN_ROWS_DECL(_portable)
IABN_ROWS_DECL(_avx512)
void iabn_conv_rows_8c(const iabn_conv_geom *g, iabn_conv_pass pass, int threads,
                       const float *src, const float *w, const float *bias, float *dst,
                       float *scratch);
size_t iabn_conv_rows_scratch_8c(const iabn_conv_geom *g, iabn_conv_pass pass, int threads);
#undef IABN_ROWS_DECL

/* Winograd F(2x2, 3x3) on nChw8c (cpu/conv_wino.c; the weight pass as
 * F(3x3, 2x2)): the three passes of a dense 3x3 conv, stride 1, padding
 * equal to the dilation (each of the dil x dil phases a conv of its own), x
 * and y both nChw8c (channels a multiple of 8), with the
 * geometry's winograd flag, 128 channels or more in and out (64 for the
 * weight pass), on maps (a
 * phase's grid) of 14x14 and more (where they win).  _takes: whether the graph's conv takes
 * them for g and the pass; the kernels themselves run any channels in
 * multiples of 8 and any map.  _scratch: floats for `threads`.  fwd: y = conv(x) + bias (NULL: none) +
 * src (NULL: none; else laid out as y, which it may be: y += conv). */
int iabn_conv_wino_takes(const iabn_conv_geom *g, iabn_conv_pass pass);
size_t iabn_conv_wino_scratch(const iabn_conv_geom *g, iabn_conv_pass pass, int threads);
void iabn_conv_wino_fwd(const iabn_conv_geom *g, int threads, const float *x, const float *w,
                        const float *bias, const float *src, float *y, float *scratch);
void iabn_conv_wino_bwd_data(const iabn_conv_geom *g, int threads, const float *dy,
                             const float *w, float *dx, float *scratch);
/* dw += the weight gradient, and dy's sums into dbias where not NULL. */
void iabn_conv_wino_bwd_filter(const iabn_conv_geom *g, int threads, const float *x,
                               const float *dy, float *dw, float *dbias, float *scratch);

/* A convolution per group, as the GEMM paths see it: cin/cout are per group,
 * and the top/left paddings may differ (and be negative) so that bwd-data can
 * run as a forward conv with flipped weights. */
typedef struct iabn_conv_gd {
    int n, G, cin, cout;
    int hi, wi, ho, wo;
    int kh, kw, s, d, pt, pl;
} iabn_conv_gd;

/* Output indices o in [lo, hi) of [0, out) whose input o*stride + k*dil - pad
 * lies in [0, in) (hi == lo when none). */
void iabn_conv_tap_range(int out, int in, int k, int stride, int pad, int dil, int *lo,
                         int *hi);

/* im2col + sgemm path (cpu/conv_im2col.c). */
void iabn_conv_im2col_fwd(const iabn_conv_gd *c, const iabn_conv_plan *p, const float *x,
                          const float *w, const float *bias, float *y, float *scratch);
void iabn_conv_im2col_bwd_data(const iabn_conv_gd *c, const iabn_conv_plan *p, const float *dy,
                               const float *w, float *dx, float *scratch);
void iabn_conv_im2col_bwd_filter(const iabn_conv_gd *c, const iabn_conv_plan *p,
                                 const float *x, const float *dy, float *dw, float *scratch);

/* Per-tap GEMM path (cpu/conv_taps.c). */
void iabn_conv_taps_fwd(const iabn_conv_gd *c, const iabn_conv_plan *p, const float *x,
                        const float *w, const float *bias, float *y, float *scratch);
void iabn_conv_taps_bwd_data(const iabn_conv_gd *c, const iabn_conv_plan *p, const float *dy,
                             const float *w, float *dx, float *scratch);
void iabn_conv_taps_bwd_filter(const iabn_conv_gd *c, const iabn_conv_plan *p, const float *x,
                               const float *dy, float *dw, float *scratch);

/* dbias[c] += sum over n, hw of dy[n, c, hw] (shared by every path). */
void iabn_conv_bias_grad(int n, int c, size_t hw, const float *dy, float *dbias);
/* The same on blocked dy (nChw8c or nChw16c: blk 8 or 16; c channels), for
 * the channel blocks [ob0, ob1), in the caller's thread: per image in
 * float, the images in double. */
void iabn_conv_bias_grad_blocked(int n, int c, size_t hw, int blk, const float *dy,
                                 float *dbias, int ob0, int ob1);

/* Lane l of a vector rotated by j within each group of cpg lanes (a power
 * of two): it takes lane base(l) + (l + j) % cpg (the blocked grouped
 * kernels' rotations, cpu/conv_blocked.c and conv_blocked_rot.c). */
static inline int iabn_conv_rot_lane(int l, int j, int cpg)
{
    return (l & ~(cpg - 1)) | ((l + j) & (cpg - 1));
}

/* Rounds a float count up to whole 64-byte lines. */
static inline size_t iabn_conv_round16(size_t f) { return (f + 15) & ~(size_t)15; }

/* The blocked kernels' work split (cpu/conv_blocked.c, conv_blocked_rot.c).
 * Row bands per (image, channel block) plane, so that a small batch still
 * gives every thread work: at most `rows`. */
static inline int iabn_conv_row_bands(long planes, int rows, int threads)
{
    long want = 4L * threads;
    int k = planes >= want ? 1 : (int)((want + planes - 1) / planes);
    return k < rows ? k : rows;
}

/* A row's nq outputs in as few tiles of at most pw as possible, as even as
 * they go (56 by 6: six of 6, then four of 5), none computing an output
 * twice: returns their number; the first *big are *small + 1 wide, the
 * others *small.  (Once per row: the divisions cost as much as a tile's
 * bookkeeping.) */
static inline int iabn_conv_tile_split(int nq, int pw, int *small, int *big)
{
    int n = (nq + pw - 1) / pw;
    *small = nq / n;
    *big = nq % n;
    return n;
}

#ifdef _OPENMP
#include <omp.h>
static inline int iabn_conv_tid(void) { return omp_get_thread_num(); }
static inline int iabn_conv_team(void) { return omp_get_num_threads(); }
#else
static inline int iabn_conv_tid(void) { return 0; }
static inline int iabn_conv_team(void) { return 1; }
#endif

#endif
