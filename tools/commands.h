/* commands.h: the entry points of the `iabn` subcommands.  Each takes the
 * arguments from the command's name on (argv[0] is the name) and returns a
 * process exit status: 0 success, 1 failure, 2 bad usage. */
#ifndef IABN_TOOLS_COMMANDS_H
#define IABN_TOOLS_COMMANDS_H

int iabn_cmd_train(int argc, char **argv);
int iabn_cmd_eval(int argc, char **argv);
int iabn_cmd_segtrain(int argc, char **argv);
int iabn_cmd_segeval(int argc, char **argv);
int iabn_cmd_mem(int argc, char **argv);
int iabn_cmd_demo(int argc, char **argv);
int iabn_cmd_predict(int argc, char **argv);
int iabn_cmd_step(int argc, char **argv);
int iabn_cmd_data(int argc, char **argv);

int iabn_bench_conv(int argc, char **argv);
int iabn_bench_block(int argc, char **argv);
int iabn_bench_step(int argc, char **argv);
/* mpirun -np N iabn bench allreduce [--json] [--repeat N] [--max BYTES] */
int iabn_bench_allreduce(int argc, char **argv);

#endif
