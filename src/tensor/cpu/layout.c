/* cpu/layout.c: the reorder of an activation between the layouts of
 * tensor.h (cpu/ops.h's iabn_reorder): NCHW <-> nChw16c.
 *
 * One (sample, channel block) is 16 channel planes of hw values in NCHW and
 * hw positions of 16 channels in nChw16c, at the same offset in both: the
 * reorder is a transpose of a 16 x hw tile per block, run in parallel over
 * the blocks.  The tile moves in 8 x 8 squares transposed in registers
 * (cpu/transpose8.h), so that every access to memory is 32 contiguous
 * bytes: a memory-bound pass at about copy speed.
 */
#include "tensor/cpu/transpose8.h"
#include "tensor/tensor.h"

enum { BLK = 16, PAR_MIN = 1 << 15 };

/* One (sample, channel block): to_blocked, 16 planes of hw values (plane
 * stride hw) become hw rows of 16; otherwise the reverse.  Squares of 8
 * positions x 8 channels, then the positions left over one by one. */
static void tile(int hw, int to_blocked, const float *src, float *dst)
{
    size_t h = (size_t)hw;
    int p = 0;
    for (; p + 8 <= hw; p += 8)
        for (int l = 0; l < BLK; l += 8) {
            if (to_blocked)
                iabn_tr8(src + l * h + p, h, dst + (size_t)p * BLK + l, BLK);
            else
                iabn_tr8(src + (size_t)p * BLK + l, BLK, dst + l * h + p, h);
        }
    for (; p < hw; p++)
        for (int l = 0; l < BLK; l++) {
            if (to_blocked)
                dst[(size_t)p * BLK + l] = src[l * h + p];
            else
                dst[l * h + p] = src[(size_t)p * BLK + l];
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
    size_t total = (size_t)n * (size_t)c * (size_t)hw;
    if (!total) return 0;
    if (from == to) {
        iabn_copy(total, x, y);
        return 0;
    }
    /* one side NCHW, the other blocked by the tiles' 16 (the list has no
     * other pair) */
    int blocked_in = bf > 1;
    if ((bf > 1) == (bt > 1) || (blocked_in ? bf : bt) != BLK)
        return iabn_err_set(e, IABN_EINVAL, "reorder %s -> %s: no such reorder",
                            iabn_layout_name(from), iabn_layout_name(to));
    long tiles = (long)n * (c / BLK);
    #pragma omp parallel for schedule(static) if (total >= PAR_MIN)
    for (long g = 0; g < tiles; g++) {
        size_t off = (size_t)g * BLK * (size_t)hw;
        tile(hw, !blocked_in, x + off, y + off);
    }
    return 0;
}
