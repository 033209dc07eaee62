// `leantune plan [CONFIG.yaml] [--key value ...] [--json] [--buffers]`: the memory plan of the
// training run that `leantune train` with the same arguments would start, computed by the same
// function the engine allocates from, without loading or allocating the model's weights.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "core/memory_plan.h"
#include "io/model_files.h"
#include "plan/budget.h"
#include "plan/flops.h"
#include "train/trainer.h"
#include "train/train_config.h"
#include "train/train_model.h"

namespace lt::cli {

void add_plan_command(CLI::App& app) {
  auto* c = app.add_subcommand("plan", "Print the memory plan of a training run (same arguments as train)");
  c->prefix_command();
  c->footer("Extra flags: --json (machine-readable), --buffers (every buffer), --actuary [--tokens N] "
            "[--price-per-hour USD] (FLOPs, time and cost estimates), --rank-report (what each LoRA rank costs).");
  c->callback([c] {
    std::vector<std::string> args;
    bool json = false, buffers = false, actuary = false, ranks = false;
    double tokens = 0, price = 0;
    auto rest = c->remaining();
    for (size_t i = 0; i < rest.size(); ++i) {
      const auto& a = rest[i];
      if (a == "--json") json = true;
      else if (a == "--buffers") buffers = true;
      else if (a == "--actuary") actuary = true;
      else if (a == "--rank-report") ranks = true;
      else if ((a == "--tokens" || a == "--price-per-hour") && i + 1 < rest.size()) {
        try {
          (a == "--tokens" ? tokens : price) = std::stod(rest[++i]);
        } catch (...) {
          fail("{}: '{}' is not a number", a, rest[i]);
        }
      } else args.push_back(a);
    }
    TrainConfig cfg = parse_train_args(args);
    LT_CHECK(!cfg.base_model.empty(), "plan: 'base_model' is required");
    const size_t baseline = process_rss_bytes();
    auto files = load_model_files(cfg.base_model);  // config + memory map only: nothing is allocated
    validate_config(files.config, cfg.base_model);
    cfg = fit_memory_budget(cfg, files.config, baseline);  // throws the list of fits when over budget
    TrainModelOptions o;
    o.method = cfg.method;
    o.lora = cfg.lora;
    o.micro_batch = cfg.micro_batch_size;
    o.seq_len = cfg.sequence_len;
    o.freeze_embeddings = cfg.freeze_embeddings;
    o.freeze_lm_head = cfg.freeze_lm_head;
    parse_checkpointing(cfg.gradient_checkpointing, o);
    MemoryPlan p = plan_training(files.config, o);
    if (json) {
      nlohmann::json j;
      for (size_t k = 0; k < kNumCategories; ++k)
        if (size_t n = p.arena_bytes(Category(k))) j["categories"][std::string(category_name(Category(k)))] = n;
      j["total_bytes"] = p.total_bytes();
      j["baseline_bytes"] = baseline;
      j["predicted_peak_bytes"] = p.total_bytes() + baseline;
      j["peak_phase"] = "whole step (every arena is allocated up front)";
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
      fmt::print("\n{}", actuary_report(files.config, o, p.total_bytes() + baseline, tokens, price));
    }
    if (ranks) fmt::print("\nLoRA rank report (memory: parameters, gradients, AdamW moments, saved x·Aᵀ):\n{}",
                          rank_report(files.config, o));
    fmt::print("peak: the whole step (every arena is allocated up front); with the process baseline of {} "
               "(runtime libraries, threads): {}\n", format_bytes(baseline), format_bytes(p.total_bytes() + baseline));
  });
}

}  // namespace lt::cli
