/* cpu/layout.c: the reorder of an activation between the layouts of
 * tensor.h (cpu/ops.h's iabn_reorder): NCHW <-> nChw16c, NCHW <-> nChw8c,
 * and nChw16c <-> nChw8c.
 *
 * One (sample, channel block) is B channel planes of hw values in NCHW and
 * hw positions of B channels in a blocked layout (B = 16 or 8), at the same
 * offset in both: the reorder is a transpose of a B x hw tile per block, run
 * in parallel over the blocks.  The tile moves in 8 x 8 squares transposed
 * in registers (cpu/transpose8.h), so that every access to memory is 32
 * contiguous bytes: a memory-bound pass at about copy speed.
 * Between two blocked layouts no value changes its position, only its
 * block: a (sample, 16-channel block) of nChw16c holds, per position, the
 * two 8-channel rows that nChw8c keeps in blocks 2g and 2g + 1, so the
 * reorder is a copy of 32-byte rows.
 */
#include "tensor/cpu/transpose8.h"
#include "tensor/tensor.h"

#include <string.h>

enum { SQ = 8, PAR_MIN = 1 << 15 };

/* One (sample, channel block) of B channels (a multiple of SQ, a constant):
 * to_blocked, B planes of hw values (plane stride hw) become hw rows of B;
 * otherwise the reverse.  Squares of 8 positions x 8 channels, then the
 * positions left over one by one. */
static inline __attribute__((always_inline)) void tile(const int B, int hw, int to_blocked,
                                                       const float *src, float *dst)
{
    size_t h = (size_t)hw;
    int p = 0;
    for (; p + SQ <= hw; p += SQ)
        for (int l = 0; l < B; l += SQ) {
            if (to_blocked)
                iabn_tr8(src + l * h + p, h, dst + (size_t)p * B + l, (size_t)B);
            else
                iabn_tr8(src + (size_t)p * B + l, (size_t)B, dst + l * h + p, h);
        }
    for (; p < hw; p++)
        for (int l = 0; l < B; l++) {
            if (to_blocked)
                dst[(size_t)p * B + l] = src[l * h + p];
            else
                dst[l * h + p] = src[(size_t)p * B + l];
        }
}

/* NCHW <-> blocked by B: tiles of a (sample, channel block) each. */
static inline __attribute__((always_inline)) void
nchw_blocked(const int B, int n, int c, int hw, int to_blocked, const float *x, float *y)
{
    long tiles = (long)n * (c / B);
    size_t total = (size_t)n * (size_t)c * (size_t)hw;
    #pragma omp parallel for schedule(static) if (total >= PAR_MIN)
    for (long g = 0; g < tiles; g++) {
        size_t off = (size_t)g * B * (size_t)hw;
        tile(B, hw, to_blocked, x + off, y + off);
    }
}

/* Blocked by big <-> blocked by small (small divides big): per (sample, big
 * block) and position, big/small rows of `small` floats, row r going to
 * small block g*(big/small) + r at the same position; to_small says which
 * way.  Both sides of a big block are the same big*hw floats. */
static void blocked_blocked(int big, int small, int n, int c, int hw, int to_small,
                            const float *x, float *y)
{
    long groups = (long)n * (c / big);
    int rows = big / small;
    size_t span = (size_t)big * (size_t)hw, total = (size_t)n * (size_t)c * (size_t)hw;
    #pragma omp parallel for schedule(static) if (total >= PAR_MIN)
    for (long g = 0; g < groups; g++) {
        const float *xs = x + (size_t)g * span;
        float *ys = y + (size_t)g * span;
        for (int r = 0; r < rows; r++)
            for (int p = 0; p < hw; p++) {
                size_t bo = (size_t)p * big + (size_t)r * small;            /* in the big block */
                size_t so = ((size_t)r * hw + (size_t)p) * (size_t)small;   /* in the small ones */
                if (to_small)
                    memcpy(ys + so, xs + bo, (size_t)small * sizeof *ys);
                else
                    memcpy(ys + bo, xs + so, (size_t)small * sizeof *ys);
            }
    }
}

int iabn_reorder(int n, int c, int hw, iabn_layout from, iabn_layout to, const float *x,
                 float *y, iabn_err *e)
{
    int bf = iabn_layout_block(from), bt = iabn_layout_block(to);
    if (!bf || !bt)
        return iabn_err_set(e, IABN_EINVAL, "reorder: layout %d is not one of the list",
                            bf ? (int)to : (int)from);
    if (n < 0 || c < 0 || hw < 0)
        return iabn_err_set(e, IABN_EINVAL, "reorder: bad shape (%d, %d, %d)", n, c, hw);
    if (c % bf || c % bt)
        return iabn_err_set(e, IABN_EINVAL,
                            "reorder %s -> %s: %d channels are not a multiple of the block of %d",
                            iabn_layout_name(from), iabn_layout_name(to), c, c % bf ? bf : bt);
    /* the pairs below: the list's blocks (1, 8, 16); a new block needs its
     * case (the tiles' squares need multiples of 8, the row copies one block
     * dividing the other) */
    int big = bf > bt ? bf : bt, small = bf > bt ? bt : bf;
    int nchw_pair = bf != bt && small == 1 && (big == 16 || big == 8);
    int blk_pair = bf != bt && small > 1 && big % small == 0;
    if (from != to && !nchw_pair && !blk_pair)
        return iabn_err_set(e, IABN_EINVAL, "reorder %s -> %s: no such reorder",
                            iabn_layout_name(from), iabn_layout_name(to));
    size_t total = (size_t)n * (size_t)c * (size_t)hw;
    if (!total) return 0;
    if (from == to) {
        iabn_copy(total, x, y);
        return 0;
    }
    if (blk_pair)
        blocked_blocked(big, small, n, c, hw, bf == big, x, y);
    else if (big == 16)
        nchw_blocked(16, n, c, hw, bf == 1, x, y);
    else
        nchw_blocked(8, n, c, hw, bf == 1, x, y);
    return 0;
}
