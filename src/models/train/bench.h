/* bench.h: measured training steps, the numbers `iabn bench step` and
 * `iabn bench block` print.
 *
 * iabn_stepbench_run: one training step (forward, backward, SGD update) of a
 * registry model, timed over repeated steps after a warm-up, medians split
 * into forward / backward / update from the executor's per-node profile
 * (on a GPU only with by_op: the profile synchronises after every node), and
 * the memory the step holds.  Storage strategies other than keep run on the
 * CPU on the simulated device (tensor/sim) with a copy thread; with a
 * communicator of several ranks the step carries the gradient all-reduce
 * buckets, and the result says how much of the all-reduce the backward hid.
 *
 * iabn_blockbench_run: the paper's Fig. 4: forward + backward of one
 * BN+ACT+CONV block (C channels, HxW, grouped 3x3 conv) in several BN modes,
 * the repeats round-robin over the modes so a slow spell hits them alike;
 * only the block's own nodes are timed.
 *
 * iabn_databench_run: the training loader over a data set (`iabn data
 * bench`): images decoded and augmented per second and per CPU-second.
 *
 * iabn_allreduce_bench_run: the communicator's all-reduce time for one
 * message size (`iabn bench allreduce`, under mpirun). */
#ifndef IABN_MODELS_TRAIN_BENCH_H
#define IABN_MODELS_TRAIN_BENCH_H

#include "data/data.h"
#include "models/train/session.h"
#include "tensor/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iabn_stepbench_opts {
    const iabn_model_cfg *model;
    int batch, height, width;    /* batch per rank                               */
    int repeat;                  /* timed steps after the warm-up                */
    int by_op;                   /* per-op times (ops)                            */
    int by_layer;                /* per conv / linear shape and pass (layers)     */
    const char *device;          /* cpu, cuda, cuda:N                             */
    iabn_storage storage;        /* auto / recompute need budget                 */
    size_t budget;               /* > 0: a step over it is refused before allocating */
    int lookahead;               /* offload prefetch, backward layers (1)        */
    int host_bf16;               /* offloaded copies in bfloat16                  */
    int sim;                     /* CPU: run on the simulated device anyway       */
    double copy_bytes_per_s;     /* the simulated device's copies                 */
    iabn_comm *comm;             /* several ranks: gradient all-reduce buckets   */
    iabn_layout_mode layout_mode; /* activation layouts (auto)                  */
    iabn_winograd_mode winograd; /* Winograd dense 3x3 convs (graph.h): auto    */
} iabn_stepbench_opts;

typedef struct iabn_stepbench_op {
    const char *name;            /* the op's name (static)                       */
    double seconds;              /* summed over the timed steps                   */
} iabn_stepbench_op;

/* One conv / linear shape and pass: "conv2d_bwd_data 4x1024x14x14 -> 4x512x14x14
 * w 512x1024x1x1" (the forward node's input, output and weight). */
typedef struct iabn_stepbench_layer {
    char name[112];
    int nodes;                   /* nodes of that shape in one step               */
    double seconds, flops;       /* summed over the timed steps                   */
} iabn_stepbench_layer;

#define IABN_STEPBENCH_LAYERS 256

typedef struct iabn_stepbench_result {
    char device[160];
    int gpu, profiled, tf32;
    int ranks;                   /* of the communicator (1 without)              */
    double step_s, forward_s, backward_s, update_s;   /* medians                 */
    double step_min_s;           /* the fastest timed step: contention on a shared
                                    host only slows a step, so this is the
                                    closest to the step's own time              */
    double allreduce_s, allreduce_wait_s, hidden;     /* medians; hidden fraction */
    size_t arena, held;          /* planned arena; arena + io + store            */
    size_t device_used;          /* what the driver says the step took (GPU)     */
    size_t host_bytes, offload_bytes;
    int n_offload, n_recompute;
    int sim;                     /* ran on the simulated device                  */
    size_t sim_device_peak;
    double sim_wait_s;           /* copy waits per step                          */
    iabn_stepbench_op ops[64];   /* by_op: largest first                         */
    int nops;
    iabn_stepbench_layer layers[IABN_STEPBENCH_LAYERS]; /* by_layer: largest first */
    int nlayers;
} iabn_stepbench_result;

/* repeat 5, lookahead 1, the CPU, copies at PCIe 3 x16. */
void iabn_stepbench_opts_defaults(iabn_stepbench_opts *o);
int iabn_stepbench_run(const iabn_stepbench_opts *o, iabn_stepbench_result *r, iabn_err *e);
/* The result as one line of text, or as JSON (copy_bw: how the copy
 * bandwidth was asked for, "pcie3"); caller frees, NULL without memory. */
char *iabn_stepbench_text(const iabn_stepbench_opts *o, const iabn_stepbench_result *r);
char *iabn_stepbench_json(const iabn_stepbench_opts *o, const iabn_stepbench_result *r,
                          const char *copy_bw);

typedef struct iabn_blockbench_result {
    double ms;                   /* median forward + backward of the block       */
    double ratio;                /* ms over the first mode's                     */
    size_t kept;                 /* bytes the plan keeps for the backward        */
    int buffers;
} iabn_blockbench_result;

/* The block at channels x hw x hw, batch, conv groups, in each of modes[n];
 * r[n]. */
int iabn_blockbench_run(int channels, int hw, int batch, int groups, int repeat,
                        const iabn_bn_mode *modes, int n, iabn_blockbench_result *r, iabn_err *e);

/* The paper's Fig. 4: ResNeXt-101's four module shapes (mod2 128 x 56^2 ...
 * mod5 1024 x 7^2), each in the five modes standard, checkpoint,
 * checkpoint_opt, inplace_abn, inplace_abn_ii (the ratios to standard).
 * The target, met or not: inplace_abn_ii at most 1.05x standard and
 * checkpointing slower than it. */
#define IABN_FIG4_SHAPES 4
#define IABN_FIG4_MODES 5
const char *iabn_fig4_shape_name(int shape);
iabn_bn_mode iabn_fig4_mode(int m);
int iabn_fig4_run(int shape, int batch, int groups, int repeat,
                  iabn_blockbench_result r[IABN_FIG4_MODES], int *target_met, iabn_err *e);

typedef struct iabn_databench_result {
    int64_t images;              /* samples delivered                            */
    double seconds, cpu_seconds; /* wall clock; user + system of the process     */
    double checksum;             /* of the first value of each batch             */
    iabn_loader_stats stats;     /* skipped files, replaced samples              */
} iabn_databench_result;

/* Every sample of ds, epochs times, through a loader of cfg (its drop_last
 * is turned off: every image counts). */
int iabn_databench_run(const iabn_loader_cfg *cfg, iabn_dataset *ds, int epochs,
                       iabn_databench_result *r, iabn_err *e);

/* The all-reduce (sum, float32) of `bytes` over the communicator's ranks,
 * after a warm-up: the median over repeat runs of the slowest rank's time.
 * Every rank calls it; buf holds at least bytes. */
int iabn_allreduce_bench_run(iabn_comm *c, float *buf, size_t bytes, int repeat, double *median_s,
                             iabn_err *e);

#ifdef __cplusplus
}
#endif
#endif
