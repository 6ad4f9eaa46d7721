/* options.h: the one option table of the `iabn` program.
 *
 * Every flag of every command is one row of a table (options.c): its long
 * name (and an alias), short letter, value type, allowed range or choices,
 * help text, the experiment-config key it overrides, and the commands that
 * take it.  Commands parse through iabn_args_parse(); `--help`, the bash
 * completion are generated from the same rows, so
 * a flag means one thing everywhere.
 *
 * Adding a flag: one IABN_O_* name below (keep the list grouped), one row in
 * options.c's table naming the commands that take it, then read it in the
 * command as args.v[IABN_O_NAME] (.set, .i, .f, .s, .h/.w, .list/.n). */
#ifndef IABN_TOOLS_OPTIONS_H
#define IABN_TOOLS_OPTIONS_H

#include <stdio.h>

#include "iabn.h"

/* The commands (and benchmarks) that take flags. */
typedef enum iabn_cmd_id {
    IABN_C_TRAIN = 0,
    IABN_C_EVAL,
    IABN_C_SEGTRAIN,
    IABN_C_SEGEVAL,
    IABN_C_PREDICT,
    IABN_C_MEM,
    IABN_C_STEP,
    IABN_C_DEMO,
    IABN_C_DATA,
    IABN_C_PLOT,
    IABN_C_COMPLETION,
    IABN_C_BENCH_CONV,
    IABN_C_BENCH_BLOCK,
    IABN_C_BENCH_STEP,
    IABN_C_BENCH_ALLREDUCE,
    IABN_C_CONVERT,
    IABN_C_MODELS,
    IABN_C_EXPORT,
    IABN_C_COUNT
} iabn_cmd_id;

#define IABN_CMD(c) (1u << (c))

typedef enum iabn_opt_type {
    IABN_T_FLAG = 0, /* no value                                                */
    IABN_T_INT,      /* integer in [lo, hi]                                     */
    IABN_T_FLOAT,    /* finite number in [lo, hi] ((lo, hi] with lo_open)       */
    IABN_T_FLOATS,   /* comma-separated numbers, each as IABN_T_FLOAT, up to 8  */
    IABN_T_BYTES,    /* 12GiB, 512MiB, 3.5GB, 4096                              */
    IABN_T_SIZE,     /* HxW or S (= SxS), each side in [lo, hi]; lo 0: also 0   */
    IABN_T_STRING,   /* any text                                                */
    IABN_T_PATH,     /* a file or directory (completes as one)                  */
    IABN_T_CHOICE,   /* one of choices (several, comma-separated, with multi)   */
    IABN_T_DEVICE    /* cpu, cuda, cuda:N (cuda only when built in)             */
} iabn_opt_type;

typedef enum iabn_opt_id {
    /* model and experiment */
    IABN_O_MODEL = 0, IABN_O_CONFIG, IABN_O_DATA_PATH, IABN_O_BN, IABN_O_ACT, IABN_O_ACT_PARAM,
    IABN_O_CLASSES, IABN_O_DATASET,
    /* optimisation (torchvision reference names) */
    IABN_O_EPOCHS, IABN_O_BATCH, IABN_O_BATCH_PER_RANK, IABN_O_LR, IABN_O_MOMENTUM, IABN_O_WD,
    IABN_O_NESTEROV, IABN_O_LR_SCHEDULER, IABN_O_LR_STEP_SIZE, IABN_O_LR_GAMMA,
    IABN_O_LR_WARMUP_EPOCHS, IABN_O_LABEL_SMOOTHING, IABN_O_CLIP,
    /* run control */
    IABN_O_WORKERS, IABN_O_OUTPUT_DIR, IABN_O_RESUME, IABN_O_INIT, IABN_O_PRINT_FREQ,
    IABN_O_SEED, IABN_O_TEST_ONLY, IABN_O_MAX_STEPS, IABN_O_TIME_LIMIT, IABN_O_BUDGET,
    IABN_O_NO_ACCUMULATE, IABN_O_STRICT, IABN_O_RESUME_OVERRIDE, IABN_O_CHECKPOINT_EVERY,
    IABN_O_ON_NONFINITE,
    /* input and evaluation */
    IABN_O_CROP, IABN_O_SCALE, IABN_O_SIZE, IABN_O_TEN_CROPS, IABN_O_SCALES, IABN_O_FLIP,
    IABN_O_LONGEST, IABN_O_SPLIT, IABN_O_WINDOW, IABN_O_POOLING_SIZE,
    /* machine */
    IABN_O_DEVICE, IABN_O_THREADS,
    /* output */
    IABN_O_OUTPUT, IABN_O_JSON, IABN_O_QUIET, IABN_O_VERBOSE,
    /* iabn predict */
    IABN_O_COLOR, IABN_O_LABELIDS,
    /* iabn mem */
    IABN_O_LIST, IABN_O_BLOCKS, IABN_O_STEPS, IABN_O_PLOT,
    /* iabn step */
    IABN_O_INPUT, IABN_O_WEIGHTS, IABN_O_TRAIN_MODE, IABN_O_EVAL_MODE, IABN_O_NO_DROPOUT,
    IABN_O_NO_INPUT_3X3, IABN_O_DILATED, IABN_O_FROZEN_BN, IABN_O_CHECK, IABN_O_INIT_SEED,
    /* iabn demo */
    IABN_O_DIR,
    /* iabn data */
    IABN_O_EXACT, IABN_O_JITTER, IABN_O_V12, IABN_O_TRAIN_IMAGES, IABN_O_VAL_IMAGES,
    IABN_O_WIDTH, IABN_O_HEIGHT,
    /* benchmarks */
    IABN_O_REPEAT, IABN_O_PEAK, IABN_O_CASE, IABN_O_COLD, IABN_O_PLAIN, IABN_O_OPS, IABN_O_LAYERS,
    /* saved activations: offloading and the automatic strategy */
    IABN_O_STRATEGY, IABN_O_OFFLOAD, IABN_O_OFFLOAD_BF16, IABN_O_LOOKAHEAD, IABN_O_LARGEST_BATCH, IABN_O_COST,
    IABN_O_COPY_BW, IABN_O_SIM,
    /* activation layouts */
    IABN_O_LAYOUT, IABN_O_WINOGRAD,
    /* data parallel */
    IABN_O_WORLD, IABN_O_MAX_BYTES,
    /* iabn models, convert, export */
    IABN_O_NO_MEMORY, IABN_O_TORCHVISION, IABN_O_NO_MODULE_PREFIX, IABN_O_FLAT, IABN_O_FORMAT,
    IABN_O_FOLD_BN, IABN_O_OPSET, IABN_O_GRAPH,
    IABN_O_COUNT
} iabn_opt_id;

typedef struct iabn_option {
    const char *name;        /* long name, without "--"                          */
    const char *alias;       /* a second long name, or NULL                      */
    char short_name;         /* -x, or 0                                         */
    iabn_opt_type type;
    double lo, hi;           /* numeric range; hi == 0: no upper bound           */
    int lo_open;             /* FLOAT: lo itself is refused (must be > lo)        */
    unsigned multi;          /* CHOICE: the commands that take a comma-separated list */
    /* CHOICE: the i-th allowed value, NULL past the last */
    const char *(*choice)(int i);
    const char *metavar;     /* N, F, PATH, ...                                  */
    const char *config_key;  /* the experiment-config key it overrides, or NULL  */
    unsigned cmds;           /* IABN_CMD(IABN_C_TRAIN) | ...                     */
    const char *help;
} iabn_option;

typedef struct iabn_command_info {
    const char *name;        /* "train", "bench step"                            */
    const char *synopsis;    /* positional arguments: "[CONFIG.json] DATA_DIR"    */
    int min_pos, max_pos;    /* how many positional arguments                    */
    const char *summary;     /* one line                                          */
    const char *notes;       /* printed after the flags, or NULL                 */
} iabn_command_info;

/* The table, indexed by iabn_opt_id / iabn_cmd_id. */
const iabn_option *iabn_option_get(iabn_opt_id id);
const iabn_command_info *iabn_command_get(iabn_cmd_id c);

#define IABN_MAX_POS 16

typedef struct iabn_optval {
    int set;                 /* given on the command line                        */
    long long i;             /* INT, FLAG (1)                                     */
    double f;                /* FLOAT, BYTES                                      */
    const char *s;           /* the text as given (every type but FLAG)          */
    int h, w;                /* SIZE                                              */
    float list[8];           /* FLOATS                                            */
    int n;
} iabn_optval;

typedef struct iabn_args {
    iabn_cmd_id cmd;
    iabn_optval v[IABN_O_COUNT];
    const char *pos[IABN_MAX_POS];
    int npos;
} iabn_args;

enum { IABN_ARGS_OK = 0, IABN_ARGS_HELP = 1, IABN_ARGS_BAD = 2 };

/* Parses argv[1..] (argv[0] is the command's name) against the rows that list
 * cmd: --name VALUE, --name=VALUE, -x VALUE, -xVALUE, -- ends the flags.  A
 * value out of range, an unknown flag, a missing value or a wrong number of
 * positional arguments prints one line naming the flag and what is allowed
 * and returns IABN_ARGS_BAD; -h / --help prints the generated help and returns
 * IABN_ARGS_HELP.  A command returns `rc == IABN_ARGS_HELP ? 0 : 2` then. */
int iabn_args_parse(iabn_args *a, iabn_cmd_id cmd, int argc, char **argv);

/* The generated help of a command. */
void iabn_args_help(iabn_cmd_id cmd, FILE *f);
/* The bash completion script (`iabn completion bash`). */
void iabn_args_completion_bash(FILE *f);

/* The experiment-config keys the given flags override, as a JSON object
 * ({"optimizer": {"learning_rate": 0.2}}); NULL when none (caller frees).
 * Parsing it over a config (iabn_config_parse) applies the flags. */
char *iabn_args_config_json(const iabn_args *a);

/* "must be at least 1", "must be > 0", "must be one of a, b, c": what the
 * row allows, for messages. */
void iabn_option_allowed(const iabn_option *o, char *buf, size_t n);

#endif
