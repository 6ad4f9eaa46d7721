/* cpu/ops.h: the remaining CPU primitive kernels (NCHW float32, raw pointers):
 * elementwise add/copy/scale, max pool with an int32 argmax, global average
 * pool, linear (OpenBLAS), channel dropout, channel concat/slice, bilinear
 * upsampling (align_corners = false), softmax cross-entropy with an ignore
 * index and optional online bootstrapping, the SGD update, and the reorder
 * between activation layouts.  The kernels with a `layout` argument take
 * their activation in NCHW, nChw16c or nChw8c (tensor.h; c a multiple of
 * the block for the blocked ones, the caller's promise) and give the same
 * bits in all.
 *
 * Outputs may alias inputs wherever the shapes allow it (add, scale, dropout
 * apply, SGD); kernels never allocate unless the comment says otherwise.
 */
#ifndef IABN_CPU_OPS_H
#define IABN_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h" /* iabn_layout, iabn_err (tensor.h includes this file after them) */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise --------------------------------------------------------- */
void iabn_add(size_t count, const float *a, const float *b, float *y);        /* y = a+b   */
void iabn_axpy(size_t count, float alpha, const float *x, float *y);          /* y += a*x  */
void iabn_copy(size_t count, const float *x, float *y);
void iabn_fill(size_t count, float v, float *y);
/* y[n,c,h,w] = a[n,c,h,w] + b[n,c] (broadcast of a 1x1 map, DeepLab pooling branch) */
void iabn_add_bcast_hw(int n, int c, int hw, const float *a, const float *b, float *y);
/* db[n,c] = sum_hw dy[n,c,hw] (the gradient of the broadcast operand) */
void iabn_sum_hw(int n, int c, int hw, const float *dy, float *db);
/* Returns 1 if all count values are finite. */
int iabn_all_finite(size_t count, const float *x);

/* ---- max pool (k x k, stride s, pad p; -inf padding as PyTorch) ----------
 * x, y, dy, dx and the argmax all in `layout`: the argmax holds the index
 * within the (n, c) input plane (ih * w + iw, -1 for a window wholly in the
 * padding) and is stored in y's order, blocked or not. */
int iabn_pool_out(int in, int k, int s, int p);  /* floor((in+2p-k)/s)+1 */
void iabn_maxpool_fwd(int n, int c, int h, int w, iabn_layout layout, int k, int s, int p,
                      int ho, int wo, const float *x, float *y, int32_t *argmax);
/* dx is overwritten (zeroed, then scattered). */
void iabn_maxpool_bwd(int n, int c, int h, int w, iabn_layout layout, int ho, int wo,
                      const float *dy, const int32_t *argmax, float *dx);

/* ---- global average pool: N,C,H,W -> N,C ----------------------------------
 * (an N,C,1,1 map is the same memory in every layout).  Each channel's sum
 * runs in double over its positions in order, in either layout. */
void iabn_gap_fwd(int n, int c, int hw, iabn_layout layout, const float *x, float *y);
void iabn_gap_bwd(int n, int c, int hw, iabn_layout layout, const float *dy,
                  float *dx);                                                  /* overwritten */
/* Windowed average (backend.h's avgpool_fwd / avgpool_bwd, win = kh, kw, sh,
 * sw, ph, pw, top, left): src x (n,c,H,W) -> dst y (n,c,OH,OW), or with bwd
 * src dy -> dst dx (overwritten).  -1 when out of memory for the sums. */
int iabn_avgpool_window(int n, int c, int H, int W, const int win[8], int OH, int OW,
                        const float *src, float *dst, int bwd);

/* ---- linear: y[N,O] = x[N,I] w[O,I]^T + b[O] ------------------------------ */
void iabn_linear_fwd(int n, int in, int out, const float *x, const float *w,
                     const float *b, float *y);
void iabn_linear_bwd_data(int n, int in, int out, const float *dy, const float *w,
                          float *dx);                                          /* overwritten */
void iabn_linear_bwd_weight(int n, int in, int out, const float *x, const float *dy,
                            float *dw, float *db);                             /* accumulate */

/* ---- channel dropout (Dropout2d): whole (n, c) maps zeroed with prob p,
 * kept ones scaled by 1/(1-p).  The mask is a pure function of
 * (seed, stream, n*C+c) (iabn_rng_uniform), so backward and recompute redraw
 * it instead of storing it, and the same (n, c) is dropped in every layout.
 * y may equal x; dx may equal dy. */
void iabn_dropout2d_apply(int n, int c, int hw, iabn_layout layout, float p, uint64_t seed,
                          uint64_t stream, const float *x, float *y);

/* ---- layouts: y = x stored in layout `to`, x stored in `from` (tensor.h):
 * any pair of the list (NCHW, nChw16c, nChw8c), a plain copy when they are
 * the same.  y must not overlap x.  IABN_EINVAL (e may be NULL) when a
 * blocked side's block does not divide c, or a layout is not one of the
 * list; nothing is written then. */
int iabn_reorder(int n, int c, int hw, iabn_layout from, iabn_layout to, const float *x,
                 float *y, iabn_err *e);

/* ---- channel concat: y = concat over channels of parts --------------------
 * Per-sample block copies: when cx, cy and c_off are multiples of a blocked
 * layout's block B (16 or 8) they are the same bytes in that layout as in
 * NCHW (a sample's channel blocks are contiguous, block c_off/B starts at
 * float c_off*hw), so they take no layout. */
/* copies x (N,cx,HW) into channels [c_off, c_off+cx) of y (N,cy,HW); with
 * n == 1 and x already at its place in y (a view) nothing moves */
void iabn_copy_channels(int n, int cx, int cy, int c_off, int hw, const float *x, float *y);
/* copies channels [c_off, c_off+cx) of y (N,cy,HW) into x (N,cx,HW) */
void iabn_slice_channels(int n, int cx, int cy, int c_off, int hw, const float *y, float *x);

/* ---- bilinear upsample/resize, align_corners = false (PyTorch semantics);
 * input and output both in `layout` --------------------------------------- */
void iabn_bilinear_fwd(int n, int c, int hi, int wi, iabn_layout layout, int ho, int wo,
                       const float *x, float *y);
/* dx overwritten; deterministic (no atomics: gathers per input pixel or
 * serialises per (n,c) plane). */
void iabn_bilinear_bwd(int n, int c, int hi, int wi, iabn_layout layout, int ho, int wo,
                       const float *dy, float *dx);

/* ---- softmax cross-entropy over channels, labels int32, ignore index -----
 * logits N,K,HW (HW = 1 for classification), labels N*HW.  The loss is the
 * mean over the counted pixels; with top_frac in (0,1) only the hardest
 * ceil(top_frac * valid) pixels count (online bootstrapping), ties broken by
 * the lower index so that the choice is deterministic (a fractional part of
 * top_frac*valid below float precision counts as rounding: 0.3f of 10 is 3).
 * Loss, weights and choice are the same bits for any thread count.
 * Labels outside [0,K) that are not ignore_index are an error: returns -1
 * (IABN_EINVAL) and writes the first offending position in *bad (if bad !=
 * NULL).  `weight` (N*HW floats, scratch from the caller) receives per-pixel
 * weights in {0, 1/counted} for the backward; *loss the mean (0, with all
 * weights 0, when every pixel is ignored).  scratch must hold
 * iabn_xent_scratch_bytes(n, hw) bytes (used only when bootstrapping: NULL is
 * fine for top_frac outside (0,1)). */
size_t iabn_xent_scratch_bytes(int n, int hw);
int iabn_xent_fwd(int n, int k, int hw, const float *logits, const int32_t *labels,
                  int ignore_index, float top_frac, float *loss, float *weight,
                  void *scratch, long *bad);
/* dlogits = weight * (softmax(logits) - onehot(label)) * scale; overwritten.
 * dlogits may be the logits' storage: each pixel's logits are read before any
 * of its gradients is written.  Pixels of weight 0 get an exact 0. */
void iabn_xent_bwd(int n, int k, int hw, const float *logits, const int32_t *labels,
                   const float *weight, float scale, float *dlogits);
/* Label-smoothed cross-entropy (no bootstrapping): per counted pixel
 * lse - (1-eps) logit[label] - eps mean_k logit[k], i.e. the cross-entropy
 * against (1-eps) one-hot + eps uniform; *loss the mean over the counted
 * pixels, weight as iabn_xent_fwd's (1/counted or 0).  Labels outside [0,K)
 * that are not ignore_index: IABN_EINVAL, *bad the position. */
int iabn_xent_smooth_fwd(int n, int k, int hw, const float *logits, const int32_t *labels,
                         int ignore_index, float eps, float *loss, float *weight, long *bad);
/* dlogits = weight * (softmax - (1-eps) onehot - eps/K) * scale; dlogits may
 * be the logits' storage. */
void iabn_xent_smooth_bwd(int n, int k, int hw, const float *logits, const int32_t *labels,
                          const float *weight, float eps, float scale, float *dlogits);

/* L1 (mse 0) or MSE (mse 1) between pred and target, count floats: *loss =
 * the mean (summed in double, serially: the same bits for every thread
 * count); the backward writes dpred (which may be pred's storage). */
void iabn_reg_loss_fwd(size_t count, int mse, const float *pred, const float *target,
                       float *loss);
void iabn_reg_loss_bwd(size_t count, int mse, const float *pred, const float *target,
                       float *dpred);
/* Accuracy helpers: counts of samples whose label is in the top-1 / top-k.
 * Rank of the label = larger logits + equal logits at a lower class index;
 * labels outside [0,K) (ignored samples) and samples with a NaN or Inf among
 * their logits never count as correct. */
void iabn_topk_correct(int n, int k, const float *logits, const int32_t *labels, int topk,
                       long *correct1, long *correctk);

/* ---- SGD ------------------------------------------------------------------
 * PyTorch semantics: g = grad + wd*w; buf = momentum*buf + g (buf = g on the
 * first step when first_step != 0); step = nesterov ? g + momentum*buf : buf;
 * w -= lr*step.  grad is zero afterwards (the update consumes it: one pass
 * instead of a separate zeroing, which took 17 ms for ResNeXt-101's 177 MB
 * of gradients on one thread), unless it is w's or buf's storage. */
void iabn_sgd_update(size_t count, float lr, float momentum, float wd, int nesterov,
                     int first_step, float *w, float *grad, float *buf);
/* Sum of squares (for gradient-norm clipping), double accumulation. */
double iabn_sumsq(size_t count, const float *x);
void iabn_scale(size_t count, float s, float *x);

/* ---- bfloat16 host copies (math/bf16.h): round to nearest even, and back */
void iabn_to_bf16(size_t count, const float *src, uint16_t *dst);
void iabn_from_bf16(size_t count, const uint16_t *src, float *dst);

#ifdef __cplusplus
}
#endif
#endif
