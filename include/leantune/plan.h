// Memory plans and estimates, computed before anything is allocated: every buffer an inference or
// training run needs (name, category, bytes, lifetime), the predicted peak, what a run costs in
// FLOPs, time and money on this machine and on GPUs, what each LoRA rank costs, and one rank's
// share under ZeRO. The engine allocates exactly these buffers; `leantune info` and `leantune
// plan` print them. A folder with only config.json is enough: no weights are read.
//
// Usage:
//   leantune::TrainingPlanOptions o;
//   o.cost_estimate = true;
//   leantune::TrainingPlan p = leantune::plan_training(
//       {"--base_model", "models/llama3-8b", "--method", "lora", "--lora_r", "16"}, o);
//   std::printf("peak %s\n%s", leantune::format_bytes(p.predicted_peak_bytes).c_str(),
//               p.memory.format_table(false).c_str());
//   for (const leantune::PlanBuffer& b : p.memory.buffers) use(b.name, b.category, b.bytes);
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "leantune/engine.h"
#include "leantune/model.h"
#include "leantune/sequence.h"
#include "leantune/trainer.h"

namespace leantune {

// Each category is one arena (one mapping) in the engine; MappedWeights are read in place from files.
enum class BufferCategory {
  FrozenWeights, MappedWeights, TrainableParams, Grads, OptimizerState, Activations, Recompute, LossChunk,
  KVCache, Workspace, Data,
};
constexpr int kNumBufferCategories = 11;
// "frozen_weights", "mapped_weights", "trainable_params", "gradients", "optimizer_state", ...
std::string_view category_name(BufferCategory c);

enum class BufferLifetime { Persistent, Step, Layer, Phase };
std::string_view lifetime_name(BufferLifetime l);  // "persistent", "step", "layer", "phase"

struct PlanBuffer {
  std::string name;  // the HF tensor name for weights, else the engine's ("act.x", "kv_cache.0.k", ...)
  BufferCategory category = BufferCategory::Workspace;
  size_t bytes = 0;
  BufferLifetime lifetime = BufferLifetime::Persistent;
};

struct MemoryPlan {
  std::vector<PlanBuffer> buffers;  // in allocation order

  // Bytes of category c's arena (each buffer rounded up to 64 bytes).
  size_t category_bytes(BufferCategory c) const;
  // Bytes of every anonymous arena (MappedWeights excluded).
  size_t arena_bytes() const;
  // The table `leantune info` / `plan` print: one row per buffer (when per_buffer), then one per
  // category and the total.
  std::string format_table(bool per_buffer) const;
};

// The resident memory a leantune process holds before any model exists (runtime libraries, the
// thread team), measured once per machine and thread count by a probe process, then cached under
// ~/.cache/leantune. `threads` as ModelOptions::threads.
size_t process_baseline_bytes(int threads = 0);
// What that probe process (the program's hidden `baseline-probe` command) runs: start the thread
// team, run one small GEMM of each kind the engine uses, and return this process's peak resident bytes.
size_t probe_process_baseline(int threads);

// ---- inference ----

struct InferencePlanOptions {
  SequenceOptions sequence;       // context and prefill block (0: the defaults Sequence uses)
  Quantization quantization = Quantization::None;
  bool double_quant = false;
  Weights weights = Weights::F32;  // as ModelOptions::weights
  int threads = 0;                // the baseline's thread count (only read when measured)
  bool measure_baseline = true;   // false: baseline_bytes and predicted_peak_bytes stay 0
};

struct InferencePlan {
  int context = 0, prefill_block = 0;  // as resolved
  MemoryPlan memory;                   // weights, one sequence's KV cache, activations, workspace
  size_t baseline_bytes = 0;
  size_t predicted_peak_bytes = 0;     // memory.arena_bytes() + baseline_bytes
};

// The plan of a Model loaded from `model_path` with one Sequence of options.sequence.
// leantune::Error naming the file or option that is wrong.
InferencePlan plan_inference(const std::string& model_path, const InferencePlanOptions& options = {});

// {"categories": {name: bytes}, "context", "prefill_block", "arena_bytes", "baseline_bytes",
//  "predicted_peak_bytes"} (one key per line), as `leantune plan --generate --json` prints it.
std::string to_json(const InferencePlan& plan);

// ---- serving ----

// What `leantune serve` with these options allocates (the 002 seed's inference memory: weights +
// KV cache growing with concurrency, length and beams): the model's weights (and the draft's), the
// paged KV pool (its blocks resolved as the Engine resolves them: max_seqs full contexts by
// default, each beam of a beam search one of max_seqs), the batch buffers, and the adapters'
// budget ("adapters.resident": loaded on demand up to EngineOptions::adapter_memory_bytes).
// options.draft_model is not read; give the draft's path instead.
struct ServePlan {
  int context = 0, block_size = 0, kv_blocks = 0, max_seqs = 0;
  size_t engine_bytes = 0;  // the KV pools and batch buffers: what EngineStats::engine_bytes reports
  MemoryPlan memory;
};
ServePlan plan_serve(const std::string& model_path, const EngineOptions& options, const std::string& draft_path = "");
// {"categories", "context", "block_size", "kv_blocks", "max_seqs", "engine_bytes", "arena_bytes"}.
std::string to_json(const ServePlan& plan);

// ---- training ----

struct GpuProfile {
  std::string name;
  double memory_gib = 0, bf16_tflops = 0, bandwidth_gbs = 0, price_per_hour = 0;  // US dollars per GPU-hour
};
// A100 40/80, H100, H200, L4, RTX 4090 (data-sheet peaks; typical on-demand prices, meant to be edited).
std::vector<GpuProfile> gpu_profiles();
// The profile named `name` (case, spaces and dashes ignored; a unique prefix such as "h100" will
// do); leantune::Error listing the known names otherwise.
GpuProfile find_gpu_profile(const std::string& name);

struct GpuEstimate {
  GpuProfile gpu;
  bool fits = false;             // the predicted peak fits its memory
  double hours = 0;              // bf16 peak at 40% utilisation
  double usd_per_1k_tokens = 0;
};

// An ESTIMATE of what training costs: FLOPs per trained token, a lower bound of the time on this
// machine (every FLOP at its calibrated f32 GEMM rate), and GPU estimates.
struct CostEstimate {
  double forward_flops = 0, backward_flops = 0, recompute_flops = 0;  // per trained token
  double total_flops() const { return forward_flops + backward_flops + recompute_flops; }
  double gemm_gflops = 0;        // this machine, measured once per thread count and cached
  int threads = 0;
  double step_tokens = 0, step_seconds = 0;
  double tokens = 0;             // tokens to train
  double cpu_hours = 0;
  double cpu_price_per_hour = 0; // 0: no price given
  double cpu_cost_usd = 0;
  std::vector<GpuEstimate> gpus;
};
// The text `leantune plan --actuary` prints.
std::string format_cost_estimate(const CostEstimate& c);

// One row of the LoRA rank report: a target set and rank, and what it costs.
struct RankReportRow {
  std::string targets;           // "q_proj,v_proj", "attention (q,k,v,o)", "all-linear"
  int r = 0;
  int max_rank = 0;              // > 0: r is above it (min(in, out) of a target) and train refuses it
  uint64_t trainable_params = 0;
  size_t bytes = 0;              // parameters, gradients, AdamW moments and the saved x·Aᵀ
  double flops_increase_percent = 0;  // FLOPs per token over the same run without LoRA
};
// The table `leantune plan --rank-report` prints.
std::string format_rank_report(const std::vector<RankReportRow>& rows);

// One rank's memory under ZeRO data parallelism, against one process's.
struct ZeroPlan {
  int stage = 0, ranks = 1;
  bool overlap = false, offload_to_disk = false;
  int n_layers = 0;
  size_t trainable_floats = 0;   // Ψ
  size_t shard_floats = 0;       // S = ceil(Ψ / ranks)
  size_t largest_unit_floats = 0;  // M
  size_t overlap_slot_floats = 0;  // X (0 without overlap)
  MemoryPlan per_rank;           // one rank's whole plan
  std::vector<PlanBuffer> engine_buffers;  // the ZeRO engine's own buffers on one rank
  size_t offloaded_bytes = 0;    // moved to disk by offload_optimizer: disk
};

struct TrainingPlanOptions {
  bool cost_estimate = false;    // fill TrainingPlan::cost
  double tokens = 0;             // tokens to train; 0: micro-batch × sequence_len × accumulation × max_steps
  double price_per_hour = 0;     // this machine's price, US dollars per hour; 0: none
  std::vector<GpuProfile> gpus;  // the GPUs to estimate; empty: every profile
  bool rank_report = false;      // fill TrainingPlan::rank_report
  int zero_ranks = 0;            // > 0: fill TrainingPlan::zero for this many ranks (also when the run sets zero_stage)
  bool measure_baseline = true;  // false: the baseline counts as 0 bytes
};

// lora_rank_policy: adaptive: memory at the starting rank (lora_r, what the arenas hold for the
// whole run) and at the final budget (every module at lora_target_r; the split across modules
// follows the importance, so a run's own count, in its ledger.json, differs by the modules' sizes).
struct AdaptiveRankPlan {
  int init_r = 0, target_r = 0;
  size_t trainable_params_init = 0, trainable_params_final = 0;
  size_t gradient_bytes_init = 0, gradient_bytes_final = 0;
  size_t optimizer_bytes_init = 0, optimizer_bytes_final = 0;
  size_t importance_bytes = 0;  // adaptive rank's planned rows: two EMAs per LoRA entry, the masks
  // The optimizer state (arena, pages) after the release at the final budget, at most: which modules
  // keep which ranks is decided during the run, so this places the budget's components in the widest
  // modules (the run's ledger.json measures the figure: optimizer_resident_after_release).
  size_t optimizer_bytes_after_release_bound = 0;
};

struct TrainingPlan {
  // the run, as `leantune train` with the same arguments would start it (after a memory budget's fit)
  std::string base_model, method, checkpointing;
  int lora_r = 0, micro_batch_size = 0, sequence_len = 0, gradient_accumulation_steps = 0, max_steps = 0;
  int zero_stage = -1;
  MemoryPlan memory;
  size_t data_bytes = 0;         // tokenizer tables and tokenized examples (0 without datasets)
  size_t baseline_bytes = 0;
  size_t predicted_peak_bytes = 0;  // memory.arena_bytes() + data_bytes + baseline_bytes
  std::optional<CostEstimate> cost;
  std::vector<RankReportRow> rank_report;
  std::optional<ZeroPlan> zero;
  std::optional<AdaptiveRankPlan> adaptive_rank;
};

// The plan of the run `leantune train ARGS` would start: ARGS are `[CONFIG.yaml] [--key value ...]`
// as train takes them. Reads the model's config only, and the tokenizer and datasets when given
// (their bytes count). With memory_budget, the run is fitted first (auto) or leantune::Error lists
// the changes that fit. leantune::Error naming the key, file or value that is wrong.
TrainingPlan plan_training(const std::vector<std::string>& train_args, const TrainingPlanOptions& options = {});
// The same for a run given as a Trainer takes it (TrainerConfig: a YAML file or YAML text, then flags).
TrainingPlan plan_training_config(const TrainerConfig& config, const TrainingPlanOptions& options = {});

// {"categories", "arena_bytes", "data_bytes", "baseline_bytes", "predicted_peak_bytes",
//  "peak_phase", and with buffers "buffers": [{name, category, bytes, lifetime}]}, as
// `leantune plan --json` prints it.
std::string to_json(const TrainingPlan& plan, bool buffers);
// The text `leantune plan` prints for an adaptive-rank run: memory at lora_r and at lora_target_r.
std::string format_adaptive_rank_plan(const AdaptiveRankPlan& a);
// The text `leantune plan --zero S --ranks N` prints below the plan.
std::string format_zero_plan(const TrainingPlan& plan);
// Writes the plan as a self-contained HTML page with its chart (atomically); leantune::Error
// naming the path when it cannot be written.
void write_plan_html(const TrainingPlan& plan, const std::string& path);

}  // namespace leantune
