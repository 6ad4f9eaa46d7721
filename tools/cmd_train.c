/* cmd_train.c: `iabn train`, `iabn eval`, `iabn segtrain`, `iabn segeval`:
 * the option table's flags turned into an experiment config and the
 * trainer's options.  The config is built in layers: the reference recipe
 * (or, for eval, the checkpoint's own config), then a JSON file if one is
 * given, then the flags. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/cmd_train.h"
#include "tools/commands.h"
#include "models/train/trainer.h"
#include "tools/options.h"
#include "tools/progress.h"

/* Under mpirun / srun: the job's communicator (MPI_Init); one process
 * otherwise.  (A bare --device cuda is each rank's own GPU: the trainer's
 * iabn_device_open_rank.) */
static int job_open(const char *cmd, iabn_comm **comm)
{
    iabn_err e = {0};
    if (iabn_comm_new(NULL, comm, &e)) {
        fprintf(stderr, "iabn %s: %s\n", cmd, e.msg);
        return 1;
    }
    return 0;
}

/* Reports a failure naming the rank, and ends the job's communicator. */
static int job_close(const char *cmd, iabn_comm *comm, int rc, const iabn_err *e)
{
    if (rc && iabn_comm_size(comm) > 1)
        fprintf(stderr, "iabn %s (rank %d of %d): %s\n", cmd, iabn_comm_rank(comm),
                iabn_comm_size(comm), e->msg);
    else if (rc)
        fprintf(stderr, "iabn %s: %s\n", cmd, e->msg);
    /* after a failure this rank neither waits for the others nor finalises
     * MPI: the launcher ends them when this one exits non-zero */
    if (rc) iabn_comm_give_up(comm);
    iabn_comm_free(comm);
    return rc ? 1 : 0;
}

static int ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

int iabn_config_from_args(const iabn_args *a, iabn_config *c, int have_base, const char *what,
                          iabn_err *e)
{
    int rc = 0;
    const char *cfg = a->v[IABN_O_CONFIG].s;
    if (cfg && (rc = iabn_config_load(c, cfg, e))) return rc;
    char *json = iabn_args_config_json(a);
    if (json) rc = iabn_config_parse(c, json, "command-line flags", e);
    free(json);
    if (rc) return rc;
    /* a step schedule asked for on the command line gets torchvision's step */
    if (c->schedule.kind == IABN_SCHED_STEP && c->schedule.step_size < 1) c->schedule.step_size = 30;
    if (a->v[IABN_O_LR_WARMUP_EPOCHS].set) {
        if (c->schedule.per_step)
            return iabn_err_set(e, IABN_EINVAL, "--lr-warmup-epochs: the schedule runs per step: "
                                "give optimizer.schedule.params.warmup in steps");
        c->schedule.warmup = (int)a->v[IABN_O_LR_WARMUP_EPOCHS].i;
    }
    const iabn_optval *crop = &a->v[IABN_O_CROP];
    if (crop->set && a->cmd == IABN_C_SEGTRAIN) {
        c->crop_h = crop->h;
        c->crop_w = crop->w;
    } else if (crop->set) {
        if (crop->h != crop->w)
            return iabn_err_set(e, IABN_EINVAL, "--crop %s: classification crops are square (N)",
                                crop->s);
        if (a->cmd == IABN_C_TRAIN) {
            /* validation at the same size, resized as the reference's 256 / 224 */
            c->crop_train = c->crop_val = crop->h;
            c->scale_val = (crop->h * 8 + 6) / 7;
        } else {
            c->crop_val = crop->h;
        }
    }
    /* The in-place modes need an invertible activation: without a word from
     * the config or the flags, the reference's leaky_relu(0.01). */
    if (!have_base && !cfg && !a->v[IABN_O_ACT].set && iabn_bn_mode_is_inplace(c->bn_mode) &&
        c->act.kind == IABN_ACT_RELU) {
        c->act.kind = IABN_ACT_LEAKY_RELU;
        if (!a->v[IABN_O_ACT_PARAM].set) c->act.param = iabn_act_default_param(c->act.kind);
    }
    (void)what;
    return iabn_config_check(c, e);
}

static int run_train_like(int argc, char **argv, int seg)
{
    iabn_cmd_id cid = seg ? IABN_C_SEGTRAIN : IABN_C_TRAIN;
    const char *cmd = seg ? "segtrain" : "train";
    iabn_args a;
    int rc = iabn_args_parse(&a, cid, argc, argv);
    if (rc) return rc == IABN_ARGS_HELP ? 0 : 2;
    /* [CONFIG.json] DATA_DIR, either of them also as a flag */
    const char *data = a.v[IABN_O_DATA_PATH].s;
    int p = 0, cfg_flag = a.v[IABN_O_CONFIG].set;
    if (a.npos >= 2 || (a.npos == 1 && !cfg_flag && (data || ends_with(a.pos[0], ".json")))) {
        if (cfg_flag) {
            fprintf(stderr, "iabn %s: a config both as --config and as an argument\n", cmd);
            return 2;
        }
        a.v[IABN_O_CONFIG].set = 1;
        a.v[IABN_O_CONFIG].s = a.pos[p++];
    }
    if (p < a.npos) {
        if (data) {
            fprintf(stderr, "iabn %s: the data both as --data-path and as an argument\n", cmd);
            return 2;
        }
        data = a.pos[p++];
    }
    if (!data) {
        fprintf(stderr, "iabn %s: no data set (DATA_DIR or --data-path; iabn %s --help)\n", cmd, cmd);
        return 2;
    }
    if (!a.v[IABN_O_CONFIG].set && !a.v[IABN_O_MODEL].set && !seg) {
        fprintf(stderr, "iabn %s: which network? --model NAME (iabn mem --list) or a config\n", cmd);
        return 2;
    }
    iabn_train_opts o;
    iabn_trainer_opts_defaults(&o);
    o.log = iabn_cli_log;
    o.task = seg ? IABN_TASK_SEGMENT : IABN_TASK_CLASSIFY;
    o.dataset = IABN_DATASET_CITYSCAPES;
    if (a.v[IABN_O_DATASET].set) {
        if (iabn_dataset_kind_parse(a.v[IABN_O_DATASET].s, &o.dataset) ||
            o.dataset == IABN_DATASET_IMAGEFOLDER) {
            fprintf(stderr, "iabn %s: --dataset must be cityscapes or vistas\n", cmd);
            return 2;
        }
    } else if (seg) {
        fprintf(stderr, "iabn %s: --dataset cityscapes|vistas is required\n", cmd);
        return 2;
    }
    if (a.v[IABN_O_TEST_ONLY].set && !a.v[IABN_O_RESUME].set) {
        fprintf(stderr, "iabn %s: --test-only needs --resume CHECKPOINT\n", cmd);
        return 2;
    }
    iabn_config cfg;
    iabn_config_reference(&cfg, seg);
    iabn_err e = {0};
    if (iabn_config_from_args(&a, &cfg, 0, cmd, &e)) {
        fprintf(stderr, "iabn %s: %s\n", cmd, e.msg);
        return 2;
    }
    o.config = &cfg;
    o.data_dir = data;
    if (a.v[IABN_O_WORKERS].set) o.workers = (int)a.v[IABN_O_WORKERS].i;
    if (a.v[IABN_O_PRINT_FREQ].set) o.print_freq = (int)a.v[IABN_O_PRINT_FREQ].i;
    if (a.v[IABN_O_SEED].set) o.seed = a.v[IABN_O_SEED].i;
    if (a.v[IABN_O_THREADS].set) o.threads = (int)a.v[IABN_O_THREADS].i;
    if (a.v[IABN_O_MAX_STEPS].set) o.max_steps = a.v[IABN_O_MAX_STEPS].i;
    if (a.v[IABN_O_TIME_LIMIT].set) o.time_limit = a.v[IABN_O_TIME_LIMIT].f;
    if (a.v[IABN_O_BUDGET].set) o.budget_bytes = a.v[IABN_O_BUDGET].f;
    o.resume = a.v[IABN_O_RESUME].s;
    o.init = a.v[IABN_O_INIT].s;
    o.output_dir = a.v[IABN_O_OUTPUT_DIR].s;
    o.device = a.v[IABN_O_DEVICE].s;
    o.evaluate_only = a.v[IABN_O_TEST_ONLY].set;
    o.no_accumulate = a.v[IABN_O_NO_ACCUMULATE].set;
    o.resume_override = a.v[IABN_O_RESUME_OVERRIDE].set;
    if (a.v[IABN_O_CHECKPOINT_EVERY].set) o.checkpoint_every = (int)a.v[IABN_O_CHECKPOINT_EVERY].i;
    o.on_nonfinite_skip = a.v[IABN_O_ON_NONFINITE].set && !strcmp(a.v[IABN_O_ON_NONFINITE].s, "skip");
    o.strict_data = a.v[IABN_O_STRICT].set;
    o.quiet = a.v[IABN_O_QUIET].set;
    o.verbose = a.v[IABN_O_VERBOSE].set;
    if (job_open(cmd, &o.comm)) return 1;
    if (a.v[IABN_O_BATCH_PER_RANK].set) /* the global batch: N times the ranks */
        cfg.batch_size = (int)a.v[IABN_O_BATCH_PER_RANK].i * iabn_comm_size(o.comm);
    /* progress a person reads: a live line on a terminal, plain lines when piped */
    iabn_progress prog;
    iabn_progress_init(&prog, stdout, cfg.batch_size, o.print_freq, o.max_steps, o.time_limit);
    o.progress = o.quiet ? NULL : iabn_progress_report;
    o.log = iabn_progress_log;
    o.user = &prog;
    o.stop = iabn_cli_stop_on_signals();
    iabn_train_result res;
    rc = iabn_trainer_run(&o, &res, &e);
    if (rc || !res.stopped_by_signal || !iabn_cli_stop_signal()) return job_close(cmd, o.comm, rc, &e);
    job_close(cmd, o.comm, 0, &e);
    return 128 + iabn_cli_stop_signal();
}

int iabn_cmd_train(int argc, char **argv) { return run_train_like(argc, argv, 0); }
int iabn_cmd_segtrain(int argc, char **argv) { return run_train_like(argc, argv, 1); }

static int run_eval_like(int argc, char **argv, int seg)
{
    iabn_cmd_id cid = seg ? IABN_C_SEGEVAL : IABN_C_EVAL;
    const char *cmd = seg ? "segeval" : "eval";
    iabn_args a;
    int rc = iabn_args_parse(&a, cid, argc, argv);
    if (rc) return rc == IABN_ARGS_HELP ? 0 : 2;
    /* [CONFIG.json] CHECKPOINT DATA_DIR */
    const char *data = a.v[IABN_O_DATA_PATH].s;
    int p = 0, need = 1 + !data;
    if (a.npos > need) {
        if (a.v[IABN_O_CONFIG].set) {
            fprintf(stderr, "iabn %s: a config both as --config and as an argument\n", cmd);
            return 2;
        }
        a.v[IABN_O_CONFIG].set = 1;
        a.v[IABN_O_CONFIG].s = a.pos[p++];
    }
    if (a.npos - p != need) {
        fprintf(stderr, "iabn %s: usage: iabn %s %s\n", cmd, cmd, iabn_command_get(cid)->synopsis);
        return 2;
    }
    iabn_eval_opts o;
    memset(&o, 0, sizeof o);
    o.task = seg ? IABN_TASK_SEGMENT : IABN_TASK_CLASSIFY;
    o.dataset = seg ? IABN_DATASET_CITYSCAPES : IABN_DATASET_IMAGEFOLDER;
    o.checkpoint = a.pos[p++];
    o.data_dir = data ? data : a.pos[p++];
    if (seg) {
        if (!a.v[IABN_O_DATASET].set || iabn_dataset_kind_parse(a.v[IABN_O_DATASET].s, &o.dataset) ||
            o.dataset == IABN_DATASET_IMAGEFOLDER) {
            fprintf(stderr, "iabn %s: --dataset cityscapes|vistas is required\n", cmd);
            return 2;
        }
    }
    iabn_config cfg;
    iabn_config_defaults(&cfg);
    iabn_err e = {0};
    /* the checkpoint describes itself; a config file and the flags override */
    if (!a.v[IABN_O_CONFIG].set && iabn_config_from_checkpoint(&cfg, o.checkpoint, &e)) {
        fprintf(stderr, "iabn %s: %s\n", cmd, e.msg);
        return 1;
    }
    if (iabn_config_from_args(&a, &cfg, 1, cmd, &e)) {
        fprintf(stderr, "iabn %s: %s\n", cmd, e.msg);
        return 2;
    }
    o.config = &cfg;
    o.workers = a.v[IABN_O_WORKERS].set ? (int)a.v[IABN_O_WORKERS].i : 2;
    if (a.v[IABN_O_CROP].set) o.crop = a.v[IABN_O_CROP].h;
    if (a.v[IABN_O_SCALE].set) o.scale = (int)a.v[IABN_O_SCALE].i;
    if (a.v[IABN_O_LONGEST].set) o.longest = (int)a.v[IABN_O_LONGEST].i;
    if (a.v[IABN_O_THREADS].set) o.threads = (int)a.v[IABN_O_THREADS].i;
    if (a.v[IABN_O_BATCH].set) o.batch = (int)a.v[IABN_O_BATCH].i;
    if (a.v[IABN_O_SCALES].set) {
        o.nscales = a.v[IABN_O_SCALES].n;
        memcpy(o.scales, a.v[IABN_O_SCALES].list, sizeof o.scales);
    }
    o.window_h = a.v[IABN_O_WINDOW].h;
    o.window_w = a.v[IABN_O_WINDOW].w;
    o.pool_set = a.v[IABN_O_POOLING_SIZE].set;
    o.pool_h = a.v[IABN_O_POOLING_SIZE].h;
    o.pool_w = a.v[IABN_O_POOLING_SIZE].w;
    o.ten_crops = a.v[IABN_O_TEN_CROPS].set;
    o.flip = a.v[IABN_O_FLIP].set;
    o.strict = a.v[IABN_O_STRICT].set;
    o.split = a.v[IABN_O_SPLIT].s;
    o.device = a.v[IABN_O_DEVICE].s;
    o.verbose = a.v[IABN_O_VERBOSE].set;
    iabn_train_result res;
    o.log = iabn_cli_log;
    if (job_open(cmd, &o.comm)) return 1;
    rc = iabn_trainer_evaluate(&o, &res, &e);
    return job_close(cmd, o.comm, rc, &e);
}

int iabn_cmd_eval(int argc, char **argv) { return run_eval_like(argc, argv, 0); }
int iabn_cmd_segeval(int argc, char **argv) { return run_eval_like(argc, argv, 1); }
