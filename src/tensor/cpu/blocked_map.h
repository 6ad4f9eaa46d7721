/* cpu/blocked_map.h (internal): a dense tensor in a blocked layout, as
 * oneDNN describes one, and the same tensor stored row-major: the weight
 * pass's gradient added back into the OIHW store, and a 1x1 conv's OIHW
 * weights copied into the primitive's 16 x 16 blocks (cpu/conv_dnnl.c).
 *
 * A blocked layout puts logical index (d_0 .. d_{n-1}) at
 *   offset0 + sum_k (d_k / B_k) * stride_k + inner(d),
 * where B_k is dimension k's inner block (1 if it has none) and inner(d)
 * the row-major position of (d_k % B_k) among the inner blocks (the last
 * one innermost).  With one inner block per dimension at most, the offset
 * is a sum of one term per dimension: the map keeps a table of those terms
 * per dimension, and the addition (and the copy) walks the row-major
 * tensor through the tables.
 * Layouts that block a dimension twice, or pad one, are not mapped (the
 * caller keeps oneDNN's reorder for them).
 */
#ifndef IABN_CPU_BLOCKED_MAP_H
#define IABN_CPU_BLOCKED_MAP_H

#include "iabn_config.h"

#include <stddef.h>
#include <stdint.h>
#if IABN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

#define IABN_BLOCKED_MAP_DIMS 5

typedef struct iabn_blocked_map {
    int64_t dims[IABN_BLOCKED_MAP_DIMS]; /* leading dims of extent 1 added     */
    int64_t *tab[IABN_BLOCKED_MAP_DIMS]; /* tab[k][x]: offset term of d_k = x  */
    int64_t *mem;                        /* the tables, one allocation         */
    int tile16; /* 16 x 16 blocks of (dim 1, dim 2), dim 1 innermost, no
                 * dims 3 and 4 (a 1x1 conv's OIhw16i16o): moved as tiles */
    int rows16; /* the same blocks with dim 2 innermost (a 1x1 conv's
                 * IOhw16o16i, the data pass's): moved as 16-float rows */
} iabn_blocked_map;

/* Builds the map of a layout of nd <= 5 dims (extents dims, outer strides
 * strides, nblks inner blocks of sizes blks over dimensions idxs, outermost
 * first).  Returns 0, 1 when the layout is not one the map can express (a
 * dimension blocked twice or padded by its block, more than 5 dims), or -1
 * when out of memory; on nonzero the map holds nothing. */
int iabn_blocked_map_init(iabn_blocked_map *m, int nd, const int64_t *dims,
                          const int64_t *strides, int64_t offset0, int nblks,
                          const int64_t *blks, const int64_t *idxs);
void iabn_blocked_map_free(iabn_blocked_map *m);
#if IABN_HAVE_DNNL
/* The same from a oneDNN memory descriptor: 1 also for one that is not an
 * f32 blocked layout. */
int iabn_blocked_map_from_dnnl(iabn_blocked_map *m, const dnnl_memory_desc_t *md);
#endif

/* plain (row-major) += blocked. */
void iabn_blocked_unpack_add(const iabn_blocked_map *m, const float *blocked, float *plain);

/* blocked = plain, every element of the layout written once. */
void iabn_blocked_pack(const iabn_blocked_map *m, const float *plain, float *blocked);

#endif
