// LocalStrategy: the sharding strategy of one process without sharding (train/sharding.h). The
// model holds every trainable tensor, its gradient and both AdamW moments; an optimizer step
// unscales (fp16), clips the global norm and runs AdamW over them; a checkpoint is one folder
// OUT/checkpoint-<step>/ with state.safetensors ("param.<name>", "adam_m.<name>", "adam_v.<name>")
// and trainer_state.json, published by atomically replacing OUT/LATEST (train/output_dir.h).
#pragma once
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

 private:
  SelfCommunicator self_;
  std::vector<TrainParam>* params_ = nullptr;
  std::vector<ParamGroup> groups_;
};

}  // namespace lt
