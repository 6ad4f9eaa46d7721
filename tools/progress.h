/* progress.h: the progress a person reads while `iabn train` / `segtrain` /
 * `demo` run: the trainer's progress callback formatted as one line per
 * report (epoch and step, images/s, the share of time spent waiting for data,
 * smoothed loss, lr, the ETA of what will actually run, memory); on a
 * terminal one live line redrawn in place with a bar, plain lines when
 * piped. */
#ifndef IABN_TOOLS_PROGRESS_H
#define IABN_TOOLS_PROGRESS_H

#include <stdio.h>

#include "models/train/trainer.h"

typedef struct iabn_progress {
    FILE *out;
    int tty;                 /* redraw one line in place                        */
    int batch;               /* images per step (the data-wait share needs it)  */
    int print_freq;          /* steps between reports                            */
    long long max_steps;     /* this run's --max-steps (0: none)                */
    double time_limit;       /* this run's --time-limit in seconds (0: none)    */
    double t0;               /* the run's start                                  */
    long long step0;         /* the global step the run started from (-1: unknown) */
    double smooth;           /* exponentially smoothed loss                      */
    int live;                /* a live line is on screen (needs a newline)      */
} iabn_progress;

/* out: where to print; batch, print_freq, max_steps, time_limit: what this
 * run will do.  Call it just before the run: the time limit counts from here. */
void iabn_progress_init(iabn_progress *p, FILE *out, int batch, int print_freq,
                        long long max_steps, double time_limit);
/* The trainer's progress callback (user: the iabn_progress). */
void iabn_progress_report(void *user, const iabn_train_progress *r);
/* The trainer's log callback: ends a live line first (user: the iabn_progress). */
void iabn_progress_log(void *user, const char *line);
/* Formats one report into buf (what a plain line shows); for the tests. */
void iabn_progress_format(iabn_progress *p, const iabn_train_progress *r, double now, char *buf,
                          size_t n);

#endif
