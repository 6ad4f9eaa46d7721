/* cpu/loss.c: softmax cross-entropy over channels with an ignore index and
 * online bootstrapping, its gradient, L1 / MSE, and top-1 / top-k accuracy
 * counts.
 *
 * Logits are N,K,HW: a pixel's K logits lie hw apart, so the kernels work on
 * tiles of neighbouring pixels and walk the channels over the whole tile
 * (contiguous, vectorisable) rather than one strided pixel at a time.
 *
 * Bootstrapping picks the hardest `kept` pixels by a radix select over
 * order-preserving keys of the per-pixel losses (linear time, no sort), and
 * breaks ties at the threshold by the lower pixel index.  All sums run over
 * fixed blocks combined in order: the loss and the selection are the same
 * bits for every thread count.
 */
#include "tensor/tensor.h"
#include "tensor/math/loss.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define TILE 128
#define NBLK 64
#define PAR_MIN ((size_t)1 << 13)
/* Radix select: 11 + 11 + 10 bits of a 32-bit key. */
#define RBITS 11
#define RBINS (1 << RBITS)

static void block_bounds(size_t count, int b, size_t *lo, size_t *hi)
{
    *lo = count * (size_t)b / NBLK;
    *hi = count * (size_t)(b + 1) / NBLK;
}

/* Max and sum of exp(l - max) over the channels for cnt neighbouring pixels
 * whose channel stride is hw.  A NaN logit never becomes the max but makes
 * the sum NaN, so it still shows up in the loss. */
static void tile_lse(const float *l, int k, int hw, int cnt, float *mx, float *sum)
{
    for (int t = 0; t < cnt; t++) mx[t] = -INFINITY;
    for (int ch = 0; ch < k; ch++) {
        const float *row = l + (size_t)ch * hw;
        for (int t = 0; t < cnt; t++) mx[t] = row[t] > mx[t] ? row[t] : mx[t];
    }
    for (int t = 0; t < cnt; t++) sum[t] = 0.f;
    for (int ch = 0; ch < k; ch++) {
        const float *row = l + (size_t)ch * hw;
        for (int t = 0; t < cnt; t++) sum[t] += expf(row[t] - mx[t]);
    }
}

size_t iabn_xent_scratch_bytes(int n, int hw)
{
    return (size_t)n * (size_t)hw * sizeof(uint32_t);
}

/* Counts how many pixels to keep: ceil(top_frac * valid), where a fractional
 * part below top_frac's own float precision (FLT_EPSILON relative) is taken
 * as rounding noise, so that 0.3f of 10 pixels keeps 3, not 4. */
static size_t kept_count(float top_frac, size_t valid)
{
    if (!(top_frac > 0.f && top_frac < 1.f)) return valid;
    double prod = (double)top_frac * (double)valid;
    double k = ceil(prod - prod * FLT_EPSILON);
    if (k < 1) k = 1;
    if (k > (double)valid) k = (double)valid;
    return (size_t)k;
}

/* Key of the kept-th largest among keys (0 marks an ignored pixel and is
 * below every real key), and in *ties how many pixels with exactly that key
 * are still to be taken after all larger keys. */
static uint32_t radix_select(const uint32_t *keys, size_t m, size_t kept, size_t *ties)
{
    uint32_t prefix = 0, mask = 0;
    size_t remaining = kept;
    static const int shifts[3] = {32 - RBITS, 32 - 2 * RBITS, 0};
    static const int widths[3] = {RBITS, RBITS, 32 - 2 * RBITS};
    for (int pass = 0; pass < 3; pass++) {
        int sh = shifts[pass];
        uint32_t bmask = (1u << widths[pass]) - 1u;
        size_t hist[RBINS];
        memset(hist, 0, sizeof hist);
#pragma omp parallel if (m >= PAR_MIN)
        {
            size_t loc[RBINS];
            memset(loc, 0, sizeof loc);
#pragma omp for schedule(static)
            for (size_t i = 0; i < m; i++)
                if ((keys[i] & mask) == prefix) loc[(keys[i] >> sh) & bmask]++;
            /* Integer counts: the merge order cannot change the result. */
            for (int b = 0; b < RBINS; b++) {
                if (loc[b]) {
#pragma omp atomic
                    hist[b] += loc[b];
                }
            }
        }
        size_t above = 0;
        int bin = (int)bmask;
        for (; bin > 0; bin--) {
            if (above + hist[bin] >= remaining) break;
            above += hist[bin];
        }
        remaining -= above;
        prefix |= (uint32_t)bin << sh;
        mask |= bmask << sh;
    }
    *ties = remaining;
    return prefix;
}

int iabn_xent_fwd(int n, int k, int hw, const float *logits, const int32_t *labels,
                  int ignore_index, float top_frac, float *loss, float *weight,
                  void *scratch, long *bad)
{
    size_t m = (size_t)n * (size_t)hw;
    *loss = 0.f;

    long first_bad = -1;
    {
        long lo = (long)m;
#pragma omp parallel for schedule(static) reduction(min : lo) if (m >= PAR_MIN)
        for (long i = 0; i < (long)m; i++) {
            int32_t y = labels[i];
            if (y != ignore_index && (y < 0 || y >= k) && i < lo) lo = i;
        }
        if (lo < (long)m) first_bad = lo;
    }
    if (first_bad >= 0) {
        if (bad) *bad = first_bad;
        return IABN_EINVAL;
    }

    /* Per-pixel losses go into weight first: it is the right size and is
     * overwritten with the final weights below. */
    long tiles_per_img = (hw + TILE - 1) / TILE;
    long tiles = (long)n * tiles_per_img;
    size_t valid = 0;
#pragma omp parallel for schedule(static) reduction(+ : valid) if (m * (size_t)k >= PAR_MIN)
    for (long t = 0; t < tiles; t++) {
        int img = (int)(t / tiles_per_img);
        int p0 = (int)(t % tiles_per_img) * TILE;
        int cnt = hw - p0 < TILE ? hw - p0 : TILE;
        const float *l = logits + (size_t)img * k * hw + p0;
        const int32_t *lab = labels + (size_t)img * hw + p0;
        float *out = weight + (size_t)img * hw + p0;
        float mx[TILE], sum[TILE];
        tile_lse(l, k, hw, cnt, mx, sum);
        for (int i = 0; i < cnt; i++) {
            if (lab[i] == ignore_index) {
                out[i] = 0.f;
                continue;
            }
            out[i] = logf(sum[i]) - (l[(size_t)lab[i] * hw + i] - mx[i]);
            valid++;
        }
    }
    if (valid == 0) {
        iabn_fill(m, 0.f, weight);
        return 0;
    }

    size_t kept = kept_count(top_frac, valid);
    uint32_t thr = 0;
    size_t ties = 0;
    uint32_t *keys = (uint32_t *)scratch;
    if (kept < valid) {
#pragma omp parallel for schedule(static) if (m >= PAR_MIN)
        for (size_t i = 0; i < m; i++)
            keys[i] = labels[i] == ignore_index ? 0u : iabn_float_key(weight[i]);
        thr = radix_select(keys, m, kept, &ties);
    }

    /* Pixels with key == thr are taken in index order: each block first
     * learns how many of them the blocks before it hold. */
    size_t tie_before[NBLK];
    if (kept < valid) {
        size_t tie_cnt[NBLK];
#pragma omp parallel for schedule(static) if (m >= PAR_MIN)
        for (int b = 0; b < NBLK; b++) {
            size_t lo, hi, c = 0;
            block_bounds(m, b, &lo, &hi);
            for (size_t i = lo; i < hi; i++) c += keys[i] == thr;
            tie_cnt[b] = c;
        }
        size_t acc = 0;
        for (int b = 0; b < NBLK; b++) {
            tie_before[b] = acc;
            acc += tie_cnt[b];
        }
    }

    double part[NBLK];
    float wk = (float)(1.0 / (double)kept);
#pragma omp parallel for schedule(static) if (m >= PAR_MIN)
    for (int b = 0; b < NBLK; b++) {
        size_t lo, hi;
        block_bounds(m, b, &lo, &hi);
        double s = 0;
        if (kept < valid) {
            size_t seen = tie_before[b];
            for (size_t i = lo; i < hi; i++) {
                int take = keys[i] > thr;
                if (keys[i] == thr) take = seen++ < ties;
                if (take) s += weight[i];
                weight[i] = take ? wk : 0.f;
            }
        } else {
            for (size_t i = lo; i < hi; i++) {
                int take = labels[i] != ignore_index;
                if (take) s += weight[i];
                weight[i] = take ? wk : 0.f;
            }
        }
        part[b] = s;
    }
    double s = 0;
    for (int b = 0; b < NBLK; b++) s += part[b];
    *loss = (float)(s / (double)kept);
    return 0;
}

/* The cross-entropy gradient over tiles of TILE pixels, with label
 * smoothing eps (0: plain; iabn_xent_smooth_grad then computes exactly
 * iabn_xent_grad's value: subtracting 0 changes no bits). */
static void xent_bwd_tiles(int n, int k, int hw, const float *logits, const int32_t *labels,
                           const float *weight, float eps, float scale, float *dlogits)
{
    long tiles_per_img = (hw + TILE - 1) / TILE;
    long tiles = (long)n * tiles_per_img;
    size_t work = (size_t)n * (size_t)hw * (size_t)k;
#pragma omp parallel for schedule(static) if (work >= PAR_MIN)
    for (long t = 0; t < tiles; t++) {
        int img = (int)(t / tiles_per_img);
        int p0 = (int)(t % tiles_per_img) * TILE;
        int cnt = hw - p0 < TILE ? hw - p0 : TILE;
        size_t base = (size_t)img * k * hw + p0;
        const float *l = logits + base;
        float *d = dlogits + base;
        const int32_t *lab = labels + (size_t)img * hw + p0;
        const float *wt = weight + (size_t)img * hw + p0;
        float mx[TILE], inv[TILE], w[TILE];
        int any = 0;
        for (int i = 0; i < cnt; i++) {
            w[i] = wt[i] * scale;
            any |= w[i] != 0.f;
        }
        if (!any) { /* ignored or not bootstrapped: skip the exps */
            for (int ch = 0; ch < k; ch++) memset(d + (size_t)ch * hw, 0, cnt * sizeof *d);
            continue;
        }
        /* All of a pixel's logits are read here, before any of its
         * gradients is written, so dlogits may be the logits' storage. */
        tile_lse(l, k, hw, cnt, mx, inv);
        for (int i = 0; i < cnt; i++) inv[i] = 1.f / inv[i];
        for (int ch = 0; ch < k; ch++) {
            const float *row = l + (size_t)ch * hw;
            float *drow = d + (size_t)ch * hw;
            for (int i = 0; i < cnt; i++)
                drow[i] = iabn_xent_smooth_grad(row[i], mx[i], inv[i], lab[i] == ch, eps, k, w[i]);
        }
    }
}

void iabn_xent_bwd(int n, int k, int hw, const float *logits, const int32_t *labels,
                   const float *weight, float scale, float *dlogits)
{
    xent_bwd_tiles(n, k, hw, logits, labels, weight, 0.f, scale, dlogits);
}

void iabn_reg_loss_fwd(size_t count, int mse, const float *pred, const float *target,
                       float *loss)
{
    double sum = 0;
    for (size_t i = 0; i < count; i++) sum += iabn_reg_term((double)pred[i] - (double)target[i], mse);
    *loss = count ? (float)(sum / (double)count) : 0.f;
}

void iabn_reg_loss_bwd(size_t count, int mse, const float *pred, const float *target,
                       float *dpred)
{
    float inv = count ? 1.f / (float)count : 0.f;
#pragma omp parallel for schedule(static) if (count >= PAR_MIN)
    for (size_t i = 0; i < count; i++) dpred[i] = iabn_reg_grad(pred[i] - target[i], inv, mse);
}

void iabn_topk_correct(int n, int k, const float *logits, const int32_t *labels, int topk,
                       long *correct1, long *correctk)
{
    long c1 = 0, ck = 0;
#pragma omp parallel for schedule(static) reduction(+ : c1, ck) if ((size_t)n * k >= PAR_MIN)
    for (int i = 0; i < n; i++) {
        int32_t y = labels[i];
        if (y < 0 || y >= k) continue;
        const float *l = logits + (size_t)i * k;
        float ly = l[y];
        /* a non-finite logit anywhere makes the sample wrong: comparisons
         * with NaN are false, which would rank the label first */
        if (!iabn_all_finite((size_t)k, l)) continue;
        /* Rank of the label: larger logits, and equal ones at a lower index
         * (the order a stable sort would give). */
        int rank = 0;
        for (int j = 0; j < k; j++) rank += l[j] > ly || (l[j] == ly && j < y);
        c1 += rank < 1;
        ck += rank < topk;
    }
    if (correct1) *correct1 = c1;
    if (correctk) *correctk = ck;
}

/* ---- label smoothing ----------------------------------------------------------------- */

int iabn_xent_smooth_fwd(int n, int k, int hw, const float *logits, const int32_t *labels,
                         int ignore_index, float eps, float *loss, float *weight, long *bad)
{
    size_t m = (size_t)n * (size_t)hw;
    *loss = 0.f;
    for (size_t i = 0; i < m; i++) {
        int32_t y = labels[i];
        if (y != ignore_index && (y < 0 || y >= k)) {
            if (bad) *bad = (long)i;
            return IABN_EINVAL;
        }
    }
    long tiles_per_img = (hw + TILE - 1) / TILE, tiles = (long)n * tiles_per_img;
    double total = 0;
    size_t valid = 0;
#pragma omp parallel for schedule(static) reduction(+ : total, valid) if (m * (size_t)k >= PAR_MIN)
    for (long t = 0; t < tiles; t++) {
        int img = (int)(t / tiles_per_img);
        int p0 = (int)(t % tiles_per_img) * TILE;
        int cnt = hw - p0 < TILE ? hw - p0 : TILE;
        const float *l = logits + (size_t)img * k * hw + p0;
        const int32_t *lab = labels + (size_t)img * hw + p0;
        float mx[TILE], sum[TILE], mean[TILE];
        tile_lse(l, k, hw, cnt, mx, sum);
        for (int i = 0; i < cnt; i++) mean[i] = 0.f;
        for (int ch = 0; ch < k; ch++)
            for (int i = 0; i < cnt; i++) mean[i] += l[(size_t)ch * hw + i];
        for (int i = 0; i < cnt; i++) {
            if (lab[i] == ignore_index) continue;
            total += iabn_xent_smooth_term(logf(sum[i]) + mx[i], l[(size_t)lab[i] * hw + i],
                                           mean[i], eps, k);
            valid++;
        }
    }
    float wk = valid ? (float)(1.0 / (double)valid) : 0.f;
    for (size_t i = 0; i < m; i++) weight[i] = labels[i] == ignore_index ? 0.f : wk;
    *loss = valid ? (float)(total / (double)valid) : 0.f;
    return 0;
}

void iabn_xent_smooth_bwd(int n, int k, int hw, const float *logits, const int32_t *labels,
                          const float *weight, float eps, float scale, float *dlogits)
{
    xent_bwd_tiles(n, k, hw, logits, labels, weight, eps, scale, dlogits);
}
