// The bf16 split of the f16 forward (kernels/cpu/half_linear.cpp, WeightView::bf16_values): an f16
// weight whose values are all bf16s, multiplied as two exact bf16 GEMMs of x's high and low parts.
// Where the CPU has AMX bf16 at the avx512 level the tests check that the split runs; elsewhere the
// f32 path runs and must meet the same bounds.
//
// Tolerance: every product x·w of an f16 x and a bf16-valued w is exact in f32 on either path, and
// the split sums the IC products of hi and of lo separately, then adds the two: a sum of 2·IC exact
// terms in f32, in some order, so |y - exact| <= γ_{2·IC}·Σ|x·w| (Higham §3.1; exact computed in
// double, whose own error on these sums is below 2^-40 relative). Where every partial sum is
// representable (the targeted cases) the result must be exact.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "linear_test_util.h"

namespace lt::test {
namespace {

// Where the split must run: AMX bf16 usable at the avx512 level.
bool split_expected() { return cpu_isa() == Isa::Avx512 && amx_bf16_kernels(); }

struct SplitCase {
  int T, IC, OC;
  std::vector<uint16_t> w16, x16;
  std::vector<float> x;
  SplitCase(int t, int ic, int oc, unsigned seed) : T(t), IC(ic), OC(oc) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.0f, 0.5f);
    for (size_t i = 0; i < size_t(OC) * IC; ++i) w16.push_back(f32_to_f16(bf16_to_f32(f32_to_bf16(n(rng)))));
    for (size_t i = 0; i < size_t(T) * IC; ++i) {
      float v = n(rng);
      if (i % 97 == 5) v *= 1e-6f;    // f16 subnormals (below 2^-14 = 6.1e-5)
      if (i % 89 == 7) v *= 2000.0f;  // large values, near f16's top binades
      x16.push_back(f32_to_f16(v));
      x.push_back(f16_to_f32(x16.back()));
    }
  }
  WeightView view(bool bf16_values) const {
    WeightView v = half_weight(WeightKind::F16, w16.data(), OC, IC);
    v.bf16_values = bf16_values;
    return v;
  }
  // y through the fast table with a tile of linear_tile_bytes
  std::vector<float> forward(bool bf16_values, size_t tile_bytes = 0) const {
    const WeightView v = view(bf16_values);
    if (!tile_bytes) tile_bytes = linear_tile_bytes(WeightKind::F16, 64, false, T, IC, OC);
    std::vector<float> tile(tile_bytes / 4 + 16), y(size_t(T) * OC, NAN);
    LinearWeights lw;
    lw.w = v;
    LinearScratch s;
    s.tile = tile.data();
    s.tile_bytes = tile_bytes;
    ops_cpu().linear_forward(y.data(), nullptr, LinearInput{x.data(), x16.data(), T}, lw, s);
    return y;
  }
};

void expect_exact_within_bound(const SplitCase& c, const std::vector<float>& y, const char* what) {
  for (int t = 0; t < c.T; ++t)
    for (int o = 0; o < c.OC; ++o) {
      double exact = 0, mag = 0;
      for (int i = 0; i < c.IC; ++i) {
        const double p = double(c.x[size_t(t) * c.IC + i]) * f16_to_f32(c.w16[size_t(o) * c.IC + i]);
        exact += p;
        mag += std::fabs(p);
      }
      const double got = y[size_t(t) * c.OC + o];
      ASSERT_LE(std::fabs(got - exact), gamma_n(2.0 * c.IC) * mag)
          << what << " T=" << c.T << " IC=" << c.IC << " OC=" << c.OC << " at (" << t << ", " << o << ")";
    }
}

TEST(HalfSplit, MatchesTheExactProductsWithinTheF32Bound) {
  // T = 4 is past the decode GEMVs; OC = 600 needs two tiles; IC = 8192 is the ~1B shape's down.
  const int shapes[][3] = {{4, 64, 40}, {9, 300, 33}, {128, 576, 600}, {37, 8192, 70}};
  unsigned seed = 3;
  for (const auto& s : shapes) {
    SplitCase c(s[0], s[1], s[2], seed += 11);
    const size_t tile = linear_tile_bytes(WeightKind::F16, 64, false, c.T, c.IC, c.OC);
    if (split_expected())
      EXPECT_GT(cpu::half_split_rows(c.view(true), c.T, tile), 0) << c.T << " " << c.IC << " " << c.OC;
    EXPECT_EQ(cpu::half_split_rows(c.view(false), c.T, tile), 0);
    expect_exact_within_bound(c, c.forward(true), "split");
    expect_exact_within_bound(c, c.forward(false), "f32 path");
  }
}

// x = 1 + 2^-10 (11 significant bits: bf16 alone would drop the 2^-10), w = 1: each output is
// IC·(1 + 2^-10), and every partial sum k·(1 + 2^-10), k <= 64, is exact in f32.
TEST(HalfSplit, KeepsTheLowBitsOfX) {
  SplitCase c(5, 64, 40, 1);
  for (auto& h : c.w16) h = 0x3c00;
  for (size_t i = 0; i < c.x.size(); ++i) {
    c.x16[i] = 0x3c01;
    c.x[i] = f16_to_f32(0x3c01);
  }
  if (split_expected()) EXPECT_GT(cpu::half_split_rows(c.view(true), c.T, 1 << 20), 0);
  for (float v : c.forward(true)) ASSERT_EQ(v, 64.0f * (1.0f + std::ldexp(1.0f, -10)));
}

// x = ±Inf splits into hi = ±Inf, lo = 0 (not Inf - Inf = NaN): the row is Inf, the others finite.
TEST(HalfSplit, AnInfiniteInputGivesInfNotNaN) {
  SplitCase c(6, 64, 48, 2);
  for (auto& h : c.w16) h = 0x3800;  // 0.5
  c.x16[0] = 0x7c00;                 // +Inf at (0, 0)
  c.x[0] = std::numeric_limits<float>::infinity();
  const std::vector<float> y = c.forward(true);
  for (int o = 0; o < c.OC; ++o) ASSERT_EQ(y[size_t(o)], std::numeric_limits<float>::infinity()) << o;
  for (size_t i = size_t(c.OC); i < y.size(); ++i) ASSERT_TRUE(std::isfinite(y[i])) << i;
}

// A tile too small for the split's input copy leaves it to the f32 path, with the same bound.
TEST(HalfSplit, ASmallTileFallsBackToTheF32Path) {
  SplitCase c(64, 256, 40, 4);
  const size_t tile = size_t(40) * 256 * 4;  // the widening's need; the split's [hi; lo] alone is 64 KiB
  EXPECT_EQ(cpu::half_split_rows(c.view(true), c.T, tile), 0);
  expect_exact_within_bound(c, c.forward(true, tile), "fallback");
}

}  // namespace
}  // namespace lt::test
