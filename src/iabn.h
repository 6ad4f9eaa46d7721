/* iabn.h: the whole public API of libiabn (pkg-config iabn). */
#ifndef IABN_H
#define IABN_H
#include "tensor/tensor.h"
#include "tensor/sim/sim.h"
#include "graph/graph.h"
#include "graph/strategy.h"
#include "layers/layers.h"
#include "data/data.h"
#include "models/models.h"
#endif
