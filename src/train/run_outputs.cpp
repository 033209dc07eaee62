// The progress line and the end-of-run outputs of every training loop (train/run_outputs.h).
#include "train/run_outputs.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/hf_cache.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/atomic_file.h"
#include "io/peft_adapter.h"
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

void write_adapter(const TrainConfig& c, TrainModel& model, const TrainedTensorFn& trained, bool print) {
  std::vector<AdapterTensor> ts;
  const auto& params = model.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    ts.push_back({p.name.rfind("base_model.", 0) == 0 ? p.name : "base_model.model." + p.name, p.shape, trained(i)});
  }
  const std::string adir = (fs::path(c.output_dir) / "adapter").string();
  fs::create_directories(adir);
  save_peft_adapter(adir, c.lora, c.base_model, ts);
  if (print) fmt::print("saved the PEFT adapter to {}\n", adir);
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
                         const TrainedTensorFn& trained, bool print) {
  if (c.method == Method::Lora) write_adapter(c, model, trained, print);
  else write_full_model(c, plan, model, base, trained, print);
}

void write_ledger(const std::string& out_dir, const MemoryPlan& plan, const Ledger& ledger, size_t baseline,
                  size_t data_bytes, const Arenas* engine) {
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
  write_text_file_atomic((fs::path(out_dir) / "ledger.json").string(), j.dump(1));
}

void print_memory_summary(const MemoryPlan& plan, size_t baseline, size_t data_bytes) {
  const size_t predicted = baseline + plan.total_bytes() + data_bytes, peak = process_peak_rss_bytes();
  fmt::print("memory: predicted peak {} (arenas {}, data {}, baseline {}), measured peak RSS {} ({:+.1f}%)\n",
             format_bytes(predicted), format_bytes(plan.total_bytes()), format_bytes(data_bytes),
             format_bytes(baseline), format_bytes(peak), 100.0 * (double(peak) - double(predicted)) / double(predicted));
}

}  // namespace lt
