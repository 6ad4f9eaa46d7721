/* backend.h: the interface of a device backend (src/tensor/cpu/,
 * src/tensor/cuda/): what a store, an executor, a layer's op and the
 * optimizer need of the device their tensors live on.  A backend is a
 * vtable of memory and stream operations, an opaque context, and a kernel
 * table (iabn_kernels) with one entry per kernel the layers run; the graph
 * and layer code sees devices only through it, so each op has one run
 * function whatever the device.
 *
 * Kernel entries take the backend's context first and an iabn_err last and
 * return 0 or an error code; pointers are on the backend's device.  The
 * semantics of each entry (arguments, aliasing) are those of the CPU kernel
 * of the same name in cpu/ops.h, cpu/norm_act.h and cpu/conv.h.  Every entry
 * of a backend's table must be set, except those marked optional, whose
 * layer checks for NULL and names the backend in its error.
 *
 * Entries with an `iabn_layout layout` argument read and write their
 * activations in that layout (tensor.h: NCHW, nChw16c or nChw8c); per-channel arrays
 * are [C] in every layout.  A blocked layout requires c % block == 0
 * (iabn_layout_block): the layer guarantees it, and an entry given anything
 * else, or a layout its backend does not run (the CUDA backend runs NCHW
 * only), returns IABN_EINVAL naming the layout.
 */
#ifndef IABN_TENSOR_BACKEND_H
#define IABN_TENSOR_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum iabn_device_kind { IABN_DEV_CPU = 0, IABN_DEV_CUDA = 1 } iabn_device_kind;


/* ---- the kernel table ----------------------------------------------------- */

typedef struct iabn_kernels {
    /* conv: scratch bytes a pass needs (a function of the geometry alone:
     * the planner runs before any device handle exists) */
    size_t (*conv_scratch)(const iabn_conv_geom *g, iabn_conv_pass pass);
    int (*conv_fwd)(void *ctx, const iabn_conv_geom *g, const float *x, const float *w,
                    const float *bias, float *y, void *ws, size_t ws_bytes, iabn_err *e);
    int (*conv_bwd_data)(void *ctx, const iabn_conv_geom *g, const float *dy, const float *w,
                         float *dx, void *ws, size_t ws_bytes, iabn_err *e);
    int (*conv_bwd_filter)(void *ctx, const iabn_conv_geom *g, const float *x, const float *dy,
                           float *dw, float *dbias, void *ws, size_t ws_bytes, iabn_err *e);
    /* conv: how a pass takes a blocked activation layout on its x or y side
     * (cpu/conv.h iabn_conv_layout_vote), for the graph's layout pass.
     * Optional: NULL keeps every activation NCHW on that backend. */
    int (*conv_layout_vote)(const iabn_conv_geom *g, iabn_conv_pass pass, int y_side);
    /* conv: the blocked layout a vote of 1 means (cpu/conv.h
     * iabn_conv_blocked_layout: nChw16c or nChw8c, by the CPU).  Set
     * wherever conv_layout_vote is. */
    iabn_layout (*conv_blocked_layout)(void);
    /* conv: whether a pass has a kernel for the geometry's mix of layouts
     * (cpu/conv.h iabn_conv_layouts_ok), for the layout pass's check after
     * it assigns them.  Optional: NULL takes every mix the votes allow. */
    int (*conv_layouts_ok)(const iabn_conv_geom *g, iabn_conv_pass pass);
    /* conv: whether a pass runs Winograd kernels with the geometry's
     * winograd flag (cpu/conv.h iabn_conv_winograd).  Optional: NULL never. */
    int (*conv_winograd)(const iabn_conv_geom *g, iabn_conv_pass pass);
    /* conv: whether the forward of g runs with g->accumulate (y += conv):
     * the residual add fused into the convolution (cpu/conv.h
     * iabn_conv_accumulates).  Optional: NULL never; a model then keeps
     * the convolution and the add apart (layers.h iabn_conv2d_add). */
    int (*conv_accumulates)(const iabn_conv_geom *g);
    /* conv: y = r + conv(x, w) (+ bias) with r not y's storage, for a
     * geometry conv_accumulates() takes (cpu/conv.h iabn_conv_fwd_add): the
     * fused residual add of a block whose shortcut is read again later.
     * Optional with conv_accumulates: either NULL keeps conv and add apart. */
    int (*conv_fwd_add)(void *ctx, const iabn_conv_geom *g, const float *x, const float *w,
                        const float *bias, const float *r, float *y, void *ws,
                        size_t ws_bytes, iabn_err *e);
    /* norm_act */
    int (*bn_stats)(void *ctx, int n, int c, int hw, iabn_layout layout, const float *x,
                    float *mean, float *var, iabn_err *e);
    int (*bn_update_running)(void *ctx, int c, double m, float momentum, const float *mean,
                             const float *var, float *running_mean, float *running_var,
                             iabn_err *e);
    int (*norm_act_fwd)(void *ctx, int n, int c, int hw, iabn_layout layout, const float *x,
                        const float *mean, const float *var, float eps, const float *gamma,
                        const float *beta, int abs_gamma, iabn_act act, float *z, float *xhat,
                        iabn_err *e);
    int (*norm_act_from_xhat)(void *ctx, int n, int c, int hw, iabn_layout layout,
                              const float *xhat, float eps, const float *gamma,
                              const float *beta, int abs_gamma, iabn_act act, float *z,
                              iabn_err *e);
    int (*act_fwd)(void *ctx, size_t count, iabn_act act, const float *x, float *y, iabn_err *e);
    int (*act_bwd)(void *ctx, size_t count, iabn_act act, const float *y, const float *dy,
                   float *dx, iabn_err *e);
    int (*bn_bwd_reduce)(void *ctx, int n, int c, int hw, iabn_layout layout, const float *x,
                         const float *dy, const float *mean, const float *var, float eps,
                         float *sum_dy, float *sum_dy_xhat, iabn_err *e);
    int (*bn_bwd_apply)(void *ctx, int n, int c, int hw, iabn_layout layout, const float *x,
                        const float *dy, const float *mean, const float *var, float eps,
                        const float *gamma, int abs_gamma, const float *sum_dy,
                        const float *sum_dy_xhat, double count, int training, float *dx,
                        iabn_err *e);
    /* bn_bwd_reduce / bn_bwd_apply (training) with the activation after BN
     * folded in: dz is z = act(y)'s gradient, dy = dz * act'(z) per element,
     * never stored; z is rebuilt from x, gamma, beta with the forward's
     * formulas (cpu/norm_act.h).  Optional: NULL keeps act_bwd a pass of
     * its own (src/layers/norm_act.c asks before absorbing it). */
    int (*bn_act_bwd_reduce)(void *ctx, int n, int c, int hw, iabn_layout layout,
                             const float *x, const float *dz, iabn_act act,
                             const float *mean, const float *var, float eps,
                             const float *gamma, const float *beta, int abs_gamma,
                             float *sum_dy, float *sum_dy_xhat, iabn_err *e);
    int (*bn_act_bwd_apply)(void *ctx, int n, int c, int hw, iabn_layout layout,
                            const float *x, const float *dz, iabn_act act,
                            const float *mean, const float *var, float eps,
                            const float *gamma, const float *beta, int abs_gamma,
                            const float *sum_dy, const float *sum_dy_xhat, double count,
                            float *dx, iabn_err *e);
    /* A training pass's two halves in one call, for a batch whose sums no
     * other worker joins (no sync BN across ranks): bn_stats then
     * norm_act_fwd; bn_act_bwd_reduce then bn_act_bwd_apply with count n*hw
     * (the identity act for plain BN, dz being dy); iabn_bwd_reduce then
     * iabn_bwd_apply in training.  The same outputs and bits as the two calls
     * (cpu/norm_act.h, iabn_bn_fwd_train).  Optional: NULL, and the layer
     * makes the two calls. */
    int (*bn_fwd_train)(void *ctx, int n, int c, int hw, iabn_layout layout, const float *x,
                        float eps, const float *gamma, const float *beta, int abs_gamma,
                        iabn_act act, float *mean, float *var, float *z, iabn_err *e);
    int (*bn_act_bwd_train)(void *ctx, int n, int c, int hw, iabn_layout layout,
                            const float *x, const float *dz, iabn_act act, const float *mean,
                            const float *var, float eps, const float *gamma,
                            const float *beta, int abs_gamma, float *sum_dy,
                            float *sum_dy_xhat, float *dx, iabn_err *e);
    int (*iabn_bwd_train)(void *ctx, int variant, int n, int c, int hw, iabn_layout layout,
                          const float *z, const float *dz, const float *var, float eps,
                          const float *gamma, const float *beta, int abs_gamma, iabn_act act,
                          float *sum_dy, float *sum_dy_xhat, float *dx, iabn_err *e);
    int (*bn_bwd_reduce_xhat)(void *ctx, int n, int c, int hw, iabn_layout layout,
                              const float *xhat, const float *dy, float *sum_dy,
                              float *sum_dy_xhat, iabn_err *e);
    int (*bn_bwd_apply_xhat)(void *ctx, int n, int c, int hw, iabn_layout layout,
                             const float *xhat, const float *dy, const float *var, float eps,
                             const float *gamma, int abs_gamma, const float *sum_dy,
                             const float *sum_dy_xhat, double count, int training, float *dx,
                             iabn_err *e);
    int (*bn_param_grads)(void *ctx, int c, const float *gamma, int abs_gamma,
                          const float *sum_dy, const float *sum_dy_xhat, float *dgamma,
                          float *dbeta, iabn_err *e);
    int (*iabn_bwd_reduce)(void *ctx, int variant, int n, int c, int hw, iabn_layout layout,
                           const float *z, const float *dz, float eps, const float *gamma,
                           const float *beta, iabn_act act, float *sum_dy, float *sum_dy_xhat,
                           iabn_err *e);
    int (*iabn_bwd_apply)(void *ctx, int variant, int n, int c, int hw, iabn_layout layout,
                          const float *z, const float *dz, const float *var, float eps,
                          const float *gamma, const float *beta, int abs_gamma, iabn_act act,
                          const float *sum_dy, const float *sum_dy_xhat, double count,
                          int training, float *dx, iabn_err *e);
    /* elementwise */
    int (*add)(void *ctx, size_t count, const float *a, const float *b, float *y, iabn_err *e);
    int (*copy_bytes)(void *ctx, size_t bytes, const void *x, void *y, iabn_err *e);
    int (*scale)(void *ctx, size_t count, float s, float *x, iabn_err *e);
    /* out[i] = the sum of squares of x[i][0 .. count[i]) in double, for n
     * arrays at once: on a device, one round trip for all (gradient-norm
     * clipping asks it of every parameter each step) */
    int (*sumsq)(void *ctx, int n, const float *const *x, const size_t *count, double *out,
                 iabn_err *e);
    int (*add_bcast_hw)(void *ctx, int n, int c, int hw, const float *a, const float *b,
                        float *y, iabn_err *e);
    int (*sum_hw)(void *ctx, int n, int c, int hw, const float *dy, float *db, iabn_err *e);
    int (*dropout2d_apply)(void *ctx, int n, int c, int hw, iabn_layout layout, float p,
                           uint64_t seed, uint64_t stream, const float *x, float *y,
                           iabn_err *e);
    int (*copy_channels)(void *ctx, int n, int cx, int cy, int c_off, int hw, const float *x,
                         float *y, iabn_err *e);
    int (*slice_channels)(void *ctx, int n, int cx, int cy, int c_off, int hw, const float *y,
                          float *x, iabn_err *e);
    /* upsample: x (n, c, hi, wi) and y (n, c, ho, wo) both in `layout` */
    int (*bilinear_fwd)(void *ctx, int n, int c, int hi, int wi, iabn_layout layout, int ho,
                        int wo, const float *x, float *y, iabn_err *e);
    int (*bilinear_bwd)(void *ctx, int n, int c, int hi, int wi, iabn_layout layout, int ho,
                        int wo, const float *dy, float *dx, iabn_err *e);
    /* pool (the backward takes the window so that a device may gather): x,
     * y, their gradients and the int32 argmax (y's order) in `layout` */
    int (*maxpool_fwd)(void *ctx, int n, int c, int h, int w, iabn_layout layout, int k, int s,
                       int p, int ho, int wo, const float *x, float *y, int32_t *argmax,
                       iabn_err *e);
    int (*maxpool_bwd)(void *ctx, int n, int c, int h, int w, iabn_layout layout, int k, int s,
                       int p, int ho, int wo, const float *dy, const int32_t *argmax, float *dx,
                       iabn_err *e);
    int (*gap_fwd)(void *ctx, int n, int c, int hw, iabn_layout layout, const float *x, float *y,
                   iabn_err *e);
    int (*gap_bwd)(void *ctx, int n, int c, int hw, iabn_layout layout, const float *dy,
                   float *dx, iabn_err *e);
    /* windowed average: output (i, j) of oh x ow averages the kh x kw window of
     * pooled cell (clamp(i - top, 0, ph - 1), clamp(j - left, 0, pw - 1)),
     * which starts at (pi * sh, pj * sw) (src/layers/avgpool.c); the backward
     * overwrites dx.  Optional: NULL where a backend has none (the layer then
     * says so). */
    int (*avgpool_fwd)(void *ctx, int n, int c, int h, int w, const int win[8], int oh, int ow,
                       const float *x, float *y, iabn_err *e);
    int (*avgpool_bwd)(void *ctx, int n, int c, int h, int w, const int win[8], int oh, int ow,
                       const float *dy, float *dx, iabn_err *e);
    /* linear */
    int (*linear_fwd)(void *ctx, int n, int in, int out, const float *x, const float *w,
                      const float *b, float *y, iabn_err *e);
    int (*linear_bwd_data)(void *ctx, int n, int in, int out, const float *dy, const float *w,
                           float *dx, iabn_err *e);
    int (*linear_bwd_weight)(void *ctx, int n, int in, int out, const float *x, const float *dy,
                             float *dw, float *db, iabn_err *e);
    /* loss: a label outside [0, k) that is not the ignore index returns
     * IABN_EINVAL with its position in *bad and its value in *bad_label
     * (the caller words the message) */
    size_t (*xent_scratch)(int n, int hw);
    int (*xent_fwd)(void *ctx, int n, int k, int hw, const float *logits, const int32_t *labels,
                    int ignore_index, float top_frac, float *loss, float *weight, void *scratch,
                    long *bad, int *bad_label, iabn_err *e);
    int (*xent_bwd)(void *ctx, int n, int k, int hw, const float *logits, const int32_t *labels,
                    const float *weight, float scale, float *dlogits, iabn_err *e);
    /* label-smoothed cross-entropy (eps), no bootstrapping; optional: NULL on
     * a backend that does not have it, the layer names the op then */
    int (*xent_smooth_fwd)(void *ctx, int n, int k, int hw, const float *logits,
                           const int32_t *labels, int ignore_index, float eps, float *loss,
                           float *weight, long *bad, int *bad_label, iabn_err *e);
    int (*xent_smooth_bwd)(void *ctx, int n, int k, int hw, const float *logits,
                           const int32_t *labels, const float *weight, float eps, float scale,
                           float *dlogits, iabn_err *e);
    /* regression losses (mse 0: L1, 1: MSE): loss = mean of the element
     * terms over count elements; dpred overwritten (it may be pred's storage) */
    int (*reg_loss_fwd)(void *ctx, size_t count, int mse, const float *pred, const float *target,
                        float *loss, iabn_err *e);
    int (*reg_loss_bwd)(void *ctx, size_t count, int mse, const float *pred, const float *target,
                        float *dpred, iabn_err *e);
    /* optim: the SGD update (math/optim.h), which consumes the gradient: grad
     * is zero afterwards, written in the same pass (the next step's
     * accumulation starts from zeros without a pass of its own), unless it
     * is w's or buf's storage */
    int (*sgd_update)(void *ctx, size_t count, float lr, float momentum, float wd, int nesterov,
                      int first_step, float *w, float *grad, float *buf, iabn_err *e);
} iabn_kernels;

/* A device: memory and stream operations, and its kernels. */
typedef struct iabn_backend {
    iabn_device_kind kind;
    const char *name;
    size_t align;                                   /* arena alignment */
    void *ctx;                                      /* cuda: iabn_cuda_ctx */
    void *(*alloc)(void *ctx, size_t bytes);        /* NULL on failure */
    void (*free)(void *ctx, void *p);
    int (*h2d)(void *ctx, void *dst, const void *src, size_t bytes);
    int (*d2h)(void *ctx, void *dst, const void *src, size_t bytes);
    int (*fill)(void *ctx, void *dst, int byte, size_t bytes);
    int (*sync)(void *ctx);
    /* Overlapped input copies (optional: NULL on the CPU, where copies are
     * plain memcpy).  Events order the compute stream and the copy stream:
     * h2d_async queues a copy on the copy stream that starts once `after`
     * (an event of the compute stream, or NULL; one never recorded counts as
     * passed, as CUDA's do) has passed, and
     * records `done` when it has landed; wait makes the compute stream wait
     * for an event; record records one on the compute stream. */
    void *(*event_new)(void *ctx);
    void (*event_free)(void *ctx, void *ev);
    int (*record)(void *ctx, void *ev);
    int (*wait)(void *ctx, void *ev);
    int (*h2d_async)(void *ctx, void *dst, const void *src, size_t bytes, void *after, void *done);
    /* Offloaded activations (optional): d2h_async is h2d_async's mirror on
     * the copy stream; host_alloc / host_free give the pinned host pool
     * (NULL: plain host memory).  wait returns nonzero when the copy the
     * event marks failed, so a copy-thread error reaches the executor. */
    int (*d2h_async)(void *ctx, void *dst, const void *src, size_t bytes, void *after, void *done);
    void *(*host_alloc)(void *ctx, size_t bytes);
    void (*host_free)(void *ctx, void *p);
    /* Half-size host copies of offloaded activations (optional): `count`
     * float32 on the device to bfloat16 on the host and back (math/bf16.h),
     * queued on the copy stream like d2h_async / h2d_async where the backend
     * has one, done on return where it has none (the CPU: `after` and `done`
     * are then NULL). */
    int (*d2h_bf16)(void *ctx, uint16_t *dst, const float *src, size_t count, void *after,
                    void *done);
    int (*h2d_bf16)(void *ctx, float *dst, const uint16_t *src, size_t count, void *after,
                    void *done);
    /* Called by the executor after every node (optional): a device that
     * queues work asynchronously may synchronise here on request
     * (IABN_CUDA_SYNC=1) so that a fault names the node that caused it. */
    int (*node_done)(void *ctx, iabn_err *e);
    const iabn_kernels *k;
} iabn_backend;

/* The CPU backend: a constant vtable, no state (convolutions build their
 * oneDNN primitives per call). */
const iabn_backend *iabn_backend_cpu(void);
/* The CPU backend with a context of its own, which caches the oneDNN
 * convolution primitives per geometry (iabn_device_open("cpu") makes one);
 * free it with iabn_cpu_backend_free (the constant backend is ignored). */
int iabn_cpu_backend_new(const iabn_backend **out, iabn_err *e);
void iabn_cpu_backend_free(const iabn_backend *be);

#ifdef __cplusplus
}
#endif
#endif
