/* cpu/conv_bench.h: the CPU convolution throughput `iabn bench conv` prints:
 * the layers docs/TARGETS.md names (dense 3x3, ResNeXt's grouped 3x3 with 4
 * and with 16 channels per group, 1x1 on 7x7, 14x14 and 56x56 maps, DeepLab's
 * dilated ASPP 3x3), per pass, on the native path and on the oneDNN path
 * (NCHW operands that it reorders, and, where the conv votes for blocked
 * operands, those: what the graph runs once its layout pass agrees), against
 * the targets there.
 *
 * Rate = nominal FLOPs (2*N*Cout*Hout*Wout*Cin/groups*kh*kw, padding taps
 * included, as docs/TARGETS.md counts it) over the best time of `repeat`
 * calls after one warm-up call (best, not median: on a shared machine other
 * loads only ever slow a call down); the native and oneDNN calls alternate
 * call by call, so a load from elsewhere hits them alike. */
#ifndef IABN_TENSOR_CPU_CONV_BENCH_H
#define IABN_TENSOR_CPU_CONV_BENCH_H

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iabn_convbench_row {
    const char *case_name, *desc, *pass;  /* static strings                        */
    const char *native_path, *path;       /* the native kernel; the one chosen     */
    const char *onednn_impl;              /* oneDNN's implementation ("" if none)  */
    int onednn;                           /* oneDNN measured too                   */
    int blocked;                          /* and on blocked operands (its votes),  */
                                          /* or through copies (blocked_gflops)    */
    const char *blocked_layout;           /* their layout (the CPU's: nChw16c or   */
                                          /* nChw8c), a static string              */
    double native_gflops, onednn_gflops;  /* onednn: NCHW operands, reordered      */
    double blocked_gflops;                /* the path those operands take (oneDNN,  */
                                          /* or the blocked grouped kernels); for  */
                                          /* a conv kept NCHW whose weight pass    */
                                          /* goes through blocked copies (ASPP),   */
                                          /* the paths the graph takes there       */
    int wino;                             /* and with the winograd flag, where it  */
    double wino_gflops;                   /* runs Winograd (direct FLOPs / time)   */
    double peak;                          /* the peak %peak is of (GFLOP/s)         */
    double gflops, peak_fraction, target; /* of the chosen path, on blocked where  */
                                          /* it votes so (as the graph runs it);   */
                                          /* target 0: none                        */
    int ok;                               /* at or over the target                 */
    int residual;                         /* fwd rows where the graph fuses a      */
    double residual_ms[3];                /* residual add (conv2d_add): best ms of */
                                          /* the conv then the add, fused over the */
                                          /* shortcut, fused into a sum apart      */
    int residual_binary;                  /* the last by oneDNN's binary post-op   */
                                          /* (else a copy of r and the sum one)    */
    int wcopy;                            /* fwd and bwd-data rows of 1x1 convs on */
    double wcopy_ms[2];                   /* oneDNN: best ms of the weights' copy  */
                                          /* into its blocks, by oneDNN's reorder  */
                                          /* and by the map's copy (the path's)    */
} iabn_convbench_row;

/* Rows enough for every case (3 passes each): conv_bench.c checks it at
 * compile time, so a new case cannot outgrow a caller's array. */
#define IABN_CONVBENCH_ROWS 45

/* The case names, NULL-terminated. */
const char *const *iabn_convbench_cases(void);
/* FP32 FMA throughput of `threads` threads in GFLOP/s (16-wide FMAs where
 * the CPU has AVX-512, else 8-wide, else mul+add), best of several windows. */
double iabn_cpu_peak_gflops(int threads);
/* Measures every case (or only `only`; an unknown name is IABN_EINVAL naming
 * the valid ones) at `threads` threads against `peak` GFLOP/s, or, with
 * peak <= 0, against the FMA loop timed beside each pass's calls (one window
 * per round, best of them): 3 rows per case into rows[max], their count in
 * *n.  cold: each timed conv call comes after a read of 64 MiB, so that its
 * operands and weights come from memory (in a training step the weights
 * always do: the SGD step wrote them last); 0: warm, each call's operands
 * left in the caches by the call before. */
int iabn_convbench_run(const char *only, int repeat, double peak, int threads, int cold,
                       iabn_convbench_row *rows, int max, int *n, iabn_err *e);

#ifdef __cplusplus
}
#endif
#endif
