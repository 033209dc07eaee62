// `leantune plan [CONFIG.yaml] [--key value ...] [--json] [--buffers]`: the memory plan of the
// training run that `leantune train` with the same arguments would start, computed by the same
// function the engine allocates from, without loading or allocating the model's weights.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "flag_check.h"
#include "core/error.h"
#include "core/memory_plan.h"
#include "io/model_files.h"
#include "core/threads.h"
#include "dist/zero_trainer.h"
#include "plan/baseline.h"
#include "plan/budget.h"
#include "plan/flops.h"
#include "core/atomic_file.h"
#include "model/llama_model.h"
#include "train/report.h"
#include "train/trainer.h"
#include "train/train_config.h"
#include "train/train_model.h"

namespace lt::cli {

namespace {

// `plan --generate --model M [--context P] [--prefill-block TB] [--threads N]`: the inference plan
// (weights, KV cache, workspace) that `leantune generate` with the same model and context uses.
void plan_generate(const std::vector<std::string>& args, bool json, bool buffers) {
  std::string model;
  InferenceOptions io;
  int threads = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    if (a == "--generate") continue;
    if (a == "--double-quant") {
      io.double_quant = true;
      continue;
    }
    LT_CHECK(i + 1 < args.size(), "plan --generate: {} needs a value", a);
    const std::string& v = args[++i];
    auto num = [&] {
      size_t used = 0;
      long long x = 0;
      try {
        x = std::stoll(v, &used);
      } catch (...) {
        used = 0;
      }
      LT_CHECK(used == v.size() && !v.empty(), "plan --generate: {} '{}' is not a whole number", a,
               v.size() > 40 ? v.substr(0, 40) + "..." : v);
      return x;
    };
    if (a == "--model" || a == "-m" || a == "--base_model") model = v;
    else if (a == "--context") {
      const long long x = num();
      check_flag_range("--context", double(x), 0, 1 << 30, "KV cache positions; 0: the model's, at most 4096");
      io.context = int(x);
    } else if (a == "--prefill-block") {
      const long long x = num();
      check_flag_range("--prefill-block", double(x), 0, 1 << 30, "tokens per prefill block; 0: min(context, 256)");
      io.prefill_block = int(x);
    } else if (a == "--threads") {
      const long long x = num();
      check_flag_range("--threads", double(x), 0, kMaxThreads, "worker threads; 0: one per hardware thread");
      threads = int(x);
    }
    else if (a == "--quantize") io.quantization = v;
    else fail("plan --generate: unknown option '{}' (expected --model, --context, --prefill-block, --threads, --quantize, --double-quant)", a);
  }
  LT_CHECK(!model.empty(), "plan --generate: --model is required");
  set_num_threads(threads);
  const size_t baseline = process_baseline_bytes();
  ModelConfig mc = load_model_config(model);
  validate_config(mc, model);
  LT_CHECK(io.context <= mc.max_seq_len, "plan --generate: --context {} is more than the model's context of {} "
           "positions (max_position_embeddings of {}); use --context {} or less", io.context, mc.max_seq_len, model,
           mc.max_seq_len);
  resolve_inference_options(mc, io);
  MemoryPlan p = plan_inference(mc, io);
  if (json) {
    nlohmann::json j;
    for (size_t k = 0; k < kNumCategories; ++k)
      if (size_t n = p.arena_bytes(Category(k))) j["categories"][std::string(category_name(Category(k)))] = n;
    j["context"] = io.context;
    j["prefill_block"] = io.prefill_block;
    j["arena_bytes"] = p.total_bytes();
    j["baseline_bytes"] = baseline;
    j["predicted_peak_bytes"] = p.total_bytes() + baseline;
    fmt::print("{}\n", j.dump(1));
    return;
  }
  fmt::print("inference plan: {}, context {} positions, prefill blocks of {} tokens\n{}", model, io.context,
             io.prefill_block, p.format_table(buffers));
  fmt::print("peak: with the process baseline of {} (measured once and cached): {}\n", format_bytes(baseline),
             format_bytes(p.total_bytes() + baseline));
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
  LT_CHECK(used == v.size() && !v.empty() && std::isfinite(x), "{}: '{}' is not a finite number", flag,
           v.size() > 40 ? v.substr(0, 40) + "..." : v);
  return x;
}

}  // namespace

void add_plan_command(CLI::App& app) {
  // Hidden: measures the process baseline in a fresh process (plan/baseline.h runs it, then caches).
  auto* probe = app.add_subcommand("baseline-probe", "");
  probe->group("");
  static int probe_threads = 0;
  probe->add_option("--threads", probe_threads);
  probe->callback([] {
    set_num_threads(probe_threads);
    fmt::print("{}\n", measure_baseline_in_this_process());
  });

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
    std::vector<GpuProfile> gpus;
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
        LT_CHECK(x == std::floor(x), "--ranks: {} is not a whole number of ranks", x);
        zero_ranks = int(x);
      }
      else if (a == "--html" && i + 1 < rest.size()) html = rest[++i];
      else if (a == "--gpu" && i + 1 < rest.size()) gpus.push_back(find_gpu_profile(rest[++i]));
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
    TrainConfig cfg = parse_train_args(args);
    LT_CHECK(!cfg.base_model.empty(), "plan: 'base_model' is required");
    set_num_threads(cfg.threads);
    const size_t baseline = process_baseline_bytes();
    struct { ModelConfig config; } files{load_model_config(cfg.base_model)};  // a folder needs only config.json
    validate_config(files.config, cfg.base_model);
    // the data category: the same tokenizer and dataset loading as train (nothing of the model)
    size_t data_bytes = 0;
    if (!cfg.datasets.empty()) {
      TrainingData d = load_training_data(cfg);
      data_bytes = training_data_bytes(d, cfg);
    }
    cfg = fit_memory_budget(cfg, files.config, baseline + data_bytes);  // throws the list of fits when over budget
    TrainModelOptions o = train_model_options(cfg);
    MemoryPlan p = plan_training(files.config, o);
    const size_t predicted = p.total_bytes() + data_bytes + baseline;
    nlohmann::json planned;
    for (size_t k = 0; k < kNumCategories; ++k)
      if (size_t n = p.arena_bytes(Category(k))) planned[std::string(category_name(Category(k)))] = n;
    if (data_bytes) planned["data"] = data_bytes;
    planned["baseline"] = baseline;
    if (!html.empty()) {
      std::string doc = "<!doctype html><html><head><meta charset='utf-8'><title>leantune memory plan</title>"
                        "<style>body{font-family:sans-serif;margin:24px} svg{margin:8px;background:#fafafa} "
                        "td,th{padding:2px 10px;text-align:right} td:first-child{text-align:left}</style></head><body>";
      doc += fmt::format("<h1>leantune memory plan</h1><p>{}: {} {}, micro-batch {} x {} tokens, checkpointing {}; "
                         "predicted peak {}</p>", cfg.base_model, cfg.method,
                         cfg.method == "lora" ? fmt::format("r={}", cfg.lora.r) : "", cfg.micro_batch_size,
                         cfg.sequence_len, cfg.gradient_checkpointing, format_bytes(predicted));
      doc += memory_plan_html(planned, nullptr) + "</body></html>\n";
      write_text_file_atomic(html, doc);
    }
    if (json) {
      nlohmann::json j;
      j["categories"] = planned;
      j["arena_bytes"] = p.total_bytes();
      j["data_bytes"] = data_bytes;
      j["baseline_bytes"] = baseline;
      j["predicted_peak_bytes"] = predicted;
      j["peak_phase"] = "end of the first step (every arena resident)";
      if (buffers)
        for (const auto& b : p.buffers)
          j["buffers"].push_back({{"name", b.name}, {"category", category_name(b.cat)}, {"bytes", b.bytes},
                                  {"lifetime", lifetime_name(b.life)}});
      fmt::print("{}\n", j.dump(1));
      return;
    }
    fmt::print("training plan: {} {}, micro-batch {} x {} tokens, checkpointing {}\n{}", cfg.method,
               cfg.method == "lora" ? fmt::format("r={}", cfg.lora.r) : "", cfg.micro_batch_size, cfg.sequence_len,
               cfg.gradient_checkpointing, p.format_table(buffers));
    if (actuary) {
      if (tokens <= 0) tokens = double(cfg.micro_batch_size) * cfg.sequence_len * cfg.gradient_accumulation_steps *
                                std::max(cfg.max_steps, 1);
      if (gpu_price >= 0) {
        if (gpus.empty()) gpus = gpu_profiles();
        for (auto& g : gpus) g.price_per_hour = gpu_price;
      }
      fmt::print("\n{}", actuary_report(files.config, o, predicted, tokens, price, gpus));
    }
    if (ranks) fmt::print("\nLoRA rank report (memory: parameters, gradients, AdamW moments, saved x·Aᵀ):\n{}",
                          rank_report(files.config, o));
    if (data_bytes) fmt::print("{:<20} {:>14} {:>12}  (tokenizer tables and tokenized examples)\n", "data", data_bytes,
                               format_bytes(data_bytes));
    fmt::print("peak: the end of the first step, once every arena is resident; with the data and the "
               "process baseline of {} (runtime libraries, threads, measured once and cached): {}\n",
               format_bytes(baseline), format_bytes(predicted));
    if (!html.empty()) fmt::print("wrote {}\n", html);
    if (zero_ranks > 0 || cfg.zero_stage >= 0) {
      fmt::print("\n{}", format_zero_plan(p, files.config.n_layers, std::max(1, zero_ranks), zero_options(cfg)));
    }
  });
}

}  // namespace lt::cli
