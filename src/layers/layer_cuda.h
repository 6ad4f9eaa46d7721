/* layer_cuda.h: the CUDA run functions of the layers' ops (private to
 * src/layers).  Op definitions name them through IABN_CUDA_RUN(), which is
 * NULL in a build without CUDA, so the C files compile either way:
 *     static const iabn_op_def op = {.run = {fwd_cpu, IABN_CUDA_RUN(iabn_cuda_run_x)}};
 * The functions live in cuda_norm_act.cu and cuda_layers.cu; each unpacks
 * the node's parameters (layer_params.h), calls the launchers of
 * src/tensor/cuda/kernels.h on the context behind b->backend->ctx, and ends
 * with iabn_cuda_node_done() (IABN_CUDA_SYNC=1 support). */
#ifndef IABN_LAYER_CUDA_H
#define IABN_LAYER_CUDA_H

#include "iabn_config.h"
#include "layers/layer_params.h"
#include "graph/graph.h"

#if IABN_HAVE_CUDA
#include "tensor/cuda/kernels.h"
#define IABN_CUDA_RUN(f) f
#else
#define IABN_CUDA_RUN(f) NULL
#endif

#ifdef __CUDACC__
/* Shorthands of the run functions (b: the node's iabn_bind): the context,
 * early return on error, and the bind's void pointers as floats. */
#define CTX ((iabn_cuda_ctx *)b->backend->ctx)
#define TRY(x)                                                                           \
    do {                                                                                 \
        int rc_ = (x);                                                                   \
        if (rc_) return rc_;                                                             \
    } while (0)
#define F(p) ((float *)(p))
#define CF(p) ((const float *)(p))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* norm_act.c: the synchronised BN's exchanges on host arrays (the CUDA run
 * functions copy the per-channel arrays over): local statistics / backward
 * sums and count in, the job's out; nothing happens unless P->sync and the
 * graph's communicator has several ranks. */
int iabn_na_sync_stats(const iabn_graph *g, const iabn_node *n, const na_p *P, float *mean,
                       float *var, double *count, iabn_err *e);
int iabn_na_sync_sums(const iabn_graph *g, const iabn_node *n, const na_p *P, float *sum_dy,
                      float *sum_dy_xhat, double *count, iabn_err *e);

/* loss.c: a rank's mean loss and weights (host arrays) -> the job's. */
int iabn_xent_global_mean(const iabn_graph *g, const iabn_node *n, const xent_p *P, float *loss,
                          float *weight, iabn_err *e);

#define IABN_CUDA_RUN_DECL(f) \
    int f(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e)

/* norm_act.c */
IABN_CUDA_RUN_DECL(iabn_cuda_run_bn_fwd);
IABN_CUDA_RUN_DECL(iabn_cuda_run_bn_apply);
IABN_CUDA_RUN_DECL(iabn_cuda_run_bn_bwd);
IABN_CUDA_RUN_DECL(iabn_cuda_run_act_fwd);
IABN_CUDA_RUN_DECL(iabn_cuda_run_act_bwd);
IABN_CUDA_RUN_DECL(iabn_cuda_run_ckopt_fwd);
IABN_CUDA_RUN_DECL(iabn_cuda_run_from_xhat);
IABN_CUDA_RUN_DECL(iabn_cuda_run_bn_bwd_xhat);
IABN_CUDA_RUN_DECL(iabn_cuda_run_iabn_fwd);
IABN_CUDA_RUN_DECL(iabn_cuda_run_iabn_bwd);
IABN_CUDA_RUN_DECL(iabn_cuda_run_eval_fwd);
/* conv.c */
IABN_CUDA_RUN_DECL(iabn_cuda_run_conv_fwd);
IABN_CUDA_RUN_DECL(iabn_cuda_run_conv_bwd_data);
IABN_CUDA_RUN_DECL(iabn_cuda_run_conv_bwd_filter);
/* elementwise.c */
IABN_CUDA_RUN_DECL(iabn_cuda_run_add);
IABN_CUDA_RUN_DECL(iabn_cuda_run_copy);
IABN_CUDA_RUN_DECL(iabn_cuda_run_add_bcast);
IABN_CUDA_RUN_DECL(iabn_cuda_run_sum_hw);
IABN_CUDA_RUN_DECL(iabn_cuda_run_dropout2d);
IABN_CUDA_RUN_DECL(iabn_cuda_run_concat);
IABN_CUDA_RUN_DECL(iabn_cuda_run_slice_channels);
IABN_CUDA_RUN_DECL(iabn_cuda_run_upsample);
IABN_CUDA_RUN_DECL(iabn_cuda_run_upsample_bwd);
/* pool.c */
IABN_CUDA_RUN_DECL(iabn_cuda_run_maxpool);
IABN_CUDA_RUN_DECL(iabn_cuda_run_maxpool_bwd);
IABN_CUDA_RUN_DECL(iabn_cuda_run_gap);
IABN_CUDA_RUN_DECL(iabn_cuda_run_gap_bwd);
/* linear.c */
IABN_CUDA_RUN_DECL(iabn_cuda_run_linear_fwd);
IABN_CUDA_RUN_DECL(iabn_cuda_run_linear_bwd_data);
IABN_CUDA_RUN_DECL(iabn_cuda_run_linear_bwd_weight);
/* loss.c */
IABN_CUDA_RUN_DECL(iabn_cuda_run_xent_fwd);
IABN_CUDA_RUN_DECL(iabn_cuda_run_xent_bwd);

#ifdef __cplusplus
}
#endif
#endif
