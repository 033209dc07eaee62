#include "core/profiler.h"

#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <map>
#include <vector>

#include "core/atomic_file.h"

namespace lt::prof {

bool g_enabled = false, g_routed = false;

namespace {

struct Event {
  const char* name;
  double t0, dur, child, flops, bytes;
  int depth;
};

// The thread that started profiling: the only one that records (a kernel that runs a GEMM on each
// thread of its team, quant_linear.cpp's and half_linear.cpp's prefill slices, would otherwise push
// onto the global stack from several threads at once).
thread_local bool t_recording = false;

std::vector<Event> g_events;
std::vector<size_t> g_stack;
size_t g_dropped = 0;
double g_origin = 0;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

void start(size_t max_events) {
  std::vector<Event>().swap(g_events);  // exactly max_events of capacity
  g_events.reserve(max_events);
  g_stack.clear();
  g_stack.reserve(64);
  g_dropped = 0;
  g_origin = now();
  g_enabled = true;
  t_recording = true;
}

void stop() {
  g_enabled = false;
  t_recording = false;
}

void Scope::begin(const char* name, double flops, double bytes) {
  if (!t_recording) return;
  if (g_events.size() == g_events.capacity() || g_stack.size() == g_stack.capacity()) {
    ++g_dropped;
    return;
  }
  index_ = g_events.size();
  g_events.push_back({name, now() - g_origin, 0, 0, flops, bytes, int(g_stack.size())});
  g_stack.push_back(index_);
  active_ = true;
}

void Scope::end() {
  Event& e = g_events[index_];
  e.dur = now() - g_origin - e.t0;
  g_stack.pop_back();
  if (!g_stack.empty()) g_events[g_stack.back()].child += e.dur;
}

void write_trace(const std::string& path) {
  std::string s = "{\"traceEvents\":[\n";
  for (size_t i = 0; i < g_events.size(); ++i) {
    const Event& e = g_events[i];
    s += fmt::format("{{\"name\":\"{}\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":{:.3f},\"dur\":{:.3f},"
                     "\"args\":{{\"flops\":{:.0f},\"bytes\":{:.0f},\"gflops_per_s\":{:.2f}}}}}{}\n",
                     e.name, e.t0 * 1e6, e.dur * 1e6, e.flops, e.bytes, e.dur > 0 ? e.flops / e.dur / 1e9 : 0.0,
                     i + 1 < g_events.size() ? "," : "");
  }
  s += fmt::format("],\"displayTimeUnit\":\"ms\",\"otherData\":{{\"dropped_events\":{}}}}}\n", g_dropped);
  write_text_file_atomic(path, s);
}

double recorded_seconds() {
  double t = 0;
  for (const auto& e : g_events)
    if (e.depth == 0) t += e.dur;
  return t;
}

double recorded_flops() {
  double f = 0;
  for (const auto& e : g_events) f += e.flops;
  return f;
}

size_t recorded_events() { return g_events.size(); }
size_t dropped_events() { return g_dropped; }

std::string table() {
  struct Row { size_t calls = 0; double self = 0, flops = 0, bytes = 0; };
  std::map<std::string, Row> rows;
  double total = 0;
  for (const auto& e : g_events) {
    Row& r = rows[e.name];
    ++r.calls;
    r.self += e.dur - e.child;
    r.flops += e.flops;
    r.bytes += e.bytes;
    total += e.dur - e.child;
  }
  std::vector<std::pair<std::string, Row>> v(rows.begin(), rows.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.self > b.second.self; });
  std::string out = fmt::format("{:<26} {:>8} {:>10} {:>7} {:>10} {:>9}\n", "op", "calls", "self ms", "share",
                                "GFLOP/s", "GB/s");
  for (const auto& [name, r] : v)
    out += fmt::format("{:<26} {:>8} {:>10.1f} {:>6.1f}% {:>10.1f} {:>9.1f}\n", name, r.calls, r.self * 1e3,
                       total > 0 ? 100 * r.self / total : 0.0, r.self > 0 ? r.flops / r.self / 1e9 : 0.0,
                       r.self > 0 ? r.bytes / r.self / 1e9 : 0.0);
  out += fmt::format("{:<26} {:>8} {:>10.1f}{}\n", "total (ops)", g_events.size(), total * 1e3,
                     g_dropped ? fmt::format("  ({} events not recorded: storage full)", g_dropped) : "");
  return out;
}

}  // namespace lt::prof
