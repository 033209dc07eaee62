#include "plan/flops.h"

#include <cctype>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/memory_plan.h"
#include "train/run_limits.h"
#include "core/threads.h"
#include "kernels/cpu/gemm.h"
#include "plan/machine_cache.h"

namespace lt {

PhaseFlops training_flops_per_token(const ModelConfig& m, const TrainModelOptions& o) {
  const bool lora = o.method == Method::Lora;
  const double L = m.n_layers, T = o.seq_len;
  // keys a query attends on average: (T+1)/2 causally, fewer under a sliding window W < T (the
  // first W queries 1..W keys, the others W), averaged over the layers (some may not slide)
  double keys = 0;
  for (int l = 0; l < m.n_layers; ++l) {
    const double W = m.attention_window(l);
    keys += W <= 0 || W >= T ? (T + 1) / 2.0 : (W * (W + 1) / 2.0 + (T - W) * W) / T;
  }
  keys /= L;
  double attn_lin = 0, mlp_lin = 0, attn_lora = 0, mlp_lora = 0;
  double down_kept = 0;  // a replay's skipped work: the down projection but its LoRA's xa (TrainModel)
  for (Proj p : kProjs) {
    const double in = double(m.linear_shape(p).first), out = double(m.linear_shape(p).second);
    const double f = 2 * in * out;
    const double share = o.lora.layers_to_transform.empty() ? 1.0 : double(o.lora.layers_to_transform.size()) / L;
    const bool adapted = lora && lora_targets(o.lora, p);
    const double lf = adapted ? 2.0 * o.lora.r * (in + out) * share : 0;
    if (p == Proj::Down && !m.sandwich_norms && !(adapted && o.lora.use_dora))
      down_kept = f + (adapted ? 2.0 * o.lora.r * out * share : 0);
    (proj_in_attention(p) ? attn_lin : mlp_lin) += f;
    (proj_in_attention(p) ? attn_lora : mlp_lora) += lf;
  }
  const double attn = 2.0 * 2.0 * m.q_dim() * keys;  // QKᵀ and PV
  const double head = 2.0 * m.dim * m.vocab_size;
  PhaseFlops p;
  const double layer_attn = attn_lin + attn_lora + attn, layer_mlp = mlp_lin + mlp_lora;
  p.forward = L * (layer_attn + layer_mlp) + head;
  const double w_grad = lora ? 1.0 : 2.0;  // dX only, or dX and dW
  p.backward = L * (w_grad * (attn_lin + mlp_lin) + 2.0 * (attn_lora + mlp_lora) + 2.5 * attn) +
               (lora ? 1.0 : 2.0) * head;
  double replay = 0;
  switch (o.checkpointing) {
    case Checkpointing::None: break;
    case Checkpointing::EveryK: replay = std::ceil(L / o.checkpoint_every) * (layer_attn + layer_mlp - down_kept); break;
    case Checkpointing::Attention: replay = L * layer_attn; break;
    case Checkpointing::Mlp: replay = L * (layer_mlp - down_kept); break;
  }
  p.recompute = replay;
  return p;
}

double calibrated_gemm_gflops() {
  return cached_measurement(fmt::format("gemm_f32_gflops_threads_{}", num_threads()), [] {
    const int M = 512, N = 1536, K = 576;
    std::vector<float> a(size_t(M) * K, 0.01f), b(size_t(N) * K, 0.02f), c(size_t(M) * N);
    cpu::gemm_f32(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);  // warm-up
    int reps = 0;
    auto t0 = std::chrono::steady_clock::now();
    double s = 0;
    while (s < 0.2) {
      cpu::gemm_f32(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
      ++reps;
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    return 2.0 * M * N * K * reps / s / 1e9;
  });
}

const std::vector<GpuProfile>& gpu_profiles() {
  // Dense bf16 tensor-core peaks and HBM/GDDR bandwidth from the vendors' data sheets; prices are
  // typical on-demand cloud rates per GPU-hour in 2026 and meant to be edited.
  static const std::vector<GpuProfile> p = {
      {"A100 40GB", 40, 312, 1555, 1.50}, {"A100 80GB", 80, 312, 2039, 1.90}, {"H100 80GB", 80, 989, 3350, 2.50},
      {"H200 141GB", 141, 989, 4800, 3.20}, {"L4 24GB", 24, 121, 300, 0.70}, {"RTX 4090 24GB", 24, 165, 1008, 0.45}};
  return p;
}

ActuaryEstimate actuary_estimate(const ModelConfig& m, const TrainModelOptions& o, size_t predicted_bytes,
                                 double tokens, double cpu_price, const std::vector<GpuProfile>& gpus) {
  LT_CHECK(std::isfinite(tokens) && tokens > 0, "actuary: tokens to train: {} is out of range: it must be > 0", tokens);
  LT_CHECK(std::isfinite(cpu_price) && cpu_price >= 0, "actuary: --price-per-hour: {} is out of range: it must be "
           ">= 0 (US dollars per hour)", cpu_price);
  for (const auto& g : gpus)
    LT_CHECK(std::isfinite(g.price_per_hour) && g.price_per_hour >= 0, "actuary: GPU profile {}: price_per_hour {} is "
             "out of range: it must be >= 0 (US dollars per GPU-hour; --gpu-price sets it)", g.name, g.price_per_hour);
  ActuaryEstimate e;
  e.flops = training_flops_per_token(m, o);
  const double total = e.flops.total();
  e.step_tokens = double(o.micro_batch) * o.seq_len;
  e.gemm_gflops = calibrated_gemm_gflops();
  e.threads = num_threads();
  e.step_seconds = total * e.step_tokens / (e.gemm_gflops * 1e9);
  e.tokens = tokens;
  e.cpu_hours = total * tokens / (e.gemm_gflops * 1e9) / 3600;
  e.cpu_price_per_hour = cpu_price;
  e.cpu_cost_usd = e.cpu_hours * cpu_price;
  for (const auto& g : gpus.empty() ? gpu_profiles() : gpus) {
    const double secs = total * tokens / (g.bf16_tflops * 1e12 * 0.4);
    const bool fits = double(predicted_bytes) <= g.memory_gib * double(1ull << 30);
    e.gpus.push_back({g, fits, secs / 3600, secs / 3600 * g.price_per_hour / tokens * 1000});
  }
  return e;
}

std::string format_actuary(const ActuaryEstimate& e) {
  const PhaseFlops& f = e.flops;
  std::string out = fmt::format(
      "FLOPs per trained token: forward {:.3g}, backward {:.3g}, recompute {:.3g}, total {:.3g}\n", f.forward,
      f.backward, f.recompute, f.total());
  out += fmt::format("this machine: f32 GEMM {:.0f} GFLOP/s with {} threads (calibrated); at that rate a step of {:.0f} "
                     "tokens takes >= {:.3g} s and {:.3g} tokens take >= {:.3g} h",
                     e.gemm_gflops, e.threads, e.step_tokens, e.step_seconds, e.tokens, e.cpu_hours);
  if (e.cpu_price_per_hour > 0)
    out += fmt::format(", ${:.4g} (${:.3g} per 1,000 tokens)", e.cpu_cost_usd, e.cpu_cost_usd / e.tokens * 1000);
  out += "\n(a lower bound: GEMM speed for every FLOP; the run's measured tokens/s in metrics.jsonl is the truth)\n\n";
  out += "ESTIMATE on GPUs (bf16 peak at 40% utilisation; memory as planned here in f32, which bf16 roughly halves):\n";
  out += fmt::format("{:<14} {:>8} {:>7} {:>12} {:>10} {:>14}\n", "gpu", "memory", "fits", "time", "$/h", "$ per 1k tok");
  for (const auto& g : e.gpus)
    out += fmt::format("{:<14} {:>6.0f}GB {:>7} {:>10.3g} h {:>10.2f} {:>14.3g}\n", g.gpu.name, g.gpu.memory_gib,
                       g.fits ? "yes" : "no", g.hours, g.gpu.price_per_hour, g.usd_per_1k_tokens);
  return out;
}

std::string actuary_report(const ModelConfig& m, const TrainModelOptions& o, size_t predicted_bytes,
                           double tokens, double cpu_price, const std::vector<GpuProfile>& gpus) {
  return format_actuary(actuary_estimate(m, o, predicted_bytes, tokens, cpu_price, gpus));
}

const GpuProfile& find_gpu_profile(const std::string& name) {
  auto norm = [](std::string s) {
    std::string o;
    for (char ch : s)
      if (ch != ' ' && ch != '-' && ch != '_') o += char(std::tolower(static_cast<unsigned char>(ch)));
    return o;
  };
  const std::string n = norm(name);
  std::vector<const GpuProfile*> prefix;
  std::string known;
  for (const auto& g : gpu_profiles()) {
    if (norm(g.name) == n) return g;
    if (!n.empty() && norm(g.name).rfind(n, 0) == 0) prefix.push_back(&g);
    known += (known.empty() ? "'" : ", '") + g.name + "'";
  }
  if (prefix.size() == 1) return *prefix[0];
  fail("{} GPU profile '{}'; the known profiles are: {}", prefix.empty() ? "unknown" : "ambiguous", name, known);
}

std::vector<RankRow> rank_rows(const ModelConfig& m, const TrainModelOptions& base) {
  std::vector<RankRow> rows;
  using Sets = std::vector<std::pair<std::string, std::vector<std::string>>>;
  const Sets sets = m.fused_proj ? Sets{{"qkv_proj", {"qkv_proj"}},  // Phi-3's fused modules
                                        {"attention (qkv,o)", {"qkv_proj", "o_proj"}},
                                        {"all-linear", {"all-linear"}}}
                                 : Sets{{"q_proj,v_proj", {"q_proj", "v_proj"}},
                                        {"attention (q,k,v,o)", {"q_proj", "k_proj", "v_proj", "o_proj"}},
                                        {"all-linear", {"all-linear"}}};
  for (const auto& [label, mods] : sets) {
    for (int r : {4, 8, 16, 32, 64}) {
      TrainModelOptions o = base;
      o.method = Method::Lora;
      o.lora.r = r;
      o.lora.target_modules = mods;
      RankRow row{label, r};
      if (r > max_lora_rank(m, o.lora)) {  // a rank above min(in, out) of a target is refused by train
        row.max_rank = max_lora_rank(m, o.lora);
        rows.push_back(row);
        continue;
      }
      MemoryPlan p = plan_training(m, o);
      row.params = p.arena_bytes(Category::TrainableParams) / sizeof(float);
      // parameters + gradients + two moments + the saved x·Aᵀ activations
      row.bytes = p.arena_bytes(Category::TrainableParams) + p.arena_bytes(Category::Grads) +
                  p.arena_bytes(Category::OptimizerState);
      for (const auto& b : p.buffers)
        if (b.name.find(".xa.") != std::string::npos) row.bytes += align_up(b.bytes);
      PhaseFlops with = training_flops_per_token(m, o);
      o.lora.target_modules = {"__none__"};
      PhaseFlops without = training_flops_per_token(m, o);
      row.flops_increase_percent = 100.0 * (with.total() - without.total()) / without.total();
      rows.push_back(row);
    }
  }
  return rows;
}

std::string format_rank_rows(const std::vector<RankRow>& rows) {
  std::string out = fmt::format("{:<26} {:>5} {:>14} {:>14} {:>16}\n", "targets", "r", "trainable", "memory",
                                "FLOPs/token +%");
  for (const auto& row : rows) {
    if (row.max_rank > 0)
      out += fmt::format("{:<26} {:>5} {:>14}\n", row.targets, row.r, fmt::format("(r > {})", row.max_rank));
    else
      out += fmt::format("{:<26} {:>5} {:>14} {:>14} {:>15.2f}%\n", row.targets, row.r, row.params,
                         format_bytes(row.bytes), row.flops_increase_percent);
  }
  return out;
}

std::string rank_report(const ModelConfig& m, const TrainModelOptions& base) { return format_rank_rows(rank_rows(m, base)); }

}  // namespace lt
