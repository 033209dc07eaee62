// TrainLoop: the one training loop, for one process, any ZeRO stage on any number of ranks, and
// `leantune bench`. How the trainable tensors, their gradients and the optimizer state are held
// and synchronised is the run's ShardingStrategy (train/sharding.h), chosen by the caller; the
// loop itself never knows whether it shards.
// A step = gradient_accumulation_steps micro-batches per rank, all loaded first: every rank walks
// the same shuffled batch stream, a step takes R·accumulation consecutive micro-batches and rank r
// computes the r-th run of `accumulation` of them (so R ranks with accumulation a see exactly the
// batches, in the same order and with the same dropout masks, as one rank with accumulation R·a).
// The step's loss is the sum of every label token's loss over all of them divided by their label
// count (all-reduced before the first backward), so accumulation and ranks give the larger batch's
// gradients; then the strategy's optimizer step (fp16: unscale, and a step whose gradients
// overflowed is skipped by every rank), zeroed gradients, a checked metrics record, the progress bar.
// Every run, on any path, leaves the same outputs in output_dir: metrics.jsonl, checkpoint-<step>
// folders published through LATEST (the strategy's format) with the one resume state
// (train/trainer_state.h), and at the end the PEFT adapter or the full model folder (config and
// tokenizer files copied from an HF base), ledger.json and report.html (train/run_outputs.h).
// Rank 0 prints, evaluates (every rank when the strategy holds the parameters) and writes those;
// a resumed run repeats an uninterrupted one bit for bit at the same thread count (dropout masks
// are keyed by step; the checkpoint holds the data position and the loss scaler's state), and
// metrics.jsonl is cut back to the records written up to its checkpoint.
// Usage: TrainLoop loop(config, services); TrainResult r = loop.run();
//    or: loop.start(); while (!loop.done()) loop.step(); r = loop.finish();
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/ledger.h"
#include "io/model_files.h"
#include "train/base_cache.h"
#include "train/data_loader.h"
#include "train/loss_scaler.h"
#include "train/output_dir.h"
#include "train/run_outputs.h"
#include "train/schedule.h"
#include "train/sharding.h"
#include "train/train_config.h"
#include "train/train_model.h"
#include "train/training_data.h"
#include "train/unit_store.h"

namespace lt {

struct TrainResult {
  std::vector<float> losses;       // training loss per optimizer step (mean over all its label tokens)
  std::vector<float> eval_losses;  // at each evaluation, in order
  float first_eval_loss = 0, last_eval_loss = 0;
  int steps = 0;                   // optimizer steps taken (in total, including before a resume)
  std::string output_dir;
};

// One optimizer step's figures (every rank gets the same).
struct StepStats {
  int step = 0;          // optimizer steps taken, this one included
  float loss = 0, lr = 0, grad_norm = 0;
  bool applied = true;   // false: an fp16 gradient overflowed and the update was skipped
  long tokens = 0;       // tokens of the step over all ranks (B·T per micro-batch)
  double seconds = 0;    // its forward, backward and optimizer step
};

// Model FLOPs per token of a training step: forward + backward, and with recomputation.
struct FlopsPerToken {
  double model = 0, with_recompute = 0;
};

// The config to run (memory_budget's auto may change it) and how it shards.
struct RunSetup {
  TrainConfig config;
  std::unique_ptr<ShardingStrategy> strategy;
};

// What the loop takes from the modules above train; src/api fills it (budgets and FLOPs from
// plan, ZeRO from dist).
// A measured peak rate and the unit it was measured on ("f32 FMA", "AMX bf16", ...).
struct PeakRate {
  double flops = 0;
  std::string unit;
};

struct RunServices {
  Communicator* comm = nullptr;  // the ranks (the strategy's communicator); null: one process
  // The process baseline (runtime, threads), for budgets and the ledger: called once, after the
  // config's thread count is set (the baseline depends on it). Null: 0.
  std::function<size_t()> baseline_bytes;
  // memory_budget and sharding, called once the model's config and the data are loaded: the
  // config to run and its strategy (fixed_bytes: baseline + data). lt::Error when over budget.
  std::function<RunSetup(const TrainConfig& requested, const ModelConfig& model, size_t fixed_bytes)> setup;
  // For the throughput line's model FLOPs utilization (null: not printed): the model's FLOPs per
  // token, and this machine's measured peak in FLOP/s at the run's thread count for the run's
  // precision (the fastest unit: bf16 on AMX tiles where present) with the unit's name.
  std::function<FlopsPerToken(const ModelConfig&, const TrainModelOptions&)> flops_per_token;
  std::function<PeakRate(Precision)> peak_flops;
  // Runs that share one base in this process (`leantune sweep`; train/base_cache.h): the model's
  // files and its converted frozen weights come from here (it must outlive the loop). Null: the run
  // loads its own.
  BaseCache* base = nullptr;
};

// Watching a run (each optional). on_metrics: every record appended to metrics.jsonl; on_ledger:
// the ledger.json written at the end. print: the plans, the progress bar or lines and the
// summaries on stdout (rank 0).
struct RunWatchers {
  std::function<void(const StepProgress&)> on_progress;
  std::function<void(const nlohmann::json&)> on_metrics;
  std::function<void(const std::string& ledger_json)> on_ledger;
  bool print = true;
};

class TrainLoop {
 public:
  // Loads the model and the data, fits the budget and builds the strategy (services.setup), the
  // model and the data loader; nothing is written yet.
  TrainLoop(const TrainConfig& config, RunServices services, TrainHooks hooks = {}, RunWatchers watchers = {});
  // `leantune bench`: micro-batches of pseudo-random token ids (from seed) instead of data, no
  // evaluation, nothing written (config.output_dir is ignored).
  static std::unique_ptr<TrainLoop> synthetic(const TrainConfig& config, RunServices services, uint64_t seed);
  ~TrainLoop();
  TrainLoop(const TrainLoop&) = delete;
  TrainLoop& operator=(const TrainLoop&) = delete;

  // Resume from a checkpoint folder, or "auto" (output_dir/LATEST, if any): overrides
  // config.resume. Only before start().
  void resume(const std::string& checkpoint);
  // The output folder (a previous run's outputs are refused unless resuming or overwriting), the
  // checkpoint resumed, metrics.jsonl, the first evaluation. step() and run() call it when needed.
  void start();
  bool done() const { return step_ >= total_steps_; }
  StepStats step();
  // The mean loss over the eval batches (NaN when there are none, or on a rank that does not
  // evaluate); collective when the strategy holds the parameters. Logs nothing.
  float evaluate();
  // checkpoint-<step> now (metrics.jsonl synced first, so the records it counts are on disk).
  void save_checkpoint();
  // The final checkpoint (unless this step's is saved), the final evaluation, the adapter or
  // model folder, ledger.json and report.html. Once.
  TrainResult finish();
  // start(), step() until done(), finish().
  TrainResult run();

  const TrainConfig& config() const { return config_; }
  TrainModel& model() { return *model_; }
  ShardingStrategy& strategy() { return *store_->strategy(); }
  int step_count() const { return step_; }
  int total_steps() const { return total_steps_; }
  // Rank 0: the first step's measurements, layer by layer (null elsewhere).
  const Ledger* ledger() const { return ledger_ ? &*ledger_ : nullptr; }
  const MemoryPlan& process_plan() const;  // this process's arenas: a ZeRO rank's, or the model's

 private:
  using Clock = std::chrono::steady_clock;
  TrainLoop(const TrainConfig& config, RunServices services, TrainHooks hooks, RunWatchers watchers,
            std::optional<uint64_t> synthetic_seed);
  size_t load_inputs(const TrainConfig& requested);  // returns the data bytes the budget counts
  void build_model();
  void prepare_batches(std::optional<uint64_t> synthetic_seed);
  void next_batch(Batch& b);
  int64_t load_step_batches();  // this rank's micro-batches of a step; returns the step's label count
  TrainerState resume_state();
  void apply_unfreeze();
  StepStats optimize(float loss_scale, double loss_sum, int64_t labels, double tokens, Clock::time_point t0);
  void record_step(const StepStats& s, float loss_scale);
  void log_eval(float loss, bool record, bool newline);
  void log_metric(const nlohmann::json& record);
  void print_throughput();
  void write_outputs();
  void say(const std::string& text) const;  // rank 0, when printing

  TrainConfig config_;
  RunServices services_;
  TrainHooks hooks_;
  RunWatchers watchers_;
  bool synthetic_ = false;
  ModelFiles files_;
  TrainingData data_;  // the tokenizer and examples (the train examples move into the loader)
  size_t data_bytes_ = 0, baseline_bytes_ = 0;
  std::unique_ptr<UnitStore> store_;
  Communicator* comm_ = nullptr;
  MemoryPlan single_plan_;  // the single-process plan: every weight, trained or frozen (outputs)
  std::shared_ptr<FrozenBlock> frozen_;  // services.base's converted frozen weights (outlives model_)
  std::unique_ptr<TrainModel> model_;
  std::optional<DataLoader> loader_;
  Batch synthetic_batch_;
  std::vector<Batch> eval_batches_, batches_;
  std::optional<Ledger> ledger_;
  UnfreezeSchedule unfreeze_;
  ScheduleOptions schedule_;
  AdamWOptions adamw_;
  bool fp16_ = false;
  LossScaler scaler_;  // fp16: dynamic loss scaling (train/loss_scaler.h); checkpoints carry its state
  std::optional<MetricsLog> metrics_;
  TrainedModelInfo info_;
  TrainResult result_;
  int total_steps_ = 0, step_ = 0, first_step_ = 0, epoch_ = 0, skipped_ = 0, saved_step_ = -1;
  long tokens_seen_ = 0;
  double compute_seconds_ = 0;
  Clock::time_point t_start_;
  bool started_ = false, finished_ = false, lead_ = true, evaluates_ = true, tty_ = false;
};

}  // namespace lt
