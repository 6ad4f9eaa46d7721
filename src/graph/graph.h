/* graph.h: the interface of src/graph.
 *
 * A model is a static graph.  Layers (src/layers) append forward nodes through
 * iabn_graph_node(); iabn_graph_backward() appends the backward nodes each
 * op's backward builder emits; iabn_graph_finalize() applies the storage
 * policies (recompute) and the in-place rules (copies before MUST in-place ops
 * whose input is still needed).  The planner then gives every arena tensor an
 * offset without allocating anything, and the executor binds one arena and
 * runs the schedule.
 *
 *     iabn_store *s = iabn_store_new(iabn_backend_cpu(), &e);
 *     iabn_graph *g = iabn_graph_new(s, IABN_TRAIN);
 *     int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){8, 3, 32, 32});
 *     ... layers ...
 *     iabn_graph_backward(g, loss, &e);
 *     iabn_graph_finalize(g, &e);
 *     iabn_plan *p; iabn_plan_build(g, NULL, &p, &e);
 *     iabn_exec *ex; iabn_exec_new(g, p, &ex, &e);
 *     iabn_exec_run(ex, &e);
 *
 * Tensors and nodes are integer ids into arrays owned by the graph.
 */
#ifndef IABN_GRAPH_H
#define IABN_GRAPH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tensor/backend.h"
#include "tensor/tensor.h"
#include "tensor/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define IABN_MAX_DIMS 4
/* Elements of one tensor at most: kernels take counts, planes and channels
 * as int, so every partial product of a shape must fit in one.  A larger
 * shape is refused when the tensor is added ("does not fit: needs N bytes"),
 * with IABN_ENOMEM like any plan that does not fit. */
#define IABN_MAX_ELEMS ((size_t)2147483647)
#define IABN_MAX_IN 8
#define IABN_MAX_OUT 4
#define IABN_NAME_LEN 96
#define IABN_PARAMS_BYTES 192

/* The node's parameter bytes are 8-aligned so that layers may memcpy structs
 * with 64-bit fields out of them; the spelling differs between C11 and the
 * C++ of the CUDA sources that include this header (same layout). */
#ifdef __cplusplus
#define IABN_ALIGNAS8 alignas(8)
#else
#define IABN_ALIGNAS8 _Alignas(8)
#endif

typedef struct iabn_graph iabn_graph;
typedef struct iabn_store iabn_store;
typedef struct iabn_plan iabn_plan;
typedef struct iabn_exec iabn_exec;
typedef struct iabn_node iabn_node;

/* ---- tensors --------------------------------------------------------------- */

typedef enum iabn_tkind {
    IABN_T_ACT = 0,    /* activation / activation gradient / scratch: arena   */
    IABN_T_PARAM,      /* parameter value: store                              */
    IABN_T_GRAD,       /* parameter gradient: store, accumulated (+=)        */
    IABN_T_STATE,      /* running statistics: store                           */
    IABN_T_INPUT,      /* fed by the caller each run: io region               */
    IABN_T_OUTPUT,     /* read by the caller after a run (loss): io region    */
    IABN_T_HOST        /* host copy of an offloaded activation: host pool     */
} iabn_tkind;

typedef enum iabn_policy {
    IABN_KEEP = 0,     /* alive from producer to last reader                   */
    IABN_RECOMPUTE,    /* dies after its last forward reader, rebuilt before    */
                       /* its first backward reader                            */
    IABN_OFFLOAD       /* copied to host after production, prefetched back     */
                       /* before its first backward reader (finalize)          */
} iabn_policy;

typedef struct iabn_tensor {
    iabn_dtype dtype;
    int nd;
    int shape[IABN_MAX_DIMS];
    size_t nbytes;
    iabn_tkind kind;
    iabn_policy policy;
    int producer;        /* node id, -1 for leaves                             */
    int store_id;        /* PARAM / GRAD / STATE: entry in the store           */
    int view_of;         /* -1, or the tensor whose storage this one shares    */
    int requires_grad;
    int scratch;         /* per-node scratch: lives only during its producer   */
    int block;           /* report row (module / block) this tensor belongs to */
    int grad;            /* an INPUT that asked for its gradient: the tensor    */
                         /* holding it once the backward is built, else -1      */
    iabn_layout layout;  /* memory layout (4-d activations); NCHW unless the    */
                         /* layout pass of finalize (layout.c) blocks it         */
    char name[IABN_NAME_LEN];
} iabn_tensor;

/* ---- ops ------------------------------------------------------------------- */

typedef enum iabn_phase {
    IABN_PHASE_FWD = 0,
    IABN_PHASE_BWD = 1,
    IABN_PHASE_RECOMPUTE = 2   /* a forward node re-run during the backward   */
} iabn_phase;

/* What the executor hands a kernel: one pointer per input / output, the
 * node's scratch, and the run's mutable scalars. */
typedef struct iabn_bind {
    void *in[IABN_MAX_IN];
    void *out[IABN_MAX_OUT];
    void *scratch;
    size_t scratch_bytes;
    const iabn_backend *backend;
    uint64_t seed;       /* per-run seed (dropout) */
    uint64_t step;       /* run counter (dropout stream) */
    const iabn_node *next; /* the node whose work this run does too (the op's
                            * absorb), or NULL */
    const iabn_node *prev; /* the same for the node before (absorb_prev), */
    void *prev_in[IABN_MAX_IN]; /* and its inputs as bound for it          */
} iabn_bind;

/* How an op lays out its 4-d activation operands (the layout pass,
 * layout.c).  An op that declares nothing keeps them NCHW. */
typedef enum iabn_layout_rule {
    IABN_LAYOUT_RULE_NCHW = 0, /* NCHW only                                      */
    IABN_LAYOUT_RULE_SAME,     /* any layout, one for all of them (per-element  */
                               /* and per-channel kernels, copies)               */
    IABN_LAYOUT_RULE_VOTE      /* each operand its own: .layout_vote says how   */
} iabn_layout_rule;

/* dout value meaning "the gradient of a scalar loss with respect to itself". */
#define IABN_GRAD_ONE (-2)

typedef struct iabn_op_def {
    const char *name;
    /* Emits backward nodes.  dout[j]: gradient tensor of output j or -1.
     * Writes din[k] (gradient of input k) for inputs that require a gradient
     * and are not parameters; parameter gradients go straight into the store
     * through iabn_graph_param_grad().  Optional (NULL: no gradient flows). */
    int (*backward)(iabn_graph *g, int node, const int *dout, int *din, iabn_err *e);
    /* Emits the node that rebuilds this node's outputs during the backward
     * (storage policy RECOMPUTE); inputs[] are the (possibly recomputed)
     * inputs to read.  Returns the new node id or <0.  Optional: NULL means
     * "re-run the same op on the same inputs" (deterministic ops). */
    int (*recompute)(iabn_graph *g, int node, const int *inputs, iabn_err *e);
    /* Scratch bytes the kernel needs on this backend.  Optional. */
    size_t (*scratch_bytes)(const iabn_graph *g, const iabn_node *n, const iabn_backend *be);
    /* Runs the node on any backend, through b->backend's kernel table. */
    int (*run)(const iabn_graph *g, const iabn_node *n, const iabn_bind *b, iabn_err *e);
    iabn_layout_rule layout;
    /* IABN_LAYOUT_RULE_VOTE: how input k (out 0) or output k (out 1) takes a
     * blocked layout: -1 not at all, 0 it takes one but prefers NCHW, 1 it
     * prefers blocked, 2 either costs the same (cpu/conv.h
     * iabn_conv_layout_vote). */
    int (*layout_vote)(const iabn_graph *g, const iabn_node *n, const iabn_backend *be, int out,
                       int k);
    /* IABN_LAYOUT_RULE_VOTE: whether the node has a kernel for the layouts
     * the layout pass gave its operands (a mix its votes allowed may have
     * none: cpu/conv.h iabn_conv_layouts_ok).  Optional: NULL every mix. */
    int (*layout_ok)(const iabn_graph *g, const iabn_node *n, const iabn_backend *be);
    /* Whether the node runs Winograd kernels on be when its winograd flag is
     * set (winograd.c).  Optional: NULL never. */
    int (*winograd)(const iabn_graph *g, const iabn_node *n, const iabn_backend *be);
    /* 1: where a MUST in-place output's input is still needed afterwards,
     * the kernel may write that output to a buffer of its own (it computes
     * the same bits either way), and finalize lets it instead of copying the
     * input first: the same memory, one pass over the tensor fewer.  0: the
     * input is copied (conv2d_add, whose kernel adds into the residual). */
    int own_buffer;
    /* Whether this node's run can do the work of `next` too: next runs right
     * after it, reads only this node's first output and writes its own
     * first output over it (in place).  The executor asks only where the
     * graph's fusion flag is on and those hold in the plan; then this node
     * runs with b->next set and next's step runs nothing.  The graph, its
     * plan and its memory stay what they are.  Optional: NULL never. */
    int (*absorb)(const iabn_graph *g, const iabn_node *n, const iabn_node *next);
    /* The other way round: whether this node's run can do the work of
     * `prev`, the node that runs right before it, whose only output this
     * node alone reads.  The executor asks only where the fusion flag is on
     * and, in the plan, none of this node's outputs and scratch overlaps one
     * of prev's inputs other than exactly (an elementwise output over its
     * input); then prev's step runs nothing, and this node runs with
     * b->prev and b->prev_in (prev's inputs: its output is never written).
     * Optional: NULL never. */
    int (*absorb_prev)(const iabn_graph *g, const iabn_node *n, const iabn_node *prev);
} iabn_op_def;

struct iabn_node {
    const iabn_op_def *op;
    int nin, nout;
    int in[IABN_MAX_IN];
    int out[IABN_MAX_OUT];
    /* Output j overwrites input inplace[j] (-1: none).  must[j]: required
     * (in-place ABN) rather than permitted (activations, add). */
    int inplace[IABN_MAX_OUT];
    unsigned char must[IABN_MAX_OUT];
    /* finalize gave an output of a MUST in-place node a buffer of its own
     * (op->own_buffer) because its input is still needed: counted with the
     * copies, which it replaces */
    unsigned char own_buffer;
    iabn_phase phase;
    int fwd;             /* forward node this backward / recompute node serves */
    int scratch;         /* scratch tensor id or -1                             */
    int winograd;        /* runs with the Winograd flag (winograd.c)            */
    int wino_images;     /* with it: images per call at most, for less scratch
                          * (0: the kernel's fastest; winograd.c)               */
    int block;
    char name[IABN_NAME_LEN];
    IABN_ALIGNAS8 unsigned char params[IABN_PARAMS_BYTES];
};

/* ---- the store: persistent tensors shared by the graphs of one model ------- */

typedef enum iabn_pkind {
    IABN_P_WEIGHT = 0,   /* conv / linear weight: weight decay applies          */
    IABN_P_BIAS,         /* bias, BN beta                                       */
    IABN_P_BN_WEIGHT,    /* BN gamma                                            */
    IABN_P_BUFFER        /* running statistics: no gradient                     */
} iabn_pkind;

typedef struct iabn_param {
    char name[IABN_NAME_LEN];
    iabn_pkind kind;
    int nd;
    int shape[IABN_MAX_DIMS];
    size_t count;
    float *data;         /* on the store's backend */
    float *grad;         /* NULL for buffers and frozen parameters */
    float *mom;          /* optimizer state, allocated on first step */
    int lr_group;        /* 0 body, 1 classifier (separate lr) */
    int frozen;          /* no gradient */
    int bn_abs;          /* BN weight: its unit scales by |gamma| + bn_eps (the
                            in-place modes); 0: by gamma itself                 */
    float bn_eps;        /* BN weight: its unit's eps                           */
} iabn_param;

iabn_store *iabn_store_new(const iabn_backend *be, iabn_err *e);
/* A store that records names and shapes only: graphs built on it plan (and
 * report) without allocating a byte; an executor refuses it. */
iabn_store *iabn_store_new_virtual(const iabn_backend *be, iabn_err *e);
int iabn_store_is_virtual(const iabn_store *s);
void iabn_store_free(iabn_store *s);
const iabn_backend *iabn_store_backend(const iabn_store *s);
/* Finds `name` or creates it (data zeroed; grads allocated unless BUFFER).
 * An existing entry with another shape is an error naming both shapes. */
int iabn_store_param(iabn_store *s, const char *name, iabn_pkind kind, int nd,
                     const int *shape, int *id, iabn_err *e);
int iabn_store_count(const iabn_store *s);
iabn_param *iabn_store_get(iabn_store *s, int id);
int iabn_store_find(const iabn_store *s, const char *name);
/* Totals: parameters (elements / bytes, BUFFERs excluded), gradient bytes,
 * optimizer bytes (momentum, as allocated or as it would be), buffer bytes. */
void iabn_store_totals(const iabn_store *s, size_t *params, size_t *param_bytes,
                       size_t *grad_bytes, size_t *opt_bytes, size_t *buffer_bytes);
int iabn_store_zero_grads(iabn_store *s, iabn_err *e);
/* Host copies in and out (safetensors, tests), whatever the backend. */
int iabn_store_read(iabn_store *s, int id, float *host, iabn_err *e);
int iabn_store_write(iabn_store *s, int id, const float *host, iabn_err *e);
int iabn_store_read_grad(iabn_store *s, int id, float *host, iabn_err *e);

/* ---- optimizer ------------------------------------------------------------- */

/* SGD with PyTorch's semantics on every trainable parameter of the store,
 * on its backend; gradients are zeroed afterwards.  lr_group 1 parameters
 * (the classifier) take lr[1], the others lr[0]. */
typedef struct iabn_sgd_opts {
    float lr[2];
    float momentum, weight_decay;
    int nesterov;
    float grad_scale;        /* gradients times this first (1 / micro-batches) */
    float clip;              /* > 0: the global L2 norm is clipped to this     */
} iabn_sgd_opts;
/* *grad_norm (may be NULL): the global norm after grad_scale, before clipping.
 * A NaN or Inf gradient is IABN_ENUM naming the parameter, with no weight or
 * momentum changed (the gradients are then scaled, not zeroed). */
int iabn_store_sgd_step(iabn_store *s, const iabn_sgd_opts *o, double *grad_norm, iabn_err *e);

/* ---- graph ---------------------------------------------------------------- */

typedef enum iabn_mode { IABN_EVAL = 0, IABN_TRAIN = 1 } iabn_mode;

iabn_graph *iabn_graph_new(iabn_store *s, iabn_mode mode);
void iabn_graph_free(iabn_graph *g);
iabn_store *iabn_graph_store(const iabn_graph *g);
iabn_mode iabn_graph_mode(const iabn_graph *g);
/* The first error met while building (layers record it and return -1, so a
 * model builder can check once at the end). */
const iabn_err *iabn_graph_error(const iabn_graph *g);
int iabn_graph_fail(iabn_graph *g, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
int iabn_graph_ok(const iabn_graph *g);

int iabn_graph_input(iabn_graph *g, const char *name, iabn_dtype dt, int nd, const int *shape);
/* Asks for the gradient of the loss with respect to float input t (a
 * training graph; before the layers that read t are added).  After
 * iabn_graph_backward, iabn_graph_input_grad(g, t) is the tensor holding it
 * (a graph output, overwritten by every run: read it with iabn_exec_get), or
 * -1 when no gradient reaches t. */
int iabn_graph_input_requires_grad(iabn_graph *g, int t, iabn_err *e);
int iabn_graph_input_grad(const iabn_graph *g, int t);
/* A new arena tensor (layers use this for outputs). */
int iabn_graph_tensor(iabn_graph *g, const char *name, iabn_dtype dt, int nd, const int *shape);
/* A graph tensor bound to store entry `name` (created if absent). */
int iabn_graph_param(iabn_graph *g, const char *name, iabn_pkind kind, int nd, const int *shape);
/* The GRAD tensor of parameter tensor t (created on first use). */
int iabn_graph_param_grad(iabn_graph *g, int t);
/* A view sharing t's storage with another shape (same byte count). */
int iabn_graph_view(iabn_graph *g, int t, const char *name, int nd, const int *shape);
/* Marks t as a graph output (kept to the end, readable after a run). */
void iabn_graph_mark_output(iabn_graph *g, int t);

/* Appends a node; returns its id or -1 (error recorded in the graph). */
int iabn_graph_node(iabn_graph *g, const iabn_op_def *op, const char *name, int nin,
                    const int *in, int nout, const int *out, const void *params,
                    size_t params_size);
/* Declares that output j of node overwrites input k (must: required). */
void iabn_graph_inplace(iabn_graph *g, int node, int j, int k, int must);
void iabn_graph_set_policy(iabn_graph *g, int t, iabn_policy p);

/* Report rows: nodes and tensors created after begin_block belong to it. */
void iabn_graph_begin_block(iabn_graph *g, const char *name);
int iabn_graph_block_count(const iabn_graph *g);
const char *iabn_graph_block_name(const iabn_graph *g, int b);

/* Ops the graph itself inserts (gradient fan-in, copies before MUST in-place
 * ops); defined with the other elementwise layers in src/layers. */
extern const iabn_op_def iabn_op_add;
extern const iabn_op_def iabn_op_copy;
/* Ops of the OFFLOAD policy (finalize inserts them; the executor runs them on
 * the copy stream): offload copies a tensor to its host copy right after its
 * producer; prefetch copies it back into a new device tensor that the
 * backward reads. */
extern const iabn_op_def iabn_op_offload;
extern const iabn_op_def iabn_op_prefetch;

/* Activation layouts (layout.c).  auto: finalize's layout pass keeps in
 * the backend's blocked layout (nChw16c on AVX-512 CPUs, nChw8c on others)
 * every activation whose convolutions prefer it and whose other
 * readers and writers take it (on a backend whose kernel table has
 * conv_layout_vote; elsewhere everything stays NCHW); nchw: no pass.  One
 * row per mode: enum, name. */
#define IABN_LAYOUT_MODES(X)           \
    X(IABN_LAYOUT_MODE_AUTO, "auto")   \
    X(IABN_LAYOUT_MODE_NCHW, "nchw")
typedef enum iabn_layout_mode {
#define IABN_LAYOUT_MODE_ENUM(id, name) id,
    IABN_LAYOUT_MODES(IABN_LAYOUT_MODE_ENUM)
#undef IABN_LAYOUT_MODE_ENUM
    IABN_LAYOUT_MODE_COUNT
} iabn_layout_mode;
const char *iabn_layout_mode_name(iabn_layout_mode m);
/* Parses a mode name; an unknown one is IABN_EINVAL naming the valid ones. */
int iabn_layout_mode_parse(const char *s, iabn_layout_mode *out, iabn_err *e);
/* Before finalize (default auto). */
void iabn_graph_set_layout_mode(iabn_graph *g, iabn_layout_mode m);

/* Fused layers (layers.h iabn_conv2d_add): on by default; off, a model
 * builds them as their parts (the same results, more memory traffic).  Set
 * before building the layers it should apply to. */
void iabn_graph_set_fusion(iabn_graph *g, int on);
int iabn_graph_fusion(const iabn_graph *g);

/* Winograd convolutions (winograd.c).  A node's winograd flag sets its
 * geometry's (cpu/conv.h), so that the CPU runs dense 3x3 stride-1 convs
 * on maps of 14x14 and more with Winograd kernels: oneDNN's F(4x4, 3x3) on
 * AVX-512 CPUs (1.2x-2.6x faster), iabn's F(2x2, 3x3) on nChw8c elsewhere
 * (1.2x-2x, 128 channels or more; the weight pass from 64), with a larger
 * scratch (docs/CPU.md).
 * Which nodes get the flag, per mode: off none; on every one; auto those
 * whose larger scratch fits under the most bytes live at any step of the
 * plan without any (its lower bound), with the arena at most 0.25% larger
 * than off's, where needed on fewer images per call (iabn_node
 * wino_images).  One row per mode: enum, name.  The default is auto. */
#define IABN_WINOGRAD_MODES(X)          \
    X(IABN_WINOGRAD_AUTO, "auto")       \
    X(IABN_WINOGRAD_OFF, "off")         \
    X(IABN_WINOGRAD_ON, "on")
typedef enum iabn_winograd_mode {
#define IABN_WINOGRAD_ENUM(id, name) id,
    IABN_WINOGRAD_MODES(IABN_WINOGRAD_ENUM)
#undef IABN_WINOGRAD_ENUM
    IABN_WINOGRAD_MODE_COUNT
} iabn_winograd_mode;
const char *iabn_winograd_mode_name(iabn_winograd_mode m);
/* Parses a mode name; an unknown one is IABN_EINVAL naming the valid ones. */
int iabn_winograd_mode_parse(const char *s, iabn_winograd_mode *out, iabn_err *e);
/* Before finalize (the scratch is sized with it). */
void iabn_graph_set_winograd(iabn_graph *g, iabn_winograd_mode m);
iabn_winograd_mode iabn_graph_winograd(const iabn_graph *g);
/* After finalize: how many nodes run Winograd kernels, and how many could
 * (those the on mode gives them). */
void iabn_graph_winograd_count(const iabn_graph *g, int *running, int *possible);

/* What the layout pass chose: activations kept blocked and their bytes, and
 * the convolution passes that still reorder an operand in their scratch
 * (their primitive works in another layout than the tensor's). */
typedef struct iabn_layout_stats {
    int blocked;
    size_t blocked_bytes;
    int conv_reorders;
} iabn_layout_stats;
void iabn_graph_layout_stats(const iabn_graph *g, iabn_layout_stats *out);

/* How finalize applies OFFLOAD.  lookahead: the prefetch of a tensor is
 * issued when the backward reaches the layer `lookahead` layers before the
 * tensor's first backward reader (0: at that reader's own layer; 1, the
 * default, the paper's "one layer ahead"). */
typedef struct iabn_offload_opts {
    int lookahead;
    /* host copies of float32 activations in bfloat16 (math/bf16.h): half the
     * host pool and the copy traffic; the backward then reads values rounded
     * to bfloat16 (the forward is unchanged) */
    int host_bf16;
} iabn_offload_opts;
void iabn_graph_set_offload_opts(iabn_graph *g, const iabn_offload_opts *o);

/* The paper's policy (docs/INPLACE_ABN.md section 5): marks OFFLOAD every saved
 * activation (an arena tensor of the forward that the backward reads) that a
 * convolution's or pooling's backward reads, except a standard BN's input,
 * which stays (the in-place layer stores none: it reconstructs it); views
 * and tensors with views are left alone.  Call after iabn_graph_backward and
 * before finalize.  Returns the number of tensors marked. */
int iabn_graph_offload_conv_inputs(iabn_graph *g);
/* Whether t may be offloaded: a forward arena tensor, not a view nor viewed,
 * read by the backward. */
int iabn_graph_offloadable(const iabn_graph *g, int t);
/* A deep copy sharing the store (strategy search plans clones). */
iabn_graph *iabn_graph_clone(const iabn_graph *g);

/* The communicator of a data-parallel job (tensor/comm.h): synchronised BN
 * nodes, the loss's global normalisation and the gradient buckets use it.
 * NULL (the default) or a size-1 communicator: one process. */
void iabn_graph_set_comm(iabn_graph *g, iabn_comm *c);
iabn_comm *iabn_graph_comm(const iabn_graph *g);

/* Data-parallel gradient all-reduce as schedule nodes (buckets.c): after
 * finalize, packs the trainable gradients in buckets of about bucket_bytes
 * (IABN_BUCKET_BYTES_DEFAULT: 25 MiB) in the order the backward finishes
 * them; each bucket's sum over the ranks starts as soon as its last gradient
 * is written and is waited for at the end of the run.  Bucket buffers are
 * arena tensors ("allreduce.bucket<k>"), planned and reported like the rest.
 * The nodes do nothing without a communicator of several ranks, or while
 * grad sync is off (gradient accumulation: on for the last run of a step). */
#define IABN_BUCKET_BYTES_DEFAULT ((size_t)25 << 20)
int iabn_graph_grad_buckets(iabn_graph *g, size_t bucket_bytes, iabn_err *e);
int iabn_graph_nbuckets(const iabn_graph *g);
size_t iabn_graph_bucket_bytes(const iabn_graph *g, int k);
void iabn_graph_set_grad_sync(iabn_graph *g, int on);

int iabn_graph_backward(iabn_graph *g, int loss, iabn_err *e);
int iabn_graph_finalize(iabn_graph *g, iabn_err *e);

int iabn_graph_ntensors(const iabn_graph *g);
int iabn_graph_nnodes(const iabn_graph *g);
const iabn_tensor *iabn_graph_t(const iabn_graph *g, int t);
iabn_tensor *iabn_graph_t_mut(iabn_graph *g, int t);
const iabn_node *iabn_graph_n(const iabn_graph *g, int n);
iabn_node *iabn_graph_n_mut(iabn_graph *g, int n);
/* Schedule: node ids in execution order. */
int iabn_graph_schedule_len(const iabn_graph *g);
const int *iabn_graph_schedule(const iabn_graph *g);
/* The extra buffers the in-place rules cost (report): copy nodes inserted by
 * finalize before MUST in-place ops, and MUST in-place outputs that finalize
 * gave a buffer of their own instead (iabn_op_def.own_buffer). */
int iabn_graph_copies(const iabn_graph *g);
int iabn_graph_find(const iabn_graph *g, const char *name);

/* ---- planner ---------------------------------------------------------------- */

typedef enum iabn_plan_mode {
    IABN_PLAN_FULL = 0,      /* in-place aliasing and buffer reuse            */
    IABN_PLAN_NOINPLACE,     /* reuse, but every output gets its own buffer   */
    IABN_PLAN_NAIVE          /* no reuse at all: one buffer per tensor        */
} iabn_plan_mode;

typedef struct iabn_plan_opts {
    iabn_plan_mode mode;
    size_t guard;            /* guard bytes after each buffer (checked)       */
    size_t align;            /* 0: the backend's                              */
} iabn_plan_opts;

/* Default options, overridden by the environment: IABN_PLAN=naive|noinplace,
 * IABN_PLAN_GUARD=<bytes>. */
void iabn_plan_opts_default(iabn_plan_opts *o);

/* An in-place decision, for the report. */
typedef struct iabn_plan_note {
    int node, out, in;       /* node, output index, input index */
    int granted;
    int must;
    char why[128];
} iabn_plan_note;

struct iabn_plan {
    iabn_plan_opts opts;
    int ntensors, nsteps;
    int *group;              /* tensor -> group root (arena tensors), -1 otherwise */
    size_t *offset;          /* tensor -> arena offset (views: base + 0)          */
    int *first, *last;       /* group root -> schedule steps                       */
    size_t *gsize;           /* group root -> bytes (aligned, guard included)      */
    size_t arena_bytes;      /* planned peak                                        */
    size_t lower_bound;      /* max over steps of live bytes                        */
    size_t naive_bytes;      /* sum of all groups (no reuse)                       */
    size_t io_bytes;         /* inputs and outputs                                  */
    size_t *io_offset;       /* tensor -> io offset                                 */
    size_t *live;            /* per step: bytes live                                */
    size_t saved_bytes;      /* activation bytes alive across the fwd/bwd boundary  */
    size_t host_bytes;       /* host pool (offloaded copies, reused when disjoint)  */
    size_t offload_bytes;    /* bytes copied to the host per run (sum of copies)    */
    size_t *host_offset;     /* tensor -> host pool offset (IABN_T_HOST)           */
    int boundary;            /* first backward step                                 */
    int nnotes;
    iabn_plan_note *notes;
};

int iabn_plan_build(const iabn_graph *g, const iabn_plan_opts *opts, iabn_plan **out,
                    iabn_err *e);
void iabn_plan_free(iabn_plan *p);
/* Checks the no-overlap invariant; returns 0 or an error describing the pair. */
int iabn_plan_validate(const iabn_graph *g, const iabn_plan *p, iabn_err *e);

/* Per-step table: phase, node, op, live bytes, outputs with offsets, inputs. */
void iabn_plan_dump(const iabn_graph *g, const iabn_plan *p, FILE *f);

/* Per report block (iabn_graph_begin_block): what the plan keeps for the
 * backward, attributed to the block whose backward reads it first (a BN's
 * input is stored for that BN).  A "stored buffer" is a kept activation with
 * at least two dimensions (per-channel statistics are counted in bytes only). */
typedef struct iabn_block_mem {
    size_t kept_bytes;       /* bytes alive across the forward/backward boundary */
    int kept_buffers;
    int copies;              /* copies inserted before MUST in-place ops          */
    int inplace_granted, inplace_refused;
} iabn_block_mem;
/* rows: iabn_graph_block_count(g) entries. */
void iabn_plan_blocks(const iabn_graph *g, const iabn_plan *p, iabn_block_mem *rows);

/* ---- executor --------------------------------------------------------------- */

int iabn_exec_new(iabn_graph *g, const iabn_plan *p, iabn_exec **out, iabn_err *e);
void iabn_exec_free(iabn_exec *ex);
/* Runs the whole schedule (forward, recompute and backward nodes). */
int iabn_exec_run(iabn_exec *ex, iabn_err *e);
/* Pointer to a tensor's storage (io, arena or store) on the backend. */
void *iabn_exec_ptr(iabn_exec *ex, int t);
/* Host copies of inputs / outputs. */
int iabn_exec_set(iabn_exec *ex, int t, const void *host, size_t bytes, iabn_err *e);
int iabn_exec_get(iabn_exec *ex, int t, void *host, size_t bytes, iabn_err *e);
/* Input t of the NEXT run, copied while the current one computes: on a
 * backend with a copy stream the bytes go to a second device buffer of the
 * input (allocated on first use: iabn_exec_staging_bytes), which the next
 * iabn_exec_run swaps in after waiting for the copy; elsewhere this is
 * iabn_exec_set.  `host` (pinned memory, for a truly asynchronous copy) must
 * stay untouched until that next run has returned and the caller has
 * synchronised with it (any iabn_exec_get does).  Staging the same input
 * twice without a run in between is an error. */
int iabn_exec_stage(iabn_exec *ex, int t, const void *host, size_t bytes, iabn_err *e);
size_t iabn_exec_staging_bytes(const iabn_exec *ex);
/* Dropout masks are a function of (seed, run counter, node): setting the seed
 * restarts the counter; resume restores the counter with set_step. */
void iabn_exec_set_seed(iabn_exec *ex, uint64_t seed);
void iabn_exec_set_step(iabn_exec *ex, uint64_t step);
uint64_t iabn_exec_step(const iabn_exec *ex);
/* Bytes the executor allocated for the arena (equals the plan's arena_bytes). */
size_t iabn_exec_arena_bytes(const iabn_exec *ex);
/* Profiling: when on, each run records the seconds of every schedule step
 * (synchronising the device after each node). */
int iabn_exec_profile(iabn_exec *ex, int on);
const double *iabn_exec_step_times(const iabn_exec *ex);
/* Steps whose node's work a neighbouring step does (iabn_op_def.absorb,
 * absorb_prev): they run nothing, and profile at 0 s.  Check mode runs
 * every node on its own. */
int iabn_exec_absorbed(const iabn_exec *ex);
/* Check mode: after every node, verify guard bytes and look for NaN/Inf in
 * float outputs; the error names the node. */
void iabn_exec_set_check(iabn_exec *ex, int on);

#ifdef __cplusplus
}
#endif
#endif
