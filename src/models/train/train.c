/* train.c: the training loop shared by classification and segmentation.
 *
 * A step takes one loader batch, runs it as `nmicro` micro-batches on the
 * planned training graph (gradients add up in the store), scales the sum to
 * the batch mean, clips, and applies SGD with the schedule's learning rate.
 * Everything that decides a step's result is a function of (seed, epoch,
 * position), so --resume from a checkpoint written after step k continues with
 * the same losses as a run that never stopped. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "models/train/plot.h"
#include "models/train/train_internal.h"

void iabn_trainer_request_stop(iabn_trainer_stop *s)
{
    s->requested = 1;
}

static int stop_requested(const trainer *tr)
{
    return tr->stop_agreed || (tr->o->stop && tr->o->stop->requested);
}

void iabn_trainer_opts_defaults(iabn_train_opts *o)
{
    memset(o, 0, sizeof *o);
    o->workers = 2;
    o->print_freq = 10;
    o->seed = 1;
}

static int mkdirs(const char *path, iabn_err *e)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST)
            return iabn_err_set(e, IABN_EIO, "cannot create directory %s", buf);
        *p = '/';
    }
    if (mkdir(buf, 0777) && errno != EEXIST)
        return iabn_err_set(e, IABN_EIO, "cannot create directory %s", buf);
    return 0;
}

static void fmt_eta(double s, char *buf, size_t n)
{
    long t = s > 0 ? (long)s : 0;
    snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

/* ---- setup ------------------------------------------------------------------------- */

static int open_data(trainer *tr, iabn_err *e)
{
    const iabn_train_opts *o = tr->o;
    int rc;
    if (tr->task == IABN_TASK_CLASSIFY) {
        rc = iabn_dataset_open(IABN_DATASET_IMAGEFOLDER, o->data_dir, "train", &tr->dtrain, e);
        if (!rc) rc = iabn_dataset_open(IABN_DATASET_IMAGEFOLDER, o->data_dir, "val", &tr->dval, e);
    } else {
        const char *tsplit = o->dataset == IABN_DATASET_VISTAS ? "training" : "train";
        const char *vsplit = o->dataset == IABN_DATASET_VISTAS ? "validation" : "val";
        rc = iabn_dataset_open(o->dataset, o->data_dir, tsplit, &tr->dtrain, e);
        if (!rc) rc = iabn_dataset_open(o->dataset, o->data_dir, vsplit, &tr->dval, e);
    }
    if (rc) return rc;
    if (tr->dtrain->num_classes != tr->dval->num_classes)
        return iabn_err_set(e, IABN_EFORMAT, "%s: train has %d classes, val %d", o->data_dir,
                            tr->dtrain->num_classes, tr->dval->num_classes);
    tr->classes = tr->dtrain->num_classes;
    if (tr->cfg.classes && tr->cfg.classes != tr->classes)
        return iabn_err_set(e, IABN_EINVAL,
                            "network.classes is %d but %s has %d classes (leave network.classes "
                            "out to take the data set's)",
                            tr->cfg.classes, o->data_dir, tr->classes);
    return 0;
}

/* The largest height and width over the images of a data set (headers). */
static void largest_image(const iabn_dataset *ds, int *h, int *w)
{
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    int mh = 0, mw = 0;
    for (size_t i = 0; i < ds->count; i++) {
        iabn_image_info info;
        if (iabn_file_read(ds->paths[i], &buf, &len, &cap, NULL) ||
            iabn_image_probe(buf, len, &info, NULL))
            continue; /* the loader reports unreadable files itself */
        if (info.height > mh) mh = info.height;
        if (info.width > mw) mw = info.width;
    }
    free(buf);
    if (mh > 0 && mw > 0) {
        *h = mh;
        *w = mw;
    }
}

void fill_transform(const trainer *tr, int train, iabn_transform_cfg *t)
{
    const iabn_config *c = &tr->cfg;
    if (tr->task == IABN_TASK_CLASSIFY) {
        iabn_transform_defaults(t, train ? IABN_TF_CLASSIFY_TRAIN : IABN_TF_CLASSIFY_EVAL);
        t->out_h = t->out_w = train ? c->crop_train : c->crop_val;
        t->scale = train ? c->scale_train : c->scale_val;
        if (train) {
            t->brightness = t->contrast = t->saturation = c->color_jitter_train ? 0.4f : 0.f;
            t->lighting_std = c->lighting_train ? 0.1f : 0.f;
        }
    } else {
        iabn_transform_defaults(t, train ? IABN_TF_SEGMENT_TRAIN : IABN_TF_SEGMENT_EVAL);
        if (train) {
            t->out_h = c->crop_h;
            t->out_w = c->crop_w;
            t->seg_scale[0] = c->scale_min;
            t->seg_scale[1] = c->scale_max;
        } else {
            t->scale = c->longest_val;
            /* the canvas must hold every image: longest x longest when
             * resizing, else the largest image of the set */
            if (c->longest_val > 0) t->out_h = t->out_w = c->longest_val;
            else if (tr->dval) largest_image(tr->dval, &t->out_h, &t->out_w);
        }
    }
    memcpy(t->mean, c->mean, sizeof t->mean);
    memcpy(t->std, c->std, sizeof t->std);
}

static int open_loaders(trainer *tr, iabn_err *e)
{
    iabn_loader_cfg lc;
    iabn_loader_cfg_defaults(&lc, IABN_TF_CLASSIFY_TRAIN);
    fill_transform(tr, 1, &lc.transform);
    lc.batch_size = tr->batch;
    lc.workers = tr->o->workers > 0 ? tr->o->workers : 2;
    lc.seed = (uint64_t)tr->o->seed;
    lc.shuffle = 1;
    lc.drop_last = 1; /* every rank the same number of steps */
    lc.rank = tr->rank; /* the validation loader below shards the same way */
    lc.world_size = tr->world;
    lc.strict = tr->o->strict_data;
    iabn_device_loader_cfg(&tr->dev, &lc);
    int rc = iabn_loader_open(&lc, tr->dtrain, &tr->ltrain, e);
    if (rc) return rc;
    if (iabn_loader_batches_per_epoch(tr->ltrain) < 1)
        return iabn_err_set(e, IABN_EINVAL, "%s: %zu training images make no batch of %d",
                            tr->o->data_dir, tr->dtrain->count, tr->batch);
    fill_transform(tr, 0, &lc.transform);
    lc.batch_size = tr->task == IABN_TASK_SEGMENT ? 1 : tr->batch;
    lc.shuffle = 0;
    lc.drop_last = 0;
    lc.leave_out = 1; /* a replaced image would change the metric */
    return iabn_loader_open(&lc, tr->dval, &tr->lval, e);
}

/* The classifier's parameters take network.classifier_lr (lr_group 1). */
static int is_classifier(const iabn_param *p)
{
    return strstr(p->name, "fc") != NULL || strncmp(p->name, "cls", 3) == 0;
}

static int setup(trainer *tr, iabn_err *e)
{
    const iabn_train_opts *o = tr->o;
    int rc;
    iabn_config_defaults(&tr->cfg);
    if (o->config) tr->cfg = *o->config;
    else if (o->config_path && (rc = iabn_config_load(&tr->cfg, o->config_path, e))) return rc;
    if (o->epochs > 0) tr->cfg.schedule.epochs = o->epochs;
    if (o->batch > 0) tr->cfg.batch_size = o->batch;
    if (o->lr > 0) tr->cfg.learning_rate = o->lr;
    if (o->bn && iabn_bn_mode_parse(o->bn, &tr->cfg.bn_mode, e)) return iabn_err_prefix(e, "--bn: ");
    tr->storage = tr->cfg.strategy;
    if (o->strategy && (rc = iabn_storage_parse(o->strategy, &tr->storage, e))) return rc;
    if ((rc = iabn_config_check(&tr->cfg, e))) return rc;
    if (!iabn_model_exists(tr->cfg.arch))
        return iabn_err_set(e, IABN_EINVAL, "network.arch %s is not a model (iabn mem --list)",
                            tr->cfg.arch);
    if (tr->task == IABN_TASK_SEGMENT && !iabn_model_is_segmentation(tr->cfg.arch))
        return iabn_err_set(e, IABN_EINVAL, "network.arch %s is not a segmentation network",
                            tr->cfg.arch);
    if (tr->task == IABN_TASK_CLASSIFY && iabn_model_is_segmentation(tr->cfg.arch))
        return iabn_err_set(e, IABN_EINVAL, "network.arch %s is a segmentation network: use "
                            "iabn segtrain", tr->cfg.arch);
    if (o->threads > 0) iabn_set_num_threads(o->threads);
    if ((rc = open_data(tr, e))) return rc;
    trainer_model_cfg(tr);
    tr->cfg.classes = tr->classes;
    tr->config_json = iabn_config_to_json(&tr->cfg);
    if (!tr->config_json) return iabn_err_set(e, IABN_ENOMEM, "out of memory");
    if ((rc = dist_setup(tr, e))) return rc; /* tr->batch: this rank's share */
    tr->in_h = tr->task == IABN_TASK_SEGMENT ? tr->cfg.crop_h : tr->cfg.crop_train;
    tr->in_w = tr->task == IABN_TASK_SEGMENT ? tr->cfg.crop_w : tr->cfg.crop_train;
    if ((rc = iabn_device_open_rank(o->device, iabn_comm_local_rank(o->comm), tr->world, &tr->dev,
                                    e)) ||
        (rc = dist_device(tr, e)))
        return rc;
    if (tr->storage != IABN_STORAGE_KEEP) {
        /* auto / recompute aim at --budget, else at what the device has */
        tr->sopts.allow_offload = tr->sopts.allow_recompute = 1;
        tr->sopts.lookahead = 1;
        tr->sopts.host_bf16 = tr->cfg.offload_bf16;
        tr->sopts.budget = o->budget_bytes > 0 ? (size_t)o->budget_bytes
                                               : iabn_device_available(&tr->dev);
        if ((rc = iabn_cost_calibrate(&tr->sopts.cost, tr->dev.be->kind, e))) return rc;
    }
    tr->s = iabn_store_new(tr->dev.be, e);
    if (!tr->s) return e->code;
    if ((rc = choose_micro_batches(tr, e)) || (rc = dist_check_micro(tr, e))) return rc;
    if ((rc = gset_build(tr, 1, tr->micro, tr->in_h, tr->in_w, 1, &tr->train, e))) return rc;
    for (int i = 0; i < iabn_store_count(tr->s); i++) {
        iabn_param *p = iabn_store_get(tr->s, i);
        p->lr_group = is_classifier(p);
    }
    iabn_init_kind init = strcmp(tr->cfg.weight_init, "kaiming_normal") ? IABN_INIT_XAVIER_NORMAL
                                                                          : IABN_INIT_KAIMING_NORMAL;
    if ((rc = iabn_init_params(tr->s, init, tr->mcfg.act, (uint64_t)o->seed, e))) return rc;
    if (o->init && (rc = tr->task == IABN_TASK_SEGMENT ? trainer_load_body_weights(tr->s, o->init, e)
                                                        : trainer_load_matching_weights(tr, tr->s, o->init, e)))
        return rc;
    if (o->resume) {
        if ((rc = iabn_ckpt_load(tr->s, o->resume, 1, &tr->pos, e))) return rc;
        if (!o->evaluate_only && (rc = trainer_check_resume(tr, e))) return rc;
        dist_resume_note(tr);
    } else {
        tr->pos.best = -1;
    }
    return open_loaders(tr, e);
}

/* ---- one optimizer step ------------------------------------------------------------- */

static int sgd_step(trainer *tr, double lr_factor, iabn_err *e)
{
    const iabn_config *c = &tr->cfg;
    double cls = c->classifier_lr > 0 ? c->classifier_lr : c->learning_rate;
    iabn_sgd_opts so = {
        .lr = {(float)(c->learning_rate * lr_factor), (float)(cls * lr_factor)},
        .momentum = c->momentum,
        .weight_decay = c->weight_decay,
        .nesterov = c->nesterov,
        .grad_scale = 1.f / (float)tr->nmicro,
        .clip = c->clip,
    };
    return iabn_store_sgd_step(tr->s, &so, NULL, e);
}

static double lr_factor(const trainer *tr, long long steps_per_epoch)
{
    const iabn_schedule *s = &tr->cfg.schedule;
    if (s->per_step)
        return iabn_schedule_factor(s, (double)tr->pos.global_step,
                                    (double)s->epochs * (double)steps_per_epoch);
    return iabn_schedule_factor(s, (double)tr->pos.epoch, (double)s->epochs);
}

/* Queues micro-batch k of b as the training graph's next inputs (on a GPU
 * the copy runs on the copy stream while the graph computes). */
static int stage_micro(trainer *tr, const iabn_batch *b, int k, iabn_err *e)
{
    iabn_session *gs = &tr->train;
    size_t img = (size_t)3 * tr->in_h * tr->in_w;
    size_t lab = tr->task == IABN_TASK_SEGMENT ? (size_t)tr->in_h * tr->in_w : 1;
    size_t m = (size_t)tr->micro;
    int rc = iabn_exec_stage(gs->exec, gs->input, b->images + (size_t)k * m * img, m * img * 4, e);
    if (!rc) rc = iabn_exec_stage(gs->exec, gs->labels, b->labels + (size_t)k * m * lab, m * lab * 4, e);
    return rc;
}

/* The next training batch, or *out = NULL at the end of the epoch; *wait:
 * the seconds spent waiting for the loader. */
static int fetch_batch(trainer *tr, iabn_batch **out, double *wait, iabn_err *e)
{
    double t0 = iabn_now();
    *out = NULL;
    int rc = iabn_loader_next(tr->ltrain, out, e);
    *wait = iabn_now() - t0;
    if (rc == 1) *out = NULL;
    return rc == 1 ? 0 : rc;
}

/* Runs the micro-batches of b, whose first is staged already, and returns
 * the mean loss.  With `ahead`, the next batch is fetched and its first
 * micro-batch staged while b's last one computes (*next, NULL at the end of
 * the epoch, *epoch_end then set). */
static int train_batch(trainer *tr, const iabn_batch *b, int ahead, iabn_batch **next,
                       double *next_wait, int *epoch_end, double *loss, long *correct, iabn_err *e)
{
    iabn_session *gs = &tr->train;
    double sum = 0;
    *next = NULL;
    for (int k = 0; k < tr->nmicro; k++) {
        /* ranks sum their gradients once per step, after the last micro-batch */
        iabn_graph_set_grad_sync(gs->graph, k + 1 == tr->nmicro);
        int rc = iabn_exec_run(gs->exec, e);
        if (!rc && k + 1 < tr->nmicro) rc = stage_micro(tr, b, k + 1, e);
        if (!rc && k + 1 == tr->nmicro && ahead) {
            rc = fetch_batch(tr, next, next_wait, e);
            if (!rc && !*next) *epoch_end = 1;
            if (!rc && *next) rc = stage_micro(tr, *next, 0, e);
        }
        float l = 0;
        if (!rc) rc = iabn_exec_get(gs->exec, gs->loss, &l, sizeof l, e);
        if (!rc && tr->task == IABN_TASK_CLASSIFY &&
            !(rc = gset_fetch(gs, gs->logits, &tr->host, &tr->host_cap, e))) {
            long c1 = 0, ck = 0;
            iabn_topk_correct(tr->micro, tr->classes, tr->host,
                              b->labels + (size_t)k * tr->micro, 1, &c1, &ck);
            *correct += c1;
        }
        if (rc) return rc;
        sum += l;
    }
    *loss = sum / tr->nmicro;
    return 0;
}

/* ---- non-finite steps ----------------------------------------------------------------- */

/* Reruns the micro-batches of b with the executor's check mode, which stops
 * at the first node whose output holds NaN or Inf: its message into out.
 * Then stages `next` again if it was (the reruns took the input). */
static void first_nonfinite(trainer *tr, const iabn_batch *b, const iabn_batch *next, char *out,
                            size_t n)
{
    iabn_session *gs = &tr->train;
    snprintf(out, n, "no node on a rerun (the non-finite value came from the update)");
    iabn_exec_set_check(gs->exec, 1);
    for (int k = 0; k < tr->nmicro; k++) {
        iabn_err e2 = {0};
        if (stage_micro(tr, b, k, &e2)) break;
        if (iabn_exec_run(gs->exec, &e2)) {
            snprintf(out, n, "%.500s", e2.msg);
            break;
        }
    }
    const char *chk = getenv("IABN_CHECK");
    iabn_exec_set_check(gs->exec, chk && chk[0] == '1');
    iabn_err e3 = {0};
    if (next) (void)stage_micro(tr, next, 0, &e3);
}

/* ---- logging ------------------------------------------------------------------------ */

/* One metrics.jsonl record: the wall-clock time (UTC, ISO 8601, ms) first,
 * then the fields ("\"k\": v, ..."). */
static void log_metric(trainer *tr, const char *fields)
{
    if (!tr->metrics) return;
    struct timespec ts;
    struct tm tm;
    char when[40] = "";
    if (clock_gettime(CLOCK_REALTIME, &ts) == 0 && gmtime_r(&ts.tv_sec, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(tr->metrics, "{\"time\": \"%s.%03ldZ\", %s}\n", when, (long)(ts.tv_nsec / 1000000),
            fields);
    fflush(tr->metrics);
}

static void tb_scalar(trainer *tr, const char *tag, long long step, double v)
{
    if (tr->tb) iabn_tb_scalar(tr->tb, tag, step, (float)v, 0, NULL);
}

/* OUTPUT_DIR/curves.svg from metrics.jsonl, after each validation.  A plot
 * that cannot be written is reported, and training goes on. */
static void plot_curves(trainer *tr)
{
    if (!tr->metrics || tr->o->evaluate_only) return;
    fflush(tr->metrics);
    char path[1100];
    snprintf(path, sizeof path, "%s/curves.svg", tr->outdir);
    const char *dirs[1] = {tr->outdir};
    iabn_err pe = {0};
    if (iabn_plot_runs(dirs, 1, path, &pe)) trainer_say(tr, "warning: %s", pe.msg);
}

static int save_ckpt(trainer *tr, const char *name, iabn_err *e)
{
    char path[1100];
    if (tr->rank > 0) return 0; /* rank 0 writes */
    tr->pos.world_size = tr->world;
    tr->pos.global_batch = tr->cfg.batch_size;
    snprintf(path, sizeof path, "%s/%s", tr->outdir, name);
    tr->pos.runs = (long long)iabn_exec_step(tr->train.exec);
    tr->pos.train_images = (long long)tr->dtrain->count;
    return iabn_ckpt_save(tr->s, path, &tr->pos, tr->config_json, e);
}

static int open_outputs(trainer *tr, iabn_err *e)
{
    if (tr->rank > 0) return 0; /* rank 0 writes */
    int rc = mkdirs(tr->outdir, e);
    if (!rc) rc = trainer_lock_outdir(tr, e);
    if (rc) return rc;
    char path[1100];
    snprintf(path, sizeof path, "%s/config.json", tr->outdir);
    FILE *f = fopen(path, "w");
    if (!f) return iabn_err_set(e, IABN_EIO, "cannot write %s", path);
    fprintf(f, "%s\n", tr->config_json);
    fclose(f);
    snprintf(path, sizeof path, "%s/metrics.jsonl", tr->outdir);
    tr->metrics = fopen(path, tr->o->resume ? "a" : "w");
    if (!tr->metrics) return iabn_err_set(e, IABN_EIO, "cannot write %s", path);
    return iabn_tb_open(tr->outdir, &tr->tb, e);
}

static void teardown(trainer *tr)
{
    iabn_session_free(&tr->train);
    for (int i = 0; i < 2; i++) iabn_session_free(&tr->evals[i]);
    if (tr->ltrain) iabn_loader_close(tr->ltrain);
    if (tr->lval) iabn_loader_close(tr->lval);
    iabn_dataset_free(tr->dtrain);
    iabn_dataset_free(tr->dval);
    iabn_store_free(tr->s);
    free(tr->host);
    free(tr->snap);
    iabn_device_close(&tr->dev); /* last: the loaders' pinned batches came from it */
    free(tr->config_json);
    if (tr->metrics) fclose(tr->metrics);
    if (tr->tb) iabn_tb_close(tr->tb, NULL);
    if (tr->lock_fd) close(tr->lock_fd - 1); /* last: releases the directory */
}

/* ---- the loop ------------------------------------------------------------------------ */

static int validate(trainer *tr, iabn_train_result *res, int epoch, iabn_err *e)
{
    eval_result r;
    int rc = run_evaluation(tr, tr->lval, 0, 0, NULL, 0, tr->o->verbose, &r, e);
    if (rc) return rc;
    double metric = tr->task == IABN_TASK_SEGMENT ? r.miou : r.top1;
    res->last_metric = metric;
    res->last_top5 = r.top5;
    res->last_pixel_acc = r.pixel_acc;
    char line[512];
    if (tr->task == IABN_TASK_SEGMENT) {
        snprintf(line, sizeof line, "\"epoch\": %d, \"step\": %lld, \"val_miou\": %.4f, \"val_pixel_acc\": %.4f",
                 epoch + 1, tr->pos.global_step, r.miou, r.pixel_acc);
        tb_scalar(tr, "val/miou", tr->pos.global_step, r.miou);
    } else {
        snprintf(line, sizeof line,
                 "\"epoch\": %d, \"step\": %lld, \"val_loss\": %.6f, \"top1\": %.4f, \"top5\": %.4f",
                 epoch + 1, tr->pos.global_step, r.loss, r.top1, r.top5);
        tb_scalar(tr, "val/loss", tr->pos.global_step, r.loss);
        tb_scalar(tr, "val/top1", tr->pos.global_step, r.top1);
        tb_scalar(tr, "val/top5", tr->pos.global_step, r.top5);
    }
    log_metric(tr, line);
    if (tr->tb) iabn_tb_flush(tr->tb, NULL);
    plot_curves(tr);
    if (metric > tr->pos.best) {
        tr->pos.best = metric;
        tr->pos.best_epoch = epoch;
        if (!tr->o->evaluate_only && (rc = save_ckpt(tr, "checkpoint_best.safetensors", e))) {
            eval_result_free(&r);
            return rc;
        }
    }
    res->best_metric = tr->pos.best;
    if (tr->task == IABN_TASK_SEGMENT)
        trainer_say(tr, "  val (%ld images, %ld skipped): mIoU %.2f%%  pixel acc %.2f%%  (best %.2f%%, epoch %lld)",
            r.samples, r.skipped, r.miou, r.pixel_acc, tr->pos.best, tr->pos.best_epoch + 1);
    else
        trainer_say(tr, "  val (%ld images, %ld skipped): loss %.4f  top1 %.2f%%  top5 %.2f%%  (best %.2f%%, epoch %lld)",
            r.samples, r.skipped, r.loss, r.top1, r.top5, tr->pos.best, tr->pos.best_epoch + 1);
    eval_result_free(&r);
    return 0;
}

/* The validation due at the end of `epoch`, then checkpoint_last again
 * with nothing due (the one written before it records it: val_pending). */
static int validate_due(trainer *tr, iabn_train_result *res, int epoch, iabn_err *e)
{
    int rc = validate(tr, res, epoch, e);
    if (rc) return rc;
    tr->pos.val_pending = 0;
    return save_ckpt(tr, "checkpoint_last.safetensors", e);
}

static int skip_batches(trainer *tr, long long n, iabn_err *e)
{
    for (long long i = 0; i < n; i++) {
        iabn_batch *b = NULL;
        int rc = iabn_loader_next(tr->ltrain, &b, e);
        if (rc < 0) return rc;
        if (rc == 1) break;
        iabn_loader_release(tr->ltrain, b);
    }
    return 0;
}

static int train_loop(trainer *tr, iabn_train_result *res, iabn_err *e)
{
    const iabn_train_opts *o = tr->o;
    long long spe = iabn_loader_batches_per_epoch(tr->ltrain);
    int epochs = tr->cfg.schedule.epochs;
    double t_start = iabn_now();
    long long steps_this_run = 0, total_steps = spe * epochs;
    /* dropout: each rank its own masks (its own samples); rank 0 keeps the
     * single process's */
    iabn_exec_set_seed(tr->train.exec,
                       (uint64_t)o->seed + (uint64_t)tr->rank * 0x9E3779B97F4A7C15ull);
    iabn_exec_set_step(tr->train.exec, (uint64_t)tr->pos.runs);
    int rc = 0;
    if (tr->pos.val_pending > 0) { /* the resumed run ended before its validation */
        int ve = (int)tr->pos.val_pending - 1;
        trainer_say(tr, "the validation of epoch %d did not run before the checkpoint's run "
                    "ended: running it first", ve + 1);
        rc = validate_due(tr, res, ve, e);
    }
    for (int epoch = (int)tr->pos.epoch; epoch < epochs && !rc; epoch++) {
        if ((rc = iabn_loader_start_epoch(tr->ltrain, epoch, e))) break;
        if (tr->pos.step_in_epoch > 0 && (rc = skip_batches(tr, tr->pos.step_in_epoch, e))) break;
        double ep_loss = 0, t_ep = iabn_now();
        long ep_correct = 0, ep_seen = 0, ep_steps = 0;
        double avg_loss = 0;
        /* b: the batch to train on, fetched (and its first micro-batch
         * staged) while the step before computed */
        iabn_batch *b = NULL;
        double wait = 0, t_prev = iabn_now();
        int epoch_end = 0;
        for (;;) {
            /* a stop asked of one rank stops the job after the same step everywhere */
            int stop[2] = {stop_requested(tr),
                           o->time_limit > 0 && iabn_now() - t_start > o->time_limit};
            if ((rc = dist_agree_stop(tr, stop, 2, e))) break;
            tr->stop_agreed = stop[0];
            if (stop[0]) break;
            if (o->max_steps > 0 && steps_this_run >= o->max_steps) break;
            if (stop[1]) {
                res->stopped_by_time = 1;
                break;
            }
            if (!b) {
                if (epoch_end) break;
                if ((rc = fetch_batch(tr, &b, &wait, e)) || !b) break;
                if ((rc = stage_micro(tr, b, 0, e))) break;
            }
            double lr = lr_factor(tr, spe), loss = 0, data_wait = wait;
            long correct = 0;
            int ahead = !(o->max_steps > 0 && steps_this_run + 1 >= o->max_steps);
            iabn_batch *next = NULL;
            if (o->on_nonfinite_skip && (rc = trainer_buffers_copy(tr, 0, e))) break;
            rc = train_batch(tr, b, ahead, &next, &wait, &epoch_end, &loss, &correct, e);
            /* a NaN or Inf loss, or gradient (sgd_step refuses it), never
             * reaches the weights: stop, or skip the step with --on-nonfinite skip */
            char why[512] = "";
            if (!rc && !isfinite(loss))
                snprintf(why, sizeof why, "the loss is %s", isnan(loss) ? "NaN" : "infinite");
            if (!rc && !why[0] && (rc = sgd_step(tr, lr, e)) == IABN_ENUM) {
                snprintf(why, sizeof why, "%.500s", e->msg);
                rc = 0;
            }
            if (!rc && why[0]) {
                char node[512];
                first_nonfinite(tr, b, next, node, sizeof node);
                if (!o->on_nonfinite_skip) {
                    res->stopped_by_nan = 1;
                    rc = iabn_err_set(e, IABN_ENUM,
                                      "%.200s at epoch %d, step %lld (global step %lld); first "
                                      "non-finite output: %.200s.  Stopped without saving this "
                                      "state (the last good checkpoint stays in %s); "
                                      "--on-nonfinite skip skips such steps",
                                      why, epoch + 1, tr->pos.step_in_epoch + 1,
                                      tr->pos.global_step + 1, node, tr->outdir);
                } else {
                    rc = trainer_buffers_copy(tr, 1, e);
                    if (!rc) rc = iabn_store_zero_grads(tr->s, e);
                    res->skipped_steps++;
                    trainer_say(tr, "epoch %d/%d  step %lld/%lld skipped: %.200s; first "
                                "non-finite output: %.200s (%lld skipped so far)",
                                epoch + 1, epochs, tr->pos.step_in_epoch + 1, spe, why, node,
                                res->skipped_steps);
                    char line[512];
                    snprintf(line, sizeof line, "\"step\": %lld, \"epoch\": %d, \"skipped\": "
                             "\"non-finite\", \"skipped_total\": %lld",
                             tr->pos.global_step + 1, epoch + 1, res->skipped_steps);
                    log_metric(tr, line);
                }
            }
            iabn_loader_release(tr->ltrain, b);
            b = next;
            if (rc) break;
            if (why[0]) { /* skipped: the batch is used up, the position moves on */
                tr->pos.step_in_epoch++;
                tr->pos.global_step++;
                steps_this_run++;
                t_prev = iabn_now();
                continue;
            }
            double t_now = iabn_now(), dt = t_now - t_prev;
            t_prev = t_now;
            tr->pos.step_in_epoch++;
            tr->pos.global_step++;
            steps_this_run++;
            ep_steps++;
            ep_loss += loss;
            ep_correct += correct;
            ep_seen += tr->batch;
            avg_loss = ep_loss / ep_steps;
            res->final_loss = loss;
            res->steps_done++;
            double lr_now = tr->cfg.learning_rate * lr;
            if (o->print_freq > 0 && (tr->pos.step_in_epoch % o->print_freq == 0 ||
                                      tr->pos.step_in_epoch == spe)) {
                double elapsed = iabn_now() - t_start;
                double per = elapsed / (double)steps_this_run;
                long long left = total_steps - tr->pos.global_step;
                char eta[32], line[512];
                fmt_eta(per * (double)left, eta, sizeof eta);
                double ips = (double)tr->batch / dt;
                double top1 = tr->task == IABN_TASK_CLASSIFY
                                  ? 100.0 * (double)ep_correct / (double)ep_seen : -1.0;
                if (o->progress && tr->rank == 0) {
                    iabn_train_progress pr = {epoch + 1, epochs, tr->pos.step_in_epoch, spe,
                                              tr->pos.global_step, loss, avg_loss, lr_now, ips,
                                              data_wait, per * (double)left, top1,
                                              tr->train.plan->arena_bytes};
                    o->progress(o->user, &pr);
                }
                char top[32] = "";
                if (top1 >= 0) snprintf(top, sizeof top, "  top1 %.1f%%", top1);
                if (!o->progress) /* a progress callback formats the line itself */
                    trainer_say(tr, "epoch %d/%d  step %lld/%lld  loss %.4f (%.4f)%s  lr %.5f  "
                                "img/s %.1f  data %.3fs  eta %s  act mem %.1f MiB",
                                epoch + 1, epochs, tr->pos.step_in_epoch, spe, loss, avg_loss, top,
                                lr_now, ips, data_wait, eta,
                                (double)tr->train.plan->arena_bytes / 1048576.0);
                snprintf(line, sizeof line,
                         "\"step\": %lld, \"epoch\": %d, \"loss\": %.6f, \"lr\": %.8g, "
                         "\"img_s\": %.2f, \"arena_bytes\": %zu",
                         tr->pos.global_step, epoch + 1, loss, lr_now, ips, tr->train.plan->arena_bytes);
                log_metric(tr, line);
                tb_scalar(tr, "train/loss", tr->pos.global_step, loss);
                tb_scalar(tr, "train/lr", tr->pos.global_step, lr_now);
                if (tr->tb) iabn_tb_flush(tr->tb, NULL);
            }
            /* mid-epoch checkpoints: a kill loses at most N steps, and the
             * position (epoch, step, executor runs) resumes bit-exactly.
             * Written after the step's metrics line: a kill between the two
             * then repeats logged steps on resume instead of leaving a step
             * that the checkpoint covers out of metrics.jsonl. */
            if (o->checkpoint_every > 0 && tr->pos.global_step % o->checkpoint_every == 0 &&
                tr->pos.step_in_epoch < spe &&
                (rc = save_ckpt(tr, "checkpoint_last.safetensors", e)))
                break;
        }
        if (b) iabn_loader_release(tr->ltrain, b); /* fetched ahead, not trained on */
        if (rc) break;
        int finished = tr->pos.step_in_epoch >= spe;
        if (finished) {
            tr->pos.epoch = epoch + 1;
            tr->pos.step_in_epoch = 0;
        }
        if (ep_steps) {
            char top[48] = "";
            if (tr->task == IABN_TASK_CLASSIFY)
                snprintf(top, sizeof top, ", train top1 %.2f%%",
                         100.0 * (double)ep_correct / (double)ep_seen);
            trainer_say(tr, "epoch %d/%d %s in %.1fs: train loss %.4f%s", epoch + 1, epochs,
                finished ? "done" : "stopped", iabn_now() - t_ep, avg_loss, top);
        }
        if (finished) res->epochs_done++;
        /* A stop on request leaves at once, with no validation, even when it
         * came in the epoch's last step (a validation pass can outlast the
         * grace a scheduler gives after its signal).  The ranks agreed on
         * stop_agreed, so they all take the same branch.  The checkpoint
         * written before the validation records it as due, so a run stopped
         * or killed before it ends runs it first on --resume. */
        int stop = tr->stop_agreed;
        int eval_due = finished && ((epoch + 1) % tr->cfg.eval_every == 0 || epoch + 1 == epochs);
        int eval_now = eval_due && !stop;
        int eval_partial = !finished && !stop;
        tr->pos.val_pending = eval_due ? epoch + 1 : 0;
        if ((rc = save_ckpt(tr, "checkpoint_last.safetensors", e))) break;
        if (eval_now && (rc = validate_due(tr, res, epoch, e))) break;
        if (eval_partial && (rc = validate(tr, res, epoch, e))) break;
        if (!finished || stop) {
            if (stop) {
                res->stopped_by_signal = 1;
                if (eval_due)
                    trainer_say(tr, "validation of epoch %d deferred: stopped on request (--resume "
                                "runs it first)", epoch + 1);
                trainer_say(tr, "stopped on request after step %lld; checkpoint written to "
                        "%s/checkpoint_last.safetensors (continue with --resume)",
                    tr->pos.global_step, tr->outdir);
            }
            break;
        }
    }
    return rc;
}

int iabn_trainer_run(const iabn_train_opts *o, iabn_train_result *res, iabn_err *e)
{
    trainer tr;
    memset(&tr, 0, sizeof tr);
    memset(res, 0, sizeof *res);
    tr.o = o;
    tr.task = o->task;
    tr.log = o->quiet ? NULL : o->log;
    tr.user = o->user;
    snprintf(tr.outdir, sizeof tr.outdir, "%s", o->output_dir ? o->output_dir : "runs/train");
    int rc = setup(&tr, e);
    if (!rc) {
        res->arena_bytes = tr.train.plan->arena_bytes;
        res->lower_bound = tr.train.plan->lower_bound;
        res->micro_batches = tr.nmicro;
        res->step_bytes = tr.need_bytes;
        size_t params;
        iabn_store_totals(tr.s, &params, NULL, NULL, NULL, NULL);
        trainer_say(&tr, "%s (%s, %s) on %s, %zu parameters, %d classes; %zu train / %zu val images",
            tr.cfg.arch, iabn_bn_mode_name(tr.cfg.bn_mode), iabn_act_name(tr.cfg.act.kind),
            tr.dev.name, params, tr.classes, tr.dtrain->count, tr.dval->count);
        trainer_say(&tr, "batch %d%s, input %dx%d: activation arena %.1f MiB (lower bound %.1f MiB), "
                 "whole step %.1f MiB",
            tr.batch, tr.nmicro > 1 ? " (micro-batches)" : "", tr.in_h, tr.in_w,
            (double)tr.train.plan->arena_bytes / 1048576.0,
            (double)tr.train.plan->lower_bound / 1048576.0, (double)tr.need_bytes / 1048576.0);
        if (tr.nmicro > 1)
            trainer_say(&tr, "the batch of %d does not fit: %d micro-batches of %d, gradients "
                     "accumulated", tr.batch, tr.nmicro, tr.micro);
        if (o->evaluate_only) {
            rc = validate(&tr, res, (int)tr.pos.epoch, e);
        } else {
            rc = open_outputs(&tr, e);
            if (!rc) rc = train_loop(&tr, res, e);
        }
    }
    teardown(&tr);
    return rc;
}
