// kernels/cpu/adamw.h: the AVX-512 and AVX2 AdamW loops give the scalar loop's bits (the same
// operations in the same order, no fused multiply-adds; sqrt and division are correctly rounded
// in every form, so the comparison is exact), on lengths that leave every tail size, with and
// without weight decay, and on extreme values (zero / huge / tiny gradients, eps-dominated
// denominators).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/kernels.h"

namespace lt::cpu {
namespace {

struct State {
  std::vector<float> p, g, m, v;
  explicit State(size_t n, unsigned seed) : p(n), g(n), m(n), v(n) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (size_t i = 0; i < n; ++i) {
      p[i] = d(rng), m[i] = 0.1f * d(rng), v[i] = 0.01f * std::abs(d(rng));
      const int kind = int(i % 7);  // a spread of magnitudes, zeros included
      g[i] = kind == 0 ? 0.0f : kind == 1 ? 1e-20f * d(rng) : kind == 2 ? 1e15f * d(rng) : d(rng);
    }
  }
};

TEST(KernelAdamW, EveryIsaGivesTheScalarLoopsBits) {
  const AdamWScalars steps[] = {
      {1.0f, 0.1f, 0.999f, 0.001f, 0.0316069f, 1e-8f, -1e-3f},          // step 1-like, no decay
      {0.99999f, 0.1f, 0.999f, 0.001f, 0.9995f, 1e-8f, -2.5e-4f},      // later step, decay
      {0.999f, 0.05f, 0.95f, 0.05f, 0.7f, 1e-3f, -0.1f},                // eps-dominated denominators
  };
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (!cpu_supports(isa)) continue;
    for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(15), size_t(16), size_t(17), size_t(33), size_t(1000)})
      for (const AdamWScalars& s : steps) {
        State a(n, unsigned(n)), b(n, unsigned(n));
        scalar::adamw_range(a.p.data(), a.g.data(), a.m.data(), a.v.data(), n, s);
        if (isa == Isa::Avx512) avx512::adamw_range(b.p.data(), b.g.data(), b.m.data(), b.v.data(), n, s);
        else avx2::adamw_range(b.p.data(), b.g.data(), b.m.data(), b.v.data(), n, s);
        EXPECT_EQ(std::memcmp(a.p.data(), b.p.data(), n * 4), 0) << isa_name(isa) << " n=" << n;
        EXPECT_EQ(std::memcmp(a.m.data(), b.m.data(), n * 4), 0) << isa_name(isa) << " n=" << n;
        EXPECT_EQ(std::memcmp(a.v.data(), b.v.data(), n * 4), 0) << isa_name(isa) << " n=" << n;
      }
  }
}

TEST(KernelAdamW, DispatchFollowsTheIsaCap) {
  // whichever level cpu_isa() picks (LEANTUNE_ISA caps it), the result is the scalar loop's
  const size_t n = 4099;
  const AdamWScalars s{0.9999f, 0.1f, 0.999f, 0.001f, 0.3f, 1e-8f, -1e-3f};
  State a(n, 3), b(n, 3);
  scalar::adamw_range(a.p.data(), a.g.data(), a.m.data(), a.v.data(), n, s);
  adamw_range(b.p.data(), b.g.data(), b.m.data(), b.v.data(), n, s);
  EXPECT_EQ(std::memcmp(a.p.data(), b.p.data(), n * 4), 0) << isa_name(cpu_isa());
}

}  // namespace
}  // namespace lt::cpu
