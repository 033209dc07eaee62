// Op tables that time every call (core/profiler.h); see profiled_ops.cpp.
#pragma once
#include "kernels/backward.h"
#include "kernels/ops.h"

namespace lt {

// Wrappers around `inner` (one profiled table of each kind per process; the last inner wins).
const Ops& ops_profiled(const Ops& inner);
const TrainOps& train_ops_profiled(const TrainOps& inner);

}  // namespace lt
