/* cmd_models.c: `iabn models`, the hub of names: every model of the registry
 * with its parameter count, default input, the reference experiment configs
 * that train it, whether published reference (or torchvision) weights exist
 * for `iabn convert`, and the memory of a training step at batch 32 with
 * in-place ABN relative to standard BN (planned, nothing allocated). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iabn.h"
#include "tools/commands.h"
#include "tools/options.h"

int iabn_cmd_models(int argc, char **argv)
{
    iabn_args a;
    int rc = iabn_args_parse(&a, IABN_C_MODELS, argc, argv);
    if (rc) return rc == IABN_ARGS_HELP ? 0 : 2;
    int json = a.v[IABN_O_JSON].set, memory = !a.v[IABN_O_NO_MEMORY].set;
    long long batch = a.v[IABN_O_BATCH].set ? a.v[IABN_O_BATCH].i : 32;
    int n = 0;
    const char *const *names = iabn_model_names(&n);
    if (json) printf("[\n");
    else
        printf("%-28s %11s %9s %8s  %-44s %s\n", "model", "parameters", "input", memory ? "iabn/std" : "",
               "reference configs", "weights to convert");
    for (int i = 0; i < n && !rc; i++) {
        iabn_err e = {0};
        int side = iabn_model_is_segmentation(names[i]) ? 512 : 224;
        size_t params = 0, std_b = 0, ip_b = 0;
        rc = iabn_model_memory(names[i], memory ? (int)batch : 0, &params, &std_b, &ip_b, &e);
        if (rc) {
            fprintf(stderr, "iabn models: %s: %s\n", names[i], e.msg);
            break;
        }
        const char *configs = iabn_model_reference_configs(names[i]);
        const char *weights = iabn_model_reference_weights(names[i]);
        double ratio = std_b ? (double)ip_b / (double)std_b : 0;
        if (json) {
            printf("  {\"model\": \"%s\", \"parameters\": %zu, \"input\": [3, %d, %d], "
                   "\"reference_configs\": \"%s\", \"weights\": \"%s\"",
                   names[i], params, side, side, configs ? configs : "", weights ? weights : "");
            if (memory)
                printf(", \"batch\": %lld, \"standard_bytes\": %zu, \"inplace_abn_ii_bytes\": %zu, "
                       "\"ratio\": %.4f",
                       batch, std_b, ip_b, ratio);
            printf("}%s\n", i + 1 < n ? "," : "");
        } else {
            char in[24], ra[16] = "";
            snprintf(in, sizeof in, "%dx%d", side, side);
            if (memory) snprintf(ra, sizeof ra, "%.3f", ratio);
            printf("%-28s %11zu %9s %8s  %-44s %s\n", names[i], params, in, ra,
                   configs && *configs ? configs : "-", weights ? weights : "-");
        }
    }
    if (json && !rc) printf("]\n");
    if (!json && !rc && memory)
        printf("\niabn/std: planned memory of a training step at batch %lld, inplace_abn_ii over "
               "standard (both leaky_relu where the model's default is relu)\n", batch);
    return rc ? 1 : 0;
}
