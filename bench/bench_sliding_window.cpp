// Sliding-window attention cost against the sequence length (not built by CMake): the training
// attention (forward + backward, the kernels TrainModel calls, with a window's key starts as
// TrainModel passes them) and the decode attention over a rolling cache, with and without a window,
// on the fast CPU kernels. Beyond the window both grow linearly in the length: the attended pairs
// (FLOPs) and the time. Build against a build tree's libraries, e.g.
//   g++ -O2 -std=c++20 -fopenmp -I src bench/bench_sliding_window.cpp build/liblt_kernels.a \
//       build/liblt_core.a -ldnnl -lfmt -o /tmp/bench_sw && OMP_NUM_THREADS=1 /tmp/bench_sw
// Prints one line per (length, window): pairs attended, milliseconds, and both per token. Times are
// the process CPU time (a shared machine's wall time counts other processes): run it on one thread.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <functional>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/backward.h"
#include "kernels/ops.h"

using namespace lt;

static double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

static double seconds_per_call(const std::function<void()>& f, double min_total = 0.3) {
  f();  // warm up
  for (int iters = 1;; iters *= 2) {
    const double t0 = cpu_seconds();
    for (int i = 0; i < iters; i++) f();
    const double s = cpu_seconds() - t0;
    if (s >= min_total) return s / iters;
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
  const int NH = 8, NKV = 2, HS = 64, W = 256;
  std::printf("threads=%d cpu=%s NH=%d NKV=%d HS=%d\n", omp_get_max_threads(), cpu_features_string().c_str(), NH,
              NKV, HS);
  const TrainOps& t = train_ops_cpu();
  const Ops& o = ops_cpu();
  std::printf("%-22s %7s %7s %14s %10s %14s %12s\n", "op", "T", "window", "pairs", "ms", "pairs/token", "us/token");
  for (int T : {256, 512, 1024, 2048, 4096}) {
    auto q = rnd(size_t(T) * NH * HS), k = rnd(size_t(T) * NKV * HS), v = rnd(size_t(T) * NKV * HS);
    auto dout = rnd(q.size());
    std::vector<float> out(q.size()), lse(size_t(NH) * T), dq(q.size()), dk(k.size()), dv(v.size());
    std::vector<unsigned char> rows(attention_ds_rows_bytes(T, T, NH, 4));  // kept dS rows, as training plans them
    for (int win : {0, W}) {
      std::vector<int> start(static_cast<size_t>(T));
      double pairs = 0;
      for (int i = 0; i < T; i++) start[size_t(i)] = win ? std::max(0, i - win + 1) : 0, pairs += i - start[size_t(i)] + 1;
      double s = seconds_per_call([&] {
        t.attention_train_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), start.data(), T, NH, NKV, HS);
        t.attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                             lse.data(), start.data(), T, NH, NKV, HS, rows.data(), rows.size());
      });
      std::printf("%-22s %7d %7d %14.0f %10.3f %14.1f %12.3f\n", "train fwd+bwd", T, win, pairs, s * 1e3, pairs / T,
                  s * 1e6 / T);
    }
    // one decode step at position T-1: a rolling cache of W rows (window) or the whole prefix
    for (int win : {0, W}) {
      const int ring = win ? win : 0;
      double s = seconds_per_call([&] {
        o.attention_forward(out.data(), nullptr, q.data(), k.data(), v.data(), 1, T - 1, NH, NKV, HS, win, ring);
      });
      std::printf("%-22s %7d %7d %14d %10.4f\n", "decode step", T, win, win ? std::min(T, win) : T, s * 1e3);
    }
  }
}
