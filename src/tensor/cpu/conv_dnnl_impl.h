/* cpu/conv_dnnl_impl.h: what the two halves of the CPU convolution's oneDNN
 * path share (a build with oneDNN only): the plan of one (geometry, pass,
 * thread count), built by cpu/conv_dnnl_plan.c (descriptors, the operands'
 * reorders and copies, the post-ops), cached and run by cpu/conv_dnnl.c.
 * cpu/conv_dnnl.c's opening comment says what a plan holds and why. */
#ifndef IABN_CPU_CONV_DNNL_IMPL_H
#define IABN_CPU_CONV_DNNL_IMPL_H

#include "tensor/cpu/blocked_map.h"
#include "tensor/cpu/conv_impl.h"

#include <oneapi/dnnl/dnnl.h>
#include <stddef.h>

#define MAX_IO 4

/* One operand of the convolution as the caller holds it (the geometry's
 * layout) and as the primitive wants it. */
typedef struct iabn_dnnl_io {
    int arg;            /* DNNL_ARG_* of the convolution                     */
    int out;            /* written by the convolution                        */
    int accumulate;     /* output added to the caller's (sum post-op)        */
    int via_buf;        /* passes through a scratch copy (reorder)           */
    size_t off;         /* the copy's offset in the aligned scratch          */
    dnnl_memory_desc_t user_md, prim_md;
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t reorder;   /* oneDNN's reorder, or                        */
    iabn_blocked_map map;       /* when map.mem, the map's addition (an
                                 * accumulating output) or copy (a 1x1 conv's
                                 * weights going in): cpu/blocked_map.h        */
    dnnl_memory_t user_m, prim_m;
} iabn_dnnl_io;

typedef struct iabn_dnnl_plan {
    iabn_conv_geom g;          /* the caller's geometry (the cache's key)   */
    iabn_conv_geom pg;         /* the primitive's: g, or g with groups
                                * merged, or (Winograd) g on a slice of its
                                * batch: plan_run calls it g.n / pg.n times,
                                * the activations' copies and oneDNN's
                                * scratchpad sized for one slice            */
    int merge;                 /* groups of g per group of pg (1: none); the
                                * merged OIHW weights (or their gradient)
                                * then open the aligned scratch             */
    int pass, threads;
    int tfwd;                  /* the data pass of a 1x1 conv run as the
                                * forward of pg, g transposed (c_in and
                                * c_out, x and y swapped): dx = W^T dy
                                * (conv_dnnl_plan.c, transposed_fwd)        */
    int wino;                  /* runs oneDNN's Winograd kernels            */
    int sum_post;              /* an accumulating forward (g.accumulate)
                                * whose primitive writes y as the caller
                                * holds it: its sum post-op adds to y;
                                * else y passes through a scratch copy
                                * that is added to it                       */
    int binary;                /* g.accumulate 2 (y = r + conv, r apart):
                                * the binary post-op reads r, where the
                                * primitive writes y as the caller holds it;
                                * else r is copied into y and the plan runs
                                * as accumulate 1                           */
    dnnl_memory_t r_m;         /* r, for the binary post-op                 */
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    iabn_dnnl_io io[MAX_IO];
    int nio;
    size_t pad_off, pad_bytes; /* scratchpad: offset and size              */
    dnnl_memory_t pad_m;
    size_t total;              /* bytes of caller scratch the plan needs    */
    const char *impl;          /* oneDNN's implementation name              */
} iabn_dnnl_plan;

/* oneDNN's status in words, and the error of a failed call `call` for g. */
const char *iabn_dnnl_status_name(dnnl_status_t s);
int iabn_dnnl_fail(iabn_err *e, const char *call, dnnl_status_t s, const iabn_conv_geom *g);

/* Returns the error of a failed oneDNN call (e and g in scope). */
#define DN(call)                                                                         \
    do {                                                                                 \
        dnnl_status_t st_ = (call);                                                      \
        if (st_ != dnnl_success) return iabn_dnnl_fail(e, #call, st_, g);                          \
    } while (0)

static inline size_t iabn_dnnl_align64(size_t b) { return (b + 63) & ~(size_t)63; }

/* The descriptors of p (p->g, p->pass and p->threads set; with `prims`
 * the primitives too); iabn_dnnl_plan_destroy() frees what it built, also
 * after a failure. */
int iabn_dnnl_plan_build(dnnl_engine_t eng, iabn_dnnl_plan *p, int bias, int prims, iabn_err *e);
void iabn_dnnl_plan_destroy(iabn_dnnl_plan *p);

/* oneDNN's format tag of an activation layout of the list (nchw, nChw16c,
 * nChw8c). */
dnnl_format_tag_t iabn_dnnl_act_tag(iabn_layout l);

/* Merged groups (8 per group run as 16): mw <- w, or with `back` w += the
 * diagonal blocks of mw. */
void iabn_dnnl_merge_weights(const iabn_dnnl_plan *p, float *w, float *mw, int back);

/* Whether g runs oneDNN's Winograd kernels when its flag asks. */
int iabn_dnnl_wino_geometry(const iabn_conv_geom *g);

#endif
