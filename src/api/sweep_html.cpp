// sweep.html (api/sweep_report.h): a self-contained page, like a run's report.html — scatter charts
// of held-out loss against trainable parameters, wall time (with the Pareto front) and peak RSS,
// a bar per configuration (held-out loss before and after), and the table.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>

#include "api/sweep_report.h"

namespace lt {

namespace {

using leantune::SweepResult;
using leantune::SweepRow;

const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

std::string esc(const std::string& s) {
  std::string o;
  for (char ch : s) o += ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '&' ? "&amp;" : ch == '\'' ? "&#39;" : std::string(1, ch);
  return o;
}

// Points colored by target set; front (when given) joins the Pareto runs in x order.
std::string scatter(const std::string& title, const std::string& xlabel, const SweepResult& res,
                    double (*xof)(const SweepRow&), bool front) {
  const double W = 560, H = 260, L = 64, R = 16, T = 28, B = 36;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const auto& r : res.rows) {
    x0 = std::min(x0, xof(r)); x1 = std::max(x1, xof(r));
    y0 = std::min(y0, double(r.eval_loss)); y1 = std::max(y1, double(r.eval_loss));
  }
  if (x1 == x0) { x1 += 1; x0 -= 1; }
  if (y1 == y0) { y1 += 0.01; y0 -= 0.01; }
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad; y1 += pad;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return T + (y1 - y) / (y1 - y0) * (H - T - B); };
  std::string out = fmt::format("<svg width='{}' height='{}' xmlns='http://www.w3.org/2000/svg'>"
                                "<text x='{}' y='18' font-weight='bold'>{}</text>", W, H, L, esc(title));
  out += fmt::format("<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#999'/>", L, T, W - L - R, H - T - B);
  out += fmt::format("<text x='4' y='{}' font-size='11'>{:.4f}</text><text x='4' y='{}' font-size='11'>{:.4f}</text>",
                     T + 10, y1, H - B, y0);
  out += fmt::format("<text x='{}' y='{}' font-size='11'>{:.4g}</text><text x='{}' y='{}' font-size='11' "
                     "text-anchor='end'>{:.4g}</text><text x='{}' y='{}' font-size='11' text-anchor='middle'>{}</text>",
                     L, H - 20, x0, W - R, H - 20, x1, (L + W - R) / 2, H - 4, esc(xlabel));
  std::map<std::string, int> color;
  for (const auto& r : res.rows) color.emplace(r.target_modules, int(color.size()));
  if (front) {
    std::vector<const SweepRow*> f;
    for (const auto& r : res.rows) if (r.pareto) f.push_back(&r);
    std::sort(f.begin(), f.end(), [&](auto* a, auto* b) { return xof(*a) < xof(*b); });
    std::string pts;
    for (auto* r : f) pts += fmt::format("{:.1f},{:.1f} ", px(xof(*r)), py(r->eval_loss));
    out += fmt::format("<polyline fill='none' stroke='#444' stroke-dasharray='4 3' points='{}'/>", pts);
  }
  for (size_t i = 0; i < res.rows.size(); ++i) {
    const SweepRow& r = res.rows[i];
    const char* c = kColors[size_t(color[r.target_modules]) % 8];
    out += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='{}' fill='{}'{}><title>{}: {:.4f}</title></circle>",
                       px(xof(r)), py(r.eval_loss), int(i) == res.recommended ? 6 : 4, c,
                       int(i) == res.recommended ? " stroke='black' stroke-width='2'" : "", esc(r.label), r.eval_loss);
  }
  int k = 0;
  for (const auto& [t, ci] : color)
    out += fmt::format("<text x='{}' y='{}' font-size='10' fill='{}'>{}</text>", L + 6, T + 14 + 12 * k++,
                       kColors[size_t(ci) % 8], esc(t));
  return out + "</svg>";
}

// Per configuration: the held-out loss after (bar) with the loss before as a tick.
std::string bars(const SweepResult& res) {
  const double W = 560, row = 18, L = 230, T = 28;
  const double H = T + row * double(res.rows.size()) + 24;
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& r : res.rows) {
    lo = std::min({lo, double(r.eval_loss), double(r.first_eval_loss)});
    hi = std::max({hi, double(r.eval_loss), double(r.first_eval_loss)});
  }
  lo -= (hi - lo) * 0.1 + 1e-3;
  auto px = [&](double v) { return L + (v - lo) / (hi - lo) * (W - L - 16); };
  std::string out = fmt::format("<svg width='{}' height='{}' xmlns='http://www.w3.org/2000/svg'><text x='4' y='18' "
                                "font-weight='bold'>held-out loss per configuration (tick: before training)</text>", W, H);
  for (size_t i = 0; i < res.rows.size(); ++i) {
    const SweepRow& r = res.rows[i];
    const double y = T + row * double(i);
    out += fmt::format("<text x='4' y='{:.0f}' font-size='10'>{}{}</text>", y + 12, esc(r.label),
                       int(i) == res.recommended ? " *" : "");
    out += fmt::format("<rect x='{}' y='{:.0f}' width='{:.1f}' height='{}' fill='{}'><title>{:.4f}</title></rect>", L, y + 2,
                       px(r.eval_loss) - L, row - 5, r.pareto ? "#2ca02c" : "#1f77b4", r.eval_loss);
    out += fmt::format("<line x1='{0:.1f}' x2='{0:.1f}' y1='{1:.0f}' y2='{2:.0f}' stroke='#d62728'/>", px(r.first_eval_loss),
                       y, y + row - 2);
  }
  out += fmt::format("<text x='{}' y='{:.0f}' font-size='11'>{:.4f}</text><text x='{}' y='{:.0f}' font-size='11' "
                     "text-anchor='end'>{:.4f}</text>", L, H - 6, lo, W - 16, H - 6, hi);
  return out + "</svg>";
}

// The markdown tables as HTML (only what finish_sweep writes: headings, paragraphs, pipe tables).
std::string markdown_html(const std::string& md) {
  std::string out;
  bool table = false;
  size_t start = 0;
  while (start < md.size()) {
    size_t end = md.find('\n', start);
    if (end == std::string::npos) end = md.size();
    const std::string line = md.substr(start, end - start);
    start = end + 1;
    const bool row = !line.empty() && line[0] == '|';
    if (table && !row) { out += "</table>\n"; table = false; }
    if (row) {
      if (line.rfind("|---", 0) == 0) continue;
      const bool head = !table;
      if (!table) { out += "<table>"; table = true; }
      out += "<tr>";
      size_t a = 1;
      while (a < line.size()) {
        const size_t b = line.find('|', a);
        if (b == std::string::npos) break;
        out += fmt::format("<{0}>{1}</{0}>", head ? "th" : "td", esc(line.substr(a, b - a)));
        a = b + 1;
      }
      out += "</tr>\n";
    } else if (line.rfind("## ", 0) == 0) out += "<h2>" + esc(line.substr(3)) + "</h2>\n";
    else if (line.rfind("# ", 0) == 0) continue;  // the page has its own title
    else if (!line.empty()) out += "<p>" + esc(line) + "</p>\n";
  }
  return out + (table ? "</table>\n" : "");
}

}  // namespace

std::string sweep_html(const leantune::SweepOptions& o, const SweepResult& res) {
  std::string h = "<!doctype html><html><head><meta charset='utf-8'><title>leantune sweep</title><style>"
                  "body{font-family:sans-serif;margin:20px}table{border-collapse:collapse;font-size:12px}"
                  "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}svg{margin:6px}</style></head><body>";
  h += fmt::format("<h1>LoRA sweep: {} configurations</h1><p>grid: <code>{}</code>{}</p>", res.rows.size(), esc(o.grid),
                   o.yaml_file.empty() ? "" : " over <code>" + esc(o.yaml_file) + "</code>");
  h += "<div>";
  h += scatter("held-out loss vs trainable parameters", "trainable parameters", res,
               [](const SweepRow& r) { return double(r.trainable_params); }, false);
  h += scatter("held-out loss vs time (dashed: Pareto front)", "wall time per run (s)", res,
               [](const SweepRow& r) { return r.seconds; }, true);
  h += scatter("held-out loss vs peak memory", "peak RSS (MiB)", res,
               [](const SweepRow& r) { return double(r.peak_rss_bytes) / (1 << 20); }, false);
  h += bars(res);
  h += "</div>" + markdown_html(res.markdown);
  return h + "</body></html>\n";
}

}  // namespace lt
