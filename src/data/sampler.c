/* sampler.c: the distributed sampler (issue 14, item 5): which data set
 * indices each rank reads in an epoch, as pure functions of (count, seed,
 * epoch, rank, world, batch), so the loader, the trainer's resume logic and
 * the tests agree on them.
 *
 * One permutation per epoch from (seed, epoch) (identity without shuffling);
 * rank r reads positions r, r + world, r + 2 world, ... of it.  So the
 * samples of step t on all ranks together are positions
 * [t*B*world, (t+1)*B*world) of the permutation: exactly the batch one process
 * with batch B*world reads at step t.  With drop_last each rank keeps
 * floor(count / world) samples and full batches only (every rank runs the
 * same number of steps, a requirement of the collectives inside them);
 * without it the shards cover every sample once, the last batch of a rank
 * may be short and ranks may differ by one batch (evaluation, which runs no
 * collective per batch). */
#include "data/data_internal.h"

void iabn_sampler_perm(int64_t count, uint64_t seed, int64_t epoch, int shuffle, int64_t *perm)
{
    for (int64_t i = 0; i < count; i++) perm[i] = i;
    if (!shuffle) return;
    iabn_draw d = {seed, iabn_sample_key(epoch, -1) ^ 0x5eed5eed5eedull, 0};
    for (int64_t i = count - 1; i > 0; i--) {
        int64_t k = (int64_t)(iabn_draw_u01(&d) * (double)(i + 1));
        if (k > i) k = i;
        int64_t t = perm[i];
        perm[i] = perm[k];
        perm[k] = t;
    }
}

int64_t iabn_sampler_shard_size(int64_t count, int rank, int world, int drop_last)
{
    if (world < 1 || rank < 0 || rank >= world || count <= 0) return 0;
    return drop_last ? count / world : (count - rank + world - 1) / world;
}

int64_t iabn_sampler_shard(const int64_t *perm, int64_t count, int rank, int world,
                           int drop_last, int64_t *order)
{
    int64_t per = iabn_sampler_shard_size(count, rank, world, drop_last);
    for (int64_t k = 0; k < per; k++) order[k] = perm[rank + k * world];
    return per;
}

int64_t iabn_sampler_batches(int64_t count, int rank, int world, int batch, int drop_last)
{
    int64_t per = iabn_sampler_shard_size(count, rank, world, drop_last);
    if (batch < 1) return 0;
    return drop_last ? per / batch : (per + batch - 1) / batch;
}
