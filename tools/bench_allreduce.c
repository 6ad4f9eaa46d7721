/* bench_allreduce.c: `iabn bench allreduce`, the communicator's all-reduce
 * bandwidth per message size (issue 14, item 7).  Run it under the launcher:
 *
 *     mpirun -np 2 iabn bench allreduce [--json] [--repeat N] [--max BYTES]
 *
 * Every size is timed R times after a warm-up; the table gives the median
 * time, the algorithm bandwidth (bytes / time) and the bus bandwidth
 * (algbw * 2(W-1)/W, what each link carries in a ring, comparable across
 * world sizes).  Rank 0 prints; the others print only errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iabn.h"
#include "tools/commands.h"
#include "tools/options.h"

int iabn_bench_allreduce(int argc, char **argv)
{
    iabn_args a;
    int prc = iabn_args_parse(&a, IABN_C_BENCH_ALLREDUCE, argc, argv);
    if (prc) return prc == IABN_ARGS_HELP ? 0 : 2;
    int json = a.v[IABN_O_JSON].set, repeat = a.v[IABN_O_REPEAT].set ? (int)a.v[IABN_O_REPEAT].i : 20;
    size_t max_bytes = a.v[IABN_O_MAX_BYTES].set ? (size_t)a.v[IABN_O_MAX_BYTES].f : (size_t)64 << 20;
    iabn_err e = {0};
    iabn_comm *c = NULL;
    if (iabn_comm_new(NULL, &c, &e)) {
        fprintf(stderr, "iabn bench allreduce: %s\n", e.msg);
        return 1;
    }
    int rank = iabn_comm_rank(c), world = iabn_comm_size(c);
    if (world == 1) {
        fprintf(stderr, "iabn bench allreduce: one process: nothing to reduce; start it with "
                        "mpirun -np N (or srun)\n");
        iabn_comm_free(c);
        return 2;
    }
    float *buf = malloc(max_bytes);
    if (!buf) {
        fprintf(stderr, "iabn bench allreduce: out of memory for %zu bytes\n", max_bytes);
        iabn_comm_give_up(c);
        iabn_comm_free(c);
        return 2;
    }
    for (size_t i = 0; i < max_bytes / 4; i++) buf[i] = 1.f;
    if (!rank && !json)
        printf("all-reduce (sum, float32) over %d ranks, transport %s, median of %d\n"
               "%12s %12s %12s %12s\n", world, iabn_comm_transport(c), repeat, "bytes",
               "time (us)", "algbw GB/s", "busbw GB/s");
    if (!rank && json) printf("[");
    int rc = 0, first = 1;
    for (size_t bytes = 4096; bytes <= max_bytes && !rc; bytes *= 4) {
        double med = 0;
        if ((rc = iabn_allreduce_bench_run(c, buf, bytes, repeat, &med, &e))) break;
        double alg = (double)bytes / med / 1e9;
        double bus = alg * 2.0 * (world - 1) / world;
        if (!rank && !json) printf("%12zu %12.1f %12.3f %12.3f\n", bytes, med * 1e6, alg, bus);
        if (!rank && json)
            printf("%s{\"bytes\": %zu, \"ranks\": %d, \"median_us\": %.2f, \"algbw_gbs\": %.4f, "
                   "\"busbw_gbs\": %.4f}", first ? "" : ", ", bytes, world, med * 1e6, alg, bus);
        first = 0;
    }
    if (!rank && json) printf("]\n");
    free(buf);
    if (rc) {
        fprintf(stderr, "iabn bench allreduce (rank %d): %s\n", rank, e.msg);
        iabn_comm_give_up(c);
        iabn_comm_free(c);
        return 1;
    }
    iabn_comm_free(c);
    return 0;
}
