/* test_options.c: the option table and what is generated from it:
 *  - every flag is parsed by every command that lists it (long name, alias,
 *    short letter, --name=value) and refused by the others;
 *  - 0 and negative values are refused where the row says so, with "must be
 *    at least 1" / what is allowed (issue 16.7);
 *  - each command's --help names all its flags; the bash completion script
 *    lists them and is valid bash;
 *  - flags become config keys (iabn_args_config_json) that the experiment
 *    parser accepts;
 *  - iabn plot: a valid SVG with the expected series, several runs overlaid. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"
#include "data/data.h"
#include "tools/cmd_train.h"
#include "tools/commands.h"
#include "models/train/config.h"
#include "tools/options.h"
#include "tools/progress.h"
#include "models/train/plot.h"

static char tmpdir[256];

/* Positional arguments that satisfy each command. */
static int positionals(iabn_cmd_id c, const char **pos)
{
    const iabn_command_info *ci = iabn_command_get(c);
    for (int i = 0; i < ci->min_pos; i++) pos[i] = c == IABN_C_COMPLETION ? "bash" : "x";
    return ci->min_pos;
}

/* A value the row accepts. */
static const char *good_value(const iabn_option *o, char *buf)
{
    switch (o->type) {
    case IABN_T_INT: snprintf(buf, 32, "%.0f", o->lo > 0 ? o->lo : 1); return buf;
    case IABN_T_FLOAT: snprintf(buf, 32, "%g", o->hi > 0 ? o->hi : o->lo + 1); return buf;
    case IABN_T_FLOATS: return "0.5,1";
    case IABN_T_BYTES: return "12GiB";
    case IABN_T_SIZE: return "32x48";
    case IABN_T_CHOICE: return o->choice(0);
    case IABN_T_DEVICE: return "cpu";
    default: return "some/path";
    }
}

static int parse(iabn_args *a, iabn_cmd_id c, int n, const char **args)
{
    char *argv[40];
    const char *pos[4];
    int argc = 0;
    argv[argc++] = (char *)iabn_command_get(c)->name;
    for (int i = 0; i < n; i++) argv[argc++] = (char *)args[i];
    int np = positionals(c, pos);
    for (int i = 0; i < np; i++) argv[argc++] = (char *)pos[i];
    return iabn_args_parse(a, c, argc, argv);
}

static void test_every_flag_every_command(void)
{
    static iabn_args a;
    int parsed = 0;
    for (int id = 0; id < IABN_O_COUNT; id++) {
        const iabn_option *o = iabn_option_get((iabn_opt_id)id);
        CHECK_MSG(o->name && o->help, "row %d has no name or help", id);
        if (!o->name) continue;
        char buf[64], longname[80], eq[160], shortname[4];
        const char *v = good_value(o, buf);
        snprintf(longname, sizeof longname, "--%s", o->name);
        snprintf(eq, sizeof eq, "--%s=%s", o->name, v ? v : "");
        for (int c = 0; c < IABN_C_COUNT; c++) {
            int listed = (o->cmds & IABN_CMD(c)) != 0;
            const char *args[2] = {longname, v};
            int n = o->type == IABN_T_FLAG ? 1 : 2;
            int rc = parse(&a, (iabn_cmd_id)c, n, args);
            if (listed) {
                CHECK_MSG(rc == IABN_ARGS_OK && a.v[id].set, "iabn %s %s %s: rc %d",
                          iabn_command_get(c)->name, longname, n > 1 ? v : "", rc);
                parsed++;
                if (o->type != IABN_T_FLAG) {
                    const char *one[1] = {eq};
                    CHECK_MSG(parse(&a, (iabn_cmd_id)c, 1, one) == IABN_ARGS_OK && a.v[id].set,
                              "%s", eq);
                }
                if (o->alias) {
                    char al[80];
                    snprintf(al, sizeof al, "--%s", o->alias);
                    const char *aa[2] = {al, v};
                    CHECK_MSG(parse(&a, (iabn_cmd_id)c, n, aa) == IABN_ARGS_OK && a.v[id].set,
                              "alias %s", al);
                }
                if (o->short_name) {
                    snprintf(shortname, sizeof shortname, "-%c", o->short_name);
                    const char *sa[2] = {shortname, v};
                    CHECK_MSG(parse(&a, (iabn_cmd_id)c, n, sa) == IABN_ARGS_OK && a.v[id].set,
                              "short %s", shortname);
                }
            } else {
                CHECK_MSG(rc == IABN_ARGS_BAD, "iabn %s takes %s but does not list it",
                          iabn_command_get(c)->name, longname);
            }
        }
    }
    CHECK(parsed > 100);
}

/* Every listed short letter and long name is unique within a command. */
static void test_no_clashes(void)
{
    for (int c = 0; c < IABN_C_COUNT; c++)
        for (int i = 0; i < IABN_O_COUNT; i++) {
            const iabn_option *p = iabn_option_get((iabn_opt_id)i);
            if (!(p->cmds & IABN_CMD(c))) continue;
            for (int j = i + 1; j < IABN_O_COUNT; j++) {
                const iabn_option *q = iabn_option_get((iabn_opt_id)j);
                if (!(q->cmds & IABN_CMD(c))) continue;
                CHECK_MSG(strcmp(p->name, q->name) && (!q->alias || strcmp(p->name, q->alias)) &&
                              (!p->alias || strcmp(p->alias, q->name)),
                          "%s: --%s and --%s clash", iabn_command_get(c)->name, p->name, q->name);
                CHECK_MSG(!p->short_name || p->short_name != q->short_name, "%s: -%c twice",
                          iabn_command_get(c)->name, p->short_name);
            }
        }
}

/* Runs a parse with stderr captured; returns the rc, msg gets the line. */
static int parse_msg(iabn_cmd_id c, const char *flag, const char *val, char *msg, size_t n)
{
    static iabn_args a;
    char path[300];
    snprintf(path, sizeof path, "%s/stderr.txt", tmpdir);
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(path, "w");
    dup2(fileno(f), 2);
    const char *args[2] = {flag, val};
    int rc = parse(&a, c, 2, args);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(f);
    f = fopen(path, "r");
    msg[0] = 0;
    if (f) {
        if (!fgets(msg, (int)n, f)) msg[0] = 0;
        fclose(f);
    }
    return rc;
}

static void test_zero_is_not_unset(void)
{
    char msg[512];
    struct { iabn_cmd_id c; const char *flag, *val, *want; } cases[] = {
        {IABN_C_TRAIN, "-b", "0", "must be at least 1"},
        {IABN_C_TRAIN, "--epochs", "0", "must be at least 1"},
        {IABN_C_TRAIN, "--max-steps", "0", "must be at least 1"},
        {IABN_C_TRAIN, "--crop", "0", "must be at least 1"},
        {IABN_C_EVAL, "--crop", "0", "must be at least 1"},
        {IABN_C_EVAL, "-b", "0", "must be at least 1"},
        {IABN_C_TRAIN, "--lr", "-1", "must be > 0"},
        {IABN_C_TRAIN, "--lr", "0", "must be > 0"},
        {IABN_C_TRAIN, "--epochs", "-3", "must be at least 1"},
        {IABN_C_TRAIN, "--workers", "0", "must be at least 1"},
        {IABN_C_TRAIN, "--print-freq", "0", "must be at least 1"},
        {IABN_C_TRAIN, "--time-limit", "0", "must be > 0"},
        {IABN_C_TRAIN, "--wd", "-1", "must be >= 0"},
        {IABN_C_MEM, "--size", "0x10", "must be at least 1"},
        {IABN_C_MEM, "--size", "10y", "not HxW"},
        {IABN_C_TRAIN, "-b", "2.5", "whole number"},
        {IABN_C_TRAIN, "--lr-scheduler", "cosinus",
         "must be one of constant, step, multistep, exponential, linear, poly, cosine"},
        {IABN_C_TRAIN, "--bn", "inplace", NULL}, /* the reference configs' spelling */
        {IABN_C_MEM, "--bn", "standard,inplace_abn_ii", NULL},
        {IABN_C_TRAIN, "--bn", "standard,inplace_abn_ii", "must be one of"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = parse_msg(cases[i].c, cases[i].flag, cases[i].val, msg, sizeof msg);
        if (!cases[i].want) {
            CHECK_MSG(rc == IABN_ARGS_OK, "%s %s refused: %s", cases[i].flag, cases[i].val, msg);
            continue;
        }
        CHECK_MSG(rc == IABN_ARGS_BAD && strstr(msg, cases[i].want),
                  "%s %s: rc %d, message '%s' lacks '%s'", cases[i].flag, cases[i].val, rc, msg,
                  cases[i].want);
    }
    /* every row with a positive minimum refuses 0 */
    for (int id = 0; id < IABN_O_COUNT; id++) {
        const iabn_option *o = iabn_option_get((iabn_opt_id)id);
        if (o->type != IABN_T_INT || o->lo < 1) continue;
        for (int c = 0; c < IABN_C_COUNT; c++) {
            if (!(o->cmds & IABN_CMD(c))) continue;
            char flag[80];
            snprintf(flag, sizeof flag, "--%s", o->name);
            int rc = parse_msg((iabn_cmd_id)c, flag, "0", msg, sizeof msg);
            CHECK_MSG(rc == IABN_ARGS_BAD && strstr(msg, "must be at least"), "%s %s 0: %s",
                      iabn_command_get(c)->name, flag, msg);
        }
    }
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = b ? fread(b, 1, (size_t)n, f) : 0;
    if (b) b[got] = 0;
    fclose(f);
    return b;
}

static void test_help_and_completion(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s/help.txt", tmpdir);
    for (int c = 0; c < IABN_C_COUNT; c++) {
        FILE *f = fopen(path, "w");
        iabn_args_help((iabn_cmd_id)c, f);
        fclose(f);
        char *h = slurp(path);
        CHECK(h && strstr(h, "usage: iabn ") && strstr(h, iabn_command_get(c)->name));
        for (int id = 0; h && id < IABN_O_COUNT; id++) {
            const iabn_option *o = iabn_option_get((iabn_opt_id)id);
            char flag[80];
            snprintf(flag, sizeof flag, "--%s ", o->name);
            int listed = (o->cmds & IABN_CMD(c)) != 0;
            char flag_nl[80];
            snprintf(flag_nl, sizeof flag_nl, "--%s,", o->name);
            int shown = strstr(h, flag) || strstr(h, flag_nl);
            CHECK_MSG(listed == shown, "help of %s: --%s %s", iabn_command_get(c)->name, o->name,
                      listed ? "missing" : "shown but not taken");
        }
        free(h);
    }
    /* the train help says what -b means */
    FILE *f = fopen(path, "w");
    iabn_args_help(IABN_C_TRAIN, f);
    fclose(f);
    char *h = slurp(path);
    CHECK(h && strstr(h, "global batch") && strstr(h, "split across ranks"));
    free(h);

    snprintf(path, sizeof path, "%s/iabn.bash", tmpdir);
    f = fopen(path, "w");
    iabn_args_completion_bash(f);
    fclose(f);
    char *s = slurp(path);
    CHECK(s && strstr(s, "complete -o filenames -F _iabn iabn"));
    for (int id = 0; s && id < IABN_O_COUNT; id++) {
        char flag[80];
        snprintf(flag, sizeof flag, "--%s ", iabn_option_get((iabn_opt_id)id)->name);
        CHECK_MSG(strstr(s, flag) != NULL, "completion lacks %s", flag);
    }
    CHECK(s && strstr(s, "inplace_abn_ii") && strstr(s, "cosine"));
    free(s);
    if (access("/bin/bash", X_OK) == 0) {
        /* valid bash, and completing `iabn train --lr-s` offers --lr-scheduler */
        char cmd[900];
        snprintf(cmd, sizeof cmd,
                 "/bin/bash -c 'source %s && COMP_WORDS=(iabn train --lr-sc) COMP_CWORD=2 && _iabn "
                 "&& [ \"${COMPREPLY[*]}\" = \"--lr-scheduler\" ]' >/dev/null 2>&1",
                 path);
        CHECK(system(cmd) == 0);
    }
}

static void test_flags_to_config(void)
{
    static iabn_args a;
    const char *args[] = {"--lr", "0.5", "--epochs", "3", "--wd", "0", "--lr-scheduler", "cosine",
                          "--model", "resnext_tiny", "--bn", "inplace_abn_ii", "-b", "64",
                          "--crop", "96", "--label-smoothing", "0.1", "--winograd", "on"};
    CHECK(parse(&a, IABN_C_TRAIN, 20, args) == IABN_ARGS_OK);
    iabn_config c;
    iabn_config_reference(&c, 0);
    iabn_err e = {0};
    CHECK_MSG(iabn_config_from_args(&a, &c, 0, "test", &e) == 0, "%s", e.msg);
    CHECK_CLOSE(c.learning_rate, 0.5, 1e-7, 0);
    CHECK(c.schedule.epochs == 3 && c.batch_size == 64 && c.weight_decay == 0);
    CHECK(!strcmp(c.arch, "resnext_tiny") && c.bn_mode == IABN_BN_INPLACE_II);
    CHECK(c.act.kind == IABN_ACT_LEAKY_RELU); /* in-place needs an invertible activation */
    CHECK(c.crop_train == 96 && c.crop_val == 96);
    CHECK(!strcmp(iabn_sched_name(c.schedule.kind), "cosine"));
    CHECK_CLOSE(iabn_schedule_factor(&c.schedule, 0, 10), 1.0, 1e-12, 0);
    CHECK_CLOSE(iabn_schedule_factor(&c.schedule, 5, 10), 0.5, 1e-12, 0);
    CHECK_CLOSE(iabn_schedule_factor(&c.schedule, 10, 10), 0.0, 1e-12, 0);
    CHECK_CLOSE(c.label_smoothing, 0.1, 1e-7, 0);
    CHECK(c.winograd == IABN_WINOGRAD_ON);
    /* without a config: the reference recipe */
    iabn_config_reference(&c, 0);
    CHECK(c.schedule.epochs == 90 && c.schedule.step_size == 30 && c.batch_size == 256);
    /* flags override a config file */
    char cfg[300];
    snprintf(cfg, sizeof cfg, "%s/c.json", tmpdir);
    FILE *f = fopen(cfg, "w");
    fprintf(f, "{\"network\": {\"arch\": \"resnet18\"}, \"optimizer\": {\"learning_rate\": 0.2, "
               "\"batch_size\": 32}}");
    fclose(f);
    const char *args2[] = {"--config", cfg, "-b", "8"};
    CHECK(parse(&a, IABN_C_TRAIN, 4, args2) == IABN_ARGS_OK);
    iabn_config_reference(&c, 0);
    CHECK_MSG(iabn_config_from_args(&a, &c, 0, "test", &e) == 0, "%s", e.msg);
    CHECK(!strcmp(c.arch, "resnet18") && c.batch_size == 8);
    CHECK_CLOSE(c.learning_rate, 0.2, 1e-7, 0);
}

static void write_run(const char *dir, double lr0, int epochs)
{
    char p[400];
    mkdir(dir, 0777);
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    FILE *f = fopen(p, "w");
    long step = 0;
    for (int ep = 1; ep <= epochs; ep++) {
        for (int s = 0; s < 5; s++, step++)
            fprintf(f, "{\"step\": %ld, \"epoch\": %d, \"loss\": %.4f, \"lr\": %g, \"img_s\": 100}\n",
                    step + 1, ep, 2.0 / (1 + step), lr0 * (ep < 3 ? 1 : 0.1));
        fprintf(f, "{\"epoch\": %d, \"step\": %ld, \"val_loss\": %.4f, \"top1\": %.2f, \"top5\": 90}\n",
                ep, step, 1.5 / ep, 20.0 + 10 * ep);
    }
    fclose(f);
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

static void test_plot(void)
{
    char a[300], b[300], out[300];
    snprintf(a, sizeof a, "%s/run_a", tmpdir);
    snprintf(b, sizeof b, "%s/run_b", tmpdir);
    snprintf(out, sizeof out, "%s/curves.svg", tmpdir);
    write_run(a, 0.1, 4);
    write_run(b, 0.05, 3);
    char *argv[] = {"plot", a, "-o", out};
    CHECK(iabn_cmd_plot(4, argv) == 0);
    char *s = slurp(out);
    CHECK(s && !strncmp(s, "<?xml", 5) && strstr(s, "</svg>\n"));
    CHECK(s && count(s, "<polyline") == 4); /* train loss, val loss, top-1, lr */
    CHECK(s && strstr(s, "data-label=\"train loss\"") && strstr(s, "data-label=\"val top-1\"") &&
          strstr(s, "data-label=\"learning rate\""));
    CHECK(s && count(s, "class=\"mark\"") == 3 * 4); /* 4 epochs marked on 3 panels */
    CHECK(s && count(s, "<g") == count(s, "</g>") && count(s, "<text") == count(s, "</text>"));
    free(s);
    char *argv2[] = {"plot", a, b, "-o", out};
    CHECK(iabn_cmd_plot(5, argv2) == 0);
    s = slurp(out);
    CHECK(s && count(s, "<polyline") == 8 && strstr(s, "run_b: val top-1"));
    free(s);
    char missing[320];
    snprintf(missing, sizeof missing, "%s/nothing", tmpdir);
    char *argv3[] = {"plot", missing, "-o", out};
    CHECK(iabn_cmd_plot(4, argv3) == 1);
    char *argv4[] = {"plot"};
    CHECK(iabn_cmd_plot(1, argv4) == 2);
}

/* The progress line: every field, and the ETA of what will actually run. */
static void test_progress(void)
{
    iabn_progress p;
    char line[512];
    /* step 20 of 90 epochs x 1000 steps, reporting every 10, 0.5 s a step */
    iabn_train_progress r = {1, 90, 20, 1000, 20, 2.5, 2.6, 0.1, 64.0, 0.125,
                             0.5 * (90000 - 20), 12.5, 8 << 20};
    iabn_progress_init(&p, stdout, 32, 10, 0, 0);
    p.tty = 0;
    iabn_progress_format(&p, &r, p.t0 + 10, line, sizeof line);
    CHECK_MSG(strstr(line, "epoch 1/90  step 20/1000") && strstr(line, "64.0 img/s") &&
                  strstr(line, "data 25%") && strstr(line, "top-1 12.5%") &&
                  strstr(line, "lr 0.1") && strstr(line, "8.0 MiB act") &&
                  strstr(line, "ETA 12:29:50"),
              "%s", line);
    /* --max-steps 30: the first report at step 20 means the run began at 10,
     * so 20 of its steps are left */
    iabn_progress_init(&p, stdout, 32, 10, 30, 0);
    iabn_progress_format(&p, &r, p.t0 + 10, line, sizeof line);
    CHECK_MSG(strstr(line, "ETA 0:10") != NULL, "%s", line);
    /* --time-limit 60, 10 s in: what is left of the minute */
    iabn_progress_init(&p, stdout, 32, 10, 0, 60);
    iabn_progress_format(&p, &r, p.t0 + 10, line, sizeof line);
    CHECK_MSG(strstr(line, "ETA 0:50") != NULL, "%s", line);
}

/* Runs a command with stdout captured into out. */
static int run_captured(int (*fn)(int, char **), int argc, char **argv, char *out, size_t n)
{
    char path[300];
    snprintf(path, sizeof path, "%s/stdout.txt", tmpdir);
    fflush(stdout);
    int saved = dup(1);
    FILE *f = fopen(path, "w");
    dup2(fileno(f), 1);
    int rc = fn(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    fclose(f);
    char *s = slurp(path);
    snprintf(out, n, "%s", s ? s : "");
    free(s);
    return rc;
}

/* train from flags alone, eval from the checkpoint alone, then fine-tune on a
 * data set with another number of classes (--init): the head is new. */
static void test_train_eval_init(void)
{
    char d3[300], d4[300], run[300], run4[300], ckpt[400], out[8192];
    snprintf(d3, sizeof d3, "%s/d3", tmpdir);
    snprintf(d4, sizeof d4, "%s/d4", tmpdir);
    snprintf(run, sizeof run, "%s/run", tmpdir);
    snprintf(run4, sizeof run4, "%s/run4", tmpdir);
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint_last.safetensors", run);
    iabn_err e = {0};
    CHECK_OK(iabn_data_make_synthetic_folder(d3, 3, 8, 4, 32, 3, &e));
    CHECK_OK(iabn_data_make_synthetic_folder(d4, 4, 8, 4, 32, 4, &e));
    char *tr[] = {"train", "--model", "resnext_tiny", "--bn", "inplace_abn_ii", d3, "--epochs", "1",
                  "-b", "8", "--crop", "32", "--output-dir", run, "-q", "--threads", "2"};
    CHECK(run_captured(iabn_cmd_train, 17, tr, out, sizeof out) == 0);
    char cfgpath[400];
    snprintf(cfgpath, sizeof cfgpath, "%s/config.json", run);
    char *cfg = slurp(cfgpath);
    CHECK(cfg && strstr(cfg, "\"resnext_tiny\"") && strstr(cfg, "\"inplace_abn_ii\"") &&
          strstr(cfg, "\"leaky_relu\""));
    free(cfg);
    /* eval needs neither the config nor the crop: the checkpoint says */
    char *ev[] = {"eval", ckpt, d3, "--threads", "2"};
    CHECK(run_captured(iabn_cmd_eval, 5, ev, out, sizeof out) == 0);
    CHECK_MSG(strstr(out, "(12 images") && strstr(out, "top-1"), "%s", out);
    /* a config on the command line still overrides: a wrong arch is refused */
    char badcfg[400];
    snprintf(badcfg, sizeof badcfg, "%s/bad.json", tmpdir);
    FILE *f = fopen(badcfg, "w");
    fprintf(f, "{\"network\": {\"arch\": \"resnet18\"}}");
    fclose(f);
    char *ev2[] = {"eval", badcfg, ckpt, d3, "--threads", "2"};
    CHECK(run_captured(iabn_cmd_eval, 6, ev2, out, sizeof out) != 0);
    /* ... also as --config (issue 18.3) */
    char *ev3[] = {"eval", "--config", cfgpath, ckpt, d3, "--threads", "2"};
    CHECK(run_captured(iabn_cmd_eval, 7, ev3, out, sizeof out) == 0);
    ev3[2] = badcfg;
    CHECK(run_captured(iabn_cmd_eval, 7, ev3, out, sizeof out) != 0);
    /* fine-tune on 4 classes from the 3-class checkpoint */
    char *ft[] = {"train", "--model", "resnext_tiny", "--bn", "inplace_abn_ii", d4, "--epochs", "1",
                  "-b", "8", "--crop", "32", "--output-dir", run4, "-v", "--threads", "2",
                  "--init", ckpt};
    CHECK(run_captured(iabn_cmd_train, 19, ft, out, sizeof out) == 0);
    CHECK_MSG(strstr(out, "loaded 68 of 70 tensors") &&
                  strstr(out, "2 of another shape [classifier.fc.weight, classifier.fc.bias]"),
              "%s", out);
    /* --init into standard BN from the in-place checkpoint: the scales are
     * converted (|gamma| + eps becomes the plain gamma), as every other load
     * does; lr 1e-20 leaves them as loaded (they were copied raw before) */
    char runs[300], ckpts[400];
    snprintf(runs, sizeof runs, "%s/runstd", tmpdir);
    snprintf(ckpts, sizeof ckpts, "%s/checkpoint_last.safetensors", runs);
    char *fs[] = {"train", "--model", "resnext_tiny", "--bn", "standard", "--act", "leaky_relu",
                  d3, "-b", "8", "--crop", "32", "--output-dir", runs, "-q", "--threads", "2",
                  "--lr", "1e-20", "--max-steps", "1", "--init", ckpt};
    CHECK_MSG(run_captured(iabn_cmd_train, (int)(sizeof fs / sizeof fs[0]), fs, out, sizeof out) == 0, "%s", out);
    iabn_st_file *fa = NULL, *fb = NULL;
    if (!iabn_st_load(ckpt, &fa, &e) && !iabn_st_load(ckpts, &fb, &e)) {
        int compared = 0, bad = 0;
        for (int k = 0; k < iabn_st_count(fa); k++) {
            const iabn_st_tensor *ta = iabn_st_get(fa, k);
            size_t len = strlen(ta->name);
            if (ta->ndim != 1 || len < 7 || strcmp(ta->name + len - 7, ".weight") ||
                !strstr(ta->name, "bn") || !strncmp(ta->name, "optimizer.", 10))
                continue;
            const iabn_st_tensor *tb = iabn_st_find(fb, ta->name);
            float ga[1024], gb[1024];
            size_t n = (size_t)ta->shape[0];
            if (!tb || n > 1024 || iabn_st_read_f32(ta, ga, n, &e) || iabn_st_read_f32(tb, gb, n, &e)) {
                bad++;
                continue;
            }
            for (size_t i = 0; i < n; i++)
                if (fabsf(gb[i] - (fabsf(ga[i]) + 1e-5f)) > 1e-6f * (1.f + fabsf(gb[i])) && !bad++)
                    fprintf(stderr, "%s[%zu]: %.9g loaded as %.9g\n", ta->name, i, ga[i], gb[i]);
            compared++;
        }
        CHECK_MSG(compared > 0 && bad == 0, "%d BN scales compared, %d not converted", compared,
                  bad);
    } else {
        CHECK_MSG(0, "%s", e.msg);
    }
    iabn_st_free(fa);
    iabn_st_free(fb);
    /* a missing file is an error, not a fresh start */
    char nofile[400];
    snprintf(nofile, sizeof nofile, "%s/none.safetensors", tmpdir);
    ft[18] = nofile;
    CHECK(run_captured(iabn_cmd_train, 19, ft, out, sizeof out) == 1);
}

/* convert, models, export and bench allreduce parse through the table: the
 * generated --help, an unknown flag refused, the values checked, export's
 * --graph from table flags (what tools/export.py asks for). */
static void test_table_commands(void)
{
    static char out[1 << 16];
    char *h1[] = {"models", "--help"};
    CHECK(run_captured(iabn_cmd_models, 2, h1, out, sizeof out) == 0);
    CHECK_MSG(strstr(out, "usage: iabn models") && strstr(out, "--no-memory") && strstr(out, "-b, --batch-size"),
              "%s", out);
    char *m[] = {"models", "--no-memory", "--bogus"};
    CHECK(run_captured(iabn_cmd_models, 3, m, out, sizeof out) == 2);
    char *mb[] = {"models", "--batch", "0"};
    CHECK(run_captured(iabn_cmd_models, 3, mb, out, sizeof out) == 2);
    char *h2[] = {"convert", "--help"};
    CHECK(run_captured(iabn_cmd_convert, 2, h2, out, sizeof out) == 0);
    CHECK(strstr(out, "usage: iabn convert IN OUT") && strstr(out, "--no-module-prefix"));
    char *c[] = {"convert", "a.pth", "b.safetensors", "--fold-bn"}; /* export's flag */
    CHECK(run_captured(iabn_cmd_convert, 4, c, out, sizeof out) == 2);
    char *ex[] = {"export", "ckpt.safetensors", "-o", "x.onnx", "--format", "tflite"};
    CHECK(run_captured(iabn_cmd_export, 6, ex, out, sizeof out) == 2);
    char *g[] = {"export", "--graph", "resnext_tiny", "--classes", "3", "--act", "leaky_relu",
                 "--act-param", "0.02", "--no-input-3x3", "--size", "32"};
    CHECK(run_captured(iabn_cmd_export, 12, g, out, sizeof out) == 0);
    CHECK_MSG(strstr(out, "\"nodes\"") && strstr(out, "[1, 3, 32, 32]") && strstr(out, "\"act_param\": 0.0199999996"),
              "%.300s", out);
    char *ar[] = {"bench allreduce", "--max", "lots"};
    CHECK(run_captured(iabn_bench_allreduce, 3, ar, out, sizeof out) == 2);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/iabn_test_options_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    RUN(test_every_flag_every_command);
    RUN(test_no_clashes);
    RUN(test_zero_is_not_unset);
    RUN(test_help_and_completion);
    RUN(test_flags_to_config);
    RUN(test_plot);
    RUN(test_progress);
    RUN(test_train_eval_init);
    RUN(test_table_commands);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
    return TEST_END();
}
