/* train_eval.c: evaluation over a loader, shared by validation during
 * training, `iabn eval` and `iabn segeval`.  Classification: top-1 / top-5
 * (ten-crop: logits averaged over the crops).  Segmentation: the confusion
 * matrix over all images, with optional test-time scales and flip (class
 * probabilities averaged at the image's size, the reference's mean fusion)
 * and an optional sliding window. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/train/segmetrics.h"
#include "models/train/train_internal.h"

/* An evaluation graph for (n, h, w) with logits at tr->mcfg.out_h x out_w,
 * reusing one of two cached ones. */
static int eval_graph(trainer *tr, int n, int h, int w, iabn_session **out, iabn_err *e)
{
    for (int i = 0; i < 2; i++)
        if (tr->evals[i].graph && tr->evals[i].batch == n && tr->evals[i].height == h &&
            tr->evals[i].width == w && tr->eval_oh[i] == tr->mcfg.out_h &&
            tr->eval_ow[i] == tr->mcfg.out_w) {
            *out = &tr->evals[i];
            return 0;
        }
    iabn_session_free(&tr->evals[1]);
    tr->evals[1] = tr->evals[0];
    tr->eval_oh[1] = tr->eval_oh[0];
    tr->eval_ow[1] = tr->eval_ow[0];
    memset(&tr->evals[0], 0, sizeof tr->evals[0]);
    tr->eval_oh[0] = tr->mcfg.out_h;
    tr->eval_ow[0] = tr->mcfg.out_w;
    int rc = gset_build(tr, 0, n, h, w, 1, &tr->evals[0], e);
    if (rc) {
        iabn_session_free(&tr->evals[0]);
        return rc;
    }
    *out = &tr->evals[0];
    return 0;
}

void eval_result_free(eval_result *r)
{
    free(r->iou);
    r->iou = NULL;
}

static int eval_classify(trainer *tr, iabn_loader *ld, int ten, eval_result *r, iabn_err *e)
{
    int rc = iabn_loader_start_epoch(ld, 0, e);
    double loss_sum = 0;
    long c1 = 0, c5 = 0, seen = 0;
    float *avg = NULL;
    int32_t *labs = NULL;
    while (!rc) {
        iabn_batch *b = NULL;
        rc = iabn_loader_next(ld, &b, e);
        if (rc == 1) {
            rc = 0;
            break;
        }
        if (rc) break;
        int ipc = b->images_per_sample, n = b->n * ipc;
        iabn_session *gs = NULL;
        rc = eval_graph(tr, n, b->height, b->width, &gs, e);
        if (!rc) rc = iabn_exec_set(gs->exec, gs->input, b->images, (size_t)n * 3 * b->height * b->width * 4, e);
        free(labs);
        labs = malloc((size_t)n * sizeof *labs);
        if (!labs) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory evaluating");
        for (int i = 0; !rc && i < n; i++) labs[i] = b->labels[i / ipc];
        if (!rc) rc = iabn_exec_set(gs->exec, gs->labels, labs, (size_t)n * 4, e);
        if (!rc) rc = iabn_exec_run(gs->exec, e);
        float lossv = 0;
        if (!rc) rc = gset_fetch(gs, gs->logits, &tr->host, &tr->host_cap, e);
        if (!rc) rc = iabn_exec_get(gs->exec, gs->loss, &lossv, sizeof lossv, e);
        if (!rc) {
            const float *lg = tr->host;
            int k = tr->classes;
            free(avg);
            avg = calloc((size_t)b->n * k, sizeof *avg);
            if (!avg) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory evaluating");
            for (int i = 0; !rc && i < n; i++)
                for (int c = 0; c < k; c++) avg[(size_t)(i / ipc) * k + c] += lg[(size_t)i * k + c] / ipc;
            long a = 0, bb = 0;
            if (!rc) iabn_topk_correct(b->n, k, avg, b->labels, k < 5 ? k : 5, &a, &bb);
            /* left-out (undecodable) samples have index -1: not in the count */
            int valid = 0;
            for (int i = 0; !rc && i < b->n; i++) {
                if (b->indices[i] < 0) {
                    r->skipped++;
                    continue;
                }
                valid++;
                r->nonfinite += !iabn_all_finite((size_t)k, avg + (size_t)i * k);
            }
            c1 += a;
            c5 += bb;
            seen += valid;
            loss_sum += (double)lossv * valid;
        }
        iabn_loader_release(ld, b);
        (void)ten;
    }
    free(avg);
    free(labs);
    if (rc) return rc;
    /* every rank evaluated its shard: the job's counts */
    double v[4] = {(double)c1, (double)c5, (double)seen, loss_sum};
    if ((rc = dist_sum(tr, v, 4, e))) return rc;
    c1 = (long)v[0];
    c5 = (long)v[1];
    seen = (long)v[2];
    loss_sum = v[3];
    r->samples = seen;
    r->top1 = seen ? 100.0 * (double)c1 / (double)seen : 0;
    r->top5 = seen ? 100.0 * (double)c5 / (double)seen : 0;
    r->loss = seen ? loss_sum / (double)seen : 0;
    return 0;
}

static void flip_w(int c, int h, int w, float *x)
{
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < h; y++) {
            float *row = x + ((size_t)ch * h + y) * w;
            for (int i = 0, j = w - 1; i < j; i++, j--) {
                float t = row[i];
                row[i] = row[j];
                row[j] = t;
            }
        }
}

/* One network pass on a (3,h,w) input: logits (K,oh,ow) into out, upsampled
 * once inside the graph from the feature map. */
static int seg_pass(trainer *tr, const float *in, int h, int w, int oh, int ow, float *out,
                    iabn_err *e)
{
    iabn_session *gs = NULL;
    size_t ohw = (size_t)oh * ow;
    int32_t *lab = malloc(ohw * sizeof *lab);
    if (!lab) return iabn_err_set(e, IABN_ENOMEM, "out of memory evaluating");
    for (size_t i = 0; i < ohw; i++) lab[i] = IABN_IGNORE_LABEL;
    tr->mcfg.out_h = oh == h && ow == w ? 0 : oh;
    tr->mcfg.out_w = oh == h && ow == w ? 0 : ow;
    int rc = eval_graph(tr, 1, h, w, &gs, e);
    tr->mcfg.out_h = tr->mcfg.out_w = 0;
    if (!rc) rc = iabn_exec_set(gs->exec, gs->input, in, (size_t)3 * h * w * sizeof *in, e);
    if (!rc) rc = iabn_exec_set(gs->exec, gs->labels, lab, ohw * sizeof *lab, e);
    if (!rc) rc = iabn_exec_run(gs->exec, e);
    if (!rc) rc = gset_fetch(gs, gs->logits, &tr->host, &tr->host_cap, e);
    if (!rc) memcpy(out, tr->host, (size_t)tr->classes * ohw * sizeof *out);
    free(lab);
    return rc;
}

/* Window starts along a side of length n for windows of k: evenly spaced,
 * stride at most 2k/3, the last flush with the end. */
static int window_starts(int n, int k, int *starts, int max)
{
    if (n <= k) {
        starts[0] = 0;
        return 1;
    }
    int stride = 2 * k / 3 > 0 ? 2 * k / 3 : 1;
    int cnt = (n - k + stride - 1) / stride + 1;
    if (cnt > max) cnt = max;
    for (int i = 0; i < cnt; i++) starts[i] = (int)lround((double)i * (n - k) / (cnt - 1));
    return cnt;
}

/* Logits (K,h,w) of a (3,h,w) input by sliding windows. */
static int seg_windowed(trainer *tr, const float *in, int h, int w, float *out, iabn_err *e)
{
    int k = tr->classes, th = tr->win_h, tw = tr->win_w;
    if (th > h) th = h;
    if (tw > w) tw = w;
    enum { MAXW = 256 };
    int ys[MAXW], xs[MAXW];
    int ny = window_starts(h, th, ys, MAXW), nx = window_starts(w, tw, xs, MAXW);
    float *crop = malloc((size_t)3 * th * tw * sizeof *crop);
    float *lg = malloc((size_t)k * th * tw * sizeof *lg);
    float *cnt = calloc((size_t)h * w, sizeof *cnt);
    int rc = !crop || !lg || !cnt ? iabn_err_set(e, IABN_ENOMEM, "out of memory evaluating") : 0;
    if (!rc) memset(out, 0, (size_t)k * h * w * sizeof *out);
    for (int a = 0; a < ny && !rc; a++)
        for (int b = 0; b < nx && !rc; b++) {
            for (int c = 0; c < 3; c++)
                for (int y = 0; y < th; y++)
                    memcpy(crop + ((size_t)c * th + y) * tw,
                           in + ((size_t)c * h + ys[a] + y) * w + xs[b], (size_t)tw * sizeof *crop);
            rc = seg_pass(tr, crop, th, tw, th, tw, lg, e);
            for (int c = 0; !rc && c < k; c++)
                for (int y = 0; y < th; y++) {
                    float *o = out + ((size_t)c * h + ys[a] + y) * w + xs[b];
                    const float *l = lg + ((size_t)c * th + y) * tw;
                    for (int x = 0; x < tw; x++) o[x] += l[x];
                }
            for (int y = 0; !rc && y < th; y++)
                for (int x = 0; x < tw; x++) cnt[(size_t)(ys[a] + y) * w + xs[b] + x] += 1.f;
        }
    for (int c = 0; !rc && c < k; c++)
        for (size_t i = 0; i < (size_t)h * w; i++) out[(size_t)c * h * w + i] /= cnt[i];
    free(crop);
    free(lg);
    free(cnt);
    return rc;
}

/* acc += softmax over the K channels of lg (K,hw), per pixel */
static void add_softmax(int k, size_t hw, const float *lg, float *acc)
{
    for (size_t i = 0; i < hw; i++) {
        float m = lg[i];
        for (int c = 1; c < k; c++)
            if (lg[(size_t)c * hw + i] > m) m = lg[(size_t)c * hw + i];
        double sum = 0;
        for (int c = 0; c < k; c++) sum += exp((double)lg[(size_t)c * hw + i] - m);
        for (int c = 0; c < k; c++)
            acc[(size_t)c * hw + i] += (float)(exp((double)lg[(size_t)c * hw + i] - m) / sum);
    }
}

int seg_logits(trainer *tr, const float *img, int h, int w, const float *scales, int ns,
               int flip, float *acc, iabn_err *e)
{
    int k = tr->classes;
    size_t hw = (size_t)h * w;
    memset(acc, 0, (size_t)k * hw * sizeof *acc);
    int passes = 0, rc = 0;
    for (int si = 0; si < ns && !rc; si++) {
        /* rint: round half to even, as the reference's Python round() */
        int hs = (int)rint(h * scales[si]), ws = (int)rint(w * scales[si]);
        if (hs < 8) hs = 8;
        if (ws < 8) ws = 8;
        int windows = tr->win_h > 0 && tr->win_w > 0 && (hs > tr->win_h || ws > tr->win_w);
        float *in = malloc((size_t)3 * hs * ws * sizeof *in);
        float *out = windows ? malloc((size_t)k * hs * ws * sizeof *out) : NULL;
        float *lg = malloc((size_t)k * hw * sizeof *lg);
        if (!in || (windows && !out) || !lg)
            rc = iabn_err_set(e, IABN_ENOMEM, "out of memory evaluating");
        for (int f = 0; f <= (flip ? 1 : 0) && !rc; f++) {
            if (hs == h && ws == w) memcpy(in, img, (size_t)3 * hw * sizeof *in);
            else iabn_bilinear_fwd(1, 3, h, w, IABN_LAYOUT_NCHW, hs, ws, img, in);
            if (f) flip_w(3, hs, ws, in);
            if (!windows) {
                /* the reference: the 1/8 logits upsampled once, to the image */
                rc = seg_pass(tr, in, hs, ws, h, w, lg, e);
            } else {
                rc = seg_windowed(tr, in, hs, ws, out, e);
                if (!rc && (hs != h || ws != w))
                    iabn_bilinear_fwd(1, k, hs, ws, IABN_LAYOUT_NCHW, h, w, out, lg);
                else if (!rc) memcpy(lg, out, (size_t)k * hw * sizeof *lg);
            }
            if (rc) break;
            if (f) flip_w(k, h, w, lg);
            add_softmax(k, hw, lg, acc);
            passes++;
        }
        free(in);
        free(out);
        free(lg);
    }
    if (!rc && passes > 1) iabn_scale((size_t)k * hw, 1.f / (float)passes, acc);
    return rc;
}

static int eval_segment(trainer *tr, iabn_loader *ld, int flip, const float *scales, int ns,
                        eval_result *r, iabn_err *e)
{
    const float one = 1.f;
    if (ns < 1) {
        scales = &one;
        ns = 1;
    }
    iabn_confusion cm;
    if (iabn_confusion_init(&cm, tr->classes)) return iabn_err_set(e, IABN_ENOMEM, "out of memory");
    int rc = iabn_loader_start_epoch(ld, 0, e);
    float *acc = NULL;
    int32_t *pred = NULL, *gt = NULL;
    long seen = 0;
    while (!rc) {
        iabn_batch *b = NULL;
        rc = iabn_loader_next(ld, &b, e);
        if (rc == 1) {
            rc = 0;
            break;
        }
        if (rc) break;
        int h = b->height, w = b->width;
        size_t hw = (size_t)h * w;
        for (int i = 0; i < b->n && !rc; i++) {
            if (b->indices[i] < 0) { /* left out: undecodable */
                r->skipped++;
                continue;
            }
            int vh = b->valid_hw ? b->valid_hw[2 * i] : h, vw = b->valid_hw ? b->valid_hw[2 * i + 1] : w;
            free(acc);
            free(pred);
            free(gt);
            acc = malloc((size_t)tr->classes * (size_t)vh * vw * sizeof *acc);
            pred = malloc((size_t)vh * vw * sizeof *pred);
            gt = malloc((size_t)vh * vw * sizeof *gt);
            float *img = malloc((size_t)3 * vh * vw * sizeof *img);
            if (!acc || !pred || !gt || !img) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
            /* the valid window of the padded canvas */
            for (int c = 0; !rc && c < 3; c++)
                for (int y = 0; y < vh; y++)
                    memcpy(img + ((size_t)c * vh + y) * vw,
                           b->images + (((size_t)i * 3 + c) * h + y) * w, (size_t)vw * sizeof *img);
            for (int y = 0; !rc && y < vh; y++)
                memcpy(gt + (size_t)y * vw, b->labels + (size_t)i * hw + (size_t)y * w,
                       (size_t)vw * sizeof *gt);
            if (!rc) rc = seg_logits(tr, img, vh, vw, scales, ns, flip, acc, e);
            if (!rc && !iabn_all_finite((size_t)tr->classes * vh * vw, acc)) {
                r->nonfinite++; /* never counted as a prediction */
                seen++;
            } else if (!rc) {
                iabn_argmax_channels(tr->classes, (size_t)vh * vw, acc, pred);
                iabn_confusion_add(&cm, gt, pred, (size_t)vh * vw);
                seen++;
            }
            free(img);
        }
        iabn_loader_release(ld, b);
    }
    free(acc);
    free(pred);
    free(gt);
    if (!rc && tr->world > 1) {
        /* every rank evaluated its shard: the job's confusion matrix (exact in
         * double up to 2^53 pixels per cell) */
        size_t kk = (size_t)tr->classes * (size_t)tr->classes;
        double *v = malloc((kk + 1) * sizeof *v);
        if (!v) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
        for (size_t i = 0; !rc && i < kk; i++) v[i] = (double)cm.m[i];
        if (!rc) v[kk] = (double)seen;
        if (!rc) rc = dist_sum(tr, v, kk + 1, e);
        for (size_t i = 0; !rc && i < kk; i++) cm.m[i] = (uint64_t)v[i];
        if (!rc) seen = (long)v[kk];
        free(v);
    }
    if (!rc) {
        r->iou = malloc((size_t)tr->classes * sizeof *r->iou);
        double pa = 0;
        r->miou = 100.0 * iabn_confusion_miou(&cm, r->iou, &pa);
        r->pixel_acc = 100.0 * pa;
        r->samples = seen;
    }
    iabn_confusion_free(&cm);
    return rc;
}

/* A metric over non-finite outputs means nothing: an error naming how many. */
static int check_finite(const eval_result *r, iabn_err *e)
{
    if (!r->nonfinite) return 0;
    return iabn_err_set(e, IABN_ENUM,
                        "%ld of %ld samples gave NaN or Inf outputs (counted as wrong): the "
                        "weights or the input are broken, the metric is not reported",
                        r->nonfinite, r->samples);
}

int run_evaluation(trainer *tr, iabn_loader *ld, int ten, int flip, const float *scales,
                   int nscales, int verbose, eval_result *r, iabn_err *e)
{
    memset(r, 0, sizeof *r);
    int rc = tr->task == IABN_TASK_CLASSIFY ? eval_classify(tr, ld, ten, r, e)
                                            : eval_segment(tr, ld, flip, scales, nscales, r, e);
    if (tr->task == IABN_TASK_CLASSIFY) return rc ? rc : check_finite(r, e);
    if (!rc) rc = check_finite(r, e);
    if (!rc && verbose && r->iou) {
        const iabn_dataset *ds = tr->dval;
        trainer_say(tr, "  %-28s %8s", "class", "IoU %");
        for (int c = 0; c < tr->classes; c++) {
            const char *name = ds && ds->class_names ? ds->class_names[c] : "?";
            if (isnan(r->iou[c])) trainer_say(tr, "  %-28s %8s", name, "-");
            else trainer_say(tr, "  %-28s %8.2f", name, 100.0 * r->iou[c]);
        }
    }
    return rc;
}

int iabn_trainer_evaluate(const iabn_eval_opts *o, iabn_train_result *res, iabn_err *e)
{
    trainer tr;
    memset(&tr, 0, sizeof tr);
    memset(res, 0, sizeof *res);
    tr.task = o->task;
    tr.win_h = o->window_h;
    tr.win_w = o->window_w;
    tr.pool_set = o->pool_set;
    tr.pool_h = o->pool_h;
    tr.pool_w = o->pool_w;
    tr.log = o->log;
    tr.user = o->user;
    tr.comm = o->comm;
    tr.rank = iabn_comm_rank(o->comm); /* rank 0 reports */
    tr.world = iabn_comm_size(o->comm);
    iabn_config_defaults(&tr.cfg);
    if (o->config) tr.cfg = *o->config;
    int rc = !o->config && o->config_path ? iabn_config_load(&tr.cfg, o->config_path, e) : 0;
    if (!rc) rc = iabn_config_check(&tr.cfg, e);
    if (rc) return rc;
    if (o->threads > 0) iabn_set_num_threads(o->threads);
    const char *split = o->split ? o->split
                        : o->dataset == IABN_DATASET_VISTAS ? "validation" : "val";
    if ((rc = iabn_device_open_rank(o->device, iabn_comm_local_rank(o->comm), tr.world, &tr.dev,
                                    e)))
        return rc;
    if ((rc = iabn_dataset_open(o->dataset, o->data_dir, split, &tr.dval, e))) goto out;
    tr.classes = tr.dval->num_classes;
    if (tr.cfg.classes && tr.cfg.classes != tr.classes) {
        rc = iabn_err_set(e, IABN_EINVAL, "network.classes is %d but %s has %d classes",
                          tr.cfg.classes, o->data_dir, tr.classes);
        goto out;
    }
    if (!iabn_model_exists(tr.cfg.arch)) {
        rc = iabn_err_set(e, IABN_EINVAL, "network.arch %s is not a model", tr.cfg.arch);
        goto out;
    }
    rc = trainer_load_weights(&tr, o->checkpoint,
                              o->task == IABN_TASK_SEGMENT ? 64 : (o->crop > 0 ? o->crop : tr.cfg.crop_val), e);
    if (rc) goto out;
    iabn_loader_cfg lc;
    iabn_loader_cfg_defaults(&lc, IABN_TF_CLASSIFY_EVAL);
    fill_transform(&tr, 0, &lc.transform);
    if (o->task == IABN_TASK_CLASSIFY) {
        if (o->crop > 0) lc.transform.out_h = lc.transform.out_w = o->crop;
        if (o->scale != 0) lc.transform.scale = o->scale;
        lc.transform.ten_crop = o->ten_crops;
        lc.batch_size = o->batch > 0 ? o->batch : 32;
    } else {
        if (o->longest > 0) lc.transform.scale = o->longest;
        lc.batch_size = 1;
    }
    lc.workers = o->workers > 0 ? o->workers : 2;
    lc.shuffle = 0;
    lc.drop_last = 0;
    lc.leave_out = 1;
    lc.strict = o->strict;
    lc.rank = tr.rank; /* sharded; the counts are summed over the ranks */
    lc.world_size = tr.world;
    iabn_device_loader_cfg(&tr.dev, &lc);
    if ((rc = iabn_loader_open(&lc, tr.dval, &tr.lval, e))) goto out;
    eval_result r;
    rc = run_evaluation(&tr, tr.lval, o->ten_crops, o->flip, o->scales, o->nscales, o->verbose, &r, e);
    if (!rc) {
        if (o->task == IABN_TASK_CLASSIFY) {
            trainer_say(&tr, "%s on %s (%ld images, %ld skipped%s): top-1 %.2f%%  top-5 %.2f%%  loss %.4f",
                   o->checkpoint, o->data_dir, r.samples, r.skipped, o->ten_crops ? ", ten crops" : "",
                   r.top1, r.top5, r.loss);
            res->last_metric = r.top1;
            res->last_top5 = r.top5;
        } else {
            trainer_say(&tr, "%s on %s (%ld images, %ld skipped): mIoU %.2f%%  pixel accuracy %.2f%%", o->checkpoint,
                   o->data_dir, r.samples, r.skipped, r.miou, r.pixel_acc);
            res->last_metric = r.miou;
            res->last_pixel_acc = r.pixel_acc;
        }
    }
    eval_result_free(&r);
out:
    for (int i = 0; i < 2; i++) iabn_session_free(&tr.evals[i]);
    if (tr.lval) iabn_loader_close(tr.lval);
    iabn_dataset_free(tr.dval);
    iabn_store_free(tr.s);
    free(tr.host);
    iabn_device_close(&tr.dev);
    return rc;
}

/* ---- prediction -------------------------------------------------------------------- */

struct iabn_predictor {
    trainer tr;
};

int iabn_predictor_open(const char *checkpoint, const iabn_predict_opts *o,
                        iabn_predictor **out, iabn_err *e)
{
    *out = NULL;
    iabn_predictor *p = calloc(1, sizeof *p);
    if (!p) return iabn_err_set(e, IABN_ENOMEM, "out of memory opening %s", checkpoint);
    trainer *tr = &p->tr;
    tr->win_h = o->window_h;
    tr->win_w = o->window_w;
    tr->pool_set = o->pool_set;
    tr->pool_h = o->pool_h;
    tr->pool_w = o->pool_w;
    iabn_st_file *f = NULL;
    int rc = 0;
    if (o->config) tr->cfg = *o->config;
    else rc = iabn_st_load(checkpoint, &f, e);
    if (!rc && !o->config) {
        const char *cj = iabn_st_meta(f, "config");
        iabn_config_defaults(&tr->cfg);
        if (!cj)
            rc = iabn_err_set(e, IABN_EFORMAT,
                              "%s holds no training configuration (not an iabn checkpoint)",
                              checkpoint);
        else rc = iabn_config_parse(&tr->cfg, cj, checkpoint, e);
        iabn_st_free(f);
    }
    if (!rc && !iabn_model_is_segmentation(tr->cfg.arch))
        rc = iabn_err_set(e, IABN_EINVAL, "%s: %s is not a segmentation network", checkpoint,
                          tr->cfg.arch);
    if (!rc) {
        tr->task = IABN_TASK_SEGMENT;
        tr->classes = tr->cfg.classes;
        rc = iabn_device_open(o->device, &tr->dev, e);
    }
    if (!rc) rc = trainer_load_weights(tr, checkpoint, 64, e);
    if (rc) {
        iabn_predictor_close(p);
        return rc;
    }
    *out = p;
    return 0;
}

void iabn_predictor_close(iabn_predictor *p)
{
    if (!p) return;
    trainer *tr = &p->tr;
    for (int i = 0; i < 2; i++) iabn_session_free(&tr->evals[i]);
    iabn_store_free(tr->s);
    free(tr->host);
    iabn_device_close(&tr->dev);
    free(p);
}

const iabn_config *iabn_predictor_config(const iabn_predictor *p) { return &p->tr.cfg; }

int iabn_predictor_logits(iabn_predictor *p, const float *img, int h, int w,
                          const float *scales, int ns, int flip, float *acc, iabn_err *e)
{
    return seg_logits(&p->tr, img, h, w, scales, ns, flip, acc, e);
}
