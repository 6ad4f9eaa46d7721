/* cmd_data.c: `iabn data`: look at, generate and benchmark data sets.
 *
 *     iabn data bench --data-path DIR [--split train] [--workers N] [--json] ...
 *     iabn data synth --output DIR [--dataset imagefolder|cityscapes|vistas] ...
 *     iabn data info  --data-path DIR [--dataset K] [--split S]
 *
 * bench runs the training loader over every image of the split once (no
 * sample dropped) and reports images/s, images/s per worker, images per
 * CPU-second (the per-core figure, comparable with a one-process torchvision
 * run) and the files skipped.
 */
#include "tools/commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "iabn.h"
#include "tools/options.h"

/* The flags cmd_data reads, with their defaults. */
typedef struct opts {
    const char *data, *out, *split;
    int workers, batch, size, epochs, exact, jitter, strict, json, v12;
    int classes, n_train, n_val, width, height;
    long long seed;
} opts;

#define V(id, dflt) (a->v[id].set ? a->v[id].i : (dflt))

/* The option table's flags into o; 0, or -1 after a message. */
static int parse(const iabn_args *a, opts *o)
{
    const iabn_optval *v = a->v;
    *o = (opts){v[IABN_O_DATA_PATH].s, v[IABN_O_OUTPUT].s, v[IABN_O_SPLIT].set ? v[IABN_O_SPLIT].s : "train",
                (int)V(IABN_O_WORKERS, 1), (int)V(IABN_O_BATCH, 32), 0, (int)V(IABN_O_EPOCHS, 1),
                v[IABN_O_EXACT].set, v[IABN_O_JITTER].set, v[IABN_O_STRICT].set, v[IABN_O_JSON].set,
                v[IABN_O_V12].set, (int)V(IABN_O_CLASSES, 0), (int)V(IABN_O_TRAIN_IMAGES, -1),
                (int)V(IABN_O_VAL_IMAGES, -1), (int)V(IABN_O_WIDTH, 0), (int)V(IABN_O_HEIGHT, 0),
                V(IABN_O_SEED, 0)};
    if (v[IABN_O_SIZE].set) {
        if (v[IABN_O_SIZE].h != v[IABN_O_SIZE].w || v[IABN_O_SIZE].h < 8 || v[IABN_O_SIZE].h > 8192) {
            fprintf(stderr, "iabn data: --size %s: one side S, 8 to 8192\n", v[IABN_O_SIZE].s);
            return -1;
        }
        o->size = v[IABN_O_SIZE].h;
    }
    if (v[IABN_O_CLASSES].set && o->classes < 2) {
        fprintf(stderr, "iabn data: --classes must be at least 2\n");
        return -1;
    }
    return 0;
}

static int bench(const opts *o, iabn_dataset_kind kind)
{
    iabn_err e = {0};
    iabn_dataset *ds = NULL;
    if (iabn_dataset_open_lenient(kind, o->data, o->split, &ds, &e)) {
        fprintf(stderr, "iabn data bench: %s\n", e.msg);
        return 1;
    }
    int seg = kind != IABN_DATASET_IMAGEFOLDER;
    iabn_loader_cfg cfg;
    iabn_loader_cfg_defaults(&cfg, seg ? IABN_TF_SEGMENT_TRAIN : IABN_TF_CLASSIFY_TRAIN);
    cfg.workers = o->workers;
    cfg.batch_size = o->batch;
    cfg.seed = (uint64_t)o->seed;
    cfg.strict = o->strict;
    if (o->size) cfg.transform.out_h = cfg.transform.out_w = o->size;
    cfg.transform.fast_decode = !o->exact;
    if (o->jitter) {
        cfg.transform.brightness = cfg.transform.contrast = cfg.transform.saturation = 0.4f;
        cfg.transform.lighting_std = 0.1f;
    }
    iabn_databench_result r;
    if (iabn_databench_run(&cfg, ds, o->epochs, &r, &e)) {
        fprintf(stderr, "iabn data bench: %s\n", e.msg);
        iabn_dataset_free(ds);
        return 1;
    }
    double secs = r.seconds, cpu = r.cpu_seconds;
    long long images = (long long)r.images;
    iabn_loader_stats st = r.stats;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double ips = secs > 0 ? images / secs : 0, ipc = cpu > 0 ? images / cpu : 0;
    int size = cfg.transform.out_w;
    if (o->json) {
        printf("{\"command\": \"data bench\", \"data\": \"%s\", \"kind\": \"%s\", \"split\": "
               "\"%s\", \"files\": %zu, \"images\": %lld, \"skipped_files\": %lld, "
               "\"replaced_samples\": %lld, \"workers\": %d, \"cores\": %ld, \"batch\": %d, "
               "\"size\": %d, \"fast_decode\": %s, \"jitter\": %s, \"seconds\": %.4f, "
               "\"cpu_seconds\": %.4f, \"images_per_s\": %.2f, \"images_per_s_per_worker\": "
               "%.2f, \"images_per_cpu_s\": %.2f, \"checksum\": %.6g}\n",
               o->data, iabn_dataset_kind_name(kind), o->split, ds->count, images,
               (long long)st.skipped_files, (long long)st.replaced_samples, o->workers, cores,
               o->batch, size, o->exact ? "false" : "true", o->jitter ? "true" : "false", secs,
               cpu, ips, ips / o->workers, ipc, r.checksum);
    } else {
        printf("data bench: %s (%s, %s): %zu files, %lld images in %.3f s with %d worker%s "
               "(%ld cores), %dx%d output%s\n",
               o->data, iabn_dataset_kind_name(kind), o->split, ds->count, images,
               secs, o->workers, o->workers == 1 ? "" : "s", cores, size, size,
               o->exact ? ", exact decode" : "");
        printf("  images/s             %10.1f\n", ips);
        printf("  images/s per worker  %10.1f\n", ips / o->workers);
        printf("  images per CPU-s     %10.1f   (per core; %.3f CPU-s)\n", ipc, cpu);
        printf("  skipped files        %10lld   (replaced samples %lld)\n",
               (long long)st.skipped_files, (long long)st.replaced_samples);
    }
    iabn_dataset_free(ds);
    return 0;
}

static int synth(const opts *o, iabn_dataset_kind kind)
{
    iabn_err e = {0};
    int rc;
    if (!o->out) {
        fprintf(stderr, "iabn data synth: --output DIR is required\n");
        return 2;
    }
    iabn_synth_opts so = {kind, o->classes, o->n_train, o->n_val, o->size, o->width, o->height,
                          o->v12, (uint64_t)o->seed};
    rc = iabn_data_make_synthetic(o->out, &so, &e);
    if (rc) {
        fprintf(stderr, "iabn data synth: %s\n", e.msg);
        return 1;
    }
    printf("wrote a synthetic %s data set to %s\n", iabn_dataset_kind_name(kind), o->out);
    return 0;
}

static int info(const opts *o, iabn_dataset_kind kind)
{
    iabn_err e = {0};
    iabn_dataset *ds;
    if (iabn_dataset_open_lenient(kind, o->data, o->split, &ds, &e)) {
        fprintf(stderr, "iabn data info: %s\n", e.msg);
        return 1;
    }
    printf("%s data set %s: %zu samples, %d classes\n", iabn_dataset_kind_name(kind), ds->root,
           ds->count, ds->num_classes);
    for (int i = 0; i < ds->num_classes; i++) printf("  %3d  %s\n", i, ds->class_names[i]);
    iabn_dataset_free(ds);
    return 0;
}

int iabn_cmd_data(int argc, char **argv)
{
    iabn_args a;
    int prc = iabn_args_parse(&a, IABN_C_DATA, argc, argv);
    if (prc) return prc == IABN_ARGS_HELP ? 0 : 2;
    opts o;
    if (parse(&a, &o)) return 2;
    iabn_dataset_kind kind = IABN_DATASET_IMAGEFOLDER;
    if (a.v[IABN_O_DATASET].set && iabn_dataset_kind_parse(a.v[IABN_O_DATASET].s, &kind)) {
        fprintf(stderr, "iabn data: unknown --dataset '%s' (imagefolder, cityscapes, vistas)\n",
                a.v[IABN_O_DATASET].s);
        return 2;
    }
    const char *sub = a.pos[0];
    if (!strcmp(sub, "synth")) return synth(&o, kind);
    if (!o.data) {
        fprintf(stderr, "iabn data %s: --data DIR is required\n", sub);
        return 2;
    }
    if (!strcmp(sub, "bench")) return bench(&o, kind);
    if (!strcmp(sub, "info")) return info(&o, kind);
    fprintf(stderr, "iabn data: unknown subcommand '%s' (bench, synth, info)\n", sub);
    return 2;
}
