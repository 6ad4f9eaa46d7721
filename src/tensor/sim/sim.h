/* sim/sim.h: a simulated accelerator on the CPU, so that the offload policy
 * runs, is timed and is tested without a GPU.
 *
 * Device memory is host memory counted against a budget (an allocation past
 * it fails, as cudaMalloc would); the pinned host pool is a separate budget;
 * asynchronous copies are done by a copy thread, one at a time in queue
 * order (a copy stream), each taking at least bytes / bandwidth seconds;
 * events are real synchronisation between the compute thread (the caller)
 * and the copy thread.  Kernels are the CPU ones (kind IABN_DEV_CPU), so a
 * run on the simulated device computes exactly what the CPU backend does.
 *
 *     iabn_sim_opts o = {.device_bytes = 2ull << 30, .copy_bytes_per_s = 12e9};
 *     iabn_sim *sim; iabn_sim_open(&o, &sim, &e);
 *     iabn_store *s = iabn_store_new(iabn_sim_backend(sim), &e); ...
 *     iabn_sim_close(sim);   // after everything allocated on it is freed
 */
#ifndef IABN_TENSOR_SIM_H
#define IABN_TENSOR_SIM_H

#include <stddef.h>

#include "tensor/backend.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iabn_sim_opts {
    size_t device_bytes;       /* device memory; 0: unlimited               */
    size_t host_bytes;         /* pinned host pool; 0: unlimited            */
    double copy_bytes_per_s;   /* copy-stream bandwidth; 0: memcpy speed    */
    long fail_copy;            /* > 0: the n-th asynchronous copy fails
                                  (error paths under test)                  */
} iabn_sim_opts;

typedef struct iabn_sim iabn_sim;

typedef struct iabn_sim_stats {
    size_t device_used, device_peak;   /* bytes allocated on the device     */
    size_t host_used, host_peak;       /* bytes of the pinned host pool     */
    long copies;                       /* asynchronous copies done          */
    size_t copied_bytes;
    double copy_seconds;               /* the copy thread busy              */
    double wait_seconds;               /* the compute thread waiting on it  */
} iabn_sim_stats;

int iabn_sim_open(const iabn_sim_opts *o, iabn_sim **out, iabn_err *e);
void iabn_sim_close(iabn_sim *s);
const iabn_backend *iabn_sim_backend(iabn_sim *s);
void iabn_sim_get_stats(iabn_sim *s, iabn_sim_stats *st);
/* Zeroes the peaks (to the current use), counters and timers. */
void iabn_sim_reset_stats(iabn_sim *s);

#ifdef __cplusplus
}
#endif
#endif
