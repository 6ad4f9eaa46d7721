/* train_eval.c: evaluation over a loader, shared by validation during
 * training, `iabn eval` and `iabn segeval`.  Classification: top-1 / top-5
 * (ten-crop: logits averaged over the crops).  Segmentation: the confusion
 * matrix over all images, with optional test-time scales and flip (logits
 * averaged at the image's size). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/train/segmetrics.h"
#include "models/train/train_internal.h"

/* An evaluation graph for (n, h, w), reusing one of two cached ones. */
static int eval_graph(trainer *tr, int n, int h, int w, iabn_session **out, iabn_err *e)
{
    for (int i = 0; i < 2; i++)
        if (tr->evals[i].graph && tr->evals[i].batch == n && tr->evals[i].height == h && tr->evals[i].width == w) {
            *out = &tr->evals[i];
            return 0;
        }
    iabn_session_free(&tr->evals[1]);
    tr->evals[1] = tr->evals[0];
    memset(&tr->evals[0], 0, sizeof tr->evals[0]);
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
            c1 += a;
            c5 += bb;
            seen += b->n;
            loss_sum += (double)lossv * b->n;
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

/* Logits of one image (3,h,w) averaged over scales and flips, at (K,h,w). */
int seg_logits(trainer *tr, const float *img, int h, int w, const float *scales, int ns,
                      int flip, float *acc, iabn_err *e)
{
    int k = tr->classes;
    size_t hw = (size_t)h * w;
    memset(acc, 0, (size_t)k * hw * sizeof *acc);
    int passes = 0, rc = 0;
    for (int si = 0; si < ns && !rc; si++) {
        int hs = (int)lround(h * scales[si]), ws = (int)lround(w * scales[si]);
        if (hs < 8) hs = 8;
        if (ws < 8) ws = 8;
        float *in = malloc((size_t)3 * hs * ws * sizeof *in);
        float *lg = malloc((size_t)k * hw * sizeof *lg);
        int32_t *lab = malloc((size_t)hs * ws * sizeof *lab);
        if (!in || !lg || !lab) rc = iabn_err_set(e, IABN_ENOMEM, "out of memory evaluating");
        for (size_t i = 0; !rc && i < (size_t)hs * ws; i++) lab[i] = IABN_IGNORE_LABEL;
        for (int f = 0; f <= (flip ? 1 : 0) && !rc; f++) {
            if (hs == h && ws == w) memcpy(in, img, (size_t)3 * hw * sizeof *in);
            else iabn_bilinear_fwd(1, 3, h, w, hs, ws, img, in);
            if (f) flip_w(3, hs, ws, in);
            iabn_session *gs = NULL;
            rc = eval_graph(tr, 1, hs, ws, &gs, e);
            if (!rc) rc = iabn_exec_set(gs->exec, gs->input, in, (size_t)3 * hs * ws * 4, e);
            if (!rc) rc = iabn_exec_set(gs->exec, gs->labels, lab, (size_t)hs * ws * 4, e);
            if (!rc) rc = iabn_exec_run(gs->exec, e);
            if (!rc) rc = gset_fetch(gs, gs->logits, &tr->host, &tr->host_cap, e);
            if (rc) break;
            float *out = tr->host;
            if (f) flip_w(k, hs, ws, out);
            if (hs == h && ws == w) memcpy(lg, out, (size_t)k * hw * sizeof *lg);
            else iabn_bilinear_fwd(1, k, hs, ws, h, w, out, lg);
            iabn_axpy((size_t)k * hw, 1.f, lg, acc);
            passes++;
        }
        free(in);
        free(lg);
        free(lab);
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
            if (!rc) {
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

int run_evaluation(trainer *tr, iabn_loader *ld, int ten, int flip, const float *scales,
                   int nscales, int verbose, eval_result *r, iabn_err *e)
{
    memset(r, 0, sizeof *r);
    if (tr->task == IABN_TASK_CLASSIFY) return eval_classify(tr, ld, ten, r, e);
    int rc = eval_segment(tr, ld, flip, scales, nscales, r, e);
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
    tr.log = o->log;
    tr.user = o->user;
    tr.comm = o->comm;
    tr.rank = iabn_comm_rank(o->comm); /* rank 0 reports */
    tr.world = iabn_comm_size(o->comm);
    iabn_config_defaults(&tr.cfg);
    int rc = o->config_path ? iabn_config_load(&tr.cfg, o->config_path, e) : 0;
    if (!rc) rc = iabn_config_check(&tr.cfg, e);
    if (rc) return rc;
    if (o->threads > 0) iabn_set_num_threads(o->threads);
    const char *split = o->split ? o->split
                        : o->dataset == IABN_DATASET_VISTAS ? "validation" : "val";
    if ((rc = iabn_device_open(o->device, &tr.dev, e))) return rc;
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
    lc.rank = tr.rank; /* sharded; the counts are summed over the ranks */
    lc.world_size = tr.world;
    iabn_device_loader_cfg(&tr.dev, &lc);
    if ((rc = iabn_loader_open(&lc, tr.dval, &tr.lval, e))) goto out;
    eval_result r;
    rc = run_evaluation(&tr, tr.lval, o->ten_crops, o->flip, o->scales, o->nscales, o->verbose, &r, e);
    if (!rc) {
        if (o->task == IABN_TASK_CLASSIFY) {
            trainer_say(&tr, "%s on %s (%ld images%s): top-1 %.2f%%  top-5 %.2f%%  loss %.4f",
                   o->checkpoint, o->data_dir, r.samples, o->ten_crops ? ", ten crops" : "",
                   r.top1, r.top5, r.loss);
            res->last_metric = r.top1;
            res->last_top5 = r.top5;
        } else {
            trainer_say(&tr, "%s on %s (%ld images): mIoU %.2f%%  pixel accuracy %.2f%%", o->checkpoint,
                   o->data_dir, r.samples, r.miou, r.pixel_acc);
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
