// Whole training runs as the public Trainer (include/leantune/trainer.h), the demo and the tests
// start them: the RunServices the loop (train/train_loop.h) takes from the modules above train —
// the memory budget (plan/budget.h), the sharding strategy (LocalStrategy, or ZeRO from
// dist/zero.h over a communicator), the process baseline and the FLOPs for the MFU line.
// A run on several ranks that fails on one of them prints the error with the rank and ends the
// whole job (every rank exits non-zero) rather than leave the others waiting in a collective.
#pragma once
#include <functional>

#include "dist/zero.h"
#include "train/train_config.h"
#include "train/train_loop.h"

namespace lt {

// The services of a run as `leantune train` picks them: ZeRO over world() (zero_options(config))
// when config.zero_stage is set or mpirun started several ranks, else one process.
RunServices training_services(const TrainConfig& config);
// One process, nothing sharded (LocalStrategy); memory_budget through fit_memory_budget.
RunServices local_services();
// ZeRO with these options over comm; memory_budget per rank through fit_zero_budget.
RunServices zero_services(const ZeroOptions& zero, Communicator& comm);

// memory_budget under ZeRO: one rank's predicted peak (its arenas, plan_zero_rank, plus the process
// baseline and the data, `fixed`) must fit. auto: the lowest stage from the requested one up that
// fits (the least communication). Otherwise an lt::Error listing every stage's need.
ZeroOptions fit_zero_budget(const TrainConfig& c, const MemoryPlan& single_plan, int n_layers, int ranks,
                            ZeroOptions zo, size_t fixed);

// fn(), and on several ranks an exception ends the job (comm.abort(1)) after printing it with the rank.
void run_collectively(Communicator& comm, const std::function<void()>& fn);

// A whole run (TrainLoop::run) with training_services / local_services / zero_services.
TrainResult run_training(const TrainConfig& config, const TrainHooks& hooks = {});
TrainResult run_training_single(const TrainConfig& config, const TrainHooks& hooks = {});
TrainResult run_training_zero(const TrainConfig& config, const ZeroOptions& zero, Communicator& comm,
                              const TrainHooks& hooks = {});

}  // namespace lt
