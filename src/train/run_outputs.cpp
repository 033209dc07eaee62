// The progress line and the end-of-run outputs of every training loop (train/run_outputs.h).
#include "train/run_outputs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <map>
#include <unordered_map>

#include "core/hf_cache.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/atomic_file.h"
#include "io/peft_adapter.h"
#include "io/quant_model.h"
#include "io/fused_proj.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;

namespace lt {

std::string format_eta(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  int t = int(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02d}:{:02d}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{:02d}:{:02d}", t / 60, t % 60);
}

void print_step_progress(const StepProgress& p, bool tty, int logging_steps) {
  if (tty) {
    int w = 24, filled = int(double(p.step) / p.total_steps * w);
    fmt::print("\r[{}{}] {}/{} loss {:.4f} lr {:.2e} {:.0f} tok/s mem {} ETA {}   ", std::string(size_t(filled), '#'),
               std::string(size_t(w - filled), '.'), p.step, p.total_steps, p.loss, p.lr, p.tokens_per_s,
               format_bytes(p.rss_bytes), format_eta(p.eta_s));
    std::fflush(stdout);
  } else if (p.step % logging_steps == 0 || p.step == p.total_steps) {
    fmt::print("step {:>5}/{}  loss {:.4f}  lr {:.3e}  grad_norm {:.3f}  {:.0f} tok/s  mem {}  eta {}\n", p.step,
               p.total_steps, p.loss, p.lr, p.grad_norm, p.tokens_per_s, format_bytes(p.rss_bytes), format_eta(p.eta_s));
    std::fflush(stdout);
  }
}

namespace {

// PiSSA / OLoRA trained A, B (for the residual W − s·B₀·A₀) as a plain LoRA of rank 2r on the
// original W, as PEFT's save_pretrained(path_initial_model_for_weight_conversion=...) and
// LoraModel.subtract_mutated_init: A' = [A; A₀], B' = [B | −B₀], so that s·B'·A' = s·(B·A − B₀·A₀)
// and W + s·B'·A' = W − s·B₀·A₀ + s·B·A; r and lora_alpha doubled (lora_alpha · √2 with rsLoRA),
// which keeps the scale; init_lora_weights true. DoRA's magnitudes and biases are kept as they are
// (the adapted weight is the same, so is its norm).
void convert_mutated_lora(LoraConfig& lc, std::vector<AdapterTensor>& ts, std::vector<std::vector<float>>& store,
                          const TrainModel& model) {
  const int64_t R = lc.r;
  store.reserve(ts.size());
  for (AdapterTensor& t : ts) {
    const bool is_A = t.key.find(".lora_A.") != std::string::npos, is_B = t.key.find(".lora_B.") != std::string::npos;
    if (!is_A && !is_B) continue;
    const float* init = model.initial_lora(t.key);
    LT_ASSERT(init);
    const int64_t rows = t.shape[0], cols = t.shape[1];
    auto& v = store.emplace_back(size_t(rows * cols * 2));
    if (is_A) {  // (2R, in): A's rows, then A₀'s
      std::copy(t.data, t.data + rows * cols, v.begin());
      std::copy(init, init + rows * cols, v.begin() + rows * cols);
      t.shape = {2 * R, cols};
    } else {  // (out, 2R): per row B's, then −B₀'s
      for (int64_t o = 0; o < rows; ++o)
        for (int64_t k = 0; k < R; ++k) {
          v[size_t(o * 2 * R + k)] = t.data[o * R + k];
          v[size_t(o * 2 * R + R + k)] = -init[o * R + k];
        }
      t.shape = {rows, 2 * R};
    }
    t.data = v.data();
  }
  lc.r *= 2;
  lc.alpha *= lc.use_rslora ? std::sqrt(2.0f) : 2.0f;
  lc.init = "default";
}

// Adaptive rank: each module's A rows and B columns of its active components only, its rank in
// rank_pattern and an alpha in alpha_pattern that keeps the scale training used (PEFT computes
// alpha_m / r_m, or alpha_m / sqrt(r_m) with rsLoRA, per module): alpha · r_m / r (· sqrt(r_m / r)).
void truncate_ranks(const LoraConfig& lc, RankPattern& pattern, std::vector<AdapterTensor>& ts,
                    std::vector<std::vector<float>>& store, const RankAllocator& ra) {
  std::map<std::string, size_t> at;
  for (size_t i = 0; i < ts.size(); ++i) at[ts[i].key] = i;
  store.reserve(2 * ra.modules().size());  // the tensors point into it
  const std::string prefix = "base_model.model.";
  for (const RankModule& m : ra.modules()) {
    const int k = m.active();
    if (k == m.r) continue;
    AdapterTensor& A = ts[at.at(m.name + ".lora_A.weight")];
    AdapterTensor& B = ts[at.at(m.name + ".lora_B.weight")];
    auto& va = store.emplace_back(size_t(k) * size_t(m.in));
    auto& vb = store.emplace_back(size_t(m.out) * size_t(k));
    const size_t in = size_t(m.in), r = size_t(m.r), kk = size_t(k);
    for (size_t i = 0, j = 0; i < r; ++i) {
      if (!m.keep[i]) continue;
      std::copy(A.data + i * in, A.data + (i + 1) * in, va.begin() + ptrdiff_t(j * in));
      for (size_t o = 0; o < size_t(m.out); ++o) vb[o * kk + j] = B.data[o * r + i];
      ++j;
    }
    A.shape = {k, m.in};
    A.data = va.data();
    B.shape = {m.out, k};
    B.data = vb.data();
    const std::string key = m.name.rfind(prefix, 0) == 0 ? m.name.substr(prefix.size()) : m.name;
    pattern.rank[key] = k;
    pattern.alpha[key] = lc.use_rslora ? lc.alpha * std::sqrt(float(k) / float(m.r))
                                       : lc.alpha * float(k) / float(m.r);
  }
}

void write_adapter(const TrainConfig& c, TrainModel& model, const TrainedTensorFn& trained, bool print,
                   const RankAllocator* ranks) {
  std::vector<AdapterTensor> ts;
  const auto& params = model.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    ts.push_back({p.name.rfind("base_model.", 0) == 0 ? p.name : "base_model.model." + p.name, p.shape, trained(i)});
  }
  LoraConfig lc = lora_config_for_peft(c.lora, model.config().fused_proj);  // Phi-3's all-linear as PEFT names it
  std::vector<std::vector<float>> converted;
  if (lc.mutates_base()) convert_mutated_lora(lc, ts, converted, model);
  RankPattern pattern;
  if (ranks) truncate_ranks(lc, pattern, ts, converted, *ranks);
  const std::string adir = (fs::path(c.output_dir) / "adapter").string();
  fs::create_directories(adir);
  save_peft_adapter(adir, lc, c.base_model, ts, pattern);
  if (print)
    fmt::print("saved the PEFT adapter to {}{}{}\n", adir, c.lora.mutates_base() ? fmt::format(" (converted from {} "
               "to plain LoRA of rank {} on the original base)", c.lora.init, lc.r) : std::string(),
               ranks ? fmt::format(" (adaptive rank: total rank {} of {}, per module in rank_pattern)",
                                   ranks->active_total(), ranks->modules().size() * size_t(lc.r)) : std::string());
}

// QAT: OUTPUT_DIR/model_int4, the trained weights as a 4-bit model folder (io/quant_model.h; int4 or
// int4_asym in blocks of qat_group_size): its linears decode to exactly the fake-quantized weights
// the last step's forward used (quant/int4.h).
void write_int4_model(const TrainConfig& c, const TrainModel& model, const std::vector<TensorInfo>& ts) {
  TensorSet set;
  set.source = c.base_model;
  for (const TensorInfo& t : ts) set.add(t);
  const QuantSpec spec{c.qat_symmetric ? QuantType::Int4 : QuantType::Int4Asym, c.qat_group_size, false};
  const std::string dir = (fs::path(c.output_dir) / "model_int4").string();
  quantize_model_tensors(model.config(), set, resolve_model_path(c.base_model), spec, dir);
}

// Every weight of the plan, trained or frozen: a Hugging Face folder when the base is one.
void write_full_model(const TrainConfig& c, const MemoryPlan& plan, TrainModel& model, const TensorSet& base,
                      const TrainedTensorFn& trained, bool print) {
  std::unordered_map<std::string, size_t> trainable;
  for (size_t i = 0; i < model.params().size(); ++i) trainable[model.params()[i].name] = i;
  const fs::path mdir = fs::path(c.output_dir) / "model";
  fs::create_directories(mdir);
  std::vector<TensorInfo> ts;
  for (const auto& b : plan.buffers) {
    if (b.cat != Category::FrozenWeights && b.cat != Category::TrainableParams) continue;
    if (b.name.rfind("base_model.", 0) == 0) continue;
    const TensorInfo* src = base.find(b.name);
    LT_ASSERT(src);
    const auto it = trainable.find(b.name);
    TensorInfo t;
    t.name = b.name; t.dtype = DType::F32; t.shape = src->shape; t.nbytes = b.bytes;
    t.data = it != trainable.end() ? trained(it->second) : model.weight(b.name);
    ts.push_back(t);
  }
  if (c.qat != "none") write_int4_model(c, model, ts);
  std::vector<std::vector<uint8_t>> fused;
  fuse_proj_tensors(model.config(), ts, fused);  // Phi-3: qkv_proj / gate_up_proj as the base has them
  save_safetensors((mdir / "model.safetensors").string(), ts);
  const std::string base_path = resolve_model_path(c.base_model);
  const fs::path base_dir = fs::is_directory(base_path) ? fs::path(base_path) : fs::path(base_path).parent_path();
  const bool hf = fs::exists(base_dir / "config.json");
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                        "chat_template.jinja", "generation_config.json"})
    if (fs::exists(base_dir / f)) write_text_file_atomic((mdir / f).string(), read_text_file((base_dir / f).string()));
  if (print)
    fmt::print("saved the fine-tuned model to {}{}\n", mdir.string(),
               hf ? "" : " (tensors only: a llama2.c base has no config.json to copy)");
}

}  // namespace

void write_trained_model(const TrainConfig& c, const MemoryPlan& plan, TrainModel& model, const TensorSet& base,
                         const TrainedTensorFn& trained, bool print, const RankAllocator* ranks) {
  if (c.method == Method::Lora) write_adapter(c, model, trained, print, ranks);
  else write_full_model(c, plan, model, base, trained, print);
}

void write_ledger(const std::string& out_dir, const MemoryPlan& plan, const Ledger& ledger, size_t baseline,
                  size_t data_bytes, const Arenas* engine, const RankAllocator* ranks) {
  nlohmann::json j = nlohmann::json::parse(ledger.to_json());
  for (size_t k = 0; k < kNumCategories; ++k)
    if (size_t n = plan.arena_bytes(Category(k))) j["planned"][std::string(category_name(Category(k)))] = n;
  if (engine) {
    std::vector<unsigned char> scratch;
    for (size_t k = 0; k < kNumCategories; ++k) {
      if (!engine->allocated_bytes(Category(k))) continue;
      auto& m = j["max_resident"][std::string(category_name(Category(k)))];
      m = (m.is_number() ? m.get<size_t>() : size_t(0)) + engine->resident_bytes(Category(k), scratch);
    }
  }
  j["planned"]["data"] = data_bytes;
  j["measured_data_bytes"] = data_bytes;
  j["baseline_bytes"] = baseline;
  j["predicted_peak_bytes"] = baseline + plan.total_bytes() + data_bytes;
  if (ranks) j["adaptive_rank"] = adaptive_rank_json(*ranks);
  write_text_file_atomic((fs::path(out_dir) / "ledger.json").string(), j.dump(1));
}

nlohmann::json adaptive_rank_json(const RankAllocator& ranks) {
  const size_t f0 = ranks.init_lora_floats(), f1 = ranks.active_lora_floats(), b = sizeof(float);
  const RankReleaseStats& rs = ranks.release_stats();
  return {{"modules", ranks.modules().size()},
          {"total_rank_init", ranks.modules().size() * size_t(ranks.options().init_r)},
          {"total_rank_final", ranks.active_total()},
          {"lora_params_init", f0}, {"lora_params_final", f1},
          {"gradient_bytes_init", f0 * b}, {"gradient_bytes_final", f1 * b},
          {"optimizer_bytes_init", 2 * f0 * b}, {"optimizer_bytes_final", 2 * f1 * b},
          {"importance_bytes", (2 * f0 + ranks.modules().size() * size_t(ranks.options().init_r)) * b},
          // the release at the final budget: the OptimizerState arena resident (mincore) just before
          // and just after it, the bytes it kept (compacted) and the bytes returned to the OS
          {"released", rs.released}, {"release_step", rs.step},
          {"optimizer_resident_before_release", rs.resident_before},
          {"optimizer_resident_after_release", rs.resident_after},
          {"optimizer_bytes_after_release", rs.kept_bytes}, {"released_bytes", rs.released_bytes},
          {"release_skipped", rs.skipped}};  // importance: the plan's rank_ema1 / rank_ema2 / rank_mask rows
}

void print_memory_summary(const MemoryPlan& plan, size_t baseline, size_t data_bytes) {
  const size_t predicted = baseline + plan.total_bytes() + data_bytes, peak = process_peak_rss_bytes();
  fmt::print("memory: predicted peak {} (arenas {}, data {}, baseline {}), measured peak RSS {} ({:+.1f}%)\n",
             format_bytes(predicted), format_bytes(plan.total_bytes()), format_bytes(data_bytes),
             format_bytes(baseline), format_bytes(peak), 100.0 * (double(peak) - double(predicted)) / double(predicted));
}

}  // namespace lt
