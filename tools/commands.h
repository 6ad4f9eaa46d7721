/* commands.h: the entry points of the `iabn` subcommands.  Each takes the
 * arguments from the command's name on (argv[0] is the name) and returns a
 * process exit status: 0 success, 1 failure, 2 bad usage. */
#ifndef IABN_TOOLS_COMMANDS_H
#define IABN_TOOLS_COMMANDS_H

#include <stddef.h>

int iabn_cmd_train(int argc, char **argv);
int iabn_cmd_eval(int argc, char **argv);
int iabn_cmd_segtrain(int argc, char **argv);
int iabn_cmd_segeval(int argc, char **argv);
int iabn_cmd_mem(int argc, char **argv);
int iabn_cmd_demo(int argc, char **argv);
int iabn_cmd_predict(int argc, char **argv);
int iabn_cmd_step(int argc, char **argv);
int iabn_cmd_data(int argc, char **argv);
int iabn_cmd_plot(int argc, char **argv);
int iabn_cmd_convert(int argc, char **argv);
int iabn_cmd_models(int argc, char **argv);
int iabn_cmd_export(int argc, char **argv);

/* cmd_convert.c: the Python helpers installed beside the program (convert.py,
 * export.py): the path of `script` into out (0), or -1 when absent; and an
 * exec of $IABN_PYTHON (default /usr/bin/python3) on it with argv[1..]. */
int iabn_find_script(const char *script, char *out, size_t n);
int iabn_run_script(const char *cmd, const char *script, int argc, char **argv);

int iabn_bench_conv(int argc, char **argv);
int iabn_bench_block(int argc, char **argv);
int iabn_bench_step(int argc, char **argv);
/* mpirun -np N iabn bench allreduce [--json] [--repeat N] [--max BYTES] */
int iabn_bench_allreduce(int argc, char **argv);

#endif
