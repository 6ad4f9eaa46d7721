/* cmd_step.c: `iabn step` (usage in cmd_step.h and usage() below).
 *
 * It exists so that another framework can check ours tensor by tensor: the
 * caller writes weights and a batch, we write back everything one training
 * step computes before the optimizer would run.  Weights load strictly (a
 * parity run against a half-loaded model would compare nothing), and labels
 * are range-checked here because a label the loss kernel does not expect is
 * a caller's mistake that deserves a message, not a wrong number. */
#include "tools/cmd_step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iabn.h"
#include "tools/options.h"
#include "tensor/device.h"

typedef struct step_opts {
    const char *arch, *input, *weights, *out, *bn, *act, *device, *strategy;
    double budget;
    float act_param;
    int have_act_param;
    int classes, train, threads, no_dropout, no_input_3x3, dilation, frozen_bn, check;
    unsigned long long seed, init_seed;
} step_opts;

/* The option table's flags into step_opts; 1 after --help, 2 on bad usage. */
static int parse(int argc, char **argv, step_opts *o)
{
    memset(o, 0, sizeof *o);
    o->train = 1;
    o->classes = -1;
    o->init_seed = 1;
    iabn_args a;
    int rc = iabn_args_parse(&a, IABN_C_STEP, argc, argv);
    if (rc) return rc;
    const iabn_optval *v = a.v;
    o->arch = a.npos ? a.pos[0] : v[IABN_O_MODEL].s;
    o->input = v[IABN_O_INPUT].s;
    o->weights = v[IABN_O_WEIGHTS].s;
    o->out = v[IABN_O_OUTPUT].s;
    o->bn = v[IABN_O_BN].s;
    o->act = v[IABN_O_ACT].s;
    o->device = v[IABN_O_DEVICE].s;
    o->strategy = v[IABN_O_STRATEGY].s;
    if (v[IABN_O_BUDGET].set) o->budget = v[IABN_O_BUDGET].f;
    o->have_act_param = v[IABN_O_ACT_PARAM].set;
    o->act_param = (float)v[IABN_O_ACT_PARAM].f;
    if (v[IABN_O_CLASSES].set) o->classes = (int)v[IABN_O_CLASSES].i;
    if (v[IABN_O_THREADS].set) o->threads = (int)v[IABN_O_THREADS].i;
    if (v[IABN_O_SEED].set) o->seed = (unsigned long long)v[IABN_O_SEED].i;
    if (v[IABN_O_INIT_SEED].set) o->init_seed = (unsigned long long)v[IABN_O_INIT_SEED].i;
    if (v[IABN_O_TRAIN_MODE].set && v[IABN_O_EVAL_MODE].set) {
        fprintf(stderr, "iabn step: --train or --eval, not both\n");
        return 2;
    }
    o->train = !v[IABN_O_EVAL_MODE].set;
    o->no_dropout = v[IABN_O_NO_DROPOUT].set;
    o->no_input_3x3 = v[IABN_O_NO_INPUT_3X3].set;
    o->dilation = v[IABN_O_DILATED].set;
    o->frozen_bn = v[IABN_O_FROZEN_BN].set;
    o->check = v[IABN_O_CHECK].set;
    if (!o->arch || !o->input || !o->out) {
        fprintf(stderr, "iabn step: MODEL, --input and --output are required (iabn step --help)\n");
        return 2;
    }
    if (!iabn_model_exists(o->arch)) {
        fprintf(stderr, "iabn step: unknown model '%s' (iabn mem --list)\n", o->arch);
        return 2;
    }
    return 0;
}

static int config(const step_opts *o, iabn_model_cfg *cfg, iabn_err *e)
{
    *cfg = iabn_model_defaults(o->arch);
    if (o->bn && iabn_bn_mode_parse(o->bn, &cfg->bn, e)) return iabn_err_prefix(e, "--bn: ");
    if (o->act) {
        if (iabn_act_parse(o->act, &cfg->act.kind, e)) return iabn_err_prefix(e, "--act: ");
        cfg->act.param = iabn_act_default_param(cfg->act.kind);
    }
    if (o->have_act_param) cfg->act.param = o->act_param;
    if (o->classes > 0) cfg->classes = o->classes;
    cfg->no_dropout = o->no_dropout;
    if (o->no_input_3x3) cfg->input_3x3 = 0;
    cfg->dilation = o->dilation;
    cfg->frozen_bn = o->frozen_bn;
    return 0;
}

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
static int write_out(const step_opts *o, iabn_graph *g, iabn_exec *ex, int logits, int loss,
                     const iabn_model_cfg *cfg, iabn_err *e)
{
    iabn_store *s = iabn_graph_store(g);
    iabn_st_writer *w = iabn_st_writer_new();
    if (!w) return iabn_err_set(e, IABN_ENOMEM, "out of memory writing %s", o->out);
    const iabn_tensor *lt = iabn_graph_t(g, logits);
    size_t cap = lt->nbytes / sizeof(float);
    for (int i = 0; i < iabn_store_count(s); i++)
        if (iabn_store_get(s, i)->count > cap) cap = iabn_store_get(s, i)->count;
    float *host = malloc(cap * sizeof *host);
    int rc = host ? 0 : iabn_err_set(e, IABN_ENOMEM, "out of memory writing %s", o->out);
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
    if (!rc) rc = iabn_st_writer_save(w, o->out, e);
    free(host);
    iabn_st_writer_free(w);
    return rc;
}

static int run(const step_opts *o, iabn_err *e)
{
    iabn_model_cfg cfg;
    int rc = config(o, &cfg, e);
    if (rc) return rc;
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
    int seg = iabn_model_is_segmentation(o->arch);
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
    sc.model_cfg = &cfg;
    sc.train = o->train;
    sc.batch = xs[0];
    sc.height = xs[2];
    sc.width = xs[3];
    sc.loss = tt ? IABN_LOSS_SOFTMAX_XENT : IABN_LOSS_NONE;
    sc.keep_logits = 1;
    sc.backend = dev.be;
    iabn_strategy_opts so = {.allow_offload = 1, .allow_recompute = 1, .lookahead = 1};
    if (o->strategy) {
        if ((rc = iabn_storage_parse(o->strategy, &sc.storage, e))) goto done;
        so.budget = o->budget > 0 ? (size_t)o->budget : 0;
        if ((rc = iabn_cost_calibrate(&so.cost, dev.be->kind, e))) goto done;
        sc.strategy = &so;
    }
    sc.budget_bytes = o->budget > 0 ? (size_t)o->budget : 0;
    if ((rc = iabn_session_build(&sc, &ss, e))) {
        iabn_err_prefix(e, "%s: ", o->arch);
        goto done;
    }
    if (o->weights) rc = iabn_weights_load(ss.store, o->weights, 1, e);
    else rc = iabn_model_init(ss.store, &cfg, o->init_seed, e);
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
        if ((rc = read_target(tt, cfg.classes, lbuf, nl, e)) ||
            (rc = iabn_session_set_inputs(&ss, NULL, lbuf, e))) {
            iabn_err_prefix(e, "%s: ", o->input);
            goto done;
        }
    }
    iabn_exec_set_seed(ss.exec, o->seed);
    iabn_exec_set_check(ss.exec, o->check);
    if ((rc = iabn_store_zero_grads(ss.store, e)) || (rc = iabn_session_run(&ss, e))) goto done;
    rc = write_out(o, ss.graph, ss.exec, ss.logits, ss.loss, &cfg, e);
done:
    free(xbuf);
    free(lbuf);
    iabn_session_free(&ss);
    iabn_st_free(in);
    iabn_device_close(&dev);
    return rc;
}

int iabn_cmd_step(int argc, char **argv)
{
    step_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    if (o.threads > 0) iabn_set_num_threads(o.threads);
    iabn_err e = {0};
    if (run(&o, &e)) {
        fprintf(stderr, "iabn step: %s\n", e.msg);
        return 1;
    }
    return 0;
}
