/* config.h: experiment configuration in the reference implementation's JSON
 * schema (network / optimizer / input), plus our `segmentation` section.
 * Unknown keys, wrong types and impossible values are errors naming the key
 * ("optimizer.schedule.params.step_size must be a positive integer"). */
#ifndef IABN_MODELS_TRAIN_CONFIG_H
#define IABN_MODELS_TRAIN_CONFIG_H

#include "graph/strategy.h"
#include "layers/layers.h"

#define IABN_MAX_MILESTONES 16

typedef enum iabn_sched_kind {
    IABN_SCHED_CONSTANT = 0,
    IABN_SCHED_STEP,
    IABN_SCHED_MULTISTEP,
    IABN_SCHED_EXPONENTIAL,
    IABN_SCHED_LINEAR,
    IABN_SCHED_POLY,
    IABN_SCHED_COSINE
} iabn_sched_kind;

typedef struct iabn_schedule {
    iabn_sched_kind kind;
    int per_step;          /* mode "step": the schedule's clock is the global step */
    int epochs;
    int step_size;         /* step */
    float gamma;           /* step, multistep, exponential (0.1 / 0.1 / required) */
    int milestones[IABN_MAX_MILESTONES];
    int nmilestones;
    float alpha, beta;     /* linear: factor = alpha * t + beta */
    float power;           /* poly: factor = (1 - t / total)^power */
                           /* cosine: factor = (1 + cos(pi t / total)) / 2 */
    int warmup;            /* warm-up length in the schedule's unit (0: none) */
} iabn_schedule;

typedef struct iabn_config {
    /* network */
    char arch[64];
    iabn_act act;
    int input_3x3;
    iabn_bn_mode bn_mode;  /* "auto": inplace_abn_ii with an invertible activation,
                              standard with relu (bn_auto set) */
    int bn_auto;
    iabn_storage strategy; /* saved activations: keep, offload, auto, recompute */
    int offload_bf16;      /* offloaded copies in bfloat16 (docs/OFFLOAD.md)        */
    iabn_layout_mode layout; /* activation layouts: auto (nChw16c or nChw8c
                                between oneDNN convolutions) or nchw (graph.h)   */
    iabn_winograd_mode winograd; /* Winograd dense 3x3 convs on the CPU (graph.h):
                                    auto, off, on                              */
    int classes;           /* 0: from the data set */
    int dilation;
    char weight_init[32];  /* xavier_normal, kaiming_normal */
    float weight_gain_multiplier;
    /* optimizer */
    int batch_size;        /* global, divided over ranks */
    float momentum, weight_decay, clip, learning_rate, classifier_lr;
    float label_smoothing; /* classification: cross-entropy against (1-e) one-hot + e uniform */
    int nesterov;
    iabn_schedule schedule;
    /* input */
    int scale_train, crop_train, color_jitter_train, lighting_train, scale_val, crop_val;
    float mean[3], std[3];
    /* segmentation */
    int crop_h, crop_w;    /* training crop */
    float scale_min, scale_max;
    float bootstrap;       /* fraction of the hardest labelled pixels kept (0.25); 1: plain mean */
    int eval_every;        /* validation every N epochs */
    int longest_val;       /* evaluation: longest side resized to this (0: whole image) */
    int class_uniform;     /* class-uniform sampling */
} iabn_config;

void iabn_config_defaults(iabn_config *c);
/* The config a run starts from without a file: torchvision's classification
 * reference (SGD 0.1, momentum 0.9, wd 1e-4, batch 256, 90 epochs, x0.1
 * every 30) or, seg != 0, the reference segmentation recipe (DeepLabv3 on
 * WideResNet-38, batch 16, lr 0.0025, poly per step, 100 epochs). */
void iabn_config_reference(iabn_config *c, int seg);
/* The config an iabn checkpoint stores in its metadata, parsed over c. */
int iabn_config_from_checkpoint(iabn_config *c, const char *ckpt, iabn_err *e);
/* Parses a JSON text over the defaults; `what` names it in messages. */
int iabn_config_parse(iabn_config *c, const char *json, const char *what, iabn_err *e);
int iabn_config_load(iabn_config *c, const char *path, iabn_err *e);
/* The resolved configuration as JSON (caller frees). */
char *iabn_config_to_json(const iabn_config *c);
/* Checks cross-field constraints (e.g. relu with an in-place mode). */
int iabn_config_check(const iabn_config *c, iabn_err *e);

/* Learning-rate factor at schedule time t (epochs or steps, per mode) with
 * total = epochs or total steps. */
double iabn_schedule_factor(const iabn_schedule *s, double t, double total);
const char *iabn_sched_name(iabn_sched_kind k);

#endif
