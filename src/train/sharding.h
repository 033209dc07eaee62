// ShardingStrategy: how a training run holds and synchronises its trainable parameters, their
// gradients and the AdamW state. The training loop (train/train_loop.h) and the model's unit store
// (train/unit_store.h) talk to this interface only; the caller picks the implementation:
//   LocalStrategy (train/local_strategy.h)  one process, nothing sharded: the model holds every
//                                            tensor, the step is clip + AdamW over them;
//   ZeroOptimizer (dist/zero.h)              ZeRO stages 0-3 over a Communicator (any number of
//                                            ranks), with overlap and optimizer-state offload.
// The trainable tensors, in TrainModel::params() order, form units in execution order: unit 0 the
// embedding, unit l+1 decoder layer l, unit L+1 the final norm and lm_head. Each unit's tensors are
// contiguous in params() order, so a unit is one flat range; a strategy that holds a unit's
// parameters or gradients hands out one contiguous buffer for all of them (acquire_*), and the
// unit store points the model's tensors into it.
#pragma once
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/comm.h"
#include "core/memory_plan.h"
#include "core/train_types.h"
#include "train/adaptive_rank.h"
#include "train/grad_topk.h"
#include "train/optimizer.h"
#include "train/trainer_state.h"

namespace lt {

struct TrainParam;  // train/train_model.h

// Fault injection and watching, for tests (tests/tools/fault_train.cpp) and callers. Each is
// optional; `step` counts optimizer steps taken (1 after the first).
struct TrainHooks {
  std::function<void(int step)> on_step_end;            // after a step's loss is known, before its metrics record
  std::function<void(int step)> on_checkpoint_written;  // a checkpoint's files are on disk, LATEST not yet updated
  std::function<void(int step)> on_checkpoint_saved;    // LATEST names the new checkpoint
};

// What a run trains, recorded in a sharded checkpoint's manifest so that it exports on its own.
struct TrainedModelInfo {
  std::optional<Method> method;  // nullopt: not recorded
  std::string base_model;      // the base model's path
  std::string adapter_config;  // LoRA: the PEFT adapter_config.json text; else ""
};

// One optimizer step over the accumulated gradients.
struct OptimizerStepArgs {
  AdamWOptions adamw;
  float lr = 0;                 // the schedule's value (times each tensor's lr_factor)
  int adam_step = 1;            // 1-based count of updates made, this one included
  int step = 1;                 // 1-based optimizer step (adaptive rank's schedule)
  float max_grad_norm = 0;      // global-norm clipping; 0: none
  float grad_scale = 1;         // fp16: the loss scale the gradients carry (they are unscaled first)
  bool skip_nonfinite = false;  // fp16: a non-finite gradient skips the update (returned as !finite)
};
struct OptimizerStepResult {
  float grad_norm = 0;  // the global norm before clipping (LocalStrategy: 0 when not clipping)
  bool finite = true;   // false: nothing was updated (a non-finite gradient)
};

// Trainable tensor i (params() order) as trained, whole.
using TrainedTensorFn = std::function<const float*(size_t i)>;

class ShardingStrategy {
 public:
  virtual ~ShardingStrategy() = default;

  // ---- What it holds (the model plans buffers for the rest) and its process group.
  virtual bool holds_params() const { return false; }   // the trainable parameters, acquired per unit
  virtual bool holds_grads() const { return false; }    // their gradients, acquired per unit
  virtual bool holds_moments() const { return false; }  // the AdamW moments (else the model plans them)
  virtual Communicator& comm() = 0;

  // ---- Construction of the model. holds_params(): a buffer for trainable tensor i (n floats) that
  // the model fills, then loaded(i) before the next one.
  virtual float* load_buffer(size_t i, size_t n);
  virtual void loaded(size_t i) {}
  // The model's trainable tensors (names, shapes, decay; p, g, m, v where the model holds them),
  // once built. lt::Error when they are not the tensors the strategy was built for.
  virtual void attach(std::vector<TrainParam>& params) = 0;

  // ---- A pass, unit by unit (called by the UnitStore). next: the unit that will be acquired after
  // u in this pass (-1: unknown), which may be gathered now (prefetch).
  virtual float* acquire_params(int u, int next);
  virtual void release_params(int u) {}
  virtual float* acquire_grads(int u);
  virtual void release_grads(int u) {}
  // The model holds the gradients: unit u's gradients of this micro-batch are complete.
  virtual void grads_ready(int u) {}
  // Whether the micro-batch about to run is its step's last.
  virtual void set_last_micro_batch(bool last) {}
  // Micro-batch a (of this rank's accum in the step) has finished its backward.
  virtual void micro_batch_done(int a, int accum) {}
  // Top-k gradient sparsification from the next step on (train/grad_topk.h); lt::Error when this
  // strategy cannot run it (the default).
  virtual void set_grad_topk(const TopkOptions& o);
  // Adaptive LoRA rank (train/adaptive_rank.h) from the next step on; lt::Error when this strategy
  // cannot run it (the default). rank_allocator(): its state, null when off.
  // `arenas` and `optimizer_rows` (the OptimizerState rows of its plan): where the release compacts.
  virtual void set_adaptive_rank(const AdaptiveRankOptions& o, Arenas& arenas, const MemoryPlan& optimizer_rows);
  virtual const RankAllocator* rank_allocator() const { return nullptr; }

  // ---- The optimizer. Per tensor, as ParamGroup::frozen / lr_factor (staged unfreezing).
  virtual void set_frozen(size_t i, bool frozen, float lr_factor) = 0;
  // Unscale, global norm, clip, AdamW; the gradients are left for the model's zero_grads().
  virtual OptimizerStepResult optimizer_step(const OptimizerStepArgs& a) = 0;

  // ---- Checkpoints (collective). save: OUT/checkpoint-<step>, published in OUT/LATEST (hooks
  // around that point); load: a checkpoint folder or "auto" (OUT/LATEST; a default state when none)
  // into the parameters and moments.
  virtual void save_checkpoint(const std::string& out_dir, const TrainerState& state, const TrainedModelInfo& info,
                               const TrainHooks& hooks) = 0;
  virtual TrainerState load_checkpoint(const std::string& path, const std::string& out_dir) = 0;

  // ---- The end of a run. The trained tensors, whole on rank 0 (collective: a strategy holding
  // the parameters gathers them; the function is valid until the strategy is destroyed).
  virtual TrainedTensorFn trained_tensors() = 0;
  // This process's memory plan when it differs from the model's (a ZeRO rank's); null otherwise.
  virtual const MemoryPlan* rank_plan() const { return nullptr; }
  // Arenas outside the model (a ZeRO engine's shards), for the ledger; null when none.
  virtual const Arenas* engine_arenas() const { return nullptr; }
  // How it shards, for the memory plan's title ("" for one process without sharding).
  virtual std::string describe() const { return ""; }
  // Files of this rank beyond the run's outputs (ZeRO: ledger-rank<r>.json). fixed_bytes: the
  // process baseline and data; model: the model's arenas.
  virtual void write_rank_outputs(const std::string& out_dir, const Arenas& model, size_t fixed_bytes,
                                  double comm_bytes_per_step) {}
};

}  // namespace lt
