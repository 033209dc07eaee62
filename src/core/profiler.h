// The op profiler behind `--profile trace.json`: when enabled, each instrumented op (the Ops and
// TrainOps tables, every GEMM) records one event — name, start, duration, FLOPs, bytes moved —
// into storage reserved when profiling starts (a step still allocates nothing). At the end it
// writes Chrome trace events (chrome://tracing, ui.perfetto.dev) and a per-op table: calls, self
// time and its share, achieved GFLOP/s and GB/s. Ops nest (the fused loss calls GEMMs): the table
// counts each op's self time, the trace shows the nesting. Only the thread that called start()
// records (kernels parallelise inside; a call made on another thread of a team is not counted), so
// the stack is global.
#pragma once
#include <cstddef>
#include <string>

namespace lt::prof {

extern bool g_enabled, g_routed;
inline bool enabled() { return g_enabled; }
// While routed, ops_cpu() / train_ops_cpu() return the profiled tables (kernels/profiled_ops.h):
// set it before building the model that should be profiled.
inline bool routed() { return g_routed; }
inline void route(bool on) { g_routed = on; }

// Starts recording (clearing earlier events); at most max_events are kept, the rest counted.
void start(size_t max_events = 1 << 20);
void stop();

class Scope {
 public:
  Scope(const char* name, double flops, double bytes) {
    if (g_enabled) begin(name, flops, bytes);
  }
  ~Scope() {
    if (active_) end();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void begin(const char* name, double flops, double bytes);
  void end();
  bool active_ = false;
  size_t index_ = 0;
};

// Chrome trace JSON of the recorded events, written atomically; lt::Error naming the path.
void write_trace(const std::string& path);
// The per-op table (sorted by self time) of what was recorded.
std::string table();
// Seconds of the recorded top-level events, FLOPs of all events, events recorded / dropped.
double recorded_seconds();
double recorded_flops();
size_t recorded_events();
size_t dropped_events();

}  // namespace lt::prof
