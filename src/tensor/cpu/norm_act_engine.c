/* cpu/norm_act_engine.c: the engine of the CPU batch normalisation +
 * activation kernels (cpu/norm_act_impl.h; the kernels are in norm_act.c),
 * in NCHW, nChw16c and nChw8c.
 *
 * Two kernel shapes cover everything:
 *  - per-channel reductions (statistics, backward sums).  A channel group
 *    (one channel in NCHW, a block of W = 16 or 8 in the blocked layouts) is
 *    cut into fixed units, one sample's plane in chunks of CHUNK values; each
 *    unit is summed in lanes (float over FLUSH blocks, then double) and the
 *    units are added in (sample, chunk) order.  In NCHW the lanes are LANES
 *    positions of one channel, added up at the end of the unit; in a blocked
 *    layout they are the block's W channels, each its own sum.  Whole groups
 *    run in parallel when there are many, single units when there are few;
 *    both walk that same order, so the sums are bit-identical for every
 *    thread count.
 *  - elementwise passes, in blocks of values computed into a local array
 *    before any is stored: an output equal to an input is then safe without
 *    runtime alias checks, and the block loops vectorise.  In a blocked
 *    layout a block is one position's W channels and the per-channel
 *    constants are W-wide.
 * The blocked spans are instantiated per block width (W a constant, one
 * AVX2 register of floats for 8, two for 16), so that their lane loops have
 * constant trip counts and vectorise.
 * Every per-element formula comes from math/norm_act.h, shared with CUDA.
 * All layouts call the same element functions (red_pair, ew_elem) with the
 * same per-channel constants, so an elementwise output is the same bits in
 * every layout; only the reductions' summation order differs.
 */

/* The activations' selects (z >= 0 ? z : z/a) only become vector blends when
 * the compiler may evaluate both arms; under the default -ftrapping-math GCC
 * keeps the division behind a branch and leaves every such loop scalar.  No
 * code here reads the floating-point exception flags, and the values are the
 * same either way (no reassociation, no contraction). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
/* Left alone, GCC turns the zeroing of a unit's 16 + 16 accumulators into
 * memset, expanded as `rep stos`, whose start-up cost is a tenth of a
 * 196-value unit's time; as plain loops they are a few vector stores. */
#pragma GCC optimize("no-tree-loop-distribute-patterns")
#endif

#include "tensor/cpu/norm_act_impl.h"

#include <stdlib.h>
#include <string.h>

enum {
    LANES = 16,      /* NCHW's accumulators / block: two AVX registers of floats */
    MAX_BLK = 16,    /* the widest channel block (nChw16c): sizes the per-group arrays */
    FLUSH = 16,      /* blocks summed in float before the lanes move to double */
    CHUNK = 4096,    /* unit length in values; fixed, so the summation order is too */
    PAR_MIN = 32768, /* below this many values a parallel region costs more than it saves */
    NK = 7           /* per-channel constants of an elementwise kind, at most */
};
/* A blocked layout's lanes are its channels: every block of the list must
 * fit the per-group arrays and have its instantiation (layout_blk, at,
 * red_span, ew_span); a row of IABN_LAYOUTS with another block fails the
 * build here until it has them. */
#define ENGINE_HAS_BLOCK(id, name, block)                                             \
    _Static_assert(((block) == 1 || (block) == 8 || (block) == 16) && (block) <= MAX_BLK, \
                   "norm_act_engine.c has no spans for the block of " name);
IABN_LAYOUTS(ENGINE_HAS_BLOCK)
#undef ENGINE_HAS_BLOCK

#if defined(__GNUC__)
#define ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE static inline
#endif

/* Instantiates fn with the activation as a constant, so that the
 * per-element dispatch of math/act.h folds away and the block loops
 * vectorise: one case per row of IABN_ACTIVATIONS (the assertion below
 * fails the build when a row is added without its case).  A kind outside the
 * list (the layers refuse them) runs the generic dispatch, whose NaN makes
 * it loud. */
_Static_assert(IABN_ACT_COUNT == 4, "WITH_ACT needs a case for every activation of the list");
#define WITH_ACT(act, fn, kind, ...)                                                     \
    do {                                                                                 \
        switch (act) {                                                                   \
        case IABN_ACT_IDENTITY: fn(kind, IABN_ACT_IDENTITY, __VA_ARGS__); break;         \
        case IABN_ACT_RELU: fn(kind, IABN_ACT_RELU, __VA_ARGS__); break;                 \
        case IABN_ACT_LEAKY_RELU: fn(kind, IABN_ACT_LEAKY_RELU, __VA_ARGS__); break;     \
        case IABN_ACT_ELU: fn(kind, IABN_ACT_ELU, __VA_ARGS__); break;                   \
        default: fn(kind, (int)(act), __VA_ARGS__); break;                               \
        }                                                                                \
    } while (0)

/* GCC unrolls a 16- or 8-iteration lane loop with a cheap body (statistics,
 * identity) completely before its loop vectoriser runs, and the SLP pass
 * cannot vectorise the accumulations that are left; kept rolled, the loop
 * vectorises into two AVX registers per accumulator (one for 8 lanes). */
#if defined(__GNUC__) && !defined(__clang__)
#define LANE_LOOP _Pragma("GCC unroll 1")
#else
#define LANE_LOOP
#endif

static int min_int(int a, int b) { return a < b ? a : b; }

/* Channels per group: the layout's block where the engine has spans for it
 * (16, 8), else 1.  A layout outside the list (block 0) runs as NCHW; the
 * kernel table refuses it before it gets here. */
static int layout_blk(iabn_layout layout)
{
    int b = iabn_layout_block(layout);
    return b == 16 || b == 8 ? b : 1;
}

ALWAYS_INLINE size_t at_blk(int c, int hw, const int W, int ni, int ci, int p)
{
    size_t g = (size_t)ni * (size_t)(c / W) + (size_t)(ci / W);
    return (g * (size_t)hw + (size_t)p) * (size_t)W + (size_t)(ci % W);
}

/* Offset of (sample ni, channel ci, position p) with blk channels per group:
 * ((ni*(c/blk) + ci/blk)*hw + p)*blk + ci%blk, which is NCHW for blk 1,
 * nChw16c for blk 16 and nChw8c for blk 8.  Spelled out per value of blk,
 * so that no division by a variable runs per unit (NCHW's 7x7 planes have
 * many small units). */
static size_t at(int c, int hw, int blk, int ni, int ci, int p)
{
    if (blk == 1) return ((size_t)ni * (size_t)c + (size_t)ci) * (size_t)hw + (size_t)p;
    if (blk == 16) return at_blk(c, hw, 16, ni, ci, p);
    return at_blk(c, hw, 8, ni, ci, p);
}

/* A unit's positions: CHUNK values whatever the layout, so that a unit is
 * the same work in all and the parallel split of few-channel layers stays
 * as fine in the blocked layouts as in NCHW. */
static int chunk_len(int blk) { return CHUNK / blk; }

/* ======================================================================== */
/* reductions                                                                */

/* Per element the reduction adds f and f*s, where (f, s) is
 *   statistics: (x-K, x-K), K the channel's first value (a shift that keeps
 *               the sums small when |mean| >> std)
 *   BN:         (dy, xhat), dy = dz*act'(z) for RED_BN_X_ACT, with z =
 *               act(g*xhat+beta) rebuilt from x (the forward's formulas, so
 *               its bits: nothing reads z)
 *   in-place I: (dz*act'(z), (act^-1(z)-beta)/g)
 *   in-place II:(dz*act'(z), act^-1(z))
 * k0..k3: the element's channel constants (red_consts).                    */
ALWAYS_INLINE void red_pair(int kind, int act, float p, const float *a, const float *b,
                            int i, float k0, float k1, float k2, float k3,
                            float *f, float *s)
{
    switch (kind) {
    case RED_STATS: {
        float d = a[i] - k0;
        *f = d;
        *s = d;
        break;
    }
    case RED_BN_X:
        *f = b[i];
        *s = iabn_bn_xhat(a[i], k0, k1);
        break;
    case RED_BN_X_ACT: {
        float xh = iabn_bn_xhat(a[i], k0, k1);
        *f = b[i] * iabn_act_dz(act, p, iabn_act_f(act, p, iabn_bn_affine(xh, k2, k3)));
        *s = xh;
        break;
    }
    case RED_BN_XHAT:
        *f = b[i];
        *s = a[i];
        break;
    case RED_IABN1: {
        float z = a[i];
        *f = b[i] * iabn_act_dz(act, p, z);
        *s = iabn_bn_xhat_from_y(iabn_act_inv(act, p, z), k0, k1);
        break;
    }
    default: {
        float z = a[i];
        *f = b[i] * iabn_act_dz(act, p, z);
        *s = iabn_act_inv(act, p, z);
        break;
    }
    }
}

/* NCHW: len values of one channel.  Each lane sums FLUSH values in float (so
 * that the block loop vectorises), then moves into its double accumulator:
 * the float error is that of 16 terms of similar size, the long sums happen
 * in double.  out[0], out[1]: the unit's two sums. */
ALWAYS_INLINE void red_span_nchw(int kind, int act, float p, const float *a, const float *b,
                                 int len, float k0, float k1, float k2,
                                 float k3, double *out)
{
    double su[LANES], sv[LANES];
    for (int l = 0; l < LANES; l++) su[l] = sv[l] = 0.0;
    int i = 0;
    while (i < len) {
        float fu[LANES], fv[LANES];
        for (int l = 0; l < LANES; l++) fu[l] = fv[l] = 0.f;
        int end = min_int(len, i + FLUSH * LANES);
        for (; i + LANES <= end; i += LANES) {
            LANE_LOOP
            for (int l = 0; l < LANES; l++) {
                float f, s;
                red_pair(kind, act, p, a, b, i + l, k0, k1, k2, k3, &f, &s);
                fu[l] += f;
                fv[l] += f * s;
            }
        }
        for (int l = 0; i < end; i++, l++) {
            float f, s;
            red_pair(kind, act, p, a, b, i, k0, k1, k2, k3, &f, &s);
            fu[l] += f;
            fv[l] += f * s;
        }
        for (int l = 0; l < LANES; l++) {
            su[l] += (double)fu[l];
            sv[l] += (double)fv[l];
        }
    }
    double u = 0.0, v = 0.0;
    for (int l = 0; l < LANES; l++) {
        u += su[l];
        v += sv[l];
    }
    out[0] = u;
    out[1] = v;
}

/* Blocked, W (16 or 8, a constant) channels per block: len positions of
 * one channel block, lane l = channel l of the block with its own constants
 * k0[l], k1[l].  The same two-level sum per lane (float over FLUSH
 * positions, then double); out[l] and out[W + l] are channel l's two sums.
 * For W = 8 one position per step, one chain of vector adds per sum: two
 * positions side by side (16 lanes, two chains) measured no faster on an
 * AVX2 EPYC, where the small planes' per-unit costs weigh more. */
ALWAYS_INLINE void red_span_blk(int kind, int act, const int W, float p, const float *a,
                                const float *b, int len, const float *k0, const float *k1,
                                const float *k2, const float *k3, double *out)
{
    double su[MAX_BLK], sv[MAX_BLK];
    for (int l = 0; l < W; l++) su[l] = sv[l] = 0.0;
    int i = 0;
    while (i < len) {
        float fu[MAX_BLK], fv[MAX_BLK];
        for (int l = 0; l < W; l++) fu[l] = fv[l] = 0.f;
        int end = min_int(len, i + FLUSH);
        for (; i < end; i++) {
            LANE_LOOP
            for (int l = 0; l < W; l++) {
                float f, s;
                red_pair(kind, act, p, a, b, i * W + l, k0[l], k1[l], k2[l], k3[l], &f, &s);
                fu[l] += f;
                fv[l] += f * s;
            }
        }
        for (int l = 0; l < W; l++) {
            su[l] += (double)fu[l];
            sv[l] += (double)fv[l];
        }
    }
    for (int l = 0; l < W; l++) {
        out[l] = su[l];
        out[W + l] = sv[l];
    }
}

/* blk: 1 (NCHW), 16 or 8; each blocked width its own instantiation. */
ALWAYS_INLINE void red_span(int kind, int act, int blk, float p, const float *a,
                            const float *b, int len, const float *k0,
                            const float *k1, const float *k2, const float *k3, double *out)
{
    if (blk == 16)
        red_span_blk(kind, act, 16, p, a, b, len, k0, k1, k2, k3, out);
    else if (blk == 8)
        red_span_blk(kind, act, 8, p, a, b, len, k0, k1, k2, k3, out);
    else
        red_span_nchw(kind, act, p, a, b, len, k0[0], k1[0], k2[0], k3[0], out);
}

/* Channel ci's constants of red_pair. */
static void red_consts(const iabn_red_job *j, int ci, float *k0, float *k1, float *k2,
                       float *k3)
{
    *k0 = *k1 = *k2 = *k3 = 0.f;
    switch (j->kind) {
    case RED_STATS: *k0 = j->a[at(j->c, j->hw, j->blk, 0, ci, 0)]; break;
    case RED_BN_X_ACT:
        *k2 = iabn_bn_scale(j->gamma[ci], j->eps, j->abs_gamma);
        *k3 = j->beta[ci];
        /* fall through */
    case RED_BN_X:
        *k0 = j->mean[ci];
        *k1 = iabn_invstd(j->var[ci], j->eps);
        break;
    case RED_IABN1:
        *k0 = j->beta[ci];
        *k1 = 1.f / iabn_bn_scale(j->gamma[ci], j->eps, 1);
        break;
    default: break;
    }
}

/* Sums of one unit: sample ni, channel group cg, positions [off, off+len).
 * out: 2 doubles in NCHW, 2*blk in a blocked layout (red_span_blk). */
static void red_unit(const iabn_red_job *j, int ni, int cg, int off, int len, double *out)
{
    int blk = j->blk;
    size_t base = at(j->c, j->hw, blk, ni, cg * blk, off);
    const float *a = j->a + base;
    const float *b = j->b ? j->b + base : NULL;
    float p = j->p, k0[MAX_BLK], k1[MAX_BLK], k2[MAX_BLK], k3[MAX_BLK];
    for (int l = 0; l < blk; l++) red_consts(j, cg * blk + l, &k0[l], &k1[l], &k2[l], &k3[l]);
    switch (j->kind) {
    case RED_STATS:
        red_span(RED_STATS, IABN_ACT_IDENTITY, blk, p, a, b, len, k0, k1, k2, k3, out);
        break;
    case RED_BN_X:
        red_span(RED_BN_X, IABN_ACT_IDENTITY, blk, p, a, b, len, k0, k1, k2, k3, out);
        break;
    case RED_BN_X_ACT:
        WITH_ACT(j->act, red_span, RED_BN_X_ACT, blk, p, a, b, len, k0, k1, k2, k3, out);
        break;
    case RED_BN_XHAT:
        red_span(RED_BN_XHAT, IABN_ACT_IDENTITY, blk, p, a, b, len, k0, k1, k2, k3, out);
        break;
    case RED_IABN1:
        WITH_ACT(j->act, red_span, RED_IABN1, blk, p, a, b, len, k0, k1, k2, k3, out);
        break;
    default:
        WITH_ACT(j->act, red_span, RED_IABN2, blk, p, a, b, len, k0, k1, k2, k3, out);
        break;
    }
}

/* Turns channel ci's two sums into the kernel's outputs. */
static void red_finish(const iabn_red_job *j, int ci, double u, double v)
{
    switch (j->kind) {
    case RED_STATS: {
        double m = (double)j->n * (double)j->hw;
        double d = u / m;
        double var = v / m - d * d;
        j->o0[ci] = (float)((double)j->a[at(j->c, j->hw, j->blk, 0, ci, 0)] + d);
        j->o1[ci] = (float)(var > 0.0 ? var : 0.0);
        break;
    }
    case RED_IABN2: {
        double g = iabn_bn_scale(j->gamma[ci], j->eps, 1);
        j->o0[ci] = (float)u;
        j->o1[ci] = (float)iabn_iabn2_sum_dy_xhat(v, u, j->beta[ci], g);
        break;
    }
    default:
        j->o0[ci] = (float)u;
        j->o1[ci] = (float)v;
        break;
    }
}

/* Adds the units' sums (2*blk doubles each, red_unit's layout) of channel
 * group cg in (sample, chunk) order and finishes its channels. */
static void red_group_finish(const iabn_red_job *j, int cg, const double *units, long count)
{
    int blk = j->blk;
    double u[MAX_BLK], v[MAX_BLK];
    for (int l = 0; l < blk; l++) u[l] = v[l] = 0.0;
    for (long k = 0; k < count; k++) {
        const double *part = units + 2 * blk * k;
        for (int l = 0; l < blk; l++) {
            u[l] += part[l];
            v[l] += part[blk + l];
        }
    }
    for (int l = 0; l < blk; l++) red_finish(j, cg * blk + l, u[l], v[l]);
}

/* One channel group, its units in (sample, chunk) order, one at a time. */
static void red_group(const iabn_red_job *j, int cg, int nch)
{
    int blk = j->blk, cl = chunk_len(blk);
    double u[MAX_BLK], v[MAX_BLK];
    for (int l = 0; l < blk; l++) u[l] = v[l] = 0.0;
    for (int ni = 0; ni < j->n; ni++)
        for (int k = 0; k < nch; k++) {
            double part[2 * MAX_BLK];
            red_unit(j, ni, cg, k * cl, min_int(cl, j->hw - k * cl), part);
            for (int l = 0; l < blk; l++) {
                u[l] += part[l];
                v[l] += part[blk + l];
            }
        }
    for (int l = 0; l < blk; l++) red_finish(j, cg * blk + l, u[l], v[l]);
}

void iabn_red_run(const iabn_red_job *j)
{
    int blk = j->blk, cl = chunk_len(blk);
    int groups = j->c / blk, nch = (j->hw + cl - 1) / cl;
    long per_g = (long)j->n * nch;
    long units = per_g * groups;
    int threads = (size_t)j->n * (size_t)j->c * (size_t)j->hw >= PAR_MIN ? iabn_num_threads() : 1;
    double *part = NULL;
    /* Few groups: run units in parallel and add their partials afterwards,
     * in the order red_group uses.  The buffer is a few doubles per unit;
     * without it the group loop gives the same bits, only less parallel. */
    if (threads > 1 && groups < 4 * threads && per_g > 1)
        part = malloc(sizeof(double) * 2 * (size_t)blk * (size_t)units);
    if (!part) {
        #pragma omp parallel for schedule(dynamic, 1) if (threads > 1)
        for (int cg = 0; cg < groups; cg++) red_group(j, cg, nch);
        return;
    }
    #pragma omp parallel for schedule(static)
    for (long u = 0; u < units; u++) {
        int cg = (int)(u / per_g);
        long k = u % per_g;
        int ni = (int)(k / nch), ch = (int)(k % nch);
        red_unit(j, ni, cg, ch * cl, min_int(cl, j->hw - ch * cl), part + 2 * blk * u);
    }
    for (int cg = 0; cg < groups; cg++)
        red_group_finish(j, cg, part + 2 * blk * cg * per_g, per_g);
    free(part);
}

iabn_red_job iabn_red_job_init(int kind, int n, int c, int hw, iabn_layout layout,
                               const float *a, const float *b)
{
    iabn_red_job j;
    memset(&j, 0, sizeof j);
    j.kind = kind;
    j.act = IABN_ACT_IDENTITY;
    j.n = n;
    j.c = c;
    j.hw = hw;
    j.blk = layout_blk(layout);
    j.a = a;
    j.b = b;
    return j;
}

/* ======================================================================== */
/* elementwise passes                                                        */

/* Value of element i; k0..k6 are its channel's constants (ew_consts_one
 * gives their meaning per kind). */
ALWAYS_INLINE float ew_elem(int kind, int act, float p, const float *a, const float *b,
                            int i, float k0, float k1, float k2, float k3,
                            float k4, float k5, float k6, float *xh_out)
{
    switch (kind) {
    case EW_FWD: {
        float xh = iabn_bn_xhat(a[i], k0, k1);
        *xh_out = xh;
        return iabn_act_f(act, p, iabn_bn_affine(xh, k2, k3));
    }
    case EW_FROM_XHAT: return iabn_act_f(act, p, iabn_bn_affine(a[i], k0, k1));
    case EW_BN_X: return iabn_bn_bwd_elem(b[i], iabn_bn_xhat(a[i], k0, k1), k2, k3, k4);
    case EW_BN_X_ACT: { /* z rebuilt from x with the forward's formulas */
        float xh = iabn_bn_xhat(a[i], k0, k1);
        float z = iabn_act_f(act, p, iabn_bn_affine(xh, k5, k6));
        return iabn_bn_bwd_elem(b[i] * iabn_act_dz(act, p, z), xh, k2, k3, k4);
    }
    case EW_BN_XHAT: return iabn_bn_bwd_elem(b[i], a[i], k0, k1, k2);
    case EW_SCALE: return k0 * b[i];
    case EW_IABN1: {
        float z = a[i];
        float dy = b[i] * iabn_act_dz(act, p, z);
        float xh = iabn_bn_xhat_from_y(iabn_act_inv(act, p, z), k0, k1);
        return iabn_bn_bwd_elem(dy, xh, k2, k3, k4);
    }
    case EW_IABN2: {
        float z = a[i];
        float dy = b[i] * iabn_act_dz(act, p, z);
        return iabn_iabn2_elem(k0, k1, k2, dy, iabn_act_inv(act, p, z));
    }
    case EW_IABN_EVAL: return k0 * (b[i] * iabn_act_dz(act, p, a[i]));
    case EW_ACT_FWD: return iabn_act_f(act, p, a[i]);
    default: return b[i] * iabn_act_dz(act, p, a[i]);
    }
}

/* NCHW: len values of one channel, constants k[m][0].  All LANES values of a
 * block are computed before any is stored, which is what makes o == a or
 * o == b safe. */
ALWAYS_INLINE void ew_span_nchw(int kind, int act, float p, const float *a, const float *b,
                                float *o, float *o2, int len,
                                const float (*k)[MAX_BLK])
{
    float k0 = k[0][0], k1 = k[1][0], k2 = k[2][0], k3 = k[3][0], k4 = k[4][0];
    float k5 = k[5][0], k6 = k[6][0];
    int i = 0;
    for (; i + LANES <= len; i += LANES) {
        float t[LANES], t2[LANES];
        LANE_LOOP
        for (int l = 0; l < LANES; l++)
            t[l] = ew_elem(kind, act, p, a, b, i + l, k0, k1, k2, k3, k4, k5, k6, &t2[l]);
        if (kind == EW_FWD && o2)
            for (int l = 0; l < LANES; l++) o2[i + l] = t2[l];
        for (int l = 0; l < LANES; l++) o[i + l] = t[l];
    }
    for (; i < len; i++) {
        float t2 = 0.f;
        float t = ew_elem(kind, act, p, a, b, i, k0, k1, k2, k3, k4, k5, k6, &t2);
        if (kind == EW_FWD && o2) o2[i] = t2;
        o[i] = t;
    }
}

/* Blocked, W (16 or 8, a constant) channels per block: len positions of
 * one channel block, a block of W values per position, lane l with channel
 * l's constants k[m][l]. */
ALWAYS_INLINE void ew_span_blk(int kind, int act, const int W, float p, const float *a,
                               const float *b, float *o, float *o2, int len,
                               const float (*k)[MAX_BLK])
{
    for (int i = 0; i < len; i++) {
        float t[MAX_BLK], t2[MAX_BLK];
        int base = i * W;
        LANE_LOOP
        for (int l = 0; l < W; l++)
            t[l] = ew_elem(kind, act, p, a, b, base + l, k[0][l], k[1][l], k[2][l], k[3][l],
                           k[4][l], k[5][l], k[6][l], &t2[l]);
        if (kind == EW_FWD && o2)
            for (int l = 0; l < W; l++) o2[base + l] = t2[l];
        for (int l = 0; l < W; l++) o[base + l] = t[l];
    }
}

/* blk: 1 (NCHW), 16 or 8; each blocked width its own instantiation. */
ALWAYS_INLINE void ew_span(int kind, int act, int blk, float p, const float *a,
                           const float *b, float *o, float *o2, int len,
                           const float (*k)[MAX_BLK])
{
    if (blk == 16)
        ew_span_blk(kind, act, 16, p, a, b, o, o2, len, k);
    else if (blk == 8)
        ew_span_blk(kind, act, 8, p, a, b, o, o2, len, k);
    else
        ew_span_nchw(kind, act, p, a, b, o, o2, len, k);
}

/* One span at offset base: len values (NCHW) or positions (blocked). */
static void ew_span_any(const iabn_ew_job *j, size_t base, int len, const float (*k)[MAX_BLK])
{
    const float *a = j->a ? j->a + base : NULL;
    const float *b = j->b ? j->b + base : NULL;
    float *o = j->o + base, *o2 = j->o2 ? j->o2 + base : NULL;
    float p = j->p;
    int bl = j->blk;
    switch (j->kind) {
    case EW_FWD: WITH_ACT(j->act, ew_span, EW_FWD, bl, p, a, b, o, o2, len, k); break;
    case EW_FROM_XHAT: WITH_ACT(j->act, ew_span, EW_FROM_XHAT, bl, p, a, b, o, o2, len, k); break;
    case EW_BN_X: ew_span(EW_BN_X, IABN_ACT_IDENTITY, bl, p, a, b, o, o2, len, k); break;
    case EW_BN_X_ACT: WITH_ACT(j->act, ew_span, EW_BN_X_ACT, bl, p, a, b, o, o2, len, k); break;
    case EW_BN_XHAT: ew_span(EW_BN_XHAT, IABN_ACT_IDENTITY, bl, p, a, b, o, o2, len, k); break;
    case EW_SCALE: ew_span(EW_SCALE, IABN_ACT_IDENTITY, bl, p, a, b, o, o2, len, k); break;
    case EW_IABN1: WITH_ACT(j->act, ew_span, EW_IABN1, bl, p, a, b, o, o2, len, k); break;
    case EW_IABN2: WITH_ACT(j->act, ew_span, EW_IABN2, bl, p, a, b, o, o2, len, k); break;
    case EW_IABN_EVAL: WITH_ACT(j->act, ew_span, EW_IABN_EVAL, bl, p, a, b, o, o2, len, k); break;
    case EW_ACT_FWD: WITH_ACT(j->act, ew_span, EW_ACT_FWD, bl, p, a, b, o, o2, len, k); break;
    default: WITH_ACT(j->act, ew_span, EW_ACT_BWD, bl, p, a, b, o, o2, len, k); break;
    }
}

/* Channel ci's constants (see ew_elem for their order). */
static void ew_consts_one(const iabn_ew_job *j, int ci, float k[NK])
{
    float g = j->gamma ? iabn_bn_scale(j->gamma[ci], j->eps, j->abs_gamma) : 1.f;
    float invstd = j->var ? iabn_invstd(j->var[ci], j->eps) : 1.f;
    double inv_m = j->count > 0.0 ? 1.0 / j->count : 0.0;
    float mdy = j->sum_dy ? (float)((double)j->sum_dy[ci] * inv_m) : 0.f;
    float mdx = j->sum_dy_xhat ? (float)((double)j->sum_dy_xhat[ci] * inv_m) : 0.f;
    for (int m = 0; m < NK; m++) k[m] = 0.f;
    switch (j->kind) {
    case EW_FWD: k[0] = j->mean[ci]; k[1] = invstd; k[2] = g; k[3] = j->beta[ci]; break;
    case EW_FROM_XHAT: k[0] = g; k[1] = j->beta[ci]; break;
    case EW_BN_X:
    case EW_BN_X_ACT:
        k[0] = j->mean[ci]; k[1] = invstd; k[2] = g * invstd; k[3] = mdy; k[4] = mdx;
        if (j->kind == EW_BN_X_ACT) { k[5] = g; k[6] = j->beta[ci]; }
        break;
    case EW_BN_XHAT: k[0] = g * invstd; k[1] = mdy; k[2] = mdx; break;
    case EW_SCALE: case EW_IABN_EVAL: k[0] = g * invstd; break;
    case EW_IABN1:
        k[0] = j->beta[ci]; k[1] = 1.f / g; k[2] = g * invstd; k[3] = mdy; k[4] = mdx;
        break;
    case EW_IABN2:
        iabn_iabn2_coeffs(g, invstd, j->beta[ci], (double)j->sum_dy[ci],
                          (double)j->sum_dy_xhat[ci], j->count, 1, &k[0], &k[1], &k[2]);
        break;
    default: break;
    }
}

/* The constants of channel group cg: k[m][l] for its channel l (NCHW: lane
 * 0 alone, the only one its spans read). */
static void ew_consts(const iabn_ew_job *j, int cg, float k[NK][MAX_BLK])
{
    for (int l = 0; l < j->blk; l++) {
        float one[NK];
        ew_consts_one(j, cg * j->blk + l, one);
        for (int m = 0; m < NK; m++) k[m][l] = one[m];
    }
}

/* Units are (channel group, chunk of the plane, group of samples) and walk
 * their samples, so the per-channel constants are computed once per unit
 * even for 7x7 planes; the samples are split into groups only when there are
 * too few (channel group, chunk) units to keep every thread busy.
 * Elementwise results do not depend on the split. */
void iabn_ew_run(const iabn_ew_job *j)
{
    int blk = j->blk, cl = chunk_len(blk);
    int nch = (j->hw + cl - 1) / cl;
    int threads = (size_t)j->n * (size_t)j->c * (size_t)j->hw >= PAR_MIN ? iabn_num_threads() : 1;
    long cu = (long)(j->c / blk) * nch;
    int sgroups = 1;
    if (cu < 4L * threads) {
        long want = (4L * threads + cu - 1) / cu;
        sgroups = want < j->n ? (int)want : j->n;
    }
    int per_g = (j->n + sgroups - 1) / sgroups;
    long units = cu * sgroups;
    #pragma omp parallel for schedule(static) if (threads > 1)
    for (long u = 0; u < units; u++) {
        int gi = (int)(u % sgroups);
        long cc = u / sgroups;
        int cg = (int)(cc / nch), off = (int)(cc % nch) * cl;
        int len = min_int(cl, j->hw - off);
        int n1 = min_int(j->n, (gi + 1) * per_g);
        float k[NK][MAX_BLK];
        ew_consts(j, cg, k);
        for (int ni = gi * per_g; ni < n1; ni++)
            ew_span_any(j, at(j->c, j->hw, blk, ni, cg * blk, off), len,
                        (const float (*)[MAX_BLK])k);
    }
}

/* A reduction and the elementwise pass that reads its sums, one channel
 * group at a time: red_group's sums (the order iabn_red_run keeps on every
 * path, so the same bits), then the group's planes while they are still in
 * the core's cache; apart, the second pass reads every plane again from the
 * shared cache or memory (docs/CPU.md: 7-13% of BN's backward per call at
 * ResNeXt's 14x14 and 28x28).  Declined (0) where the groups are too few to
 * keep every thread on whole groups, or where a group's planes outgrow
 * FUSE_BYTES (the 56x56 layers, where it did not pay). */
enum { FUSE_BYTES = 512 << 10 };

int iabn_red_ew_run(const iabn_red_job *r, const iabn_ew_job *w)
{
    int blk = r->blk, cl = chunk_len(blk);
    int groups = r->c / blk, nch = (r->hw + cl - 1) / cl;
    int threads = (size_t)r->n * (size_t)r->c * (size_t)r->hw >= PAR_MIN ? iabn_num_threads() : 1;
    size_t group_bytes = (size_t)r->n * (size_t)r->hw * (size_t)blk * sizeof(float) *
                         (r->b ? 2u : 1u);
    if (r->n <= 0 || r->hw <= 0 || groups < 4 * threads || group_bytes > FUSE_BYTES) return 0;
    #pragma omp parallel for schedule(dynamic, 1) if (threads > 1)
    for (int cg = 0; cg < groups; cg++) {
        red_group(r, cg, nch);
        float k[NK][MAX_BLK];
        ew_consts(w, cg, k);
        for (int ni = 0; ni < w->n; ni++)
            for (int off = 0; off < w->hw; off += cl)
                ew_span_any(w, at(w->c, w->hw, blk, ni, cg * blk, off), min_int(cl, w->hw - off),
                            (const float (*)[MAX_BLK])k);
    }
    return 1;
}

iabn_ew_job iabn_ew_job_init(int kind, int n, int c, int hw, iabn_layout layout, const float *a,
                             const float *b, float *o)
{
    iabn_ew_job j;
    memset(&j, 0, sizeof j);
    j.kind = kind;
    j.act = IABN_ACT_IDENTITY;
    j.n = n;
    j.c = c;
    j.hw = hw;
    j.blk = layout_blk(layout);
    j.a = a;
    j.b = b;
    j.o = o;
    return j;
}

/* The standalone activation has no channels: one flat "plane" in NCHW. */
void iabn_act_run(int kind, size_t count, iabn_act act, const float *a, const float *b,
                  float *o)
{
    if (count == 0) return;
    int par = count >= PAR_MIN && iabn_num_threads() > 1;
    long units = (long)((count + CHUNK - 1) / CHUNK);
    iabn_ew_job j = iabn_ew_job_init(kind, 1, 1, CHUNK, IABN_LAYOUT_NCHW, a, b, o);
    j.act = act.kind;
    j.p = act.param;
    #pragma omp parallel for schedule(static) if (par)
    for (long u = 0; u < units; u++) {
        size_t off = (size_t)u * CHUNK;
        int len = (int)(count - off < CHUNK ? count - off : CHUNK);
        float k[NK][MAX_BLK] = {{0.f}};
        ew_span_any(&j, off, len, (const float (*)[MAX_BLK])k);
    }
}
