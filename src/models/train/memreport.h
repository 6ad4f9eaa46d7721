/* memreport.h: the memory report of a training step (what `iabn mem`
 * prints), one column per BN mode x storage strategy.  Each column plans a
 * full step (forward, loss, backward) through the session on a shapes-only
 * store, nothing allocated, and records the step's memory figures, the
 * activation bytes kept per module (or per block), live memory over the
 * schedule, and with a budget the largest batch and square crop that fit.
 * The texts are returned as strings (the caller prints them) and the live
 * memory is drawn as an SVG.
 *
 *     iabn_memreport_opts o;
 *     iabn_memreport_opts_defaults(&o);
 *     o.model = "resnet50"; o.batch = 8;
 *     iabn_memreport_col cols[2] = {{.mode = IABN_BN_STANDARD}, {.mode = IABN_BN_INPLACE_II}};
 *     iabn_memreport r;
 *     if (iabn_memreport_build(&o, cols, 2, &r, &e)) ...e.msg...
 *     char *t = iabn_memreport_table(&r); puts(t); free(t);
 *     iabn_memreport_free(&r); */
#ifndef IABN_MODELS_TRAIN_MEMREPORT_H
#define IABN_MODELS_TRAIN_MEMREPORT_H

#include <stdio.h>

#include "models/train/session.h"

#ifdef __cplusplus
extern "C" {
#endif

#define IABN_MEMREPORT_MAX_COLS 24

/* One row of the per-module (per-block) table. */
typedef struct iabn_memreport_row {
    char name[IABN_NAME_LEN];
    size_t kept;                 /* activation bytes kept for the backward       */
    int buffers, copies;
    int offloaded, recomputed;   /* saved tensors by storage policy              */
} iabn_memreport_row;

/* One column: set mode and storage, iabn_memreport_build fills the rest. */
typedef struct iabn_memreport_col {
    iabn_bn_mode mode;
    iabn_storage storage;
    iabn_session_mem m;          /* scratch: cuDNN's workspace on cuda           */
    int n_off, n_rc, fits;       /* offloaded / recomputed tensors; fits (auto)  */
    double est;                  /* estimated step seconds (cost model)          */
    double est_base;             /* auto: the keep-everything estimate           */
    double strategy_s;           /* auto: seconds the choice took                */
    int paper;                   /* auto: fell back to the paper's offload policy */
    iabn_memreport_row *rows;
    int nrows;
    size_t *live, *host_live;    /* per schedule step: arena / host bytes live   */
    int nsteps, boundary;        /* schedule length, first backward step          */
    double *mark_step;           /* forward steps where a module (block) starts  */
    char (*mark_name)[IABN_NAME_LEN];
    int nmarks;
    long max_batch, max_crop;    /* with a budget                                */
} iabn_memreport_col;

typedef struct iabn_memreport_opts {
    const char *model;           /* a registry model                             */
    int batch;                   /* per rank                                     */
    int height, width;           /* 0: the model's default (224, 512 for segmentation) */
    int classes;                 /* 0: the model's                               */
    int blocks;                  /* rows per block instead of per module         */
    const iabn_backend *backend; /* planning backend (NULL: the CPU)             */
    iabn_strategy_opts strategy; /* cost model, lookahead, budget for auto       */
    size_t budget;               /* > 0: the largest batch (and crop) searched   */
    int search_crop;             /* with budget: also the largest square crop    */
    int world;                   /* > 1: one rank's step (batch is the global one, */
                                 /* split, the largest share), gradient buckets  */
    FILE *schedule;              /* non-NULL: each column's schedule dumped here */
    iabn_layout_mode layout_mode; /* activation layouts (auto)                  */
    iabn_winograd_mode winograd; /* Winograd dense 3x3 convs (graph.h): auto    */
} iabn_memreport_opts;

typedef struct iabn_memreport {
    iabn_memreport_opts o;       /* as built: height / width resolved, batch per rank */
    int global_batch;
    iabn_memreport_col col[IABN_MEMREPORT_MAX_COLS];
    int ncols;
} iabn_memreport;

/* batch 32, one rank, the CPU, lookahead 1, offload and recompute allowed. */
void iabn_memreport_opts_defaults(iabn_memreport_opts *o);
/* The columns of nmodes BN modes, each under the storages with want[s] set
 * (IABN_STORAGE_NMODES flags), mode-major; returns how many (at most max). */
int iabn_memreport_columns(const iabn_bn_mode *modes, int nmodes, const int *want,
                           iabn_memreport_col *cols, int max);
/* Plans each column (cols[i].mode, .storage) and fills r; on failure r is
 * freed.  In-place modes with a non-invertible default activation plan with
 * leaky_relu, as training would. */
int iabn_memreport_build(const iabn_memreport_opts *o, const iabn_memreport_col *cols, int n,
                         iabn_memreport *r, iabn_err *e);
void iabn_memreport_free(iabn_memreport *r);
/* "standard", "inplace_ab+offload": a column's heading. */
const char *iabn_memreport_col_name(const iabn_memreport_col *c, char *buf, size_t n);
/* The side-by-side table with the per-module rows; the largest batch per
 * column; the whole report as JSON.  Caller frees; NULL when out of memory. */
char *iabn_memreport_table(const iabn_memreport *r);
char *iabn_memreport_largest(const iabn_memreport *r);
char *iabn_memreport_json(const iabn_memreport *r);
/* Live memory over the schedule, a curve per column (dashed: host pool),
 * module starts and the backward marked. */
int iabn_memreport_svg(const iabn_memreport *r, const char *path, iabn_err *e);

/* What `iabn models` lists of a model: its parameter count and, with batch
 * > 0, the planned arena of a training step at its default input in
 * standard BN and in inplace_abn_ii (nothing allocated). */
int iabn_model_memory(const char *model, int batch, size_t *params, size_t *standard_bytes,
                      size_t *inplace_bytes, iabn_err *e);

#ifdef __cplusplus
}
#endif
#endif
