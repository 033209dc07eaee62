#include "train/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"

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

}  // namespace

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
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      fail("{}:{}: malformed JSON line", metrics.string(), n);
    }
    double step = j.value("step", 0.0);
    if (j.contains("loss")) loss.pts.push_back({step, j["loss"].get<double>()});
    if (j.contains("eval_loss")) eval.pts.push_back({step, j["eval_loss"].get<double>()});
    if (j.contains("lr")) lr.pts.push_back({step, j["lr"].get<double>()});
    if (j.contains("tokens_per_s")) tps.pts.push_back({step, j["tokens_per_s"].get<double>()});
    if (j.contains("rss_bytes")) mem.pts.push_back({step, j["rss_bytes"].get<double>() / 1048576.0});
  }
  std::string html = "<!doctype html><html><head><meta charset='utf-8'><title>leantune training report</title>"
                     "<style>body{font-family:sans-serif;margin:24px} svg{margin:8px;background:#fafafa}</style>"
                     "</head><body>";
  html += fmt::format("<h1>leantune training report</h1><p>{}</p>", output_dir);
  if (!eval.pts.empty())
    html += fmt::format("<p>eval loss {:.4f} &rarr; {:.4f} (perplexity {:.2f} &rarr; {:.2f})</p>", eval.pts.front().second,
                        eval.pts.back().second, std::exp(eval.pts.front().second), std::exp(eval.pts.back().second));
  html += svg_chart("loss", {loss, eval}, "");
  html += svg_chart("learning rate", {lr}, "");
  html += svg_chart("throughput", {tps}, "");
  html += svg_chart("memory", {mem}, "");
  html += "</body></html>\n";
  std::string path = (fs::path(output_dir) / "report.html").string();
  write_text_file_atomic(path, html);
  return path;
}

}  // namespace lt
