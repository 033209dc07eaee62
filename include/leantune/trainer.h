// leantune::Trainer: fine-tuning runs — full or LoRA (QLoRA on an NF4 / FP4 / int8 base), fp32 /
// bf16 / fp16, gradient accumulation and checkpointing, and ZeRO data parallelism (stages 0-3)
// when the process is one rank of `mpirun -np N`. Also `leantune bench`'s measurements and the
// demo. Everything a run writes goes to its output_dir: metrics.jsonl, checkpoint-<step>/ folders
// published through LATEST (resumable bit for bit), and at the end the PEFT adapter (adapter/) or
// the full model folder (model/, with the base's config.json and tokenizer files), ledger.json
// (planned against measured memory) and report.html.
//
// Usage:
//   #include "leantune/trainer.h"
//   leantune::TrainerConfig cfg;
//   cfg.yaml_file = "run.yaml";                        // any `leantune train` config
//   cfg.flags = {"--max-steps", "100", "--lora-r=16"};  // overrides, as the CLI takes them
//   leantune::Trainer trainer(cfg);                    // loads, plans and checks; writes nothing
//   trainer.on_progress([](const leantune::TrainProgress& p) { std::printf("%d %.3f\n", p.step, p.loss); });
//   leantune::TrainSummary s = trainer.run();          // or: while (!trainer.done()) trainer.step();
//                                                      //     trainer.finish();
//
// Keys: every key of a YAML config (base_model, datasets, method, lora_r, micro_batch_size,
// gradient_accumulation_steps, learning_rate, max_steps, save_steps, output_dir, resume, zero_stage,
// ... see `leantune train --help`). Errors: leantune::Error naming the file, key, flag or value that
// is wrong; a run on several ranks that fails on one of them ends the whole job instead (every rank
// exits non-zero), since the others would wait for it forever. Threads: a Trainer is used by one
// thread at a time; it sets the process's OpenMP thread count to the config's `threads`.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "leantune/error.h"

namespace leantune {

// Where a run's config comes from: a YAML file or YAML text (or neither: defaults), then flags.
struct TrainerConfig {
  std::string yaml_file;           // a `leantune train` YAML config ("": none)
  std::string yaml_text;           // or its text (yaml_file, if set, then only names it in messages)
  std::vector<std::string> flags;  // overrides over it: {"--key", "value"} or {"--key=value"}, dashes or underscores
  bool print = true;               // the memory plan, a progress bar (a line per logging_steps off a
                                   // terminal) and the summaries on stdout (rank 0)
  std::string profile_trace;       // non-empty: every op of the run is timed; run() / finish() write a
                                   // Chrome trace here and return the per-op table (TrainSummary)
  // `leantune train`'s arguments: [CONFIG.yaml] then flags.
  static TrainerConfig from_args(const std::vector<std::string>& args);
};

// After each step (rank 0 and every other rank alike).
struct TrainProgress {
  int step = 0, total_steps = 0;
  float loss = 0, lr = 0, grad_norm = 0;
  double tokens_per_s = 0;  // since the run (or its resume) started, over all ranks
  double eta_s = -1;        // seconds left; negative: unknown
  size_t rss_bytes = 0;
};

// One optimizer step.
struct TrainStep {
  int step = 0;          // steps taken, this one included
  float loss = 0;        // the mean over every label token of the step (all micro-batches, all ranks)
  float lr = 0, grad_norm = 0;
  bool applied = true;   // false: an fp16 gradient overflowed; the update was skipped, the loss scale halved
  long tokens = 0;       // tokens of the step over all ranks
  double seconds = 0;    // forward, backward and optimizer
};

struct TrainSummary {
  std::vector<float> losses;       // per optimizer step, including those before a resume
  std::vector<float> eval_losses;  // every evaluation, in order
  float first_eval_loss = 0, last_eval_loss = 0;
  int steps = 0;
  std::string output_dir;
  std::string profile_table;       // with TrainerConfig::profile_trace: self time per op
};

// A test seam: callbacks at the moments a fault is injected (tests/tools/fault_train.cpp aborts
// or sleeps in them). Each is optional; `step` counts the optimizer steps taken.
struct FaultInjection {
  std::function<void(int step)> after_step;            // a step's loss is known, its metrics record not yet written
  std::function<void(int step)> checkpoint_written;    // a checkpoint's files are on disk, LATEST not yet updated
  std::function<void(int step)> checkpoint_published;  // LATEST names the new checkpoint
};

class Trainer {
 public:
  // Reads the config, loads the model and tokenizes the data, fits memory_budget, prints the memory
  // plan and builds the model, the optimizer state and (under mpirun or zero_stage) the ZeRO
  // shards. Nothing is written to output_dir yet.
  explicit Trainer(const TrainerConfig& config);
  ~Trainer();
  Trainer(Trainer&&) noexcept;
  Trainer& operator=(Trainer&&) noexcept;

  // Callbacks (set them before the first step). on_metrics: each record appended to metrics.jsonl
  // (rank 0), as JSON text; on_ledger: ledger.json's text when finish() writes it (rank 0).
  void on_progress(std::function<void(const TrainProgress&)> fn);
  void on_metrics(std::function<void(const std::string& json_record)> fn);
  void on_ledger(std::function<void(const std::string& ledger_json)> fn);
  void set_fault_injection(FaultInjection faults);

  // Continue a previous run: a checkpoint folder, or "auto" for output_dir/LATEST (a fresh start
  // when there is none). Before the first step; the same as the config's `resume`.
  void resume(const std::string& checkpoint = "auto");
  // One optimizer step. The first call of step(), evaluate(), save(), finish() or run() starts the
  // run: prepares output_dir (refusing a previous run's outputs unless resuming or overwriting),
  // resumes, and evaluates once.
  TrainStep step();
  // The mean loss over the eval set (NaN without one; under ZeRO below stage 3 only rank 0 evaluates).
  float evaluate();
  // A checkpoint of the current step now (besides every save_steps and the final one).
  void save();
  bool done() const;
  int steps_taken() const;
  int total_steps() const;
  const std::string& output_dir() const;  // the run's output folder (the config's output_dir)
  size_t trainable_parameters() const;    // elements of every trained tensor (LoRA A/B, magnitudes, ...)
  // The final checkpoint and evaluation, the adapter or model folder, ledger.json, report.html.
  TrainSummary finish();
  // The whole run: step() until done(), then finish().
  TrainSummary run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- `leantune bench`

// Training steps on pseudo-random token ids (no data, nothing written): one warm-up step, then
// `steps` measured ones (median reported).
struct TrainBenchOptions {
  std::string model;                  // the base model's path
  std::string method = "lora";        // lora (every linear module) | full
  int lora_r = 16;                    // lora_alpha = 2 · lora_r
  int micro_batch = 4, seq = 256;     // B sequences of T tokens per step
  std::string checkpointing = "none"; // none | every | every:K | attention | mlp
  std::string precision = "fp32";     // fp32 | bf16 | fp16
  std::string attention_precision = "auto";  // auto | f32 | bf16 (bf16: precision bf16 only)
  std::string quantization;           // "" | nf4 | fp4 | int8: the QLoRA base
  bool double_quant = false;
  int steps = 3;
  int threads = 0;                    // 0: every core
  std::string profile_trace;          // the measured steps' Chrome trace; the per-op table goes to stderr
};
// One JSON object's text: step_s, tokens_per_s, MFU (against the fastest unit of the run's precision:
// bf16 on AMX tiles where present, else AVX512-BF16, else f32 FMA; peak_unit_used_for_mfu names it,
// mfu_by_peak gives it against each measured peak), planned and measured bytes, and the configuration.
std::string bench_training(const TrainBenchOptions& options);

// Inference on pseudo-random token ids: prefill tokens/s over prompt_tokens, then decode tokens/s
// over decode_tokens single-token steps through the KV cache; the median of `repeats` runs after
// one warm-up.
struct InferenceBenchOptions {
  std::string model;
  int prompt_tokens = 128, decode_tokens = 64, repeats = 3;
  std::string quantization;  // "" | nf4 | fp4 | int8, quantized on load
  bool double_quant = false;
  std::string weights;       // "" | f32 | bf16 | f16 | int8 | q4 | nf4 (ModelOptions::weights)
  std::string kv_cache;      // "" | f32 | bf16
  int threads = 0;
};
std::string bench_inference(const InferenceBenchOptions& options);

// ---- `leantune demo`: the first run. By default a real fine-tune: stories260K LoRA-tuned on Aesop's
// fables (found in $LEANTUNE_SHARED, ./shared or ../shared), or `model` on `data` when set, with the
// memory plan, the progress bar, the held-out loss and one prompt's greedy answer before and after,
// and report.html's path. synthetic: a tiny random Llama trained from scratch on synthetic additions,
// then LoRA-tuned on the sums in words (needs no files).
struct DemoOptions {
  std::string dir = "demo-out";  // everything is written here
  bool synthetic = false;
  int pretrain_steps = 200;      // synthetic: full-training steps
  int lora_steps = 0;            // 0: 40 (fine-tune) or 80 (synthetic)
  int threads = 0;
  std::string model, tokenizer, data, prompt;
};
void run_demo(const DemoOptions& options);

}  // namespace leantune
