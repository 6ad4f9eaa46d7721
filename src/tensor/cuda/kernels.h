/* cuda/kernels.h: C-callable launchers of the CUDA kernels, the GPU twins of
 * cpu/norm_act.h / cpu/ops.h / cpu/conv.h (same arguments, same semantics, same
 * aliasing rules) plus the context and an error report.
 *
 * Pointers are device pointers; every launcher queues work on the context's
 * compute stream and returns 0 or an IABN_EDEVICE / IABN_EINVAL error.
 * Activations are NCHW: a launcher with a layout argument refuses any other
 * (IABN_EINVAL, "nChw16c layout: not supported on the CUDA backend").
 * Element formulas come from math/<family>.h, compiled without FMA
 * contraction (meson.build), so elementwise results match the CPU kernels
 * bit for bit except where a libm function differs (expf, logf).
 * Reductions are deterministic (fixed block shapes, fixed tree order, no
 * float atomics) but sum in another order than the CPU: they agree with it
 * to rounding, not bitwise.
 */
#ifndef IABN_CUDA_KERNELS_H
#define IABN_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/cuda/backend.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Ends a node: with IABN_CUDA_SYNC=1 synchronises and reports the node's
 * asynchronous faults; otherwise returns 0 at once. */
int iabn_cuda_node_done(iabn_cuda_ctx *ctx, iabn_err *e);
void iabn_cuda_conv_plans_free(iabn_cuda_ctx *ctx);

/* ---- BN + activation (cpu/norm_act.h) ------------------------------------------- */
int iabn_cuda_bn_stats(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                       const float *x, float *mean, float *var, iabn_err *e);
int iabn_cuda_bn_update_running(iabn_cuda_ctx *ctx, int c, double m, float momentum,
                                const float *mean, const float *var, float *running_mean,
                                float *running_var, iabn_err *e);
int iabn_cuda_norm_act_fwd(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                           const float *x, const float *mean, const float *var, float eps,
                           const float *gamma, const float *beta, int abs_gamma, iabn_act act,
                           float *z, float *xhat, iabn_err *e);
int iabn_cuda_norm_act_from_xhat(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                                 const float *xhat, float eps, const float *gamma,
                                 const float *beta, int abs_gamma, iabn_act act, float *z,
                                 iabn_err *e);
int iabn_cuda_act_fwd(iabn_cuda_ctx *ctx, size_t count, iabn_act act, const float *x, float *y,
                      iabn_err *e);
int iabn_cuda_act_bwd(iabn_cuda_ctx *ctx, size_t count, iabn_act act, const float *y,
                      const float *dy, float *dx, iabn_err *e);
int iabn_cuda_bn_bwd_reduce(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                            const float *x, const float *dy, const float *mean, const float *var,
                            float eps, float *sum_dy, float *sum_dy_xhat, iabn_err *e);
int iabn_cuda_bn_bwd_apply(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                           const float *x, const float *dy, const float *mean, const float *var,
                           float eps, const float *gamma, int abs_gamma, const float *sum_dy,
                           const float *sum_dy_xhat, double count, int training, float *dx,
                           iabn_err *e);
int iabn_cuda_bn_bwd_reduce_xhat(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                                 const float *xhat, const float *dy, float *sum_dy,
                                 float *sum_dy_xhat, iabn_err *e);
int iabn_cuda_bn_bwd_apply_xhat(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                                const float *xhat, const float *dy, const float *var, float eps,
                                const float *gamma, int abs_gamma, const float *sum_dy,
                                const float *sum_dy_xhat, double count, int training, float *dx,
                                iabn_err *e);
int iabn_cuda_bn_param_grads(iabn_cuda_ctx *ctx, int c, const float *gamma, int abs_gamma,
                             const float *sum_dy, const float *sum_dy_xhat, float *dgamma,
                             float *dbeta, iabn_err *e);
int iabn_cuda_iabn_bwd_reduce(iabn_cuda_ctx *ctx, int variant, int n, int c, int hw,
                              iabn_layout layout, const float *z, const float *dz, float eps,
                              const float *gamma, const float *beta, iabn_act act,
                              float *sum_dy, float *sum_dy_xhat, iabn_err *e);
int iabn_cuda_iabn_bwd_apply(iabn_cuda_ctx *ctx, int variant, int n, int c, int hw,
                             iabn_layout layout, const float *z, const float *dz,
                             const float *var, float eps, const float *gamma, const float *beta,
                             int abs_gamma, iabn_act act, const float *sum_dy,
                             const float *sum_dy_xhat, double count, int training, float *dx,
                             iabn_err *e);

/* ---- elementwise and shape (cpu/ops.h) ------------------------------------- */
int iabn_cuda_add(iabn_cuda_ctx *ctx, size_t count, const float *a, const float *b, float *y,
                  iabn_err *e);
int iabn_cuda_axpy(iabn_cuda_ctx *ctx, size_t count, float alpha, const float *x, float *y,
                   iabn_err *e);
/* byte copy (any dtype); x == y is a no-op */
int iabn_cuda_copy_bytes(iabn_cuda_ctx *ctx, size_t bytes, const void *x, void *y, iabn_err *e);
int iabn_cuda_fill(iabn_cuda_ctx *ctx, size_t count, float v, float *y, iabn_err *e);
int iabn_cuda_scale(iabn_cuda_ctx *ctx, size_t count, float s, float *x, iabn_err *e);
int iabn_cuda_add_bcast_hw(iabn_cuda_ctx *ctx, int n, int c, int hw, const float *a,
                           const float *b, float *y, iabn_err *e);
int iabn_cuda_sum_hw(iabn_cuda_ctx *ctx, int n, int c, int hw, const float *dy, float *db,
                     iabn_err *e);
/* *finite = 1 if all count values are finite (synchronises) */
int iabn_cuda_all_finite(iabn_cuda_ctx *ctx, size_t count, const float *x, int *finite,
                         iabn_err *e);
int iabn_cuda_dropout2d_apply(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                              float p, uint64_t seed, uint64_t stream, const float *x, float *y,
                              iabn_err *e);
int iabn_cuda_copy_channels(iabn_cuda_ctx *ctx, int n, int cx, int cy, int c_off, int hw,
                            const float *x, float *y, iabn_err *e);
int iabn_cuda_slice_channels(iabn_cuda_ctx *ctx, int n, int cx, int cy, int c_off, int hw,
                             const float *y, float *x, iabn_err *e);
int iabn_cuda_bilinear_fwd(iabn_cuda_ctx *ctx, int n, int c, int hi, int wi, iabn_layout layout,
                           int ho, int wo, const float *x, float *y, iabn_err *e);
int iabn_cuda_bilinear_bwd(iabn_cuda_ctx *ctx, int n, int c, int hi, int wi, iabn_layout layout,
                           int ho, int wo, const float *dy, float *dx, iabn_err *e);
int iabn_cuda_maxpool_fwd(iabn_cuda_ctx *ctx, int n, int c, int h, int w, iabn_layout layout,
                          int k, int s, int p, int ho, int wo, const float *x, float *y,
                          int32_t *argmax, iabn_err *e);
/* Needs the pool's k, s, p (unlike the CPU scatter) to gather deterministically. */
int iabn_cuda_maxpool_bwd(iabn_cuda_ctx *ctx, int n, int c, int h, int w, iabn_layout layout,
                          int k, int s, int p, int ho, int wo, const float *dy,
                          const int32_t *argmax, float *dx, iabn_err *e);
/* windowed average (backend.h's avgpool_fwd / avgpool_bwd) */
int iabn_cuda_avgpool_fwd(iabn_cuda_ctx *ctx, int n, int c, int h, int w, const int win[8], int oh,
                          int ow, const float *x, float *y, iabn_err *e);
int iabn_cuda_avgpool_bwd(iabn_cuda_ctx *ctx, int n, int c, int h, int w, const int win[8], int oh,
                          int ow, const float *dy, float *dx, iabn_err *e);
int iabn_cuda_gap_fwd(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                      const float *x, float *y, iabn_err *e);
int iabn_cuda_gap_bwd(iabn_cuda_ctx *ctx, int n, int c, int hw, iabn_layout layout,
                      const float *dy, float *dx, iabn_err *e);
/* out[i] = sum of squares of x[i][0 .. count[i]) in double, for n arrays
 * (deterministic; one synchronisation per 512 arrays): gradient-norm
 * clipping. */
int iabn_cuda_sumsq(iabn_cuda_ctx *ctx, int n, const float *const *x, const size_t *count,
                    double *out, iabn_err *e);
int iabn_cuda_sgd_update(iabn_cuda_ctx *ctx, size_t count, float lr, float momentum, float wd,
                         int nesterov, int first_step, float *w, float *grad, float *buf,
                         iabn_err *e);

/* ---- loss (cpu/ops.h semantics; no scratch needed: per-pixel losses live in
 * `weight` until it is overwritten).  A bad label returns IABN_EINVAL with
 * *bad set, like the CPU.  The forward synchronises once (label check). */
int iabn_cuda_xent_fwd(iabn_cuda_ctx *ctx, int n, int k, int hw, const float *logits,
                       const int32_t *labels, int ignore_index, float top_frac, float *loss,
                       float *weight, long *bad, int *bad_label, iabn_err *e);
int iabn_cuda_xent_bwd(iabn_cuda_ctx *ctx, int n, int k, int hw, const float *logits,
                       const int32_t *labels, const float *weight, float scale, float *dlogits,
                       iabn_err *e);
/* label smoothing (eps > 0) over every valid pixel, no bootstrapping */
int iabn_cuda_xent_smooth_fwd(iabn_cuda_ctx *ctx, int n, int k, int hw, const float *logits,
                              const int32_t *labels, int ignore_index, float eps, float *loss,
                              float *weight, long *bad, int *bad_label, iabn_err *e);
int iabn_cuda_xent_smooth_bwd(iabn_cuda_ctx *ctx, int n, int k, int hw, const float *logits,
                              const int32_t *labels, const float *weight, float eps, float scale,
                              float *dlogits, iabn_err *e);
/* L1 / MSE (cpu/ops.h's iabn_reg_loss_*); the loss stays on the device. */
int iabn_cuda_reg_loss_fwd(iabn_cuda_ctx *ctx, size_t count, int mse, const float *pred,
                           const float *target, float *loss, iabn_err *e);
int iabn_cuda_reg_loss_bwd(iabn_cuda_ctx *ctx, size_t count, int mse, const float *pred,
                           const float *target, float *dpred, iabn_err *e);

/* ---- convolution (cuDNN) and linear (cuBLAS) ------------------------------------
 * Workspace: the node's scratch, sized by iabn_cuda_conv_workspace_bytes(),
 * a function of the geometry alone (the planner has no handle): the fastest
 * algorithm cuDNN's heuristics offer within that budget is used. */
size_t iabn_cuda_conv_workspace_bytes(const iabn_conv_geom *g, iabn_conv_pass pass);
int iabn_cuda_conv_fwd(iabn_cuda_ctx *ctx, const iabn_conv_geom *g, const float *x, const float *w,
                       const float *bias, float *y, void *ws, size_t ws_bytes, iabn_err *e);
int iabn_cuda_conv_bwd_data(iabn_cuda_ctx *ctx, const iabn_conv_geom *g, const float *dy,
                            const float *w, float *dx, void *ws, size_t ws_bytes, iabn_err *e);
/* accumulates into dw (and dbias) like the CPU */
int iabn_cuda_conv_bwd_filter(iabn_cuda_ctx *ctx, const iabn_conv_geom *g, const float *x,
                              const float *dy, float *dw, float *dbias, void *ws, size_t ws_bytes,
                              iabn_err *e);
int iabn_cuda_linear_fwd(iabn_cuda_ctx *ctx, int n, int in, int out, const float *x,
                         const float *w, const float *b, float *y, iabn_err *e);
int iabn_cuda_linear_bwd_data(iabn_cuda_ctx *ctx, int n, int in, int out, const float *dy,
                              const float *w, float *dx, iabn_err *e);
int iabn_cuda_linear_bwd_weight(iabn_cuda_ctx *ctx, int n, int in, int out, const float *x,
                                const float *dy, float *dw, float *db, iabn_err *e);

#ifdef __cplusplus
}
#endif
#endif
