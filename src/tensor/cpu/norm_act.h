/* cpu/norm_act.h: batch normalisation + activation kernels, every mode, CPU.
 *
 * float32 activations of shape (N, C, HW) in any layout of tensor.h, given
 * by the `layout` argument: NCHW, nChw16c (blocks of 16 channels,
 * [N][C/16][HW][16]) or nChw8c (blocks of 8, [N][C/8][HW][8]); a blocked
 * layout needs C to be a multiple of its block: the caller guarantees it
 * (the kernel table's entries check).  Per-channel arrays (statistics,
 * gamma, sums) are plain [C] in all.  Statistics are per channel over
 * m = N*H*W values; the shift of iabn_bn_stats is the channel's value at
 * (0, 0).  Per-element formulas live in math/norm_act.h, shared with the
 * CUDA kernels; every layout uses the same formulas and the same
 * per-channel constants, so the elementwise kernels give the same bits in
 * every layout (after reordering) and the reductions agree to rounding
 * (they sum in another order).
 *
 * The forward and backward passes are split into a per-channel reduction and
 * an elementwise pass so that the synchronised variant can all-reduce the
 * per-channel partial results in between (docs/INPLACE_ABN.md section 3).
 * Every kernel is correct whether or not an output pointer equals an input
 * pointer (z over x in the forward, dx over dz in the backward); outputs that
 * overlap an input only partially are not supported.
 *
 * Reductions sum each lane of 16 values in float and everything longer in
 * double, in an order fixed by the shape and layout alone: every result is
 * bit-identical for any thread count.  Standard and checkpoint_opt normalise
 * through the same xhat formula (math/norm_act.h), so their z, dx and
 * parameter gradients are bit-identical too; the in-place modes agree with
 * them to float rounding.
 * Empty shapes (n, c or hw <= 0) write nothing, except that the reductions
 * report zero sums and zero statistics.
 */
#ifndef IABN_CPU_NORM_H
#define IABN_CPU_NORM_H

#include <stddef.h>
#include "tensor/math/norm_act.h"
#include "tensor/tensor.h" /* iabn_layout (tensor.h includes this file after defining it) */

#ifdef __cplusplus
extern "C" {
#endif

/* Per-channel mean and biased variance of x (N,C,HW).  One pass over the data,
 * shifted by each channel's first value so that it stays accurate for
 * |mean| >> std. */
void iabn_bn_stats(int n, int c, int hw, iabn_layout layout, const float *x, float *mean,
                   float *var);

/* Combines per-worker (count, mean, var) into the global statistics
 * (docs/INPLACE_ABN.md section 3); counts may differ between workers, a worker
 * with count 0 contributes nothing, a total of 0 gives mean = var = 0.
 * in: W arrays laid out [w][c]; out: mean, var of length c. */
void iabn_bn_stats_combine(int workers, int c, const double *counts,
                           const float *means, const float *vars,
                           float *mean, float *var);

/* running = (1-momentum)*running + momentum*stat, variance unbiased by m/(m-1).
 * m <= 1 (one value per channel) is the caller's error: the layer refuses to
 * train on it.  Here it only falls back to the biased variance, so that no
 * division by zero can put a NaN or Inf into the running statistics. */
void iabn_bn_update_running(int c, double m, float momentum, const float *mean,
                            const float *var, float *running_mean, float *running_var);

/* Elementwise forward: y = g*(x-mean)*invstd + beta, z = act(y), where
 * g = |gamma|+eps when abs_gamma, else gamma; invstd = 1/sqrt(var+eps).
 * If xhat != NULL it also receives (x-mean)*invstd (checkpoint_opt keeps it).
 * z may equal x. */
void iabn_norm_act_fwd(int n, int c, int hw, iabn_layout layout, const float *x,
                       const float *mean, const float *var, float eps, const float *gamma,
                       const float *beta, int abs_gamma, iabn_act act, float *z, float *xhat);

/* Recompute z from a kept xhat: z = act(g*xhat + beta); z may equal xhat. */
void iabn_norm_act_from_xhat(int n, int c, int hw, iabn_layout layout, const float *xhat,
                             float eps, const float *gamma, const float *beta, int abs_gamma,
                             iabn_act act, float *z);

/* Standalone activation (standard mode's separate node): y = act(x), y may equal x. */
void iabn_act_fwd(size_t count, iabn_act act, const float *x, float *y);
/* dx = dy * act'(.) expressed with the activation's OUTPUT y (relu: y > 0).
 * dx may equal dy. */
void iabn_act_bwd(size_t count, iabn_act act, const float *y, const float *dy, float *dx);

/* ---- standard BN backward (reads x) ---------------------------------------
 * Reduction: sum_dy[c] = sum(dy), sum_dy_xhat[c] = sum(dy * xhat), xhat from x. */
void iabn_bn_bwd_reduce(int n, int c, int hw, iabn_layout layout, const float *x,
                        const float *dy, const float *mean, const float *var, float eps,
                        float *sum_dy, float *sum_dy_xhat);
/* dx = g*invstd*(dy - sum_dy/m - xhat*sum_dy_xhat/m) in training mode
 * (m = count, the global count for sync BN), dx = g*invstd*dy when !training
 * (var is then the running variance; mean and the sums are not read).
 * g as in the forward.  dx may equal dy. */
void iabn_bn_bwd_apply(int n, int c, int hw, iabn_layout layout, const float *x,
                       const float *dy, const float *mean, const float *var, float eps,
                       const float *gamma, int abs_gamma, const float *sum_dy,
                       const float *sum_dy_xhat, double count, int training, float *dx);
/* The pair above in training, with the activation that followed BN folded
 * in: dz is the gradient of z = act(y), and dy = dz * act'(z) per element
 * (act's derivative from its output, as iabn_act_bwd), never stored.  z is
 * not read: it is rebuilt from x, mean, var, gamma and beta (abs_gamma as
 * in the forward) with the forward's formulas, so its bits are the
 * forward's when x is what the forward saw.  Then the same bits as
 * iabn_act_bwd on that z and the pair.  dx may equal dz. */
void iabn_bn_act_bwd_reduce(int n, int c, int hw, iabn_layout layout, const float *x,
                            const float *dz, iabn_act act, const float *mean, const float *var,
                            float eps, const float *gamma, const float *beta, int abs_gamma,
                            float *sum_dy, float *sum_dy_xhat);
void iabn_bn_act_bwd_apply(int n, int c, int hw, iabn_layout layout, const float *x,
                           const float *dz, iabn_act act, const float *mean, const float *var,
                           float eps, const float *gamma, const float *beta, int abs_gamma,
                           const float *sum_dy, const float *sum_dy_xhat, double count,
                           float *dx);
/* Same as the pair above, but from a kept xhat (checkpoint_opt). */
void iabn_bn_bwd_reduce_xhat(int n, int c, int hw, iabn_layout layout, const float *xhat,
                             const float *dy, float *sum_dy, float *sum_dy_xhat);
void iabn_bn_bwd_apply_xhat(int n, int c, int hw, iabn_layout layout, const float *xhat,
                            const float *dy, const float *var, float eps, const float *gamma,
                            int abs_gamma, const float *sum_dy, const float *sum_dy_xhat,
                            double count, int training, float *dx);

/* dgamma += sum_dy_xhat * iabn_bn_dgamma_factor(gamma, abs_gamma) (sign of
 * gamma with +1 at 0, as the reference; 1 for plain gamma); dbeta += sum_dy. */
void iabn_bn_param_grads(int c, const float *gamma, int abs_gamma, const float *sum_dy,
                         const float *sum_dy_xhat, float *dgamma, float *dbeta);

/* ---- in-place ABN backward (reads only z and per-channel statistics) -------
 * g = |gamma|+eps always.  The activation must be invertible: relu is not,
 * and the caller (the norm_act layer) must refuse it in the in-place modes.
 * Given relu anyway these kernels take y = z: finite, but wrong for y < 0.
 * Reduction pass, fused: y = act^-1(z), dy = dz*act'(z),
 * sum_dy[c] = sum(dy), sum_dy_xhat[c] = sum(dy * xhat) with xhat = (y-beta)/g.
 * variant 1 (I) builds xhat per element; variant 2 (II) accumulates sum(dy*y)
 * and converts: sum_dy_xhat = (sum(dy*y) - beta*sum_dy)/g.  In evaluation
 * mode the same sums give dgamma and dbeta. */
void iabn_iabn_bwd_reduce(int variant, int n, int c, int hw, iabn_layout layout, const float *z,
                          const float *dz, float eps, const float *gamma,
                          const float *beta, iabn_act act, float *sum_dy,
                          float *sum_dy_xhat);
/* Elementwise pass: variant 1: dx = A*(dy - sum_dy/m - xhat*sum_dy_xhat/m);
 * variant 2: dx = A*dy + B*y + C (docs/INPLACE_ABN.md section 2).  Evaluation mode
 * (!training): dx = dy * g * invstd, g = |gamma|+eps or, with !abs_gamma (a
 * frozen / evaluated standard unit with plain gamma), gamma itself; the
 * training variants need abs_gamma.  dx may equal dz; no full-size temporary. */
void iabn_iabn_bwd_apply(int variant, int n, int c, int hw, iabn_layout layout, const float *z,
                         const float *dz, const float *var, float eps,
                         const float *gamma, const float *beta, int abs_gamma, iabn_act act,
                         const float *sum_dy, const float *sum_dy_xhat, double count,
                         int training, float *dx);

/* ---- a training pass's two halves in one call ------------------------------
 * For a batch whose sums no other worker joins (no sync BN across ranks):
 *   iabn_bn_fwd_train     = iabn_bn_stats, then iabn_norm_act_fwd (xhat not kept)
 *   iabn_bn_act_bwd_train = iabn_bn_act_bwd_reduce, then iabn_bn_act_bwd_apply
 *                           with count n*hw (the identity act: plain BN, dz = dy)
 *   iabn_iabn_bwd_train   = iabn_iabn_bwd_reduce, then iabn_iabn_bwd_apply, training
 * with the same outputs, the same bits and the same aliasing (z over x, dx over
 * dz).  Where a channel group's planes fit a core's cache and the groups keep
 * every thread busy, the two run group by group, the second reading the
 * group while it is still in cache.  Returns 1 when they ran so, 0 when
 * they ran as the two calls. */
int iabn_bn_fwd_train(int n, int c, int hw, iabn_layout layout, const float *x, float eps,
                      const float *gamma, const float *beta, int abs_gamma, iabn_act act,
                      float *mean, float *var, float *z);
int iabn_bn_act_bwd_train(int n, int c, int hw, iabn_layout layout, const float *x,
                          const float *dz, iabn_act act, const float *mean, const float *var,
                          float eps, const float *gamma, const float *beta, int abs_gamma,
                          float *sum_dy, float *sum_dy_xhat, float *dx);
int iabn_iabn_bwd_train(int variant, int n, int c, int hw, iabn_layout layout, const float *z,
                        const float *dz, const float *var, float eps, const float *gamma,
                        const float *beta, int abs_gamma, iabn_act act, float *sum_dy,
                        float *sum_dy_xhat, float *dx);

#ifdef __cplusplus
}
#endif
#endif
