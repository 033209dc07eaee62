// Kernel timings by hand (not built by CMake): GEMV bandwidth at decode shapes, GEMM GFLOP/s at
// prefill shapes, attention and elementwise ops; each for every ISA this CPU runs, plus oneDNN's
// own M=1 path as the peer for our GEMV. Build against a build tree's library, e.g.
//   g++ -O2 -std=c++20 -fopenmp -I src bench/bench_kernels.cpp build-kern/libleantune_lib.a \
//       -ldnnl -lfmt -o /tmp/bench_kernels && OMP_NUM_THREADS=2 /tmp/bench_kernels
// Prints the configuration (threads, ISA, shape) on every line.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"

using namespace lt;

static double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Seconds per call. On a shared machine wall time includes time other processes held the cores;
// with BENCH_CPU_TIME=1 (meant for OMP_NUM_THREADS=1) the process CPU time is used instead.
static double seconds_per_call(const std::function<void()>& f, double min_total = 0.5) {
  static const bool use_cpu = std::getenv("BENCH_CPU_TIME") != nullptr;
  f();  // warm up (page faults, oneDNN kernel generation)
  int iters = 1;
  for (;;) {
    auto t0 = std::chrono::steady_clock::now();
    double c0 = cpu_seconds();
    for (int i = 0; i < iters; i++) f();
    double s = use_cpu ? cpu_seconds() - c0 : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= min_total) return s / iters;
    iters *= 2;
  }
}

static std::vector<float> rnd(size_t n) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

int main() {
  int nt = omp_get_max_threads();
  std::printf("threads=%d cpu=%s timing=%s\n", nt, cpu_features_string().c_str(),
              std::getenv("BENCH_CPU_TIME") ? "process cpu time" : "wall");
  struct Shape { int IC, OC; };
  Shape gemv_shapes[] = {{4096, 4096}, {4096, 11008}, {11008, 4096}, {576, 1536}};
  for (auto s : gemv_shapes) {
    auto w = rnd((size_t)s.IC * s.OC), x = rnd((size_t)3 * s.IC);
    std::vector<float> y((size_t)3 * s.OC);
    double bytes = (double)s.IC * s.OC * 4;
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
      if (!cpu_supports(isa)) continue;
      const Ops& ops = ops_cpu_for(isa);
      for (int T : {1, 3}) {
        double t = seconds_per_call([&] { ops.matmul_forward(y.data(), x.data(), w.data(), nullptr, T, s.IC, s.OC); });
        std::printf("gemv  %-10s T=%d IC=%5d OC=%5d  %8.3f ms  %6.1f GB/s (weights)\n", ops.name, T, s.IC, s.OC,
                    t * 1e3, bytes / t / 1e9);
      }
    }
    double t = seconds_per_call([&] { cpu::linear_f32(y.data(), x.data(), w.data(), 1, s.IC, s.OC); });
    std::printf("gemv  %-10s T=1 IC=%5d OC=%5d  %8.3f ms  %6.1f GB/s (weights)\n", "onednn", s.IC, s.OC, t * 1e3,
                bytes / t / 1e9);
  }
  if (std::getenv("BENCH_GEMV_ONLY")) return 0;
  struct G { int T, IC, OC; };
  G gemm_shapes[] = {{512, 576, 576}, {512, 4096, 4096}, {512, 4096, 11008}, {64, 4096, 4096}};
  for (auto g : gemm_shapes) {
    auto w = rnd((size_t)g.IC * g.OC), x = rnd((size_t)g.T * g.IC), b = rnd(g.OC);
    std::vector<float> y((size_t)g.T * g.OC);
    const Ops& ops = ops_cpu();
    double t = seconds_per_call([&] { ops.matmul_forward(y.data(), x.data(), w.data(), b.data(), g.T, g.IC, g.OC); });
    std::printf("gemm  %-10s T=%d IC=%d OC=%d bias  %8.3f ms  %6.1f GFLOP/s\n", ops.name, g.T, g.IC, g.OC, t * 1e3,
                2.0 * g.T * g.IC * g.OC / t / 1e9);
  }
  struct A { int T, pos0, NH, NKV, HS; };
  A attn_shapes[] = {{1, 2047, 32, 8, 128}, {512, 0, 32, 8, 128}, {256, 0, 9, 3, 64}};
  for (auto a : attn_shapes) {
    int P = a.pos0 + a.T;
    auto q = rnd((size_t)a.T * a.NH * a.HS), k = rnd((size_t)P * a.NKV * a.HS), v = rnd((size_t)P * a.NKV * a.HS);
    std::vector<float> o(q.size()), lse((size_t)a.NH * a.T);
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
      if (!cpu_supports(isa)) continue;
      const Ops& ops = ops_cpu_for(isa);
      double t = seconds_per_call([&] {
        ops.attention_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), a.T, a.pos0, a.NH, a.NKV, a.HS, 0, 0);
      }, 0.3);
      double pairs = 0;  // (query, key) pairs over all heads
      for (int i = 0; i < a.T; i++) pairs += (double)(a.pos0 + i + 1) * a.NH;
      std::printf("attn  %-10s T=%d pos0=%d NH=%d NKV=%d HS=%d  %8.3f ms  %6.1f GFLOP/s (4*HS per pair)\n", ops.name,
                  a.T, a.pos0, a.NH, a.NKV, a.HS, t * 1e3, pairs * 4 * a.HS / t / 1e9);
    }
  }
  {
    int T = 512, F = 11008;
    auto g = rnd((size_t)T * F), u = rnd((size_t)T * F);
    std::vector<float> o(g.size());
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
      if (!cpu_supports(isa)) continue;
      const Ops& ops = ops_cpu_for(isa);
      double t = seconds_per_call([&] { ops.swiglu_forward(o.data(), g.data(), u.data(), T, F); }, 0.3);
      std::printf("swiglu %-10s T=%d F=%d  %8.3f ms  %6.1f GB/s\n", ops.name, T, F, t * 1e3, 12.0 * T * F / t / 1e9);
    }
  }
  return 0;
}
