/* cmd_plot.c: `iabn plot RUN_DIR... [-o curves.svg]`: the training curves of
 * one run, or of several overlaid, from their metrics.jsonl (plot.h). */
#include <stdio.h>

#include "tools/commands.h"
#include "tools/options.h"
#include "models/train/plot.h"

int iabn_cmd_plot(int argc, char **argv)
{
    iabn_args a;
    int rc = iabn_args_parse(&a, IABN_C_PLOT, argc, argv);
    if (rc) return rc == IABN_ARGS_HELP ? 0 : 2;
    const char *out = a.v[IABN_O_OUTPUT].set ? a.v[IABN_O_OUTPUT].s : "curves.svg";
    iabn_err e = {0};
    if (iabn_plot_runs(a.pos, a.npos, out, &e)) {
        fprintf(stderr, "iabn plot: %s\n", e.msg);
        return 1;
    }
    printf("%s\n", out);
    return 0;
}
