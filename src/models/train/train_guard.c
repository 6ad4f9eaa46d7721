/* train_guard.c: the trainer's guards against wrong or silent results
 * (docs/TRUST.md): the output directory's lock, the resume check against the
 * checkpoint's configuration, and the running statistics kept across a step
 * that --on-nonfinite skip may undo. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "models/train/train_internal.h"

/* One run per output directory: an exclusive flock on DIR/.iabn.lock, held
 * until the process ends or the run tears down (the kernel drops it if the
 * process dies), with the holder's pid in the file for the message. */
int trainer_lock_outdir(trainer *tr, iabn_err *e)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/.iabn.lock", tr->outdir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return iabn_err_set(e, IABN_EIO, "cannot open %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        char pid[24] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        close(fd);
        return iabn_err_set(e, IABN_EIO,
                            "%s is in use by another run (process %s holds %s): two runs would "
                            "interleave their metrics and checkpoints; wait for it or choose "
                            "another --output-dir",
                            tr->outdir, pid[0] ? pid : "?", path);
    }
    char pid[24];
    int k = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) || pwrite(fd, pid, (size_t)k, 0) != k) {
        close(fd);
        return iabn_err_set(e, IABN_EIO, "cannot write %s: %s", path, strerror(errno));
    }
    tr->lock_fd = fd + 1;
    return 0;
}

/* Leaves of a and b that differ, as "path: old -> new" into buf. */
static void json_diff(const cJSON *a, const cJSON *b, const char *path, char *buf, size_t cap,
                      int *count)
{
    if (cJSON_IsObject(a) && cJSON_IsObject(b)) {
        const cJSON *x;
        cJSON_ArrayForEach(x, a) {
            char p[256];
            snprintf(p, sizeof p, "%s%s%s", path, *path ? "." : "", x->string);
            json_diff(x, cJSON_GetObjectItemCaseSensitive(b, x->string), p, buf, cap, count);
        }
        cJSON_ArrayForEach(x, b) {
            if (cJSON_GetObjectItemCaseSensitive(a, x->string)) continue;
            char p[256];
            snprintf(p, sizeof p, "%s%s%s", path, *path ? "." : "", x->string);
            json_diff(NULL, x, p, buf, cap, count);
        }
        return;
    }
    if (a && b && cJSON_Compare(a, b, 1)) return;
    char *sa = a ? cJSON_PrintUnformatted(a) : NULL, *sb = b ? cJSON_PrintUnformatted(b) : NULL;
    size_t len = strlen(buf);
    if (len + 8 < cap)
        snprintf(buf + len, cap - len, "%s%s: %.40s -> %.40s", *count ? ", " : "", path,
                 sa ? sa : "(none)", sb ? sb : "(none)");
    (*count)++;
    cJSON_free(sa);
    cJSON_free(sb);
}

/* --resume: the checkpoint's configuration and data size against this run's.
 * A change (batch size, model, schedule, data) would silently continue a
 * different run at the saved position: refused, listing what differs, unless
 * resume_override, which says what changed.  A finished run says so. */
int trainer_check_resume(trainer *tr, iabn_err *e)
{
    const iabn_train_opts *o = tr->o;
    iabn_st_file *f = NULL;
    int rc = iabn_st_load(o->resume, &f, e);
    if (rc) return rc;
    char diff[1024] = "";
    int count = 0;
    const char *cj = iabn_st_meta(f, "config");
    cJSON *a = cj ? cJSON_Parse(cj) : NULL, *b = cJSON_Parse(tr->config_json);
    if (a && b) json_diff(a, b, "", diff, sizeof diff, &count);
    else if (!cj) {
        snprintf(diff, sizeof diff, "the checkpoint holds no configuration");
        count = 1;
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
    const char *ti = iabn_st_meta(f, "train_images");
    if (ti && strtoll(ti, NULL, 10) != (long long)tr->dtrain->count) {
        size_t len = strlen(diff);
        snprintf(diff + len, sizeof diff - len, "%straining images: %s -> %zu", count ? ", " : "",
                 ti, tr->dtrain->count);
        count++;
    }
    iabn_st_free(f);
    if (count && !o->resume_override)
        return iabn_err_set(e, IABN_EINVAL,
                            "--resume %s: %d setting%s differ%s from the checkpoint's run: %s; "
                            "resume with the same settings, or add --resume-override to continue "
                            "with these",
                            o->resume, count, count > 1 ? "s" : "", count > 1 ? "" : "s", diff);
    if (count) trainer_say(tr, "resuming %s with %d changed setting%s (--resume-override): %s",
                           o->resume, count, count > 1 ? "s" : "", diff);
    if (tr->pos.epoch >= tr->cfg.schedule.epochs && !tr->pos.val_pending)
        return iabn_err_set(e, IABN_EINVAL,
                            "--resume %s: that run is finished (epoch %lld of %d): nothing left "
                            "to train; raise --epochs (with --resume-override) to train further",
                            o->resume, tr->pos.epoch, tr->cfg.schedule.epochs);
    return 0;
}

/* The running statistics before a step, so that a skipped step leaves no
 * trace (its forward pass updated them). */
int trainer_buffers_copy(trainer *tr, int restore, iabn_err *e)
{
    size_t total = 0, off = 0;
    for (int i = 0; i < iabn_store_count(tr->s); i++) {
        const iabn_param *p = iabn_store_get(tr->s, i);
        if (p->kind == IABN_P_BUFFER) total += p->count;
    }
    if (total > tr->snap_cap) {
        float *q = realloc(tr->snap, total * sizeof *q);
        if (!q) return iabn_err_set(e, IABN_ENOMEM, "out of memory saving the running statistics");
        tr->snap = q;
        tr->snap_cap = total;
    }
    int rc = 0;
    for (int i = 0; i < iabn_store_count(tr->s) && !rc; i++) {
        const iabn_param *p = iabn_store_get(tr->s, i);
        if (p->kind != IABN_P_BUFFER) continue;
        rc = restore ? iabn_store_write(tr->s, i, tr->snap + off, e)
                     : iabn_store_read(tr->s, i, tr->snap + off, e);
        off += p->count;
    }
    return rc;
}
