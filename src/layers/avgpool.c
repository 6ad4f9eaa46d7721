/* avgpool.c: windowed average pooling, two layers over one op.
 *
 *   iabn_avgpool       k x k windows, stride s, no padding (DenseNet's
 *                      transition AvgPool2d(2, 2))
 *   iabn_avgpool_same  the reference DeepLabV3 head's evaluation-time global
 *                      branch: stride-1 windows of min(kh, H) x min(kw, W),
 *                      the pooled map replicate-padded back to H x W (left /
 *                      top pad (k - 1) / 2, the rest right / bottom)
 *
 * Both are "output (i, j) averages the window of pooled cell
 * (clamp(i - top), clamp(j - left))"; the kernel sums windows separably with
 * running sums (a 84 x 84 window costs O(1) per cell, not 7056 adds) in
 * double, so the result does not depend on the window size's rounding.  The
 * backward spreads each pooled cell's gradient over its window with
 * difference arrays, the transpose of the same sums. */
#include "layers/layer_util.h"
#include "layers/layer_params.h"

#include <stdlib.h>


static int clampi(int v, int hi) { return v < 0 ? 0 : v > hi ? hi : v; }

/* one plane: x (H x W) -> y (OH x OW); buf: H*pw + max(H, W) + 1 + ph*pw doubles */
static void avg_plane(const avg_p *P, int H, int W, int OH, int OW, const float *x, float *y,
                      double *buf)
{
    double *hs = buf, *pre = hs + (size_t)H * P->pw, *pooled = pre + (H > W ? H : W) + 1;
    for (int r = 0; r < H; r++) {
        const float *xr = x + (size_t)r * W;
        pre[0] = 0;
        for (int c = 0; c < W; c++) pre[c + 1] = pre[c] + xr[c];
        for (int j = 0; j < P->pw; j++)
            hs[(size_t)r * P->pw + j] = pre[j * P->sw + P->kw] - pre[j * P->sw];
    }
    double inv = 1.0 / ((double)P->kh * P->kw);
    for (int j = 0; j < P->pw; j++) {
        pre[0] = 0;
        for (int r = 0; r < H; r++) pre[r + 1] = pre[r] + hs[(size_t)r * P->pw + j];
        for (int i = 0; i < P->ph; i++)
            pooled[(size_t)i * P->pw + j] = (pre[i * P->sh + P->kh] - pre[i * P->sh]) * inv;
    }
    for (int i = 0; i < OH; i++) {
        const double *pr = pooled + (size_t)clampi(i - P->top, P->ph - 1) * P->pw;
        for (int j = 0; j < OW; j++) y[(size_t)i * OW + j] = (float)pr[clampi(j - P->left, P->pw - 1)];
    }
}

/* one plane: dy (OH x OW) -> dx (H x W), overwritten */
static void avg_plane_bwd(const avg_p *P, int H, int W, int OH, int OW, const float *dy, float *dx,
                          double *buf)
{
    double *col = buf, *diff = col + (size_t)H * P->pw, *dp = diff + (H > W ? H : W) + 1;
    for (size_t k = 0; k < (size_t)P->ph * P->pw; k++) dp[k] = 0;
    for (int i = 0; i < OH; i++) {
        double *pr = dp + (size_t)clampi(i - P->top, P->ph - 1) * P->pw;
        for (int j = 0; j < OW; j++) pr[clampi(j - P->left, P->pw - 1)] += dy[(size_t)i * OW + j];
    }
    for (int j = 0; j < P->pw; j++) {
        for (int r = 0; r <= H; r++) diff[r] = 0;
        for (int i = 0; i < P->ph; i++) {
            diff[i * P->sh] += dp[(size_t)i * P->pw + j];
            diff[i * P->sh + P->kh] -= dp[(size_t)i * P->pw + j];
        }
        double run = 0;
        for (int r = 0; r < H; r++) col[(size_t)r * P->pw + j] = run += diff[r];
    }
    double inv = 1.0 / ((double)P->kh * P->kw);
    for (int r = 0; r < H; r++) {
        for (int c = 0; c <= W; c++) diff[c] = 0;
        for (int j = 0; j < P->pw; j++) {
            diff[j * P->sw] += col[(size_t)r * P->pw + j];
            diff[j * P->sw + P->kw] -= col[(size_t)r * P->pw + j];
        }
        double run = 0;
        for (int c = 0; c < W; c++) dx[(size_t)r * W + c] = (float)((run += diff[c]) * inv);
    }
}

/* Runs avg_plane or avg_plane_bwd over every N*C plane of `in` (H x W) and
 * `out` (OH x OW) in the forward's orientation. */
static int avg_run(const iabn_graph *g, const iabn_node *n, const float *src, float *dst, int bwd,
                   iabn_err *e)
{
    IABN_PARAMS(avg_p, n);
    const iabn_tensor *x = lt(g, bwd ? n->out[0] : n->in[0]);
    const iabn_tensor *y = lt(g, bwd ? n->in[0] : n->out[0]);
    int H = x->shape[2], W = x->shape[3], OH = y->shape[2], OW = y->shape[3];
    long planes = (long)x->shape[0] * x->shape[1];
    size_t per = (size_t)H * P.pw + (size_t)(H > W ? H : W) + 1 + (size_t)P.ph * P.pw;
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        double *buf = malloc(per * sizeof *buf);
        if (!buf) failed = 1;
#pragma omp for schedule(static)
        for (long p = 0; p < planes; p++) {
            if (!buf) continue;
            if (bwd)
                avg_plane_bwd(&P, H, W, OH, OW, src + p * OH * OW, dst + p * H * W, buf);
            else
                avg_plane(&P, H, W, OH, OW, src + p * H * W, dst + p * OH * OW, buf);
        }
        free(buf);
    }
    if (failed)
        return iabn_err_set(e, IABN_ENOMEM, "%s: out of memory for the pooling sums", n->name);
    return 0;
}

static int avg_cpu(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    return avg_run(g, n, b->in[0], b->out[0], 0, e);
}

static int avg_bwd_cpu(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)
{
    return avg_run(g, n, b->in[0], b->out[0], 1, e);
}

static const iabn_op_def op_avg_bwd = {.name = "avgpool_window_bwd", .run = {avg_bwd_cpu, NULL}};

static int avg_backward(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e)
{
    const iabn_node fw = *iabn_graph_n(g, node);
    (void)e;
    if (dout[0] < 0) return 0;
    return grad_node(g, &fw, &op_avg_bwd, 1, &dout[0], fw.params, sizeof(avg_p), -1, din);
}

static const iabn_op_def op_avg = {
    .name = "avgpool_window", .backward = avg_backward, .run = {avg_cpu, NULL},
};

static int avg_node(iabn_graph *g, const char *name, int x, const avg_p *P, int oh, int ow)
{
    const iabn_tensor *t = lt(g, x);
    int shape[4] = {t->shape[0], t->shape[1], oh, ow};
    int y = named(g, name, "", IABN_F32, 4, shape);
    return iabn_graph_node(g, &op_avg, name, 1, &x, 1, &y, P, sizeof *P) < 0 ? -1 : y;
}

int iabn_avgpool(iabn_graph *g, const char *name, int x, int k, int stride)
{
    if (x < 0 || !iabn_graph_ok(g)) return -1;
    const iabn_tensor *t = lt(g, x);
    if (t->nd != 4 || k < 1 || stride < 1)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: bad average pool (kernel %d, stride %d)", name,
                               k, stride);
    if (t->shape[2] < k || t->shape[3] < k)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: input %dx%d smaller than the %dx%d window",
                               name, t->shape[2], t->shape[3], k, k);
    avg_p P = {k, k, stride, stride, (t->shape[2] - k) / stride + 1, (t->shape[3] - k) / stride + 1,
               0, 0};
    return avg_node(g, name, x, &P, P.ph, P.pw);
}

int iabn_avgpool_same(iabn_graph *g, const char *name, int x, int kh, int kw)
{
    if (x < 0 || !iabn_graph_ok(g)) return -1;
    const iabn_tensor *t = lt(g, x);
    if (t->nd != 4 || kh < 1 || kw < 1)
        return iabn_graph_fail(g, IABN_EINVAL, "%s: bad pooling size %dx%d", name, kh, kw);
    int H = t->shape[2], W = t->shape[3];
    if (kh > H) kh = H;
    if (kw > W) kw = W;
    avg_p P = {kh, kw, 1, 1, H - kh + 1, W - kw + 1, (kh - 1) / 2, (kw - 1) / 2};
    return avg_node(g, name, x, &P, H, W);
}
