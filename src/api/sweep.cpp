// leantune::run_sweep (include/leantune/sweep.h): the grid expanded into configurations, each one
// trained by the training loop and measured, all on one base model loaded once (train/base_cache.h);
// the tables and the report from api/sweep_report.h.
#include "leantune/sweep.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/run_training.h"
#include "api/sweep_report.h"
#include "api/trainer_config.h"
#include "core/error.h"
#include "train/base_cache.h"
#include "train/train_loop.h"

namespace leantune {

namespace {

namespace fs = std::filesystem;
using GridAxis = std::pair<std::string, std::vector<std::string>>;

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    out.push_back(trim(s.substr(start, end - start)));
    start = end + 1;
  }
  return out;
}

// "k=v1,v2;k2=w1" -> axes in order; keys with dashes are the same keys with underscores.
std::vector<GridAxis> parse_grid(const std::string& grid) {
  std::vector<GridAxis> axes;
  for (const std::string& part : split(grid, ';')) {
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    LT_CHECK(eq != std::string::npos && eq > 0, "sweep --grid: '{}' is not key=v1,v2,... (parts are separated by ';')",
             lt::excerpt(part));
    std::string key = trim(part.substr(0, eq));
    for (char& ch : key) if (ch == '-') ch = '_';
    std::vector<std::string> values;
    for (const std::string& v : split(part.substr(eq + 1), ',')) {
      LT_CHECK(!v.empty(), "sweep --grid: '{}' has an empty value", lt::excerpt(part));
      values.push_back(v);
    }
    for (const auto& a : axes) LT_CHECK(a.first != key, "sweep --grid: the key '{}' is given twice", lt::excerpt(key));
    LT_CHECK(key != "output_dir", "sweep --grid: output_dir is set per run by the sweep (use --out)");
    axes.push_back({key, values});
  }
  LT_CHECK(!axes.empty(), "sweep --grid: '{}' names no key; expected e.g. \"lora_r=4,8;lora_alpha=r,2r\"",
           lt::excerpt(grid));
  return axes;
}

// lora_alpha "2r" -> 2·r; anything else unchanged.
std::string alpha_value(const std::string& v, int r) {
  if (v.empty() || v.back() != 'r') return v;
  const std::string k = v.substr(0, v.size() - 1);
  double m = 1;
  if (!k.empty()) {
    char* end = nullptr;
    m = std::strtod(k.c_str(), &end);
    LT_CHECK(end && *end == 0 && std::isfinite(m) && m > 0,
             "sweep --grid: lora_alpha={}: expected a number or a positive multiple of r (r, 2r, 0.5r)", v);
  }
  return fmt::format("{:g}", m * r);
}

std::string targets_value(const std::string& v) {
  if (v == "attn" || v == "attention") return "q_proj,k_proj,v_proj,o_proj";
  if (v == "mlp") return "gate_proj,up_proj,down_proj";
  std::string out = v;
  for (char& ch : out) if (ch == '+') ch = ',';
  return out;
}

// Resets the process's peak RSS (VmHWM) so the next run's peak is its own (Linux >= 4.0).
void reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (f) f << "5";
}

struct Combo {
  std::vector<std::pair<std::string, std::string>> grid;
};

std::vector<Combo> expand(const std::vector<GridAxis>& axes) {
  std::vector<Combo> out{{}};
  for (const auto& [key, values] : axes) {  // the first key varies slowest
    std::vector<Combo> next;
    for (const Combo& c : out)
      for (const std::string& v : values) {
        Combo d = c;
        d.grid.push_back({key, v});
        next.push_back(d);
      }
    out = std::move(next);
  }
  return out;
}

// The flags of one configuration: the base flags, then the grid's (alpha resolved against its r).
SweepRow prepare_row(const SweepOptions& o, const Combo& c, int index) {
  SweepRow row;
  row.grid = c.grid;
  row.output_dir = (fs::path(o.out_dir) / fmt::format("run-{:02d}", index + 1)).string();
  row.flags = o.flags;
  std::string alpha;
  for (const auto& [k, v] : c.grid) {
    row.label += (row.label.empty() ? "" : " ") + k + "=" + v;
    if (k == "lora_alpha") alpha = v;
    else row.flags.insert(row.flags.end(), {"--" + k, k == "lora_target_modules" ? targets_value(v) : v});
  }
  TrainerConfig tc{o.yaml_file, "", row.flags};
  if (!alpha.empty()) {  // r as this configuration resolves it
    const int r = lt::read_trainer_config(tc).lora.r;
    row.flags.insert(row.flags.end(), {"--lora_alpha", alpha_value(alpha, r)});
  }
  row.flags.insert(row.flags.end(), {"--output_dir", row.output_dir, "--overwrite_output_dir", "true"});
  tc.flags = row.flags;
  const lt::TrainConfig cfg = lt::read_trainer_config(tc);
  row.lora_r = cfg.lora.r;
  row.lora_alpha = cfg.lora.alpha;
  for (const auto& t : cfg.lora.target_modules) row.target_modules += (row.target_modules.empty() ? "" : ",") + t;
  return row;
}

// Trains one configuration and fills in its measurements. The loop is the one a leantune::Trainer
// runs (the same services as `leantune train`), with the sweep's base: the model's files and its
// converted frozen weights are loaded by the first run and shared by the next ones.
void run_row(const SweepOptions& o, SweepRow& row, lt::BaseCache& base) {
  reset_peak_rss();
  const auto t0 = std::chrono::steady_clock::now();
  TrainerConfig tc{o.yaml_file, "", row.flags};
  const lt::TrainConfig cfg = lt::read_trainer_config(tc);
  lt::RunServices services = lt::training_services(cfg);
  services.base = &base;
  std::string ledger;
  lt::RunWatchers watchers;
  watchers.print = o.print;
  watchers.on_ledger = [&](const std::string& j) { ledger = j; };
  const int loads = base.file_loads(), builds = base.frozen_builds();
  lt::TrainLoop loop(cfg, std::move(services), {}, std::move(watchers));
  row.base_loaded = base.file_loads() > loads;
  row.frozen_converted = base.frozen_builds() > builds;
  row.trainable_params = loop.model().trainable_count();
  while (!loop.done()) {
    const lt::StepStats s = loop.step();
    row.tokens += s.tokens;
    row.train_seconds += s.seconds;
    row.train_loss = s.loss;
  }
  const lt::TrainResult sum = loop.finish();
  row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  row.steps = sum.steps;
  row.first_eval_loss = sum.first_eval_loss;
  row.eval_loss = sum.last_eval_loss;
  row.tokens_per_s = row.train_seconds > 0 ? double(row.tokens) / row.train_seconds : 0;
  if (!ledger.empty()) {
    const auto j = nlohmann::json::parse(ledger);
    row.peak_rss_bytes = j.value("peak_rss_bytes", size_t(0));
    row.predicted_peak_bytes = j.value("predicted_peak_bytes", size_t(0));
  }
  row.usd = row.seconds / 3600.0 * o.price_per_hour;
  row.loss_reduction = double(row.first_eval_loss) - double(row.eval_loss);
  row.loss_reduction_per_hour = row.seconds > 0 ? row.loss_reduction / (row.seconds / 3600.0) : 0;
}

}  // namespace

SweepResult run_sweep(const SweepOptions& o) {
  LT_CHECK(std::isfinite(o.price_per_hour) && o.price_per_hour >= 0,
           "sweep --price-per-hour: {} is out of range: it must be >= 0 (US dollars per hour)", o.price_per_hour);
  LT_CHECK(std::isfinite(o.loss_tolerance) && o.loss_tolerance >= 0 && o.loss_tolerance < 1,
           "sweep --loss-tolerance: {} is out of range: it must be in [0, 1)", o.loss_tolerance);
  const std::vector<Combo> combos = expand(parse_grid(o.grid));
  SweepResult res;
  for (size_t i = 0; i < combos.size(); ++i) {  // every configuration checked before any trains
    try {
      res.rows.push_back(prepare_row(o, combos[i], int(i)));
    } catch (const std::exception& e) {
      lt::fail("sweep: configuration {} ({}): {}", i + 1, lt::excerpt(lt::grid_label(combos[i].grid), 120), e.what());
    }
  }
  fs::create_directories(o.out_dir);
  lt::BaseCache base;  // the base model, loaded by the first run and shared by the others
  for (size_t i = 0; i < res.rows.size(); ++i) {
    SweepRow& row = res.rows[i];
    if (o.print) fmt::print("\n=== sweep {}/{}: {} -> {}\n", i + 1, res.rows.size(), row.label, row.output_dir);
    try {
      run_row(o, row, base);
    } catch (const std::exception& e) {
      lt::fail("sweep: configuration {} ({}): {}", i + 1, lt::excerpt(row.label, 120), e.what());
    }
  }
  res.base_loads = base.file_loads();
  res.frozen_conversions = base.frozen_builds();
  lt::finish_sweep(o, res);
  if (o.print) fmt::print("\n{}\nwrote {}/sweep.jsonl, sweep.csv, sweep.md and sweep.html\n", res.markdown, o.out_dir);
  return res;
}

}  // namespace leantune
