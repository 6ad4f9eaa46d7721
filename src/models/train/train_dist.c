/* train_dist.c: the trainer's data-parallel part (issue 14): what a rank of
 * an `mpirun -np N iabn train|segtrain` job does differently from a single
 * process.
 *
 *  - the global batch (optimizer.batch_size, -b) is split evenly over the
 *    ranks (the reference's split); every rank checks at start that the
 *    others run the same effective configuration (a hash of it);
 *  - the training graph carries the communicator (synchronised BN, the
 *    loss's job-wide mean) and the gradient all-reduce buckets; the loaders
 *    read disjoint shards (data/sampler.c), so step t of the job reads the
 *    samples one process with the whole batch reads at step t;
 *  - stop requests (signal, time limit) are agreed on, so all ranks stop
 *    after the same step;
 *  - validation is sharded and its counts summed over the ranks, so top-1 /
 *    mIoU are those of one process;
 *  - rank 0 alone prints and writes (logs, metrics, events, checkpoints);
 *  - a checkpoint records the world size; resuming on another one is exact
 *    when the global batch is the same and the BN statistics are synchronised
 *    (or per sample), and says why not otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/train/train_internal.h"

int dist_setup(trainer *tr, iabn_err *e)
{
    const iabn_train_opts *o = tr->o;
    tr->comm = o->comm;
    tr->rank = iabn_comm_rank(tr->comm);
    tr->world = iabn_comm_size(tr->comm);
    tr->batch = tr->cfg.batch_size;
    if (tr->world == 1) return 0;
    if (tr->cfg.batch_size % tr->world)
        return iabn_err_set(e, IABN_EINVAL,
                            "the global batch of %d (optimizer.batch_size, -b) does not split "
                            "evenly over %d ranks",
                            tr->cfg.batch_size, tr->world);
    tr->batch = tr->cfg.batch_size / tr->world;
    /* the effective configuration, everything that decides a step */
    size_t len = strlen(tr->config_json) + 512;
    char *id = malloc(len);
    if (!id) return iabn_err_set(e, IABN_ENOMEM, "out of memory");
    snprintf(id, len, "%s|seed %lld|resume %s|init %s|max_steps %lld|train %zu|val %zu",
             tr->config_json, o->seed, o->resume ? o->resume : "-", o->init ? o->init : "-",
             o->max_steps, tr->dtrain->count, tr->dval->count);
    int rc = iabn_comm_check_same(tr->comm, id, strlen(id),
                                  "the configuration (config file, flags, data set sizes)", e);
    free(id);
    if (!rc)
        trainer_say(tr, "data parallel: %d ranks (%s), global batch %d split %d per rank; rank 0 "
                        "writes",
                    tr->world, iabn_comm_transport(tr->comm), tr->cfg.batch_size, tr->batch);
    return rc;
}

int dist_device(trainer *tr, iabn_err *e)
{
    if (tr->world == 1 || tr->dev.be->kind != IABN_DEV_CUDA || !iabn_comm_have_nccl()) return 0;
    return iabn_comm_nccl_attach(tr->comm, tr->dev.be->ctx, e);
}

int dist_check_micro(trainer *tr, iabn_err *e)
{
    if (tr->world == 1) return 0;
    int v[2] = {tr->micro, tr->nmicro};
    return iabn_comm_check_same(tr->comm, v, sizeof v,
                                "the micro-batch split (each rank chose it for its memory: give "
                                "every rank the same --budget)",
                                e);
}

int dist_agree_stop(trainer *tr, int *flags, int n, iabn_err *e)
{
    if (tr->world == 1) return 0;
    double d[4] = {0, 0, 0, 0};
    for (int i = 0; i < n && i < 4; i++) d[i] = flags[i] ? 1 : 0;
    int rc = iabn_comm_allreduce(tr->comm, NULL, d, (size_t)n, IABN_COMM_F64, "agreeing on a stop",
                                 e);
    for (int i = 0; !rc && i < n && i < 4; i++) flags[i] = d[i] > 0;
    return rc;
}

int dist_sum(trainer *tr, double *v, size_t n, iabn_err *e)
{
    if (tr->world == 1 || n == 0) return 0;
    return iabn_comm_allreduce(tr->comm, NULL, v, n, IABN_COMM_F64, "summing the validation counts",
                               e);
}

void dist_resume_note(trainer *tr)
{
    long long was = tr->pos.world_size > 0 ? tr->pos.world_size : 1;
    long long gb = tr->pos.global_batch > 0 ? tr->pos.global_batch : tr->cfg.batch_size;
    if (was == tr->world && gb == tr->cfg.batch_size) return;
    if (gb != tr->cfg.batch_size)
        trainer_say(tr, "resuming: NOT exact: the checkpoint was trained with a global batch of %lld, "
               "this run uses %d: the data order from here on differs",
               gb, tr->cfg.batch_size);
    else if (!iabn_bn_mode_is_sync(tr->cfg.bn_mode))
        trainer_say(tr, "resuming a %lld-rank checkpoint on %d ranks: NOT exact: BN mode %s takes its "
               "statistics per rank, over %lld samples before and %d now (the data order is the "
               "same; a synchronised mode continues exactly)",
               was, tr->world, iabn_bn_mode_name(tr->cfg.bn_mode), gb / was, tr->batch);
    else
        trainer_say(tr, "resuming a %lld-rank checkpoint on %d ranks: exact (same global batch, same data "
               "order, statistics synchronised over the job)",
               was, tr->world);
}
