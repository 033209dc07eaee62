// The bf16 split of the f16 forward (kernels/cpu/half_linear.cpp, amx::gemm_f16_split): x and W split
// into bf16 high and low parts whose products are exact; an f16 weight whose values are all bf16s
// (WeightView::bf16_values) is its own high part (two products per weight), any other f16 weight
// takes four. Where the CPU has AMX bf16 at the avx512 level the tests check that the split runs;
// elsewhere the f32 path runs and must meet the same bounds.
//
// Tolerance: every product x·w of f16 values is exact in f32 on either path, and the split's parts
// are products of exact parts, so each output is a sum of parts·IC exact terms in f32 (parts = 2 or
// 4), in some order: |y - exact| <= γ_{parts·IC}·Σ|x·w| (Higham §3.1; exact computed in double, whose
// own error on these sums is below 2^-40 relative). Where every partial sum is representable (the
// targeted cases) the result must be exact.
#include <gtest/gtest.h>

#include <omp.h>

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
  bool bf16_w;  // the weight's values are all bf16s
  SplitCase(int t, int ic, int oc, unsigned seed, bool bf16_weights = true)
      : T(t), IC(ic), OC(oc), bf16_w(bf16_weights) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.0f, 0.5f);
    for (size_t i = 0; i < size_t(OC) * IC; ++i) {
      const float v = i % 101 == 3 ? n(rng) * 1e-6f : n(rng);  // some f16 subnormal weights
      w16.push_back(f32_to_f16(bf16_weights ? bf16_to_f32(f32_to_bf16(v)) : v));
    }
    for (size_t i = 0; i < size_t(T) * IC; ++i) {
      float v = n(rng);
      if (i % 97 == 5) v *= 1e-6f;    // f16 subnormals (below 2^-14 = 6.1e-5)
      if (i % 89 == 7) v *= 2000.0f;  // large values, near f16's top binades
      x16.push_back(f32_to_f16(v));
      x.push_back(f16_to_f32(x16.back()));
    }
  }
  WeightView view() const {
    WeightView v = half_weight(WeightKind::F16, w16.data(), OC, IC);
    v.bf16_values = bf16_w;
    return v;
  }
  int parts() const { return bf16_w ? 2 : 4; }
  // y through the fast table with a tile of tile_bytes (0: linear_tile_bytes)
  std::vector<float> forward(size_t tile_bytes = 0) const {
    const WeightView v = view();
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
      ASSERT_LE(std::fabs(got - exact), gamma_n(double(c.parts()) * c.IC) * mag)
          << what << " T=" << c.T << " IC=" << c.IC << " OC=" << c.OC << " bf16 w " << c.bf16_w << " at (" << t
          << ", " << o << ")";
    }
}

size_t tile_of(const SplitCase& c) { return linear_tile_bytes(WeightKind::F16, 64, false, c.T, c.IC, c.OC); }

TEST(HalfSplit, MatchesTheExactProductsWithinTheF32Bound) {
  // T = 4 is past the decode GEMVs; OC = 600 spans panels; IC = 8192 is the ~1B shape's down (its
  // own tile holds 35 tokens' parts: given one for all 37); IC = 300 is no multiple of 32 (the f32 path;
// ASmallTileFallsBackToTheF32Path and the runs at LEANTUNE_ISA=avx2 / LEANTUNE_AMX=0 test it too).
  const int shapes[][3] = {{4, 64, 40}, {9, 300, 33}, {128, 576, 600}, {37, 8192, 70}};
  unsigned seed = 3;
  for (const auto& s : shapes)
    for (bool bf16_w : {true, false}) {
      SplitCase c(s[0], s[1], s[2], seed += 11, bf16_w);
      const size_t tile = std::max(tile_of(c), size_t(8) * c.T * c.IC + 64);
      const int least = bf16_w ? cpu::kSplitMinTokensBf16 : cpu::kSplitMinTokens;
      const int expect = split_expected() && c.IC % 32 == 0 && c.T >= least ? c.T : 0;
      EXPECT_EQ(cpu::half_split_tokens(c.view(), c.T, tile), expect) << c.T << " " << c.IC << " " << c.OC;
      expect_exact_within_bound(c, c.forward(tile), "split");
    }
}

// A tile for fewer tokens than T: the split runs in chunks of what it holds (70 + 70 + 10 here), and
// its bits do not depend on the thread count.
TEST(HalfSplit, RunsInTokenChunksWithTheSameBitsOnAnyTeam) {
  for (bool bf16_w : {true, false}) {
    SplitCase c(150, 64, 40, 9, bf16_w);
    const size_t tile = size_t(2) * c.parts() * 64 * 70 + 64;  // also the f32 path's need (40 rows), or more
    ASSERT_GE(tile, tile_of(c));
    if (split_expected()) EXPECT_EQ(cpu::half_split_tokens(c.view(), c.T, tile), 70);
    const int team = omp_get_max_threads();
    omp_set_num_threads(1);
    const std::vector<float> one = c.forward(tile);
    omp_set_num_threads(2);
    const std::vector<float> two = c.forward(tile);
    omp_set_num_threads(team);
    expect_exact_within_bound(c, one, "chunks");
    for (size_t i = 0; i < one.size(); ++i) ASSERT_EQ(one[i], two[i]) << i;
  }
}

// x = 1 + 2^-10 (11 significant bits: bf16 alone would drop the 2^-10), w = 1: each output is
// IC·(1 + 2^-10), and every partial sum k·(1 + 2^-10), k <= 64, is exact in f32.
TEST(HalfSplit, KeepsTheLowBitsOfX) {
  for (bool bf16_w : {true, false}) {
    SplitCase c(64, 64, 40, 1, bf16_w);
    for (auto& h : c.w16) h = 0x3c00;
    for (size_t i = 0; i < c.x.size(); ++i) {
      c.x16[i] = 0x3c01;
      c.x[i] = f16_to_f32(0x3c01);
    }
    if (split_expected()) EXPECT_GT(cpu::half_split_tokens(c.view(), c.T, 1 << 20), 0);
    for (float v : c.forward(1 << 20)) ASSERT_EQ(v, 64.0f * (1.0f + std::ldexp(1.0f, -10)));
  }
}

// The same for the weight: w = 1 + 2^-10 (an f16 that is no bf16), x = 1: every output 64·(1 + 2^-10)
// exactly (the parts' partial sums are multiples of 2^-10 below 2^7), which W_hi alone misses by 2^-4.
TEST(HalfSplit, KeepsTheLowBitsOfW) {
  SplitCase c(64, 64, 40, 1, false);
  for (auto& h : c.w16) h = 0x3c01;
  for (size_t i = 0; i < c.x.size(); ++i) {
    c.x16[i] = 0x3c00;
    c.x[i] = 1.0f;
  }
  if (split_expected()) EXPECT_GT(cpu::half_split_tokens(c.view(), c.T, 1 << 20), 0);
  for (float v : c.forward(1 << 20)) ASSERT_EQ(v, 64.0f * (1.0f + std::ldexp(1.0f, -10)));
}

// x = ±Inf splits into hi = ±Inf, lo = 0 (not Inf - Inf = NaN), and with a weight that is not all bf16s
// (where x_hi·W_lo would be Inf·0) its chunk takes the f32 path: the row is Inf, the others finite. A
// weight of +Inf makes its column non-finite (NaN on the split, documented), the others finite.
TEST(HalfSplit, AnInfiniteInputGivesInfNotNaN) {
  for (bool bf16_w : {true, false}) {
    SplitCase c(64, 64, 48, 2, bf16_w);
    for (auto& h : c.w16) h = 0x3800;  // 0.5
    c.x16[0] = 0x7c00;                 // +Inf at (0, 0)
    c.x[0] = std::numeric_limits<float>::infinity();
    const std::vector<float> y = c.forward(1 << 20);
    for (int o = 0; o < c.OC; ++o) ASSERT_EQ(y[size_t(o)], std::numeric_limits<float>::infinity()) << o;
    for (size_t i = size_t(c.OC); i < y.size(); ++i) ASSERT_TRUE(std::isfinite(y[i])) << i;
  }
  SplitCase c(64, 64, 48, 2, false);
  for (size_t i = 0; i < c.x.size(); ++i) c.x16[i] = 0x3800, c.x[i] = 0.5f;
  c.w16[0] = 0x7c00;  // +Inf in row 0: column 0 of y
  const std::vector<float> y = c.forward(1 << 20);
  for (int t = 0; t < c.T; ++t)
    for (int o = 0; o < c.OC; ++o) {
      const float v = y[size_t(t) * c.OC + o];
      if (o == 0) ASSERT_FALSE(std::isfinite(v)) << t;
      else ASSERT_TRUE(std::isfinite(v)) << t << " " << o;
    }
}

// A tile too small for the least tokens' parts leaves the product to the f32 path, with the same bound.
TEST(HalfSplit, ASmallTileFallsBackToTheF32Path) {
  for (bool bf16_w : {true, false}) {
    SplitCase c(64, 256, 4, 4, bf16_w);
    const size_t tile = size_t(4) * 256 * 4;  // the widening's need: 3 tokens' parts (two products), 1 (four)
    EXPECT_EQ(cpu::half_split_tokens(c.view(), c.T, tile), 0);
    expect_exact_within_bound(c, c.forward(tile), "fallback");
  }
}

}  // namespace
}  // namespace lt::test
