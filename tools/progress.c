/* progress.c: see progress.h.  The ETA is what is left of this run: the
 * epochs' steps, capped by --max-steps and --time-limit, at the step time
 * the trainer measures (or ours since the start).  The time limit counts
 * from iabn_progress_init (just before the run). */
#include "tools/progress.h"

#include <math.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "iabn.h"

void iabn_progress_init(iabn_progress *p, FILE *out, int batch, int print_freq,
                        long long max_steps, double time_limit)
{
    memset(p, 0, sizeof *p);
    p->out = out;
    p->tty = isatty(fileno(out));
    p->batch = batch > 0 ? batch : 1;
    p->print_freq = print_freq > 0 ? print_freq : 1;
    p->max_steps = max_steps;
    p->time_limit = time_limit;
    p->t0 = iabn_now();
    p->step0 = -1;
    p->smooth = NAN;
}

static void fmt_time(double s, char *buf, size_t n)
{
    if (!(s >= 0) || s > 1e8) {
        snprintf(buf, n, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

static double max_rss_mib(void)
{
    struct rusage u;
    if (getrusage(RUSAGE_SELF, &u)) return 0;
    return (double)u.ru_maxrss / 1024.0; /* KiB on Linux */
}

void iabn_progress_format(iabn_progress *p, const iabn_train_progress *r, double now, char *buf,
                          size_t n)
{
    if (p->step0 < 0) /* the first report: this run's steps so far */
        p->step0 = r->global_step - ((r->step_in_epoch - 1) % p->print_freq + 1);
    p->smooth = isnan(p->smooth) ? r->loss : 0.9 * p->smooth + 0.1 * r->loss;
    long long remaining = (long long)r->epochs * r->steps_per_epoch - r->global_step;
    long long done = r->global_step - p->step0;
    /* the step time: the trainer's (its ETA over the steps left), else ours */
    double per = remaining > 0 && r->eta_s > 0 ? r->eta_s / (double)remaining
                 : done > 0                    ? (now - p->t0) / (double)done
                                               : 0;
    /* what will actually run: the schedule's steps, --max-steps, --time-limit */
    double left = per * (double)(remaining > 0 ? remaining : 0);
    if (p->max_steps > 0 && p->max_steps - done < remaining)
        left = per * (double)(p->max_steps > done ? p->max_steps - done : 0);
    if (p->time_limit > 0 && p->time_limit - (now - p->t0) < left)
        left = fmax(0.0, p->time_limit - (now - p->t0));
    double step_s = r->images_per_s > 0 ? p->batch / r->images_per_s : 0;
    double wait_share = step_s > 0 ? fmin(1.0, r->data_wait_s / step_s) : 0;
    char eta[32], top[32] = "";
    fmt_time(left, eta, sizeof eta);
    if (r->top1 >= 0) snprintf(top, sizeof top, "  top-1 %.1f%%", r->top1);
    snprintf(buf, n,
             "epoch %d/%d  step %lld/%lld  %.1f img/s  data %2.0f%%  loss %.4f%s  lr %.3g  "
             "ETA %s  mem %.1f MiB act, %.0f MiB peak",
             r->epoch, r->epochs, r->step_in_epoch, r->steps_per_epoch, r->images_per_s,
             100 * wait_share, p->smooth, top, r->lr, eta, (double)r->arena_bytes / 1048576.0,
             max_rss_mib());
}

void iabn_progress_report(void *user, const iabn_train_progress *r)
{
    iabn_progress *p = user;
    char line[512];
    iabn_progress_format(p, r, iabn_now(), line, sizeof line);
    if (!p->tty) {
        fprintf(p->out, "%s\n", line);
    } else {
        /* a bar over the epoch, then the numbers, redrawn in place */
        char bar[24];
        int w = 20, k = r->steps_per_epoch > 0 ? (int)(w * r->step_in_epoch / r->steps_per_epoch) : 0;
        for (int i = 0; i < w; i++) bar[i] = i < k ? '=' : i == k ? '>' : ' ';
        bar[w] = 0;
        fprintf(p->out, "\r\033[K[%s] %s", bar, line);
        p->live = 1;
    }
    fflush(p->out);
}

void iabn_progress_log(void *user, const char *line)
{
    iabn_progress *p = user;
    if (p->live) {
        fputc('\n', p->out);
        p->live = 0;
    }
    fprintf(p->out, "%s\n", line);
    fflush(p->out);
}
