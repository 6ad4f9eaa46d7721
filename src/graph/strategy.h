/* strategy.h: choosing the storage policy of every saved tensor so that a
 * step fits a device-memory budget at the least estimated time (strategy.c),
 * and the cost model it uses.
 *
 *     iabn_graph_backward(g, loss, &e);
 *     iabn_strategy_opts o = {.budget = 10ull << 30, .allow_offload = 1,
 *                             .allow_recompute = 1, .lookahead = 1};
 *     iabn_cost_calibrate(&o.cost, IABN_DEV_CPU, &e);
 *     o.fixed_bytes = iabn_graph_fixed_bytes(g);   // store + io
 *     iabn_strategy_result r;
 *     iabn_strategy_auto(g, &o, &r, &e);           // sets policies
 *     iabn_graph_finalize(g, &e); ...              // r.fits says whether it fits
 */
#ifndef IABN_STRATEGY_H
#define IABN_STRATEGY_H

#include "graph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* PCIe 3.0 x16 as pinned copies reach it in practice (of 15.75 GB/s raw). */
#define IABN_PCIE3_X16_BYTES_PER_S 12.0e9

typedef struct iabn_cost_model {
    double flops_per_s;       /* convolutions and linear layers           */
    double bytes_per_s;       /* memory traffic of every node             */
    double copy_bytes_per_s;  /* host <-> device, one direction           */
} iabn_cost_model;

/* Rates of a typical device of that kind; the copy bandwidth is PCIe 3 x16. */
void iabn_cost_model_default(iabn_cost_model *m, iabn_device_kind dev);
/* A short measurement (a GEMM and a copy, ~0.1 s) on the CPU; on CUDA the
 * defaults.  Keeps m->copy_bytes_per_s when it is > 0. */
int iabn_cost_calibrate(iabn_cost_model *m, iabn_device_kind dev, iabn_err *e);
/* Measured host memcpy bandwidth (bytes/s, one direction). */
double iabn_host_copy_bandwidth(void);

double iabn_node_flops(const iabn_graph *g, int node);
double iabn_node_time(const iabn_graph *g, int node, const iabn_cost_model *m);
/* Estimated seconds of one run of a finalised, planned graph: a compute
 * stream and a copy stream with the executor's waits. */
double iabn_strategy_estimate(const iabn_graph *g, const iabn_plan *p, const iabn_cost_model *m);

/* Device bytes outside the arena: the store (parameters, gradients,
 * optimizer state as it will be allocated, running statistics) and the io
 * region (inputs, outputs). */
size_t iabn_graph_fixed_bytes(const iabn_graph *g);

typedef struct iabn_strategy_opts {
    size_t budget;            /* device bytes in all                      */
    size_t fixed_bytes;       /* of which outside the arena                */
    iabn_cost_model cost;
    int allow_offload, allow_recompute;
    int lookahead;            /* prefetch lookahead (iabn_offload_opts)    */
    size_t host_budget;       /* host bytes the offloaded copies may take
                                 (pinned memory; 0: no limit)             */
    int host_bf16;            /* host copies in bfloat16 (iabn_offload_opts) */
} iabn_strategy_opts;

typedef struct iabn_strategy_result {
    int fits;                 /* arena_bytes + fixed_bytes <= budget       */
    int n_candidates, n_recompute, n_offload;
    size_t base_arena;        /* keep everything                           */
    size_t arena_bytes;       /* with the chosen policies (planned)        */
    size_t host_bytes;        /* host pool of the offloaded copies          */
    double base_time, est_time; /* estimated step seconds                   */
    int iterations;           /* plans verified                            */
    int paper;                /* the greedy did not fit and the paper's     */
                              /* policy (offload conv / pool inputs) did   */
    double seconds;           /* time the choice took                       */
} iabn_strategy_result;

/* Sets the policy (keep / recompute / offload) of every saved tensor of g
 * (backward built, not finalised) and the offload lookahead.  Tensors
 * already marked RECOMPUTE or OFFLOAD (a BN mode's choice) stay so.  When
 * the greedy choice does not fit but the paper's offload policy does, that
 * one is applied (r->paper).  When nothing fits, r->fits is 0 and the
 * policies are the smallest found; the caller refuses the plan. */
int iabn_strategy_auto(iabn_graph *g, const iabn_strategy_opts *o, iabn_strategy_result *r,
                       iabn_err *e);

/* How saved tensors are stored: as the BN modes built them (keep), the
 * paper's offload of conv / pool inputs, the automatic choice under a
 * budget, or that choice restricted to recomputation (checkpointing chosen
 * per tensor, the baseline offload is measured against). */
typedef enum iabn_storage {
    IABN_STORAGE_KEEP = 0,
    IABN_STORAGE_OFFLOAD,
    IABN_STORAGE_AUTO,
    IABN_STORAGE_RECOMPUTE,
    IABN_STORAGE_NMODES
} iabn_storage;
const char *iabn_storage_name(iabn_storage s);
/* "keep", "offload", "auto", "recompute"; anything else is an error naming them. */
int iabn_storage_parse(const char *s, iabn_storage *out, iabn_err *e);

/* Applies a storage mode to g (backward built, not finalised).  AUTO and
 * RECOMPUTE need o (budget, cost model); r (may be NULL) gets the result. */
int iabn_graph_apply_storage(iabn_graph *g, iabn_storage st, const iabn_strategy_opts *o,
                             iabn_strategy_result *r, iabn_err *e);

/* Refuses, before anything is allocated, a plan whose device bytes (fixed
 * plus arena) exceed budget (0: no budget): IABN_ENOMEM naming both. */
int iabn_plan_check_budget(const iabn_graph *g, const iabn_plan *p, size_t budget, iabn_err *e);

/* Builds the training graph for a batch size (backward built, not
 * finalised) on a store it creates (virtual: planning only). */
typedef int (*iabn_batch_build_fn)(void *ctx, int batch, iabn_store **s, iabn_graph **g,
                                   iabn_err *e);
/* Device bytes of the plan for `batch` under a storage mode (o->budget is
 * the budget auto aims at); *fits says whether it is within o->budget. */
int iabn_batch_device_bytes(iabn_batch_build_fn build, void *ctx, int batch, iabn_storage st,
                            const iabn_strategy_opts *o, size_t *bytes, int *fits, iabn_err *e);
/* The largest batch (up to max_batch) whose plan fits o->budget under the
 * storage mode; 0 when not even one fits.  Planning only: nothing is
 * allocated. */
int iabn_largest_batch(iabn_batch_build_fn build, void *ctx, iabn_storage st,
                       const iabn_strategy_opts *o, int max_batch, int *best, iabn_err *e);

#ifdef __cplusplus
}
#endif
#endif
