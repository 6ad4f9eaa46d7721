/* fuzz_config.c: libFuzzer target for the experiment-config parser (the
 * reference's JSON schema, src/models/train/config.c).  Every input either fails with a
 * message, or parses into a configuration whose resolved JSON parses again
 * into the very same JSON (the round trip the checkpoints rely on: they store
 * the resolved config and resume from it); the schedule is then evaluated
 * over its range, which must not trap. */
#include "models/train/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1 << 16)) return 0;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    iabn_config c;
    iabn_err e = {0};
    iabn_config_defaults(&c);
    int rc = iabn_config_parse(&c, text, "fuzz", &e);
    free(text);
    if (rc) {
        if (!e.msg[0]) abort(); /* an error always says what is wrong */
        return 0;
    }
    (void)iabn_config_check(&c, &e);
    char *j1 = iabn_config_to_json(&c);
    if (!j1) return 0;
    iabn_config c2;
    iabn_config_defaults(&c2);
    if (iabn_config_parse(&c2, j1, "round trip", &e)) {
        fprintf(stderr, "resolved config does not parse again: %s\n%s\n", e.msg, j1);
        abort();
    }
    char *j2 = iabn_config_to_json(&c2);
    if (!j2 || strcmp(j1, j2)) {
        fprintf(stderr, "round trip changed the config:\n%s\n%s\n", j1, j2 ? j2 : "(null)");
        abort();
    }
    free(j1);
    free(j2);
    double total = c.schedule.epochs > 0 ? c.schedule.epochs : 1;
    for (int k = 0; k <= 4; k++) (void)iabn_schedule_factor(&c.schedule, total * k / 4.0, total);
    return 0;
}
