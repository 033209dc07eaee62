// A sweep's table and findings (api/sweep_report.h): the Pareto front, the recommendation, the
// per-axis effects (α/r pairs, target modules, rank against cost) as markdown, and the JSONL / CSV
// rows. sweep.html is api/sweep_html.cpp.
#include "api/sweep_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/memory_plan.h"

namespace lt {

namespace {

namespace fs = std::filesystem;
using leantune::SweepOptions;
using leantune::SweepResult;
using leantune::SweepRow;

std::string value_of(const SweepRow& r, const std::string& key) {
  for (const auto& [k, v] : r.grid)
    if (k == key) return v;
  return "";
}

void mark_pareto(std::vector<SweepRow>& rows) {
  for (auto& a : rows) {
    a.pareto = true;
    for (const auto& b : rows)
      if (&a != &b && b.seconds <= a.seconds && b.eval_loss <= a.eval_loss &&
          (b.seconds < a.seconds || b.eval_loss < a.eval_loss))
        a.pareto = false;
  }
}

// The cheapest (time) run whose held-out loss is within tolerance of the best.
int recommend(const std::vector<SweepRow>& rows, double tolerance) {
  float best = INFINITY;
  for (const auto& r : rows) best = std::min(best, r.eval_loss);
  int pick = -1;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].eval_loss <= best + tolerance * std::fabs(best) && (pick < 0 || rows[i].seconds < rows[size_t(pick)].seconds))
      pick = int(i);
  return pick;
}

std::string main_table(const SweepResult& res, double price) {
  std::string md = "| # | configuration | r | α | α/r | trainable | held-out before | held-out after | Δ loss | "
                   "peak RSS (predicted) | tokens/s | time s | US$ | Δ loss / h | front |\n"
                   "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < res.rows.size(); ++i) {
    const SweepRow& r = res.rows[i];
    md += fmt::format("| {} | {}{} | {} | {:g} | {:g} | {} | {:.4f} | {:.4f} | {:.4f} | {} ({}) | {:.0f} | {:.2f} | "
                      "{} | {:.3g} | {} |\n",
                      i + 1, r.label, int(i) == res.recommended ? " **(recommended)**" : "", r.lora_r, r.lora_alpha,
                      r.lora_alpha / r.lora_r, r.trainable_params, r.first_eval_loss, r.eval_loss, r.loss_reduction,
                      format_bytes(r.peak_rss_bytes), format_bytes(r.predicted_peak_bytes), r.tokens_per_s,
                      r.seconds, price > 0 ? fmt::format("{:.5f}", r.usd) : "-", r.loss_reduction_per_hour,
                      r.pareto ? "yes" : "");
  }
  return md;
}

// Per value of one grid key: how many runs, best and mean held-out loss, mean cost.
std::string axis_table(const SweepResult& res, const std::string& key) {
  struct Acc { int n = 0; double best = INFINITY, loss = 0, params = 0, secs = 0, peak = 0; };
  std::vector<std::string> order;
  std::map<std::string, Acc> acc;
  for (const auto& r : res.rows) {
    const std::string v = value_of(r, key);
    if (!acc.count(v)) order.push_back(v);
    Acc& a = acc[v];
    a.n++;
    a.best = std::min(a.best, double(r.eval_loss));
    a.loss += r.eval_loss; a.params += double(r.trainable_params); a.secs += r.seconds; a.peak += double(r.peak_rss_bytes);
  }
  std::string md = fmt::format("| {} | runs | best held-out | mean held-out | mean trainable | mean time s | mean peak RSS |\n"
                               "|---|---|---|---|---|---|---|\n", key);
  for (const auto& v : order) {
    const Acc& a = acc[v];
    md += fmt::format("| {} | {} | {:.4f} | {:.4f} | {:.0f} | {:.2f} | {} |\n", v, a.n, a.best, a.loss / a.n,
                      a.params / a.n, a.secs / a.n, format_bytes(size_t(a.peak / a.n)));
  }
  return md;
}

// α/r: runs that differ only in lora_alpha, side by side.
std::string alpha_pairs(const SweepResult& res) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const SweepRow*>> groups;
  for (const auto& r : res.rows) {
    std::string rest;
    for (const auto& [k, v] : r.grid)
      if (k != "lora_alpha") rest += (rest.empty() ? "" : " ") + k + "=" + v;
    if (!groups.count(rest)) order.push_back(rest);
    groups[rest].push_back(&r);
  }
  std::map<std::string, int> wins;
  std::string md = "| runs differing only in α | held-out loss per α (α/r) | best α |\n|---|---|---|\n";
  for (const auto& g : order) {
    const auto& rs = groups[g];
    const SweepRow* best = *std::min_element(rs.begin(), rs.end(), [](auto* a, auto* b) { return a->eval_loss < b->eval_loss; });
    std::string cells;
    for (const SweepRow* r : rs) cells += fmt::format("{}α={:g} ({:g}): {:.4f}", cells.empty() ? "" : ", ", r->lora_alpha,
                                                      r->lora_alpha / r->lora_r, r->eval_loss);
    wins[value_of(*best, "lora_alpha")]++;
    md += fmt::format("| {} | {} | {} |\n", g.empty() ? "(all)" : g, cells, value_of(*best, "lora_alpha"));
  }
  md += "\nBest α per group:";
  for (const auto& [v, n] : wins) md += fmt::format(" lora_alpha={} in {} of {};", v, n, order.size());
  return md + "\n";
}

// Rank against cost: per lora_r, and the held-out loss bought by each step up in rank.
std::string rank_cost(const SweepResult& res) {
  std::map<int, std::pair<double, double>> by_r;  // r -> best loss, trainable at that best
  for (const auto& r : res.rows) {
    auto it = by_r.find(r.lora_r);
    if (it == by_r.end() || r.eval_loss < it->second.first) by_r[r.lora_r] = {r.eval_loss, double(r.trainable_params)};
  }
  std::string md = "| r | best held-out | its trainable | Δ loss from the rank below | per 1k more trainable |\n|---|---|---|---|---|\n";
  const std::pair<double, double>* prev = nullptr;
  for (const auto& [r, b] : by_r) {
    if (prev) {
      const double d = prev->first - b.first, dp = (b.second - prev->second) / 1000.0;
      md += fmt::format("| {} | {:.4f} | {:.0f} | {:+.4f} | {} |\n", r, b.first, b.second, d,
                        dp != 0 ? fmt::format("{:+.5f}", d / dp) : "-");
    } else {
      md += fmt::format("| {} | {:.4f} | {:.0f} | - | - |\n", r, b.first, b.second);
    }
    prev = &b;
  }
  return md;
}

std::string findings(const SweepOptions& o, const SweepResult& res) {
  std::string md;
  bool has_alpha = false, has_targets = false, has_r = false;
  for (const auto& [k, v] : res.rows[0].grid) {
    has_alpha |= k == "lora_alpha"; has_targets |= k == "lora_target_modules"; has_r |= k == "lora_r";
  }
  if (has_alpha) md += "\n## α/r mismatch\n\n" + alpha_pairs(res);
  if (has_targets) md += "\n## Target selection\n\n" + axis_table(res, "lora_target_modules");
  if (has_r) md += "\n## Rank against cost\n\n" + axis_table(res, "lora_r") + "\n" + rank_cost(res);
  for (const auto& [k, v] : res.rows[0].grid)
    if (k != "lora_alpha" && k != "lora_target_modules" && k != "lora_r") md += "\n## " + k + "\n\n" + axis_table(res, k);
  const SweepRow& rec = res.rows[size_t(res.recommended)];
  md += fmt::format("\n## Recommendation\n\n{} (run {}): held-out loss {:.4f}, {} trainable parameters, {:.2f} s — the "
                    "cheapest run (time{}) whose held-out loss is within {:g}% of the best.\n",
                    rec.label, res.recommended + 1, rec.eval_loss, rec.trainable_params, rec.seconds,
                    o.price_per_hour > 0 ? fmt::format(", at ${:g}/h", o.price_per_hour) : "", 100 * o.loss_tolerance);
  return md;
}

// How often the sweep loaded the base and converted its frozen weights.
std::string base_line(const SweepResult& res) {
  const size_t n = res.rows.size();
  return fmt::format("\nbase model: loaded {}, for {} run{}; frozen weights converted {} (each later run borrowed them "
                     "read-only{}).\n", res.base_loads == 1 ? "once" : fmt::format("{} times", res.base_loads), n,
                     n == 1 ? "" : "s", res.frozen_conversions == 1 ? "once" : fmt::format("{} times", res.frozen_conversions),
                     res.frozen_conversions > 1 ? "; a run whose precision or quantization differs converts them again" : "");
}

nlohmann::json row_json(const SweepRow& r, int index, bool recommended) {
  nlohmann::json g = nlohmann::json::object();
  for (const auto& [k, v] : r.grid) g[k] = v;
  return {{"run", index + 1}, {"label", r.label}, {"grid", g}, {"flags", r.flags}, {"output_dir", r.output_dir},
          {"lora_r", r.lora_r}, {"lora_alpha", r.lora_alpha}, {"alpha_over_r", r.lora_alpha / r.lora_r},
          {"target_modules", r.target_modules}, {"trainable_params", r.trainable_params}, {"steps", r.steps},
          {"first_eval_loss", r.first_eval_loss}, {"eval_loss", r.eval_loss}, {"train_loss", r.train_loss},
          {"tokens", r.tokens}, {"seconds", r.seconds}, {"train_seconds", r.train_seconds},
          {"tokens_per_s", r.tokens_per_s}, {"peak_rss_bytes", r.peak_rss_bytes},
          {"predicted_peak_bytes", r.predicted_peak_bytes}, {"usd", r.usd}, {"loss_reduction", r.loss_reduction},
          {"loss_reduction_per_hour", r.loss_reduction_per_hour}, {"pareto", r.pareto}, {"recommended", recommended},
          {"base_loaded", r.base_loaded}, {"frozen_converted", r.frozen_converted}};
}

std::string csv(const SweepResult& res) {
  const char* cols[] = {"run", "label", "lora_r", "lora_alpha", "alpha_over_r", "target_modules", "trainable_params",
                        "steps", "first_eval_loss", "eval_loss", "train_loss", "tokens", "seconds", "train_seconds",
                        "tokens_per_s", "peak_rss_bytes", "predicted_peak_bytes", "usd", "loss_reduction",
                        "loss_reduction_per_hour", "pareto", "recommended", "base_loaded", "frozen_converted"};
  std::string out;
  for (const char* c : cols) out += std::string(out.empty() ? "" : ",") + c;
  out += "\n";
  for (size_t i = 0; i < res.rows.size(); ++i) {
    const nlohmann::json j = row_json(res.rows[i], int(i), int(i) == res.recommended);
    std::string line;
    for (const char* c : cols) {
      std::string v = j[c].is_string() ? "\"" + j[c].get<std::string>() + "\"" : j[c].dump();
      line += (line.empty() ? "" : ",") + v;
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace

std::string grid_label(const std::vector<std::pair<std::string, std::string>>& grid) {
  std::string s;
  for (const auto& [k, v] : grid) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s;
}

void finish_sweep(const SweepOptions& o, SweepResult& res) {
  mark_pareto(res.rows);
  res.recommended = recommend(res.rows, o.loss_tolerance);
  res.markdown = "# LoRA sweep\n\n" + main_table(res, o.price_per_hour) +
                 "\nfront: no other run is both faster (cheaper) and lower in held-out loss.\n" + base_line(res) +
                 findings(o, res);
  std::string jsonl;
  for (size_t i = 0; i < res.rows.size(); ++i) jsonl += row_json(res.rows[i], int(i), int(i) == res.recommended).dump() + "\n";
  const fs::path d(o.out_dir);
  write_text_file_atomic((d / "sweep.jsonl").string(), jsonl);
  write_text_file_atomic((d / "sweep.csv").string(), csv(res));
  write_text_file_atomic((d / "sweep.md").string(), res.markdown);
  write_text_file_atomic((d / "sweep.html").string(), sweep_html(o, res));
}

}  // namespace lt
