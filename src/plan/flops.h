// The actuary's arithmetic: FLOPs per trained token of each phase (forward, backward,
// recomputation) from the model shape and the run, a calibration of this machine's GEMM rate,
// GPU profiles with editable prices, and the rank report (what each LoRA rank and target set
// costs in parameters, memory and FLOPs). Everything here is an estimate and says so.
#pragma once
#include <string>
#include <vector>

#include "core/model_config.h"
#include "train/train_model.h"

namespace lt {

struct PhaseFlops {
  double forward = 0, backward = 0, recompute = 0;  // per trained token
  double total() const { return forward + backward + recompute; }
};

// Multiply-adds count 2 FLOPs. Causal attention over T tokens averages (T+1)/2 keys per query
// (a sliding window W < T: about W, so it grows linearly in T); its backward is 2.5x its forward
// (flash style: scores recomputed, four products).
PhaseFlops training_flops_per_token(const ModelConfig& m, const TrainModelOptions& o);

// Measured f32 GEMM rate of this machine (GFLOP/s, current thread count) on a model-like shape,
// over about 0.2 s. Cached in $XDG_CACHE_HOME/leantune (or ~/.cache/leantune) per thread count.
double calibrated_gemm_gflops();

struct GpuProfile {
  std::string name;
  double memory_gib, bf16_tflops, bandwidth_gbs, price_per_hour;
};
const std::vector<GpuProfile>& gpu_profiles();  // A100 40/80, H100, H200, L4, RTX 4090
// The profile named `name` (case, spaces and dashes ignored; a unique prefix such as "h100" will do);
// lt::Error listing the known names otherwise.
const GpuProfile& find_gpu_profile(const std::string& name);

// `leantune plan --actuary` as data: FLOPs per token, this machine's lower bound, GPU estimates.
struct GpuEstimate {
  GpuProfile gpu;
  bool fits = false;             // the predicted bytes fit its memory
  double hours = 0;              // at 40% of its bf16 peak
  double usd_per_1k_tokens = 0;
};
struct ActuaryEstimate {
  PhaseFlops flops;              // per trained token
  double gemm_gflops = 0;        // calibrated_gemm_gflops()
  int threads = 0;
  double step_tokens = 0, step_seconds = 0, tokens = 0, cpu_hours = 0;
  double cpu_price_per_hour = 0, cpu_cost_usd = 0;
  std::vector<GpuEstimate> gpus;
};
// lt::Error when tokens <= 0 or a price is negative or not finite.
ActuaryEstimate actuary_estimate(const ModelConfig& m, const TrainModelOptions& o, size_t predicted_bytes,
                                 double tokens_to_train, double cpu_price_per_hour,
                                 const std::vector<GpuProfile>& gpus = {});  // empty: every profile
std::string format_actuary(const ActuaryEstimate& e);

// `leantune plan --rank-report` as data: per target set and rank, what LoRA costs.
struct RankRow {
  std::string targets;
  int r = 0;
  int max_rank = 0;              // > 0: r is above it and train refuses it (the other fields are 0)
  size_t params = 0, bytes = 0;  // trainable parameters; their + gradients + moments + saved x·Aᵀ bytes
  double flops_increase_percent = 0;
};
std::vector<RankRow> rank_rows(const ModelConfig& m, const TrainModelOptions& o);
std::string format_rank_rows(const std::vector<RankRow>& rows);

// Text tables for `leantune plan --actuary` / `--rank-report`: the formats of the above.
std::string actuary_report(const ModelConfig& m, const TrainModelOptions& o, size_t predicted_bytes,
                           double tokens_to_train, double cpu_price_per_hour,
                           const std::vector<GpuProfile>& gpus = {});  // empty: every profile
std::string rank_report(const ModelConfig& m, const TrainModelOptions& o);

}  // namespace lt
