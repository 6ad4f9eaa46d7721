/* export.h: a model's evaluation graph as JSON, what tools/export.py turns
 * into ONNX or plain-BN weights (`iabn export --graph MODEL`):
 *
 *     {"input": {"name", "shape"}, "output": NAME,
 *      "tensors": {NAME: {"shape", "kind"}},      kind: param, state, input,
 *                                                   output, activation
 *      "nodes": [{"name", "attrs", "in", "out"}]} the forward nodes in order,
 *                                                   attrs from iabn_layer_describe */
#ifndef IABN_MODELS_TRAIN_EXPORT_H
#define IABN_MODELS_TRAIN_EXPORT_H

#include "models/models.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The graph of mc at batch 1, 3 x height x width; caller frees.  NULL with
 * e set when the model does not build or a node has no inference form. */
char *iabn_export_graph_json(const iabn_model_cfg *mc, int height, int width, iabn_err *e);

/* What the reference repository publishes for a model: the experiment
 * configs that train it (its scripts/experiments, our segmentation configs)
 * and the weights its README links, which `iabn convert` reads (or
 * torchvision's); NULL for a model it has none of. */
const char *iabn_model_reference_configs(const char *model);
const char *iabn_model_reference_weights(const char *model);

#ifdef __cplusplus
}
#endif
#endif
