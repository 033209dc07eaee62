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

// `plan --serve --model M [--concurrency C] [--beams K] [--max-seqs N] [--context P] [--block-size B]
// [--kv-memory MiB] [--max-batch-tokens T] [--max-lora-rank R] [--adapter-memory MiB] [--draft-model D]
// [--num-speculative-tokens K]`: what `leantune serve` with the same flags allocates. C concurrent
// requests of K beams each run as max_seqs = C x K rows, each holding a full context of KV blocks
// (unless --kv-memory fixes the pool).
double number_flag(const std::string& flag, const std::string& v);

void plan_serve(const std::vector<std::string>& args, bool json, bool buffers) {
  std::string model, draft;
  leantune::EngineOptions o;
  int concurrency = 0, beams = 1;
  double kv_mib = 0, adapter_mib = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    if (a == "--serve") continue;
    if (i + 1 >= args.size()) fail("plan --serve: {} needs a value", a);
    const std::string& v = args[++i];
    auto whole = [&](double lo, double hi, const char* meaning) {
      const double x = number_flag(a, v);
      check_flag_range(a.c_str(), x, lo, hi, meaning);
      if (x != std::floor(x)) fail("{}: {} is not a whole number", a, v);
      return int(x);
    };
    if (a == "--model" || a == "-m") model = v;
    else if (a == "--draft-model") draft = v;
    else if (a == "--concurrency") concurrency = whole(1, 1 << 16, "requests running at once");
    else if (a == "--beams") beams = whole(1, 128, "beams per request");
    else if (a == "--max-seqs") o.max_seqs = whole(1, 1 << 16, "rows running at once");
    else if (a == "--context") o.context = whole(0, 1 << 24, "positions per request; 0: the model's, at most 4096");
    else if (a == "--block-size") o.block_size = whole(1, 4096, "positions per KV block");
    else if (a == "--max-batch-tokens") o.max_batch_tokens = whole(1, 1 << 20, "tokens per forward step");
    else if (a == "--max-lora-rank") o.max_lora_rank = whole(1, 1 << 16, "largest adapter rank");
    else if (a == "--num-speculative-tokens") o.num_speculative_tokens = whole(1, 32, "draft tokens per step");
    else if (a == "--kv-memory" || a == "--memory-budget") {
      kv_mib = number_flag(a, v);
      check_flag_range(a.c_str(), kv_mib, 0, 1e12, "MiB of KV cache; 0: max-seqs full contexts");
    } else if (a == "--adapter-memory") {
      adapter_mib = number_flag(a, v);
      check_flag_range(a.c_str(), adapter_mib, 0, 1e12, "MiB of resident adapters");
    } else {
      fail("plan --serve: unknown option '{}' (expected --model, --concurrency, --beams, --max-seqs, --context, "
           "--block-size, --kv-memory, --max-batch-tokens, --max-lora-rank, --adapter-memory, --draft-model, "
           "--num-speculative-tokens)", a);
    }
  }
  if (model.empty()) fail("plan --serve: --model is required");
  if (concurrency > 0) o.max_seqs = concurrency * beams;
  else if (beams > 1) fail("plan --serve: --beams needs --concurrency (max_seqs = concurrency x beams)");
  o.kv_memory_bytes = size_t(kv_mib * 1024 * 1024);
  o.adapter_memory_bytes = size_t(adapter_mib * 1024 * 1024);
  const leantune::ServePlan p = leantune::plan_serve(model, o, draft);
  if (json) {
    fmt::print("{}\n", leantune::to_json(p));
    return;
  }
  fmt::print("serving plan: {}{}, {} rows at once (requests x beams), context {} positions, KV pool {} blocks of {} "
             "positions\n{}", model, draft.empty() ? "" : " with draft " + draft, p.max_seqs, p.context, p.kv_blocks,
             p.block_size, p.memory.format_table(buffers));
  fmt::print("engine (KV pools + batch buffers, what `serve` allocates besides the weights): {}\n",
             leantune::format_bytes(p.engine_bytes));
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
                               "--generate of inference (--model, --context), or with --serve of `leantune serve` (--model, --concurrency, "
                               "--beams, --context, ...)");
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
    if (std::find(args.begin(), args.end(), "--serve") != args.end()) {
      plan_serve(args, json, buffers);
      return;
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
    if (p.adaptive_rank) fmt::print("\n{}", leantune::format_adaptive_rank_plan(*p.adaptive_rank));
  });
}

}  // namespace lt::cli
