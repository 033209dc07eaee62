// The mixed-precision SwiGLU pass alone: Ops::swiglu_forward_half (one pass, ops.h) against the
// unfused sequence it replaces (round_half of gate and up, swiglu_forward, round_half of h; in the
// replay widen_half of the saved halves instead of the rounding), at the training shape (2048 tokens
// of micro-batch 4 x 512) with the MLP width F as the argument (SmolLM2-135M 1536, Qwen2.5-0.5B
// 4864). Before each call a 64 MiB buffer is swept (the activations arrive from a GEMM, out of L2)
// and gate / up are touched; best of 7, wall time. Not built by CMake: build against a build tree's
// libraries, e.g.
//   g++ -O2 -std=c++20 -fopenmp -I src bench/bench_swiglu_half.cpp build/liblt_kernels.a build/liblt_core.a \
//       -ldnnl -lfmt -o /tmp/bench_swiglu_half && OMP_NUM_THREADS=2 /tmp/bench_swiglu_half 4864
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/ops.h"

using namespace lt;

int main(int argc, char** argv) {
  const Ops& o = ops_cpu();
  const int T = 2048, F = argc > 1 ? std::atoi(argv[1]) : 4864;
  const size_t n = size_t(T) * F;
  std::vector<float> g(n), u(n), h(n), sweep(size_t(64) << 18, 1.0f);
  std::vector<uint16_t> g16(n), u16(n), h16(n);
  for (size_t i = 0; i < n; i++) g[i] = float(i % 1000) * 0.01f - 5, u[i] = float(i % 777) * 0.001f;
  auto best_ms = [&](auto f) {
    double best = 1e9;
    for (int r = 0; r < 7; r++) {
      for (size_t i = 0; i < sweep.size(); i += 16) sweep[i] += 1;
      for (size_t i = 0; i < n; i += 16) g[i] += 0, u[i] += 0;
      const auto t0 = std::chrono::steady_clock::now();
      f();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best * 1e3;
  };
  const DType t = DType::BF16;
  const double fwd = best_ms([&] {
    o.round_half(t, g16.data(), g.data(), g.data(), n);
    o.round_half(t, u16.data(), u.data(), u.data(), n);
    o.swiglu_forward(h.data(), g.data(), u.data(), T, F);
    o.round_half(t, h16.data(), h.data(), h.data(), n);
  });
  const double fwd_fused = best_ms(
      [&] { o.swiglu_forward_half(t, HalfInputs::Round, h.data(), h16.data(), g.data(), g16.data(), u.data(),
                                  u16.data(), T, F); });
  const double replay = best_ms([&] {
    o.widen_half(t, g.data(), g16.data(), n);
    o.widen_half(t, u.data(), u16.data(), n);
    o.swiglu_forward(h.data(), g.data(), u.data(), T, F);
    o.round_half(t, h16.data(), h.data(), h.data(), n);
  });
  const double replay_fused = best_ms(
      [&] { o.swiglu_forward_half(t, HalfInputs::Widen, h.data(), h16.data(), g.data(), g16.data(), u.data(),
                                  u16.data(), T, F); });
  std::printf("T %d F %d (%s): forward unfused %.2f ms, fused %.2f ms; replay unfused %.2f ms, fused %.2f ms\n", T, F,
              o.name, fwd, fwd_fused, replay, replay_fused);
}
