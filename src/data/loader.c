/* loader.c: the threaded batch loader.
 *
 * Worker threads take samples one at a time, in epoch order, and decode and
 * augment them straight into a ring of batch slots; the consumer gets the
 * batches in order.  What lands in a slot depends only on (seed, epoch, shard
 * position): the epoch's permutation comes from (seed, epoch), each sample's
 * draws from (seed, epoch, data set index), so the batches are the same for
 * any number of workers.  An undecodable file is replaced by the next sample
 * of the shard that decodes (deterministic, keeps batches full), with one
 * warning per file; whether a file decodes does not depend on timing.
 */
#include "data/data_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY, SLOT_OUT };

typedef struct slot {
    iabn_batch b;
    int64_t gen;
    int state, done, failed;
    iabn_err err;
} slot;

typedef struct worker {
    struct iabn_loader *ld;
    iabn_sample_ctx *ctx;
    uint8_t *img, *lbl; /* file buffers */
    size_t img_cap, lbl_cap;
    pthread_t thread;
    int started;
} worker;

struct iabn_loader {
    iabn_loader_cfg cfg;
    const iabn_dataset *ds;
    int ips, height, width;
    size_t img_floats, lbl_ints; /* per sample */
    int nslots;
    slot *slots;
    int nworkers;
    worker *workers;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, ready_cv, idle_cv;
    int shutdown;
    /* the current epoch; changed only while no worker is busy */
    int active;
    int64_t epoch, gen;
    int64_t *order; /* this rank's shard, data set indices */
    int64_t *perm;
    int64_t shard_n, total, nbatches;
    int64_t next_claim, next_out;
    int busy;
    uint8_t *bad; /* per data set index: already reported */
    iabn_loader_stats stats;
};

static void default_warn(void *user, const char *msg)
{
    (void)user;
    fprintf(stderr, "iabn: warning: %s\n", msg);
}

static void *default_alloc(size_t bytes, void *user)
{
    (void)user;
    return iabn_aligned_alloc(64, bytes);
}

static void default_free(void *p, void *user)
{
    (void)user;
    iabn_aligned_free(p);
}

void iabn_loader_cfg_defaults(iabn_loader_cfg *cfg, iabn_transform_kind kind)
{
    memset(cfg, 0, sizeof *cfg);
    iabn_transform_defaults(&cfg->transform, kind);
    cfg->batch_size = 32;
    cfg->workers = 4;
    cfg->seed = 0;
    cfg->shuffle = kind == IABN_TF_CLASSIFY_TRAIN || kind == IABN_TF_SEGMENT_TRAIN;
    cfg->drop_last = cfg->shuffle;
    cfg->rank = 0;
    cfg->world_size = 1;
}

static int segmentation(const iabn_loader *ld)
{
    return ld->cfg.transform.kind == IABN_TF_SEGMENT_TRAIN ||
           ld->cfg.transform.kind == IABN_TF_SEGMENT_EVAL;
}

static int skippable(int code) { return code == IABN_EFORMAT || code == IABN_EIO; }

/* One sample into slot position k; on failure e's message starts with the
 * file at fault. */
static int try_sample(worker *w, slot *s, int k, int64_t idx, uint64_t key, iabn_err *e)
{
    iabn_loader *ld = w->ld;
    const iabn_dataset *ds = ld->ds;
    float *img = s->b.images + (size_t)k * ld->img_floats;
    const char *path = ds->paths[idx];
    size_t ilen = 0, llen = 0;
    int rc = iabn_file_read(path, &w->img, &ilen, &w->img_cap, e);
    if (rc) return rc; /* the message names the file */
    if (!segmentation(ld)) {
        rc = iabn_sample_classify(w->ctx, &ld->cfg.transform, w->img, ilen, ld->cfg.seed, key,
                                  img, e);
        if (rc) return iabn_err_prefix(e, "%s: ", path);
        s->b.labels[k] = ds->labels[idx];
        s->b.valid_hw[2 * k] = ld->height;
        s->b.valid_hw[2 * k + 1] = ld->width;
        return 0;
    }
    const char *lpath = ds->label_paths[idx];
    rc = iabn_file_read(lpath, &w->lbl, &llen, &w->lbl_cap, e);
    if (rc) return rc;
    int32_t *lab = s->b.labels + (size_t)k * ld->lbl_ints;
    rc = iabn_sample_segment(w->ctx, &ld->cfg.transform, w->img, ilen, w->lbl, llen,
                             &ds->label_map, ld->cfg.seed, key, img, lab, s->b.valid_hw + 2 * k,
                             e);
    if (!rc) return 0;
    if (rc == IABN_EINVAL) return iabn_err_prefix(e, "%s with label %s: ", path, lpath);
    if (!strncmp(e->msg, "label: ", 7)) return iabn_err_prefix(e, "%s: ", lpath);
    return iabn_err_prefix(e, "%s: ", path);
}

/* Replacement: the next shard position that decodes. */
static int load_sample(worker *w, slot *s, int k, int64_t pos, iabn_err *e)
{
    iabn_loader *ld = w->ld;
    for (int64_t attempt = 0; attempt < ld->shard_n; attempt++) {
        int64_t idx = ld->order[(pos + attempt) % ld->shard_n];
        /* a replacement gets draws of its own, not a copy of its own slot's */
        uint64_t key = iabn_sample_key(ld->epoch, idx) + (uint64_t)attempt * 0x632BE59BD9B4E019ull;
        int rc = try_sample(w, s, k, idx, key, e);
        if (!rc) {
            s->b.indices[k] = idx;
            if (attempt > 0) {
                pthread_mutex_lock(&ld->mu);
                ld->stats.replaced_samples++;
                pthread_mutex_unlock(&ld->mu);
            }
            return 0;
        }
        if (!skippable(rc) || ld->cfg.strict) return rc;
        pthread_mutex_lock(&ld->mu);
        if (!ld->bad[idx]) {
            ld->bad[idx] = 1;
            ld->stats.skipped_files++;
            char msg[1100];
            snprintf(msg, sizeof msg, "skipping %s", e->msg);
            ld->cfg.warn(ld->cfg.warn_user, msg);
        }
        pthread_mutex_unlock(&ld->mu);
        if (ld->cfg.leave_out) {
            /* an empty slot: zeros, every label ignored, index -1 */
            memset(s->b.images + (size_t)k * ld->img_floats, 0, ld->img_floats * sizeof(float));
            size_t nl = segmentation(ld) ? ld->lbl_ints : 1;
            for (size_t i = 0; i < nl; i++) s->b.labels[(size_t)k * nl + i] = IABN_IGNORE_LABEL;
            s->b.valid_hw[2 * k] = ld->height;
            s->b.valid_hw[2 * k + 1] = ld->width;
            s->b.indices[k] = -1;
            return 0;
        }
    }
    return iabn_err_set(e, IABN_EFORMAT, "no file of rank %d's shard (%lld samples) could be "
                        "decoded", ld->cfg.rank, (long long)ld->shard_n);
}

static int batch_samples(const iabn_loader *ld, int64_t b)
{
    int64_t left = ld->total - b * ld->cfg.batch_size;
    return (int)(left < ld->cfg.batch_size ? left : ld->cfg.batch_size);
}

static int claimable(iabn_loader *ld)
{
    if (!ld->active || ld->next_claim >= ld->total) return 0;
    int64_t b = ld->next_claim / ld->cfg.batch_size;
    slot *s = &ld->slots[b % ld->nslots];
    return s->state == SLOT_FREE ||
           (s->state == SLOT_FILLING && s->b.index == b && s->gen == ld->gen);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    iabn_loader *ld = w->ld;
    pthread_mutex_lock(&ld->mu);
    for (;;) {
        while (!ld->shutdown && !claimable(ld)) pthread_cond_wait(&ld->work_cv, &ld->mu);
        if (ld->shutdown) break;
        int64_t pos = ld->next_claim++;
        int64_t b = pos / ld->cfg.batch_size;
        int k = (int)(pos % ld->cfg.batch_size);
        slot *s = &ld->slots[b % ld->nslots];
        if (s->state == SLOT_FREE) {
            s->state = SLOT_FILLING;
            s->gen = ld->gen;
            s->b.index = b;
            s->b.epoch = ld->epoch;
            s->b.n = batch_samples(ld, b);
            s->done = 0;
            s->failed = 0;
        }
        ld->busy++;
        pthread_mutex_unlock(&ld->mu);
        iabn_err e = {0};
        int rc = load_sample(w, s, k, pos, &e);
        pthread_mutex_lock(&ld->mu);
        if (rc && !s->failed) {
            s->failed = 1;
            s->err = e;
        }
        if (++s->done == s->b.n) {
            s->state = SLOT_READY;
            pthread_cond_broadcast(&ld->ready_cv);
        }
        if (--ld->busy == 0) pthread_cond_broadcast(&ld->idle_cv);
    }
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

void iabn_device_loader_cfg(const iabn_device *d, iabn_loader_cfg *lc)
{
    void *(*alloc)(size_t, void *);
    void (*release)(void *, void *);
    void *user;
    iabn_device_host_allocator(d, &alloc, &release, &user);
    if (alloc) {
        lc->alloc = alloc;
        lc->free = release;
        lc->alloc_user = user;
    }
}

int iabn_loader_open(const iabn_loader_cfg *cfg, const iabn_dataset *ds, iabn_loader **out,
                     iabn_err *e)
{
    *out = NULL;
    int rc = iabn_transform_check(&cfg->transform, e);
    if (rc) return rc;
    if (!ds || ds->count == 0) return iabn_err_set(e, IABN_EINVAL, "loader: empty data set");
    if (cfg->batch_size < 1 || cfg->workers < 1 || cfg->workers > 1024 || cfg->prefetch < 0 ||
        cfg->world_size < 1 || cfg->rank < 0 || cfg->rank >= cfg->world_size)
        return iabn_err_set(e, IABN_EINVAL, "loader: bad batch size %d, workers %d, prefetch "
                            "%d or rank %d of %d", cfg->batch_size, cfg->workers, cfg->prefetch,
                            cfg->rank, cfg->world_size);
    int seg_tf = cfg->transform.kind >= IABN_TF_SEGMENT_TRAIN;
    int seg_ds = ds->label_paths != NULL;
    if (seg_tf != seg_ds || (!seg_ds && !ds->labels))
        return iabn_err_set(e, IABN_EINVAL, "loader: a %s transform on a %s data set (%s)",
                            seg_tf ? "segmentation" : "classification",
                            seg_ds ? "segmentation" : "classification", ds->root);
    if ((cfg->alloc == NULL) != (cfg->free == NULL))
        return iabn_err_set(e, IABN_EINVAL, "loader: set both alloc and free, or neither");
    iabn_loader *ld = calloc(1, sizeof *ld);
    if (!ld) return iabn_err_set(e, IABN_ENOMEM, "out of memory (loader)");
    ld->cfg = *cfg;
    if (!ld->cfg.warn) ld->cfg.warn = default_warn;
    if (!ld->cfg.alloc) {
        ld->cfg.alloc = default_alloc;
        ld->cfg.free = default_free;
    }
    ld->ds = ds;
    ld->ips = iabn_transform_images_per_sample(&cfg->transform);
    ld->height = cfg->transform.out_h;
    ld->width = cfg->transform.out_w;
    ld->img_floats = (size_t)ld->ips * 3 * ld->height * ld->width;
    ld->lbl_ints = seg_tf ? (size_t)ld->height * ld->width : 1;
    ld->nslots = cfg->prefetch ? cfg->prefetch : 3;
    pthread_mutex_init(&ld->mu, NULL);
    pthread_cond_init(&ld->work_cv, NULL);
    pthread_cond_init(&ld->ready_cv, NULL);
    pthread_cond_init(&ld->idle_cv, NULL);
    ld->slots = calloc((size_t)ld->nslots, sizeof *ld->slots);
    ld->bad = calloc(ds->count, 1);
    ld->perm = malloc(ds->count * sizeof *ld->perm);
    ld->order = malloc(ds->count * sizeof *ld->order);
    ld->workers = calloc((size_t)cfg->workers, sizeof *ld->workers);
    if (!ld->slots || !ld->bad || !ld->perm || !ld->order || !ld->workers) {
        iabn_loader_close(ld);
        return iabn_err_set(e, IABN_ENOMEM, "out of memory (loader)");
    }
    size_t B = (size_t)cfg->batch_size;
    for (int i = 0; i < ld->nslots; i++) {
        iabn_batch *b = &ld->slots[i].b;
        b->images_per_sample = ld->ips;
        b->channels = 3;
        b->height = ld->height;
        b->width = ld->width;
        b->images = ld->cfg.alloc(B * ld->img_floats * sizeof(float), ld->cfg.alloc_user);
        b->labels = ld->cfg.alloc(B * ld->lbl_ints * sizeof(int32_t), ld->cfg.alloc_user);
        b->indices = malloc(B * sizeof *b->indices);
        b->valid_hw = malloc(B * 2 * sizeof *b->valid_hw);
        if (!b->images || !b->labels || !b->indices || !b->valid_hw) {
            iabn_loader_close(ld);
            return iabn_err_set(e, IABN_ENOMEM, "out of memory (batch of %zu x %zu floats)", B,
                                ld->img_floats);
        }
    }
    for (int i = 0; i < cfg->workers; i++) {
        worker *w = &ld->workers[i];
        w->ld = ld;
        rc = iabn_sample_ctx_new(&w->ctx, e);
        if (!rc && pthread_create(&w->thread, NULL, worker_main, w))
            rc = iabn_err_set(e, IABN_ENOMEM, "loader: cannot start worker thread %d", i);
        if (rc) {
            iabn_loader_close(ld);
            return rc;
        }
        w->started = 1;
        ld->nworkers = i + 1;
    }
    *out = ld;
    return 0;
}

int iabn_loader_start_epoch(iabn_loader *ld, int64_t epoch, iabn_err *e)
{
    if (epoch < 0) return iabn_err_set(e, IABN_EINVAL, "loader: negative epoch %lld",
                                       (long long)epoch);
    pthread_mutex_lock(&ld->mu);
    ld->active = 0;
    while (ld->busy) pthread_cond_wait(&ld->idle_cv, &ld->mu);
    for (int i = 0; i < ld->nslots; i++)
        if (ld->slots[i].state != SLOT_OUT) ld->slots[i].state = SLOT_FREE;
    int64_t n = (int64_t)ld->ds->count;
    iabn_sampler_perm(n, ld->cfg.seed, epoch, ld->cfg.shuffle, ld->perm);
    int64_t per = iabn_sampler_shard(ld->perm, n, ld->cfg.rank, ld->cfg.world_size,
                                     ld->cfg.drop_last, ld->order);
    int64_t B = ld->cfg.batch_size;
    ld->shard_n = per;
    ld->nbatches = ld->cfg.drop_last ? per / B : (per + B - 1) / B;
    ld->total = ld->cfg.drop_last ? ld->nbatches * B : per;
    ld->epoch = epoch;
    ld->gen++;
    ld->next_claim = 0;
    ld->next_out = 0;
    ld->active = 1;
    pthread_cond_broadcast(&ld->work_cv);
    pthread_mutex_unlock(&ld->mu);
    return 0;
}

int iabn_loader_next(iabn_loader *ld, iabn_batch **out, iabn_err *e)
{
    *out = NULL;
    pthread_mutex_lock(&ld->mu);
    if (!ld->active) {
        pthread_mutex_unlock(&ld->mu);
        return iabn_err_set(e, IABN_EINVAL, "loader: iabn_loader_start_epoch was not called");
    }
    if (ld->next_out >= ld->nbatches) {
        pthread_mutex_unlock(&ld->mu);
        return 1;
    }
    int64_t b = ld->next_out;
    slot *s = &ld->slots[b % ld->nslots];
    if (s->state == SLOT_OUT) {
        pthread_mutex_unlock(&ld->mu);
        return iabn_err_set(e, IABN_EINVAL, "loader: all %d batch slots are held by the caller; "
                            "release a batch before asking for the next", ld->nslots);
    }
    double t0 = iabn_now();
    while (!(s->state == SLOT_READY && s->b.index == b && s->gen == ld->gen))
        pthread_cond_wait(&ld->ready_cv, &ld->mu);
    ld->stats.wait_seconds += iabn_now() - t0;
    ld->next_out++;
    if (s->failed) {
        int rc = iabn_err_set(e, s->err.code, "%s", s->err.msg);
        s->state = SLOT_FREE;
        pthread_cond_broadcast(&ld->work_cv);
        pthread_mutex_unlock(&ld->mu);
        return rc;
    }
    s->state = SLOT_OUT;
    ld->stats.samples += s->b.n;
    ld->stats.batches++;
    *out = &s->b;
    pthread_mutex_unlock(&ld->mu);
    return 0;
}

void iabn_loader_release(iabn_loader *ld, iabn_batch *b)
{
    if (!ld || !b) return;
    pthread_mutex_lock(&ld->mu);
    for (int i = 0; i < ld->nslots; i++)
        if (&ld->slots[i].b == b && ld->slots[i].state == SLOT_OUT) {
            ld->slots[i].state = SLOT_FREE;
            pthread_cond_broadcast(&ld->work_cv);
        }
    pthread_mutex_unlock(&ld->mu);
}

void iabn_loader_close(iabn_loader *ld)
{
    if (!ld) return;
    pthread_mutex_lock(&ld->mu);
    ld->shutdown = 1;
    pthread_cond_broadcast(&ld->work_cv);
    pthread_mutex_unlock(&ld->mu);
    for (int i = 0; i < ld->nworkers; i++)
        if (ld->workers[i].started) pthread_join(ld->workers[i].thread, NULL);
    if (ld->workers)
        for (int i = 0; i < ld->cfg.workers; i++) {
            iabn_sample_ctx_free(ld->workers[i].ctx);
            free(ld->workers[i].img);
            free(ld->workers[i].lbl);
        }
    if (ld->slots)
        for (int i = 0; i < ld->nslots; i++) {
            iabn_batch *b = &ld->slots[i].b;
            if (b->images) ld->cfg.free(b->images, ld->cfg.alloc_user);
            if (b->labels) ld->cfg.free(b->labels, ld->cfg.alloc_user);
            free(b->indices);
            free(b->valid_hw);
        }
    pthread_mutex_destroy(&ld->mu);
    pthread_cond_destroy(&ld->work_cv);
    pthread_cond_destroy(&ld->ready_cv);
    pthread_cond_destroy(&ld->idle_cv);
    free(ld->workers);
    free(ld->slots);
    free(ld->bad);
    free(ld->perm);
    free(ld->order);
    free(ld);
}

int64_t iabn_loader_batches_per_epoch(const iabn_loader *ld)
{
    return iabn_sampler_batches((int64_t)ld->ds->count, ld->cfg.rank, ld->cfg.world_size,
                                ld->cfg.batch_size, ld->cfg.drop_last);
}

int64_t iabn_loader_samples_per_epoch(const iabn_loader *ld)
{
    int64_t n = (int64_t)ld->ds->count, w = ld->cfg.world_size, B = ld->cfg.batch_size;
    if (ld->cfg.drop_last) return (n / w) / B * B;
    return (n - ld->cfg.rank + w - 1) / w;
}

void iabn_loader_get_stats(iabn_loader *ld, iabn_loader_stats *out)
{
    pthread_mutex_lock(&ld->mu);
    *out = ld->stats;
    pthread_mutex_unlock(&ld->mu);
}
