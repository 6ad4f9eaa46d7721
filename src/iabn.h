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
#include "models/train/session.h"
#include "models/train/config.h"
#include "models/train/checkpoint.h"
#include "models/train/segmetrics.h"
#include "models/train/tb_events.h"
#include "models/train/trainer.h"
#include "models/train/memreport.h"
#include "models/train/bench.h"
#include "models/train/stepfile.h"
#include "models/train/export.h"
#include "models/train/predict.h"
#endif
