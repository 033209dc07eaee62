// LocalStrategy: the sharding strategy of one process without sharding (train/sharding.h). The
// model holds every trainable tensor, its gradient and both AdamW moments; an optimizer step
// unscales (fp16), clips the global norm and runs AdamW over them; a checkpoint is one folder
// OUT/checkpoint-<step>/ with state.safetensors ("param.<name>", "adam_m.<name>", "adam_v.<name>")
// and trainer_state.json, published by atomically replacing OUT/LATEST (train/output_dir.h).
// With grad_topk (train/grad_topk.h) the step's gradient is sparsified first, and the residuals
// are checkpointed too ("topk_residual.<worker>.<name>", "topk_age.<name>"); with W emulated workers each run of
// accumulation/W micro-batches is sparsified as it ends and the sparse gradients are summed.
// With adaptive rank (train/adaptive_rank.h) each step ends with the importance update and the
// rank masks, and checkpoints hold the masks and importance EMAs ("rank_mask.<module>", ...); after
// its release at the final budget AdamW runs over the active components' groups and checkpoints
// hold the masks and the compacted moments (a resume: masks, release, then moments).
#pragma once
#include <optional>
#include <vector>

#include "train/sharding.h"

namespace lt {

class LocalStrategy final : public ShardingStrategy {
 public:
  Communicator& comm() override { return self_; }
  void attach(std::vector<TrainParam>& params) override;
  void set_frozen(size_t i, bool frozen, float lr_factor) override;
  OptimizerStepResult optimizer_step(const OptimizerStepArgs& a) override;
  void save_checkpoint(const std::string& out_dir, const TrainerState& state, const TrainedModelInfo& info,
                       const TrainHooks& hooks) override;
  TrainerState load_checkpoint(const std::string& path, const std::string& out_dir) override;
  TrainedTensorFn trained_tensors() override;
  void set_grad_topk(const TopkOptions& o) override;
  void micro_batch_done(int a, int accum) override;
  void set_adaptive_rank(const AdaptiveRankOptions& o, Arenas& arenas, const MemoryPlan& optimizer_rows) override;
  const RankAllocator* rank_allocator() const override { return rank_ ? &*rank_ : nullptr; }

 private:
  void sparsify(int worker, float* into);
  void sync_adam_groups();
  std::vector<int64_t> moment_shape(size_t i) const;  // trainable tensor i's AdamW moments as held now
  // grad_topk's checkpointed state: (name, (tensor, buffer)) per residual and age
  std::vector<std::pair<std::string, std::pair<int, float*>>> topk_state();  // every trained gradient, top-k of it added to into (or in place)

  SelfCommunicator self_;
  std::optional<GradTopK> topk_;
  std::optional<RankAllocator> rank_;
  std::vector<float> topk_sum_;  // workers > 1: the step's sum of the workers' sparse gradients (flat)
  std::vector<uint32_t> idx_;
  std::vector<float> val_;
  std::vector<TrainParam>* params_ = nullptr;
  std::vector<ParamGroup> groups_;       // one per trainable tensor: unscaling, clipping, the finiteness check
  std::vector<ParamGroup> adam_groups_;  // AdamW's: groups_, or after adaptive rank's release its active runs
};

}  // namespace lt
