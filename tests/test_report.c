/* test_report.c: what the commands print, built by the library through its C
 * API (the commands only parse flags and print):
 *  - the memory report (models/train/memreport.h): columns, the table, the
 *    JSON, the largest batch, the SVG, the schedule dump, a bad model named;
 *  - the measured step and block (models/train/bench.h) and the data-loader
 *    bench over a generated set (iabn_data_make_synthetic);
 *  - the parity step on safetensors files (models/train/stepfile.h), a label
 *    out of range named;
 *  - the evaluation graph as JSON and the reference configs / weights per
 *    model (models/train/export.h), a model's parameters and in-place memory;
 *  - the image listing of a folder tree (iabn_list_images), the Cityscapes
 *    labelIds of the train ids and the label palette (iabn predict). */
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "iabn.h"
#include "tensor/cpu/conv_bench.h"
#include "test_util.h"

static char tmpdir[256];

static void test_memreport(void)
{
    iabn_memreport_opts o;
    iabn_memreport_opts_defaults(&o);
    o.model = "resnext_tiny";
    o.batch = 4;
    o.height = o.width = 32;
    o.budget = (size_t)256 << 20;
    o.search_crop = 1;
    o.schedule = tmpfile();
    iabn_memreport_col cols[3] = {{.mode = IABN_BN_STANDARD},
                                  {.mode = IABN_BN_INPLACE_II},
                                  {.mode = IABN_BN_INPLACE_II, .storage = IABN_STORAGE_OFFLOAD}};
    iabn_memreport r;
    iabn_err e = {0};
    CHECK_MSG(iabn_memreport_build(&o, cols, 3, &r, &e) == 0, "%s", e.msg);
    CHECK(r.ncols == 3 && r.o.backend == iabn_backend_cpu());
    /* the same figures as the session's, in-place keeps less, offload moves
     * bytes to the host */
    CHECK(r.col[0].m.params == 1124776 && r.col[1].m.params == 1124776);
    CHECK(r.col[1].m.saved < r.col[0].m.saved && r.col[0].m.arena >= r.col[0].m.lower_bound);
    CHECK(r.col[2].m.host > 0 && r.col[2].n_off > 0 && r.col[0].m.host == 0);
    CHECK(r.col[0].max_batch >= 4 && r.col[1].max_batch >= r.col[0].max_batch);
    CHECK(r.col[0].max_crop >= 32);
    size_t kept = 0;
    for (int k = 0; k < r.col[0].nrows; k++) kept += r.col[0].rows[k].kept;
    CHECK(r.col[0].nrows > 1 && kept > 0 && kept <= r.col[0].m.saved);
    CHECK(r.col[0].nsteps > r.col[0].boundary && r.col[0].boundary > 0 && r.col[0].nmarks > 0);
    char name[40];
    /* the whole mode's name: "inplace_ab+offload" was both in-place modes' */
    CHECK(!strcmp(iabn_memreport_col_name(&r.col[2], name, sizeof name),
                  "inplace_abn_ii+offload"));
    /* the table: its columns line up, the long name's as wide as the name */
    char *t = iabn_memreport_table(&r);
    if (t) {
        const char *h = strchr(t, '\n') + 1, *p = strstr(t, "\nparameters (count)");
        CHECK(p && strchr(h, '\n') - h == strchr(p + 1, '\n') - (p + 1));
    }
    CHECK_MSG(t && strstr(t, "resnext_tiny, batch 4, 32x32") && strstr(t, "1124776") &&
                  strstr(t, "inplace_abn_ii") && strstr(t, "largest batch in 0.2 GiB") &&
                  strstr(t, "module: kept MiB/buffers/copies"),
              "%s", t ? t : "(null)");
    free(t);
    t = iabn_memreport_largest(&r);
    CHECK(t && strstr(t, "largest batch in 0.25 GiB") && strstr(t, "inplace_abn_ii+offload"));
    free(t);
    /* the JSON */
    t = iabn_memreport_json(&r);
    cJSON *j = t ? cJSON_Parse(t) : NULL;
    CHECK(cJSON_IsArray(j) && cJSON_GetArraySize(j) == 3);
    cJSON *c1 = cJSON_GetArrayItem(j, 1);
    CHECK(c1 && cJSON_GetObjectItem(c1, "saved_activation_bytes")->valuedouble ==
                    (double)r.col[1].m.saved);
    CHECK(c1 && cJSON_GetArraySize(cJSON_GetObjectItem(c1, "rows")) == r.col[1].nrows);
    cJSON_Delete(j);
    free(t);
    /* the SVG */
    char svg[400];
    snprintf(svg, sizeof svg, "%s/mem.svg", tmpdir);
    CHECK_MSG(iabn_memreport_svg(&r, svg, &e) == 0, "%s", e.msg);
    FILE *f = fopen(svg, "r");
    char buf[1 << 16] = "";
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = 0;
    if (f) fclose(f);
    CHECK(strstr(buf, "<svg") && strstr(buf, "backward") && strstr(buf, "host pool"));
    /* the schedule went to the given FILE */
    rewind(o.schedule);
    n = fread(buf, 1, sizeof buf - 1, o.schedule);
    buf[n] = 0;
    CHECK(strstr(buf, "schedule of resnext_tiny, standard") != NULL);
    fclose(o.schedule);
    iabn_memreport_free(&r);
    CHECK(r.ncols == 0);
    /* one rank of two: the batch split, the gradient buckets counted */
    o.world = 2;
    o.budget = 0;
    o.schedule = NULL;
    CHECK_MSG(iabn_memreport_build(&o, cols, 1, &r, &e) == 0, "%s", e.msg);
    CHECK(r.o.batch == 2 && r.global_batch == 4 && r.col[0].m.buckets > 0);
    t = iabn_memreport_table(&r);
    CHECK(t && strstr(t, "per rank of 2: global batch 4 split 2 per rank"));
    free(t);
    iabn_memreport_free(&r);
    o.batch = 1;
    CHECK(iabn_memreport_build(&o, cols, 1, &r, &e) == IABN_EINVAL && strstr(e.msg, "split"));
    /* the columns: modes x the storages asked for */
    iabn_bn_mode modes[2] = {IABN_BN_STANDARD, IABN_BN_INPLACE};
    int want[IABN_STORAGE_NMODES] = {0};
    want[IABN_STORAGE_KEEP] = want[IABN_STORAGE_AUTO] = 1;
    iabn_memreport_col cc[8];
    CHECK(iabn_memreport_columns(modes, 2, want, cc, 8) == 4);
    CHECK(cc[1].mode == IABN_BN_STANDARD && cc[1].storage == IABN_STORAGE_AUTO &&
          cc[2].mode == IABN_BN_INPLACE && cc[2].storage == IABN_STORAGE_KEEP);
    CHECK(iabn_memreport_columns(modes, 2, want, cc, 3) == 3);
    /* a model that is not there is named */
    o.model = "resnet9000";
    o.schedule = NULL;
    CHECK(iabn_memreport_build(&o, cols, 1, &r, &e) != 0 && strstr(e.msg, "resnet9000"));
}

static void test_stepbench(void)
{
    iabn_model_cfg mc = iabn_model_defaults("resnext_tiny");
    mc.classes = 10;
    iabn_stepbench_opts o;
    iabn_stepbench_opts_defaults(&o);
    o.model = &mc;
    o.batch = 2;
    o.height = o.width = 32;
    o.repeat = 2;
    o.by_op = 1;
    o.by_layer = 1;
    iabn_stepbench_result *r = malloc(sizeof *r);
    iabn_err e = {0};
    CHECK_MSG(iabn_stepbench_run(&o, r, &e) == 0, "%s", e.msg);
    CHECK(r->step_s > 0 && r->forward_s > 0 && r->update_s > 0 && r->profiled && !r->gpu);
    /* the fastest of the 2 timed steps: the first of the sorted times */
    CHECK_MSG(r->step_min_s > 0 && r->step_min_s <= r->step_s, "fastest %g, median %g",
              r->step_min_s, r->step_s);
    CHECK(r->arena > 0 && r->held > r->arena && !strcmp(r->device, "cpu"));
    CHECK(r->nops > 3 && r->ops[0].seconds >= r->ops[r->nops - 1].seconds);
    /* the layers: every conv / linear shape and pass, FLOPs counted once
     * per node and step (the stem's 3x3 conv: 2 * 2x64x16x16 outputs * 27) */
    CHECK(r->nlayers > 10 && r->layers[0].seconds >= r->layers[r->nlayers - 1].seconds);
    int stem = -1, convs = 0;
    for (int i = 0; i < r->nlayers; i++) {
        if (!strcmp(r->layers[i].name, "conv2d 2x3x32x32 -> 2x64x16x16 w 64x3x3x3")) stem = i;
        convs += r->layers[i].nodes * !strncmp(r->layers[i].name, "conv2d ", 7);
        CHECK_MSG(r->layers[i].nodes > 0 && r->layers[i].flops > 0, "%s", r->layers[i].name);
    }
    CHECK_MSG(stem >= 0 && r->layers[stem].nodes == 1 &&
              r->layers[stem].flops == 2.0 * o.repeat * (2 * 64 * 16 * 16) * 27.0,
              "stem %d: %g FLOPs", stem, stem >= 0 ? r->layers[stem].flops : 0);
    int fconv = 0; /* forward conv nodes in the graph */
    for (int i = 0; i < r->nops; i++) fconv += !strcmp(r->ops[i].name, "conv2d");
    CHECK(fconv == 1 && convs > 5);
    char *t = iabn_stepbench_text(&o, r), *js = iabn_stepbench_json(&o, r, "pcie3");
    CHECK_MSG(t && strstr(t, "resnext_tiny inplace_abn_ii batch 2 32x32 on cpu") && strstr(t, "median of 2"),
              "%s", t ? t : "(null)");
    cJSON *j = js ? cJSON_Parse(js) : NULL;
    /* cJSON prints 15 digits where they read back within an epsilon: not
     * always the same double */
    CHECK(j && fabs(cJSON_GetObjectItem(j, "step_min_ms")->valuedouble - 1e3 * r->step_min_s) <=
                   1e-12 * 1e3 * r->step_min_s);
    CHECK_MSG(t && strstr(t, "(fastest "), "%s", t ? t : "(null)");
    CHECK(j && cJSON_GetObjectItem(j, "held_bytes")->valuedouble == (double)r->held &&
          cJSON_GetObjectItem(j, "ranks")->valueint == 1 && !cJSON_GetObjectItem(j, "copy_bw"));
    CHECK(j && cJSON_GetArraySize(cJSON_GetObjectItem(j, "layers")) == r->nlayers);
    cJSON_Delete(j);
    free(t);
    free(js);
    /* offload runs on the simulated device, whose peak it reports */
    o.storage = IABN_STORAGE_OFFLOAD;
    o.by_op = o.by_layer = 0;
    CHECK_MSG(iabn_stepbench_run(&o, r, &e) == 0, "%s", e.msg);
    CHECK(r->sim && r->sim_device_peak > 0 && r->n_offload > 0 && r->host_bytes > 0);
    /* auto without a budget is refused */
    o.storage = IABN_STORAGE_AUTO;
    CHECK(iabn_stepbench_run(&o, r, &e) == IABN_EINVAL && strstr(e.msg, "budget"));
    free(r);
}

static void test_blockbench(void)
{
    iabn_bn_mode modes[2] = {IABN_BN_STANDARD, IABN_BN_INPLACE_II};
    iabn_blockbench_result r[2];
    iabn_err e = {0};
    CHECK_MSG(iabn_blockbench_run(16, 8, 2, 4, 2, modes, 2, r, &e) == 0, "%s", e.msg);
    CHECK(r[0].ms > 0 && r[1].ms > 0);
    CHECK(r[1].kept < r[0].kept && r[0].buffers > r[1].buffers);
    CHECK(iabn_blockbench_run(16, 8, 2, 5, 2, modes, 2, r, &e) == IABN_EINVAL); /* 16 % 5 */
    CHECK(r[0].ratio == 1.0 || r[0].ms == 0);
    /* Fig. 4's smallest shape (mod5, 1024 x 7 x 7), batch 1, grouped */
    iabn_blockbench_result f[IABN_FIG4_MODES];
    int met = -1;
    CHECK_MSG(iabn_fig4_run(3, 1, 64, 1, f, &met, &e) == 0, "%s", e.msg);
    CHECK(met == 0 || met == 1);
    CHECK(!strcmp(iabn_fig4_shape_name(3), "mod5") && iabn_fig4_mode(4) == IABN_BN_INPLACE_II);
    CHECK(f[0].ratio == 1.0 && f[4].kept < f[0].kept && f[1].ms > 0);
    CHECK(iabn_fig4_run(4, 1, 64, 1, f, &met, &e) == IABN_EINVAL && !iabn_fig4_shape_name(4));
}

static void test_databench(void)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/folder", tmpdir);
    iabn_err e = {0};
    iabn_synth_opts so = {IABN_DATASET_IMAGEFOLDER, 2, 3, 1, 32, 0, 0, 0, 1};
    CHECK_OK(iabn_data_make_synthetic(dir, &so, &e));
    /* the kind's defaults where a field is left 0 / -1: 6 validation images */
    char cs[400];
    snprintf(cs, sizeof cs, "%s/cs", tmpdir);
    iabn_synth_opts co = {IABN_DATASET_CITYSCAPES, 0, 2, -1, 0, 64, 32, 0, 1};
    CHECK_OK(iabn_data_make_synthetic(cs, &co, &e));
    iabn_dataset *val = NULL;
    CHECK_MSG(iabn_dataset_open_cityscapes(cs, "val", &val, &e) == 0, "%s", e.msg);
    CHECK(val && val->count == 6 && val->num_classes == 19);
    iabn_dataset_free(val);
    char train[450];
    snprintf(train, sizeof train, "%s/train", dir);
    iabn_dataset *ds = NULL;
    /* the split's folder under the root, or a folder of class folders itself */
    CHECK_MSG(iabn_dataset_open_lenient(IABN_DATASET_IMAGEFOLDER, dir, "val", &ds, &e) == 0, "%s",
              e.msg);
    CHECK(ds && ds->count == 2);
    iabn_dataset_free(ds);
    ds = NULL;
    CHECK(iabn_dataset_open_lenient(IABN_DATASET_CITYSCAPES, cs, "test", &ds, &e) != 0);
    CHECK_MSG(iabn_dataset_open_lenient(IABN_DATASET_IMAGEFOLDER, train, "train", &ds, &e) == 0,
              "%s", e.msg);
    if (!ds) return;
    iabn_loader_cfg c;
    iabn_loader_cfg_defaults(&c, IABN_TF_CLASSIFY_TRAIN);
    c.batch_size = 4; /* 6 images: the last batch is short and still counts */
    c.drop_last = 1;
    c.transform.out_h = c.transform.out_w = 16;
    iabn_databench_result r;
    CHECK_MSG(iabn_databench_run(&c, ds, 2, &r, &e) == 0, "%s", e.msg);
    CHECK(r.images == 2 * (int64_t)ds->count && ds->count == 6);
    CHECK(r.seconds > 0 && r.stats.skipped_files == 0);
    iabn_dataset_free(ds);
}

/* input.safetensors with `input` (2,3,32,32) and `target` (labels) */
static void write_input(const char *path, int64_t l0, int64_t l1)
{
    float *x = malloc(2 * 3 * 32 * 32 * sizeof *x);
    for (int i = 0; i < 2 * 3 * 32 * 32; i++) x[i] = iabn_rng_normal(5, 0, (uint64_t)i);
    int64_t xs[4] = {2, 3, 32, 32}, ts[1] = {2}, t[2] = {l0, l1};
    iabn_err e = {0};
    iabn_st_writer *w = iabn_st_writer_new();
    CHECK_OK(iabn_st_writer_add(w, "input", IABN_F32, 4, xs, x, &e));
    CHECK_OK(iabn_st_writer_add(w, "target", IABN_I64, 1, ts, t, &e));
    CHECK_OK(iabn_st_writer_save(w, path, &e));
    iabn_st_writer_free(w);
    free(x);
}

static void test_stepfile(void)
{
    char in[400], out[400];
    snprintf(in, sizeof in, "%s/in.safetensors", tmpdir);
    snprintf(out, sizeof out, "%s/out.safetensors", tmpdir);
    write_input(in, 1, 7);
    iabn_model_cfg mc = iabn_model_defaults("resnext_tiny");
    mc.classes = 8;
    iabn_stepfile_opts o = {.model = &mc, .input = in, .output = out, .init_seed = 1, .train = 1};
    iabn_err e = {0};
    CHECK_MSG(iabn_stepfile_run(&o, &e) == 0, "%s", e.msg);
    iabn_st_file *f = NULL;
    CHECK_MSG(iabn_st_load(out, &f, &e) == 0, "%s", e.msg);
    const iabn_st_tensor *lt = f ? iabn_st_find(f, "logits") : NULL;
    CHECK(lt && lt->ndim == 2 && lt->shape[0] == 2 && lt->shape[1] == 8);
    CHECK(f && iabn_st_find(f, "loss") && iabn_st_find(f, "grad.classifier.fc.weight"));
    float loss = 0;
    if (f && iabn_st_find(f, "loss")) CHECK_OK(iabn_st_read_f32(iabn_st_find(f, "loss"), &loss, 1, &e));
    CHECK(loss > 0 && loss < 20);
    iabn_st_free(f);
    /* a label outside the classes is the caller's mistake, named */
    write_input(in, 1, 8);
    CHECK(iabn_stepfile_run(&o, &e) != 0 && strstr(e.msg, "target[1] = 8"));
    /* evaluation needs no target and writes no gradients */
    o.train = 0;
    write_input(in, 0, 0);
    CHECK_MSG(iabn_stepfile_run(&o, &e) == 0, "%s", e.msg);
    CHECK_MSG(iabn_st_load(out, &f, &e) == 0, "%s", e.msg);
    CHECK(f && iabn_st_find(f, "logits") && !iabn_st_find(f, "grad.classifier.fc.weight"));
    iabn_st_free(f);
}

static void test_export_graph(void)
{
    iabn_model_cfg mc = iabn_model_defaults("resnext_tiny");
    mc.classes = 5;
    iabn_err e = {0};
    char *js = iabn_export_graph_json(&mc, 32, 48, &e);
    CHECK_MSG(js != NULL, "%s", e.msg);
    cJSON *j = js ? cJSON_Parse(js) : NULL;
    CHECK(j != NULL);
    cJSON *in = cJSON_GetObjectItem(j, "input"), *nodes = cJSON_GetObjectItem(j, "nodes");
    cJSON *shape = in ? cJSON_GetObjectItem(in, "shape") : NULL;
    CHECK(shape && cJSON_GetArraySize(shape) == 4 &&
          cJSON_GetArrayItem(shape, 3)->valueint == 48);
    CHECK(cJSON_GetArraySize(nodes) > 10);
    cJSON *out = cJSON_GetObjectItem(j, "output");
    cJSON *tensors = cJSON_GetObjectItem(j, "tensors");
    cJSON *ot = out && tensors ? cJSON_GetObjectItem(tensors, out->valuestring) : NULL;
    CHECK(ot && cJSON_GetArrayItem(cJSON_GetObjectItem(ot, "shape"), 1)->valueint == 5);
    cJSON_Delete(j);
    free(js);
}

static void touch(const char *dir, const char *name)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) fclose(f);
}

static void test_list_images(void)
{
    char root[400], sub[450];
    snprintf(root, sizeof root, "%s/imgs", tmpdir);
    snprintf(sub, sizeof sub, "%s/city", root);
    mkdir(root, 0777);
    mkdir(sub, 0777);
    touch(root, "b.JPG");
    touch(root, "notes.txt");
    touch(sub, "a.png");
    char **v = NULL;
    size_t n = 0;
    iabn_err e = {0};
    CHECK_MSG(iabn_list_images(root, &v, &n, &e) == 0, "%s", e.msg);
    CHECK(n == 2 && !strcmp(v[0], "b.JPG") && !strcmp(v[1], "city/a.png"));
    iabn_strings_free(v, n);
    snprintf(sub, sizeof sub, "%s/none", tmpdir);
    CHECK(iabn_list_images(sub, &v, &n, &e) != 0 && strstr(e.msg, "none"));
}

static void test_labels(void)
{
    static const int want[19] = {7, 8, 11, 12, 13, 17, 19, 20, 21, 22,
                                 23, 24, 25, 26, 27, 28, 31, 32, 33};
    for (int t = 0; t < 19; t++) CHECK(iabn_cityscapes_label_id(t) == want[t]);
    CHECK(iabn_cityscapes_label_id(19) == -1 && iabn_cityscapes_label_id(255) == -1);
    uint8_t p[256 * 3], q[256 * 3];
    iabn_label_palette(19, p);
    iabn_label_palette(6, q);
    CHECK(p[0] == 128 && p[1] == 64 && p[2] == 128 && p[3 * 18] == 119); /* road, bicycle */
    CHECK(memcmp(p, q, 3) != 0 && !memcmp(p + 3 * 19, q + 3 * 19, 3 * (256 - 19)));
    int distinct = 1;
    for (int c = 1; c < 6; c++) distinct &= memcmp(q + 3 * c, q, 3) != 0;
    CHECK(distinct);
}

/* iabn models: the parameter count, in-place planning less, the references */
static void test_model_summary(void)
{
    size_t params = 0, std_b = 0, ip_b = 0;
    iabn_err e = {0};
    CHECK_MSG(iabn_model_memory("resnext_tiny", 2, &params, &std_b, &ip_b, &e) == 0, "%s", e.msg);
    CHECK(params == 1124776 && ip_b > 0 && ip_b < std_b);
    std_b = 7;
    CHECK_MSG(iabn_model_memory("resnet18", 0, &params, &std_b, &ip_b, &e) == 0, "%s", e.msg);
    CHECK(params == 11689512 && std_b == 7); /* torchvision's count; no plan asked for */
    CHECK(iabn_model_memory("resnet9000", 0, &params, &std_b, &ip_b, &e) != 0);
    const char *w = iabn_model_reference_weights("resnet50"), *c = iabn_model_reference_configs("resnext101");
    CHECK(w && strstr(w, "torchvision") && c && strstr(c, "resnext101_ipabn_lr_512"));
    CHECK(!iabn_model_reference_weights("resnext_tiny") && !iabn_model_reference_configs("x"));
}

/* the convolution throughput bench (tensor/cpu/conv_bench.h): one case, its
 * three passes measured on the path the library chooses; an unknown case
 * names the valid ones; the cases without a target */
static void test_conv_bench(void)
{
    iabn_convbench_row rows[8];
    int n = -1;
    iabn_err e = {0};
    CHECK_OK(iabn_convbench_run("conv1x1", 1, 235.0, 1, 0, rows, 8, &n, &e));
    CHECK(n == 3);
    for (int i = 0; i < n && i < 3; i++) {
        CHECK(!strcmp(rows[i].case_name, "conv1x1") && rows[i].gflops > 0 && rows[i].target > 0);
        CHECK(rows[i].peak == 235.0 && rows[i].peak_fraction == rows[i].gflops / 235.0);
        /* the weight pass: cpu/conv_wgrad.c on nChw8c where the build is AVX2,
         * on nChw16c where the CPU has AVX-512 (the case's data pass, 1568
         * pixels a call, stays on oneDNN: cpu/conv_dgrad.c takes up to 784) */
        CHECK(!strcmp(rows[i].path, rows[i].native_path) ||
              (rows[i].onednn && !strcmp(rows[i].path, "onednn")) ||
              (i == 2 && rows[i].blocked && !strcmp(rows[i].path, "wgrad")));
    }
    CHECK(!strcmp(rows[0].pass, "fwd") && !strcmp(rows[2].pass, "bwd-weights"));
    /* the residual add fused into the forward (conv2d_add) where the graph
     * would fuse it: the oneDNN path */
    CHECK(rows[0].residual == iabn_conv_have_dnnl() && !rows[1].residual && !rows[2].residual);
    if (rows[0].residual) CHECK(rows[0].residual_ms[0] > 0 && rows[0].residual_ms[1] > 0);
    /* peak 0: the FMA loop timed beside each pass, each row against its own */
    CHECK_OK(iabn_convbench_run("conv1x1", 1, 0, 1, 0, rows, 8, &n, &e));
    for (int i = 0; i < n && i < 3; i++)
        CHECK(rows[i].peak > 0 && rows[i].peak_fraction == rows[i].gflops / rows[i].peak);
    /* every valid name listed, the last one too (the list was cut at 128
     * characters once the cases outgrew it) */
    CHECK(iabn_convbench_run("nope", 1, 235.0, 1, 0, rows, 8, &n, &e) == IABN_EINVAL &&
          strstr(e.msg, "dense3x3") && strstr(e.msg, "dilated3x3") &&
          strstr(e.msg, "dense3x3_7") && strstr(e.msg, "stem3x3"));
    CHECK(iabn_convbench_run(NULL, 1, 235.0, 1, 0, rows, 2, &n, &e) == IABN_EINVAL);
    const char *const *names = iabn_convbench_cases();
    CHECK(names[0] && names[14] && !names[15]); /* fifteen cases */
    /* the stem: its forward and weight pass where the graph runs them (y
     * blocked: oneDNN's flat kernels), labelled by the run the row's
     * GFLOP/s come from (it said the native path's name before) */
    CHECK_OK(iabn_convbench_run("stem3x3", 1, 235.0, 1, 0, rows, 8, &n, &e));
    CHECK(n == 3);
    for (int i = 0; i < n && i < 3; i += 2)
        CHECK_MSG(rows[i].blocked ? !strcmp(rows[i].path, "onednn") && rows[i].onednn
                                  : !strcmp(rows[i].path, rows[i].native_path),
                  "stem pass %d: path %s, blocked %d", i, rows[i].path, rows[i].blocked);
    /* a 7x7 map: no target, and --winograd's rule leaves it direct */
    CHECK_OK(iabn_convbench_run("dense3x3_7", 1, 235.0, 1, 0, rows, 8, &n, &e));
    for (int i = 0; i < n && i < 3; i++) CHECK(rows[i].target == 0 && rows[i].ok && !rows[i].wino);
    /* cold (--cold): the same runs on the same paths, each call after the
     * caches' sweep */
    iabn_convbench_row cold[8];
    int nc = -1;
    CHECK_OK(iabn_convbench_run("dense3x3_7", 2, 235.0, 1, 1, cold, 8, &nc, &e));
    CHECK(nc == n);
    for (int i = 0; i < n && i < nc && i < 3; i++)
        CHECK(!strcmp(cold[i].path, rows[i].path) && cold[i].gflops > 0 &&
              cold[i].blocked == rows[i].blocked && cold[i].onednn == rows[i].onednn);
    CHECK(iabn_cpu_peak_gflops(1) > 0);
    /* the BLAS kernels the native columns ran on: OPENBLAS_CORETYPE's when it
     * names one of the two docs/CPU.md measured (OpenBLAS ignores names it
     * does not know) */
    const char *core = iabn_blas_core(), *want = getenv("OPENBLAS_CORETYPE");
    CHECK(core && *core && strcmp(core, "unknown"));
    if (want && (!strcasecmp(want, "Haswell") || !strcasecmp(want, "SkylakeX")))
        CHECK_MSG(!strcasecmp(core, want), "OpenBLAS runs %s, %s asked", core, want);
}

static void test_allreduce_bench(void)
{
    iabn_comm *c = NULL;
    iabn_err e = {0};
    CHECK_MSG(iabn_comm_new(NULL, &c, &e) == 0, "%s", e.msg);
    if (!c) return;
    float buf[1024];
    for (int i = 0; i < 1024; i++) buf[i] = 1.f;
    double med = -1;
    CHECK_MSG(iabn_allreduce_bench_run(c, buf, sizeof buf, 3, &med, &e) == 0, "%s", e.msg);
    CHECK(med >= 0 && med < 1);
    CHECK(iabn_comm_size(c) > 1 || buf[0] == 1.f); /* one process: a sum is its own value */
    iabn_comm_free(c);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/iabn_test_report_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    iabn_set_num_threads(2);
    RUN(test_memreport);
    RUN(test_stepbench);
    RUN(test_blockbench);
    RUN(test_databench);
    RUN(test_stepfile);
    RUN(test_export_graph);
    RUN(test_list_images);
    RUN(test_labels);
    RUN(test_model_summary);
    RUN(test_allreduce_bench);
    RUN(test_conv_bench);
    return TEST_END();
}
