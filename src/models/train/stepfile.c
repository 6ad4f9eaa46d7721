/* stepfile.c: a step on safetensors inputs, its results to safetensors
 * (see stepfile.h). */
#include "models/train/stepfile.h"

#include <stdlib.h>
#include <string.h>

#include "tensor/device.h"

/* The labels of X as int32 with their range checked. */
static int read_target(const iabn_st_tensor *t, int classes, int32_t *dst, size_t count,
                       iabn_err *e)
{
    int64_t *tmp = malloc(count * sizeof *tmp);
    if (!tmp) return iabn_err_set(e, IABN_ENOMEM, "out of memory reading target");
    int rc = iabn_st_read_i64(t, tmp, count, e);
    for (size_t i = 0; !rc && i < count; i++) {
        if (tmp[i] != 255 && (tmp[i] < 0 || tmp[i] >= classes))
            rc = iabn_err_set(e, IABN_EINVAL,
                              "target[%zu] = %lld: not a class of %d (or 255, ignored)", i,
                              (long long)tmp[i], classes);
        dst[i] = (int32_t)tmp[i];
    }
    free(tmp);
    return rc;
}

static int add_param(iabn_st_writer *w, const char *name, const iabn_param *p, const float *data,
                     iabn_err *e)
{
    int64_t shape[IABN_MAX_DIMS];
    for (int d = 0; d < p->nd; d++) shape[d] = p->shape[d];
    return iabn_st_writer_add(w, name, IABN_F32, p->nd, shape, data, e);
}

/* logits, loss, grad.<name>, running statistics */
static int write_out(const iabn_stepfile_opts *o, iabn_graph *g, iabn_exec *ex, int logits, int loss,
                     const iabn_model_cfg *cfg, iabn_err *e)
{
    iabn_store *s = iabn_graph_store(g);
    iabn_st_writer *w = iabn_st_writer_new();
    if (!w) return iabn_err_set(e, IABN_ENOMEM, "out of memory writing %s", o->output);
    const iabn_tensor *lt = iabn_graph_t(g, logits);
    size_t cap = lt->nbytes / sizeof(float);
    for (int i = 0; i < iabn_store_count(s); i++)
        if (iabn_store_get(s, i)->count > cap) cap = iabn_store_get(s, i)->count;
    float *host = malloc(cap * sizeof *host);
    int rc = host ? 0 : iabn_err_set(e, IABN_ENOMEM, "out of memory writing %s", o->output);
    if (!rc) rc = iabn_exec_get(ex, logits, host, lt->nbytes, e);
    if (!rc) {
        int64_t shape[IABN_MAX_DIMS];
        for (int d = 0; d < lt->nd; d++) shape[d] = lt->shape[d];
        rc = iabn_st_writer_add(w, "logits", IABN_F32, lt->nd, shape, host, e);
    }
    if (!rc && loss >= 0) {
        float l;
        rc = iabn_exec_get(ex, loss, &l, sizeof l, e);
        if (!rc) rc = iabn_st_writer_add(w, "loss", IABN_F32, 0, NULL, &l, e);
    }
    for (int i = 0; !rc && i < iabn_store_count(s); i++) {
        const iabn_param *p = iabn_store_get(s, i);
        if (p->kind == IABN_P_BUFFER) {
            rc = iabn_store_read(s, i, host, e);
            if (!rc) rc = add_param(w, p->name, p, host, e);
        } else if (o->train && p->grad && !p->frozen) {
            char name[IABN_NAME_LEN + 8];
            snprintf(name, sizeof name, "grad.%s", p->name);
            rc = iabn_store_read_grad(s, i, host, e);
            if (!rc) rc = add_param(w, name, p, host, e);
        }
    }
    if (!rc) rc = iabn_st_writer_meta(w, "arch", cfg->arch, e);
    if (!rc) rc = iabn_st_writer_meta(w, "bn", iabn_bn_mode_name(cfg->bn), e);
    if (!rc) rc = iabn_st_writer_meta(w, "mode", o->train ? "train" : "eval", e);
    if (!rc) rc = iabn_st_writer_save(w, o->output, e);
    free(host);
    iabn_st_writer_free(w);
    return rc;
}

int iabn_stepfile_run(const iabn_stepfile_opts *o, iabn_err *e)
{
    const iabn_model_cfg *mc = o->model;
    int rc = 0;
    iabn_st_file *in = NULL;
    iabn_session ss = {0};
    float *xbuf = NULL;
    int32_t *lbuf = NULL;
    iabn_device dev = {0};
    if ((rc = iabn_device_open(o->device, &dev, e))) return rc;
    if ((rc = iabn_st_load(o->input, &in, e))) goto done;
    const iabn_st_tensor *xt = iabn_st_find(in, "input"), *tt = iabn_st_find(in, "target");
    if (!xt || xt->dtype != IABN_F32 || xt->ndim != 4 || xt->shape[1] != 3) {
        rc = iabn_err_set(e, IABN_EINVAL, "%s: needs `input`, float32 N,3,H,W", o->input);
        goto done;
    }
    if (o->train && !tt) {
        rc = iabn_err_set(e, IABN_EINVAL, "%s: training needs `target` (the labels)", o->input);
        goto done;
    }
    int xs[4] = {(int)xt->shape[0], 3, (int)xt->shape[2], (int)xt->shape[3]};
    int seg = iabn_model_is_segmentation(mc->arch);
    if (tt) {
        int ok = tt->ndim == (seg ? 3 : 1) && tt->shape[0] == xs[0] &&
                 (!seg || (tt->shape[1] == xs[2] && tt->shape[2] == xs[3]));
        if (!ok) {
            rc = iabn_err_set(e, IABN_EINVAL, "%s: `target` must be %s", o->input,
                              seg ? "N,H,W like the input" : "N (one label per image)");
            goto done;
        }
    }
    iabn_session_cfg sc;
    iabn_session_cfg_defaults(&sc);
    sc.model_cfg = mc;
    sc.train = o->train;
    sc.batch = xs[0];
    sc.height = xs[2];
    sc.width = xs[3];
    sc.loss = tt ? IABN_LOSS_SOFTMAX_XENT : IABN_LOSS_NONE;
    sc.keep_logits = 1;
    sc.backend = dev.be;
    sc.layout_mode = o->layout_mode;
    iabn_strategy_opts so = {.allow_offload = 1, .allow_recompute = 1, .lookahead = 1,
                             .budget = o->budget};
    sc.storage = o->storage;
    if (o->storage != IABN_STORAGE_KEEP) {
        if ((rc = iabn_cost_calibrate(&so.cost, dev.be->kind, e))) goto done;
        sc.strategy = &so;
    }
    sc.budget_bytes = o->budget;
    if ((rc = iabn_session_build(&sc, &ss, e))) {
        iabn_err_prefix(e, "%s: ", mc->arch);
        goto done;
    }
    if (o->weights) rc = iabn_weights_load(ss.store, o->weights, 1, e);
    else rc = iabn_model_init(ss.store, mc, o->init_seed, e);
    if (rc) goto done;
    size_t nx = (size_t)xs[0] * 3 * (size_t)xs[2] * (size_t)xs[3];
    xbuf = malloc(nx * sizeof *xbuf);
    if (!xbuf) {
        rc = iabn_err_set(e, IABN_ENOMEM, "out of memory reading the input");
        goto done;
    }
    if ((rc = iabn_st_read_f32(xt, xbuf, nx, e)) ||
        (rc = iabn_session_set_inputs(&ss, xbuf, NULL, e)))
        goto done;
    if (ss.labels >= 0) {
        size_t nl = iabn_graph_t(ss.graph, ss.labels)->nbytes / sizeof(int32_t);
        lbuf = malloc(nl * sizeof *lbuf);
        if (!lbuf) {
            rc = iabn_err_set(e, IABN_ENOMEM, "out of memory reading the target");
            goto done;
        }
        if ((rc = read_target(tt, mc->classes, lbuf, nl, e)) ||
            (rc = iabn_session_set_inputs(&ss, NULL, lbuf, e))) {
            iabn_err_prefix(e, "%s: ", o->input);
            goto done;
        }
    }
    iabn_exec_set_seed(ss.exec, o->seed);
    iabn_exec_set_check(ss.exec, o->check);
    if ((rc = iabn_store_zero_grads(ss.store, e)) || (rc = iabn_session_run(&ss, e))) goto done;
    rc = write_out(o, ss.graph, ss.exec, ss.logits, ss.loss, mc, e);
done:
    free(xbuf);
    free(lbuf);
    iabn_session_free(&ss);
    iabn_st_free(in);
    iabn_device_close(&dev);
    return rc;
}

