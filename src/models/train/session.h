/* session.h: one planned, bound training (or evaluation) step, built by one
 * call.  Every place that needs a step (the trainer, `iabn mem`, `iabn step`,
 * the benchmarks, a user's program) builds it here, so a new concern of the
 * step (ranks, offloading, budgets) is written once.
 *
 *     iabn_session_cfg c;
 *     iabn_session_cfg_defaults(&c);
 *     c.model = "resnet50";            (or c.build = my_net, c.build_user = ...)
 *     c.batch = 8; c.height = c.width = 224;
 *     iabn_session s;
 *     if (iabn_session_build(&c, &s, &e)) ...e.msg...
 *     iabn_model_init(s.store, ...);    (a builder: iabn_init_params)
 *     iabn_session_set_inputs(&s, images, labels, &e);
 *     iabn_session_run(&s, &e);         (forward, loss, backward)
 *     iabn_session_loss(&s, &loss, &e);
 *     iabn_store_sgd_step(s.store, &sgd, NULL, &e);
 *     iabn_session_free(&s);
 *
 * Gradients: a run writes the gradient of the loss into the store's
 * parameter gradients by ADDING to them (so micro-batches accumulate); the
 * caller zeroes them: iabn_store_sgd_step zeroes them after its update, and
 * iabn_store_zero_grads zeroes them explicitly (before the first run, say).
 * The input's own gradient (cfg.input_grad) is overwritten by every run. */
#ifndef IABN_MODELS_TRAIN_SESSION_H
#define IABN_MODELS_TRAIN_SESSION_H

#include <stddef.h>

#include "graph/graph.h"
#include "graph/strategy.h"
#include "layers/layers.h"
#include "models/models.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A graph builder: the network from `input` (N,C,H,W float) to its output,
 * written to *out.  Layers record errors in the graph; return nonzero (or
 * leave *out < 0) on failure, with e or the graph's error set. */
typedef int (*iabn_session_build_fn)(iabn_graph *g, int input, void *user, int *out,
                                     iabn_err *e);

typedef enum iabn_loss_kind {
    IABN_LOSS_SOFTMAX_XENT = 0,  /* int32 labels; ignore index; OHEM (keep_fraction) */
    IABN_LOSS_L1,                /* float target shaped like the output: mean |y - t|  */
    IABN_LOSS_MSE,               /* float target shaped like the output: mean (y - t)^2 */
    IABN_LOSS_NONE               /* no loss, no labels: evaluation only               */
} iabn_loss_kind;

/* Softmax cross-entropy labels: one per image (N) or one per pixel (N,H,W). */
typedef enum iabn_labels_kind {
    IABN_LABELS_AUTO = 0,        /* per pixel for the registry's segmentation models, */
                                 /* else per image                                    */
    IABN_LABELS_PER_IMAGE,
    IABN_LABELS_PER_PIXEL
} iabn_labels_kind;

typedef struct iabn_session_cfg {
    /* the network: a registry model by name (its defaults), a whole model
     * config, or a builder */
    const char *model;
    const iabn_model_cfg *model_cfg;
    iabn_session_build_fn build;
    void *build_user;
    int train;                   /* 1: forward, loss and backward; 0: evaluation   */
    int batch, channels, height, width;   /* the input, N,C,H,W                    */
    iabn_loss_kind loss;
    iabn_labels_kind labels;
    int ignore_index;            /* softmax xent: labels equal to it are skipped    */
    float keep_fraction;         /* softmax xent OHEM: the hardest fraction kept    */
    float label_smoothing;       /* softmax xent: against (1-e) one-hot + e uniform  */
    int keep_logits;             /* the output stays readable after a run          */
    int input_grad;              /* training: the input's gradient is computed     */
    /* where the model's tensors live: a store shared with other sessions (its
     * weights), or NULL: a new store on `backend` (NULL: the CPU) */
    iabn_store *store;
    const iabn_backend *backend;
    int plan_only;               /* shapes-only store: planned, nothing allocated   */
    int bind;                    /* allocate the executor (ignored with plan_only) */
    size_t budget_bytes;         /* > 0: a step needing more is IABN_ENOMEM (the
                                    message names the largest batch that fits)  */
    size_t host_budget_bytes;    /* pinned host memory the offloaded copies may
                                    take (0: what the machine has available,
                                    iabn_host_available): auto chooses within
                                    it, a bound step over it is IABN_ENOMEM, the
                                    largest-batch search counts it */
    /* how saved activations are stored (graph/strategy.h): keep, offload
     * (conv / pool inputs), auto or recompute (chosen under budget_bytes, or
     * strategy->budget when budget_bytes is 0); strategy: cost model and
     * prefetch lookahead (NULL: calibrated defaults, lookahead 1) */
    iabn_storage storage;
    const iabn_strategy_opts *strategy;
    /* data parallel (tensor/comm.h): the job's communicator (NULL: one
     * process), set on the graph (synchronised BN, the loss's job-wide mean);
     * grad_bucket_bytes > 0 (training): the gradient all-reduce as bucket
     * nodes of about that size (IABN_BUCKET_BYTES_DEFAULT), also when only
     * planning (iabn mem --world) */
    iabn_comm *comm;
    size_t grad_bucket_bytes;
    /* activation layouts (graph.h): auto keeps nChw16c (AVX-512) or nChw8c
     * (AVX2) between the oneDNN
     * convolutions of a CPU backend that has them; nchw everywhere */
    iabn_layout_mode layout_mode;
    /* Winograd convolutions (graph.h, iabn_graph_set_winograd): faster dense
     * 3x3 convs on the CPU with a larger scratch; auto (the default) where
     * that scratch leaves the planned arena as it is */
    iabn_winograd_mode winograd;
} iabn_session_cfg;

/* What the step needs, in bytes (counts for params). */
typedef struct iabn_session_mem {
    size_t params, param_bytes, grad_bytes, optim_bytes, buffer_bytes;
    size_t arena, lower_bound, saved, io, naive;
    size_t staging;              /* second input buffers where inputs are staged   */
    size_t scratch_max, scratch_sum;   /* per-node scratch (cuDNN workspaces)      */
    int copies;                  /* copies inserted before in-place ops            */
    size_t total;                /* arena + io + staging + the store's bytes      */
    size_t host;                 /* host pool of offloaded activations            */
    iabn_layout_stats layouts;   /* activations kept blocked, conv reorders left   */
    int winograd, winograd_possible; /* conv passes running Winograd, and that
                                        could (iabn_graph_winograd_count)      */
    int buckets;                 /* gradient all-reduce buckets (in the arena)     */
    size_t bucket_bytes;
} iabn_session_mem;

typedef struct iabn_session {
    iabn_store *store;
    iabn_graph *graph;
    iabn_plan *plan;
    iabn_exec *exec;             /* NULL when not bound                           */
    int input, labels, logits, loss;   /* tensor ids; -1 when absent             */
    int input_grad;              /* the input's gradient tensor, or -1             */
    int batch, height, width;
    iabn_session_mem mem;
    iabn_strategy_result strategy;   /* what cfg.storage chose                  */
    int own_store;
} iabn_session;

/* batch 1, 3 channels, 224x224, training, softmax xent with ignore index 255
 * and no OHEM, bound. */
void iabn_session_cfg_defaults(iabn_session_cfg *c);
/* Builds the graph (input, labels, network, loss, backward), finalises and
 * plans it, and binds it unless asked not to.  On failure *s is freed. */
int iabn_session_build(const iabn_session_cfg *c, iabn_session *s, iabn_err *e);
/* Frees the executor, plan and graph, and the store when the session made
 * it; *s is zeroed.  A zeroed session is a no-op. */
void iabn_session_free(iabn_session *s);
/* Copies the batch in (host memory): the input as float, the labels as int32
 * (softmax xent) or float (L1 / MSE); NULL leaves one as it is. */
int iabn_session_set_inputs(iabn_session *s, const void *input, const void *labels, iabn_err *e);
/* One run: forward, then (training) backward into the store's gradients. */
int iabn_session_run(iabn_session *s, iabn_err *e);
/* The last run's loss. */
int iabn_session_loss(const iabn_session *s, float *loss, iabn_err *e);
/* Host copy of tensor t (the logits, the input's gradient): bytes must be
 * its size. */
int iabn_session_get(const iabn_session *s, int t, void *host, size_t bytes, iabn_err *e);
/* What iabn_session_largest searches: the batch, or the side of a square
 * input (in steps of 8 pixels) at c's batch. */
typedef enum iabn_session_dim { IABN_SEARCH_BATCH = 0, IABN_SEARCH_SIDE } iabn_session_dim;
/* The largest batch (in [1, 65536]) or square side (in [8, 8192]) whose step
 * (c with that value) needs at most `budget` bytes, planned on a shapes-only
 * store without allocating; 0 when none fits.  A value too small for the
 * model (BN over one value per channel) counts as not fitting. */
int iabn_session_largest(const iabn_session_cfg *c, iabn_session_dim dim, size_t budget,
                         int *out, iabn_err *e);

#ifdef __cplusplus
}
#endif
#endif
