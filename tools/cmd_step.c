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
#include "tools/cli.h"
#include "tensor/device.h"

typedef struct step_opts {
    const char *arch, *input, *weights, *out, *bn, *act, *device;
    float act_param;
    int have_act_param;
    int classes, train, threads, no_dropout, no_input_3x3, dilation, frozen_bn, check;
    unsigned long long seed, init_seed;
} step_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: iabn step MODEL --input X.safetensors --out O.safetensors [options]\n"
            "  one forward (and, with --train, one backward of the mean cross-entropy)\n"
            "  of MODEL on X's `input` (float32 N,3,H,W) against X's `target` (int64 or\n"
            "  int32, N or N,H,W for segmentation, 255 ignored); writes `logits`,\n"
            "  `loss`, `grad.<name>` for every parameter and the running statistics\n"
            "  --weights W       safetensors with every model tensor (strict: missing,\n"
            "                    mismatched and extra names are listed as an error);\n"
            "                    default: the reference initialisation, --init-seed\n"
            "  --bn MODE         standard, checkpoint, checkpoint_opt, inplace_abn,\n"
            "                    inplace_abn_ii, inplace_abn_sync (model default)\n"
            "  --act A           leaky_relu, elu, relu, identity; --act-param F (slope /\n"
            "                    alpha, default 0.01 / 1)\n"
            "  --classes N       (model default: 1000, 65 for segmentation)\n"
            "  --train | --eval  (default --train)\n"
            "  --no-dropout      leave out dropout (parity with another framework)\n"
            "  --no-input-3x3    ResNeXt 7x7 stem\n"
            "  --dilation        dilated classification body (output stride 8)\n"
            "  --frozen-bn       BN uses running statistics, gamma / beta frozen\n"
            "  --threads T       CPU threads\n"
            "  --device D        cpu, cuda or cuda:N (cpu): parity of the CUDA backend\n"
            "  --seed S          dropout seed (default 0); --init-seed S (default 1)\n"
            "  --check           verify guard bytes and NaN / Inf after every node\n"
            "models:");
    int n;
    const char *const *names = iabn_model_names(&n);
    for (int i = 0; i < n; i++) fprintf(f, "%s %s", i % 6 ? "" : "\n ", names[i]);
    fprintf(f, "\n");
}

static int parse(int argc, char **argv, step_opts *o)
{
    memset(o, 0, sizeof *o);
    o->train = 1;
    o->classes = -1;
    o->init_seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VALUE()                                                                           \
    do {                                                                                  \
        if (!v) {                                                                         \
            fprintf(stderr, "iabn step: %s needs a value\n", a);                          \
            return 2;                                                                     \
        }                                                                                 \
        i++;                                                                              \
    } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--input")) { VALUE(); o->input = v; }
        else if (!strcmp(a, "--weights")) { VALUE(); o->weights = v; }
        else if (!strcmp(a, "--out")) { VALUE(); o->out = v; }
        else if (!strcmp(a, "--bn")) { VALUE(); o->bn = v; }
        else if (!strcmp(a, "--act")) { VALUE(); o->act = v; }
        else if (!strcmp(a, "--device")) {
            VALUE();
            if (iabn_check_device(v, "step")) return 2;
            o->device = v;
        }
        else if (!strcmp(a, "--act-param")) {
            VALUE();
            char *end;
            o->act_param = strtof(v, &end);
            o->have_act_param = 1;
            if (*end || end == v) {
                fprintf(stderr, "iabn step: --act-param: '%s' is not a number\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--classes") || !strcmp(a, "--threads") || !strcmp(a, "--seed") ||
                   !strcmp(a, "--init-seed")) {
            VALUE();
            char *end;
            long long n = strtoll(v, &end, 10);
            if (*end || end == v || n < 0 || (n == 0 && strcmp(a, "--seed") && strcmp(a, "--init-seed"))) {
                fprintf(stderr, "iabn step: %s: '%s' is not a valid count\n", a, v);
                return 2;
            }
            if (!strcmp(a, "--classes")) o->classes = (int)n;
            else if (!strcmp(a, "--threads")) o->threads = (int)n;
            else if (!strcmp(a, "--seed")) o->seed = (unsigned long long)n;
            else o->init_seed = (unsigned long long)n;
        } else if (!strcmp(a, "--train")) o->train = 1;
        else if (!strcmp(a, "--eval")) o->train = 0;
        else if (!strcmp(a, "--no-dropout")) o->no_dropout = 1;
        else if (!strcmp(a, "--no-input-3x3")) o->no_input_3x3 = 1;
        else if (!strcmp(a, "--dilation")) o->dilation = 1;
        else if (!strcmp(a, "--frozen-bn")) o->frozen_bn = 1;
        else if (!strcmp(a, "--check")) o->check = 1;
        else if (a[0] == '-') {
            fprintf(stderr, "iabn step: unknown option %s (iabn step --help)\n", a);
            return 2;
        } else if (!o->arch) o->arch = a;
        else {
            fprintf(stderr, "iabn step: unexpected argument '%s'\n", a);
            return 2;
        }
#undef VALUE
    }
    if (!o->arch || !o->input || !o->out) {
        fprintf(stderr, "iabn step: MODEL, --input and --out are required (iabn step --help)\n");
        return 2;
    }
    if (!iabn_model_exists(o->arch)) {
        fprintf(stderr, "iabn step: unknown model '%s' (iabn step --help lists them)\n", o->arch);
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
