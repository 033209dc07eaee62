#include "train/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "core/json_parse.h"
#include "core/mapped_file.h"
#include "core/memory_plan.h"
#include "core/atomic_file.h"

namespace lt {

namespace {

struct Series {
  std::string name, color;
  std::vector<std::pair<double, double>> pts;
};

// One SVG line chart (x = step) with axis labels at the extremes.
std::string svg_chart(const std::string& title, const std::vector<Series>& series, const std::string& unit) {
  const double W = 560, H = 220, L = 60, R = 16, T = 28, B = 30;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const auto& s : series)
    for (auto [x, y] : s.pts) {
      x0 = std::min(x0, x); x1 = std::max(x1, x); y0 = std::min(y0, y); y1 = std::max(y1, y);
    }
  std::string out = fmt::format("<svg width='{}' height='{}' xmlns='http://www.w3.org/2000/svg'>"
                                "<text x='{}' y='18' font-weight='bold'>{}</text>", W, H, L, title);
  if (!std::isfinite(x0)) return out + "<text x='60' y='100'>no data</text></svg>";
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) { y1 += 1; y0 -= 1; }
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return T + (y1 - y) / (y1 - y0) * (H - T - B); };
  out += fmt::format("<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#999'/>", L, T, W - L - R, H - T - B);
  out += fmt::format("<text x='4' y='{}' font-size='11'>{:.4g}{}</text>", T + 10, y1, unit);
  out += fmt::format("<text x='4' y='{}' font-size='11'>{:.4g}{}</text>", H - B, y0, unit);
  out += fmt::format("<text x='{}' y='{}' font-size='11'>step {:.0f}</text>", L, H - 10, x0);
  out += fmt::format("<text x='{}' y='{}' font-size='11' text-anchor='end'>step {:.0f}</text>", W - R, H - 10, x1);
  int legend = 0;
  for (const auto& s : series) {
    std::string pts;
    for (auto [x, y] : s.pts) pts += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    out += fmt::format("<polyline fill='none' stroke='{}' stroke-width='1.5' points='{}'/>", s.color, pts);
    if (s.pts.size() < 40)
      for (auto [x, y] : s.pts) out += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='2.5' fill='{}'/>", px(x), py(y), s.color);
    out += fmt::format("<text x='{}' y='18' font-size='12' fill='{}'>{}</text>", W - R - 150 + 75 * legend++, s.color, s.name);
  }
  return out + "</svg>";
}

const char* kColors[] = {"#1f77b4", "#aec7e8", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79"};

std::string color_of(const std::string& cat) {
  for (size_t c = 0; c < kNumCategories; ++c)
    if (category_name(Category(c)) == cat) return kColors[c];
  return kColors[11];
}

std::string esc(const std::string& s) {
  std::string o;
  for (char ch : s) o += ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '&' ? "&amp;" : std::string(1, ch);
  return o;
}

// Horizontal bars: per category, the planned bytes and (when given) the measured ones below them.
std::string svg_category_bars(const std::vector<std::string>& cats, const nlohmann::json& planned,
                              const nlohmann::json* measured) {
  double mx = 1;
  for (const auto& c : cats) {
    mx = std::max(mx, planned.value(c, 0.0));
    if (measured) mx = std::max(mx, measured->value(c, 0.0));
  }
  const double L = 130, W = 560, bar = measured ? 9 : 14, row = measured ? 24 : 20;
  const double H = 40 + row * double(cats.size());
  std::string out = fmt::format("<svg class='chart' width='{}' height='{}' xmlns='http://www.w3.org/2000/svg'>"
                                "<text x='4' y='16' font-weight='bold'>memory by category{}</text>", W + 120, H,
                                measured ? ": planned (solid) vs measured resident (hatched)" : " (planned)");
  out += "<defs><pattern id='hatch' width='4' height='4' patternUnits='userSpaceOnUse' patternTransform='rotate(45)'>"
         "<rect width='2' height='4' fill='#555'/></pattern></defs>";
  double y = 30;
  for (const auto& c : cats) {
    double p = planned.value(c, 0.0);
    out += fmt::format("<text x='4' y='{}' font-size='11'>{}</text>", y + bar, esc(c));
    out += fmt::format("<rect x='{}' y='{}' width='{:.1f}' height='{}' fill='{}'/>", L, y, (W - L) * p / mx, bar, color_of(c));
    out += fmt::format("<text x='{:.1f}' y='{}' font-size='10'>{}</text>", L + (W - L) * p / mx + 4, y + bar - 1,
                       format_bytes(size_t(p)));
    if (measured) {
      double m = measured->value(c, 0.0);
      out += fmt::format("<rect x='{}' y='{}' width='{:.1f}' height='{}' fill='url(#hatch)' stroke='{}'/>", L, y + bar + 1,
                         (W - L) * m / mx, bar, color_of(c));
      out += fmt::format("<text x='{:.1f}' y='{}' font-size='10'>{}</text>", L + (W - L) * m / mx + 4, y + 2 * bar,
                         format_bytes(size_t(m)));
    }
    y += row;
  }
  return out + "</svg>";
}

// The first step's timeline: one stacked column per ledger sample (resident bytes per category),
// and the process RSS as a line over them.
std::string svg_timeline(const nlohmann::json& samples) {
  const double W = 680, H = 260, L = 60, T = 28, B = 50, R = 10;
  double mx = 1;
  for (const auto& s : samples) mx = std::max(mx, s.value("rss_bytes", 0.0));
  const size_t n = samples.size();
  std::string out = fmt::format("<svg class='chart' width='{}' height='{}' xmlns='http://www.w3.org/2000/svg'>"
                                "<text x='{}' y='18' font-weight='bold'>memory over the first step (resident bytes per "
                                "category; line: process RSS)</text>", W, H, L);
  if (!n) return out + "<text x='60' y='100'>no samples</text></svg>";
  const double cw = (W - L - R) / double(n);
  auto py = [&](double v) { return T + (1 - v / mx) * (H - T - B); };
  std::string line;
  for (size_t i = 0; i < n; ++i) {
    const auto& s = samples[i];
    double acc = 0, x = L + cw * double(i);
    if (s.contains("resident"))
      for (auto it = s["resident"].begin(); it != s["resident"].end(); ++it) {
        double v = it.value().get<double>();
        out += fmt::format("<rect x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{:.1f}' fill='{}'><title>{} {}: {}</title></rect>",
                           x + 1, py(acc + v), std::max(cw - 2, 1.0), py(acc) - py(acc + v), color_of(it.key()),
                           s.value("phase", ""), it.key(), format_bytes(size_t(v)));
        acc += v;
      }
    line += fmt::format("{:.1f},{:.1f} ", x + cw / 2, py(s.value("rss_bytes", 0.0)));
    std::string label = s.value("phase", "") + (s.contains("layer") ? " " + std::to_string(s["layer"].get<int>()) : "");
    if (n <= 24 || i % (n / 12 + 1) == 0 || i + 1 == n)
      out += fmt::format("<text font-size='9' transform='translate({:.1f},{}) rotate(40)'>{}</text>", x + 2, H - B + 10,
                         esc(label));
  }
  out += fmt::format("<polyline fill='none' stroke='black' stroke-width='1.5' points='{}'/>", line);
  out += fmt::format("<text x='4' y='{}' font-size='11'>{}</text>", T + 10, format_bytes(size_t(mx)));
  out += fmt::format("<text x='4' y='{}' font-size='11'>0</text>", H - B);
  return out + "</svg>";
}

}  // namespace

std::string memory_plan_html(const nlohmann::json& planned, const nlohmann::json* ledger) {
  std::vector<std::string> cats;
  for (auto it = planned.begin(); it != planned.end(); ++it) cats.push_back(it.key());
  std::string html = "<h2>Memory</h2>";
  nlohmann::json measured_copy;
  const nlohmann::json* measured = nullptr;
  if (ledger && ledger->contains("max_resident")) {
    measured_copy = (*ledger)["max_resident"];
    if (ledger->contains("measured_data_bytes")) measured_copy["data"] = (*ledger)["measured_data_bytes"];
    measured = &measured_copy;
  }
  html += svg_category_bars(cats, planned, measured);
  html += "<table><tr><th>category</th><th>planned</th>";
  if (measured) html += "<th>measured resident</th>";
  html += "</tr>";
  for (const auto& c : cats) {
    html += fmt::format("<tr><td>{}</td><td>{}</td>", esc(c), format_bytes(planned[c].get<size_t>()));
    if (measured)
      html += fmt::format("<td>{}</td>", format_bytes(measured->value(c, size_t(0))));
    html += "</tr>";
  }
  html += "</table>";
  if (ledger) {
    size_t pred = ledger->value("predicted_peak_bytes", size_t(0)), peak = ledger->value("peak_rss_bytes", size_t(0));
    html += fmt::format("<p>process baseline {}; predicted peak {}; measured peak RSS {} ({:+.1f}%), at phase '{}'</p>",
                        format_bytes(ledger->value("baseline_bytes", size_t(0))), format_bytes(pred), format_bytes(peak),
                        pred ? 100.0 * (double(peak) - double(pred)) / double(pred) : 0.0,
                        esc(ledger->value("peak_phase", std::string("?"))));
    if (ledger->contains("samples")) html += svg_timeline((*ledger)["samples"]);
  }
  return html;
}

std::string write_training_report(const std::string& output_dir) {
  namespace fs = std::filesystem;
  fs::path metrics = fs::path(output_dir) / "metrics.jsonl";
  std::ifstream in(metrics);
  LT_CHECK(in.good(), "{}: cannot open", metrics.string());
  Series loss{"train", "#1f77b4", {}}, eval{"eval", "#d62728", {}}, lr{"lr", "#2ca02c", {}},
      tps{"tokens/s", "#9467bd", {}}, mem{"RSS MiB", "#8c564b", {}};
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    nlohmann::json j = parse_json(line, fmt::format("{}:{}", metrics.string(), n));
    double step = j.value("step", 0.0);
    if (j.contains("loss")) loss.pts.push_back({step, j["loss"].get<double>()});
    if (j.contains("eval_loss")) eval.pts.push_back({step, j["eval_loss"].get<double>()});
    if (j.contains("lr")) lr.pts.push_back({step, j["lr"].get<double>()});
    if (j.contains("tokens_per_s")) tps.pts.push_back({step, j["tokens_per_s"].get<double>()});
    if (j.contains("rss_bytes")) mem.pts.push_back({step, j["rss_bytes"].get<double>() / 1048576.0});
  }
  std::string html = "<!doctype html><html><head><meta charset='utf-8'><title>leantune training report</title>"
                     "<style>body{font-family:sans-serif;margin:24px} svg{margin:8px;background:#fafafa} "
                     "td,th{padding:2px 10px;text-align:right} td:first-child{text-align:left}</style>"
                     "</head><body>";
  html += fmt::format("<h1>leantune training report</h1><p>{}</p>", output_dir);
  if (!eval.pts.empty())
    html += fmt::format("<p>eval loss {:.4f} &rarr; {:.4f} (perplexity {:.2f} &rarr; {:.2f})</p>", eval.pts.front().second,
                        eval.pts.back().second, std::exp(eval.pts.front().second), std::exp(eval.pts.back().second));
  html += svg_chart("loss", {loss, eval}, "");
  html += svg_chart("learning rate", {lr}, "");
  html += svg_chart("throughput", {tps}, "");
  html += svg_chart("memory", {mem}, "");
  fs::path ledger_path = fs::path(output_dir) / "ledger.json";
  if (fs::exists(ledger_path)) {
    nlohmann::json lj = load_json_file(ledger_path.string());
    if (lj.contains("planned")) html += memory_plan_html(lj["planned"], &lj);
  }
  html += "</body></html>\n";
  std::string path = (fs::path(output_dir) / "report.html").string();
  write_text_file_atomic(path, html);
  return path;
}

}  // namespace lt
