/* cmd_train.c: `iabn train`, `iabn eval`, `iabn segtrain`, `iabn segeval`:
 * argument parsing over the shared trainer (trainer.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/commands.h"
#include "models/train/trainer.h"

/* Under mpirun / srun: the job's communicator (MPI_Init), and on GPUs the
 * local rank's device when --device names none; one process otherwise. */
static int job_open(const char *cmd, iabn_comm **comm, const char **device, char *dev, size_t n)
{
    iabn_err e = {0};
    if (iabn_comm_new(NULL, comm, &e)) {
        fprintf(stderr, "iabn %s: %s\n", cmd, e.msg);
        return 1;
    }
    if (iabn_comm_size(*comm) > 1 && *device && !strcmp(*device, "cuda")) {
        snprintf(dev, n, "cuda:%d", iabn_comm_local_rank(*comm));
        *device = dev;
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

static void usage_train(int seg)
{
    if (seg)
        printf("usage: iabn segtrain CONFIG.json DATA_DIR --dataset cityscapes|vistas "
               "[--init BODY.safetensors] [flags]\n");
    else
        printf("usage: iabn train CONFIG.json DATA_DIR [flags]   (DATA_DIR holds train/ and val/)\n");
    printf("  --epochs N          epochs (optimizer.schedule.epochs)\n"
           "  -b, --batch-size N  global batch (optimizer.batch_size)\n"
           "  --lr F              learning rate (optimizer.learning_rate)\n"
           "  -j, --workers N     data loading threads (2)\n"
           "  --bn MODE           standard, checkpoint, checkpoint_opt, inplace_abn, inplace_abn_ii\n"
           "  --resume CKPT       continue exactly where CKPT left off\n"
           "  --resume-override   resume although the config or data differ (listed)\n"
           "  --output-dir DIR    config.json, metrics.jsonl, TensorBoard events, checkpoints\n"
           "  --print-freq N      progress line every N steps (10)\n"
           "  --seed N            data order, augmentation, init and dropout (1)\n"
           "  --device DEV        cpu, cuda or cuda:N (cpu)\n"
           "  --evaluate          only evaluate (with --resume CKPT)\n"
           "  --budget BYTES      memory for the step, e.g. 12GiB (default: available memory)\n"
           "  --no-accumulate     refuse instead of splitting the batch into micro-batches\n"
           "  --threads T         CPU threads\n"
           "  --max-steps N, --time-limit SECONDS   stop early (checkpoint kept)\n"
           "  --checkpoint-every N  checkpoint_last every N steps, mid-epoch too\n"
           "  --strict            an undecodable image is an error, not a skipped file\n"
           "  --on-nonfinite stop|skip   a NaN/Inf loss or gradient stops the run (stop,\n"
           "                      default) or skips the step (skip); either names the step\n"
           "  -q, --quiet / -v, --verbose\n");
}

int run_train_like(int argc, char **argv, int seg)
{
    const char *cmd = seg ? "segtrain" : "train";
    iabn_train_opts o;
    iabn_trainer_opts_defaults(&o);
    o.log = iabn_cli_log;
    o.task = seg ? IABN_TASK_SEGMENT : IABN_TASK_CLASSIFY;
    o.dataset = IABN_DATASET_CITYSCAPES;
    const char *pos[2] = {NULL, NULL};
    int npos = 0, have_dataset = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        long long n;
        double f;
#define VAL() if (!(v = iabn_flag_value(argc, argv, &i, cmd))) return 2
#define INT(dst) VAL(); if (iabn_parse_int(v, &n) || n < 0) { fprintf(stderr, "iabn %s: %s %s: not a count\n", cmd, a, v); return 2; } dst = n
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage_train(seg); return 0; }
        else if (!strcmp(a, "--epochs")) { INT(o.epochs); }
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) { INT(o.batch); }
        else if (!strcmp(a, "-j") || !strcmp(a, "--workers")) { INT(o.workers); }
        else if (!strcmp(a, "--print-freq")) { INT(o.print_freq); }
        else if (!strcmp(a, "--seed")) { INT(o.seed); }
        else if (!strcmp(a, "--threads")) { INT(o.threads); }
        else if (!strcmp(a, "--max-steps")) { INT(o.max_steps); }
        else if (!strcmp(a, "--checkpoint-every")) {
            INT(o.checkpoint_every);
            if (n < 1) { fprintf(stderr, "iabn %s: --checkpoint-every must be at least 1\n", cmd); return 2; }
        }
        else if (!strcmp(a, "--lr")) {
            VAL();
            if (iabn_parse_float(v, &f) || f <= 0) { fprintf(stderr, "iabn %s: --lr %s\n", cmd, v); return 2; }
            o.lr = (float)f;
        } else if (!strcmp(a, "--time-limit")) {
            VAL();
            if (iabn_parse_float(v, &f) || f <= 0) { fprintf(stderr, "iabn %s: --time-limit %s\n", cmd, v); return 2; }
            o.time_limit = f;
        } else if (!strcmp(a, "--budget")) {
            VAL();
            o.budget_bytes = iabn_parse_bytes(v);
            if (o.budget_bytes <= 0) { fprintf(stderr, "iabn %s: --budget %s: not a size\n", cmd, v); return 2; }
        } else if (!strcmp(a, "--bn")) { VAL(); o.bn = v; }
        else if (!strcmp(a, "--resume")) { VAL(); o.resume = v; }
        else if (!strcmp(a, "--init") && seg) { VAL(); o.init = v; }
        else if (!strcmp(a, "--output-dir")) { VAL(); o.output_dir = v; }
        else if (!strcmp(a, "--device")) { VAL(); if (iabn_check_device(v, cmd)) return 2; o.device = v; }
        else if (!strcmp(a, "--dataset") && seg) {
            VAL();
            if (iabn_dataset_kind_parse(v, &o.dataset) || o.dataset == IABN_DATASET_IMAGEFOLDER) {
                fprintf(stderr, "iabn %s: --dataset must be cityscapes or vistas\n", cmd);
                return 2;
            }
            have_dataset = 1;
        }
        else if (!strcmp(a, "--evaluate")) o.evaluate_only = 1;
        else if (!strcmp(a, "--no-accumulate")) o.no_accumulate = 1;
        else if (!strcmp(a, "--resume-override")) o.resume_override = 1;
        else if (!strcmp(a, "--on-nonfinite")) {
            VAL();
            if (!strcmp(v, "skip")) o.on_nonfinite_skip = 1;
            else if (strcmp(v, "stop")) {
                fprintf(stderr, "iabn %s: --on-nonfinite %s: stop or skip\n", cmd, v);
                return 2;
            }
        }
        else if (!strcmp(a, "--strict")) o.strict_data = 1;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) o.quiet = 1;
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) o.verbose = 1;
        else if (a[0] == '-') { fprintf(stderr, "iabn %s: unknown flag %s (iabn %s --help)\n", cmd, a, cmd); return 2; }
        else if (npos < 2) pos[npos++] = a;
        else { fprintf(stderr, "iabn %s: unexpected argument %s\n", cmd, a); return 2; }
#undef INT
#undef VAL
    }
    if (npos != 2 || (seg && !have_dataset)) {
        usage_train(seg);
        return 2;
    }
    if (o.evaluate_only && !o.resume) {
        fprintf(stderr, "iabn %s: --evaluate needs --resume CHECKPOINT\n", cmd);
        return 2;
    }
    o.config_path = pos[0];
    o.data_dir = pos[1];
    o.stop = iabn_cli_stop_on_signals();
    iabn_train_result res;
    iabn_err e = {0};
    char dev[32];
    if (job_open(cmd, &o.comm, &o.device, dev, sizeof dev)) return 1;
    int rc = iabn_trainer_run(&o, &res, &e);
    if (rc || !res.stopped_by_signal || !iabn_cli_stop_signal()) return job_close(cmd, o.comm, rc, &e);
    job_close(cmd, o.comm, 0, &e);
    return 128 + iabn_cli_stop_signal();
}

int iabn_cmd_train(int argc, char **argv) { return run_train_like(argc, argv, 0); }
int iabn_cmd_segtrain(int argc, char **argv) { return run_train_like(argc, argv, 1); }

static void usage_eval(int seg)
{
    if (seg)
        printf("usage: iabn segeval CONFIG CHECKPOINT DATA_DIR --dataset cityscapes|vistas\n"
               "       [--scales 0.7,1,1.2] [--flip] [--longest 2048] [--split val] [-v]\n"
               "       [--window HxW] (sliding window)  [--pooling-size HxW|0] (DeepLabV3 head,\n"
               "       default 84x84 as the reference evaluates; 0: the global mean)\n"
               "  --scales 0.7,1,1.2 --flip is the reference's test-time augmentation: the class\n"
               "  probabilities of every pass are averaged.\n");
    else
        printf("usage: iabn eval CONFIG CHECKPOINT DATA_DIR [--crop 224] [--scale 256] "
               "[--ten-crops] [-b N] [-j N]\n");
    printf("       [--device cpu|cuda[:N]] [--threads T]\n");
}

int run_eval_like(int argc, char **argv, int seg)
{
    const char *cmd = seg ? "segeval" : "eval";
    iabn_eval_opts o;
    memset(&o, 0, sizeof o);
    o.task = seg ? IABN_TASK_SEGMENT : IABN_TASK_CLASSIFY;
    o.dataset = seg ? IABN_DATASET_CITYSCAPES : IABN_DATASET_IMAGEFOLDER;
    o.workers = 2;
    const char *pos[3];
    int npos = 0, have_dataset = !seg, verbose = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage_eval(seg); return 0; }
        else if (!strcmp(a, "--ten-crops")) o.ten_crops = 1;
        else if (!strcmp(a, "--flip")) o.flip = 1;
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) verbose = 1;
        else if (!strcmp(a, "--crop") || !strcmp(a, "--scale") || !strcmp(a, "-b") ||
                 !strcmp(a, "--batch-size") || !strcmp(a, "-j") || !strcmp(a, "--workers") ||
                 !strcmp(a, "--longest") || !strcmp(a, "--threads")) {
            if (!(v = iabn_flag_value(argc, argv, &i, cmd))) return 2;
            if (iabn_parse_int(v, &n) || n < -1) { fprintf(stderr, "iabn %s: %s %s\n", cmd, a, v); return 2; }
            if (!strcmp(a, "--crop")) o.crop = (int)n;
            else if (!strcmp(a, "--scale")) o.scale = (int)n;
            else if (!strcmp(a, "--longest")) o.longest = (int)n;
            else if (!strcmp(a, "--threads")) o.threads = (int)n;
            else if (a[1] == 'j' || !strcmp(a, "--workers")) o.workers = (int)n;
            else o.batch = (int)n;
        } else if (!strcmp(a, "--scales")) {
            if (!(v = iabn_flag_value(argc, argv, &i, cmd))) return 2;
            o.nscales = iabn_parse_floats(v, o.scales, 8);
            if (o.nscales < 1) { fprintf(stderr, "iabn %s: --scales %s\n", cmd, v); return 2; }
        } else if (seg && (!strcmp(a, "--window") || !strcmp(a, "--pooling-size"))) {
            if (!(v = iabn_flag_value(argc, argv, &i, cmd))) return 2;
            int hh = 0, ww = 0;
            int zero = !strcmp(v, "0") && a[2] == 'p';
            if (!zero && (iabn_parse_hw(v, &hh, &ww) || hh < 1 || ww < 1)) {
                fprintf(stderr, "iabn %s: %s must be HxW (at least 1x1)%s, not '%s'\n", cmd, a,
                        a[2] == 'p' ? " or 0 (the global mean)" : "", v);
                return 2;
            }
            if (a[2] == 'w') o.window_h = hh, o.window_w = ww;
            else o.pool_set = 1, o.pool_h = hh, o.pool_w = ww;
        } else if (!strcmp(a, "--split")) {
            if (!(v = iabn_flag_value(argc, argv, &i, cmd))) return 2;
            o.split = v;
        } else if (!strcmp(a, "--device")) {
            if (!(v = iabn_flag_value(argc, argv, &i, cmd))) return 2;
            if (iabn_check_device(v, cmd)) return 2;
            o.device = v;
        } else if (!strcmp(a, "--dataset") && seg) {
            if (!(v = iabn_flag_value(argc, argv, &i, cmd))) return 2;
            if (iabn_dataset_kind_parse(v, &o.dataset) || o.dataset == IABN_DATASET_IMAGEFOLDER) {
                fprintf(stderr, "iabn %s: --dataset must be cityscapes or vistas\n", cmd);
                return 2;
            }
            have_dataset = 1;
        } else if (a[0] == '-') { fprintf(stderr, "iabn %s: unknown flag %s\n", cmd, a); return 2; }
        else if (npos < 3) pos[npos++] = a;
        else { fprintf(stderr, "iabn %s: unexpected argument %s\n", cmd, a); return 2; }
    }
    if (npos != 3 || !have_dataset) {
        usage_eval(seg);
        return 2;
    }
    o.config_path = pos[0];
    o.checkpoint = pos[1];
    o.data_dir = pos[2];
    iabn_train_result res;
    iabn_err e = {0};
    o.verbose = verbose;
    o.log = iabn_cli_log;
    char dev[32];
    if (job_open(cmd, &o.comm, &o.device, dev, sizeof dev)) return 1;
    int rc = iabn_trainer_evaluate(&o, &res, &e);
    return job_close(cmd, o.comm, rc, &e);
}

int iabn_cmd_eval(int argc, char **argv) { return run_eval_like(argc, argv, 0); }
int iabn_cmd_segeval(int argc, char **argv) { return run_eval_like(argc, argv, 1); }
