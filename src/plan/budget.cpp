#include "plan/budget.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <utility>
#include <fmt/format.h>

#include "core/error.h"
#include "core/memory_plan.h"
#include "train/train_model.h"

namespace lt {

size_t parse_bytes(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  LT_CHECK(i > 0, "memory budget '{}' does not start with a number (e.g. 6GiB, 512MiB)", text);
  LT_CHECK(std::count(text.begin(), text.begin() + long(i), '.') <= 1, "memory budget '{}' is not a number", text);
  double v = 0;
  try {
    v = std::stod(text.substr(0, i));
  } catch (...) {
    fail("memory budget '{}' is not a number with a unit (e.g. 6GiB)", text);
  }
  std::string unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  while (!unit.empty() && unit.back() == ' ') unit.pop_back();
  std::string u = unit;
  for (auto& ch : u) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},          {"b", 1},         {"k", 0x1p10},  {"kib", 0x1p10}, {"m", 0x1p20}, {"mib", 0x1p20},
      {"g", 0x1p30},    {"gib", 0x1p30},  {"t", 0x1p40},  {"tib", 0x1p40}, {"kb", 1e3},    {"mb", 1e6},
      {"gb", 1e9},      {"tb", 1e12}};
  double mult = 0;
  for (const auto& [name, m] : kUnits)
    if (u == name) mult = m;
  LT_CHECK(mult > 0, "memory budget '{}': unknown unit '{}' (use B, KiB, MiB, GiB, TiB (binary) or KB, MB, GB, TB (decimal))", text, unit);
  LT_CHECK(v > 0, "memory budget '{}' must be more than zero bytes", text);
  LT_CHECK(v * mult <= double(kMaxPlanBytes), "memory budget '{}' is out of range: it must be at most 2^62 bytes "
           "(4 EiB)", text);
  return size_t(std::llround(v * mult));
}

static TrainModelOptions model_options(const TrainConfig& c) { return train_model_options(c); }

size_t model_weight_bytes(const ModelConfig& m) {
  TrainModelOptions o;
  o.method = Method::Full;
  o.micro_batch = 1;
  o.seq_len = 2;
  if (m.quantization) {  // a quantized base trains only with LoRA: its frozen weights as stored
    o.method = Method::Lora;
    o.lora.r = 1;
    o.lora.target_modules = {m.fused_proj ? "o_proj" : "q_proj"};  // Phi-3 has no q_proj
    return plan_training(m, o).arena_bytes(Category::FrozenWeights);
  }
  MemoryPlan p = plan_training(m, o);
  return p.arena_bytes(Category::TrainableParams) + p.arena_bytes(Category::FrozenWeights);
}

size_t predict_training_bytes(const ModelConfig& m, const TrainConfig& c, size_t baseline) {
  return plan_training(m, model_options(c)).total_bytes() + baseline;
}

static const char* kRecompute[] = {"none", "mlp", "attention", "every:2", "every"};  // least recompute first

std::vector<FitCandidate> cheaper_fits(const ModelConfig& m, const TrainConfig& c, size_t budget, size_t baseline) {
  std::vector<FitCandidate> out;
  auto consider = [&](const std::string& change, TrainConfig t) {
    size_t b = predict_training_bytes(m, t, baseline);
    if (b <= budget) out.push_back({change, t, b});
  };
  for (const char* ck : kRecompute) {
    if (c.gradient_checkpointing == ck || std::string(ck) == "none") continue;
    TrainConfig t = c;
    t.gradient_checkpointing = ck;
    consider(fmt::format("gradient_checkpointing: {}", ck), t);
  }
  if (c.method == Method::Full) {
    TrainConfig t = c;
    t.method = Method::Lora;
    t.lora.target_modules = {"all-linear"};
    consider(fmt::format("method: lora (r={}, all-linear) instead of full", t.lora.r), t);
    t.gradient_checkpointing = "every";
    consider(fmt::format("method: lora (r={}, all-linear) + gradient_checkpointing: every", t.lora.r), t);
  }
  for (int mb = c.micro_batch_size / 2; mb >= 1; mb /= 2) {
    TrainConfig t = c;
    t.gradient_accumulation_steps = c.gradient_accumulation_steps * (c.micro_batch_size / mb);
    t.micro_batch_size = mb;
    consider(fmt::format("micro_batch_size: {}, gradient_accumulation_steps: {}", mb, t.gradient_accumulation_steps), t);
    t.gradient_checkpointing = "every";
    consider(fmt::format("micro_batch_size: {}, gradient_accumulation_steps: {}, gradient_checkpointing: every", mb,
                         t.gradient_accumulation_steps), t);
  }
  return out;
}

FitCandidate auto_fit(const ModelConfig& m, const TrainConfig& c, size_t budget, size_t baseline) {
  for (int mb = c.micro_batch_size; mb >= 1; mb /= 2) {
    for (const char* ck : kRecompute) {
      TrainConfig t = c;
      t.micro_batch_size = mb;
      t.gradient_accumulation_steps = c.gradient_accumulation_steps * std::max(1, c.micro_batch_size / mb);
      t.gradient_checkpointing = ck;
      size_t b = predict_training_bytes(m, t, baseline);
      if (b <= budget)
        return {fmt::format("micro_batch_size: {}, gradient_accumulation_steps: {}, gradient_checkpointing: {}", mb,
                            t.gradient_accumulation_steps, ck), t, b};
    }
    if (mb == 1) break;
  }
  fail("no micro-batch size and checkpointing mode fits {} (the smallest run needs {}); try method: lora or a "
       "shorter sequence_len", format_bytes(budget),
       format_bytes(predict_training_bytes(m, [&] { TrainConfig t = c; t.micro_batch_size = 1;
                                                     t.gradient_checkpointing = "every"; return t; }(), baseline)));
}

TrainConfig fit_memory_budget(const TrainConfig& c, const ModelConfig& m, size_t baseline) {
  if (c.memory_budget.empty()) {
    LT_CHECK(!c.auto_fit, "auto needs a memory_budget");
    return c;
  }
  const size_t budget = parse_bytes(c.memory_budget);
  const size_t weights = model_weight_bytes(m);
  LT_CHECK(budget >= weights + baseline, "the memory budget of {} is smaller than the model's weights alone ({} in "
           "fp32, plus {} of process baseline and data): no micro-batch, checkpointing or LoRA setting can fit it. Raise the "
           "budget or use a smaller model; nothing was allocated.", format_bytes(budget), format_bytes(weights),
           format_bytes(baseline));
  if (c.auto_fit) {
    FitCandidate f = auto_fit(m, c, budget, baseline);
    fmt::print("auto: {} fits {} (predicted peak {})\n", f.change, format_bytes(budget), format_bytes(f.predicted_bytes));
    return f.config;
  }
  size_t need = predict_training_bytes(m, c, baseline);
  if (need <= budget) return c;
  std::string msg = fmt::format("the run needs {} (arenas {} + process baseline and data {}), over the memory budget of {}; "
                                "nothing was allocated.", format_bytes(need), format_bytes(need - baseline),
                                format_bytes(baseline), format_bytes(budget));
  auto fits = cheaper_fits(m, c, budget, baseline);
  if (fits.empty()) msg += " No single change tried (checkpointing, LoRA, smaller micro-batches) fits.";
  else msg += " Changes that fit, in the order to try them:";
  for (const auto& f : fits) msg += fmt::format("\n  {:<90} predicted peak {}", f.change, format_bytes(f.predicted_bytes));
  if (!fits.empty()) msg += "\n(or run with auto: true to pick the largest micro-batch that fits)";
  throw Error(msg);
}

}  // namespace lt
