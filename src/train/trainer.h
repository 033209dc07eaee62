// The fine-tuning loop behind `leantune train`: data, the TrainModel, AdamW with a schedule and
// clipping, gradient accumulation, staged unfreezing, evaluation, progress and metrics, PEFT
// adapter output and exact-resume checkpoints.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"
#include "train/train_config.h"

namespace lt {

struct TrainResult {
  std::vector<float> losses;      // training loss per optimizer step (mean over its micro-batches)
  std::vector<float> eval_losses; // at each evaluation, in order
  float first_eval_loss = 0, last_eval_loss = 0;
  int steps = 0;                  // optimizer steps taken (in total, including before a resume)
  std::string output_dir;
};

TrainResult run_training(const TrainConfig& config);

// Applies memory_budget / auto to a config before anything is allocated: returns the config to
// run (changed by auto), or throws lt::Error listing the cheaper runs that would fit.
TrainConfig fit_memory_budget(const TrainConfig& c, const ModelConfig& m, size_t baseline_bytes);

}  // namespace lt
