/* comm_mpi.c: the MPI transport of the communicator (comm.h), built when
 * meson finds MPI.
 *
 * One thread per communicator makes every MPI call after MPI_Init (so MPI
 * runs in MPI_THREAD_SERIALIZED mode): it takes collectives from a FIFO,
 * issues each as a non-blocking call and polls it against the deadline, so a
 * gradient bucket's all-reduce progresses while the caller's thread runs the
 * rest of the backward.  Between collectives it keeps answering liveness
 * pings (every 10 ms), so "does not answer" means a stopped or vanished
 * process, never a busy one.
 *
 * Pings travel on a duplicate of the world communicator (`ctl`), collectives
 * on another (`data`), so a diagnosis never mixes with data. */
#include "tensor/comm_internal.h"

#include <errno.h>
#include <mpi.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { TAG_PING = 71, TAG_PONG = 72, HOST_LEN = 64 };

typedef struct peer_id {
    int pid;
    char host[HOST_LEN];
} peer_id;

struct iabn_comm_mpi {
    MPI_Comm data, ctl;
    pthread_t thread;
    int thread_up;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    iabn_comm_op *head, *tail;
    int stop;
    peer_id *peers;
    /* liveness: a posted receive for pings from anyone */
    MPI_Request ping_req;
    int ping_buf[2];
    int pong_buf[2];
    int seq;
    int failed;          /* a collective failed: skip MPI_Finalize */
    atomic_int abandon;  /* the process gave up: stop polling at once */
};

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

static void mpi_msg(int code, char *out, size_t n)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", code);
    snprintf(out, n, "%s", s);
}

/* Answers every ping that has arrived. */
static void serve_pings(iabn_comm_mpi *m)
{
    for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Test(&m->ping_req, &flag, &st) != MPI_SUCCESS || !flag) return;
        int reply[2] = {m->ping_buf[0], 0};
        /* a few bytes: delivered eagerly, returns at once */
        MPI_Send(reply, 2, MPI_INT, st.MPI_SOURCE, TAG_PONG, m->ctl);
        MPI_Irecv(m->ping_buf, 2, MPI_INT, MPI_ANY_SOURCE, TAG_PING, m->ctl, &m->ping_req);
    }
}

/* Pings every peer and waits up to `grace` seconds for the answers (serving
 * pings and testing `req` meanwhile).  Fills lost[r] = 1 for peers that did
 * not answer; returns how many, or -1 when req completed meanwhile. */
static int probe_peers(iabn_comm *c, MPI_Request *req, double grace, int *lost)
{
    iabn_comm_mpi *m = c->mpi;
    int n = c->size;
    MPI_Request *pong = malloc((size_t)n * sizeof *pong);
    int *pongbuf = malloc((size_t)n * 2 * sizeof *pongbuf);
    if (!pong || !pongbuf) {
        free(pong);
        free(pongbuf);
        return 0;
    }
    int ping[2] = {++m->seq, c->rank};
    for (int r = 0; r < n; r++) {
        lost[r] = 0;
        pong[r] = MPI_REQUEST_NULL;
        if (r == c->rank) continue;
        MPI_Irecv(pongbuf + 2 * r, 2, MPI_INT, r, TAG_PONG, m->ctl, &pong[r]);
        MPI_Request sreq;
        MPI_Isend(ping, 2, MPI_INT, r, TAG_PING, m->ctl, &sreq);
        MPI_Request_free(&sreq);
    }
    double end = iabn_now() + grace;
    int done_main = 0;
    while (iabn_now() < end) {
        int all = 1;
        for (int r = 0; r < n; r++) {
            if (pong[r] == MPI_REQUEST_NULL) continue;
            int flag = 0;
            MPI_Test(&pong[r], &flag, MPI_STATUS_IGNORE);
            if (!flag) all = 0;
        }
        serve_pings(m);
        int flag = 0;
        MPI_Test(req, &flag, MPI_STATUS_IGNORE);
        if (flag) {
            done_main = 1;
            break;
        }
        if (all) break;
        sleep_us(1000);
    }
    int nlost = 0;
    for (int r = 0; r < n; r++)
        if (pong[r] != MPI_REQUEST_NULL) {
            lost[r] = 1;
            nlost++;
            MPI_Cancel(&pong[r]);
            MPI_Request_free(&pong[r]);
        }
    free(pong);
    free(pongbuf);
    return done_main ? -1 : nlost;
}

/* Polls req against the deadline (see comm.h).  Returns 0 or fills op->msg. */
static int poll_req(iabn_comm *c, MPI_Request *req, iabn_comm_op *op)
{
    iabn_comm_mpi *m = c->mpi;
    double t0 = iabn_now(), deadline = t0 + c->timeout, hard = t0 + 10 * c->timeout;
    long spins = 0;
    for (;;) {
        int flag = 0;
        int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            char s[MPI_MAX_ERROR_STRING];
            mpi_msg(rc, s, sizeof s);
            snprintf(op->msg, sizeof op->msg, "%s on rank %d failed: %s", op->what, c->rank, s);
            return IABN_EDEVICE;
        }
        if (flag) return 0;
        if (atomic_load(&m->abandon)) {
            snprintf(op->msg, sizeof op->msg, "%s: abandoned, rank %d gave up", op->what, c->rank);
            return IABN_EINTR;
        }
        serve_pings(m);
        double now = iabn_now();
        if (now > deadline) {
            int *lost = calloc((size_t)c->size, sizeof *lost);
            double grace = c->timeout < 10 ? c->timeout : 10;
            int nlost = lost ? probe_peers(c, req, grace, lost) : 0;
            if (nlost < 0) {
                free(lost);
                return 0;
            }
            if (nlost > 0) {
                size_t len = (size_t)snprintf(op->msg, sizeof op->msg,
                                              "%s: no progress for %.0f s on rank %d; ", op->what,
                                              now - t0, c->rank);
                for (int r = 0, k = 0; r < c->size && len < sizeof op->msg - 96; r++)
                    if (lost[r])
                        len += (size_t)snprintf(op->msg + len, sizeof op->msg - len,
                                                "%srank %d (pid %d on %s)", k++ ? ", " : "", r,
                                                m->peers[r].pid, m->peers[r].host);
                snprintf(op->msg + len, sizeof op->msg - len,
                         " does not answer: lost (killed, stopped or its host is gone)");
                free(lost);
                return IABN_EDEVICE;
            }
            free(lost);
            if (now > hard) {
                snprintf(op->msg, sizeof op->msg,
                         "%s: no progress for %.0f s on rank %d although every rank answers: "
                         "the ranks are not running the same sequence of collectives",
                         op->what, now - t0, c->rank);
                return IABN_EDEVICE;
            }
            deadline = iabn_now() + c->timeout;
        }
        /* spin briefly (a collective that is about to complete), then yield
         * the core to the computing thread */
        if (++spins > 200) sleep_us(spins > 2000 ? 200 : 20);
    }
}

static MPI_Datatype mpi_type(int dt) { return dt == IABN_COMM_F64 ? MPI_DOUBLE : MPI_FLOAT; }

static int exec_op(iabn_comm *c, iabn_comm_op *op)
{
    iabn_comm_mpi *m = c->mpi;
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_SUCCESS;
    switch (op->kind) {
    case IABN_COMM_OP_ALLREDUCE:
        if (op->count > (size_t)0x7fffffff) {
            snprintf(op->msg, sizeof op->msg, "%s: %zu values exceed MPI's int count", op->what,
                     op->count);
            return IABN_EINVAL;
        }
        rc = MPI_Iallreduce(MPI_IN_PLACE, op->buf, (int)op->count, mpi_type(op->dtype), MPI_SUM,
                            m->data, &req);
        break;
    case IABN_COMM_OP_ALLGATHER:
        rc = MPI_Iallgather(op->send, (int)op->count, MPI_BYTE, op->buf, (int)op->count, MPI_BYTE,
                            m->data, &req);
        break;
    case IABN_COMM_OP_BCAST:
        rc = MPI_Ibcast(op->buf, (int)op->count, MPI_BYTE, op->root, m->data, &req);
        break;
    default:
        rc = MPI_Ibarrier(m->data, &req);
        break;
    }
    if (rc != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING];
        mpi_msg(rc, s, sizeof s);
        snprintf(op->msg, sizeof op->msg, "%s on rank %d: %s", op->what, c->rank, s);
        return IABN_EDEVICE;
    }
    return poll_req(c, &req, op);
}

static void *thread_main(void *arg)
{
    iabn_comm *c = arg;
    iabn_comm_mpi *m = c->mpi;
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        if (!m->head) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 10 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&m->cv_work, &m->mu, &ts);
            pthread_mutex_unlock(&m->mu);
            serve_pings(m);
            pthread_mutex_lock(&m->mu);
            continue;
        }
        iabn_comm_op *op = m->head;
        m->head = op->next;
        if (!m->head) m->tail = NULL;
        int failed = m->failed;
        pthread_mutex_unlock(&m->mu);
        int rc;
        double t0 = iabn_now();
        if (failed) {
            memcpy(op->msg, c->fail.msg, sizeof op->msg);
            rc = IABN_EDEVICE;
        } else {
            rc = exec_op(c, op);
        }
        double dt = iabn_now() - t0;
        pthread_mutex_lock(&m->mu);
        if (op->async) c->busy += dt;
        if (rc && !m->failed) {
            m->failed = 1;
            c->fail.code = rc;
            memcpy(c->fail.msg, op->msg, sizeof c->fail.msg);
        }
        op->rc = rc;
        op->done = 1;
        pthread_cond_broadcast(&m->cv_done);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

void iabn_comm_mpi_submit(iabn_comm *c, iabn_comm_op *op)
{
    iabn_comm_mpi *m = c->mpi;
    op->done = 0;
    op->next = NULL;
    pthread_mutex_lock(&m->mu);
    if (m->tail) m->tail->next = op;
    else m->head = op;
    m->tail = op;
    pthread_cond_signal(&m->cv_work);
    pthread_mutex_unlock(&m->mu);
}

int iabn_comm_mpi_wait(iabn_comm *c, iabn_comm_op *op, iabn_err *e)
{
    iabn_comm_mpi *m = c->mpi;
    pthread_mutex_lock(&m->mu);
    while (!op->done) pthread_cond_wait(&m->cv_done, &m->mu);
    int rc = op->rc;
    if (rc) c->broken = 1;
    pthread_mutex_unlock(&m->mu);
    if (rc) return iabn_err_set(e, rc, "%s", op->msg);
    return 0;
}

int iabn_comm_mpi_init(iabn_comm *c, iabn_err *e)
{
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return iabn_err_set(e, IABN_EDEVICE, "MPI_Init_thread failed");
    if (inited) MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED)
        return iabn_err_set(e, IABN_EDEVICE,
                            "this MPI library offers thread level %d; the communicator needs "
                            "MPI_THREAD_SERIALIZED (%d)",
                            provided, MPI_THREAD_SERIALIZED);
    iabn_comm_mpi *m = calloc(1, sizeof *m);
    if (!m) return iabn_err_set(e, IABN_ENOMEM, "out of memory creating the MPI communicator");
    c->mpi = m;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    MPI_Comm_dup(MPI_COMM_WORLD, &m->data);
    MPI_Comm_dup(MPI_COMM_WORLD, &m->ctl);
    MPI_Comm_set_errhandler(m->data, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(m->ctl, MPI_ERRORS_RETURN);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &c->local_rank);
    MPI_Comm_size(local, &c->local_size);
    MPI_Comm_free(&local);
    /* who is who, for the messages that name a lost rank */
    m->peers = calloc((size_t)c->size, sizeof *m->peers);
    if (!m->peers) return iabn_err_set(e, IABN_ENOMEM, "out of memory for %d peers", c->size);
    peer_id me;
    memset(&me, 0, sizeof me);
    me.pid = (int)getpid();
    gethostname(me.host, HOST_LEN - 1);
    MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, m->peers, (int)sizeof me, MPI_BYTE, m->data);
    MPI_Irecv(m->ping_buf, 2, MPI_INT, MPI_ANY_SOURCE, TAG_PING, m->ctl, &m->ping_req);
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv_work, NULL);
    pthread_cond_init(&m->cv_done, NULL);
    if (pthread_create(&m->thread, NULL, thread_main, c)) {
        iabn_comm_mpi_fini(c);
        return iabn_err_set(e, IABN_EDEVICE, "cannot start the communicator thread");
    }
    m->thread_up = 1;
    return 0;
}

void iabn_comm_mpi_give_up(iabn_comm *c)
{
    iabn_comm_mpi *m = c->mpi;
    atomic_store(&m->abandon, 1);
    pthread_mutex_lock(&m->mu);
    m->failed = 1;
    pthread_mutex_unlock(&m->mu);
}

void iabn_comm_mpi_fini(iabn_comm *c)
{
    iabn_comm_mpi *m = c->mpi;
    if (!m) return;
    if (m->thread_up) {
        pthread_mutex_lock(&m->mu);
        m->stop = 1;
        pthread_cond_signal(&m->cv_work);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->thread, NULL);
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->cv_work);
        pthread_cond_destroy(&m->cv_done);
    }
    /* after a failure a peer is gone: finalising would wait for it forever;
     * the process exits and the launcher tears the job down */
    if (!m->failed && !c->broken) {
        /* all ranks leave together; a rank gone meanwhile is named, not waited for */
        iabn_comm_op op;
        memset(&op, 0, sizeof op);
        snprintf(op.what, sizeof op.what, "the final barrier");
        MPI_Request req;
        if (MPI_Ibarrier(m->data, &req) != MPI_SUCCESS || poll_req(c, &req, &op)) {
            free(m->peers);
            free(m);
            c->mpi = NULL;
            return;
        }
        MPI_Cancel(&m->ping_req);
        MPI_Wait(&m->ping_req, MPI_STATUS_IGNORE);
        MPI_Comm_free(&m->data);
        MPI_Comm_free(&m->ctl);
        MPI_Finalize();
    }
    free(m->peers);
    free(m);
    c->mpi = NULL;
}
