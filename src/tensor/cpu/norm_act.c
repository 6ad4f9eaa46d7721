/* cpu/norm_act.c: batch normalisation + activation kernels, every mode (cpu/norm_act.h).
 *
 * Two kernel shapes cover everything:
 *  - per-channel reductions (statistics, backward sums).  A channel's data is
 *    cut into fixed units, one sample's plane in chunks of CHUNK values; each
 *    unit is summed in LANES lanes (float over FLUSH blocks, then double) and
 *    the units are added in (sample, chunk) order.  Whole channels run in
 *    parallel when C is large, single units when C is small; both walk that
 *    same order, so the sums are bit-identical for every thread count.
 *  - elementwise passes, in blocks of LANES values computed into a local array
 *    before any is stored: an output equal to an input is then safe without
 *    runtime alias checks, and the block loops vectorise.
 * Every per-element formula comes from math/norm_act.h, shared with CUDA.
 */

/* The activations' selects (z >= 0 ? z : z/a) only become vector blends when
 * the compiler may evaluate both arms; under the default -ftrapping-math GCC
 * keeps the division behind a branch and leaves every such loop scalar.  No
 * code here reads the floating-point exception flags, and the values are the
 * same either way (no reassociation, no contraction). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "tensor/tensor.h"

#include <stdlib.h>

enum {
    LANES = 16,      /* accumulators / block width: two AVX registers of floats */
    FLUSH = 16,      /* blocks summed in float before the lanes move to double */
    CHUNK = 4096,    /* unit length; fixed, so the summation order is too */
    PAR_MIN = 32768  /* below this many values a parallel region costs more than it saves */
};

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

/* GCC unrolls a 16-iteration lane loop with a cheap body (statistics,
 * identity) completely before its loop vectoriser runs, and the SLP pass
 * cannot vectorise the accumulations that are left; kept rolled, the loop
 * vectorises into two AVX registers per accumulator. */
#if defined(__GNUC__) && !defined(__clang__)
#define LANE_LOOP _Pragma("GCC unroll 1")
#else
#define LANE_LOOP
#endif

static int min_int(int a, int b) { return a < b ? a : b; }

/* ======================================================================== */
/* reductions                                                                */

enum red_kind { RED_STATS, RED_BN_X, RED_BN_XHAT, RED_IABN1, RED_IABN2 };

typedef struct red_job {
    int kind, act;
    float p;
    int n, c, hw;
    const float *a;    /* x, xhat or z */
    const float *b;    /* dy or dz; NULL for statistics */
    const float *mean, *var, *gamma, *beta;
    float eps;
    float *o0, *o1;    /* mean/var or sum_dy/sum_dy_xhat */
} red_job;

/* Per element the reduction adds f and f*s, where (f, s) is
 *   statistics: (x-K, x-K), K the channel's first value (a shift that keeps
 *               the sums small when |mean| >> std)
 *   BN:         (dy, xhat)
 *   in-place I: (dz*act'(z), (act^-1(z)-beta)/g)
 *   in-place II:(dz*act'(z), act^-1(z))                                     */
ALWAYS_INLINE void red_pair(int kind, int act, float p, const float *a, const float *b,
                            int i, float k0, float k1, float *f, float *s)
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

/* Each lane sums FLUSH values in float (so that the block loop vectorises),
 * then moves into its double accumulator: the float error is that of 16 terms
 * of similar size, the long sums happen in double. */
ALWAYS_INLINE void red_span(int kind, int act, float p, const float *a, const float *b,
                            int len, float k0, float k1, double out[2])
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
                red_pair(kind, act, p, a, b, i + l, k0, k1, &f, &s);
                fu[l] += f;
                fv[l] += f * s;
            }
        }
        for (int l = 0; i < end; i++, l++) {
            float f, s;
            red_pair(kind, act, p, a, b, i, k0, k1, &f, &s);
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

/* Sums of one unit: sample ni, channel ci, values [off, off+len) of the plane. */
static void red_unit(const red_job *j, int ni, int ci, int off, int len, double out[2])
{
    size_t base = ((size_t)ni * (size_t)j->c + (size_t)ci) * (size_t)j->hw + (size_t)off;
    const float *a = j->a + base;
    const float *b = j->b ? j->b + base : NULL;
    float p = j->p;
    switch (j->kind) {
    case RED_STATS:
        red_span(RED_STATS, IABN_ACT_IDENTITY, p, a, b, len, j->a[(size_t)ci * (size_t)j->hw],
                 0.f, out);
        break;
    case RED_BN_X:
        red_span(RED_BN_X, IABN_ACT_IDENTITY, p, a, b, len, j->mean[ci],
                 iabn_invstd(j->var[ci], j->eps), out);
        break;
    case RED_BN_XHAT:
        red_span(RED_BN_XHAT, IABN_ACT_IDENTITY, p, a, b, len, 0.f, 0.f, out);
        break;
    case RED_IABN1: {
        float g = iabn_bn_scale(j->gamma[ci], j->eps, 1);
        WITH_ACT(j->act, red_span, RED_IABN1, p, a, b, len, j->beta[ci], 1.f / g, out);
        break;
    }
    default:
        WITH_ACT(j->act, red_span, RED_IABN2, p, a, b, len, 0.f, 0.f, out);
        break;
    }
}

/* Turns the channel's two sums into the kernel's outputs. */
static void red_finish(const red_job *j, int ci, double u, double v)
{
    switch (j->kind) {
    case RED_STATS: {
        double m = (double)j->n * (double)j->hw;
        double d = u / m;
        double var = v / m - d * d;
        j->o0[ci] = (float)((double)j->a[(size_t)ci * (size_t)j->hw] + d);
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

static void red_channel(const red_job *j, int ci, int nch)
{
    double u = 0.0, v = 0.0;
    for (int ni = 0; ni < j->n; ni++)
        for (int k = 0; k < nch; k++) {
            double part[2];
            red_unit(j, ni, ci, k * CHUNK, min_int(CHUNK, j->hw - k * CHUNK), part);
            u += part[0];
            v += part[1];
        }
    red_finish(j, ci, u, v);
}

static void red_run(const red_job *j)
{
    int nch = (j->hw + CHUNK - 1) / CHUNK;
    long per_c = (long)j->n * nch;
    long units = per_c * j->c;
    int threads = (size_t)j->n * (size_t)j->c * (size_t)j->hw >= PAR_MIN ? iabn_num_threads() : 1;
    double *part = NULL;
    /* Few channels: run units in parallel and add their partials afterwards,
     * in the order red_channel uses.  The buffer is a few doubles per unit;
     * without it the channel loop gives the same bits, only less parallel. */
    if (threads > 1 && j->c < 4 * threads && per_c > 1)
        part = malloc(sizeof(double) * 2 * (size_t)units);
    if (!part) {
        #pragma omp parallel for schedule(dynamic, 1) if (threads > 1)
        for (int ci = 0; ci < j->c; ci++) red_channel(j, ci, nch);
        return;
    }
    #pragma omp parallel for schedule(static)
    for (long u = 0; u < units; u++) {
        int ci = (int)(u / per_c);
        long k = u % per_c;
        int ni = (int)(k / nch), ch = (int)(k % nch);
        red_unit(j, ni, ci, ch * CHUNK, min_int(CHUNK, j->hw - ch * CHUNK), part + 2 * u);
    }
    for (int ci = 0; ci < j->c; ci++) {
        double u = 0.0, v = 0.0;
        for (long k = 0; k < per_c; k++) {
            u += part[2 * (ci * per_c + k)];
            v += part[2 * (ci * per_c + k) + 1];
        }
        red_finish(j, ci, u, v);
    }
    free(part);
}

static red_job red_job_init(int kind, int n, int c, int hw, const float *a, const float *b)
{
    red_job j;
    j.kind = kind;
    j.act = IABN_ACT_IDENTITY;
    j.p = 0.f;
    j.n = n;
    j.c = c;
    j.hw = hw;
    j.a = a;
    j.b = b;
    j.mean = j.var = j.gamma = j.beta = NULL;
    j.eps = 0.f;
    j.o0 = j.o1 = NULL;
    return j;
}

/* ======================================================================== */
/* elementwise passes                                                        */

enum ew_kind {
    EW_FWD,         /* z = act(g*xhat+beta), xhat = (x-mean)*invstd, xhat kept if asked */
    EW_FROM_XHAT,   /* z = act(g*xhat+beta) */
    EW_BN_X,        /* dx from x (training) */
    EW_BN_XHAT,     /* dx from xhat (training) */
    EW_SCALE,       /* dx = a*dy (evaluation) */
    EW_IABN1,       /* dx from z, xhat rebuilt per element */
    EW_IABN2,       /* dx = A*dy + B*y + C */
    EW_IABN_EVAL,   /* dx = a*dz*act'(z) */
    EW_ACT_FWD,     /* y = act(x) */
    EW_ACT_BWD      /* dx = dy*act'(y) */
};

typedef struct ew_job {
    int kind, act;
    float p;
    int n, c, hw;
    const float *a, *b;  /* first and second input (x/xhat/z, dy/dz) */
    float *o, *o2;       /* output; o2: the kept xhat of EW_FWD or NULL */
    const float *mean, *var, *gamma, *beta, *sum_dy, *sum_dy_xhat;
    float eps;
    int abs_gamma;
    double count;
} ew_job;

/* Value of element i; k holds the kind's per-channel constants. */
ALWAYS_INLINE float ew_elem(int kind, int act, float p, const float *a, const float *b,
                            int i, const float *k, float *xh_out)
{
    switch (kind) {
    case EW_FWD: {
        float xh = iabn_bn_xhat(a[i], k[0], k[1]);
        *xh_out = xh;
        return iabn_act_f(act, p, iabn_bn_affine(xh, k[2], k[3]));
    }
    case EW_FROM_XHAT: return iabn_act_f(act, p, iabn_bn_affine(a[i], k[0], k[1]));
    case EW_BN_X: return iabn_bn_bwd_elem(b[i], iabn_bn_xhat(a[i], k[0], k[1]), k[2], k[3], k[4]);
    case EW_BN_XHAT: return iabn_bn_bwd_elem(b[i], a[i], k[0], k[1], k[2]);
    case EW_SCALE: return k[0] * b[i];
    case EW_IABN1: {
        float z = a[i];
        float dy = b[i] * iabn_act_dz(act, p, z);
        float xh = iabn_bn_xhat_from_y(iabn_act_inv(act, p, z), k[0], k[1]);
        return iabn_bn_bwd_elem(dy, xh, k[2], k[3], k[4]);
    }
    case EW_IABN2: {
        float z = a[i];
        float dy = b[i] * iabn_act_dz(act, p, z);
        return iabn_iabn2_elem(k[0], k[1], k[2], dy, iabn_act_inv(act, p, z));
    }
    case EW_IABN_EVAL: return k[0] * (b[i] * iabn_act_dz(act, p, a[i]));
    case EW_ACT_FWD: return iabn_act_f(act, p, a[i]);
    default: return b[i] * iabn_act_dz(act, p, a[i]);
    }
}

/* All LANES values of a block are computed before any is stored, which is
 * what makes o == a or o == b safe. */
ALWAYS_INLINE void ew_span(int kind, int act, float p, const float *a, const float *b,
                           float *o, float *o2, int len, const float *k)
{
    int i = 0;
    for (; i + LANES <= len; i += LANES) {
        float t[LANES], t2[LANES];
        LANE_LOOP
        for (int l = 0; l < LANES; l++) t[l] = ew_elem(kind, act, p, a, b, i + l, k, &t2[l]);
        if (kind == EW_FWD && o2)
            for (int l = 0; l < LANES; l++) o2[i + l] = t2[l];
        for (int l = 0; l < LANES; l++) o[i + l] = t[l];
    }
    for (; i < len; i++) {
        float t2 = 0.f;
        float t = ew_elem(kind, act, p, a, b, i, k, &t2);
        if (kind == EW_FWD && o2) o2[i] = t2;
        o[i] = t;
    }
}

static void ew_span_any(const ew_job *j, size_t base, int len, const float *k)
{
    const float *a = j->a ? j->a + base : NULL;
    const float *b = j->b ? j->b + base : NULL;
    float *o = j->o + base, *o2 = j->o2 ? j->o2 + base : NULL;
    float p = j->p;
    switch (j->kind) {
    case EW_FWD: WITH_ACT(j->act, ew_span, EW_FWD, p, a, b, o, o2, len, k); break;
    case EW_FROM_XHAT: WITH_ACT(j->act, ew_span, EW_FROM_XHAT, p, a, b, o, o2, len, k); break;
    case EW_BN_X: ew_span(EW_BN_X, IABN_ACT_IDENTITY, p, a, b, o, o2, len, k); break;
    case EW_BN_XHAT: ew_span(EW_BN_XHAT, IABN_ACT_IDENTITY, p, a, b, o, o2, len, k); break;
    case EW_SCALE: ew_span(EW_SCALE, IABN_ACT_IDENTITY, p, a, b, o, o2, len, k); break;
    case EW_IABN1: WITH_ACT(j->act, ew_span, EW_IABN1, p, a, b, o, o2, len, k); break;
    case EW_IABN2: WITH_ACT(j->act, ew_span, EW_IABN2, p, a, b, o, o2, len, k); break;
    case EW_IABN_EVAL: WITH_ACT(j->act, ew_span, EW_IABN_EVAL, p, a, b, o, o2, len, k); break;
    case EW_ACT_FWD: WITH_ACT(j->act, ew_span, EW_ACT_FWD, p, a, b, o, o2, len, k); break;
    default: WITH_ACT(j->act, ew_span, EW_ACT_BWD, p, a, b, o, o2, len, k); break;
    }
}

/* The kind's per-channel constants (see ew_elem for their order). */
static void ew_consts(const ew_job *j, int ci, float k[5])
{
    float g = j->gamma ? iabn_bn_scale(j->gamma[ci], j->eps, j->abs_gamma) : 1.f;
    float invstd = j->var ? iabn_invstd(j->var[ci], j->eps) : 1.f;
    double inv_m = j->count > 0.0 ? 1.0 / j->count : 0.0;
    float mdy = j->sum_dy ? (float)((double)j->sum_dy[ci] * inv_m) : 0.f;
    float mdx = j->sum_dy_xhat ? (float)((double)j->sum_dy_xhat[ci] * inv_m) : 0.f;
    k[0] = k[1] = k[2] = k[3] = k[4] = 0.f;
    switch (j->kind) {
    case EW_FWD: k[0] = j->mean[ci]; k[1] = invstd; k[2] = g; k[3] = j->beta[ci]; break;
    case EW_FROM_XHAT: k[0] = g; k[1] = j->beta[ci]; break;
    case EW_BN_X: k[0] = j->mean[ci]; k[1] = invstd; k[2] = g * invstd; k[3] = mdy; k[4] = mdx; break;
    case EW_BN_XHAT: k[0] = g * invstd; k[1] = mdy; k[2] = mdx; break;
    case EW_SCALE: case EW_IABN_EVAL: k[0] = g * invstd; break;
    case EW_IABN1: k[0] = j->beta[ci]; k[1] = 1.f / g; k[2] = g * invstd; k[3] = mdy; k[4] = mdx; break;
    case EW_IABN2:
        iabn_iabn2_coeffs(g, invstd, j->beta[ci], (double)j->sum_dy[ci],
                          (double)j->sum_dy_xhat[ci], j->count, 1, &k[0], &k[1], &k[2]);
        break;
    default: break;
    }
}

/* Units are (channel, chunk of the plane, group of samples) and walk their
 * samples, so the per-channel constants are computed once per unit even for
 * 7x7 planes; the samples are split into groups only when there are too few
 * (channel, chunk) units to keep every thread busy.  Elementwise results do
 * not depend on the split. */
static void ew_run(const ew_job *j)
{
    int nch = (j->hw + CHUNK - 1) / CHUNK;
    int threads = (size_t)j->n * (size_t)j->c * (size_t)j->hw >= PAR_MIN ? iabn_num_threads() : 1;
    long cu = (long)j->c * nch;
    int groups = 1;
    if (cu < 4L * threads) {
        long want = (4L * threads + cu - 1) / cu;
        groups = want < j->n ? (int)want : j->n;
    }
    int per_g = (j->n + groups - 1) / groups;
    long units = cu * groups;
    #pragma omp parallel for schedule(static) if (threads > 1)
    for (long u = 0; u < units; u++) {
        int gi = (int)(u % groups);
        long cc = u / groups;
        int ci = (int)(cc / nch), off = (int)(cc % nch) * CHUNK;
        int len = min_int(CHUNK, j->hw - off);
        int n1 = min_int(j->n, (gi + 1) * per_g);
        float k[5];
        ew_consts(j, ci, k);
        for (int ni = gi * per_g; ni < n1; ni++)
            ew_span_any(j, ((size_t)ni * (size_t)j->c + (size_t)ci) * (size_t)j->hw + (size_t)off,
                        len, k);
    }
}

static ew_job ew_job_init(int kind, int n, int c, int hw, const float *a, const float *b, float *o)
{
    ew_job j;
    j.kind = kind;
    j.act = IABN_ACT_IDENTITY;
    j.p = 0.f;
    j.n = n;
    j.c = c;
    j.hw = hw;
    j.a = a;
    j.b = b;
    j.o = o;
    j.o2 = NULL;
    j.mean = j.var = j.gamma = j.beta = j.sum_dy = j.sum_dy_xhat = NULL;
    j.eps = 0.f;
    j.abs_gamma = 0;
    j.count = 0.0;
    return j;
}

static int empty(int n, int c, int hw) { return n <= 0 || c <= 0 || hw <= 0; }

/* ======================================================================== */
/* statistics                                                                */

void iabn_bn_stats(int n, int c, int hw, const float *x, float *mean, float *var)
{
    if (c <= 0) return;
    if (n <= 0 || hw <= 0) {
        for (int ci = 0; ci < c; ci++) mean[ci] = var[ci] = 0.f;
        return;
    }
    red_job j = red_job_init(RED_STATS, n, c, hw, x, NULL);
    j.o0 = mean;
    j.o1 = var;
    red_run(&j);
}

void iabn_bn_stats_combine(int workers, int c, const double *counts, const float *means,
                           const float *vars, float *mean, float *var)
{
    for (int ci = 0; ci < c; ci++) {
        double n = 0.0, s = 0.0;
        for (int w = 0; w < workers; w++) {
            n += counts[w];
            s += counts[w] * (double)means[(size_t)w * c + ci];
        }
        if (!(n > 0.0)) {
            mean[ci] = var[ci] = 0.f;
            continue;
        }
        double mu = s / n, q = 0.0;
        for (int w = 0; w < workers; w++) {
            double d = (double)means[(size_t)w * c + ci] - mu;
            q += counts[w] * ((double)vars[(size_t)w * c + ci] + d * d);
        }
        mean[ci] = (float)mu;
        var[ci] = (float)(q / n);
    }
}

void iabn_bn_update_running(int c, double m, float momentum, const float *mean,
                            const float *var, float *running_mean, float *running_var)
{
    double unbias = m > 1.0 ? m / (m - 1.0) : 1.0;
    double mo = momentum;
    for (int ci = 0; ci < c; ci++) {
        running_mean[ci] = (float)((1.0 - mo) * running_mean[ci] + mo * mean[ci]);
        running_var[ci] = (float)((1.0 - mo) * running_var[ci] + mo * var[ci] * unbias);
    }
}

/* ======================================================================== */
/* forward                                                                   */

void iabn_norm_act_fwd(int n, int c, int hw, const float *x, const float *mean,
                       const float *var, float eps, const float *gamma,
                       const float *beta, int abs_gamma, iabn_act act, float *z,
                       float *xhat)
{
    if (empty(n, c, hw)) return;
    ew_job j = ew_job_init(EW_FWD, n, c, hw, x, NULL, z);
    j.act = act.kind;
    j.p = act.param;
    j.o2 = xhat;
    j.mean = mean;
    j.var = var;
    j.eps = eps;
    j.gamma = gamma;
    j.beta = beta;
    j.abs_gamma = abs_gamma;
    ew_run(&j);
}

void iabn_norm_act_from_xhat(int n, int c, int hw, const float *xhat, float eps,
                             const float *gamma, const float *beta, int abs_gamma,
                             iabn_act act, float *z)
{
    if (empty(n, c, hw)) return;
    ew_job j = ew_job_init(EW_FROM_XHAT, n, c, hw, xhat, NULL, z);
    j.act = act.kind;
    j.p = act.param;
    j.eps = eps;
    j.gamma = gamma;
    j.beta = beta;
    j.abs_gamma = abs_gamma;
    ew_run(&j);
}

/* The standalone activation has no channels: one flat "plane". */
static void act_run(int kind, size_t count, iabn_act act, const float *a, const float *b,
                    float *o)
{
    if (count == 0) return;
    int par = count >= PAR_MIN && iabn_num_threads() > 1;
    long units = (long)((count + CHUNK - 1) / CHUNK);
    ew_job j = ew_job_init(kind, 1, 1, CHUNK, a, b, o);
    j.act = act.kind;
    j.p = act.param;
    #pragma omp parallel for schedule(static) if (par)
    for (long u = 0; u < units; u++) {
        size_t off = (size_t)u * CHUNK;
        int len = (int)(count - off < CHUNK ? count - off : CHUNK);
        ew_span_any(&j, off, len, NULL);
    }
}

void iabn_act_fwd(size_t count, iabn_act act, const float *x, float *y)
{
    act_run(EW_ACT_FWD, count, act, x, NULL, y);
}

void iabn_act_bwd(size_t count, iabn_act act, const float *y, const float *dy, float *dx)
{
    act_run(EW_ACT_BWD, count, act, y, dy, dx);
}

/* ======================================================================== */
/* standard / checkpoint_opt backward                                        */

void iabn_bn_bwd_reduce(int n, int c, int hw, const float *x, const float *dy,
                        const float *mean, const float *var, float eps,
                        float *sum_dy, float *sum_dy_xhat)
{
    if (c <= 0) return;
    red_job j = red_job_init(RED_BN_X, n > 0 && hw > 0 ? n : 0, c, hw > 0 ? hw : 0, x, dy);
    j.mean = mean;
    j.var = var;
    j.eps = eps;
    j.o0 = sum_dy;
    j.o1 = sum_dy_xhat;
    red_run(&j);
}

void iabn_bn_bwd_reduce_xhat(int n, int c, int hw, const float *xhat, const float *dy,
                             float *sum_dy, float *sum_dy_xhat)
{
    if (c <= 0) return;
    red_job j = red_job_init(RED_BN_XHAT, n > 0 && hw > 0 ? n : 0, c, hw > 0 ? hw : 0, xhat, dy);
    j.o0 = sum_dy;
    j.o1 = sum_dy_xhat;
    red_run(&j);
}

void iabn_bn_bwd_apply(int n, int c, int hw, const float *x, const float *dy,
                       const float *mean, const float *var, float eps,
                       const float *gamma, int abs_gamma, const float *sum_dy,
                       const float *sum_dy_xhat, double count, int training, float *dx)
{
    if (empty(n, c, hw)) return;
    ew_job j = ew_job_init(training ? EW_BN_X : EW_SCALE, n, c, hw, x, dy, dx);
    j.mean = mean;
    j.var = var;
    j.eps = eps;
    j.gamma = gamma;
    j.abs_gamma = abs_gamma;
    j.sum_dy = training ? sum_dy : NULL;
    j.sum_dy_xhat = training ? sum_dy_xhat : NULL;
    j.count = count;
    ew_run(&j);
}

void iabn_bn_bwd_apply_xhat(int n, int c, int hw, const float *xhat, const float *dy,
                            const float *var, float eps, const float *gamma, int abs_gamma,
                            const float *sum_dy, const float *sum_dy_xhat, double count,
                            int training, float *dx)
{
    if (empty(n, c, hw)) return;
    ew_job j = ew_job_init(training ? EW_BN_XHAT : EW_SCALE, n, c, hw, xhat, dy, dx);
    j.var = var;
    j.eps = eps;
    j.gamma = gamma;
    j.abs_gamma = abs_gamma;
    j.sum_dy = training ? sum_dy : NULL;
    j.sum_dy_xhat = training ? sum_dy_xhat : NULL;
    j.count = count;
    ew_run(&j);
}

void iabn_bn_param_grads(int c, const float *gamma, int abs_gamma, const float *sum_dy,
                         const float *sum_dy_xhat, float *dgamma, float *dbeta)
{
    for (int ci = 0; ci < c; ci++) {
        float s = iabn_bn_dgamma_factor(gamma[ci], abs_gamma);
        dgamma[ci] += sum_dy_xhat[ci] * s;
        dbeta[ci] += sum_dy[ci];
    }
}

/* ======================================================================== */
/* in-place ABN backward                                                     */

void iabn_iabn_bwd_reduce(int variant, int n, int c, int hw, const float *z,
                          const float *dz, float eps, const float *gamma,
                          const float *beta, iabn_act act, float *sum_dy,
                          float *sum_dy_xhat)
{
    if (c <= 0) return;
    red_job j = red_job_init(variant == 1 ? RED_IABN1 : RED_IABN2, n > 0 && hw > 0 ? n : 0, c,
                             hw > 0 ? hw : 0, z, dz);
    j.act = act.kind;
    j.p = act.param;
    j.gamma = gamma;
    j.beta = beta;
    j.eps = eps;
    j.o0 = sum_dy;
    j.o1 = sum_dy_xhat;
    red_run(&j);
}

void iabn_iabn_bwd_apply(int variant, int n, int c, int hw, const float *z,
                         const float *dz, const float *var, float eps,
                         const float *gamma, const float *beta, int abs_gamma, iabn_act act,
                         const float *sum_dy, const float *sum_dy_xhat, double count,
                         int training, float *dx)
{
    if (empty(n, c, hw)) return;
    int kind = !training ? EW_IABN_EVAL : variant == 1 ? EW_IABN1 : EW_IABN2;
    ew_job j = ew_job_init(kind, n, c, hw, z, dz, dx);
    j.act = act.kind;
    j.p = act.param;
    j.var = var;
    j.eps = eps;
    j.gamma = gamma;
    j.beta = beta;
    j.abs_gamma = abs_gamma; /* 0 only in evaluation: in-place modes refuse plain gamma */
    j.sum_dy = training ? sum_dy : NULL;
    j.sum_dy_xhat = training ? sum_dy_xhat : NULL;
    j.count = count;
    ew_run(&j);
}
