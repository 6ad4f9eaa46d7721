/* cli.c: see cli.h. */
#include "tools/cli.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "models/train/trainer.h"
#include "tensor/device.h"

double iabn_parse_bytes(const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0)) return -1;
    static const struct { const char *suf; double mul; } tab[] = {
        {"", 1}, {"b", 1}, {"k", 1024}, {"kib", 1024}, {"kb", 1e3}, {"m", 1048576.0},
        {"mib", 1048576.0}, {"mb", 1e6}, {"g", 1073741824.0}, {"gib", 1073741824.0},
        {"gb", 1e9}, {"t", 1099511627776.0}, {"tib", 1099511627776.0}, {"tb", 1e12},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcasecmp(end, tab[i].suf)) return v * tab[i].mul;
    return -1;
}

int iabn_parse_int(const char *s, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return -1;
    *out = v;
    return 0;
}

int iabn_parse_float(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int iabn_parse_floats(const char *s, float *out, int max)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || n >= max || !isfinite(v)) return -1;
        out[n++] = (float)v;
        if (*end == ',') end++;
        else if (*end) return -1;
        p = end;
    }
    return n;
}

int iabn_parse_hw(const char *s, int *h, int *w)
{
    char *end;
    long a = strtol(s, &end, 10);
    if (end == s || a < 1 || a > INT_MAX) return -1;
    long b = a;
    if (*end == 'x' || *end == 'X') {
        char *e2;
        b = strtol(end + 1, &e2, 10);
        if (e2 == end + 1 || *e2 || b < 1 || b > INT_MAX) return -1;
    } else if (*end) {
        return -1;
    }
    *h = (int)a;
    *w = (int)b;
    return 0;
}

int iabn_check_device(const char *dev, const char *cmd)
{
    iabn_device_kind kind;
    int index;
    if (iabn_device_parse(dev, &kind, &index)) {
        fprintf(stderr, "iabn %s: --device must be cpu, cuda or cuda:N, not '%s'\n", cmd, dev);
        return -1;
    }
    /* the backend must be built; whether a device is present is for the
     * command to find out when it opens one (iabn mem plans without one) */
    const iabn_backend *be;
    iabn_err why = {0};
    if (iabn_device_planning_backend(dev, &be, &why)) {
        fprintf(stderr, "iabn %s: %s\n", cmd, why.msg);
        return -1;
    }
    return 0;
}

static iabn_trainer_stop stop_request;
static volatile sig_atomic_t stop_signal;

/* First SIGINT / SIGTERM: stop after the step (the trainer writes its
 * checkpoint).  Second: leave at once; checkpoints are written to a
 * temporary file and renamed, so the last complete one stays intact. */
static void on_signal(int sig)
{
    if (stop_signal) _exit(128 + sig);
    stop_signal = sig;
    iabn_trainer_request_stop(&stop_request);
}

int iabn_cli_stop_signal(void) { return stop_signal; }

iabn_trainer_stop *iabn_cli_stop_on_signals(void)
{
    stop_request.requested = 0;
    stop_signal = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    return &stop_request;
}

void iabn_cli_log(void *user, const char *line)
{
    (void)user;
    printf("%s\n", line);
    fflush(stdout);
}
