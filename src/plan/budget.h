// Memory budgets: fit a training run into a byte budget before anything is allocated. The
// prediction is the plan's arena bytes (exact by construction) plus the process baseline
// (runtime libraries, threads, the mapped checkpoint pages it touches), measured as this
// process's resident memory before the model is built.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "core/model_config.h"
#include "train/train_config.h"

namespace lt {

// "6GiB", "6 GB", "512MiB", "2.5GB", "6442450944" -> bytes (units case-insensitive: B, KiB..TiB
// binary, KB..TB decimal, K/M/G/T binary); lt::Error naming the text otherwise.
size_t parse_bytes(const std::string& text);

struct FitCandidate {
  std::string change;       // what differs from the requested run, as a practitioner would say it
  TrainConfig config;       // the run with that change
  size_t predicted_bytes;   // arenas + baseline
};

// Every weight of the model in fp32 (what any run must hold at least, before quantization).
size_t model_weight_bytes(const ModelConfig& m);

// Predicted peak bytes of a run (arenas + baseline).
size_t predict_training_bytes(const ModelConfig& m, const TrainConfig& c, size_t baseline);

// Runs derived from `c` that fit `budget`, in the order a practitioner tries them: gradient
// checkpointing (MLP internals, attention internals, every other block, every block), LoRA
// instead of full fine-tuning, then smaller micro-batches with more accumulation (same global
// batch), and combinations. Only those that fit are returned.
std::vector<FitCandidate> cheaper_fits(const ModelConfig& m, const TrainConfig& c, size_t budget, size_t baseline);

// --auto: the largest micro-batch (at most the requested one) and then the least recomputation
// that fit, keeping the global batch by raising accumulation. lt::Error when nothing fits.
FitCandidate auto_fit(const ModelConfig& m, const TrainConfig& c, size_t budget, size_t baseline);

// Applies memory_budget / auto to a config before anything is allocated: returns the config to
// run (changed by auto), or throws lt::Error listing the cheaper runs that would fit.
// baseline_bytes: the process baseline plus the run's data.
TrainConfig fit_memory_budget(const TrainConfig& c, const ModelConfig& m, size_t baseline_bytes);

}  // namespace lt
