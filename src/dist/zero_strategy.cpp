// ZeroOptimizer as a run's sharding strategy (dist/zero.h, train/sharding.h): the optimizer step
// as the loop calls it, sharded checkpoints, the trained tensors gathered at stage 3 and each
// rank's ledger-rank<r>.json.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "dist/shard_checkpoint.h"
#include "dist/zero.h"
#include "train/output_dir.h"
#include "core/atomic_file.h"

namespace fs = std::filesystem;

namespace lt {

ZeroOptions zero_options(const TrainConfig& c) {
  ZeroOptions z;
  z.stage = std::max(0, c.zero_stage);
  z.offload = parse_optimizer_offload(c.offload_optimizer);
  z.offload_dir = c.offload_dir;
  z.overlap = c.zero_overlap;
  return z;
}

std::unique_ptr<ZeroOptimizer> make_zero_strategy(const MemoryPlan& single_process, int n_layers, Communicator& comm,
                                                  const ZeroOptions& o) {
  auto z = std::make_unique<ZeroOptimizer>(zero_tensors(single_process, n_layers), comm, o);
  z->set_rank_plan(plan_zero_rank(single_process, n_layers, comm.size(), o));
  return z;
}

OptimizerStepResult ZeroOptimizer::optimizer_step(const OptimizerStepArgs& a) {
  const float norm = step(a.adamw, a.lr, a.adam_step, a.max_grad_norm, a.grad_scale, /*skip_nonfinite=*/true);
  return {norm, std::isfinite(norm)};
}

void ZeroOptimizer::save_checkpoint(const std::string& out_dir, const TrainerState& state, const TrainedModelInfo& info,
                                    const TrainHooks& hooks) {
  save_sharded_checkpoint(out_dir, *this, *params_, state, info, &hooks);
}

TrainerState ZeroOptimizer::load_checkpoint(const std::string& path, const std::string& out_dir) {
  // sharded checkpoints hold params and moments only: a resumed run would restart grad_topk's
  // error-feedback residuals (and ages) at zero and silently train differently
  LT_CHECK(!(topk_ && topk_->options().residuals()) || resolve_checkpoint(path, out_dir).empty(),
           "resume: a ZeRO run with grad_topk (error feedback) cannot resume yet: sharded checkpoints do not hold the "
           "top-k residuals{}, so they would restart at zero; rerun from the start, or use grad_topk_feedback: scale "
           "(no state), or train in a single process, whose checkpoints hold them",
           topk_->options().ages() ? " and AdamW ages" : "");
  return load_sharded_checkpoint(path, out_dir, *this, *params_);
}

TrainedTensorFn ZeroOptimizer::trained_tensors() {
  if (opts_.stage == 3) {  // every rank takes part; rank 0 keeps the whole vector
    const bool lead = comm_.rank() == 0;
    if (lead) gathered_.resize(layout_.total);
    for (int u = 0; u < units(); ++u) {
      if (unit_begin(u) == unit_end(u)) continue;
      const float* slot = acquire_params(u, -1);
      if (lead) std::copy(slot, slot + (unit_end(u) - unit_begin(u)), gathered_.begin() + ptrdiff_t(unit_begin(u)));
      release_params(u);
    }
    return [this](size_t i) -> const float* { return gathered_.data() + layout_.offset[i]; };
  }
  return [this](size_t i) -> const float* { return (*params_)[i].p; };
}

std::string ZeroOptimizer::describe() const {
  const int R = layout_.ranks;
  return fmt::format("ZeRO stage {}, {} rank{}{}", opts_.stage, R, R > 1 ? "s" : "",
                     opts_.offload == OptimizerOffload::Disk ? ", optimizer state offloaded to disk" : "");
}

// ledger-rank<r>.json: this rank's planned bytes per category against what the model's and the
// engine's arenas allocated and what of that is resident at the end (mincore), and the bytes
// offloaded to disk.
void ZeroOptimizer::write_rank_outputs(const std::string& out_dir, const Arenas& model, size_t fixed_bytes,
                                       double comm_bytes_per_step) {
  nlohmann::json j;
  std::vector<unsigned char> scratch;
  for (size_t k = 0; k < kNumCategories; ++k) {
    const Category c = Category(k);
    const size_t planned = rank_plan_.arena_bytes(c);
    const size_t allocated = model.allocated_bytes(c) + arenas_.allocated_bytes(c);
    const size_t resident = model.resident_bytes(c, scratch) + arenas_.resident_bytes(c, scratch);
    if (planned || allocated)
      j["categories"][std::string(category_name(c))] = {{"planned", planned}, {"allocated", allocated},
                                                        {"resident", resident}};
  }
  j["rank"] = comm_.rank();
  j["ranks"] = layout_.ranks;
  j["zero_stage"] = opts_.stage;
  j["trainable_floats"] = layout_.total;
  j["shard_floats"] = layout_.shard;
  j["unit_floats"] = tensors_.unit_max;
  j["layer_unit_floats"] = tensors_.layer_max;
  j["tied_embedding_floats"] = tensors_.tied_floats;
  for (int u = 0; u < units(); ++u) j["unit_sizes"].push_back(unit_end(u) - unit_begin(u));
  j["offloaded_bytes"] = offloaded_bytes();
  j["comm_bytes"] = comm_.stats().total();
  j["comm_bytes_per_step"] = comm_bytes_per_step;  // sent by this rank during the training steps
  // of which the parameter all-gather of stages 1-2 (the rest: gradients, and the loss and norm scalars)
  j["param_gather_bytes_per_step"] = param_gather_bytes_per_step();
  j["overlap"] = {{"enabled", opts_.overlap}, {"prefetched_units", ostats_.prefetched},
                  {"gathered_units", ostats_.gathered}, {"reductions_overlapped", ostats_.reductions_overlapped},
                  {"reductions_blocking", ostats_.reductions_blocking}};
  // the peak: predicted (arenas + process baseline + data) against this process's VmHWM
  j["predicted_peak_bytes"] = rank_plan_.total_bytes() + fixed_bytes;
  j["measured_peak_bytes"] = process_peak_rss_bytes();
  write_text_file_atomic((fs::path(out_dir) / fmt::format("ledger-rank{}.json", comm_.rank())).string(), j.dump(1));
}

}  // namespace lt
