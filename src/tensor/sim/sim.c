/* sim/sim.c: the simulated device (sim.h).  One mutex guards the budgets,
 * the copy queue and every event; the copy thread pops jobs in order, waits
 * for each job's `after` event, copies (converting to or from bfloat16 for
 * half-size host copies), stretches the copy to the simulated bandwidth
 * (counted in host-side bytes), and completes its `done` event (with the
 * error, if it failed). */
#include "tensor/sim/sim.h"
#include "tensor/cpu/ops.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Allocations carry their size in a header, so that free can count them. */
#define HDR 64

typedef struct sim_event {
    int pending;         /* recorded on the copy stream, not yet passed */
    int err;             /* the copy it marks failed                     */
} sim_event;

enum { COPY, TO_BF16, FROM_BF16 };

typedef struct job {
    void *dst;
    const void *src;
    size_t bytes;    /* host-side bytes (what crosses the simulated link) */
    int conv;        /* COPY, TO_BF16, FROM_BF16 */
    sim_event *after, *done;
    struct job *next;
} job;

struct iabn_sim {
    iabn_backend be;
    iabn_sim_opts o;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    job *head, *tail;
    int busy, stop, err;  /* err: a failed copy not yet reported by sync */
    long nqueued;
    iabn_sim_stats st;
};

static void *sim_alloc_in(iabn_sim *s, size_t bytes, size_t limit, size_t *used, size_t *peak)
{
    pthread_mutex_lock(&s->mu);
    int ok = !limit || (*used <= limit && bytes <= limit - *used);
    if (ok) {
        *used += bytes;
        if (*used > *peak) *peak = *used;
    }
    pthread_mutex_unlock(&s->mu);
    if (!ok) return NULL;
    unsigned char *p = iabn_aligned_alloc(HDR, bytes + HDR);
    if (!p) {
        pthread_mutex_lock(&s->mu);
        *used -= bytes;
        pthread_mutex_unlock(&s->mu);
        return NULL;
    }
    memcpy(p, &bytes, sizeof bytes);
    return p + HDR;
}

static void sim_free_in(iabn_sim *s, void *q, size_t *used)
{
    if (!q) return;
    unsigned char *p = (unsigned char *)q - HDR;
    size_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    pthread_mutex_lock(&s->mu);
    *used -= bytes;
    pthread_mutex_unlock(&s->mu);
    iabn_aligned_free(p);
}

static void *sim_alloc(void *ctx, size_t bytes)
{
    iabn_sim *s = ctx;
    return sim_alloc_in(s, bytes, s->o.device_bytes, &s->st.device_used, &s->st.device_peak);
}
static void sim_free(void *ctx, void *p)
{
    iabn_sim *s = ctx;
    sim_free_in(s, p, &s->st.device_used);
}
static void *sim_host_alloc(void *ctx, size_t bytes)
{
    iabn_sim *s = ctx;
    return sim_alloc_in(s, bytes, s->o.host_bytes, &s->st.host_used, &s->st.host_peak);
}
static void sim_host_free(void *ctx, void *p)
{
    iabn_sim *s = ctx;
    sim_free_in(s, p, &s->st.host_used);
}

static int sim_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    if (bytes) memmove(dst, src, bytes);
    return 0;
}
static int sim_fill(void *ctx, void *dst, int byte, size_t bytes)
{
    (void)ctx;
    if (bytes) memset(dst, byte, bytes);
    return 0;
}

/* The compute stream is the calling thread: its work is done when a call
 * returns, so syncing means draining the copy stream. */
static int sim_sync(void *ctx)
{
    iabn_sim *s = ctx;
    pthread_mutex_lock(&s->mu);
    while (s->head || s->busy) pthread_cond_wait(&s->cv, &s->mu);
    int err = s->err;
    s->err = 0;
    pthread_mutex_unlock(&s->mu);
    return err;
}

static void *sim_event_new(void *ctx)
{
    (void)ctx;
    return calloc(1, sizeof(sim_event));
}
static void sim_event_free(void *ctx, void *ev)
{
    (void)ctx;
    free(ev);
}
/* Recorded on the compute stream: everything before it has already run. */
static int sim_record(void *ctx, void *ev)
{
    iabn_sim *s = ctx;
    pthread_mutex_lock(&s->mu);
    ((sim_event *)ev)->pending = 0;
    ((sim_event *)ev)->err = 0;
    pthread_mutex_unlock(&s->mu);
    return 0;
}
static int sim_wait(void *ctx, void *evp)
{
    iabn_sim *s = ctx;
    sim_event *ev = evp;
    double t0 = iabn_now();
    pthread_mutex_lock(&s->mu);
    while (ev->pending) pthread_cond_wait(&s->cv, &s->mu);
    int err = ev->err;
    if (err) s->err = 0; /* reported here */
    s->st.wait_seconds += iabn_now() - t0;
    pthread_mutex_unlock(&s->mu);
    return err;
}

static int queue(iabn_sim *s, void *dst, const void *src, size_t bytes, int conv, void *after,
                 void *done)
{
    job *j = malloc(sizeof *j);
    if (!j) return -1;
    *j = (job){dst, src, bytes, conv, after, done, NULL};
    pthread_mutex_lock(&s->mu);
    if (done) {
        ((sim_event *)done)->pending = 1;
        ((sim_event *)done)->err = 0;
    }
    if (s->tail) s->tail->next = j;
    else s->head = j;
    s->tail = j;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int sim_async(void *ctx, void *dst, const void *src, size_t bytes, void *after, void *done)
{
    return queue(ctx, dst, src, bytes, COPY, after, done);
}

static int sim_d2h_bf16(void *ctx, uint16_t *dst, const float *src, size_t count, void *after,
                        void *done)
{
    return queue(ctx, dst, src, count * sizeof *dst, TO_BF16, after, done);
}

static int sim_h2d_bf16(void *ctx, float *dst, const uint16_t *src, size_t count, void *after,
                        void *done)
{
    return queue(ctx, dst, src, count * sizeof *src, FROM_BF16, after, done);
}

static void sleep_until(double t)
{
    double left = t - iabn_now();
    if (left <= 0) return;
    struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

static void *copy_thread(void *arg)
{
    iabn_sim *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head) break;
        job *j = s->head;
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        s->busy = 1;
        while (j->after && j->after->pending) pthread_cond_wait(&s->cv, &s->mu);
        long n = ++s->nqueued;
        int fail = s->o.fail_copy > 0 && n == s->o.fail_copy;
        pthread_mutex_unlock(&s->mu);
        double t0 = iabn_now();
        if (!fail && j->bytes) {
            if (j->conv == TO_BF16) iabn_to_bf16(j->bytes / 2, j->src, j->dst);
            else if (j->conv == FROM_BF16) iabn_from_bf16(j->bytes / 2, j->src, j->dst);
            else memcpy(j->dst, j->src, j->bytes);
        }
        if (s->o.copy_bytes_per_s > 0) sleep_until(t0 + (double)j->bytes / s->o.copy_bytes_per_s);
        double dt = iabn_now() - t0;
        pthread_mutex_lock(&s->mu);
        s->st.copies++;
        s->st.copied_bytes += j->bytes;
        s->st.copy_seconds += dt;
        if (fail) s->err = 1;
        if (j->done) {
            j->done->pending = 0;
            j->done->err = fail;
        }
        s->busy = 0;
        free(j);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int iabn_sim_open(const iabn_sim_opts *o, iabn_sim **out, iabn_err *e)
{
    if (o->copy_bytes_per_s < 0)
        return iabn_err_set(e, IABN_EINVAL, "sim device: the copy bandwidth must be >= 0");
    iabn_sim *s = calloc(1, sizeof *s);
    if (!s) return iabn_err_set(e, IABN_ENOMEM, "out of memory opening the sim device");
    s->o = *o;
    s->be = (iabn_backend){
        .kind = IABN_DEV_CPU, .name = "sim", .align = 256, .ctx = s,
        .alloc = sim_alloc, .free = sim_free, .h2d = sim_copy, .d2h = sim_copy,
        .fill = sim_fill, .sync = sim_sync, .event_new = sim_event_new,
        .event_free = sim_event_free, .record = sim_record, .wait = sim_wait,
        .h2d_async = sim_async, .d2h_async = sim_async, .d2h_bf16 = sim_d2h_bf16,
        .h2d_bf16 = sim_h2d_bf16, .host_alloc = sim_host_alloc,
        .host_free = sim_host_free, .node_done = NULL,
        .k = iabn_backend_cpu()->k, /* the CPU's kernels: the same results */
    };
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, copy_thread, s)) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        return iabn_err_set(e, IABN_EDEVICE, "sim device: cannot start the copy thread");
    }
    *out = s;
    return 0;
}

void iabn_sim_close(iabn_sim *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

const iabn_backend *iabn_sim_backend(iabn_sim *s) { return &s->be; }

void iabn_sim_get_stats(iabn_sim *s, iabn_sim_stats *st)
{
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    pthread_mutex_unlock(&s->mu);
}

void iabn_sim_reset_stats(iabn_sim *s)
{
    pthread_mutex_lock(&s->mu);
    size_t du = s->st.device_used, hu = s->st.host_used;
    memset(&s->st, 0, sizeof s->st);
    s->st.device_used = s->st.device_peak = du;
    s->st.host_used = s->st.host_peak = hu;
    pthread_mutex_unlock(&s->mu);
}
