// `leantune sweep [CONFIG.yaml] --grid "lora_r=4,8;lora_alpha=r,2r" [--out DIR] [--price-per-hour USD]
// [--loss-tolerance F] [--key value ...]`: a measured LoRA sweep through leantune::run_sweep
// (include/leantune/sweep.h); other flags are `leantune train`'s and apply to every configuration.
#include <fmt/format.h>

#include "commands.h"
#include "flag_check.h"
#include "leantune/sweep.h"
#include "leantune/trainer.h"

namespace lt::cli {

namespace {
double number_value(const std::string& flag, const std::string& v) {
  size_t used = 0;
  double x = NAN;
  try {
    x = std::stod(v, &used);
  } catch (...) {
    used = 0;
  }
  if (v.empty() || used != v.size() || !std::isfinite(x)) fail("{}: '{}' is not a number", flag, v);
  return x;
}
}  // namespace

void add_sweep_command(CLI::App& app) {
  auto* c = app.add_subcommand("sweep", "Train every configuration of a grid and compare them (table and HTML report)");
  c->prefix_command();
  c->footer(
      "--grid \"key=v1,v2;key2=w1,w2\": the cartesian product is trained in turn (the first key varies slowest). "
      "lora_alpha takes multiples of r (r, 2r, 0.5r); lora_target_modules takes attn, mlp, all-linear or "
      "projections joined by '+'. --out DIR (default sweep-out): run-NN/ per configuration, sweep.jsonl, sweep.csv, "
      "sweep.md, sweep.html. --price-per-hour USD prices each run's wall time; --loss-tolerance F (default 0.01): "
      "the recommendation is the fastest run within F of the best held-out loss. Every other flag is a "
      "`leantune train` key applied to every configuration.");
  c->callback([c] {
    leantune::SweepOptions o;
    std::vector<std::string> args, rest = c->remaining();
    for (size_t i = 0; i < rest.size(); ++i) {
      const std::string& a = rest[i];
      auto value = [&](const std::string& name) -> std::string {
        if (a.rfind(name + "=", 0) == 0) return a.substr(name.size() + 1);
        if (i + 1 >= rest.size()) throw leantune::Error(name + ": expected a value after it");
        return rest[++i];
      };
      auto is = [&](const std::string& name) { return a == name || a.rfind(name + "=", 0) == 0; };
      if (is("--grid")) o.grid = value("--grid");
      else if (is("--out")) o.out_dir = value("--out");
      else if (is("--price-per-hour")) o.price_per_hour = number_value("--price-per-hour", value("--price-per-hour"));
      else if (is("--loss-tolerance")) o.loss_tolerance = number_value("--loss-tolerance", value("--loss-tolerance"));
      else args.push_back(a);
    }
    if (o.grid.empty()) throw leantune::Error("sweep: --grid is required, e.g. --grid \"lora_r=4,8;lora_alpha=r,2r\"");
    const leantune::TrainerConfig tc = leantune::TrainerConfig::from_args(args);
    o.yaml_file = tc.yaml_file;
    o.flags = tc.flags;
    leantune::run_sweep(o);
  });
}

}  // namespace lt::cli
