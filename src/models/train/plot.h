/* plot.h: line charts as SVG without anything but the C library: panels of
 * series with ticked, labelled axes, vertical marks (epochs, blocks) and a
 * legend; and the training curves of runs read from their metrics.jsonl
 * (what `iabn plot` draws and `iabn train` writes as curves.svg). */
#ifndef IABN_PLOT_H
#define IABN_PLOT_H

#include "iabn.h"

typedef struct iabn_plot_series {
    const char *label;       /* legend text                                      */
    const double *x, *y;
    int n;
    int color;               /* index into the palette (runs)                    */
    int dashed;              /* a second kind of curve in the same colour (val)  */
    int points;              /* draw a dot at each point (few points)            */
} iabn_plot_series;

typedef struct iabn_plot_panel {
    const char *title, *xlabel, *ylabel;
    const iabn_plot_series *series;
    int nseries;
    int logy;                /* logarithmic y axis (learning rate)               */
    const double *marks;     /* vertical marks at these x (epochs, blocks)        */
    const char *const *mark_labels; /* their labels (NULL: none)                  */
    int nmarks;
} iabn_plot_panel;

/* Panels stacked vertically in one SVG file, with one legend at the top
 * naming every distinct (label) series. */
int iabn_plot_svg(const char *path, const char *title, const iabn_plot_panel *panels, int np,
                  iabn_err *e);

/* The curves of runs: each dir's metrics.jsonl.  Draws training loss (and
 * validation loss), validation top-1 or mIoU, and the learning rate against
 * the step, with each epoch's end marked; one colour per run. */
int iabn_plot_runs(const char *const *dirs, int ndirs, const char *out, iabn_err *e);

#endif
