// `leantune plan [CONFIG.yaml] [--key value ...] [--json] [--buffers]`: the memory plan of the
// training run that `leantune train` with the same arguments would start, computed by the same
// function the engine allocates from, without loading or allocating the model's weights.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "commands.h"
#include "flag_check.h"
#include "leantune/machine.h"
#include "leantune/memory.h"
#include "leantune/model.h"
#include "leantune/plan.h"

namespace lt::cli {

namespace {

// `plan --generate --model M [--context P] [--prefill-block TB] [--threads N]`: the inference plan
// (weights, KV cache, workspace) that `leantune generate` with the same model and context uses.
void plan_generate(const std::vector<std::string>& args, bool json, bool buffers) {
  std::string model;
  leantune::InferencePlanOptions o;
  int threads = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    if (a == "--generate") continue;
    if (a == "--double-quant") {
      o.double_quant = true;
      continue;
    }
    if (i + 1 >= args.size()) fail("plan --generate: {} needs a value", a);
    const std::string& v = args[++i];
    auto num = [&] {
      size_t used = 0;
      long long x = 0;
      try {
        x = std::stoll(v, &used);
      } catch (...) {
        used = 0;
      }
      if (used != v.size() || v.empty())
        fail("plan --generate: {} '{}' is not a whole number", a, v.size() > 40 ? v.substr(0, 40) + "..." : v);
      return x;
    };
    if (a == "--model" || a == "-m" || a == "--base_model") model = v;
    else if (a == "--context") {
      const long long x = num();
      check_flag_range("--context", double(x), 0, 1 << 30, "KV cache positions; 0: the model's, at most 4096");
      o.sequence.context = int(x);
    } else if (a == "--prefill-block") {
      const long long x = num();
      check_flag_range("--prefill-block", double(x), 0, 1 << 30, "tokens per prefill block; 0: min(context, 256)");
      o.sequence.prefill_block = int(x);
    } else if (a == "--threads") {
      const long long x = num();
      check_flag_range("--threads", double(x), 0, leantune::kMaxThreads, "worker threads; 0: one per hardware thread");
      threads = int(x);
    }
    else if (a == "--quantize") o.quantization = leantune::parse_quantization(v);
    else if (a == "--weights") o.weights = leantune::parse_weights(v);
    else fail("plan --generate: unknown option '{}' (expected --model, --context, --prefill-block, --threads, --quantize, --weights, --double-quant)", a);
  }
  if (model.empty()) fail("plan --generate: --model is required");
  o.threads = threads;
  const int max_seq = leantune::read_model_config(model).max_seq_len;
  if (o.sequence.context > max_seq)
    fail("plan --generate: --context {} is more than the model's context of {} positions (max_position_embeddings "
         "of {}); use --context {} or less", o.sequence.context, max_seq, model, max_seq);
  const leantune::InferencePlan p = leantune::plan_inference(model, o);
  if (json) {
    fmt::print("{}\n", leantune::to_json(p));
    return;
  }
  fmt::print("inference plan: {}, context {} positions, prefill blocks of {} tokens\n{}", model, p.context,
             p.prefill_block, p.memory.format_table(buffers));
  fmt::print("peak: with the process baseline of {} (measured once and cached): {}\n",
             leantune::format_bytes(p.baseline_bytes), leantune::format_bytes(p.predicted_peak_bytes));
}

// A number flag's value: the whole text must be a number ("12abc" and "nan" are errors).
double number_flag(const std::string& flag, const std::string& v) {
  size_t used = 0;
  double x = NAN;
  try {
    x = std::stod(v, &used);
  } catch (...) {
    used = 0;
  }
  if (used != v.size() || v.empty() || !std::isfinite(x))
    fail("{}: '{}' is not a finite number", flag, v.size() > 40 ? v.substr(0, 40) + "..." : v);
  return x;
}

}  // namespace

void add_plan_command(CLI::App& app) {
  // Hidden: measures the process baseline in a fresh process (plan/baseline.h runs it, then caches).
  auto* probe = app.add_subcommand("baseline-probe", "");
  probe->group("");
  static int probe_threads = 0;
  probe->add_option("--threads", probe_threads);
  probe->callback([] { fmt::print("{}\n", leantune::probe_process_baseline(probe_threads)); });

  auto* c = app.add_subcommand("plan", "Print the memory plan of a training run (same arguments as train), or with "
                               "--generate of inference (--model, --context)");
  c->prefix_command();
  c->footer("Extra flags: --json (machine-readable), --buffers (every buffer), --actuary [--tokens N] "
            "[--price-per-hour USD] (FLOPs, time and cost estimates), --rank-report (what each LoRA rank costs), "
            "--html FILE (the plan as a self-contained HTML chart), --gpu NAME (repeatable; the actuary's GPU rows), "
            "--gpu-price USD (per GPU-hour, replacing the profile's).");
  c->callback([c] {
    std::vector<std::string> args;
    bool json = false, buffers = false, actuary = false, ranks = false;
    int zero_ranks = 0;  // --ranks N: each rank's bytes under ZeRO (with --zero S)
    std::string html;
    std::vector<leantune::GpuProfile> gpus;
    double gpu_price = -1;
    double tokens = 0, price = 0;
    auto rest = c->remaining();
    for (size_t i = 0; i < rest.size(); ++i) {
      const auto& a = rest[i];
      if (a == "--json") json = true;
      else if (a == "--buffers") buffers = true;
      else if (a == "--actuary") actuary = true;
      else if (a == "--rank-report") ranks = true;
      else if (a == "--ranks" && i + 1 < rest.size()) {
        const double x = number_flag("--ranks", rest[++i]);
        check_flag_range("--ranks", x, 1, 1 << 20, "data-parallel ranks (whole number)");
        if (x != std::floor(x)) fail("--ranks: {} is not a whole number of ranks", x);
        zero_ranks = int(x);
      }
      else if (a == "--html" && i + 1 < rest.size()) html = rest[++i];
      else if (a == "--gpu" && i + 1 < rest.size()) gpus.push_back(leantune::find_gpu_profile(rest[++i]));
      else if (a == "--gpu-price" && i + 1 < rest.size()) {
        gpu_price = number_flag("--gpu-price", rest[++i]);
        check_flag_range("--gpu-price", gpu_price, 0, 1e9, "US dollars per GPU-hour");
      }
      else if ((a == "--tokens" || a == "--price-per-hour") && i + 1 < rest.size()) {
        const double x = number_flag(a, rest[++i]);
        if (a == "--tokens") check_flag_range("--tokens", x, 0, 1e18, "tokens to train; 0: one run of max_steps");
        else check_flag_range("--price-per-hour", x, 0, 1e9, "US dollars per hour of this machine");
        (a == "--tokens" ? tokens : price) = x;
      } else args.push_back(a);
    }
    if (std::find(args.begin(), args.end(), "--generate") != args.end()) {
      plan_generate(args, json, buffers);
      return;
    }
    leantune::TrainingPlanOptions o;
    o.cost_estimate = actuary && !json;
    o.tokens = tokens;
    o.price_per_hour = price;
    if (gpu_price >= 0) {
      if (gpus.empty()) gpus = leantune::gpu_profiles();
      for (auto& g : gpus) g.price_per_hour = gpu_price;
    }
    o.gpus = gpus;
    o.rank_report = ranks && !json;
    o.zero_ranks = zero_ranks;
    const leantune::TrainingPlan p = leantune::plan_training(args, o);
    if (!html.empty()) leantune::write_plan_html(p, html);
    if (json) {
      fmt::print("{}\n", leantune::to_json(p, buffers));
      return;
    }
    fmt::print("training plan: {} {}, micro-batch {} x {} tokens, checkpointing {}\n{}", p.method,
               p.method == "lora" ? fmt::format("r={}", p.lora_r) : "", p.micro_batch_size, p.sequence_len,
               p.checkpointing, p.memory.format_table(buffers));
    if (p.cost) fmt::print("\n{}", leantune::format_cost_estimate(*p.cost));
    if (ranks) fmt::print("\nLoRA rank report (memory: parameters, gradients, AdamW moments, saved x·Aᵀ):\n{}",
                          leantune::format_rank_report(p.rank_report));
    if (p.data_bytes) fmt::print("{:<20} {:>14} {:>12}  (tokenizer tables and tokenized examples)\n", "data",
                                 p.data_bytes, leantune::format_bytes(p.data_bytes));
    fmt::print("peak: the end of the first step, once every arena is resident; with the data and the "
               "process baseline of {} (runtime libraries, threads, measured once and cached): {}\n",
               leantune::format_bytes(p.baseline_bytes), leantune::format_bytes(p.predicted_peak_bytes));
    if (!html.empty()) fmt::print("wrote {}\n", html);
    if (p.zero) fmt::print("\n{}", leantune::format_zero_plan(p));
  });
}

}  // namespace lt::cli
