/* layer_params.h: the node parameter structs of the layers (private to
 * src/layers): what each op's builder packs into the node and its run
 * function unpacks. */
#ifndef IABN_LAYER_PARAMS_H
#define IABN_LAYER_PARAMS_H

#include <stdint.h>

#include "tensor/tensor.h"

/* norm_act.c: every node of the BN + activation unit */
typedef struct na_p {
    int n, c, hw;
    float eps, momentum;
    int abs_gamma;
    iabn_act act;
    int variant;       /* 1 or 2 for the in-place backward */
    int training;
    int grads;         /* gamma / beta receive gradients */
    int sync;          /* statistics and backward sums over every rank */
} na_p;

/* conv.c */
typedef struct conv_p {
    iabn_conv_geom geom;
    int bias;
    int residual;      /* conv2d_add: the input y adds to and overwrites (0: none) */
} conv_p;

/* elementwise.c: dropout2d and its backward */
typedef struct drop_p {
    float p;
    uint64_t stream;
} drop_p;

/* elementwise.c: slice_channels (concat's backward) */
typedef struct cat_p {
    int c_off;
} cat_p;

/* pool.c: maxpool and its backward */
typedef struct pool_p {
    int k, s, p;
} pool_p;

/* avgpool.c: windows, strides, pooled map, output (i, j) -> pooled (i - top, j - left) */
typedef struct avg_p {
    int kh, kw, sh, sw;
    int ph, pw;
    int top, left;
} avg_p;

/* linear.c */
typedef struct lin_p {
    int n, in, out, bias;
} lin_p;

/* loss.c */
typedef struct xent_p {
    int n, k, hw, ignore;
    float top_frac;
    float smoothing;      /* label smoothing (its own op, CPU only) */
} xent_p;

#endif
