/* cli.h: the value parsers behind the option table (options.c). */
#ifndef IABN_TOOLS_CLI_H
#define IABN_TOOLS_CLI_H

/* "12GiB", "512MiB", "3.5GB", "1e9", "4096" -> bytes; < 0 when malformed. */
double iabn_parse_bytes(const char *s);
/* Strict integer / float parsing; 0 on success. */
int iabn_parse_int(const char *s, long long *out);
int iabn_parse_float(const char *s, double *out);
/* "a,b,c" of floats into out[max]; returns the count or -1. */
int iabn_parse_floats(const char *s, float *out, int max);
/* "512x1024" or "512" -> h, w. */
int iabn_parse_hw(const char *s, int *h, int *w);
/* Checks --device: "cpu" always, "cuda" / "cuda:N" only when built in (the
 * device itself is opened, and may be missing, later). */
int iabn_check_device(const char *dev, const char *cmd);

struct iabn_trainer_stop;
/* SIGINT / SIGTERM ask the trainer to stop after the current step: installs
 * the handlers and returns the request they set, cleared (the program's one
 * piece of signal state lives here, never in the library). */
struct iabn_trainer_stop *iabn_cli_stop_on_signals(void);
/* The signal that asked for the stop (SIGINT, SIGTERM), 0 if none: the
 * program then exits 128 + it (130, 143).  A second signal exits at once. */
int iabn_cli_stop_signal(void);
/* The trainer's log callback of the commands: the line on stdout, flushed. */
void iabn_cli_log(void *user, const char *line);

#endif
