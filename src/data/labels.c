/* labels.c: class tables of the segmentation data sets.
 *
 * Cityscapes: labelId -> trainId as in cityscapesScripts helpers/labels.py
 * (19 classes, 255 ignore; ids past the table -> 255 as a safeguard).
 * Mapillary Vistas: the config.json "labels" list; its order gives the ids.
 */
#include "data/data_internal.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

/* trainId of labelIds 0..33 */
static const int16_t cityscapes_train_id[34] = {
    255, 255, 255, 255, 255, 255, 255, 0,   1,   255, 255, 2,  3,  4,  255, 255, 255,
    5,   255, 6,   7,   8,   9,   10,  11,  12,  13,  14,  15, 255, 255, 16, 17, 18};

static const char *const cityscapes_names[19] = {
    "road",  "sidewalk", "building", "wall",  "fence", "pole",  "traffic light",
    "traffic sign", "vegetation", "terrain", "sky", "person", "rider", "car",
    "truck", "bus", "train", "motorcycle", "bicycle"};

void iabn_cityscapes_label_map(iabn_label_map *map)
{
    for (int i = 0; i < 256; i++) map->lut[i] = i < 34 ? cityscapes_train_id[i] : 255;
    map->unknown_to_ignore = 1;
}

const char *iabn_cityscapes_class_name(int train_id)
{
    return train_id >= 0 && train_id < 19 ? cityscapes_names[train_id] : NULL;
}

int iabn_cityscapes_label_id(int train_id)
{
    for (int id = 0; id < 34 && train_id >= 0 && train_id < 19; id++)
        if (cityscapes_train_id[id] == train_id) return id;
    return -1;
}

/* Cityscapes' colours of the 19 train ids */
static const uint8_t cityscapes_colors[19][3] = {
    {128, 64, 128}, {244, 35, 232}, {70, 70, 70}, {102, 102, 156}, {190, 153, 153},
    {153, 153, 153}, {250, 170, 30}, {220, 220, 0}, {107, 142, 35}, {152, 251, 152},
    {70, 130, 180}, {220, 20, 60}, {255, 0, 0}, {0, 0, 142}, {0, 0, 70},
    {0, 60, 100}, {0, 80, 100}, {0, 0, 230}, {119, 11, 32}};

void iabn_label_palette(int classes, uint8_t rgb[256 * 3])
{
    for (int c = 0; c < 256; c++)
        for (int k = 0; k < 3; k++)
            rgb[3 * c + k] = c < 19 && classes == 19 ? cityscapes_colors[c][k]
                                                      : (uint8_t)((c * (37 + 61 * k) + 50 * k) & 0xff);
}

static void free_names(char **names, int n)
{
    if (!names) return;
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

int iabn_vistas_config_parse(const char *json, size_t len, iabn_label_map *map,
                             int *num_classes, char ***names_out, iabn_err *e)
{
    *num_classes = 0;
    if (names_out) *names_out = NULL;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return iabn_err_set(e, IABN_EFORMAT, "not valid JSON");
    int rc = 0;
    char **names = NULL;
    int n_names = 0;
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(root, "labels");
    if (!cJSON_IsObject(root) || !cJSON_IsArray(labels)) {
        rc = iabn_err_set(e, IABN_EFORMAT, "key \"labels\" missing or not an array");
        goto done;
    }
    int n = cJSON_GetArraySize(labels);
    if (n < 1 || n > 256) {
        rc = iabn_err_set(e, IABN_EFORMAT, "\"labels\" has %d entries; expected 1..256 (ids "
                          "are 8-bit pixel values)", n);
        goto done;
    }
    names = calloc((size_t)n, sizeof *names);
    if (!names) {
        rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < 256; i++) map->lut[i] = -1;
    map->unknown_to_ignore = 0;
    int id = 0;
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, labels) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *eval = cJSON_GetObjectItemCaseSensitive(it, "evaluate");
        if (!cJSON_IsObject(it) || !cJSON_IsString(name) || !name->valuestring) {
            rc = iabn_err_set(e, IABN_EFORMAT, "labels[%d].name missing or not a string", i);
            goto done;
        }
        if (eval && !cJSON_IsBool(eval)) {
            rc = iabn_err_set(e, IABN_EFORMAT, "labels[%d].evaluate is not a boolean", i);
            goto done;
        }
        if (eval && cJSON_IsFalse(eval)) {
            map->lut[i] = IABN_IGNORE_LABEL;
        } else {
            if (id >= IABN_IGNORE_LABEL) {
                rc = iabn_err_set(e, IABN_EFORMAT, "more than 255 evaluated labels");
                goto done;
            }
            names[id] = strdup(name->valuestring);
            if (!names[id]) {
                rc = iabn_err_set(e, IABN_ENOMEM, "out of memory");
                goto done;
            }
            n_names = id + 1;
            map->lut[i] = (int16_t)id++;
        }
        i++;
    }
    if (id == 0) {
        rc = iabn_err_set(e, IABN_EFORMAT, "no label has \"evaluate\": true");
        goto done;
    }
    *num_classes = id;
    if (names_out) {
        *names_out = names;
        names = NULL;
    }
done:
    free_names(names, n_names);
    cJSON_Delete(root);
    return rc;
}
