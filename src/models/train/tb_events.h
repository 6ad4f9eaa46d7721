/* tb_events.h: write TensorBoard event files (scalars) without TensorFlow.
 *
 * One iabn_tb is one file, logdir/events.out.tfevents.<unix time>.<hostname>,
 * holding TFRecord-framed Event protobufs: the file_version record first,
 * then one record per scalar.  TensorBoard reads the file as it grows, so
 * call iabn_tb_flush after each logging step.
 *
 *     iabn_tb *tb;
 *     if (iabn_tb_open("runs/a", &tb, &e)) ...
 *     iabn_tb_scalar(tb, "train/loss", step, loss, 0, &e);
 *     iabn_tb_flush(tb, &e);
 *     iabn_tb_close(tb, &e);
 */
#ifndef IABN_TB_EVENTS_H
#define IABN_TB_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct iabn_err;
typedef struct iabn_tb iabn_tb;

/* Creates logdir (and its parents) if needed and a new event file in it; an
 * existing file of the same name (two opens in one second) is never reused:
 * a ".<n>" suffix is added instead. */
int iabn_tb_open(const char *logdir, iabn_tb **out, struct iabn_err *e);
/* wall_time in seconds since the epoch; <= 0 means now. */
int iabn_tb_scalar(iabn_tb *tb, const char *tag, int64_t step, float value, double wall_time,
                   struct iabn_err *e);
int iabn_tb_flush(iabn_tb *tb, struct iabn_err *e);
/* Flushes, closes and frees tb (also on error); NULL is a no-op. */
int iabn_tb_close(iabn_tb *tb, struct iabn_err *e);
/* The event file's path. */
const char *iabn_tb_path(const iabn_tb *tb);

/* CRC-32C (Castagnoli), as TFRecord framing uses, and its masked form. */
uint32_t iabn_crc32c(const void *data, size_t n);
uint32_t iabn_crc32c_masked(const void *data, size_t n);

#ifdef __cplusplus
}
#endif
#endif
