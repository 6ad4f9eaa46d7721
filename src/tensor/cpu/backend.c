/* cpu/backend.c: the CPU backend: host memory (64-byte aligned), copies
 * that are memmove, no streams, and the kernel table over the CPU kernels of
 * this folder.  iabn_backend_cpu() is a constant vtable with no state; a CPU
 * device (iabn_cpu_backend_new, what iabn_device_open("cpu") gives) is the
 * same backend with a context that caches the oneDNN convolution
 * primitives per geometry (cpu/conv.h), freed with it. */
#include "tensor/backend.h"
#include "tensor/tensor.h"

#include <stdlib.h>
#include <string.h>

static void *cpu_alloc(void *ctx, size_t bytes)
{
    (void)ctx;
    return iabn_aligned_alloc(64, bytes);
}
static void cpu_free(void *ctx, void *p)
{
    (void)ctx;
    iabn_aligned_free(p);
}
static int cpu_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    if (bytes) memmove(dst, src, bytes);
    return 0;
}
/* offloaded activations' half-size host copies: device memory is host memory */
static int cpu_d2h_bf16(void *ctx, uint16_t *dst, const float *src, size_t count, void *after,
                        void *done)
{
    (void)ctx, (void)after, (void)done;
    iabn_to_bf16(count, src, dst);
    return 0;
}
static int cpu_h2d_bf16(void *ctx, float *dst, const uint16_t *src, size_t count, void *after,
                        void *done)
{
    (void)ctx, (void)after, (void)done;
    iabn_from_bf16(count, src, dst);
    return 0;
}
static int cpu_fill(void *ctx, void *dst, int byte, size_t bytes)
{
    (void)ctx;
    if (bytes) memset(dst, byte, bytes);
    return 0;
}
static int cpu_sync(void *ctx)
{
    (void)ctx;
    return 0;
}

/* ---- kernels: the CPU kernels in the table's shape (context unused; CPU
 * kernels cannot fail once the graph has checked its shapes, so the error is
 * only that of a layout check, below) -------------------------------------- */

/* A layout of the list, whose block divides c (backend.h): the layers
 * guarantee it; a caller that does not gets an error, not a read out of
 * bounds. */
static int layout_ok(int c, iabn_layout layout, iabn_err *e)
{
    int blk = iabn_layout_block(layout);
    if (!blk) return iabn_err_set(e, IABN_EINVAL, "layout %d is not one of the list", (int)layout);
    if (c % blk)
        return iabn_err_set(e, IABN_EINVAL, "%s layout: %d channels are not a multiple of %d",
                            iabn_layout_name(layout), c, blk);
    return 0;
}
#define LAYOUT_OK(c, layout)                                                             \
    do {                                                                                 \
        int rc_ = layout_ok((c), (layout), e);                                           \
        if (rc_) return rc_;                                                             \
    } while (0)

static size_t k_conv_scratch(const iabn_conv_geom *g, iabn_conv_pass pass)
{
    return iabn_conv_scratch_bytes(g, pass, iabn_num_threads());
}
/* ctx: NULL (the constant backend, or a backend that borrows this table
 * with a context of its own) or, in the device's table, its cpu_ctx. */
static int k_conv_fwd(void *ctx, const iabn_conv_geom *g, const float *x, const float *w,
                      const float *bias, float *y, void *ws, size_t ws_bytes, iabn_err *e)
{
    return iabn_conv_fwd(NULL, g, x, w, bias, y, ws, ws_bytes, e);
}
static int k_conv_fwd_add(void *ctx, const iabn_conv_geom *g, const float *x, const float *w,
                          const float *bias, const float *r, float *y, void *ws,
                          size_t ws_bytes, iabn_err *e)
{
    return iabn_conv_fwd_add(NULL, g, x, w, bias, r, y, ws, ws_bytes, e);
}
static int k_conv_bwd_data(void *ctx, const iabn_conv_geom *g, const float *dy, const float *w,
                           float *dx, void *ws, size_t ws_bytes, iabn_err *e)
{
    return iabn_conv_bwd_data(NULL, g, dy, w, dx, ws, ws_bytes, e);
}
static int k_conv_bwd_filter(void *ctx, const iabn_conv_geom *g, const float *x, const float *dy,
                             float *dw, float *dbias, void *ws, size_t ws_bytes, iabn_err *e)
{
    return iabn_conv_bwd_filter(NULL, g, x, dy, dw, dbias, ws, ws_bytes, e);
}

typedef struct cpu_ctx {
    iabn_backend be;
    iabn_kernels k;
    iabn_conv_cache *conv;
} cpu_ctx;

static int k_conv_fwd_cached(void *ctx, const iabn_conv_geom *g, const float *x, const float *w,
                             const float *bias, float *y, void *ws, size_t ws_bytes, iabn_err *e)
{
    return iabn_conv_fwd(((cpu_ctx *)ctx)->conv, g, x, w, bias, y, ws, ws_bytes, e);
}
static int k_conv_fwd_add_cached(void *ctx, const iabn_conv_geom *g, const float *x,
                                 const float *w, const float *bias, const float *r, float *y,
                                 void *ws, size_t ws_bytes, iabn_err *e)
{
    return iabn_conv_fwd_add(((cpu_ctx *)ctx)->conv, g, x, w, bias, r, y, ws, ws_bytes, e);
}
static int k_conv_bwd_data_cached(void *ctx, const iabn_conv_geom *g, const float *dy,
                                  const float *w, float *dx, void *ws, size_t ws_bytes,
                                  iabn_err *e)
{
    return iabn_conv_bwd_data(((cpu_ctx *)ctx)->conv, g, dy, w, dx, ws, ws_bytes, e);
}
static int k_conv_bwd_filter_cached(void *ctx, const iabn_conv_geom *g, const float *x,
                                    const float *dy, float *dw, float *dbias, void *ws,
                                    size_t ws_bytes, iabn_err *e)
{
    return iabn_conv_bwd_filter(((cpu_ctx *)ctx)->conv, g, x, dy, dw, dbias, ws, ws_bytes, e);
}

static int k_bn_stats(void *ctx, int n, int c, int hw, iabn_layout layout, const float *x,
                      float *mean, float *var, iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_bn_stats(n, c, hw, layout, x, mean, var);
    return 0;
}
static int k_bn_update_running(void *ctx, int c, double m, float momentum, const float *mean,
                               const float *var, float *running_mean, float *running_var,
                               iabn_err *e)
{
    iabn_bn_update_running(c, m, momentum, mean, var, running_mean, running_var);
    return 0;
}
static int k_norm_act_fwd(void *ctx, int n, int c, int hw, iabn_layout layout, const float *x,
                          const float *mean, const float *var, float eps, const float *gamma,
                          const float *beta, int abs_gamma, iabn_act act, float *z, float *xhat,
                          iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_norm_act_fwd(n, c, hw, layout, x, mean, var, eps, gamma, beta, abs_gamma, act, z, xhat);
    return 0;
}
static int k_norm_act_from_xhat(void *ctx, int n, int c, int hw, iabn_layout layout,
                                const float *xhat, float eps, const float *gamma,
                                const float *beta, int abs_gamma, iabn_act act, float *z,
                                iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_norm_act_from_xhat(n, c, hw, layout, xhat, eps, gamma, beta, abs_gamma, act, z);
    return 0;
}
static int k_act_fwd(void *ctx, size_t count, iabn_act act, const float *x, float *y, iabn_err *e)
{
    iabn_act_fwd(count, act, x, y);
    return 0;
}
static int k_act_bwd(void *ctx, size_t count, iabn_act act, const float *y, const float *dy,
                     float *dx, iabn_err *e)
{
    iabn_act_bwd(count, act, y, dy, dx);
    return 0;
}
static int k_bn_bwd_reduce(void *ctx, int n, int c, int hw, iabn_layout layout, const float *x,
                           const float *dy, const float *mean, const float *var, float eps,
                           float *sum_dy, float *sum_dy_xhat, iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_bn_bwd_reduce(n, c, hw, layout, x, dy, mean, var, eps, sum_dy, sum_dy_xhat);
    return 0;
}
static int k_bn_bwd_apply(void *ctx, int n, int c, int hw, iabn_layout layout, const float *x,
                          const float *dy, const float *mean, const float *var, float eps,
                          const float *gamma, int abs_gamma, const float *sum_dy,
                          const float *sum_dy_xhat, double count, int training, float *dx,
                          iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_bn_bwd_apply(n, c, hw, layout, x, dy, mean, var, eps, gamma, abs_gamma, sum_dy,
                      sum_dy_xhat, count, training, dx);
    return 0;
}
static int k_bn_act_bwd_reduce(void *ctx, int n, int c, int hw, iabn_layout layout,
                               const float *x, const float *dz, iabn_act act, const float *mean,
                               const float *var, float eps, const float *gamma,
                               const float *beta, int abs_gamma, float *sum_dy,
                               float *sum_dy_xhat, iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_bn_act_bwd_reduce(n, c, hw, layout, x, dz, act, mean, var, eps, gamma, beta, abs_gamma,
                           sum_dy, sum_dy_xhat);
    return 0;
}
static int k_bn_act_bwd_apply(void *ctx, int n, int c, int hw, iabn_layout layout,
                              const float *x, const float *dz, iabn_act act, const float *mean,
                              const float *var, float eps, const float *gamma, const float *beta,
                              int abs_gamma, const float *sum_dy, const float *sum_dy_xhat,
                              double count, float *dx, iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_bn_act_bwd_apply(n, c, hw, layout, x, dz, act, mean, var, eps, gamma, beta, abs_gamma,
                          sum_dy, sum_dy_xhat, count, dx);
    return 0;
}
static int k_bn_fwd_train(void *ctx, int n, int c, int hw, iabn_layout layout, const float *x,
                          float eps, const float *gamma, const float *beta, int abs_gamma,
                          iabn_act act, float *mean, float *var, float *z, iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_bn_fwd_train(n, c, hw, layout, x, eps, gamma, beta, abs_gamma, act, mean, var, z);
    return 0;
}
static int k_bn_act_bwd_train(void *ctx, int n, int c, int hw, iabn_layout layout,
                              const float *x, const float *dz, iabn_act act, const float *mean,
                              const float *var, float eps, const float *gamma, const float *beta,
                              int abs_gamma, float *sum_dy, float *sum_dy_xhat, float *dx,
                              iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_bn_act_bwd_train(n, c, hw, layout, x, dz, act, mean, var, eps, gamma, beta, abs_gamma,
                          sum_dy, sum_dy_xhat, dx);
    return 0;
}
static int k_iabn_bwd_train(void *ctx, int variant, int n, int c, int hw, iabn_layout layout,
                            const float *z, const float *dz, const float *var, float eps,
                            const float *gamma, const float *beta, int abs_gamma, iabn_act act,
                            float *sum_dy, float *sum_dy_xhat, float *dx, iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_iabn_bwd_train(variant, n, c, hw, layout, z, dz, var, eps, gamma, beta, abs_gamma, act,
                        sum_dy, sum_dy_xhat, dx);
    return 0;
}
static int k_bn_bwd_reduce_xhat(void *ctx, int n, int c, int hw, iabn_layout layout,
                                const float *xhat, const float *dy, float *sum_dy,
                                float *sum_dy_xhat, iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_bn_bwd_reduce_xhat(n, c, hw, layout, xhat, dy, sum_dy, sum_dy_xhat);
    return 0;
}
static int k_bn_bwd_apply_xhat(void *ctx, int n, int c, int hw, iabn_layout layout,
                               const float *xhat, const float *dy, const float *var, float eps,
                               const float *gamma, int abs_gamma, const float *sum_dy,
                               const float *sum_dy_xhat, double count, int training, float *dx,
                               iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_bn_bwd_apply_xhat(n, c, hw, layout, xhat, dy, var, eps, gamma, abs_gamma, sum_dy,
                           sum_dy_xhat, count, training, dx);
    return 0;
}
static int k_bn_param_grads(void *ctx, int c, const float *gamma, int abs_gamma,
                            const float *sum_dy, const float *sum_dy_xhat, float *dgamma,
                            float *dbeta, iabn_err *e)
{
    iabn_bn_param_grads(c, gamma, abs_gamma, sum_dy, sum_dy_xhat, dgamma, dbeta);
    return 0;
}
static int k_iabn_bwd_reduce(void *ctx, int variant, int n, int c, int hw, iabn_layout layout,
                             const float *z, const float *dz, float eps, const float *gamma,
                             const float *beta, iabn_act act, float *sum_dy, float *sum_dy_xhat,
                             iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_iabn_bwd_reduce(variant, n, c, hw, layout, z, dz, eps, gamma, beta, act, sum_dy,
                         sum_dy_xhat);
    return 0;
}
static int k_iabn_bwd_apply(void *ctx, int variant, int n, int c, int hw, iabn_layout layout,
                            const float *z, const float *dz, const float *var, float eps,
                            const float *gamma, const float *beta, int abs_gamma, iabn_act act,
                            const float *sum_dy, const float *sum_dy_xhat, double count,
                            int training, float *dx, iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_iabn_bwd_apply(variant, n, c, hw, layout, z, dz, var, eps, gamma, beta, abs_gamma, act,
                        sum_dy, sum_dy_xhat, count, training, dx);
    return 0;
}

static int k_add(void *ctx, size_t count, const float *a, const float *b, float *y, iabn_err *e)
{
    iabn_add(count, a, b, y);
    return 0;
}
static int k_copy_bytes(void *ctx, size_t bytes, const void *x, void *y, iabn_err *e)
{
    if (x != y && bytes) memcpy(y, x, bytes);
    return 0;
}
static int k_scale(void *ctx, size_t count, float s, float *x, iabn_err *e)
{
    iabn_scale(count, s, x);
    return 0;
}
static int k_sumsq(void *ctx, int n, const float *const *x, const size_t *count, double *out,
                   iabn_err *e)
{
    for (int i = 0; i < n; i++) out[i] = iabn_sumsq(count[i], x[i]);
    return 0;
}
static int k_add_bcast_hw(void *ctx, int n, int c, int hw, const float *a, const float *b,
                          float *y, iabn_err *e)
{
    iabn_add_bcast_hw(n, c, hw, a, b, y);
    return 0;
}
static int k_sum_hw(void *ctx, int n, int c, int hw, const float *dy, float *db, iabn_err *e)
{
    iabn_sum_hw(n, c, hw, dy, db);
    return 0;
}
static int k_dropout2d_apply(void *ctx, int n, int c, int hw, iabn_layout layout, float p,
                             uint64_t seed, uint64_t stream, const float *x, float *y,
                             iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_dropout2d_apply(n, c, hw, layout, p, seed, stream, x, y);
    return 0;
}
static int k_copy_channels(void *ctx, int n, int cx, int cy, int c_off, int hw, const float *x,
                           float *y, iabn_err *e)
{
    iabn_copy_channels(n, cx, cy, c_off, hw, x, y);
    return 0;
}
static int k_slice_channels(void *ctx, int n, int cx, int cy, int c_off, int hw, const float *y,
                            float *x, iabn_err *e)
{
    iabn_slice_channels(n, cx, cy, c_off, hw, y, x);
    return 0;
}

static int k_bilinear_fwd(void *ctx, int n, int c, int hi, int wi, iabn_layout layout, int ho,
                          int wo, const float *x, float *y, iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_bilinear_fwd(n, c, hi, wi, layout, ho, wo, x, y);
    return 0;
}
static int k_bilinear_bwd(void *ctx, int n, int c, int hi, int wi, iabn_layout layout, int ho,
                          int wo, const float *dy, float *dx, iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_bilinear_bwd(n, c, hi, wi, layout, ho, wo, dy, dx);
    return 0;
}

static int k_maxpool_fwd(void *ctx, int n, int c, int h, int w, iabn_layout layout, int k, int s,
                         int p, int ho, int wo, const float *x, float *y, int32_t *argmax,
                         iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_maxpool_fwd(n, c, h, w, layout, k, s, p, ho, wo, x, y, argmax);
    return 0;
}
/* the CPU scatters through the argmax: the window is not needed */
static int k_maxpool_bwd(void *ctx, int n, int c, int h, int w, iabn_layout layout, int k, int s,
                         int p, int ho, int wo, const float *dy, const int32_t *argmax, float *dx,
                         iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_maxpool_bwd(n, c, h, w, layout, ho, wo, dy, argmax, dx);
    return 0;
}
static int k_avgpool(int n, int c, int h, int w, const int win[8], int oh, int ow,
                     const float *src, float *dst, int bwd, iabn_err *e)
{
    if (iabn_avgpool_window(n, c, h, w, win, oh, ow, src, dst, bwd))
        return iabn_err_set(e, IABN_ENOMEM, "average pool: out of memory for the window sums");
    return 0;
}
static int k_avgpool_fwd(void *ctx, int n, int c, int h, int w, const int win[8], int oh,
                         int ow, const float *x, float *y, iabn_err *e)
{
    return k_avgpool(n, c, h, w, win, oh, ow, x, y, 0, e);
}
static int k_avgpool_bwd(void *ctx, int n, int c, int h, int w, const int win[8], int oh,
                         int ow, const float *dy, float *dx, iabn_err *e)
{
    return k_avgpool(n, c, h, w, win, oh, ow, dy, dx, 1, e);
}
static int k_gap_fwd(void *ctx, int n, int c, int hw, iabn_layout layout, const float *x,
                     float *y, iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_gap_fwd(n, c, hw, layout, x, y);
    return 0;
}
static int k_gap_bwd(void *ctx, int n, int c, int hw, iabn_layout layout, const float *dy,
                     float *dx, iabn_err *e)
{
    LAYOUT_OK(c, layout);
    iabn_gap_bwd(n, c, hw, layout, dy, dx);
    return 0;
}

static int k_linear_fwd(void *ctx, int n, int in, int out, const float *x, const float *w,
                        const float *b, float *y, iabn_err *e)
{
    iabn_linear_fwd(n, in, out, x, w, b, y);
    return 0;
}
static int k_linear_bwd_data(void *ctx, int n, int in, int out, const float *dy, const float *w,
                             float *dx, iabn_err *e)
{
    iabn_linear_bwd_data(n, in, out, dy, w, dx);
    return 0;
}
static int k_linear_bwd_weight(void *ctx, int n, int in, int out, const float *x,
                               const float *dy, float *dw, float *db, iabn_err *e)
{
    iabn_linear_bwd_weight(n, in, out, x, dy, dw, db);
    return 0;
}

static int k_xent_fwd(void *ctx, int n, int k, int hw, const float *logits, const int32_t *labels,
                      int ignore_index, float top_frac, float *loss, float *weight, void *scratch,
                      long *bad, int *bad_label, iabn_err *e)
{
    if (!iabn_xent_fwd(n, k, hw, logits, labels, ignore_index, top_frac, loss, weight, scratch,
                       bad))
        return 0;
    *bad_label = *bad >= 0 ? labels[*bad] : -1;
    return IABN_EINVAL;
}
static int k_xent_bwd(void *ctx, int n, int k, int hw, const float *logits, const int32_t *labels,
                      const float *weight, float scale, float *dlogits, iabn_err *e)
{
    iabn_xent_bwd(n, k, hw, logits, labels, weight, scale, dlogits);
    return 0;
}

static int k_xent_smooth_fwd(void *ctx, int n, int k, int hw, const float *logits,
                             const int32_t *labels, int ignore_index, float eps, float *loss,
                             float *weight, long *bad, int *bad_label, iabn_err *e)
{
    if (!iabn_xent_smooth_fwd(n, k, hw, logits, labels, ignore_index, eps, loss, weight, bad))
        return 0;
    *bad_label = *bad >= 0 ? labels[*bad] : -1;
    return IABN_EINVAL;
}

static int k_xent_smooth_bwd(void *ctx, int n, int k, int hw, const float *logits,
                             const int32_t *labels, const float *weight, float eps, float scale,
                             float *dlogits, iabn_err *e)
{
    iabn_xent_smooth_bwd(n, k, hw, logits, labels, weight, eps, scale, dlogits);
    return 0;
}

static int k_reg_loss_fwd(void *ctx, size_t count, int mse, const float *pred,
                          const float *target, float *loss, iabn_err *e)
{
    iabn_reg_loss_fwd(count, mse, pred, target, loss);
    return 0;
}
static int k_reg_loss_bwd(void *ctx, size_t count, int mse, const float *pred,
                          const float *target, float *dpred, iabn_err *e)
{
    iabn_reg_loss_bwd(count, mse, pred, target, dpred);
    return 0;
}

static int k_sgd_update(void *ctx, size_t count, float lr, float momentum, float wd,
                        int nesterov, int first_step, float *w, float *grad, float *buf,
                        iabn_err *e)
{
    iabn_sgd_update(count, lr, momentum, wd, nesterov, first_step, w, grad, buf);
    return 0;
}

static const iabn_kernels cpu_kernels = {
    .conv_scratch = k_conv_scratch, .conv_fwd = k_conv_fwd, .conv_bwd_data = k_conv_bwd_data,
    .conv_layout_vote = iabn_conv_layout_vote, .conv_blocked_layout = iabn_conv_blocked_layout,
    .conv_layouts_ok = iabn_conv_layouts_ok,
    .conv_winograd = iabn_conv_winograd,
    .conv_accumulates = iabn_conv_accumulates, .conv_fwd_add = k_conv_fwd_add,
    .conv_bwd_filter = k_conv_bwd_filter,
    .bn_stats = k_bn_stats, .bn_update_running = k_bn_update_running,
    .norm_act_fwd = k_norm_act_fwd, .norm_act_from_xhat = k_norm_act_from_xhat,
    .act_fwd = k_act_fwd, .act_bwd = k_act_bwd, .bn_bwd_reduce = k_bn_bwd_reduce,
    .bn_bwd_apply = k_bn_bwd_apply, .bn_act_bwd_reduce = k_bn_act_bwd_reduce,
    .bn_act_bwd_apply = k_bn_act_bwd_apply, .bn_fwd_train = k_bn_fwd_train,
    .bn_act_bwd_train = k_bn_act_bwd_train, .iabn_bwd_train = k_iabn_bwd_train,
    .bn_bwd_reduce_xhat = k_bn_bwd_reduce_xhat,
    .bn_bwd_apply_xhat = k_bn_bwd_apply_xhat, .bn_param_grads = k_bn_param_grads,
    .iabn_bwd_reduce = k_iabn_bwd_reduce, .iabn_bwd_apply = k_iabn_bwd_apply,
    .add = k_add, .copy_bytes = k_copy_bytes, .scale = k_scale, .sumsq = k_sumsq,
    .add_bcast_hw = k_add_bcast_hw, .sum_hw = k_sum_hw, .dropout2d_apply = k_dropout2d_apply,
    .copy_channels = k_copy_channels, .slice_channels = k_slice_channels,
    .bilinear_fwd = k_bilinear_fwd, .bilinear_bwd = k_bilinear_bwd,
    .maxpool_fwd = k_maxpool_fwd, .maxpool_bwd = k_maxpool_bwd, .gap_fwd = k_gap_fwd,
    .gap_bwd = k_gap_bwd, .avgpool_fwd = k_avgpool_fwd, .avgpool_bwd = k_avgpool_bwd,
    .linear_fwd = k_linear_fwd, .linear_bwd_data = k_linear_bwd_data,
    .linear_bwd_weight = k_linear_bwd_weight,
    .xent_scratch = iabn_xent_scratch_bytes, .xent_fwd = k_xent_fwd, .xent_bwd = k_xent_bwd,
    .xent_smooth_fwd = k_xent_smooth_fwd, .xent_smooth_bwd = k_xent_smooth_bwd,
    .reg_loss_fwd = k_reg_loss_fwd, .reg_loss_bwd = k_reg_loss_bwd,
    .sgd_update = k_sgd_update,
};

/* No copy stream: event and async members stay NULL (copies are memcpy). */
static const iabn_backend cpu_backend = {
    .kind = IABN_DEV_CPU, .name = "cpu", .align = 64, .ctx = NULL,
    .alloc = cpu_alloc, .free = cpu_free, .h2d = cpu_copy, .d2h = cpu_copy,
    .fill = cpu_fill, .sync = cpu_sync, .d2h_bf16 = cpu_d2h_bf16, .h2d_bf16 = cpu_h2d_bf16,
    .k = &cpu_kernels,
};

const iabn_backend *iabn_backend_cpu(void) { return &cpu_backend; }

int iabn_cpu_backend_new(const iabn_backend **out, iabn_err *e)
{
    *out = NULL;
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) return iabn_err_set(e, IABN_ENOMEM, "out of memory opening the CPU device");
    int rc = iabn_conv_cache_new(&c->conv, e);
    if (rc) {
        free(c);
        return rc;
    }
    c->k = cpu_kernels;
    c->k.conv_fwd = k_conv_fwd_cached;
    c->k.conv_fwd_add = k_conv_fwd_add_cached;
    c->k.conv_bwd_data = k_conv_bwd_data_cached;
    c->k.conv_bwd_filter = k_conv_bwd_filter_cached;
    c->be = cpu_backend;
    c->be.ctx = c;
    c->be.k = &c->k;
    *out = &c->be;
    return 0;
}

void iabn_cpu_backend_free(const iabn_backend *be)
{
    if (!be || be == &cpu_backend) return;
    cpu_ctx *c = be->ctx;
    iabn_conv_cache_free(c->conv);
    free(c);
}
