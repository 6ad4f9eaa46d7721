/* test_data_loader.c: the threaded loader (determinism for any worker count,
 * epochs, rank sharding, drop_last, bad files skipped or strict, allocator
 * callback, shutdown at any point, segmentation batches) and `iabn data`. */
#include "test_util.h"

#include <pthread.h>

#include "data/data.h"
#include "iabn.h"
#include "test_data_util.h"
#include "tools/commands.h"

#ifndef DATA_FIXTURE_DIR
#error "DATA_FIXTURE_DIR must be defined"
#endif

#define NCLS 4
#define PER 10 /* 40 training images */

typedef struct run {
    int nb;
    int n[64];
    int64_t idx[64][8];
    int32_t lab[64][8];
    uint64_t hash[64];
} run;

static uint64_t fnv(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static iabn_loader_cfg base_cfg(void)
{
    iabn_loader_cfg c;
    iabn_loader_cfg_defaults(&c, IABN_TF_CLASSIFY_TRAIN);
    c.transform.out_h = c.transform.out_w = 24;
    c.batch_size = 6;
    c.workers = 2;
    c.seed = 11;
    c.warn = NULL;
    return c;
}

static int collect(const iabn_loader_cfg *cfg, const iabn_dataset *ds, int64_t epoch, run *r)
{
    iabn_loader *ld;
    iabn_err e = {0};
    memset(r, 0, sizeof *r);
    if (iabn_loader_open(cfg, ds, &ld, &e)) {
        fprintf(stderr, "open: %s\n", e.msg);
        return -1;
    }
    int rc = iabn_loader_start_epoch(ld, epoch, &e);
    iabn_batch *b;
    while (!rc && (rc = iabn_loader_next(ld, &b, &e)) == 0 && r->nb < 64) {
        r->n[r->nb] = b->n;
        for (int k = 0; k < b->n && k < 8; k++) {
            r->idx[r->nb][k] = b->indices[k];
            r->lab[r->nb][k] = b->labels[k];
        }
        r->hash[r->nb] = fnv(b->images, sizeof(float) * (size_t)b->n * 3 * b->height * b->width);
        r->nb++;
        iabn_loader_release(ld, b);
    }
    CHECK(r->nb == iabn_loader_batches_per_epoch(ld));
    iabn_loader_close(ld);
    if (rc < 0) fprintf(stderr, "next: %s\n", e.msg);
    return rc < 0 ? rc : 0;
}

static int same_run(const run *a, const run *b)
{
    if (a->nb != b->nb) return 0;
    for (int i = 0; i < a->nb; i++)
        if (a->n[i] != b->n[i] || a->hash[i] != b->hash[i] ||
            memcmp(a->idx[i], b->idx[i], sizeof a->idx[i]))
            return 0;
    return 1;
}

static iabn_dataset *folder;

static void test_deterministic_any_workers(void)
{
    iabn_loader_cfg c = base_cfg();
    run a, b, d;
    c.workers = 1;
    CHECK(collect(&c, folder, 0, &a) == 0);
    c.workers = 3;
    c.prefetch = 5;
    CHECK(collect(&c, folder, 0, &b) == 0);
    CHECK_MSG(same_run(&a, &b), "1 worker and 3 workers give different batches");
    c.seed = 12;
    CHECK(collect(&c, folder, 0, &d) == 0);
    CHECK(!same_run(&a, &d));
    CHECK(a.nb == 6); /* drop_last: 40 / 6 */
    for (int i = 0; i < a.nb; i++) {
        CHECK(a.n[i] == 6);
        for (int k = 0; k < 6; k++) CHECK(a.lab[i][k] == folder->labels[a.idx[i][k]]);
    }
}

static void test_epochs_and_shards(void)
{
    iabn_loader_cfg c = base_cfg();
    c.drop_last = 0;
    c.batch_size = 8;
    run e0, e1;
    CHECK(collect(&c, folder, 0, &e0) == 0);
    CHECK(collect(&c, folder, 1, &e1) == 0);
    int seen0[NCLS * PER] = {0}, seen1[NCLS * PER] = {0}, moved = 0;
    CHECK(e0.nb == 5 && e1.nb == 5);
    for (int i = 0; i < e0.nb; i++)
        for (int k = 0; k < e0.n[i]; k++) {
            seen0[e0.idx[i][k]]++;
            seen1[e1.idx[i][k]]++;
            moved += e0.idx[i][k] != e1.idx[i][k];
        }
    int perm = 1;
    for (int i = 0; i < NCLS * PER; i++) perm &= seen0[i] == 1 && seen1[i] == 1;
    CHECK_MSG(perm, "an epoch is not a permutation");
    CHECK(moved > 20); /* reshuffled */

    /* 3 ranks: disjoint shards covering everything (drop_last off, last
     * batches short), and equal full batches with drop_last */
    for (int dl = 0; dl < 2; dl++) {
        int owner[NCLS * PER];
        for (int i = 0; i < NCLS * PER; i++) owner[i] = -1;
        int overlap = 0, total = 0;
        for (int rank = 0; rank < 3; rank++) {
            iabn_loader_cfg s = base_cfg();
            s.batch_size = 4;
            s.drop_last = dl;
            s.rank = rank;
            s.world_size = 3;
            run r;
            CHECK(collect(&s, folder, 5, &r) == 0);
            CHECK(r.nb == (dl ? 3 : (rank == 0 ? 4 : 4))); /* 14,13,13 -> 4,4,4 ; 13 -> 3 */
            for (int i = 0; i < r.nb; i++)
                for (int k = 0; k < r.n[i]; k++) {
                    int64_t x = r.idx[i][k];
                    if (owner[x] >= 0) overlap++;
                    owner[x] = rank;
                    total++;
                    if (dl) CHECK(r.n[i] == 4);
                }
        }
        CHECK(overlap == 0);
        CHECK_MSG(total == (dl ? 36 : 40), "drop_last %d: %d samples over 3 ranks", dl, total);
    }
}

typedef struct warnlog {
    pthread_mutex_t mu;
    int n;
    char msgs[16][600];
} warnlog;

static void log_warning(void *user, const char *msg)
{
    warnlog *w = user;
    pthread_mutex_lock(&w->mu);
    if (w->n < 16) snprintf(w->msgs[w->n], sizeof w->msgs[0], "%s", msg);
    w->n++;
    pthread_mutex_unlock(&w->mu);
}

static int allocs, frees;
static pthread_mutex_t alloc_mu = PTHREAD_MUTEX_INITIALIZER;

static void *count_alloc(size_t n, void *user)
{
    (void)user;
    pthread_mutex_lock(&alloc_mu);
    allocs++;
    pthread_mutex_unlock(&alloc_mu);
    return malloc(n);
}

static void count_free(void *p, void *user)
{
    (void)user;
    pthread_mutex_lock(&alloc_mu);
    frees++;
    pthread_mutex_unlock(&alloc_mu);
    free(p);
}

static void test_bad_files_skipped(void)
{
    iabn_err e = {0};
    const char *root = t_path("%s", "bad");
    CHECK(iabn_data_make_synthetic_folder(root, 2, 6, 0, 32, 5, &e) == 0);
    char src[512];
    size_t n;
    uint8_t *jpg = t_slurp(t_path("%s", "bad/train/class_000/img_00000.jpg"), &n);
    t_write(t_path("%s", "bad/train/class_000/zero.jpg"), "", 0);
    t_write(t_path("%s", "bad/train/class_000/truncated.jpg"), jpg, n / 2);
    t_write(t_path("%s", "bad/train/class_001/notes.JPEG"), "hello, not a JPEG", 17);
    free(jpg);
    /* the traps that are valid: a PNG named .JPEG, a CMYK JPEG, 16-bit gray */
    snprintf(src, sizeof src, "%s/png_named.JPEG", DATA_FIXTURE_DIR);
    t_copy(src, t_path("%s", "bad/train/class_001/n02105855_2933.JPEG"));
    snprintf(src, sizeof src, "%s/src_cmyk.jpg", DATA_FIXTURE_DIR);
    t_copy(src, t_path("%s", "bad/train/class_001/cmyk.jpg"));
    snprintf(src, sizeof src, "%s/src_gray16.png", DATA_FIXTURE_DIR);
    t_copy(src, t_path("%s", "bad/train/class_001/gray16.png"));
    iabn_dataset *ds;
    CHECK(iabn_dataset_open(IABN_DATASET_IMAGEFOLDER, root, "train", &ds, &e) == 0);
    if (!ds) return;
    CHECK(ds->count == 18);
    warnlog wl = {PTHREAD_MUTEX_INITIALIZER, 0, {{0}}};
    iabn_loader_cfg c = base_cfg();
    c.drop_last = 0;
    c.batch_size = 5;
    c.warn = log_warning;
    c.warn_user = &wl;
    c.alloc = count_alloc;
    c.free = count_free;
    iabn_loader *ld;
    CHECK(iabn_loader_open(&c, ds, &ld, &e) == 0);
    int64_t total = 0;
    for (int ep = 0; ep < 2; ep++) {
        CHECK(iabn_loader_start_epoch(ld, ep, &e) == 0);
        iabn_batch *b;
        int rc;
        while ((rc = iabn_loader_next(ld, &b, &e)) == 0) {
            total += b->n;
            for (int k = 0; k < b->n; k++) {
                const char *p = ds->paths[b->indices[k]];
                CHECK_MSG(!strstr(p, "zero") && !strstr(p, "truncated") && !strstr(p, "notes"),
                          "bad file %s delivered", p);
                CHECK(b->labels[k] == ds->labels[b->indices[k]]);
            }
            iabn_loader_release(ld, b);
        }
        CHECK_MSG(rc == 1, "%s", e.msg);
    }
    CHECK(total == 36); /* full epochs: every bad slot replaced */
    iabn_loader_stats st;
    iabn_loader_get_stats(ld, &st);
    CHECK(st.skipped_files == 3);
    CHECK(st.replaced_samples == 6);
    CHECK_MSG(wl.n == 3, "%d warnings for 3 bad files over 2 epochs", wl.n);
    int named = 0;
    for (int i = 0; i < wl.n && i < 16; i++)
        named += strstr(wl.msgs[i], "zero.jpg") || strstr(wl.msgs[i], "truncated.jpg") ||
                 strstr(wl.msgs[i], "notes.JPEG");
    CHECK(named == 3);
    iabn_loader_close(ld);
    CHECK(allocs > 0 && allocs == frees);

    /* strict: the first bad file is an error naming it */
    c.strict = 1;
    c.warn = NULL;
    CHECK(iabn_loader_open(&c, ds, &ld, &e) == 0);
    CHECK(iabn_loader_start_epoch(ld, 0, &e) == 0);
    iabn_batch *b;
    int rc;
    while ((rc = iabn_loader_next(ld, &b, &e)) == 0) iabn_loader_release(ld, b);
    CHECK(rc < 0);
    CHECK_MSG(strstr(e.msg, "zero.jpg") || strstr(e.msg, "truncated.jpg") ||
              strstr(e.msg, "notes.JPEG"), "%s", e.msg);
    iabn_loader_close(ld);
    iabn_dataset_free(ds);
}

static void test_shutdown_and_restart(void)
{
    iabn_err e = {0};
    iabn_loader_cfg c = base_cfg();
    c.workers = 3;
    c.prefetch = 2;
    iabn_loader *ld;
    /* close with batches in flight and one held */
    CHECK(iabn_loader_open(&c, folder, &ld, &e) == 0);
    CHECK(iabn_loader_start_epoch(ld, 0, &e) == 0);
    iabn_batch *b, *b2, *b3;
    CHECK(iabn_loader_next(ld, &b, &e) == 0);
    iabn_loader_close(ld);
    /* close before any epoch */
    CHECK(iabn_loader_open(&c, folder, &ld, &e) == 0);
    CHECK(iabn_loader_next(ld, &b, &e) == IABN_EINVAL);
    iabn_loader_close(ld);
    /* restart mid-epoch while holding a batch; holding every slot is an error */
    CHECK(iabn_loader_open(&c, folder, &ld, &e) == 0);
    CHECK(iabn_loader_start_epoch(ld, 0, &e) == 0);
    CHECK(iabn_loader_next(ld, &b, &e) == 0);
    CHECK(iabn_loader_next(ld, &b2, &e) == 0);
    CHECK(iabn_loader_next(ld, &b3, &e) == IABN_EINVAL && strstr(e.msg, "release"));
    iabn_loader_release(ld, b2);
    CHECK(iabn_loader_start_epoch(ld, 1, &e) == 0);
    int count = 0, rc;
    iabn_loader_release(ld, b);
    while ((rc = iabn_loader_next(ld, &b, &e)) == 0) {
        CHECK(b->epoch == 1 && b->index == count);
        count++;
        iabn_loader_release(ld, b);
    }
    CHECK(rc == 1 && count == 6);
    CHECK(iabn_loader_next(ld, &b, &e) == 1); /* stays at the end */
    iabn_loader_stats st;
    iabn_loader_get_stats(ld, &st);
    CHECK(st.batches == 8 && st.wait_seconds >= 0);
    iabn_loader_close(ld);
    /* bad configurations */
    c.batch_size = 0;
    CHECK(iabn_loader_open(&c, folder, &ld, &e) == IABN_EINVAL);
    c = base_cfg();
    c.rank = 2;
    c.world_size = 2;
    CHECK(iabn_loader_open(&c, folder, &ld, &e) == IABN_EINVAL);
    c = base_cfg();
    c.transform.kind = IABN_TF_SEGMENT_TRAIN;
    CHECK(iabn_loader_open(&c, folder, &ld, &e) == IABN_EINVAL);
}

static void test_segmentation_batches(void)
{
    iabn_err e = {0};
    const char *root = t_path("%s", "cs");
    CHECK(iabn_data_make_synthetic_cityscapes(root, 6, 2, 96, 48, 2, &e) == 0);
    iabn_dataset *ds;
    CHECK(iabn_dataset_open(IABN_DATASET_CITYSCAPES, root, "train", &ds, &e) == 0);
    if (!ds) return;
    for (int kind = 0; kind < 2; kind++) {
        iabn_loader_cfg c;
        iabn_loader_cfg_defaults(&c, kind ? IABN_TF_SEGMENT_EVAL : IABN_TF_SEGMENT_TRAIN);
        c.transform.out_h = kind ? 48 : 40;
        c.transform.out_w = kind ? 96 : 64;
        c.batch_size = 3;
        c.workers = 2;
        iabn_loader *ld;
        CHECK(iabn_loader_open(&c, ds, &ld, &e) == 0);
        CHECK(iabn_loader_start_epoch(ld, 0, &e) == 0);
        iabn_batch *b;
        int seen[256] = {0}, nb = 0, rc;
        while ((rc = iabn_loader_next(ld, &b, &e)) == 0) {
            nb++;
            size_t px = (size_t)b->height * b->width;
            CHECK(b->height == c.transform.out_h && b->width == c.transform.out_w);
            for (size_t i = 0; i < (size_t)b->n * px; i++) {
                int32_t v = b->labels[i];
                CHECK_MSG((v >= 0 && v < 19) || v == 255, "label %d", v);
                if (v >= 0 && v < 256) seen[v] = 1;
            }
            for (int k = 0; k < b->n; k++)
                if (kind) CHECK(b->valid_hw[2 * k] == 48 && b->valid_hw[2 * k + 1] == 96);
            iabn_loader_release(ld, b);
        }
        CHECK_MSG(rc == 1, "%s", e.msg);
        CHECK(nb == 2);
        CHECK(seen[0] && seen[255] && seen[10]); /* road, ignore, sky */
        iabn_loader_close(ld);
    }
    /* a label of the wrong size stops the loader with both files named, even
     * when bad files are otherwise skipped */
    iabn_image small;
    CHECK(iabn_image_alloc(&small, 10, 10, 1, 1, &e) == 0);
    memset(small.data, 7, 100);
    CHECK(iabn_image_write_png(ds->label_paths[4], &small, NULL, 0, &e) == 0);
    iabn_image_free(&small);
    iabn_loader_cfg c;
    iabn_loader_cfg_defaults(&c, IABN_TF_SEGMENT_EVAL);
    c.transform.out_h = 48;
    c.transform.out_w = 96;
    c.batch_size = 2;
    iabn_loader *ld;
    CHECK(iabn_loader_open(&c, ds, &ld, &e) == 0);
    CHECK(iabn_loader_start_epoch(ld, 0, &e) == 0);
    iabn_batch *b;
    int rc;
    while ((rc = iabn_loader_next(ld, &b, &e)) == 0) iabn_loader_release(ld, b);
    CHECK(rc == IABN_EINVAL);
    CHECK_MSG(strstr(e.msg, ds->paths[4]) && strstr(e.msg, ds->label_paths[4]) &&
              strstr(e.msg, "10x10"), "%s", e.msg);
    iabn_loader_close(ld);
    iabn_dataset_free(ds);
}

static void test_cmd_data(void)
{
    const char *root = t_path("%s", "cmd");
    char *synth[] = {"data", "synth", "--out", (char *)root, "--classes", "3", "--train-images", "4",
                     "--val-images", "1", "--size", "40"};
    CHECK(iabn_cmd_data(12, synth) == 0);
    char *bench[] = {"data", "bench", "--data", (char *)root, "--workers", "2", "--json",
                     "--size", "32", "--batch", "5"};
    CHECK(iabn_cmd_data(11, bench) == 0);
    char *bench2[] = {"data", "bench", "--data", (char *)root, "--exact", "--jitter"};
    CHECK(iabn_cmd_data(6, bench2) == 0);
    char *info[] = {"data", "info", "--data", (char *)root, "--split", "val"};
    CHECK(iabn_cmd_data(6, info) == 0);
    const char *cs = t_path("%s", "cmdcs");
    char *synth_cs[] = {"data", "synth", "--kind", "vistas", "--out", (char *)cs, "--train-images", "3",
                        "--val-images", "1", "--width", "64", "--height", "32", "--v12"};
    CHECK(iabn_cmd_data(15, synth_cs) == 0);
    char *bench_cs[] = {"data", "bench", "--kind", "vistas", "--data", (char *)cs, "--size",
                        "32"};
    CHECK(iabn_cmd_data(8, bench_cs) == 0);
    char *help[] = {"data", "--help"};
    CHECK(iabn_cmd_data(2, help) == 0);
    char *bad[] = {"data", "bench", "--data", (char *)root, "--workers", "x"};
    CHECK(iabn_cmd_data(6, bad) == 2);
    char *missing[] = {"data", "bench", "--data", (char *)t_path("%s", "nothing")};
    CHECK(iabn_cmd_data(4, missing) == 1);
    char *noarg[] = {"data"};
    CHECK(iabn_cmd_data(1, noarg) == 2);
}

int main(int argc, char **argv)
{
    /* `test_data_loader data ...` runs the iabn data command (for benches) */
    if (argc > 1 && !strcmp(argv[1], "data")) return iabn_cmd_data(argc - 1, argv + 1);
    t_tmp_make();
    iabn_err e = {0};
    if (iabn_data_make_synthetic_folder(t_path("%s", "folder"), NCLS, PER, 1, 40, 1, &e) ||
        iabn_dataset_open(IABN_DATASET_IMAGEFOLDER, t_path("%s", "folder"), "train", &folder,
                          &e)) {
        fprintf(stderr, "%s\n", e.msg);
        t_tmp_remove();
        return 1;
    }
    RUN(test_deterministic_any_workers);
    RUN(test_epochs_and_shards);
    RUN(test_bad_files_skipped);
    RUN(test_shutdown_and_restart);
    RUN(test_segmentation_batches);
    RUN(test_cmd_data);
    iabn_dataset_free(folder);
    t_tmp_remove();
    return TEST_END();
}
