/* config.c: the experiment JSON (reference schema), table-driven: each section
 * lists its keys with a type and the field they set, so an unknown key, a
 * wrong type or an impossible value is reported with its full path. */
#include "models/train/config.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

typedef enum ktype { K_BOOL, K_INT, K_POSINT, K_FLOAT, K_STR, K_ACT, K_BN, K_STRAT, K_LAYOUT, K_WINO, K_F3, K_INTLIST,
                     K_SCHED, K_MODE, K_OPT, K_PAIR_I, K_PAIR_F, K_SECTION } ktype;

typedef struct key {
    const char *name;
    ktype type;
    size_t off;
    const struct key *sub; /* K_SECTION */
} key;

#define F(field) offsetof(iabn_config, field)

static const key k_params[] = {
    {"step_size", K_POSINT, F(schedule.step_size), NULL},
    {"gamma", K_FLOAT, F(schedule.gamma), NULL},
    {"milestones", K_INTLIST, F(schedule.milestones), NULL},
    {"alpha", K_FLOAT, F(schedule.alpha), NULL},
    {"beta", K_FLOAT, F(schedule.beta), NULL},
    {"power", K_FLOAT, F(schedule.power), NULL},
    {"warmup", K_INT, F(schedule.warmup), NULL},
    {NULL, 0, 0, NULL},
};
static const key k_schedule[] = {
    {"type", K_SCHED, F(schedule.kind), NULL},
    {"mode", K_MODE, F(schedule.per_step), NULL},
    {"epochs", K_POSINT, F(schedule.epochs), NULL},
    {"params", K_SECTION, 0, k_params},
    {NULL, 0, 0, NULL},
};
static const key k_network[] = {
    {"arch", K_STR, F(arch), NULL},
    {"activation", K_ACT, F(act.kind), NULL},
    {"activation_param", K_FLOAT, F(act.param), NULL},
    {"input_3x3", K_BOOL, F(input_3x3), NULL},
    {"bn_mode", K_BN, F(bn_mode), NULL},
    {"strategy", K_STRAT, F(strategy), NULL},
    {"offload_bf16", K_BOOL, F(offload_bf16), NULL},
    {"layout", K_LAYOUT, F(layout), NULL},
    {"winograd", K_WINO, F(winograd), NULL},
    {"classes", K_POSINT, F(classes), NULL},
    {"dilation", K_POSINT, F(dilation), NULL},
    {"weight_init", K_STR, F(weight_init), NULL},
    {"weight_gain_multiplier", K_FLOAT, F(weight_gain_multiplier), NULL},
    {NULL, 0, 0, NULL},
};
static const key k_optimizer[] = {
    {"batch_size", K_POSINT, F(batch_size), NULL},
    {"type", K_OPT, 0, NULL},
    {"momentum", K_FLOAT, F(momentum), NULL},
    {"weight_decay", K_FLOAT, F(weight_decay), NULL},
    {"clip", K_FLOAT, F(clip), NULL},
    {"learning_rate", K_FLOAT, F(learning_rate), NULL},
    {"classifier_lr", K_FLOAT, F(classifier_lr), NULL},
    {"nesterov", K_BOOL, F(nesterov), NULL},
    {"label_smoothing", K_FLOAT, F(label_smoothing), NULL},
    {"schedule", K_SECTION, 0, k_schedule},
    {NULL, 0, 0, NULL},
};
static const key k_input[] = {
    {"scale_train", K_INT, F(scale_train), NULL},
    {"crop_train", K_POSINT, F(crop_train), NULL},
    {"color_jitter_train", K_BOOL, F(color_jitter_train), NULL},
    {"lighting_train", K_BOOL, F(lighting_train), NULL},
    {"scale_val", K_INT, F(scale_val), NULL},
    {"crop_val", K_POSINT, F(crop_val), NULL},
    {"mean", K_F3, F(mean), NULL},
    {"std", K_F3, F(std), NULL},
    {NULL, 0, 0, NULL},
};
static const key k_seg[] = {
    {"crop_size", K_PAIR_I, F(crop_h), NULL},
    {"scale_range", K_PAIR_F, F(scale_min), NULL},
    {"bootstrap", K_FLOAT, F(bootstrap), NULL},
    {"eval_every", K_POSINT, F(eval_every), NULL},
    {"longest_val", K_INT, F(longest_val), NULL},
    {"class_uniform", K_BOOL, F(class_uniform), NULL},
    {NULL, 0, 0, NULL},
};
static const key k_top[] = {
    {"network", K_SECTION, 0, k_network},
    {"optimizer", K_SECTION, 0, k_optimizer},
    {"input", K_SECTION, 0, k_input},
    {"segmentation", K_SECTION, 0, k_seg},
    {NULL, 0, 0, NULL},
};

static const char *sched_names[] = {"constant", "step", "multistep", "exponential", "linear", "poly",
                                    "cosine"};

const char *iabn_sched_name(iabn_sched_kind k)
{
    return (unsigned)k < sizeof sched_names / sizeof sched_names[0] ? sched_names[k] : "?";
}

void iabn_config_defaults(iabn_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->arch, sizeof c->arch, "resnet101");
    c->act.kind = IABN_ACT_RELU;
    c->act.param = iabn_act_default_param(IABN_ACT_LEAKY_RELU); /* if the kind is switched */
    c->bn_mode = IABN_BN_STANDARD;
    c->dilation = 1;
    snprintf(c->weight_init, sizeof c->weight_init, "xavier_normal");
    c->weight_gain_multiplier = 1.f;
    c->batch_size = 256;
    c->momentum = 0.9f;
    c->weight_decay = 1e-4f;
    c->clip = 1.f;
    c->learning_rate = 0.1f;
    c->classifier_lr = -1.f;
    c->schedule.kind = IABN_SCHED_CONSTANT;
    c->schedule.epochs = 10;
    c->schedule.gamma = 0.1f;
    c->schedule.beta = 1.f;
    c->schedule.power = 0.9f;
    c->scale_train = -1;
    c->crop_train = 224;
    c->scale_val = 256;
    c->crop_val = 224;
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    memcpy(c->mean, mean, sizeof mean);
    memcpy(c->std, std, sizeof std);
    c->crop_h = c->crop_w = 512;
    c->scale_min = 0.7f;
    c->scale_max = 2.0f;
    c->bootstrap = 0.25f;
    c->eval_every = 1;
}

void iabn_config_reference(iabn_config *c, int seg)
{
    iabn_config_defaults(c);
    if (seg) {
        /* the reference Cityscapes / Vistas recipe */
        snprintf(c->arch, sizeof c->arch, "deeplabv3_wider_resnet38_a2");
        c->batch_size = 16;
        c->learning_rate = 0.0025f;
        c->clip = 0;
        c->schedule.kind = IABN_SCHED_POLY;
        c->schedule.per_step = 1;
        c->schedule.epochs = 100;
    } else {
        /* torchvision's classification reference (and the paper's ImageNet runs) */
        c->schedule.kind = IABN_SCHED_STEP;
        c->schedule.step_size = 30;
        c->schedule.epochs = 90;
    }
}

int iabn_config_from_checkpoint(iabn_config *c, const char *ckpt, iabn_err *e)
{
    iabn_st_file *f = NULL;
    int rc = iabn_st_load(ckpt, &f, e);
    if (rc) return rc;
    const char *cj = iabn_st_meta(f, "config");
    if (!cj) rc = iabn_err_set(e, IABN_EFORMAT, "%s holds no training configuration (not an iabn "
                                                "checkpoint): give the config too", ckpt);
    else rc = iabn_config_parse(c, cj, ckpt, e);
    iabn_st_free(f);
    return rc;
}

static int is_int(const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) &&
           fabs(v->valuedouble) < 2147483647.0;
}

static int set_key(iabn_config *c, const key *k, const cJSON *v, const char *path, iabn_err *e)
{
    char *base = (char *)c + k->off;
    switch (k->type) {
    case K_BOOL:
        if (!cJSON_IsBool(v)) return iabn_err_set(e, IABN_EINVAL, "%s must be true or false", path);
        *(int *)base = cJSON_IsTrue(v);
        return 0;
    case K_INT:
    case K_POSINT:
        if (!is_int(v)) return iabn_err_set(e, IABN_EINVAL, "%s must be an integer", path);
        if (k->type == K_POSINT && v->valuedouble < 1)
            return iabn_err_set(e, IABN_EINVAL, "%s must be a positive integer", path);
        *(int *)base = (int)v->valuedouble;
        return 0;
    case K_FLOAT:
        /* finite as the float it is stored in: 1e300 would become inf,
         * which the resolved config could not write back */
        if (!cJSON_IsNumber(v) || !isfinite((float)v->valuedouble))
            return iabn_err_set(e, IABN_EINVAL, "%s must be a finite number", path);
        *(float *)base = (float)v->valuedouble;
        return 0;
    case K_STR:
        if (!cJSON_IsString(v) || strlen(v->valuestring) >= 32)
            return iabn_err_set(e, IABN_EINVAL, "%s must be a (short) string", path);
        snprintf(base, 32, "%s", v->valuestring);
        return 0;
    case K_ACT:
        if (!cJSON_IsString(v)) return iabn_err_set(e, IABN_EINVAL, "%s must be a string", path);
        if (iabn_act_parse(v->valuestring, (iabn_act_kind *)base, e))
            return iabn_err_prefix(e, "%s: ", path);
        return 0;
    case K_BN:
        /* auto: resolved once the activation is known (iabn_config_parse) */
        if (cJSON_IsString(v) && !strcmp(v->valuestring, "auto")) {
            *(iabn_bn_mode *)base = IABN_BN_INPLACE_II;
            return 0;
        }
        if (!cJSON_IsString(v)) return iabn_err_set(e, IABN_EINVAL, "%s must be a string", path);
        if (iabn_bn_mode_parse(v->valuestring, (iabn_bn_mode *)base, e))
            return iabn_err_prefix(e, "%s: ", path);
        return 0;
    case K_STRAT: {
        iabn_err se = {0};
        if (!cJSON_IsString(v) || iabn_storage_parse(v->valuestring, (iabn_storage *)base, &se))
            return iabn_err_set(e, IABN_EINVAL,
                                "%s must be one of keep, offload, auto, recompute", path);
        return 0;
    }
    case K_LAYOUT:
        if (!cJSON_IsString(v)) return iabn_err_set(e, IABN_EINVAL, "%s must be a string", path);
        if (iabn_layout_mode_parse(v->valuestring, (iabn_layout_mode *)base, e))
            return iabn_err_prefix(e, "%s: ", path);
        return 0;
    case K_WINO:
        /* true and false: what configs said before the modes */
        if (cJSON_IsBool(v)) {
            *(iabn_winograd_mode *)base = cJSON_IsTrue(v) ? IABN_WINOGRAD_ON : IABN_WINOGRAD_OFF;
            return 0;
        }
        if (!cJSON_IsString(v))
            return iabn_err_set(e, IABN_EINVAL, "%s must be auto, off or on", path);
        if (iabn_winograd_mode_parse(v->valuestring, (iabn_winograd_mode *)base, e))
            return iabn_err_prefix(e, "%s: ", path);
        return 0;
    case K_F3:
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 3)
            return iabn_err_set(e, IABN_EINVAL, "%s must be a list of 3 numbers", path);
        for (int i = 0; i < 3; i++) {
            const cJSON *x = cJSON_GetArrayItem(v, i);
            if (!cJSON_IsNumber(x) || !isfinite((float)x->valuedouble))
                return iabn_err_set(e, IABN_EINVAL, "%s must be a list of 3 finite numbers", path);
            ((float *)base)[i] = (float)x->valuedouble;
        }
        return 0;
    case K_INTLIST: {
        int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
        if (n < 1 || n > IABN_MAX_MILESTONES)
            return iabn_err_set(e, IABN_EINVAL, "%s must be a list of 1..%d integers", path,
                                IABN_MAX_MILESTONES);
        for (int i = 0; i < n; i++) {
            const cJSON *x = cJSON_GetArrayItem(v, i);
            if (!is_int(x) || x->valuedouble < 0 || (i && x->valuedouble <= c->schedule.milestones[i - 1]))
                return iabn_err_set(e, IABN_EINVAL, "%s must be increasing non-negative integers",
                                    path);
            c->schedule.milestones[i] = (int)x->valuedouble;
        }
        c->schedule.nmilestones = n;
        return 0;
    }
    case K_SCHED:
        if (cJSON_IsString(v))
            for (int i = 0; i < (int)(sizeof sched_names / sizeof sched_names[0]); i++)
                if (!strcmp(v->valuestring, sched_names[i])) {
                    c->schedule.kind = (iabn_sched_kind)i;
                    return 0;
                }
        return iabn_err_set(e, IABN_EINVAL,
                            "%s must be one of constant, step, multistep, exponential, linear, poly, cosine",
                            path);
    case K_MODE:
        if (cJSON_IsString(v) && (!strcmp(v->valuestring, "epoch") || !strcmp(v->valuestring, "step"))) {
            c->schedule.per_step = !strcmp(v->valuestring, "step");
            return 0;
        }
        return iabn_err_set(e, IABN_EINVAL, "%s must be \"epoch\" or \"step\"", path);
    case K_OPT:
        if (cJSON_IsString(v) && !strcasecmp(v->valuestring, "sgd")) return 0;
        return iabn_err_set(e, IABN_EINVAL, "%s: only \"SGD\" is supported", path);
    case K_PAIR_I:
    case K_PAIR_F: {
        double a, b;
        if (cJSON_IsNumber(v)) {
            a = b = v->valuedouble;
        } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 &&
                   cJSON_IsNumber(cJSON_GetArrayItem(v, 0)) && cJSON_IsNumber(cJSON_GetArrayItem(v, 1))) {
            a = cJSON_GetArrayItem(v, 0)->valuedouble;
            b = cJSON_GetArrayItem(v, 1)->valuedouble;
        } else {
            return iabn_err_set(e, IABN_EINVAL, "%s must be a number or a list of 2", path);
        }
        if (!(a > 0 && b > 0)) return iabn_err_set(e, IABN_EINVAL, "%s must be positive", path);
        if (k->type == K_PAIR_I && (a != floor(a) || b != floor(b)))
            return iabn_err_set(e, IABN_EINVAL, "%s must be whole numbers", path);
        double top = k->type == K_PAIR_I ? 2147483647.0 : 3.4e38;
        if (!(a <= top && b <= top))
            return iabn_err_set(e, IABN_EINVAL, "%s must be at most %g", path, top);
        if (k->type == K_PAIR_I) {
            ((int *)base)[0] = (int)a;
            ((int *)base)[1] = (int)b;
        } else {
            ((float *)base)[0] = (float)a;
            ((float *)base)[1] = (float)b;
        }
        return 0;
    }
    case K_SECTION: break;
    }
    return 0;
}

static int walk(iabn_config *c, const key *keys, const cJSON *obj, const char *prefix, iabn_err *e)
{
    if (!cJSON_IsObject(obj))
        return iabn_err_set(e, IABN_EINVAL, "%s must be an object", prefix[0] ? prefix : "the config");
    for (const cJSON *it = obj->child; it; it = it->next) {
        char path[160];
        snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", it->string);
        const key *k = keys;
        while (k->name && strcmp(k->name, it->string)) k++;
        if (!k->name) return iabn_err_set(e, IABN_EINVAL, "unknown config key %s", path);
        int rc = k->type == K_SECTION ? walk(c, k->sub, it, path, e) : set_key(c, k, it, path, e);
        if (rc) return rc;
    }
    return 0;
}

int iabn_config_parse(iabn_config *c, const char *json, const char *what, iabn_err *e)
{
    cJSON *root = cJSON_Parse(json);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        return iabn_err_set(e, IABN_EFORMAT, "%s: not valid JSON near \"%.20s\"", what,
                            at ? at : "");
    }
    int rc = walk(c, k_top, root, "", e);
    const cJSON *bm = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(root, "network"), "bn_mode");
    if (!rc && cJSON_IsString(bm) && !strcmp(bm->valuestring, "auto")) {
        /* in-place where the activation can be inverted */
        c->bn_auto = 1;
        c->bn_mode = c->act.kind == IABN_ACT_RELU ? IABN_BN_STANDARD : IABN_BN_INPLACE_II;
    }
    cJSON_Delete(root);
    if (rc) return iabn_err_prefix(e, "%s: ", what);
    return 0;
}

int iabn_config_load(iabn_config *c, const char *path, iabn_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f) return iabn_err_set(e, IABN_EIO, "cannot open config %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0 || n > (1 << 20)) {
        fclose(f);
        return iabn_err_set(e, IABN_EFORMAT, "config %s is not a small JSON file", path);
    }
    char *buf = malloc((size_t)n + 1);
    if (!buf) {
        fclose(f);
        return iabn_err_set(e, IABN_ENOMEM, "out of memory reading %s", path);
    }
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    buf[got] = 0;
    int rc = iabn_config_parse(c, buf, path, e);
    free(buf);
    return rc;
}

int iabn_config_check(const iabn_config *c, iabn_err *e)
{
    if (iabn_bn_mode_is_inplace(c->bn_mode) && !iabn_act_invertible(c->act.kind))
        return iabn_err_set(e, IABN_EINVAL,
                            "network.bn_mode %s needs an invertible activation: "
                            "network.activation %s is not (use leaky_relu, elu or identity)",
                            iabn_bn_mode_name(c->bn_mode), iabn_act_name(c->act.kind));
    if (c->learning_rate <= 0) return iabn_err_set(e, IABN_EINVAL, "optimizer.learning_rate must be > 0");
    if (c->momentum < 0 || c->momentum >= 1)
        return iabn_err_set(e, IABN_EINVAL, "optimizer.momentum must be in [0, 1)");
    if (c->weight_decay < 0) return iabn_err_set(e, IABN_EINVAL, "optimizer.weight_decay must be >= 0");
    if (!(c->label_smoothing >= 0 && c->label_smoothing < 1))
        return iabn_err_set(e, IABN_EINVAL, "optimizer.label_smoothing must be in [0, 1)");
    if (c->clip < 0) return iabn_err_set(e, IABN_EINVAL, "optimizer.clip must be >= 0 (0: off)");
    if (c->schedule.kind == IABN_SCHED_STEP && c->schedule.step_size < 1)
        return iabn_err_set(e, IABN_EINVAL, "optimizer.schedule.params.step_size is required by a step schedule");
    if (c->schedule.kind == IABN_SCHED_MULTISTEP && c->schedule.nmilestones < 1)
        return iabn_err_set(e, IABN_EINVAL, "optimizer.schedule.params.milestones is required by a multistep schedule");
    if (c->schedule.gamma <= 0) return iabn_err_set(e, IABN_EINVAL, "optimizer.schedule.params.gamma must be > 0");
    for (int i = 0; i < 3; i++)
        if (c->std[i] <= 0) return iabn_err_set(e, IABN_EINVAL, "input.std must be positive");
    if (c->bootstrap <= 0 || c->bootstrap > 1)
        return iabn_err_set(e, IABN_EINVAL, "segmentation.bootstrap must be in (0, 1]");
    if (c->scale_min > c->scale_max)
        return iabn_err_set(e, IABN_EINVAL, "segmentation.scale_range must be [min, max]");
    if (c->dilation != 1 && c->dilation != 8)
        return iabn_err_set(e, IABN_EINVAL,
                            "network.dilation must be 1 (output stride 32) or 8 (dilated, output "
                            "stride 8)");
    if (c->class_uniform)
        return iabn_err_set(e, IABN_EINVAL,
                            "segmentation.class_uniform: class-uniform sampling is not available "
                            "in this version (set it to false)");
    if (c->weight_gain_multiplier != 1.f && !strcmp(c->weight_init, "xavier_normal"))
        return iabn_err_set(e, IABN_EINVAL,
                            "network.weight_gain_multiplier: only 1 is supported (the gain is the "
                            "activation's)");
    if (strcmp(c->weight_init, "xavier_normal") && strcmp(c->weight_init, "kaiming_normal"))
        return iabn_err_set(e, IABN_EINVAL, "network.weight_init must be xavier_normal or kaiming_normal");
    return 0;
}

double iabn_schedule_factor(const iabn_schedule *s, double t, double total)
{
    double f = 1.0;
    switch (s->kind) {
    case IABN_SCHED_CONSTANT: f = 1.0; break;
    case IABN_SCHED_STEP: f = pow(s->gamma, floor(t / s->step_size)); break;
    case IABN_SCHED_MULTISTEP: {
        int k = 0;
        while (k < s->nmilestones && t >= s->milestones[k]) k++;
        f = pow(s->gamma, k);
        break;
    }
    case IABN_SCHED_EXPONENTIAL: f = pow(s->gamma, t); break;
    case IABN_SCHED_LINEAR: f = s->alpha * t + s->beta; break;
    case IABN_SCHED_POLY: f = total > 0 ? pow(fmax(0.0, 1.0 - t / total), s->power) : 1.0; break;
    case IABN_SCHED_COSINE: f = total > 0 ? 0.5 * (1.0 + cos(M_PI * fmin(t / total, 1.0))) : 1.0; break;
    }
    if (s->warmup > 0 && t < s->warmup) f *= (t + 1) / (double)s->warmup;
    return f;
}

/* The double whose shortest decimal form reads back as f: 0.1f is written
 * "0.1", not "0.10000000149011612" (cJSON prints doubles with up to 17
 * digits, so it gets the double of the shortest float-exact string). */
static double shortest(float f)
{
    char buf[32];
    for (int p = 1; p < 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if (strtof(buf, NULL) == f) return strtod(buf, NULL);
    }
    return (double)f;
}

static void add_float(cJSON *o, const char *k, float f)
{
    cJSON_AddNumberToObject(o, k, shortest(f));
}

static cJSON *float_array(const float *v, int n)
{
    double d[4];
    for (int i = 0; i < n && i < 4; i++) d[i] = shortest(v[i]);
    return cJSON_CreateDoubleArray(d, n < 4 ? n : 4);
}

char *iabn_config_to_json(const iabn_config *c)
{
    cJSON *r = cJSON_CreateObject();
    cJSON *n = cJSON_AddObjectToObject(r, "network");
    cJSON_AddStringToObject(n, "arch", c->arch);
    cJSON_AddStringToObject(n, "activation", iabn_act_name(c->act.kind));
    add_float(n, "activation_param", c->act.param);
    cJSON_AddBoolToObject(n, "input_3x3", c->input_3x3);
    cJSON_AddStringToObject(n, "bn_mode", c->bn_auto ? "auto" : iabn_bn_mode_name(c->bn_mode));
    cJSON_AddStringToObject(n, "strategy", iabn_storage_name(c->strategy));
    /* written only when set: the configs of earlier runs stay as they were */
    if (c->offload_bf16) cJSON_AddBoolToObject(n, "offload_bf16", 1);
    if (c->layout != IABN_LAYOUT_MODE_AUTO)
        cJSON_AddStringToObject(n, "layout", iabn_layout_mode_name(c->layout));
    if (c->winograd != IABN_WINOGRAD_AUTO)
        cJSON_AddStringToObject(n, "winograd", iabn_winograd_mode_name(c->winograd));
    /* 0: taken from the data set, which is how the key's absence reads back */
    if (c->classes > 0) cJSON_AddNumberToObject(n, "classes", c->classes);
    cJSON_AddNumberToObject(n, "dilation", c->dilation);
    cJSON_AddStringToObject(n, "weight_init", c->weight_init);
    add_float(n, "weight_gain_multiplier", c->weight_gain_multiplier);
    cJSON *o = cJSON_AddObjectToObject(r, "optimizer");
    cJSON_AddNumberToObject(o, "batch_size", c->batch_size);
    cJSON_AddStringToObject(o, "type", "SGD");
    add_float(o, "momentum", c->momentum);
    add_float(o, "weight_decay", c->weight_decay);
    add_float(o, "clip", c->clip);
    add_float(o, "learning_rate", c->learning_rate);
    add_float(o, "classifier_lr", c->classifier_lr);
    cJSON_AddBoolToObject(o, "nesterov", c->nesterov);
    if (c->label_smoothing > 0) add_float(o, "label_smoothing", c->label_smoothing);
    cJSON *s = cJSON_AddObjectToObject(o, "schedule");
    cJSON_AddStringToObject(s, "type", iabn_sched_name(c->schedule.kind));
    cJSON_AddStringToObject(s, "mode", c->schedule.per_step ? "step" : "epoch");
    cJSON_AddNumberToObject(s, "epochs", c->schedule.epochs);
    cJSON *p = cJSON_AddObjectToObject(s, "params");
    switch (c->schedule.kind) {
    case IABN_SCHED_STEP:
        /* unset (0) stays unset: iabn_config_check refuses it, as the reference's StepLR
         * does, and a 0 written here could not be read back */
        if (c->schedule.step_size > 0) cJSON_AddNumberToObject(p, "step_size", c->schedule.step_size);
        add_float(p, "gamma", c->schedule.gamma);
        break;
    case IABN_SCHED_MULTISTEP:
        cJSON_AddItemToObject(p, "milestones", cJSON_CreateIntArray(c->schedule.milestones, c->schedule.nmilestones));
        add_float(p, "gamma", c->schedule.gamma);
        break;
    case IABN_SCHED_EXPONENTIAL: add_float(p, "gamma", c->schedule.gamma); break;
    case IABN_SCHED_LINEAR:
        add_float(p, "alpha", c->schedule.alpha);
        add_float(p, "beta", c->schedule.beta);
        break;
    case IABN_SCHED_POLY: add_float(p, "power", c->schedule.power); break;
    case IABN_SCHED_CONSTANT:
    case IABN_SCHED_COSINE: break;
    }
    if (c->schedule.warmup) cJSON_AddNumberToObject(p, "warmup", c->schedule.warmup);
    cJSON *in = cJSON_AddObjectToObject(r, "input");
    cJSON_AddNumberToObject(in, "scale_train", c->scale_train);
    cJSON_AddNumberToObject(in, "crop_train", c->crop_train);
    cJSON_AddBoolToObject(in, "color_jitter_train", c->color_jitter_train);
    cJSON_AddBoolToObject(in, "lighting_train", c->lighting_train);
    cJSON_AddNumberToObject(in, "scale_val", c->scale_val);
    cJSON_AddNumberToObject(in, "crop_val", c->crop_val);
    cJSON_AddItemToObject(in, "mean", float_array(c->mean, 3));
    cJSON_AddItemToObject(in, "std", float_array(c->std, 3));
    cJSON *sg = cJSON_AddObjectToObject(r, "segmentation");
    int crop[2] = {c->crop_h, c->crop_w};
    cJSON_AddItemToObject(sg, "crop_size", cJSON_CreateIntArray(crop, 2));
    float sr[2] = {c->scale_min, c->scale_max};
    cJSON_AddItemToObject(sg, "scale_range", float_array(sr, 2));
    add_float(sg, "bootstrap", c->bootstrap);
    cJSON_AddNumberToObject(sg, "eval_every", c->eval_every);
    cJSON_AddNumberToObject(sg, "longest_val", c->longest_val);
    cJSON_AddBoolToObject(sg, "class_uniform", c->class_uniform);
    char *out = cJSON_Print(r);
    cJSON_Delete(r);
    return out;
}
