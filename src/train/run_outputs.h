// What a training run shows and leaves behind, shared by the single-process loop (train/trainer.cpp)
// and rank 0 of the ZeRO loop (dist/zero_trainer.cpp) so that both print the same progress and
// write the same files: the progress bar (or log line) after each step; at the end the PEFT adapter
// or, for full fine-tuning, the model folder (every weight, plus config.json, tokenizer and
// generation files copied from an HF base), ledger.json, report.html and the memory summary.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <nlohmann/json.hpp>

#include "core/ledger.h"
#include "core/memory_plan.h"
#include "io/tensor_set.h"
#include "train/train_config.h"
#include "train/train_model.h"

namespace lt {

// One step's progress line. eta_s: seconds left (negative or non-finite: unknown).
struct StepProgress {
  int step = 0, total_steps = 0;
  float loss = 0, lr = 0, grad_norm = 0;
  double tokens_per_s = 0, eta_s = -1;
  size_t rss_bytes = 0;
};

// On a terminal (tty) a progress bar redrawn in place (end the run with a newline); otherwise a
// line every logging_steps steps and at the last step.
void print_step_progress(const StepProgress& p, bool tty, int logging_steps);

// "MM:SS" or "H:MM:SS"; "--:--" when unknown.
std::string format_eta(double seconds);

// Trainable tensor i of model.params() as trained: the model's own, or at ZeRO stage 3 a copy
// gathered from every rank.
using TrainedTensorFn = std::function<const float*(size_t i)>;

// lora: OUTPUT_DIR/adapter as a PEFT adapter (ranks: adaptive rank's, only the active components,
// with rank_pattern / alpha_pattern). full: OUTPUT_DIR/model/model.safetensors holding
// every weight of `plan` (the single-process training plan, which lists trained and frozen
// weights whatever the sharding), in its order, in f32, with the base's config.json, tokenizer
// and generation files when it has them. base: the base model's tensors (their shapes). print: say
// where it went on stdout.
void write_trained_model(const TrainConfig& c, const MemoryPlan& plan, TrainModel& model, const TensorSet& base,
                         const TrainedTensorFn& trained, bool print = true, const RankAllocator* ranks = nullptr);

// OUTPUT_DIR/ledger.json: `plan`'s bytes per category (this process's arenas) against the resident
// bytes the ledger measured in the first step, its timeline, and the predicted and measured
// process peak. engine: arenas outside the model that the ledger does not sample (the ZeRO
// engine's shards); their resident bytes now are added to the measured ones. ranks: adaptive rank's
// allocator, whose memory before and after pruning goes in "adaptive_rank" (adaptive_rank_json).
void write_ledger(const std::string& out_dir, const MemoryPlan& plan, const Ledger& ledger, size_t baseline,
                  size_t data_bytes, const Arenas* engine = nullptr, const RankAllocator* ranks = nullptr);
// Adaptive rank's totals at the initial rank and now: total rank, LoRA parameters, their gradient
// and AdamW bytes, the importance EMAs' bytes, and the release (RankReleaseStats): the optimizer
// state's resident bytes before and after, its compacted bytes and the bytes returned.
nlohmann::json adaptive_rank_json(const RankAllocator& ranks);

// Prints the predicted process peak (baseline + plan + data) against the measured peak RSS.
void print_memory_summary(const MemoryPlan& plan, size_t baseline, size_t data_bytes);

}  // namespace lt
