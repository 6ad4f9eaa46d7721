/* test_models.c: the model zoo (src/models).
 *  - every experiment config in configs/ builds its network;
 *  - the registry: names, descriptions, unknown names;
 *  - every model built in evaluation mode on a shapes-only store (nothing is
 *    allocated): parameter counts against docs/MODELS.md (and torchvision for
 *    the models it has), output shapes, feature-map shapes, parameter names
 *    unique and following the reference's module tree;
 *  - report rows;
 *  - weights: save / load round trip, and strict loading's error lists;
 *  - one small training step of resnext50 at 32x32 in every BN mode (losses
 *    and gradients agree across modes; executor arena == planned arena), and
 *    of wider_resnet38_a2 at 16x16 (dropout included). */
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "graph_test_util.h"

/* Expected parameter counts (BN gamma + beta included, running statistics
 * excluded), 1000 classes (65 for the segmentation nets), input_3x3.
 * docs/MODELS.md: resnet50, resnext*, wider_resnet38*, deeplabv3_wider_resnet38_a2.
 * torchvision: resnet18/34/101/152, resnext50_32x4d, resnext101_32x8d,
 * wide_resnet50_2, wide_resnet101_2, vgg19, vgg19_bn.  Derived here (body of
 * docs/MODELS.md's ResNeXt without its fc, + DeepLab head on 2048 channels
 * 7424 * 2048 + 330752, + cls 256 * 65 + 65): deeplabv3_resnext101 / 152.
 * DenseNets (the reference's, input_3x3): torchvision's count with the
 * three-conv stem instead of conv0/norm0 (121: 7978856 - 9536 + 75712; the
 * others checked against PyTorch twins in tests/fixtures/convert_check.py).
 * mobilenet_v1: the paper's 4.2M (Keras: 4,231,976 trainable).  resnext_tiny and
 * deeplabv3_resnext_tiny (the demo's and the end-to-end tests' networks) have
 * no published count: the values pin them so that a change is noticed. */
static const struct { const char *name; size_t params; } expected[] = {
    {"resnet18", 11689512},          {"resnet34", 21797672},
    {"resnet50", 25557032},          {"resnet101", 44549160},
    {"resnet152", 60192808},
    {"resnext50_32x4d", 25028904},   {"resnext101_32x8d", 88791336},
    {"wide_resnet50_2", 68883240},   {"wide_resnet101_2", 126886696},
    {"resnext50", 24380200},
    {"resnext101", 42902312},        {"resnext152", 58159912},
    {"resnext_tiny", 1124776},       {"resnext101_64x4d", 83513896},  {"resnext152_64x4d", 115030568},
    {"wider_resnet38", 109167912},   {"wider_resnet38_a2", 109167912},
    {"deeplabv3_wider_resnet38_a2", 135827073},
    {"deeplabv3_resnext101", 56405121}, {"deeplabv3_resnext152", 71662721},
    {"deeplabv3_resnext_tiny", 1587521},
    {"densenet121", 8045032},        {"densenet161", 28835560},
    {"densenet169", 14215656},       {"densenet201", 20080104},
    {"densenet264", 33403880},
    {"vgg19", 143667240},            {"vgg19_bn", 143678248},
    {"mobilenet_v1", 4231976},
};
enum { NEXP = sizeof expected / sizeof expected[0] };

static void test_registry(void)
{
    int n = 0;
    const char *const *names = iabn_model_names(&n);
    CHECK(n == NEXP);
    for (int i = 0; i < n; i++) {
        CHECK_MSG(iabn_model_exists(names[i]), "%s", names[i]);
        CHECK(iabn_model_describe(names[i]) != NULL);
        CHECK(!strcmp(names[i], expected[i].name));
        CHECK(iabn_model_is_segmentation(names[i]) == (strncmp(names[i], "deeplabv3_", 10) == 0));
    }
    CHECK(!iabn_model_exists("resnext51"));
    CHECK(iabn_model_describe("nope") == NULL);
    iabn_store *s = iabn_store_new(iabn_backend_cpu(), NULL);
    iabn_graph *g = iabn_graph_new(s, IABN_EVAL);
    int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){1, 3, 32, 32});
    iabn_model_cfg cfg = iabn_model_defaults("resnext51");
    int logits = 0;
    CHECK(iabn_model_build(g, &cfg, x, &logits) == IABN_EINVAL);
    CHECK(logits == -1);
    CHECK(strstr(iabn_graph_error(g)->msg, "unknown model 'resnext51'") != NULL);
    CHECK(strstr(iabn_graph_error(g)->msg, "resnext101_64x4d") != NULL);
    iabn_graph_free(g);
    /* relu cannot be inverted: the in-place modes refuse it, naming the unit */
    g = iabn_graph_new(s, IABN_TRAIN);
    x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){2, 3, 32, 32});
    cfg = iabn_model_defaults("mobilenet_v1");
    cfg.bn = IABN_BN_INPLACE;
    CHECK(iabn_model_build(g, &cfg, x, &logits) == IABN_EINVAL);
    CHECK(strstr(iabn_graph_error(g)->msg, "stem.bn") != NULL);
    iabn_graph_free(g);
    iabn_store_free(s);
    cfg = iabn_model_defaults("resnext101");
    CHECK(cfg.bn == IABN_BN_INPLACE_II && cfg.act.kind == IABN_ACT_LEAKY_RELU);
    CHECK(cfg.classes == 1000 && cfg.input_3x3 == 1);
    CHECK(iabn_model_defaults("deeplabv3_resnext101").classes == 65);
}

/* Module-path components the reference's state_dict names are made of. */
static int known_component(const char *c, size_t n)
{
    static const char *const words[] = {
        "mod1", "conv1", "conv2", "conv3", "bn1", "bn2", "bn3", "pool", "convs", "proj_conv",
        "proj_bn", "bn_out", "classifier", "fc", "body", "head", "cls", "map_convs", "map_bn",
        "red_conv", "global_pooling_conv", "global_pooling_bn", "pool_red_conv", "red_bn",
        "features", "stem", "conv", "bn", "dw_conv", "dw_bn", "pw_conv", "pw_bn",
        "convs1", "convs3",
    };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strlen(words[i]) == n && !strncmp(c, words[i], n)) return 1;
    size_t d = 0;
    const char *digits = c;
    if (n > 3 && !strncmp(c, "mod", 3)) digits = c + 3, n -= 3;
    else if (n > 5 && !strncmp(c, "block", 5)) digits = c + 5, n -= 5;
    else if (n > 3 && !strncmp(c, "tra", 3)) digits = c + 3, n -= 3;
    for (d = 0; d < n; d++)
        if (digits[d] < '0' || digits[d] > '9') return 0;
    return n > 0;
}

static int name_ok(const char *name)
{
    static const char *const leaves[] = {"weight", "bias", "running_mean", "running_var"};
    const char *last = strrchr(name, '.');
    if (!last) return 0;
    int leaf = 0;
    for (int i = 0; i < 4; i++) leaf |= !strcmp(last + 1, leaves[i]);
    if (!leaf) return 0;
    for (const char *p = name; p < last;) {
        const char *q = strchr(p, '.');
        if (!known_component(p, (size_t)(q - p))) return 0;
        p = q + 1;
    }
    return 1;
}

static int shape_is(iabn_store *s, const char *name, int nd, const int *shape)
{
    int id = iabn_store_find(s, name);
    if (id < 0) return 0;
    const iabn_param *p = iabn_store_get(s, id);
    return p->nd == nd && !memcmp(p->shape, shape, (size_t)nd * sizeof(int));
}

static size_t count_prefix(iabn_store *s, const char *prefix)
{
    size_t n = 0;
    for (int i = 0; i < iabn_store_count(s); i++) {
        const iabn_param *p = iabn_store_get(s, i);
        if (p->kind != IABN_P_BUFFER && !strncmp(p->name, prefix, strlen(prefix))) n += p->count;
    }
    return n;
}

static const int *tshape(iabn_graph *g, const char *name)
{
    static const int none[4] = {-1, -1, -1, -1};
    int t = iabn_graph_find(g, name);
    return t >= 0 ? iabn_graph_t(g, t)->shape : none;
}

#define SHAPE4(g, name, a, b, c, d)                                                        \
    CHECK_MSG(tshape(g, name)[0] == (a) && tshape(g, name)[1] == (b) &&                   \
                  tshape(g, name)[2] == (c) && tshape(g, name)[3] == (d),                 \
              "%s: %d,%d,%d,%d", name, tshape(g, name)[0], tshape(g, name)[1],             \
              tshape(g, name)[2], tshape(g, name)[3])

/* Model-specific facts: stage shapes at 64x64 (224 for VGG) and key names. */
static void check_specifics(const char *arch, iabn_graph *g, iabn_store *s)
{
    if (!strcmp(arch, "resnext50")) {
        CHECK(shape_is(s, "mod1.conv1.weight", 4, (int[]){64, 3, 3, 3}));
        CHECK(shape_is(s, "mod1.conv3.weight", 4, (int[]){64, 64, 3, 3}));
        CHECK(iabn_store_find(s, "mod1.bn3.weight") < 0);
        CHECK(shape_is(s, "mod2.block1.bn1.weight", 1, (int[]){64}));
        CHECK(shape_is(s, "mod2.block1.convs.conv1.weight", 4, (int[]){128, 64, 1, 1}));
        CHECK(shape_is(s, "mod2.block1.convs.conv2.weight", 4, (int[]){128, 2, 3, 3}));
        CHECK(shape_is(s, "mod2.block1.proj_conv.weight", 4, (int[]){256, 64, 1, 1}));
        CHECK(iabn_store_find(s, "mod2.block2.proj_conv.weight") < 0);
        CHECK(shape_is(s, "mod5.block3.convs.conv3.weight", 4, (int[]){2048, 1024, 1, 1}));
        CHECK(shape_is(s, "bn_out.running_var", 1, (int[]){2048}));
        CHECK(shape_is(s, "classifier.fc.weight", 2, (int[]){1000, 2048}));
        CHECK(shape_is(s, "classifier.fc.bias", 1, (int[]){1000}));
        SHAPE4(g, "mod1.pool", 1, 64, 16, 16);
        SHAPE4(g, "mod2.block3", 1, 256, 16, 16);
        SHAPE4(g, "mod5.block3", 1, 2048, 2, 2);
    } else if (!strcmp(arch, "resnext101_64x4d")) {
        CHECK(shape_is(s, "mod2.block1.convs.conv2.weight", 4, (int[]){256, 4, 3, 3}));
    } else if (!strcmp(arch, "resnet50")) {
        CHECK(shape_is(s, "mod1.bn1.weight", 1, (int[]){64}));
        CHECK(shape_is(s, "mod2.block1.proj_bn.weight", 1, (int[]){256}));
        CHECK(shape_is(s, "mod3.block1.convs.bn3.running_mean", 1, (int[]){512}));
        CHECK(iabn_store_find(s, "bn_out.weight") < 0);
        SHAPE4(g, "mod5.block3", 1, 2048, 2, 2);
    } else if (!strcmp(arch, "wider_resnet38")) {
        SHAPE4(g, "mod1.conv1", 1, 64, 64, 64);
        SHAPE4(g, "pool6", 1, 1024, 2, 2);
        SHAPE4(g, "mod7.block1", 1, 4096, 2, 2);
    } else if (!strcmp(arch, "wider_resnet38_a2")) {
        CHECK(shape_is(s, "mod2.block1.convs.conv1.weight", 4, (int[]){128, 64, 3, 3}));
        CHECK(shape_is(s, "mod7.block1.convs.conv3.weight", 4, (int[]){4096, 2048, 1, 1}));
        CHECK(shape_is(s, "classifier.fc.weight", 2, (int[]){1000, 4096}));
        CHECK(iabn_graph_find(g, "pool4") < 0);
        SHAPE4(g, "mod3.block3", 1, 256, 16, 16);
        SHAPE4(g, "mod4.block1", 1, 512, 8, 8);
        SHAPE4(g, "mod7.block1", 1, 4096, 2, 2);
    } else if (!strcmp(arch, "deeplabv3_wider_resnet38_a2")) {
        CHECK(count_prefix(s, "body.") == 105070912);
        CHECK(count_prefix(s, "head.") == 30739456);
        CHECK(shape_is(s, "head.map_convs.0.weight", 4, (int[]){256, 4096, 1, 1}));
        CHECK(shape_is(s, "head.map_convs.3.weight", 4, (int[]){256, 4096, 3, 3}));
        CHECK(shape_is(s, "head.map_bn.weight", 1, (int[]){1024}));
        CHECK(shape_is(s, "head.red_bn.running_var", 1, (int[]){256}));
        CHECK(shape_is(s, "cls.weight", 4, (int[]){65, 256, 1, 1}));
        CHECK(shape_is(s, "cls.bias", 1, (int[]){65}));
        SHAPE4(g, "body.mod4.block1", 1, 512, 8, 8);  /* output stride 8 */
        SHAPE4(g, "body.bn_out", 1, 4096, 8, 8);
        SHAPE4(g, "head.red_bn", 1, 256, 8, 8);
    } else if (!strcmp(arch, "deeplabv3_resnext101")) {
        SHAPE4(g, "body.mod3.block4", 1, 512, 8, 8);
        SHAPE4(g, "body.bn_out", 1, 2048, 8, 8);
        CHECK(shape_is(s, "head.map_convs.1.weight", 4, (int[]){256, 2048, 3, 3}));
    } else if (!strcmp(arch, "vgg19")) {
        CHECK(shape_is(s, "features.0.weight", 4, (int[]){64, 3, 3, 3}));
        CHECK(shape_is(s, "features.34.weight", 4, (int[]){512, 512, 3, 3}));
        CHECK(shape_is(s, "classifier.0.weight", 2, (int[]){4096, 25088}));
        CHECK(shape_is(s, "classifier.6.bias", 1, (int[]){1000}));
    } else if (!strcmp(arch, "vgg19_bn")) {
        CHECK(shape_is(s, "features.1.running_var", 1, (int[]){64}));
        CHECK(shape_is(s, "features.49.weight", 4, (int[]){512, 512, 3, 3}));
        CHECK(shape_is(s, "features.50.weight", 1, (int[]){512}));
    } else if (!strcmp(arch, "densenet264")) {
        /* 64 channels after the stem; 6, 12, 64, 48 layers of growth 32 */
        CHECK(shape_is(s, "mod2.convs1.0.conv.weight", 4, (int[]){128, 64, 1, 1}));
        CHECK(shape_is(s, "mod2.convs3.5.conv.weight", 4, (int[]){32, 128, 3, 3}));
        CHECK(shape_is(s, "tra3.conv.weight", 4, (int[]){128, 256, 1, 1}));
        CHECK(shape_is(s, "mod4.convs1.63.bn.weight", 1, (int[]){256 + 63 * 32}));
        CHECK(shape_is(s, "tra5.conv.weight", 4, (int[]){1152, 2304, 1, 1}));
        CHECK(shape_is(s, "bn_out.weight", 1, (int[]){1152 + 48 * 32}));
        CHECK(shape_is(s, "classifier.fc.weight", 2, (int[]){1000, 2688}));
    } else if (!strcmp(arch, "mobilenet_v1")) {
        CHECK(shape_is(s, "block1.dw_conv.weight", 4, (int[]){32, 1, 3, 3}));
        CHECK(shape_is(s, "block13.pw_conv.weight", 4, (int[]){1024, 1024, 1, 1}));
        SHAPE4(g, "block13.pw_bn", 1, 1024, 2, 2);
    }
}

static void test_counts_shapes_names(void)
{
    for (int i = 0; i < NEXP; i++) {
        const char *arch = expected[i].name;
        int seg = iabn_model_is_segmentation(arch);
        int hw = !strncmp(arch, "vgg19", 5) ? 224 : 64;
        /* names and shapes only: nothing is allocated for 100M+ parameters */
        iabn_store *s = iabn_store_new_virtual(iabn_backend_cpu(), NULL);
        iabn_graph *g = iabn_graph_new(s, IABN_EVAL);
        int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){1, 3, hw, hw});
        iabn_model_cfg cfg = iabn_model_defaults(arch);
        int logits = -1;
        int rc = iabn_model_build(g, &cfg, x, &logits);
        CHECK_MSG(rc == 0, "%s: %s", arch, iabn_graph_error(g)->msg);
        if (rc) {
            iabn_graph_free(g);
            iabn_store_free(s);
            continue;
        }
        size_t params, pbytes, gbytes, obytes, bbytes;
        iabn_store_totals(s, &params, &pbytes, &gbytes, &obytes, &bbytes);
        CHECK_MSG(params == expected[i].params, "%s: %zu parameters, expected %zu", arch, params,
                  expected[i].params);
        const iabn_tensor *l = iabn_graph_t(g, logits);
        if (seg)
            CHECK_MSG(l->nd == 4 && l->shape[0] == 1 && l->shape[1] == cfg.classes &&
                          l->shape[2] == hw && l->shape[3] == hw,
                      "%s: logits %d-D", arch, l->nd);
        else
            CHECK_MSG(l->nd == 2 && l->shape[0] == 1 && l->shape[1] == cfg.classes,
                      "%s: logits %d-D %d,%d", arch, l->nd, l->shape[0], l->shape[1]);
        /* each store entry belongs to exactly one layer: a name reused by two
         * layers would silently share one tensor */
        int np = iabn_store_count(s), *uses = calloc((size_t)np, sizeof *uses), bad = 0;
        for (int t = 0; t < iabn_graph_ntensors(g); t++) {
            const iabn_tensor *tt = iabn_graph_t(g, t);
            if ((tt->kind == IABN_T_PARAM || tt->kind == IABN_T_STATE) && tt->view_of < 0 &&
                tt->store_id >= 0 && tt->store_id < np)
                uses[tt->store_id]++;
        }
        for (int k = 0; k < np; k++) {
            const char *pn = iabn_store_get(s, k)->name;
            if (uses[k] != 1 && bad++ < 3)
                fprintf(stderr, "%s: %s used by %d layers\n", arch, pn, uses[k]);
            if (!name_ok(pn) && bad++ < 3) fprintf(stderr, "%s: odd name %s\n", arch, pn);
            if (seg && strncmp(pn, "body.", 5) && strncmp(pn, "head.", 5) &&
                strncmp(pn, "cls.", 4) && bad++ < 3)
                fprintf(stderr, "%s: %s outside body / head / cls\n", arch, pn);
        }
        CHECK_MSG(bad == 0, "%s: %d naming problems", arch, bad);
        free(uses);
        check_specifics(arch, g, s);
        iabn_graph_free(g);
        iabn_store_free(s);
    }
}

static void test_blocks(void)
{
    iabn_store *s = iabn_store_new_virtual(iabn_backend_cpu(), NULL);
    iabn_graph *g = iabn_graph_new(s, IABN_EVAL);
    int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){1, 3, 64, 64});
    iabn_model_cfg cfg = iabn_model_defaults("deeplabv3_wider_resnet38_a2");
    int logits;
    CHECK_OK(iabn_model_build(g, &cfg, x, &logits));
    iabn_model_block rows[64];
    int n = iabn_model_blocks(g, rows, 64);
    /* mod1, pool2, 3 blocks, pool3, 3 + 6 + 3 + 1 + 1 blocks, bn_out, head, cls: 23 */
    CHECK_MSG(n == 23, "%d blocks", n);
    if (n == 23) {
        CHECK(!strcmp(rows[0].name, "body.mod1") && !strcmp(rows[0].module, "body.mod1"));
        CHECK(!strcmp(rows[2].name, "body.mod2.block1") && !strcmp(rows[2].module, "body.mod2"));
        CHECK(!strcmp(rows[20].name, "body.bn_out"));
        CHECK(!strcmp(rows[21].name, "head") && !strcmp(rows[22].name, "cls"));
    }
    /* every tensor of a layer belongs to that layer's block */
    int t = iabn_graph_find(g, "body.mod4.block2.convs.conv1");
    CHECK(t >= 0 && !strcmp(iabn_graph_block_name(g, iabn_graph_t(g, t)->block), "body.mod4.block2"));
    CHECK(iabn_model_blocks(g, rows, 2) == n);
    iabn_graph_free(g);
    iabn_store_free(s);
}

static iabn_store *built_store(const char *arch, iabn_graph **gp)
{
    iabn_store *s = iabn_store_new(iabn_backend_cpu(), NULL);
    iabn_graph *g = iabn_graph_new(s, IABN_EVAL);
    int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){1, 3, 32, 32});
    iabn_model_cfg cfg = iabn_model_defaults(arch);
    cfg.classes = 10;
    int logits;
    CHECK_OK(iabn_model_build(g, &cfg, x, &logits));
    if (gp) *gp = g;
    else iabn_graph_free(g);
    return s;
}

/* iabn_model_init draws each value from its index (counter-based RNG), so
 * the threads that draw them change no bit */
static void test_init_threads(void)
{
    iabn_err e = {0};
    iabn_model_cfg cfg = iabn_model_defaults("resnet18");
    iabn_store *a = built_store("resnet18", NULL), *b = built_store("resnet18", NULL);
    iabn_set_num_threads(1);
    CHECK_OK(iabn_model_init(a, &cfg, 5, &e));
    iabn_set_num_threads(3);
    CHECK_OK(iabn_model_init(b, &cfg, 5, &e));
    iabn_set_num_threads(2);
    int same = iabn_store_count(a) == iabn_store_count(b), big = 0;
    for (int i = 0; same && i < iabn_store_count(a); i++) {
        const iabn_param *p = iabn_store_get(a, i), *q = iabn_store_get(b, i);
        same = p->count == q->count && !memcmp(p->data, q->data, p->count * sizeof(float));
        big += p->count >= 65536; /* drawn by the threads */
    }
    CHECK(same && big > 0);
    iabn_store_free(a);
    iabn_store_free(b);
}

static void test_weights_roundtrip(void)
{
    char path[64];
    snprintf(path, sizeof path, "test_models_%d.safetensors", (int)getpid());
    iabn_err e = {0};
    iabn_store *a = built_store("resnet18", NULL);
    iabn_model_cfg cfg = iabn_model_defaults("resnet18");
    CHECK_OK(iabn_model_init(a, &cfg, 5, &e));
    t_set_params_random(a, 11);
    const char *meta[] = {"arch", "resnet18", "epoch", "3", NULL};
    CHECK_MSG(iabn_weights_save(a, path, meta, &e) == 0, "%s", e.msg);
    iabn_store *b = built_store("resnet18", NULL);
    CHECK_MSG(iabn_weights_load(b, path, 1, &e) == 0, "%s", e.msg);
    int same = iabn_store_count(a) == iabn_store_count(b);
    for (int i = 0; same && i < iabn_store_count(a); i++) {
        const iabn_param *p = iabn_store_get(a, i), *q = iabn_store_get(b, iabn_store_find(b, p->name));
        same = !memcmp(p->data, q->data, p->count * sizeof(float));
    }
    CHECK(same);
    iabn_st_file *f = NULL;
    CHECK_OK(iabn_st_load(path, &f, &e));
    if (f) {
        CHECK(iabn_st_meta(f, "epoch") && !strcmp(iabn_st_meta(f, "epoch"), "3"));
        CHECK(iabn_st_count(f) == iabn_store_count(a));
        iabn_st_free(f);
    }
    /* resnet34 has blocks resnet18 lacks; resnext50 has other shapes and names */
    iabn_store *c = built_store("resnet34", NULL);
    float before = iabn_store_get(c, 0)->data[0];
    CHECK(iabn_weights_load(c, path, 1, &e) == IABN_EFORMAT);
    CHECK_MSG(strstr(e.msg, "missing (mod2.block3.convs.conv1.weight") != NULL, "%s", e.msg);
    CHECK(strstr(e.msg, "0 not in the model") != NULL);
    CHECK(iabn_store_get(c, 0)->data[0] == before); /* nothing written */
    CHECK_MSG(iabn_weights_load(c, path, 0, &e) == 0, "%s", e.msg);
    CHECK(iabn_store_get(c, 0)->data[0] == iabn_store_get(a, 0)->data[0]);
    iabn_store *d = built_store("mobilenet_v1", NULL);
    CHECK(iabn_weights_load(d, path, 1, &e) == IABN_EFORMAT);
    CHECK(strstr(e.msg, "not in the model (") != NULL);
    iabn_store *r = iabn_store_new(iabn_backend_cpu(), NULL);
    iabn_graph *g = iabn_graph_new(r, IABN_EVAL);
    int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){1, 3, 32, 32});
    cfg.classes = 7; /* classifier.fc of another shape */
    int logits;
    CHECK_OK(iabn_model_build(g, &cfg, x, &logits));
    CHECK(iabn_weights_load(r, path, 0, &e) == IABN_EFORMAT);
    CHECK_MSG(strstr(e.msg, "classifier.fc.weight (file F32 [10, 512], model F32 [7, 512])") != NULL,
              "%s", e.msg);
    CHECK(iabn_weights_load(r, "/nonexistent/w.safetensors", 0, &e) != 0);
    iabn_graph_free(g);
    remove(path);
    iabn_store_free(a);
    iabn_store_free(b);
    iabn_store_free(c);
    iabn_store_free(d);
    iabn_store_free(r);
}

typedef struct step_out {
    float loss;
    float *logits;
    size_t nlogits;
    float **grads;   /* per store entry (NULL for buffers) */
    size_t *counts;
    int np;
} step_out;

static void step_free(step_out *o)
{
    for (int i = 0; i < o->np; i++) free(o->grads[i]);
    free(o->grads);
    free(o->counts);
    free(o->logits);
    memset(o, 0, sizeof *o);
}

/* Deterministic weights, cheaper than iabn_model_init's normal draws:
 * uniform with variance 1/fan_in for conv / fc weights, gammas in [-1, 1)
 * (negative ones exercise |gamma| + eps), small betas and biases, running
 * statistics at their initial 0 / 1. */
static void fast_init(iabn_store *s)
{
    for (int i = 0; i < iabn_store_count(s); i++) {
        iabn_param *p = iabn_store_get(s, i);
        t_fill(p->data, p->count, 1000u + (unsigned)i);
        float scale = 0.1f;
        if (p->kind == IABN_P_WEIGHT && p->nd >= 2) scale = sqrtf(3.f * (float)p->shape[0] / (float)p->count);
        else if (p->kind == IABN_P_BN_WEIGHT) scale = 1.f;
        else if (p->kind == IABN_P_BUFFER) scale = 0.f;
        int var = strstr(p->name, "running_var") != NULL;
        for (size_t k = 0; k < p->count; k++) p->data[k] = var ? 1.f : scale * p->data[k];
        /* plain-gamma units (standard, checkpoint*) get the scale |gamma|+eps
         * the in-place units apply to the same draw: every mode computes the
         * same function (train_step turns dgamma back with the sign) */
        if (p->kind == IABN_P_BN_WEIGHT && !p->bn_abs)
            for (size_t k = 0; k < p->count; k++)
                p->data[k] = iabn_bn_scale(p->data[k], p->bn_eps, 1);
    }
}

/* One training step of arch on 2x3xHWxHW with deterministic weights: 5
 * classes, the executor's arena checked against the plan. */
static int train_step(const char *arch, iabn_bn_mode mode, int hw, int no_dropout, step_out *out)
{
    t_run t = {0};
    t.s = iabn_store_new(iabn_backend_cpu(), NULL);
    t.g = iabn_graph_new(t.s, IABN_TRAIN);
    /* the modes fuse their identity blocks differently (conv2d_add: the sum
     * post-op over x in the in-place modes, the binary post-op into a sum
     * apart in the others), and the sum post-op rounds at another point of
     * long sums: float32 noise that batch norm over 1x1 maps amplifies at
     * this size.  The modes are compared on the same kernels; test_fusion
     * compares fused and apart. */
    iabn_graph_set_fusion(t.g, 0);
    iabn_model_cfg cfg = iabn_model_defaults(arch);
    cfg.bn = mode;
    cfg.classes = 5;
    cfg.no_dropout = no_dropout;
    int x = iabn_graph_input(t.g, "input", IABN_F32, 4, (int[]){2, 3, hw, hw});
    int lab = iabn_graph_input(t.g, "labels", IABN_I32, 1, (int[]){2});
    int logits = -1;
    int rc = iabn_model_build(t.g, &cfg, x, &logits);
    if (!rc) {
        t.loss = iabn_softmax_xent(t.g, "loss", logits, lab, 255, 1.f);
        iabn_graph_mark_output(t.g, logits); /* readable after the run */
    }
    if (rc || t_prepare(&t, NULL)) {
        fprintf(stderr, "%s %s: %s\n", arch, iabn_bn_mode_name(mode), iabn_graph_error(t.g)->msg);
        t_free(&t);
        return -1;
    }
    CHECK_MSG(iabn_exec_arena_bytes(t.ex) == t.p->arena_bytes, "%s: arena %zu, planned %zu", arch,
              iabn_exec_arena_bytes(t.ex), t.p->arena_bytes);
    iabn_err e = {0};
    fast_init(t.s);
    t_fill(iabn_exec_ptr(t.ex, x), 2 * 3 * hw * hw, 4);
    int32_t *l = iabn_exec_ptr(t.ex, lab);
    l[0] = 1;
    l[1] = 3;
    iabn_exec_set_seed(t.ex, 99);
    iabn_store_zero_grads(t.s, NULL);
    if (iabn_exec_run(t.ex, &e)) {
        fprintf(stderr, "%s %s: run: %s\n", arch, iabn_bn_mode_name(mode), e.msg);
        t_free(&t);
        return -1;
    }
    out->loss = *(float *)iabn_exec_ptr(t.ex, t.loss);
    out->nlogits = iabn_graph_t(t.g, logits)->nbytes / 4;
    out->logits = malloc(out->nlogits * sizeof(float));
    memcpy(out->logits, iabn_exec_ptr(t.ex, logits), out->nlogits * sizeof(float));
    out->np = iabn_store_count(t.s);
    out->grads = calloc((size_t)out->np, sizeof *out->grads);
    out->counts = calloc((size_t)out->np, sizeof *out->counts);
    int moved = 0;
    for (int i = 0; i < out->np; i++) {
        iabn_param *p = iabn_store_get(t.s, i);
        if (p->kind == IABN_P_BUFFER) {
            /* running means start at 0: one step moves them by momentum * mu */
            if (strstr(p->name, "running_mean"))
                for (size_t k = 0; k < p->count; k++) moved |= p->data[k] != 0.f;
            continue;
        }
        out->counts[i] = p->count;
        out->grads[i] = malloc(p->count * sizeof(float));
        memcpy(out->grads[i], p->grad, p->count * sizeof(float));
        if (p->kind == IABN_P_BN_WEIGHT && p->bn_abs) /* d|gamma|/dgamma, see fast_init */
            for (size_t k = 0; k < p->count; k++)
                out->grads[i][k] *= iabn_bn_dgamma_factor(p->data[k], 1);
    }
    CHECK_MSG(moved, "%s: running statistics did not move", arch);
    t_free(&t);
    return 0;
}

static void test_train_every_mode(void)
{
    step_out ref = {0};
    for (int mode = 0; mode < IABN_BN_NMODES; mode++) {
        step_out o = {0};
        int ok = train_step("resnext50", (iabn_bn_mode)mode, 32, 1, &o) == 0;
        CHECK_MSG(ok, "resnext50 %s", iabn_bn_mode_name(mode));
        if (!ok) continue;
        CHECK_MSG(isfinite(o.loss) && o.loss > 0.f, "%s loss %g", iabn_bn_mode_name(mode), o.loss);
        if (mode == 0) {
            ref = o;
            continue;
        }
        /* every mode computes the same function: logits, loss, gradients agree
         * to float32 rounding through 50 layers (relative to each tensor's max) */
        CHECK_CLOSE(o.loss, ref.loss, 1e-5, 1e-4);
        CHECK(t_max_err(o.logits, ref.logits, o.nlogits, 1e-4, 1e-4) <= 1.0);
        double worst = 0;
        int worst_at = -1;
        for (int i = 0; i < o.np && i < ref.np; i++) {
            if (!o.grads[i] || !ref.grads[i]) continue;
            double mx = 0, d = 0;
            for (size_t k = 0; k < o.counts[i]; k++) {
                mx = fmax(mx, fabs(ref.grads[i][k]));
                d = fmax(d, fabs((double)o.grads[i][k] - ref.grads[i][k]));
            }
            double rel = mx > 0 ? d / mx : d;
            if (!(rel <= worst)) worst = rel, worst_at = i;
        }
        CHECK_MSG(worst <= 1e-3, "%s: gradient %d differs from standard's by %.3g of its max",
                  iabn_bn_mode_name(mode), worst_at, worst);
        fprintf(stderr, "  resnext50 %-16s loss %.7f (standard %.7f), worst gradient %.2e\n",
                iabn_bn_mode_name(mode), o.loss, ref.loss, worst);
        step_free(&o);
    }
    step_free(&ref);
}

static void test_train_wrn(void)
{
    /* with its dropout layers (mod6, mod7), at 16x16 to stay cheap */
    step_out o = {0};
    CHECK(train_step("wider_resnet38_a2", IABN_BN_INPLACE_II, 16, 0, &o) == 0);
    CHECK_MSG(isfinite(o.loss) && o.loss > 0.f, "loss %g", o.loss);
    step_free(&o);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define TIMED(fn)                                                                        \
    do {                                                                                 \
        double t0_ = now();                                                              \
        RUN(fn);                                                                         \
        fprintf(stderr, "  (%.1f s)\n", now() - t0_);                                    \
    } while (0)

#ifndef CONFIG_DIR
#define CONFIG_DIR "configs"
#endif

/* Every experiment config in configs/ (the reference's nine under
 * scripts/experiments, and the segmentation ones) loads, checks, and builds
 * its network as configured (shapes only). */
static void test_configs(void)
{
    DIR *d = opendir(CONFIG_DIR);
    CHECK_MSG(d != NULL, "%s", CONFIG_DIR);
    int n = 0, densenet = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".json")) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", CONFIG_DIR, de->d_name);
        iabn_config c;
        iabn_config_defaults(&c);
        iabn_err e = {0};
        int rc = iabn_config_load(&c, path, &e);
        if (!rc) rc = iabn_config_check(&c, &e);
        CHECK_MSG(rc == 0, "%s: %s", path, e.msg);
        if (rc) continue;
        iabn_model_cfg mc = iabn_model_defaults(c.arch);
        mc.bn = c.bn_mode;
        mc.act = c.act;
        mc.input_3x3 = c.input_3x3;
        iabn_store *s = iabn_store_new_virtual(iabn_backend_cpu(), NULL);
        iabn_graph *g = iabn_graph_new(s, IABN_TRAIN);
        int x = iabn_graph_input(g, "input", IABN_F32, 4, (int[]){2, 3, 64, 64}), logits = -1;
        rc = iabn_model_build(g, &mc, x, &logits);
        CHECK_MSG(rc == 0, "%s: %s: %s", path, c.arch, iabn_graph_error(g)->msg);
        densenet += !strcmp(c.arch, "densenet264");
        iabn_graph_free(g);
        iabn_store_free(s);
        n++;
    }
    if (d) closedir(d);
    CHECK_MSG(n >= 11 && densenet == 1, "%d configs, densenet264 %d", n, densenet);
}

int main(void)
{
    iabn_set_num_threads(2);
    TIMED(test_configs);
    TIMED(test_registry);
    TIMED(test_counts_shapes_names);
    TIMED(test_blocks);
    TIMED(test_init_threads);
    TIMED(test_weights_roundtrip);
    TIMED(test_train_every_mode);
    TIMED(test_train_wrn);
    return TEST_END();
}
