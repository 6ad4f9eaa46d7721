/* cpu/blocked_map.c: the per-dimension offset tables of a blocked layout
 * (cpu/blocked_map.h), the addition that walks them, and the copy.
 *
 * Why not oneDNN's own reorder: for the weight gradient it has to add into
 * the OIHW store (a reorder with a sum post-op), and oneDNN 2.6 runs that
 * from ABcd16b16a at 2.5 to 10 GB/s (ResNeXt-101's 512x1024 and 2048x1024
 * 1x1 weights: 0.88 and 3.1 ms a call), half of a ResNeXt-101 step's
 * reorder time (docs/LAYOUTS.md).  The walk here reads the row-major tensor in order and
 * the blocked one through the tables; for a 16 x 16 block layout the rows
 * of one output block (16 rows of the OIHW tensor) touch 16 x I values of
 * the blocked one, which stay in cache, so both sides move through memory
 * once.  Rows are split over the OpenMP threads.  The 1x1 convs' weights
 * (16 x 16 blocks, the output channel innermost) move as 16 x 16 tiles
 * transposed in registers (cpu/transpose8.h): the table walk reads the
 * blocked side 4 bytes at a time, 3x slower there.
 * The copy the other way serves the 1x1 convs' weights going in: oneDNN's
 * reorder into the data pass's IOhw16o16i (16-float rows of the OIHW
 * tensor, each to its block) ran at 0.6x the speed of this copy from
 * memory, and the forward's OIhw16i16o tiles go as fast here as there, so
 * both are moved here (docs/LAYOUTS.md has the figures).
 */
#include "tensor/cpu/blocked_map.h"

#include "tensor/cpu/transpose8.h"

#include <stdlib.h>
#include <string.h>

enum { D = IABN_BLOCKED_MAP_DIMS, PAR_MIN = 1 << 15 };

int iabn_blocked_map_init(iabn_blocked_map *m, int nd, const int64_t *dims,
                          const int64_t *strides, int64_t offset0, int nblks,
                          const int64_t *blks, const int64_t *idxs)
{
    memset(m, 0, sizeof *m);
    if (nd < 1 || nd > D || nblks < 0 || nblks > nd) return 1;
    int64_t blk[D] = {0}, istride[D] = {0}, inner = 1;
    for (int j = nblks - 1; j >= 0; j--) { /* the last inner block innermost */
        int64_t k = idxs[j];
        if (k < 0 || k >= nd || blk[k] || blks[j] < 1 || dims[k] % blks[j]) return 1;
        blk[k] = blks[j];
        istride[k] = inner;
        inner *= blks[j];
    }
    int64_t total = 0, n = 1, span = 0;
    for (int k = 0; k < nd; k++) {
        if (dims[k] < 1) return 1;
        total += dims[k];
        n *= dims[k];
    }
    m->mem = malloc((size_t)(total + D) * sizeof *m->mem);
    if (!m->mem) return -1;
    int64_t *t = m->mem;
    for (int k = 0; k < D; k++) { /* leading dims of extent 1: one zero term */
        int src = k - (D - nd);
        m->dims[k] = src < 0 ? 1 : dims[src];
        m->tab[k] = t;
        if (src < 0) {
            *t++ = k == 0 ? offset0 : 0;
            continue;
        }
        int64_t b = blk[src] ? blk[src] : 1;
        for (int64_t x = 0; x < dims[src]; x++)
            t[x] = (x / b) * strides[src] + (x % b) * istride[src] + (k == 0 ? offset0 : 0);
        span += t[dims[src] - 1] - (k == 0 ? offset0 : 0);
        t += dims[src];
    }
    /* dense: the last element's offset is n - 1 past the first, so every
     * offset in [offset0, offset0 + n) is one element's (a padded or
     * strided layout is left to oneDNN) */
    if (span != n - 1) {
        iabn_blocked_map_free(m);
        return 1;
    }
    m->tile16 = m->dims[1] % 16 == 0 && m->dims[2] % 16 == 0 && m->dims[3] * m->dims[4] == 1;
    for (int64_t x = 0; m->tile16 && x < m->dims[1]; x++)
        m->tile16 = m->tab[1][x] - m->tab[1][x - x % 16] == x % 16;
    for (int64_t x = 0; m->tile16 && x < m->dims[2]; x++)
        m->tile16 = m->tab[2][x] - m->tab[2][x - x % 16] == 16 * (x % 16);
    m->rows16 = !m->tile16 && m->dims[1] % 16 == 0 && m->dims[2] % 16 == 0 &&
                m->dims[3] * m->dims[4] == 1;
    for (int64_t x = 0; m->rows16 && x < m->dims[1]; x++)
        m->rows16 = m->tab[1][x] - m->tab[1][x - x % 16] == 16 * (x % 16);
    for (int64_t x = 0; m->rows16 && x < m->dims[2]; x++)
        m->rows16 = m->tab[2][x] - m->tab[2][x - x % 16] == x % 16;
    return 0;
}

void iabn_blocked_map_free(iabn_blocked_map *m)
{
    free(m->mem);
    memset(m, 0, sizeof *m);
}

#if IABN_HAVE_DNNL
int iabn_blocked_map_from_dnnl(iabn_blocked_map *m, const dnnl_memory_desc_t *md)
{
    memset(m, 0, sizeof *m);
    if (md->format_kind != dnnl_blocked || md->data_type != dnnl_f32 || md->extra.flags)
        return 1;
    int64_t dims[DNNL_MAX_NDIMS], strides[DNNL_MAX_NDIMS], blks[DNNL_MAX_NDIMS],
        idxs[DNNL_MAX_NDIMS];
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    for (int k = 0; k < md->ndims; k++) {
        if (md->padded_dims[k] != md->dims[k] || md->padded_offsets[k]) return 1;
        dims[k] = md->dims[k];
        strides[k] = b->strides[k];
    }
    for (int j = 0; j < b->inner_nblks; j++) {
        blks[j] = b->inner_blks[j];
        idxs[j] = b->inner_idxs[j];
    }
    return iabn_blocked_map_init(m, md->ndims, dims, strides, md->offset0, b->inner_nblks, blks,
                                 idxs);
}
#endif

/* plain += blocked over 16 rows of dims (0, 1) and all of dim 2, in tiles
 * (m->tile16): tile (row block, column block) of the blocked tensor holds
 * element (row r, column c) at [c % 16][r % 16]. */
static void unpack_add_tiles(const iabn_blocked_map *m, int64_t r0, const float *blocked,
                             float *plain)
{
    const int64_t n1 = m->dims[1], n2 = m->dims[2];
    const float *b = blocked + m->tab[0][r0 / n1] + m->tab[1][r0 % n1];
    float *p = plain + r0 * n2;
    float t[16 * 16];
    for (int64_t c0 = 0; c0 < n2; c0 += 16) {
        const float *s = b + m->tab[2][c0];
        for (int i = 0; i < 16; i += 8)
            for (int j = 0; j < 16; j += 8) iabn_tr8(s + i * 16 + j, 16, t + j * 16 + i, 16);
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++) p[r * n2 + c0 + c] += t[r * 16 + c];
    }
}

/* blocked = plain over 16 rows of dims (0, 1) and all of dim 2: tiles
 * transposed (m->tile16) or rows copied (m->rows16), one 16 x 16 block of
 * the blocked tensor at a time. */
static void pack_blocks(const iabn_blocked_map *m, int64_t r0, const float *plain, float *blocked)
{
    const int64_t n1 = m->dims[1], n2 = m->dims[2];
    float *b = blocked + m->tab[0][r0 / n1] + m->tab[1][r0 % n1];
    const float *p = plain + r0 * n2;
    for (int64_t c0 = 0; c0 < n2; c0 += 16) {
        float *d = b + m->tab[2][c0];
        if (m->tile16) {
            for (int i = 0; i < 16; i += 8)
                for (int j = 0; j < 16; j += 8)
                    iabn_tr8(p + i * n2 + c0 + j, (size_t)n2, d + j * 16 + i, 16);
        } else {
            for (int r = 0; r < 16; r++) memcpy(d + 16 * r, p + r * n2 + c0, 16 * sizeof *d);
        }
    }
}

/* Both ways: plain += blocked (unpack: from blocked, to plain) or blocked =
 * plain (from plain, to blocked); 16 x 16 blocks where the layout has them
 * (tiles for both ways, rows for the copy), else the table walk, a row
 * being the last three dimensions under a fixed (d0, d1). */
static void walk(const iabn_blocked_map *m, int unpack, const float *from, float *to)
{
    const int64_t *t0 = m->tab[0], *t1 = m->tab[1], *t2 = m->tab[2], *t3 = m->tab[3],
                  *t4 = m->tab[4];
    const int64_t n1 = m->dims[1], n2 = m->dims[2], n3 = m->dims[3], n4 = m->dims[4];
    const int64_t rows = m->dims[0] * n1, inner = n2 * n3 * n4;
    const int par = rows > 1 && rows * inner >= PAR_MIN;
    if (m->tile16 || (m->rows16 && !unpack)) {
        const int64_t blocks = rows / 16;
#pragma omp parallel for schedule(static) if (par)
        for (int64_t k = 0; k < blocks; k++) {
            if (unpack) unpack_add_tiles(m, 16 * k, from, to);
            else pack_blocks(m, 16 * k, from, to);
        }
        return;
    }
#pragma omp parallel for schedule(static) if (par)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t base = t0[r / n1] + t1[r % n1];
        int64_t k = r * inner;
        for (int64_t i = 0; i < n2; i++)
            for (int64_t h = 0; h < n3; h++)
                for (int64_t w = 0; w < n4; w++, k++) {
                    int64_t q = base + t2[i] + t3[h] + t4[w];
                    if (unpack) to[k] += from[q];
                    else to[q] = from[k];
                }
    }
}

void iabn_blocked_unpack_add(const iabn_blocked_map *m, const float *blocked, float *plain)
{
    walk(m, 1, blocked, plain);
}

void iabn_blocked_pack(const iabn_blocked_map *m, const float *plain, float *blocked)
{
    walk(m, 0, plain, blocked);
}
