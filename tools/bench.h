/* bench.h: the `iabn bench <what>` entry points.  Each takes the arguments
 * after "bench" (argv[0] is the bench name), prints a human table or, with
 * --json, a JSON list, and returns a process exit status. */
#ifndef IABN_TOOLS_BENCH_H
#define IABN_TOOLS_BENCH_H

/* Convolution throughput against the docs/TARGETS.md figures.
 *   iabn bench conv [--json] [--repeat N] [--peak GFLOPS|measure] [--threads T]
 *                   [--case NAME] [--strict]
 * Returns 0 when the cases ran (with --strict: only if every target was met),
 * 1 when a target was missed under --strict, 2 on bad arguments or no memory. */
int iabn_bench_conv(int argc, char **argv);

#endif
