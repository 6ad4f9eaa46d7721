/* test_layout_kernels.c: the per-channel kernels in nChw16c and nChw8c
 * (tensor.h's blocked layouts) against the same kernels in NCHW.
 *
 * Inputs are made in NCHW and reordered with iabn_reorder (itself checked
 * element by element against the layout's definition); blocked outputs are
 * reordered back.  The elementwise kernels (the norm_act forwards, every
 * backward apply, channel dropout, the global average pool pair) use the same
 * formulas and per-channel constants in both layouts, so they must give the
 * same bits; the reductions (statistics, backward sums) add in another order
 * and must agree to 1e-5 of the sum of their terms' magnitudes.  Also: the
 * blocked kernels give the same bits for 1 and 2 threads and with the output
 * over the input, the reorder (NCHW <-> either, and between the two)
 * round-trips exactly and refuses channel counts that are not a multiple of
 * the block (as the CPU kernel table does, naming the layout), finite
 * differences check the blocked BN backward (standard and in-place I / II),
 * and channel concat / slice, which take no layout, give on blocked parts
 * (channels and offsets multiples of the block) the blocked NCHW result;
 * standard BN's backward with the activation folded in gives
 * act_bwd-then-BN's bits.  Every check runs in both blocked layouts; the
 * grid has channel counts that only nChw8c takes (24) and odd plane sizes,
 * where nChw8c's spans end in half a block.
 * test_layout_pool.c covers max pooling and bilinear resizing.
 */
#include "tensor/backend.h"
#include "tensor/tensor.h"
#include "fd_check.h"

#include <stdint.h>

#define EPS 1e-5f
#define NCHW IABN_LAYOUT_NCHW
/* the blocked layouts, each checked against NCHW */
static const iabn_layout BLKS[] = {IABN_LAYOUT_NCHW16C, IABN_LAYOUT_NCHW8C};
#define NBLKS ((int)(sizeof BLKS / sizeof BLKS[0]))

static const iabn_act ACTS[] = {
    {IABN_ACT_IDENTITY, 0.f},     {IABN_ACT_RELU, 0.f}, {IABN_ACT_LEAKY_RELU, 0.01f},
    {IABN_ACT_LEAKY_RELU, 0.3f}, {IABN_ACT_ELU, 1.0f}, {IABN_ACT_ELU, 0.5f},
};
#define NACTS ((int)(sizeof ACTS / sizeof ACTS[0]))

/* ---- data (NCHW) ------------------------------------------------------------ */

typedef struct lcase {
    int n, c, hw;
    size_t cnt;
    iabn_act act;
    float *x, *dz, *gamma, *beta, *rvar, *gdy; /* gdy: the pool's (n, c) gradient */
} lcase;

static float rn(uint64_t seed, uint64_t s, uint64_t i) { return iabn_rng_normal(seed, s, i); }
static float ru(uint64_t seed, uint64_t s, uint64_t i) { return iabn_rng_uniform(seed, s, i); }

/* Per-channel means offset + [-2, 2] (a large offset tests the statistics'
 * shift), stds in [0.5, 2]; |gamma| in [0.3, 1.5] with random signs, beta in
 * [-0.5, 0.5]. */
static lcase make_case(uint64_t seed, int n, int c, int hw, iabn_act act, float offset)
{
    lcase t;
    t.n = n; t.c = c; t.hw = hw; t.act = act;
    t.cnt = (size_t)n * c * hw;
    t.x = falloc(t.cnt); t.dz = falloc(t.cnt);
    t.gamma = falloc(c); t.beta = falloc(c); t.rvar = falloc(c); t.gdy = falloc((size_t)n * c);
    for (int ci = 0; ci < c; ci++) {
        float g = 0.3f + 1.2f * ru(seed, 1, ci);
        t.gamma[ci] = ru(seed, 2, ci) < 0.5f ? -g : g;
        t.beta[ci] = ru(seed, 3, ci) - 0.5f;
        t.rvar[ci] = 0.5f + ru(seed, 5, ci);
    }
    for (size_t i = 0; i < t.cnt; i++) {
        int ci = (int)((i / hw) % c);
        float mu = offset + 4.f * ru(seed, 6, ci) - 2.f, sd = 0.5f + 1.5f * ru(seed, 7, ci);
        t.x[i] = mu + sd * rn(seed, 8, i);
        t.dz[i] = rn(seed, 9, i);
    }
    for (int i = 0; i < n * c; i++) t.gdy[i] = rn(seed, 10, i);
    return t;
}

static void free_case(lcase *t)
{
    free(t->x); free(t->dz); free(t->gamma); free(t->beta); free(t->rvar); free(t->gdy);
}

/* NCHW data in layout L (a fresh array). */
static float *to_layout(const lcase *t, iabn_layout L, const float *nchw)
{
    float *p = falloc(t->cnt);
    iabn_err e = {0};
    int rc = iabn_reorder(t->n, t->c, t->hw, NCHW, L, nchw, p, &e);
    CHECK_MSG(rc == 0, "reorder to %s: %s", iabn_layout_name(L), e.msg);
    return p;
}

/* Whether data in layout L is nchw's bits once reordered; names the first
 * element that differs. */
static int same_as_nchw(const lcase *t, iabn_layout L, const float *data, const float *nchw,
                        const char *what)
{
    float *back = falloc(t->cnt);
    iabn_reorder(t->n, t->c, t->hw, L, NCHW, data, back, NULL);
    size_t i = 0;
    while (i < t->cnt && memcmp(back + i, nchw + i, sizeof(float)) == 0) i++;
    if (i < t->cnt)
        fprintf(stderr, "  %s %s, n%d c%d hw%d act %d/%g: (n %zu, c %zu, p %zu) %.9g, NCHW %.9g\n",
                iabn_layout_name(L), what, t->n, t->c, t->hw, t->act.kind, t->act.param,
                i / t->hw / t->c, i / t->hw % t->c, i % t->hw, back[i], nchw[i]);
    free(back);
    return i == t->cnt;
}

/* ---- the kernels in one layout ------------------------------------------------ */

enum { R_STATS, R_BN, R_XHAT, R_IABN1, R_IABN2, NRED };
static const char *RED_NAME[NRED] = {"bn_stats", "bn_bwd_reduce", "bn_bwd_reduce_xhat",
                                     "iabn_bwd_reduce I", "iabn_bwd_reduce II"};
enum {
    E_FWD, E_XHAT, E_FWD_PLAIN, E_FROM_XHAT, E_BN, E_BN_EVAL, E_BNX, E_BNX_EVAL, E_IABN1,
    E_IABN2, E_IABN_EVAL, E_DROP, E_GAP_BWD, NEW
};
static const char *EW_NAME[NEW] = {
    "norm_act_fwd z", "norm_act_fwd xhat", "norm_act_fwd plain gamma", "norm_act_from_xhat",
    "bn_bwd_apply", "bn_bwd_apply eval", "bn_bwd_apply_xhat", "bn_bwd_apply_xhat eval",
    "iabn_bwd_apply I", "iabn_bwd_apply II", "iabn_bwd_apply eval", "dropout2d_apply",
    "gap_bwd"};

/* What every layout shares: NCHW's statistics, backward sums and forward
 * outputs (the elementwise kernels then see the same constants). */
typedef struct shared {
    float *mean, *var, *sum[NRED][2], *z, *xhat;
} shared;

/* The activations in the run's layout. */
typedef struct lin {
    const float *x, *dz, *z, *xhat;
} lin;

typedef struct louts {
    float *red[NRED][2]; /* c each */
    float *ew[NEW];      /* cnt each, in the run's layout */
    float *gap;          /* n*c */
} louts;

static louts outs_alloc(const lcase *t)
{
    louts o;
    for (int r = 0; r < NRED; r++) o.red[r][0] = falloc(t->c), o.red[r][1] = falloc(t->c);
    for (int k = 0; k < NEW; k++) o.ew[k] = falloc(t->cnt);
    o.gap = falloc((size_t)t->n * t->c);
    return o;
}

static void outs_free(louts *o)
{
    for (int r = 0; r < NRED; r++) free(o->red[r][0]), free(o->red[r][1]);
    for (int k = 0; k < NEW; k++) free(o->ew[k]);
    free(o->gap);
}

/* Elementwise kernel k into out (E_FWD also writes its xhat into out2). */
static void run_ew(const lcase *t, iabn_layout L, const lin *in, const shared *s, int k,
                   float *out, float *out2)
{
    int n = t->n, c = t->c, hw = t->hw;
    double m = (double)n * hw;
    const float *g = t->gamma, *b = t->beta;
    iabn_act act = t->act;
    switch (k) {
    case E_FWD:
        iabn_norm_act_fwd(n, c, hw, L, in->x, s->mean, s->var, EPS, g, b, 1, act, out, out2);
        break;
    case E_FWD_PLAIN:
        iabn_norm_act_fwd(n, c, hw, L, in->x, s->mean, s->var, EPS, g, b, 0, act, out, NULL);
        break;
    case E_FROM_XHAT:
        iabn_norm_act_from_xhat(n, c, hw, L, in->xhat, EPS, g, b, 1, act, out);
        break;
    case E_BN:
    case E_BN_EVAL: {
        int tr = k == E_BN;
        iabn_bn_bwd_apply(n, c, hw, L, in->x, in->dz, s->mean, tr ? s->var : t->rvar, EPS, g, tr,
                          s->sum[R_BN][0], s->sum[R_BN][1], m, tr, out);
        break;
    }
    case E_BNX:
    case E_BNX_EVAL: {
        int tr = k == E_BNX;
        iabn_bn_bwd_apply_xhat(n, c, hw, L, in->xhat, in->dz, tr ? s->var : t->rvar, EPS, g, 1,
                               s->sum[R_XHAT][0], s->sum[R_XHAT][1], m, tr, out);
        break;
    }
    case E_IABN1:
    case E_IABN2:
    case E_IABN_EVAL: {
        int v = k == E_IABN1 ? 1 : 2, r = v == 1 ? R_IABN1 : R_IABN2, tr = k != E_IABN_EVAL;
        iabn_iabn_bwd_apply(v, n, c, hw, L, in->z, in->dz, tr ? s->var : t->rvar, EPS, g, b, tr,
                            act, s->sum[r][0], s->sum[r][1], m, tr, out);
        break;
    }
    case E_DROP:
        iabn_dropout2d_apply(n, c, hw, L, 0.3f, 77, (uint64_t)c, in->x, out);
        break;
    default:
        iabn_gap_bwd(n, c, hw, L, t->gdy, out);
        break;
    }
}

static void run_reductions(const lcase *t, iabn_layout L, const lin *in, const shared *s,
                           louts *o)
{
    int n = t->n, c = t->c, hw = t->hw;
    iabn_bn_stats(n, c, hw, L, in->x, o->red[R_STATS][0], o->red[R_STATS][1]);
    iabn_bn_bwd_reduce(n, c, hw, L, in->x, in->dz, s->mean, s->var, EPS, o->red[R_BN][0],
                       o->red[R_BN][1]);
    iabn_bn_bwd_reduce_xhat(n, c, hw, L, in->xhat, in->dz, o->red[R_XHAT][0], o->red[R_XHAT][1]);
    for (int v = 1; v <= 2; v++) {
        int r = v == 1 ? R_IABN1 : R_IABN2;
        iabn_iabn_bwd_reduce(v, n, c, hw, L, in->z, in->dz, EPS, t->gamma, t->beta, t->act,
                             o->red[r][0], o->red[r][1]);
    }
}

static void run_layout(const lcase *t, iabn_layout L, const lin *in, const shared *s, louts *o)
{
    run_reductions(t, L, in, s, o);
    for (int k = 0; k < NEW; k++)
        if (k != E_XHAT) run_ew(t, L, in, s, k, o->ew[k], o->ew[E_XHAT]);
    iabn_gap_fwd(t->n, t->c, t->hw, L, in->x, o->gap);
}

/* NCHW's statistics, forward outputs and backward sums. */
static shared shared_make(const lcase *t)
{
    shared s;
    s.mean = falloc(t->c); s.var = falloc(t->c);
    s.z = falloc(t->cnt); s.xhat = falloc(t->cnt);
    iabn_bn_stats(t->n, t->c, t->hw, NCHW, t->x, s.mean, s.var);
    iabn_norm_act_fwd(t->n, t->c, t->hw, NCHW, t->x, s.mean, s.var, EPS, t->gamma, t->beta, 1,
                      t->act, s.z, s.xhat);
    lin in = {t->x, t->dz, s.z, s.xhat};
    louts o = outs_alloc(t);
    run_reductions(t, NCHW, &in, &s, &o);
    for (int r = 0; r < NRED; r++) {
        s.sum[r][0] = o.red[r][0], s.sum[r][1] = o.red[r][1];
        o.red[r][0] = o.red[r][1] = NULL;
    }
    outs_free(&o);
    return s;
}

static void shared_free(shared *s)
{
    free(s->mean); free(s->var); free(s->z); free(s->xhat);
    for (int r = 0; r < NRED; r++) free(s->sum[r][0]), free(s->sum[r][1]);
}

/* ---- reduction tolerances ---------------------------------------------------------
 * The two sums of reduction r for channel ci may differ by 1e-5 of the sums
 * of their terms' magnitudes (float lanes of 16 terms, then double: about
 * 1e-6 is the most either order can lose). */
static void red_tol(const lcase *t, const shared *s, int r, int ci, double tol[2])
{
    double su = 0, sv = 0, k = t->x[(size_t)ci * t->hw];
    float g = iabn_bn_scale(t->gamma[ci], EPS, 1), invstd = iabn_invstd(s->var[ci], EPS);
    int kind = t->act.kind;
    float p = t->act.param;
    for (int ni = 0; ni < t->n; ni++)
        for (int i = 0; i < t->hw; i++) {
            size_t q = ((size_t)ni * t->c + ci) * t->hw + i;
            double f, v;
            switch (r) {
            case R_STATS: f = t->x[q] - k, v = f; break;
            case R_BN: f = t->dz[q], v = iabn_bn_xhat(t->x[q], s->mean[ci], invstd); break;
            case R_XHAT: f = t->dz[q], v = s->xhat[q]; break;
            case R_IABN1:
                f = t->dz[q] * iabn_act_dz(kind, p, s->z[q]);
                v = iabn_bn_xhat_from_y(iabn_act_inv(kind, p, s->z[q]), t->beta[ci], 1.f / g);
                break;
            default:
                f = t->dz[q] * iabn_act_dz(kind, p, s->z[q]);
                v = iabn_act_inv(kind, p, s->z[q]);
                break;
            }
            su += fabs(f);
            sv += fabs(f * v);
        }
    tol[0] = 1e-5 * su;
    tol[1] = 1e-5 * sv;
    if (r == R_STATS) { /* mean = K + u/m, var = v/m - (u/m)^2: one float rounding each */
        double m = (double)t->n * t->hw;
        tol[0] = tol[0] / m + 2.4e-7 * fabs(s->mean[ci]);
        tol[1] = 2 * tol[1] / m;
    } else if (r == R_IABN2) { /* sum_dy_xhat = (sum(dy*y) - beta*sum_dy)/g */
        tol[1] = (tol[1] + fabs(t->beta[ci]) * tol[0]) / g;
    }
}

/* Checks the blocked sums against NCHW's; worst[r] keeps the largest
 * |blocked - NCHW| / tolerance of reduction r, printed for the margin. */
static void check_reductions(const lcase *t, int b, const shared *s, const louts *blk,
                             double worst[NRED])
{
    for (int r = 0; r < NRED; r++)
        for (int ci = 0; ci < t->c; ci++) {
            double tol[2];
            red_tol(t, s, r, ci, tol);
            const float *ref[2] = {r == R_STATS ? s->mean : s->sum[r][0],
                                   r == R_STATS ? s->var : s->sum[r][1]};
            for (int j = 0; j < 2; j++) {
                double d = fabs((double)blk->red[r][j][ci] - ref[j][ci]);
                double ratio = d / (tol[j] + 1e-30);
                if (!(ratio <= worst[r])) worst[r] = ratio;
                CHECK_MSG(d <= tol[j],
                          "%s %s[%d] channel %d, n%d c%d hw%d act %d/%g: %.9g vs %.9g",
                          iabn_layout_name(BLKS[b]), RED_NAME[r], j, ci, t->n, t->c, t->hw,
                          t->act.kind, t->act.param, blk->red[r][j][ci], ref[j][ci]);
            }
        }
}

/* The aliased input of elementwise kernel k (out == in), or NULL. */
static const float **alias_of(lin *in, int k)
{
    switch (k) {
    case E_FWD: case E_FWD_PLAIN: case E_DROP: return &in->x;
    case E_FROM_XHAT: return &in->xhat;
    case E_XHAT: case E_GAP_BWD: return NULL;
    default: return &in->dz;
    }
}

/* ---- tests ------------------------------------------------------------------------- */

/* Blocked layout BLKS[b] of one case against NCHW's outputs on: every
 * elementwise output the same bits, the reductions within tolerance; the
 * blocked run again with 1 and 2 threads (every output the same bits,
 * reductions included), and with each output over its input. */
static void blocked_case(const lcase *t, int b, const shared *s, const louts *on,
                         double worst[NRED])
{
    iabn_layout L = BLKS[b];
    const char *ln = iabn_layout_name(L);
    int n = t->n, c = t->c, hw = t->hw;
    louts ob = outs_alloc(t), ob2 = outs_alloc(t);
    float *bx = to_layout(t, L, t->x), *bdz = to_layout(t, L, t->dz);
    float *bz = to_layout(t, L, s->z), *bxh = to_layout(t, L, s->xhat);
    lin in_b = {bx, bdz, bz, bxh};
    iabn_set_num_threads(1);
    run_layout(t, L, &in_b, s, &ob);
    iabn_set_num_threads(2);
    run_layout(t, L, &in_b, s, &ob2);
    for (int k = 0; k < NEW; k++)
        CHECK_MSG(same_as_nchw(t, L, ob.ew[k], on->ew[k], EW_NAME[k]), "%s: %s differs from NCHW",
                  EW_NAME[k], ln);
    CHECK_MSG(memcmp(ob.gap, on->gap, (size_t)n * c * sizeof(float)) == 0,
              "gap_fwd n%d c%d hw%d: %s differs from NCHW", n, c, hw, ln);
    check_reductions(t, b, s, &ob, worst);
    size_t cb = (size_t)c * sizeof(float), zb = t->cnt * sizeof(float);
    int same = memcmp(ob.gap, ob2.gap, (size_t)n * cb) == 0;
    for (int r = 0; r < NRED; r++)
        same &= !memcmp(ob.red[r][0], ob2.red[r][0], cb) &&
                !memcmp(ob.red[r][1], ob2.red[r][1], cb);
    for (int k = 0; k < NEW; k++) same &= !memcmp(ob.ew[k], ob2.ew[k], zb);
    CHECK_MSG(same, "%s n%d c%d hw%d act %d/%g: 1 and 2 threads differ", ln, n, c, hw,
              t->act.kind, t->act.param);
    float *io = falloc(t->cnt), *xh = falloc(t->cnt);
    for (int k = 0; k < NEW; k++) {
        lin alias = in_b;
        const float **src = alias_of(&alias, k);
        if (!src) continue;
        memcpy(io, *src, zb);
        *src = io;
        run_ew(t, L, &alias, s, k, io, xh);
        CHECK_MSG(memcmp(io, ob2.ew[k], zb) == 0, "%s %s, n%d c%d hw%d: out == in differs", ln,
                  EW_NAME[k], n, c, hw);
    }
    free(io); free(xh);
    free(bx); free(bdz); free(bz); free(bxh);
    outs_free(&ob); outs_free(&ob2);
}

/* Every kernel, every activation, NCHW against each blocked layout whose
 * block divides the channels (24: nChw8c alone, 3 blocks). */
static void test_blocked_vs_nchw(void)
{
    static const int hws[] = {1, 7, 49, 196, 4100}, cs[] = {16, 24, 32, 48};
    enum { NHW = 5, NC = 4, NGRID = NHW * NC };
    /* (n, c, hw) beyond the grid: many channel blocks, so that the reductions
     * run whole blocks in parallel (the grid's few blocks run units) */
    static const int extra[][3] = {{2, 256, 196}, {4, 128, 49}, {1, 64, 4100}, {3, 40, 25}};
    int saved = iabn_num_threads();
    int nshapes = NGRID + (int)(sizeof extra / sizeof extra[0]);
    double worst[NBLKS][NRED] = {{0}};
    for (int sh = 0; sh < nshapes; sh++) {
        int n, c, hw;
        if (sh < NGRID) {
            hw = hws[sh / NC], c = cs[sh % NC];
            n = 1 + (int)(ru(4242, 0, sh) * 3.f);
        } else {
            n = extra[sh - NGRID][0], c = extra[sh - NGRID][1], hw = extra[sh - NGRID][2];
        }
        for (int a = 0; a < NACTS; a++) {
            /* big shapes: two activations each, a smooth and a kinked one */
            if ((size_t)n * c * hw > 65536 && a != 2 + sh % 2 && a != 4 + sh % 2) continue;
            float offset = a % 2 ? 1000.f : 0.f;
            lcase t = make_case(100 * sh + a, n, c, hw, ACTS[a], offset);
            shared s = shared_make(&t);
            lin in_n = {t.x, t.dz, s.z, s.xhat};
            louts on = outs_alloc(&t);
            run_layout(&t, NCHW, &in_n, &s, &on);
            for (int b = 0; b < NBLKS; b++)
                if (c % iabn_layout_block(BLKS[b]) == 0) blocked_case(&t, b, &s, &on, worst[b]);
            outs_free(&on);
            shared_free(&s);
            free_case(&t);
        }
    }
    iabn_set_num_threads(saved);
    for (int b = 0; b < NBLKS; b++)
        for (int r = 0; r < NRED; r++)
            fprintf(stderr, "  %-8s %-20s worst difference: %.2g of the tolerance\n",
                    iabn_layout_name(BLKS[b]), RED_NAME[r], worst[b][r]);
}

/* Offset of element (ni, ci, p) of an (n, c, hw) tensor with blk channels
 * per block: the layouts' definition (tensor.h). */
static size_t def_at(int c, int hw, int blk, int ni, int ci, int p)
{
    return (((size_t)ni * (c / blk) + ci / blk) * hw + p) * blk + ci % blk;
}

/* The reorder against the layout's definition, both ways, for each blocked
 * layout whose block divides the channels and between the two, round
 * trips, the plain copy, and the refusals of a channel count that is not a
 * multiple of the block (24 for nChw16c, 20 for nChw8c). */
static void test_reorder(void)
{
    static const int shapes[][3] = {{1, 16, 1}, {2, 32, 7}, {3, 48, 196}, {1, 16, 4100},
                                    {2, 1024, 17}, {2, 24, 9}, {1, 8, 3}};
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++) {
        int n = shapes[s][0], c = shapes[s][1], hw = shapes[s][2];
        size_t cnt = (size_t)n * c * hw;
        float *x = falloc(cnt), *back = falloc(cnt), *y[NBLKS] = {NULL}, *yy = falloc(cnt);
        for (size_t i = 0; i < cnt; i++) x[i] = rn(s, 1, i);
        iabn_err e = {0};
        for (int b = 0; b < NBLKS; b++) {
            iabn_layout L = BLKS[b];
            int B = iabn_layout_block(L);
            if (c % B) continue;
            y[b] = falloc(cnt);
            CHECK_OK(iabn_reorder(n, c, hw, NCHW, L, x, y[b], &e));
            int ok = 1;
            for (int ni = 0; ni < n; ni++)
                for (int ci = 0; ci < c; ci++)
                    for (int p = 0; p < hw; p++)
                        ok &= y[b][def_at(c, hw, B, ni, ci, p)] == x[def_at(c, hw, 1, ni, ci, p)];
            CHECK_MSG(ok, "n%d c%d hw%d: %s element order", n, c, hw, iabn_layout_name(L));
            CHECK_OK(iabn_reorder(n, c, hw, L, NCHW, y[b], back, &e));
            CHECK_MSG(memcmp(back, x, cnt * sizeof(float)) == 0, "n%d c%d hw%d: %s round trip", n,
                      c, hw, iabn_layout_name(L));
            memset(back, 0, cnt * sizeof(float)); /* from == to: a copy */
            CHECK_OK(iabn_reorder(n, c, hw, L, L, y[b], back, &e));
            CHECK(memcmp(back, y[b], cnt * sizeof(float)) == 0);
        }
        /* blocked <-> blocked: each the other's bits, as reordered from NCHW */
        for (int b = 0; b < NBLKS; b++) {
            iabn_layout from = BLKS[b], to = BLKS[(b + 1) % NBLKS];
            if (!y[b] || !y[(b + 1) % NBLKS]) continue;
            memset(yy, 0, cnt * sizeof(float));
            CHECK_OK(iabn_reorder(n, c, hw, from, to, y[b], yy, &e));
            CHECK_MSG(memcmp(yy, y[(b + 1) % NBLKS], cnt * sizeof(float)) == 0,
                      "n%d c%d hw%d: %s -> %s", n, c, hw, iabn_layout_name(from),
                      iabn_layout_name(to));
        }
        memset(back, 0, cnt * sizeof(float));
        CHECK_OK(iabn_reorder(n, c, hw, NCHW, NCHW, x, back, &e));
        CHECK(memcmp(back, x, cnt * sizeof(float)) == 0);
        for (int b = 0; b < NBLKS; b++) free(y[b]);
        free(x); free(yy); free(back);
    }
    float x[24 * 3], y[24 * 3];
    for (int i = 0; i < 24 * 3; i++) x[i] = (float)i, y[i] = -1.f;
    for (int b = 0; b < NBLKS; b++) {
        iabn_layout L = BLKS[b];
        int bad = iabn_layout_block(L) == 16 ? 24 : 20;
        char want[8];
        snprintf(want, sizeof want, "%d", bad);
        iabn_err e = {0};
        CHECK(iabn_reorder(1, bad, 3, NCHW, L, x, y, &e) == IABN_EINVAL);
        CHECK_MSG(strstr(e.msg, want) && strstr(e.msg, iabn_layout_name(L)), "message: %s", e.msg);
        CHECK(iabn_reorder(1, bad, 3, L, NCHW, x, y, NULL) == IABN_EINVAL);
        CHECK(iabn_reorder(1, bad, 3, L, BLKS[(b + 1) % NBLKS], x, y, NULL) == IABN_EINVAL);
        CHECK(y[0] == -1.f); /* nothing written */
    }
    /* 24 channels: nChw8c, not nChw16c, so neither way between the two */
    CHECK(iabn_reorder(1, 24, 3, IABN_LAYOUT_NCHW8C, IABN_LAYOUT_NCHW16C, x, y, NULL) ==
          IABN_EINVAL);
    CHECK(iabn_reorder(1, 24, 3, NCHW, IABN_LAYOUT_NCHW8C, x, y, NULL) == 0 && y[1] == 3.f);
    CHECK(iabn_reorder(1, 24, 3, NCHW, NCHW, x, y, NULL) == 0 && y[5] == 5.f);
    CHECK(iabn_reorder(1, 16, 3, NCHW, IABN_LAYOUT_COUNT, x, y, NULL) == IABN_EINVAL);
}

/* The CPU kernel table: a blocked layout runs the blocked kernels, a channel
 * count that its block does not divide (24 for nChw16c, 20 for nChw8c) is
 * refused, by layout name. */
static void test_kernel_table(void)
{
    const iabn_backend *be = iabn_backend_cpu();
    const iabn_kernels *k = be->k;
    lcase t = make_case(5, 2, 32, 9, ACTS[4], 0.f);
    for (int b = 0; b < NBLKS; b++) {
        iabn_layout L = BLKS[b];
        int bad = iabn_layout_block(L) == 16 ? 24 : 20;
        char want[8];
        snprintf(want, sizeof want, "%d", bad);
        float *bx = to_layout(&t, L, t.x), *y = falloc(t.cnt), *y2 = falloc(t.cnt);
        float mean[32], var[32], mean2[32], var2[32];
        iabn_err e = {0};
        CHECK_OK(k->bn_stats(be->ctx, 2, 32, 9, L, bx, mean, var, &e));
        iabn_bn_stats(2, 32, 9, L, bx, mean2, var2);
        CHECK(memcmp(mean, mean2, sizeof mean) == 0 && memcmp(var, var2, sizeof var) == 0);
        CHECK_OK(k->norm_act_fwd(be->ctx, 2, 32, 9, L, bx, mean, var, EPS, t.gamma, t.beta, 1,
                                 t.act, y, NULL, &e));
        iabn_norm_act_fwd(2, 32, 9, L, bx, mean, var, EPS, t.gamma, t.beta, 1, t.act, y2, NULL);
        CHECK(memcmp(y, y2, t.cnt * sizeof(float)) == 0);
        CHECK_OK(iabn_reorder(2, 32, 9, L, NCHW, bx, y, &e));
        CHECK(memcmp(y, t.x, t.cnt * sizeof(float)) == 0);
        CHECK(k->bn_stats(be->ctx, 1, bad, 9, L, bx, mean, var, &e) == IABN_EINVAL);
        CHECK_MSG(strstr(e.msg, iabn_layout_name(L)) && strstr(e.msg, want), "message: %s",
                  e.msg);
        CHECK(k->gap_fwd(be->ctx, 1, bad, 9, L, bx, y, &e) == IABN_EINVAL);
        CHECK(k->dropout2d_apply(be->ctx, 1, bad, 9, L, 0.5f, 1, 1, bx, y, &e) == IABN_EINVAL);
        CHECK(iabn_reorder(1, bad, 9, NCHW, L, t.x, y, &e) == IABN_EINVAL);
        free(bx); free(y); free(y2);
    }
    /* 24 channels are nChw8c's three blocks: the table runs them */
    float y[24 * 9], m[24], v[24];
    iabn_err e = {0};
    CHECK_OK(k->bn_stats(be->ctx, 1, 24, 9, IABN_LAYOUT_NCHW8C, t.x, m, v, &e));
    CHECK_OK(k->gap_fwd(be->ctx, 1, 24, 9, IABN_LAYOUT_NCHW8C, t.x, y, &e));
    CHECK(k->norm_act_fwd(be->ctx, 1, 24, 9, IABN_LAYOUT_COUNT, t.x, m, v, EPS, t.gamma,
                          t.beta, 1, t.act, y, NULL, &e) == IABN_EINVAL);
    free_case(&t);
}

/* copy_channels / slice_channels move per-sample blocks of channels: with
 * channel counts and offsets multiples of the block the same bytes in a
 * blocked layout (a sample's channel blocks are contiguous), which is why
 * the concat and slice ops run in any layout with these kernels
 * (layers/elementwise.c).  nChw8c's parts include counts and offsets that
 * are not multiples of 16. */
static void test_concat_slice(void)
{
    static const int parts[NBLKS][3] = {{16, 48, 32}, {8, 24, 64}}, hws[] = {1, 7, 49};
    enum { NP = 3, CY = 96 };
    for (int b = 0; b < NBLKS; b++)
        for (int h = 0; h < 3; h++)
            for (int n = 1; n <= 3; n += 2) {
                iabn_layout L = BLKS[b];
                const int *pt = parts[b];
                int hw = hws[h], off = 0;
                size_t ny = (size_t)n * CY * hw;
                float *y = falloc(ny), *by = falloc(ny), *x[NP], *bx[NP];
                for (int i = 0; i < NP; i++) {
                    size_t nx = (size_t)n * pt[i] * hw;
                    x[i] = falloc(nx);
                    for (size_t j = 0; j < nx; j++) x[i][j] = rn(20 + h, (uint64_t)i, j);
                    bx[i] = falloc(nx);
                    CHECK_OK(iabn_reorder(n, pt[i], hw, NCHW, L, x[i], bx[i], NULL));
                    iabn_copy_channels(n, pt[i], CY, off, hw, x[i], y);
                    iabn_copy_channels(n, pt[i], CY, off, hw, bx[i], by);
                    off += pt[i];
                }
                lcase t = {.n = n, .c = CY, .hw = hw, .cnt = ny};
                CHECK_MSG(same_as_nchw(&t, L, by, y, "copy_channels"), "%s n%d hw%d: concat",
                          iabn_layout_name(L), n, hw);
                off = 0;
                for (int i = 0; i < NP; i++) {
                    size_t nx = (size_t)n * pt[i] * hw;
                    float *sl = falloc(nx), *bs = falloc(nx);
                    iabn_slice_channels(n, pt[i], CY, off, hw, y, sl);
                    iabn_slice_channels(n, pt[i], CY, off, hw, by, bs);
                    lcase tp = {.n = n, .c = pt[i], .hw = hw, .cnt = nx};
                    CHECK_MSG(same_as_nchw(&tp, L, bs, sl, "slice_channels"),
                              "%s n%d hw%d: slice at %d", iabn_layout_name(L), n, hw, off);
                    CHECK(memcmp(sl, x[i], nx * sizeof(float)) == 0);
                    off += pt[i];
                    free(sl), free(bs);
                }
                for (int i = 0; i < NP; i++) free(x[i]), free(bx[i]);
                free(y), free(by);
            }
}

/* ---- finite differences of the blocked BN backward --------------------------------
 * L = sum(r * z) with z the blocked forward (batch statistics, then
 * norm_act_fwd); the backward of r, through the blocked reduce and apply,
 * against central differences, in each blocked layout (nChw8c with 24
 * channels and 5 positions: three blocks, spans ending in half a block). */

typedef struct fdctx {
    int n, c, hw, abs_gamma;
    iabn_layout layout;
    iabn_act act;
    const float *gamma, *beta;
} fdctx;

static void bn_fwd_blk(const void *vc, const float *x, float *z)
{
    const fdctx *f = vc;
    float mean[64], var[64];
    iabn_bn_stats(f->n, f->c, f->hw, f->layout, x, mean, var);
    iabn_norm_act_fwd(f->n, f->c, f->hw, f->layout, x, mean, var, EPS, f->gamma, f->beta,
                      f->abs_gamma, f->act, z, NULL);
}

static void test_blocked_finite_differences(void)
{
    /* mode 0: standard (identity, plain gamma: reads x); 1, 2: in-place I
     * and II (|gamma| + eps, reads z) with identity and ELU */
    static const iabn_act acts[] = {{IABN_ACT_IDENTITY, 0.f}, {IABN_ACT_ELU, 1.f}};
    for (int b = 0; b < NBLKS; b++)
        for (int mode = 0; mode < 3; mode++)
            for (int a = 0; a < (mode ? 2 : 1); a++) {
                iabn_layout L = BLKS[b];
                int c = iabn_layout_block(L) == 16 ? 32 : 24;
                lcase t = make_case(300 + 10 * mode + a, 2, c, 5, acts[a], 0.f);
                fdctx f = {t.n, t.c, t.hw, mode != 0, L, acts[a], t.gamma, t.beta};
                float *x = to_layout(&t, L, t.x), *r = to_layout(&t, L, t.dz);
                float *z = falloc(t.cnt), *dx = falloc(t.cnt);
                float mean[32], var[32], sdy[32], sdyx[32];
                double m = (double)t.n * t.hw;
                iabn_bn_stats(t.n, c, t.hw, L, x, mean, var);
                iabn_norm_act_fwd(t.n, c, t.hw, L, x, mean, var, EPS, t.gamma, t.beta, mode != 0,
                                  f.act, z, NULL);
                if (mode == 0) {
                    iabn_bn_bwd_reduce(t.n, c, t.hw, L, x, r, mean, var, EPS, sdy, sdyx);
                    iabn_bn_bwd_apply(t.n, c, t.hw, L, x, r, mean, var, EPS, t.gamma, 0, sdy,
                                      sdyx, m, 1, dx);
                } else {
                    iabn_iabn_bwd_reduce(mode, t.n, c, t.hw, L, z, r, EPS, t.gamma, t.beta, f.act,
                                         sdy, sdyx);
                    iabn_iabn_bwd_apply(mode, t.n, c, t.hw, L, z, r, var, EPS, t.gamma, t.beta, 1,
                                        f.act, sdy, sdyx, m, 1, dx);
                }
                double worst =
                    fd_check(&f, bn_fwd_blk, x, t.cnt, t.cnt, r, dx, 1.f / 64, 2e-3, 1e-2);
                CHECK_MSG(worst <= 1.0, "%s mode %d act %d: worst ratio %g", iabn_layout_name(L),
                          mode, a, worst);
                free(x); free(r); free(z); free(dx);
                free_case(&t);
            }
}

/* Standard BN's backward with the activation folded in (the executor's
 * absorb of act_bwd: iabn_bn_act_bwd_*) against act_bwd and then the
 * plain pair: the same sums and dx bit for bit, in every layout, for every
 * activation, with dx apart and over dz, z rebuilt from x, with gamma as it
 * is and as |gamma| + eps (gammas of both signs; y on both sides of 0,
 * where the activations' branches meet). */
static void test_bn_act_bwd(void)
{
    const int n = 2, c = 32, hw = 37;
    const size_t cnt = (size_t)n * c * hw;
    for (int L = 0; L <= NBLKS; L++)
        for (int a = 0; a < NACTS; a++)
            for (int ag = 0; ag < 2; ag++) {
                iabn_layout lay = L ? BLKS[L - 1] : NCHW;
                iabn_act act = ACTS[a];
                float *x = falloc(cnt), *dz = falloc(cnt), *z = falloc(cnt), *dy = falloc(cnt);
                float *dx1 = falloc(cnt), *dx2 = falloc(cnt), *dz2 = falloc(cnt);
                float *g = falloc(c), *b = falloc(c), *mean = falloc(c), *var = falloc(c);
                float *s1 = falloc(2 * c), *s2 = falloc(2 * c);
                for (size_t i = 0; i < cnt; i++)
                    x[i] = rn(31, 1, i) * 2.f + 0.5f, dz[i] = rn(31, 2, i);
                for (int ci = 0; ci < c; ci++)
                    g[ci] = (ci % 3 ? 0.5f : -0.5f) + ru(31, 3, ci), b[ci] = ru(31, 4, ci) - 0.5f;
                iabn_bn_stats(n, c, hw, lay, x, mean, var);
                iabn_norm_act_fwd(n, c, hw, lay, x, mean, var, EPS, g, b, ag, act, z, NULL);
                double m = (double)n * hw;
                iabn_act_bwd(cnt, act, z, dz, dy);
                iabn_bn_bwd_reduce(n, c, hw, lay, x, dy, mean, var, EPS, s1, s1 + c);
                iabn_bn_bwd_apply(n, c, hw, lay, x, dy, mean, var, EPS, g, ag, s1, s1 + c, m, 1,
                                  dx1);
                iabn_bn_act_bwd_reduce(n, c, hw, lay, x, dz, act, mean, var, EPS, g, b, ag,
                                       s2, s2 + c);
                iabn_bn_act_bwd_apply(n, c, hw, lay, x, dz, act, mean, var, EPS, g, b, ag, s2,
                                      s2 + c, m, dx2);
                memcpy(dz2, dz, cnt * sizeof *dz);
                iabn_bn_act_bwd_apply(n, c, hw, lay, x, dz2, act, mean, var, EPS, g, b, ag,
                                      s2, s2 + c, m, dz2);
                CHECK_MSG(!memcmp(s1, s2, 2 * c * sizeof *s1), "%s act %d abs %d: sums differ",
                          iabn_layout_name(lay), a, ag);
                CHECK_MSG(!memcmp(dx1, dx2, cnt * sizeof *dx1) &&
                              !memcmp(dx1, dz2, cnt * sizeof *dx1),
                          "%s act %d abs %d: dx differs", iabn_layout_name(lay), a, ag);
                free(x); free(dz); free(z); free(dy); free(dx1); free(dx2); free(dz2);
                free(g); free(b); free(mean); free(var); free(s1); free(s2);
            }
}

int main(void)
{
    RUN(test_reorder);
    RUN(test_kernel_table);
    RUN(test_blocked_vs_nchw);
    RUN(test_blocked_finite_differences);
    RUN(test_concat_slice);
    RUN(test_bn_act_bwd);
    return TEST_END();
}
