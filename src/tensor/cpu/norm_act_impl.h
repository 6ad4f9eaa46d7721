/* cpu/norm_act_impl.h: what the BN + activation files share internally (not
 * installed): the two job shapes of the engine (norm_act_engine.c), which
 * the public kernels of norm_act.c fill in and run.
 *
 * A reduction job sums a pair (f, f*s) per channel and turns the two sums
 * into the kernel's outputs; an elementwise job computes one output (two for
 * the forward that keeps xhat) per element from per-channel constants.  Both
 * take the activation's layout: NCHW, or nChw16c / nChw8c with c a multiple
 * of 16 / 8 (the caller's promise, cpu/norm_act.h).
 */
#ifndef IABN_CPU_NORM_ACT_IMPL_H
#define IABN_CPU_NORM_ACT_IMPL_H

#include "tensor/tensor.h"

/* What a reduction sums per element (red_pair in the engine says how). */
enum iabn_red_kind { RED_STATS, RED_BN_X, RED_BN_X_ACT, RED_BN_XHAT, RED_IABN1, RED_IABN2 };

typedef struct iabn_red_job {
    int kind, act;
    float p;
    int n, c, hw;
    int blk;           /* channels per group: 1 (NCHW), 16 (nChw16c) or 8 (nChw8c) */
    const float *a;    /* x, xhat or z */
    const float *b;    /* dy or dz; NULL for statistics */
    const float *mean, *var, *gamma, *beta;
    float eps;
    int abs_gamma;     /* RED_BN_X_ACT: the forward's scale (iabn_bn_scale) */
    float *o0, *o1;    /* mean/var or sum_dy/sum_dy_xhat */
} iabn_red_job;

enum iabn_ew_kind {
    EW_FWD,         /* z = act(g*xhat+beta), xhat = (x-mean)*invstd, xhat kept if asked */
    EW_FROM_XHAT,   /* z = act(g*xhat+beta) */
    EW_BN_X,        /* dx from x (training) */
    EW_BN_X_ACT,    /* the same with dy = dz*act'(z), z = act(g*xhat+beta)
                     * rebuilt from x (b: dz) */
    EW_BN_XHAT,     /* dx from xhat (training) */
    EW_SCALE,       /* dx = a*dy (evaluation) */
    EW_IABN1,       /* dx from z, xhat rebuilt per element */
    EW_IABN2,       /* dx = A*dy + B*y + C */
    EW_IABN_EVAL,   /* dx = a*dz*act'(z) */
    EW_ACT_FWD,     /* y = act(x) */
    EW_ACT_BWD      /* dx = dy*act'(y) */
};

typedef struct iabn_ew_job {
    int kind, act;
    float p;
    int n, c, hw;
    int blk;             /* channels per group: 1 (NCHW), 16 (nChw16c) or 8 (nChw8c) */
    const float *a, *b;  /* first and second input (x/xhat/z, dy/dz) */
    float *o, *o2;       /* output; o2: the kept xhat of EW_FWD or NULL */
    const float *mean, *var, *gamma, *beta, *sum_dy, *sum_dy_xhat;
    float eps;
    int abs_gamma;
    double count;
} iabn_ew_job;

/* Jobs with every optional member empty (NULL / 0, identity activation). */
iabn_red_job iabn_red_job_init(int kind, int n, int c, int hw, iabn_layout layout,
                               const float *a, const float *b);
iabn_ew_job iabn_ew_job_init(int kind, int n, int c, int hw, iabn_layout layout, const float *a,
                             const float *b, float *o);
/* Runs a job over the whole tensor (n, c, hw > 0 for the elementwise one;
 * a reduction with n or hw 0 reports zero sums, not statistics). */
void iabn_red_run(const iabn_red_job *j);
void iabn_ew_run(const iabn_ew_job *j);
/* r, then w, channel group by channel group (w reads r's outputs), the same
 * bits as the two runs; 0 when declined, and then nothing ran */
int iabn_red_ew_run(const iabn_red_job *r, const iabn_ew_job *w);
/* The standalone activation (EW_ACT_FWD / EW_ACT_BWD): count flat values, no
 * channels, so no layout. */
void iabn_act_run(int kind, size_t count, iabn_act act, const float *a, const float *b,
                  float *o);

#endif
