/* options.c: the option table of the `iabn` program (see options.h) and what
 * is generated from it: the parser, each command's --help, the bash
 * completion script. */
#include "tools/options.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tools/cli.h"

/* ---- choices --------------------------------------------------------------- */

static const char *pick(const char *const *list, int n, int i)
{
    return i >= 0 && i < n ? list[i] : NULL;
}
#define CHOICES(fn, ...)                                                       \
    static const char *fn(int i)                                               \
    {                                                                          \
        static const char *const l[] = {__VA_ARGS__};                          \
        return pick(l, (int)(sizeof l / sizeof l[0]), i);                      \
    }

/* the library's closed sets, in its order */
#define LIB_CHOICES(fn, count, name, type)                                     \
    static const char *fn(int i) { return i >= 0 && i < (int)(count) ? name((type)i) : NULL; }
LIB_CHOICES(bn_choice, IABN_BN_NMODES, iabn_bn_mode_name, iabn_bn_mode)
LIB_CHOICES(act_choice, IABN_ACT_COUNT, iabn_act_name, iabn_act_kind)
LIB_CHOICES(sched_choice, IABN_SCHED_COSINE + 1, iabn_sched_name, iabn_sched_kind)
LIB_CHOICES(strategy_choice, IABN_STORAGE_NMODES, iabn_storage_name, iabn_storage)
LIB_CHOICES(layout_choice, IABN_LAYOUT_MODE_COUNT, iabn_layout_mode_name, iabn_layout_mode)
LIB_CHOICES(winograd_choice, IABN_WINOGRAD_MODE_COUNT, iabn_winograd_mode_name,
            iabn_winograd_mode)
LIB_CHOICES(dataset_choice, IABN_DATASET_VISTAS + 1, iabn_dataset_kind_name, iabn_dataset_kind)
CHOICES(nonfinite_choice, "stop", "skip")
CHOICES(cost_choice, "calibrate", "gpu")
CHOICES(format_choice, "safetensors", "onnx")

/* ---- the table ------------------------------------------------------------- */

#define TR IABN_CMD(IABN_C_TRAIN)
#define EV IABN_CMD(IABN_C_EVAL)
#define ST IABN_CMD(IABN_C_SEGTRAIN)
#define SE IABN_CMD(IABN_C_SEGEVAL)
#define PR IABN_CMD(IABN_C_PREDICT)
#define ME IABN_CMD(IABN_C_MEM)
#define SP IABN_CMD(IABN_C_STEP)
#define DE IABN_CMD(IABN_C_DEMO)
#define DA IABN_CMD(IABN_C_DATA)
#define PL IABN_CMD(IABN_C_PLOT)
#define BC IABN_CMD(IABN_C_BENCH_CONV)
#define BB IABN_CMD(IABN_C_BENCH_BLOCK)
#define BS IABN_CMD(IABN_C_BENCH_STEP)
#define BA IABN_CMD(IABN_C_BENCH_ALLREDUCE)
#define CV IABN_CMD(IABN_C_CONVERT)
#define MO IABN_CMD(IABN_C_MODELS)
#define EX IABN_CMD(IABN_C_EXPORT)
#define TRAINS (TR | ST)
#define EVALS (EV | SE)
#define RUNS (TRAINS | EVALS | PR)
#define BIG 1e18

static const iabn_option table[IABN_O_COUNT] = {
    [IABN_O_MODEL] = {"model", "arch", 'a', IABN_T_STRING, 0, 0, 0, 0, NULL, "NAME", "network.arch",
        TRAINS | ME | SP | BS | EX, "the network (iabn models; export: when the checkpoint has "
        "no config)"},
    [IABN_O_CONFIG] = {"config", NULL, 'c', IABN_T_PATH, 0, 0, 0, 0, NULL, "FILE.json", NULL,
        TRAINS | EVALS | PR, "experiment config (reference JSON schema); flags override it"},
    [IABN_O_DATA_PATH] = {"data-path", "data", 0, IABN_T_PATH, 0, 0, 0, 0, NULL, "DIR", NULL,
        TRAINS | EVALS | DA, "the data set's root (or the last positional)"},
    [IABN_O_BN] = {"bn", NULL, 0, IABN_T_CHOICE, 0, 0, 0, ME, bn_choice, "MODE", "network.bn_mode",
        TRAINS | ME | SP | BS | DE | EX, "BN mode (iabn mem: several, comma-separated)"},
    [IABN_O_ACT] = {"act", NULL, 0, IABN_T_CHOICE, 0, 0, 0, 0, act_choice, "ACT",
        "network.activation", TRAINS | SP | EX, "activation after each BN"},
    [IABN_O_ACT_PARAM] = {"act-param", NULL, 0, IABN_T_FLOAT, 0, 0, 0, 0, NULL, "F",
        "network.activation_param", TRAINS | SP | EX, "leaky_relu slope / elu alpha (0.01 / 1)"},
    [IABN_O_CLASSES] = {"classes", NULL, 0, IABN_T_INT, 1, 100000, 0, 0, NULL, "N",
        "network.classes", TRAINS | ME | SP | BS | DA | EX, "number of classes (default: the "
        "data set's)"},
    [IABN_O_DATASET] = {"dataset", "kind", 0, IABN_T_CHOICE, 0, 0, 0, 0, dataset_choice, "KIND",
        NULL, ST | SE | DA, "data set layout"},
    [IABN_O_EPOCHS] = {"epochs", NULL, 0, IABN_T_INT, 1, 1e6, 0, 0, NULL, "N",
        "optimizer.schedule.epochs", TRAINS | DA, "epochs to train"},
    [IABN_O_BATCH] = {"batch-size", "batch", 'b', IABN_T_INT, 1, 1e6, 0, 0, NULL, "N",
        "optimizer.batch_size", TRAINS | EVALS | ME | DA | BB | BS | MO, "the global batch: "
        "split across ranks when several processes train (the reference configs' meaning)"},
    [IABN_O_BATCH_PER_RANK] = {"batch-per-rank", NULL, 0, IABN_T_INT, 1, 1e6, 0, 0, NULL, "N", NULL,
        TRAINS, "batch of each process (torchvision's -b): the global batch is N times the "
        "number of ranks"},
    [IABN_O_LR] = {"lr", NULL, 0, IABN_T_FLOAT, 0, 0, 1, 0, NULL, "F", "optimizer.learning_rate",
        TRAINS, "base learning rate"},
    [IABN_O_MOMENTUM] = {"momentum", NULL, 0, IABN_T_FLOAT, 0, 0.9999, 0, 0, NULL, "F",
        "optimizer.momentum", TRAINS, "SGD momentum"},
    [IABN_O_WD] = {"wd", "weight-decay", 0, IABN_T_FLOAT, 0, 0, 0, 0, NULL, "F",
        "optimizer.weight_decay", TRAINS, "weight decay"},
    [IABN_O_NESTEROV] = {"nesterov", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL,
        "optimizer.nesterov", TRAINS, "Nesterov momentum"},
    [IABN_O_LR_SCHEDULER] = {"lr-scheduler", NULL, 0, IABN_T_CHOICE, 0, 0, 0, 0, sched_choice,
        "KIND", "optimizer.schedule.type", TRAINS, "learning-rate schedule (step: x lr-gamma "
        "every lr-step-size epochs)"},
    [IABN_O_LR_STEP_SIZE] = {"lr-step-size", NULL, 0, IABN_T_INT, 1, 1e6, 0, 0, NULL, "N",
        "optimizer.schedule.params.step_size", TRAINS, "epochs between steps of the step "
        "schedule (30)"},
    [IABN_O_LR_GAMMA] = {"lr-gamma", NULL, 0, IABN_T_FLOAT, 0, 0, 1, 0, NULL, "F",
        "optimizer.schedule.params.gamma", TRAINS, "factor of the step / multistep / exponential "
        "schedule (0.1)"},
    [IABN_O_LR_WARMUP_EPOCHS] = {"lr-warmup-epochs", NULL, 0, IABN_T_INT, 0, 1e6, 0, 0, NULL, "N",
        NULL, TRAINS, "linear warm-up of the learning rate over N epochs (0: none)"},
    [IABN_O_LABEL_SMOOTHING] = {"label-smoothing", NULL, 0, IABN_T_FLOAT, 0, 0.999, 0, 0, NULL, "F",
        "optimizer.label_smoothing", TR, "cross-entropy against (1-F) one-hot + F uniform "
        "(training loss)"},
    [IABN_O_CLIP] = {"clip", NULL, 0, IABN_T_FLOAT, 0, 0, 0, 0, NULL, "F", "optimizer.clip", TRAINS,
        "gradient norm clipping (0: off)"},
    [IABN_O_WORKERS] = {"workers", NULL, 'j', IABN_T_INT, 1, 1024, 0, 0, NULL, "N", NULL,
        TRAINS | EVALS | DA, "data loading threads (2)"},
    [IABN_O_OUTPUT_DIR] = {"output-dir", NULL, 0, IABN_T_PATH, 0, 0, 0, 0, NULL, "DIR", NULL,
        TRAINS, "config.json, metrics.jsonl, curves.svg, TensorBoard events, checkpoints"},
    [IABN_O_RESUME] = {"resume", NULL, 0, IABN_T_PATH, 0, 0, 0, 0, NULL, "CKPT", NULL, TRAINS,
        "continue exactly where CKPT left off"},
    [IABN_O_INIT] = {"init", "pretrained", 0, IABN_T_PATH, 0, 0, 0, 0, NULL, "CKPT", NULL, TRAINS,
        "start from CKPT's weights: every tensor whose name and shape match is loaded, the rest "
        "(a new head) initialised (segtrain: an ImageNet body, only head and classifier may be "
        "missing)"},
    [IABN_O_PRINT_FREQ] = {"print-freq", NULL, 0, IABN_T_INT, 1, 1e9, 0, 0, NULL, "N", NULL, TRAINS,
        "progress line every N steps (10)"},
    [IABN_O_SEED] = {"seed", NULL, 0, IABN_T_INT, 0, 9e18, 0, 0, NULL, "N", NULL, TRAINS | SP | DA,
        "data order, augmentation, init and dropout (1)"},
    [IABN_O_TEST_ONLY] = {"test-only", "evaluate", 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL,
        TRAINS, "only evaluate (with --resume CKPT)"},
    [IABN_O_MAX_STEPS] = {"max-steps", NULL, 0, IABN_T_INT, 1, 9e18, 0, 0, NULL, "N", NULL, TRAINS,
        "stop after N optimizer steps (checkpoint kept)"},
    [IABN_O_TIME_LIMIT] = {"time-limit", "seconds", 0, IABN_T_FLOAT, 0, 0, 1, 0, NULL, "SECONDS",
        NULL, TRAINS | DE, "stop after this long (checkpoint kept)"},
    [IABN_O_BUDGET] = {"budget", NULL, 0, IABN_T_BYTES, 1, 0, 0, 0, NULL, "BYTES", NULL,
        TRAINS | ME | SP | BS, "memory for the step, e.g. 12GiB (default: available)"},
    [IABN_O_NO_ACCUMULATE] = {"no-accumulate", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL,
        TRAINS, "refuse instead of splitting the batch into micro-batches"},
    [IABN_O_STRICT] = {"strict", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL,
        TRAINS | EVALS | DA | BC, "an undecodable image (bench conv: a slow case) is an error"},
    [IABN_O_RESUME_OVERRIDE] = {"resume-override", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL,
        NULL, TRAINS, "resume although the config or data differ (listed)"},
    [IABN_O_CHECKPOINT_EVERY] = {"checkpoint-every", NULL, 0, IABN_T_INT, 1, 1e9, 0, 0, NULL, "N",
        NULL, TRAINS, "checkpoint_last every N steps, mid-epoch too"},
    [IABN_O_ON_NONFINITE] = {"on-nonfinite", NULL, 0, IABN_T_CHOICE, 0, 0, 0, 0, nonfinite_choice,
        "stop|skip", NULL, TRAINS, "a NaN/Inf loss or gradient stops the run (stop) or skips the "
        "step; either names the step"},
    [IABN_O_CROP] = {"crop", NULL, 0, IABN_T_SIZE, 1, 65536, 0, 0, NULL, "HxW", NULL, TRAINS | EV,
        "crop size (train: input.crop_train and crop_val, eval: input.crop_val, segtrain: "
        "segmentation.crop_size)"},
    [IABN_O_SCALE] = {"scale", NULL, 0, IABN_T_INT, 1, 65536, 0, 0, NULL, "N", "input.scale_val",
        EV, "shorter side resized to N before the centre crop"},
    [IABN_O_SIZE] = {"size", NULL, 0, IABN_T_SIZE, 1, 2147483647, 0, 0, NULL, "HxW", NULL,
        ME | BS | DA | EX, "input size (S alone: SxS)"},
    [IABN_O_TEN_CROPS] = {"ten-crops", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, EV,
        "average over the ten crops"},
    [IABN_O_SCALES] = {"scales", NULL, 0, IABN_T_FLOATS, 0, 16, 1, 0, NULL, "F,F,...", NULL,
        SE | PR, "test-time scales (logits averaged)"},
    [IABN_O_FLIP] = {"flip", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, SE | PR,
        "also the mirrored image (logits averaged)"},
    [IABN_O_LONGEST] = {"longest", NULL, 0, IABN_T_INT, 1, 65536, 0, 0, NULL, "N",
        "segmentation.longest_val", SE, "longest side resized to N"},
    [IABN_O_SPLIT] = {"split", NULL, 0, IABN_T_STRING, 0, 0, 0, 0, NULL, "NAME", NULL, EVALS | DA,
        "the split to read (val; data: train)"},
    [IABN_O_WINDOW] = {"window", NULL, 0, IABN_T_SIZE, 1, 65536, 0, 0, NULL, "HxW", NULL, SE | PR,
        "sliding-window inference with HxW windows (default: whole image)"},
    [IABN_O_POOLING_SIZE] = {"pooling-size", NULL, 0, IABN_T_SIZE, 0, 65536, 0, 0, NULL, "HxW",
        NULL, SE | PR, "the DeepLabV3 head's pooling windows (84x84, as the reference evaluates; "
        "0: the global mean)"},
    [IABN_O_DEVICE] = {"device", NULL, 0, IABN_T_DEVICE, 0, 0, 0, 0, NULL, "DEV", NULL,
        RUNS | ME | SP | BS, "cpu, cuda or cuda:N (cpu)"},
    [IABN_O_THREADS] = {"threads", NULL, 0, IABN_T_INT, 1, 4096, 0, 0, NULL, "T", NULL,
        RUNS | SP | DE | BC | BB | BS, "CPU threads"},
    [IABN_O_OUTPUT] = {"output", "out", 'o', IABN_T_PATH, 0, 0, 0, 0, NULL, "PATH", NULL,
        SP | DA | PL | EX, "where the result goes (plot: curves.svg)"},
    [IABN_O_JSON] = {"json", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL,
        ME | DA | BC | BB | BS | MO | BA, "machine-readable output"},
    [IABN_O_QUIET] = {"quiet", NULL, 'q', IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, TRAINS,
        "only the epoch summaries"},
    [IABN_O_VERBOSE] = {"verbose", NULL, 'v', IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL,
        TRAINS | EVALS, "more detail"},
    [IABN_O_COLOR] = {"color", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, PR,
        "the data set's palette instead of class ids"},
    [IABN_O_LABELIDS] = {"labelids", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, PR,
        "Cityscapes labelIds (for the official scripts)"},
    [IABN_O_LIST] = {"list", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, ME,
        "list the models"},
    [IABN_O_BLOCKS] = {"blocks", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, ME,
        "one row per block instead of per module"},
    [IABN_O_STEPS] = {"steps", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, ME,
        "print the planned schedule step by step"},
    [IABN_O_PLOT] = {"plot", NULL, 0, IABN_T_PATH, 0, 0, 0, 0, NULL, "FILE.svg", NULL, ME,
        "draw live memory over the schedule"},
    [IABN_O_INPUT] = {"input", NULL, 0, IABN_T_PATH, 0, 0, 0, 0, NULL, "X.safetensors", NULL, SP,
        "`input` (N,3,H,W) and `target` tensors"},
    [IABN_O_WEIGHTS] = {"weights", NULL, 0, IABN_T_PATH, 0, 0, 0, 0, NULL, "W.safetensors", NULL,
        SP, "every model tensor (strict; default: reference init)"},
    [IABN_O_TRAIN_MODE] = {"train", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, SP,
        "forward and backward (the default)"},
    [IABN_O_EVAL_MODE] = {"eval", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, SP,
        "forward only, running statistics"},
    [IABN_O_NO_DROPOUT] = {"no-dropout", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, SP,
        "leave out dropout"},
    [IABN_O_NO_INPUT_3X3] = {"no-input-3x3", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL,
        SP | EX, "ResNeXt 7x7 stem"},
    [IABN_O_DILATED] = {"dilation", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, SP | EX,
        "dilated classification body (output stride 8)"},
    [IABN_O_FROZEN_BN] = {"frozen-bn", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, SP,
        "BN uses running statistics, gamma / beta frozen"},
    [IABN_O_CHECK] = {"check", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, SP,
        "verify guard bytes and NaN / Inf after every node"},
    [IABN_O_INIT_SEED] = {"init-seed", NULL, 0, IABN_T_INT, 0, 9e18, 0, 0, NULL, "N", NULL, SP,
        "seed of the reference initialisation (1)"},
    [IABN_O_DIR] = {"dir", NULL, 0, IABN_T_PATH, 0, 0, 0, 0, NULL, "DIR", NULL, DE,
        "DIR/data (generated once) and DIR/run (iabn-demo)"},
    [IABN_O_EXACT] = {"exact", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, DA,
        "torchvision-exact resampling"},
    [IABN_O_JITTER] = {"jitter", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, DA,
        "colour jitter and lighting"},
    [IABN_O_V12] = {"v12", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, DA,
        "Mapillary Vistas v1.2 layout"},
    [IABN_O_TRAIN_IMAGES] = {"train-images", NULL, 0, IABN_T_INT, 0, 1e7, 0, 0, NULL, "N", NULL, DA,
        "generated training images (per class)"},
    [IABN_O_VAL_IMAGES] = {"val-images", NULL, 0, IABN_T_INT, 0, 1e7, 0, 0, NULL, "N", NULL, DA,
        "generated validation images (per class)"},
    [IABN_O_WIDTH] = {"width", NULL, 0, IABN_T_INT, 16, 4096, 0, 0, NULL, "N", NULL, DA,
        "generated segmentation image width"},
    [IABN_O_HEIGHT] = {"height", NULL, 0, IABN_T_INT, 16, 4096, 0, 0, NULL, "N", NULL, DA,
        "generated segmentation image height"},
    [IABN_O_REPEAT] = {"repeat", NULL, 0, IABN_T_INT, 1, 1e6, 0, 0, NULL, "N", NULL,
        BC | BB | BS | BA, "timed repetitions"},
    [IABN_O_PEAK] = {"peak", NULL, 0, IABN_T_STRING, 0, 0, 0, 0, NULL, "GFLOPS|measure", NULL, BC,
        "the machine's peak (a number, or measure it)"},
    [IABN_O_CASE] = {"case", NULL, 0, IABN_T_STRING, 0, 0, 0, 0, NULL, "NAME", NULL, BC,
        "only this convolution case"},
    [IABN_O_COLD] = {"cold", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, BC,
        "each timed call after a sweep of the caches: operands and weights from memory, as "
        "the weights come in a training step"},
    [IABN_O_PLAIN] = {"plain", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, BB,
        "plain BN+ACT+CONV (no residual)"},
    [IABN_O_OPS] = {"ops", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, BS,
        "break the step down by op"},
    [IABN_O_LAYERS] = {"layers", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, BS,
        "break the convs and linears down by shape and pass: ms per step, GFLOP/s"},
    [IABN_O_STRATEGY] = {"strategy", NULL, 0, IABN_T_CHOICE, 0, 0, 0, 0, strategy_choice, "S",
        "network.strategy", TRAINS | ME | SP | BS, "saved activations: keep, offload, auto or "
        "recompute (auto and recompute choose per tensor to fit --budget)"},
    [IABN_O_OFFLOAD] = {"offload", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, ME | BS,
        "offload conv / pool inputs to host memory (--strategy offload)"},
    [IABN_O_LAYOUT] = {"layout", NULL, 0, IABN_T_CHOICE, 0, 0, 0, 0, layout_choice, "L",
        "network.layout", TRAINS | ME | SP | BS, "activation layouts: auto (nChw16c, or nChw8c without "
        "AVX-512, between the CPU's oneDNN convolutions) or nchw"},
    [IABN_O_WINOGRAD] = {"winograd", NULL, 0, IABN_T_CHOICE, 0, 0, 0, 0, winograd_choice, "W",
        "network.winograd", TRAINS | ME | BS,
        "CPU: dense 3x3 stride-1 convs on 14x14 maps and larger with Winograd kernels "
        "(oneDNN's on AVX-512 CPUs, 1.2x-2.6x faster; iabn's F(2x2, 3x3) on AVX2 ones, 1.2x-2x; "
        "more scratch): auto (where the planned arena stays as it is), off or on"},
    [IABN_O_OFFLOAD_BF16] = {"offload-bf16", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL,
        "network.offload_bf16", TRAINS | ME | BS,
        "offloaded copies in bfloat16: half the host memory and copy traffic; the backward "
        "reads rounded values"},
    [IABN_O_LOOKAHEAD] = {"lookahead", NULL, 0, IABN_T_INT, 0, 64, 0, 0, NULL, "N", NULL, ME | BS,
        "prefetch offloaded tensors N backward layers early (1)"},
    [IABN_O_LARGEST_BATCH] = {"largest-batch", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL,
        ME, "the largest batch that fits --budget, per mode"},
    [IABN_O_COST] = {"cost", NULL, 0, IABN_T_CHOICE, 0, 0, 0, 0, cost_choice, "C", NULL, ME,
        "time estimates: calibrate (measured here) or gpu (a Titan X-class GPU)"},
    [IABN_O_COPY_BW] = {"copy-bw", NULL, 0, IABN_T_STRING, 0, 0, 0, 0, NULL, "BW", NULL, ME | BS,
        "host copy bandwidth: GB/s (mem); pcie3, memcpy or GB/s (bench step, on the simulated "
        "device)"},
    [IABN_O_WORLD] = {"world", NULL, 0, IABN_T_INT, 1, 65536, 0, 0, NULL, "N", NULL, ME,
        "plan one rank of N: --batch split over the ranks, gradient buckets"},
    [IABN_O_SIM] = {"sim", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, BS,
        "run on the simulated device (device arena, host pool, copy thread)"},
    [IABN_O_MAX_BYTES] = {"max", NULL, 0, IABN_T_BYTES, 4, 0, 0, 0, NULL, "BYTES", NULL, BA,
        "largest message (64MiB)"},
    [IABN_O_NO_MEMORY] = {"no-memory", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, MO,
        "leave out the memory column (no step planned)"},
    [IABN_O_TORCHVISION] = {"torchvision", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, CV,
        "torchvision ResNet names (guessed from the names when reading .pth)"},
    [IABN_O_NO_MODULE_PREFIX] = {"no-module-prefix", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL,
        NULL, CV, "to PyTorch: classification names without 'module.'"},
    [IABN_O_FLAT] = {"flat", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, CV,
        "to PyTorch: segmentation names flat (body.*), not nested"},
    [IABN_O_FORMAT] = {"format", NULL, 0, IABN_T_CHOICE, 0, 0, 0, 0, format_choice, "FMT", NULL, EX,
        "safetensors (reference names, plain BN) or onnx (the evaluation graph)"},
    [IABN_O_FOLD_BN] = {"fold-bn", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, EX,
        "fold each BN into the convolution before it"},
    [IABN_O_OPSET] = {"opset", NULL, 0, IABN_T_INT, 13, 1000, 0, 0, NULL, "N", NULL, EX,
        "ONNX opset (13)"},
    [IABN_O_GRAPH] = {"graph", NULL, 0, IABN_T_FLAG, 0, 0, 0, 0, NULL, NULL, NULL, EX,
        "print MODEL's evaluation graph as JSON (what tools/export.py reads)"},
};

static const iabn_command_info commands[IABN_C_COUNT] = {
    [IABN_C_TRAIN] = {"train", "[CONFIG.json] DATA_DIR", 0, 2, "train a classifier on an "
        "ImageNet-style folder (DATA_DIR/train, /val)", "Without a config the reference recipe: "
        "SGD lr 0.1, momentum 0.9, wd 1e-4, batch 256,\n90 epochs, step schedule x0.1 every 30; "
        "flags override the config; the effective\nconfig is saved as "
        "OUTPUT_DIR/config.json.\nexample: iabn train --model resnext50 --bn inplace_abn_ii DATA"},
    [IABN_C_EVAL] = {"eval", "[CONFIG.json] CHECKPOINT DATA_DIR", 1, 3, "top-1 / top-5 of a "
        "checkpoint on a validation folder", "The model and input settings come from the "
        "checkpoint; a config overrides them."},
    [IABN_C_SEGTRAIN] = {"segtrain", "[CONFIG.json] DATA_DIR", 0, 2, "fine-tune a segmentation "
        "network (Cityscapes, Vistas)", NULL},
    [IABN_C_SEGEVAL] = {"segeval", "[CONFIG.json] CHECKPOINT DATA_DIR", 1, 3, "mean IoU of a "
        "segmentation checkpoint", "The model and input settings come from the checkpoint; a "
        "config overrides them."},
    [IABN_C_PREDICT] = {"predict", "CHECKPOINT IN_DIR OUT_DIR", 3, 3, "segmentation label maps "
        "(PNG) for a folder of images", "The model and its input normalisation come from the "
        "checkpoint; --config overrides them."},
    [IABN_C_MEM] = {"mem", "[MODEL]", 0, 1, "plan a training step and report its memory, mode by "
        "mode", "Plans without allocating.  Defaults: batch 32, 224x224 (segmentation nets "
        "512x512),\nmodes standard,inplace_abn_ii; --device cuda plans for the CUDA backend (no "
        "GPU needed)."},
    [IABN_C_STEP] = {"step", "MODEL --input X.safetensors --output O.safetensors", 0, 1,
        "one forward/backward of a model on safetensors inputs (PyTorch parity)",
        "One forward (and, with --train, one backward of the mean cross-entropy) of MODEL on "
        "X's\n`input` (float32 N,3,H,W) against X's `target` (int64 or int32, N or N,H,W; "
        "255\nignored); writes `logits`, `loss`, `grad.<name>` for every parameter and the "
        "running\nstatistics.  Models: iabn mem --list."},
    [IABN_C_DEMO] = {"demo", "", 0, 0, "train a narrow ResNeXt on generated data for a minute, "
        "then the memory report", NULL},
    [IABN_C_DATA] = {"data", "bench|synth|info", 1, 1, "data tools: bench (decode + augment "
        "rate), synth, info", "bench --data-path DIR: decode and augment a split as the training "
        "loader does (--size:\n  RandomResizedCrop side, 224; --exact: PIL-identical "
        "pixels).\nsynth --output DIR: a small synthetic data set a model can learn "
        "(imagefolder:\n  --classes 10, --size 64; cityscapes / vistas: --width 256 --height "
        "128).\ninfo --data-path DIR: the number of samples and the classes."},
    [IABN_C_PLOT] = {"plot", "RUN_DIR...", 1, IABN_MAX_POS, "loss, top-1 / mIoU and learning rate "
        "of runs (metrics.jsonl) as one SVG", NULL},
    [IABN_C_COMPLETION] = {"completion", "bash", 1, 1, "the shell completion script (source "
        "<(iabn completion bash))", NULL},
    [IABN_C_BENCH_CONV] = {"bench conv", "", 0, 0, "convolution GFLOP/s against the machine's peak",
        NULL},
    [IABN_C_BENCH_BLOCK] = {"bench block", "", 0, 0, "BN+ACT+CONV blocks in every BN mode (paper "
        "Fig. 4)", "Forward+backward at ResNeXt-101's module shapes.  Target: inplace_abn_ii <= "
        "1.05x standard;\ncheckpointing slower than the in-place modes."},
    [IABN_C_BENCH_STEP] = {"bench step", "[MODEL]", 0, 1, "one training step of a model, median "
        "time", NULL},
    [IABN_C_BENCH_ALLREDUCE] = {"bench allreduce", "", 0, 0, "all-reduce bandwidth per message "
        "size", "Run it under the launcher: mpirun -np N iabn bench allreduce.  Rank 0 prints."},
    [IABN_C_CONVERT] = {"convert", "IN OUT", 2, 2, "weights between reference PyTorch checkpoints "
        "and iabn safetensors", "The direction comes from IN's bytes; tools/convert.py does it "
        "($IABN_PYTHON, default /usr/bin/python3 with python3-torch)."},
    [IABN_C_MODELS] = {"models", "", 0, 0, "every model: parameters, default input, reference "
        "configs, published weights, memory", "The memory column: the planned training step at "
        "--batch (32) with inplace_abn_ii over standard BN."},
    [IABN_C_EXPORT] = {"export", "CHECKPOINT -o OUT --format FMT", 0, 1, "a checkpoint for "
        "inference: plain or folded BN, safetensors or ONNX", "The model comes from the "
        "checkpoint's config, else from --model / --act / --bn;\ntools/export.py writes the "
        "file.  With --graph the argument is a MODEL."},
};

const iabn_option *iabn_option_get(iabn_opt_id id)
{
    return (unsigned)id < IABN_O_COUNT ? &table[id] : NULL;
}

const iabn_command_info *iabn_command_get(iabn_cmd_id c)
{
    return (unsigned)c < IABN_C_COUNT ? &commands[c] : NULL;
}

/* ---- parsing ------------------------------------------------------------- */

static void choices_text(const iabn_option *o, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; o->choice && o->choice(i) && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", o->choice(i));
}

static void num_text(char *buf, size_t n, double v)
{
    if (v == floor(v) && fabs(v) < 1e15) snprintf(buf, n, "%.0f", v);
    else snprintf(buf, n, "%g", v);
}

void iabn_option_allowed(const iabn_option *o, char *buf, size_t n)
{
    char lo[32], hi[32], ch[512];
    num_text(lo, sizeof lo, o->lo);
    num_text(hi, sizeof hi, o->hi);
    switch (o->type) {
    case IABN_T_INT:
    case IABN_T_SIZE:
    case IABN_T_BYTES:
        if (o->hi > 0 && o->hi < BIG) snprintf(buf, n, "must be between %s and %s", lo, hi);
        else snprintf(buf, n, "must be at least %s", lo);
        return;
    case IABN_T_FLOAT:
    case IABN_T_FLOATS:
        if (o->lo_open && o->hi > 0) snprintf(buf, n, "must be > %s and <= %s", lo, hi);
        else if (o->lo_open) snprintf(buf, n, "must be > %s", lo);
        else if (o->hi > 0) snprintf(buf, n, "must be between %s and %s", lo, hi);
        else snprintf(buf, n, "must be >= %s", lo);
        return;
    case IABN_T_CHOICE:
        choices_text(o, ch, sizeof ch);
        snprintf(buf, n, "must be one of %s", ch);
        return;
    case IABN_T_DEVICE: snprintf(buf, n, "must be cpu, cuda or cuda:N"); return;
    default: snprintf(buf, n, "takes %s", o->metavar ? o->metavar : "a value"); return;
    }
}

static int in_range(const iabn_option *o, double v)
{
    if (o->type == IABN_T_FLOAT || o->type == IABN_T_FLOATS)
        return (o->lo_open ? v > o->lo : v >= o->lo) && (o->hi <= 0 || v <= o->hi);
    return v >= o->lo && (o->hi <= 0 || v <= o->hi);
}

static int is_choice(const iabn_option *o, const char *s, size_t len)
{
    for (int i = 0; o->choice(i); i++)
        if (strlen(o->choice(i)) == len && !strncmp(o->choice(i), s, len)) return 1;
    if (o->choice == bn_choice) { /* the reference configs' spellings too */
        char t[64];
        iabn_bn_mode m;
        snprintf(t, sizeof t, "%.*s", (int)(len < 63 ? len : 63), s);
        return !iabn_bn_mode_parse(t, &m, NULL);
    }
    return 0;
}

static int bad(const char *cmd, const iabn_option *o, const char *v)
{
    char allowed[600], lo[32], hi[32];
    iabn_option_allowed(o, allowed, sizeof allowed);
    num_text(lo, sizeof lo, o->lo);
    num_text(hi, sizeof hi, o->hi);
    double x;
    int numeric = o->type == IABN_T_INT || o->type == IABN_T_FLOAT || o->type == IABN_T_SIZE;
    if (numeric && !iabn_parse_float(v, &x)) { /* a number, out of range: say which end */
        if (o->hi > 0 && x > o->hi) snprintf(allowed, sizeof allowed, "must be at most %s", hi);
        else if (o->type == IABN_T_FLOAT && o->lo_open) snprintf(allowed, sizeof allowed, "must be > %s", lo);
        else if (o->type == IABN_T_FLOAT) snprintf(allowed, sizeof allowed, "must be >= %s", lo);
        else snprintf(allowed, sizeof allowed, "must be at least %s", lo);
        if (o->type == IABN_T_INT && x != floor(x))
            snprintf(allowed, sizeof allowed, "must be a whole number");
    } else if (numeric || o->type == IABN_T_FLOATS || o->type == IABN_T_BYTES) {
        fprintf(stderr, "iabn %s: --%s %s: not %s: %s\n", cmd, o->name, v,
                o->type == IABN_T_INT    ? "a whole number"
                : o->type == IABN_T_SIZE  ? "HxW or S"
                : o->type == IABN_T_BYTES ? "a size such as 12GiB"
                                          : "a number",
                allowed);
        return IABN_ARGS_BAD;
    }
    fprintf(stderr, "iabn %s: --%s %s: %s\n", cmd, o->name, v, allowed);
    return IABN_ARGS_BAD;
}

static int set_value(iabn_cmd_id cid, const char *cmd, const iabn_option *o, iabn_optval *val,
                     const char *v)
{
    int multi = (o->multi & IABN_CMD(cid)) != 0;
    long long n;
    double f;
    val->set = 1;
    val->s = v;
    switch (o->type) {
    case IABN_T_FLAG: val->i = 1; return 0;
    case IABN_T_INT:
        if (iabn_parse_int(v, &n) || !in_range(o, (double)n)) return bad(cmd, o, v);
        val->i = n;
        return 0;
    case IABN_T_FLOAT:
        if (iabn_parse_float(v, &f) || !in_range(o, f)) return bad(cmd, o, v);
        val->f = f;
        return 0;
    case IABN_T_FLOATS:
        val->n = iabn_parse_floats(v, val->list, 8);
        if (val->n < 1) return bad(cmd, o, v);
        for (int i = 0; i < val->n; i++)
            if (!in_range(o, val->list[i])) return bad(cmd, o, v);
        return 0;
    case IABN_T_BYTES:
        val->f = iabn_parse_bytes(v);
        if (!(val->f >= 0) || !in_range(o, val->f)) return bad(cmd, o, v);
        return 0;
    case IABN_T_SIZE:
        if (o->lo == 0 && !strcmp(v, "0")) { /* a row whose 0 means "none" */
            val->h = val->w = 0;
            return 0;
        }
        if (iabn_parse_hw(v, &val->h, &val->w) || !in_range(o, val->h) || !in_range(o, val->w))
            return bad(cmd, o, v);
        return 0;
    case IABN_T_CHOICE:
        for (const char *p = v;;) {
            const char *c = multi ? strchr(p, ',') : NULL;
            size_t len = c ? (size_t)(c - p) : strlen(p);
            if (!is_choice(o, p, len)) return bad(cmd, o, v);
            if (!c) break;
            p = c + 1;
        }
        return 0;
    case IABN_T_DEVICE: return iabn_check_device(v, cmd) ? IABN_ARGS_BAD : 0;
    case IABN_T_STRING:
    case IABN_T_PATH: return 0;
    }
    return 0;
}

static int find_long(iabn_cmd_id cmd, const char *name, size_t len)
{
    for (int i = 0; i < IABN_O_COUNT; i++) {
        const iabn_option *o = &table[i];
        if (!(o->cmds & IABN_CMD(cmd))) continue;
        if ((strlen(o->name) == len && !strncmp(o->name, name, len)) ||
            (o->alias && strlen(o->alias) == len && !strncmp(o->alias, name, len)))
            return i;
    }
    return -1;
}

static int find_short(iabn_cmd_id cmd, char c)
{
    for (int i = 0; i < IABN_O_COUNT; i++)
        if (table[i].short_name == c && (table[i].cmds & IABN_CMD(cmd))) return i;
    return -1;
}

int iabn_args_parse(iabn_args *a, iabn_cmd_id cmd, int argc, char **argv)
{
    const iabn_command_info *ci = &commands[cmd];
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    int flags_done = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (flags_done || arg[0] != '-' || !arg[1]) {
            if (a->npos >= ci->max_pos || a->npos >= IABN_MAX_POS) {
                fprintf(stderr, "iabn %s: unexpected argument '%s' (iabn %s --help)\n", ci->name,
                        arg, ci->name);
                return IABN_ARGS_BAD;
            }
            a->pos[a->npos++] = arg;
            continue;
        }
        if (!strcmp(arg, "--")) { flags_done = 1; continue; }
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            iabn_args_help(cmd, stdout);
            return IABN_ARGS_HELP;
        }
        int id;
        const char *inline_val = NULL;
        if (arg[1] == '-') {
            const char *eq = strchr(arg + 2, '=');
            size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
            id = find_long(cmd, arg + 2, len);
            if (eq) inline_val = eq + 1;
        } else {
            id = find_short(cmd, arg[1]);
            if (arg[2]) inline_val = arg + 2;
        }
        if (id < 0) {
            fprintf(stderr, "iabn %s: unknown flag %s (iabn %s --help)\n", ci->name, arg,
                    ci->name);
            return IABN_ARGS_BAD;
        }
        const iabn_option *o = &table[id];
        const char *v = NULL;
        if (o->type == IABN_T_FLAG) {
            if (inline_val) {
                fprintf(stderr, "iabn %s: --%s takes no value\n", ci->name, o->name);
                return IABN_ARGS_BAD;
            }
        } else if (inline_val) {
            v = inline_val;
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            fprintf(stderr, "iabn %s: --%s needs a value (%s)\n", ci->name, o->name,
                    o->metavar ? o->metavar : "");
            return IABN_ARGS_BAD;
        }
        int rc = set_value(cmd, ci->name, o, &a->v[id], v);
        if (rc) return rc;
    }
    if (a->npos < ci->min_pos) {
        fprintf(stderr, "iabn %s: missing arguments: usage: iabn %s %s\n", ci->name, ci->name,
                ci->synopsis);
        return IABN_ARGS_BAD;
    }
    return IABN_ARGS_OK;
}

/* ---- generated texts --------------------------------------------------- */

static void flag_spelling(const iabn_option *o, char *buf, size_t n)
{
    size_t k = 0;
    if (o->short_name) k += (size_t)snprintf(buf, n, "-%c, ", o->short_name);
    else k += (size_t)snprintf(buf, n, "    ");
    k += (size_t)snprintf(buf + k, n - k, "--%s", o->name);
    if (o->alias && k < n) k += (size_t)snprintf(buf + k, n - k, ", --%s", o->alias);
    if (o->metavar && k < n) snprintf(buf + k, n - k, " %s", o->metavar);
}

void iabn_args_help(iabn_cmd_id cmd, FILE *f)
{
    const iabn_command_info *ci = &commands[cmd];
    fprintf(f, "usage: iabn %s%s%s [flags]\n  %s\n\nflags:\n", ci->name, ci->synopsis[0] ? " " : "",
            ci->synopsis, ci->summary);
    for (int i = 0; i < IABN_O_COUNT; i++) {
        const iabn_option *o = &table[i];
        if (!(o->cmds & IABN_CMD(cmd))) continue;
        char sp[128], allowed[600] = "";
        flag_spelling(o, sp, sizeof sp);
        if (o->type == IABN_T_CHOICE || o->type == IABN_T_INT || o->type == IABN_T_FLOAT ||
            o->type == IABN_T_SIZE || o->type == IABN_T_FLOATS)
            iabn_option_allowed(o, allowed, sizeof allowed);
        fprintf(f, "  %-32s %s", sp, o->help);
        if (allowed[0] || o->config_key) {
            fprintf(f, " [");
            if (allowed[0]) fprintf(f, "%s", allowed);
            if (o->config_key) fprintf(f, "%sconfig: %s", allowed[0] ? "; " : "", o->config_key);
            fprintf(f, "]");
        }
        fprintf(f, "\n");
    }
    fprintf(f, "  -h, --help                       this text\n");
    if (ci->notes) fprintf(f, "\n%s\n", ci->notes);
}

/* The completion script: per command its flags, per flag what its value
 * completes to (files, the choices, nothing). */
void iabn_args_completion_bash(FILE *f)
{
    fprintf(f, "# bash completion for iabn, generated by `iabn completion bash`\n"
               "_iabn() {\n"
               "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
               "  local cmd=${COMP_WORDS[1]} words=\"\"\n"
               "  if [ \"$cmd\" = bench ]; then cmd=\"bench ${COMP_WORDS[2]}\"; fi\n"
               "  if [ $COMP_CWORD -eq 1 ]; then\n"
               "    COMPREPLY=($(compgen -W \"");
    for (int c = 0; c < IABN_C_COUNT; c++)
        if (!strchr(commands[c].name, ' ')) fprintf(f, "%s ", commands[c].name);
    fprintf(f, "bench version help\" -- \"$cur\")); return\n"
               "  fi\n"
               "  if [ \"${COMP_WORDS[1]}\" = bench ] && [ $COMP_CWORD -eq 2 ]; then\n"
               "    COMPREPLY=($(compgen -W \"");
    for (int c = 0; c < IABN_C_COUNT; c++)
        if (!strncmp(commands[c].name, "bench ", 6)) fprintf(f, "%s ", commands[c].name + 6);
    fprintf(f, "\" -- \"$cur\")); return\n"
               "  fi\n"
               "  case \"$prev\" in\n");
    for (int i = 0; i < IABN_O_COUNT; i++) {
        const iabn_option *o = &table[i];
        if (o->type == IABN_T_FLAG) continue;
        fprintf(f, "    --%s", o->name);
        if (o->alias) fprintf(f, "|--%s", o->alias);
        if (o->short_name) fprintf(f, "|-%c", o->short_name);
        fprintf(f, ")\n      ");
        if (o->type == IABN_T_PATH) fprintf(f, "COMPREPLY=($(compgen -f -- \"$cur\"))");
        else if (o->type == IABN_T_DEVICE) fprintf(f, "COMPREPLY=($(compgen -W \"cpu cuda\" -- \"$cur\"))");
        else if (o->type == IABN_T_CHOICE) {
            fprintf(f, "COMPREPLY=($(compgen -W \"");
            for (int k = 0; o->choice(k); k++) fprintf(f, "%s ", o->choice(k));
            fprintf(f, "\" -- \"$cur\"))");
        } else fprintf(f, "COMPREPLY=()");
        fprintf(f, "; return;;\n");
    }
    fprintf(f, "  esac\n  case \"$cmd\" in\n");
    for (int c = 0; c < IABN_C_COUNT; c++) {
        fprintf(f, "    \"%s\") words=\"", commands[c].name);
        for (int i = 0; i < IABN_O_COUNT; i++) {
            const iabn_option *o = &table[i];
            if (!(o->cmds & IABN_CMD(c))) continue;
            fprintf(f, "--%s ", o->name);
            if (o->alias) fprintf(f, "--%s ", o->alias);
            if (o->short_name) fprintf(f, "-%c ", o->short_name);
        }
        fprintf(f, "--help\";;\n");
    }
    fprintf(f, "  esac\n"
               "  if [[ \"$cur\" == -* ]]; then COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
               "  else COMPREPLY=($(compgen -f -- \"$cur\")); fi\n"
               "}\n"
               "complete -o filenames -F _iabn iabn\n");
}

/* ---- config overrides ---------------------------------------------------- */

char *iabn_args_config_json(const iabn_args *a)
{
    cJSON *root = cJSON_CreateObject();
    int any = 0;
    for (int i = 0; i < IABN_O_COUNT; i++) {
        const iabn_option *o = &table[i];
        const iabn_optval *v = &a->v[i];
        if (!v->set || !o->config_key || !(o->cmds & IABN_CMD(a->cmd))) continue;
        cJSON *obj = root;
        char key[128];
        snprintf(key, sizeof key, "%s", o->config_key);
        char *part = key;
        for (char *dot; (dot = strchr(part, '.')); part = dot + 1) {
            *dot = 0;
            cJSON *sub = cJSON_GetObjectItemCaseSensitive(obj, part);
            if (!sub) sub = cJSON_AddObjectToObject(obj, part);
            obj = sub;
        }
        switch (o->type) {
        case IABN_T_FLAG: cJSON_AddBoolToObject(obj, part, 1); break;
        case IABN_T_INT: cJSON_AddNumberToObject(obj, part, (double)v->i); break;
        case IABN_T_FLOAT:
        case IABN_T_BYTES: cJSON_AddNumberToObject(obj, part, v->f); break;
        case IABN_T_SIZE: {
            int hw[2] = {v->h, v->w};
            cJSON_AddItemToObject(obj, part, cJSON_CreateIntArray(hw, 2));
            break;
        }
        default: cJSON_AddStringToObject(obj, part, v->s); break;
        }
        any = 1;
    }
    char *out = any ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return out;
}
