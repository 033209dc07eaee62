// The fine-tuning loop behind `leantune train`: data, the TrainModel, AdamW with a schedule and
// clipping, gradient accumulation, staged unfreezing, evaluation, progress and metrics, PEFT
// adapter output and exact-resume checkpoints.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/model_config.h"
#include "tokenizer/tokenizer.h"
#include "train/data.h"
#include "train/train_config.h"

namespace lt {

struct TrainResult {
  std::vector<float> losses;      // training loss per optimizer step (mean over all its label tokens)
  std::vector<float> eval_losses; // at each evaluation, in order
  float first_eval_loss = 0, last_eval_loss = 0;
  int steps = 0;                  // optimizer steps taken (in total, including before a resume)
  std::string output_dir;
};

// Callbacks into a run, for tests that inject faults (tests/tools/fault_train.cpp) and for callers
// that watch progress. Each is optional; `step` counts optimizer steps taken (1 after the first).
struct TrainHooks {
  std::function<void(int step)> on_step_end;           // after a step's loss is known, before its metrics record
  std::function<void(int step)> on_checkpoint_written; // a checkpoint's files are on disk, LATEST not yet updated
  std::function<void(int step)> on_checkpoint_saved;   // LATEST names the new checkpoint
};

// One process, or ZeRO data parallelism over world() (dist/zero_trainer.h) when config.zero_stage
// is set or mpirun started several ranks.
TrainResult run_training(const TrainConfig& config, const TrainHooks& hooks = {});
// The single-process trainer, whatever the launcher.
TrainResult run_training_single(const TrainConfig& config, const TrainHooks& hooks = {});

// The tokenizer and the tokenized train / eval examples of a run, with the bytes they hold (the
// ledger's data category): the examples' token vectors counted exactly, the tokenizer's tables as
// the resident memory its loading added.
struct TrainingData {
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<Example> train, eval;
  size_t tokenizer_bytes = 0, example_bytes = 0;
};
TrainingData load_training_data(const TrainConfig& config);
// The four int vectors (tokens, labels, positions, document starts) of one B x T batch.
size_t batch_bytes(int B, int T);
// The data category of a run: tokenizer, examples, a step's micro-batches and the eval batches.
size_t training_data_bytes(const TrainingData& d, const TrainConfig& c);

// Applies memory_budget / auto to a config before anything is allocated: returns the config to
// run (changed by auto), or throws lt::Error listing the cheaper runs that would fit.
TrainConfig fit_memory_budget(const TrainConfig& c, const ModelConfig& m, size_t baseline_bytes);

}  // namespace lt
