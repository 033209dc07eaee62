// Ops::gate_up_swiglu (the gate and up linears and the SwiGLU in one AMX pass, gemm_bf16_glu) against
// what it replaces: linear_forward for gate, linear_forward for up, swiglu_forward_half(BF16,
// RoundInPlace) — the same k steps in the same order (the other adapter's rank columns adding exact
// zeros) and the epilogue the same roundings and activation per element, so every output has the
// same bits. Shapes: F not a multiple of 32 (a block holding the last 16 of gate and of up), K past
// 20 k steps (sub-slices), 2F past one packed panel, ranks 16 + 16, 4 + 12, 8 + 8 and no adapter,
// 1 and 2 threads; outputs not asked for are left untouched. Off its path (no AMX, LEANTUNE_ISA
// below avx512, a few rows, a bias, f16 weights, LoRA with dropout or on one of the two) it declines
// and writes nothing.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "kernels/cpu/gemm.h"
#include "kernels/linear.h"
#include "kernels/ops.h"

using namespace lt;

namespace {

template <class T>
struct Aligned {  // 64-byte aligned storage (AMX reads x16's rows in place)
  explicit Aligned(size_t n) : p(static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64))), n(n) {}
  ~Aligned() { std::free(p); }
  T* p;
  size_t n;
};

struct Case {
  int T, IC, F, Rg, Ru;
};

struct Problem {
  Case c;
  Aligned<uint16_t> x16, wg, wu;
  std::vector<float> x, Ag, Bg, Au, Bu;
  Problem(const Case& c, std::mt19937& rng)
      : c(c), x16(size_t(c.T) * c.IC), wg(size_t(c.F) * c.IC), wu(size_t(c.F) * c.IC), x(size_t(c.T) * c.IC) {
    std::normal_distribution<float> nd(0, 1);
    for (size_t i = 0; i < x.size(); ++i) x16.p[i] = f32_to_bf16(2.0f * nd(rng)), x[i] = bf16_to_f32(x16.p[i]);
    const float ws = 1.0f / std::sqrt(float(c.IC));
    for (size_t i = 0; i < wg.n; ++i) wg.p[i] = f32_to_bf16(ws * nd(rng)), wu.p[i] = f32_to_bf16(ws * nd(rng));
    auto fill = [&](std::vector<float>& v, size_t n, float s) {
      v.resize(n);
      for (auto& e : v) e = s * nd(rng);
    };
    fill(Ag, size_t(c.Rg) * c.IC, ws), fill(Au, size_t(c.Ru) * c.IC, ws);
    fill(Bg, size_t(c.F) * c.Rg, 0.5f), fill(Bu, size_t(c.F) * c.Ru, 0.5f);
  }
  LinearWeights weights(bool up) const {
    LinearWeights w;
    w.w = half_weight(WeightKind::BF16, up ? wu.p : wg.p, c.F, c.IC);
    const int R = up ? c.Ru : c.Rg;
    if (R) w.lora = {R, up ? Au.data() : Ag.data(), up ? Bu.data() : Bg.data(), up ? 1.5f : 2.0f};
    w.lora.bf16 = R > 0;
    return w;
  }
};

struct Scratch {  // linear_forward's bf16 LoRA scratch, sized for either call
  std::vector<uint16_t> dy, w16, t16;
  std::vector<float> wt;
  LinearScratch s;
  Scratch(int T, int IC, int F) : dy(size_t(T) * (std::max(IC, F) + 64)), w16(32 * size_t(std::max(IC, F))),
                                  t16(size_t(T) * 32), wt(32 * size_t(std::max(IC, F))) {
    s.dy = dy.data(), s.lora_w16 = w16.data(), s.lora_t16 = t16.data(), s.lora_wt = wt.data();
  }
};

// the outputs, each (T, F), filled with a marker
struct Outs {
  std::vector<uint16_t> h16, g16, u16;
  std::vector<float> h, g, u, xag, xau;
  Outs(const Case& c)
      : h16(size_t(c.T) * c.F, 0x7e01), g16(h16), u16(h16), h(h16.size(), -3.0f), g(h), u(h),
        xag(size_t(c.T) * std::max(c.Rg, 1), -5.0f), xau(size_t(c.T) * std::max(c.Ru, 1), -5.0f) {}
};

bool same(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

void check(const Case& c, int threads, std::mt19937& rng) {
  const Ops& ops = ops_cpu();
  ASSERT_NE(ops.gate_up_swiglu, nullptr);
  const Problem p(c, rng);
  const LinearWeights wg = p.weights(false), wu = p.weights(true);
  const LinearInput in{p.x.data(), p.x16.p, c.T};
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  Outs ref(c), all(c), some(c);
  {  // what it replaces
    Scratch s(c.T, c.IC, c.F);
    ops.linear_forward(ref.g.data(), c.Rg ? ref.xag.data() : nullptr, in, wg, s.s);
    ops.linear_forward(ref.u.data(), c.Ru ? ref.xau.data() : nullptr, in, wu, s.s);
    ops.swiglu_forward_half(DType::BF16, HalfInputs::RoundInPlace, ref.h.data(), ref.h16.data(), ref.g.data(),
                            ref.g16.data(), ref.u.data(), ref.u16.data(), c.T, c.F);
  }
  Scratch s1(c.T, c.IC, c.F), s2(c.T, c.IC, c.F);
  const GluOutputs o_all{all.h16.data(), all.h.data(), all.g16.data(), all.u16.data(), all.g.data(), all.u.data(), c.F};
  const bool ran = ops.gate_up_swiglu(o_all, all.xag.data(), all.xau.data(), in, wg, wu, s1.s);
  const GluOutputs o_h{some.h16.data(), nullptr, nullptr, nullptr, nullptr, nullptr, c.F};
  const bool ran_h = ops.gate_up_swiglu(o_h, some.xag.data(), some.xau.data(), in, wg, wu, s2.s);
  omp_set_num_threads(saved);
  const std::string tag = "T " + std::to_string(c.T) + " IC " + std::to_string(c.IC) + " F " + std::to_string(c.F) +
                          " R " + std::to_string(c.Rg) + "+" + std::to_string(c.Ru) + " threads " +
                          std::to_string(threads);
  ASSERT_TRUE(ran && ran_h) << tag;
  const size_t n = size_t(c.T) * c.F;
  EXPECT_TRUE(same(all.h16.data(), ref.h16.data(), n * 2)) << tag << " h16";
  EXPECT_TRUE(same(all.h.data(), ref.h.data(), n * 4)) << tag << " h";
  EXPECT_TRUE(same(all.g16.data(), ref.g16.data(), n * 2)) << tag << " gate16";
  EXPECT_TRUE(same(all.u16.data(), ref.u16.data(), n * 2)) << tag << " up16";
  EXPECT_TRUE(same(all.g.data(), ref.g.data(), n * 4)) << tag << " gate";
  EXPECT_TRUE(same(all.u.data(), ref.u.data(), n * 4)) << tag << " up";
  if (c.Rg) EXPECT_TRUE(same(all.xag.data(), ref.xag.data(), all.xag.size() * 4)) << tag << " xa gate";
  if (c.Ru) EXPECT_TRUE(same(all.xau.data(), ref.xau.data(), all.xau.size() * 4)) << tag << " xa up";
  EXPECT_TRUE(same(some.h16.data(), ref.h16.data(), n * 2)) << tag << " h16 alone";
  const Outs untouched(c);
  EXPECT_TRUE(same(some.h.data(), untouched.h.data(), n * 4) && same(some.g.data(), untouched.g.data(), n * 4) &&
              same(some.u.data(), untouched.u.data(), n * 4) && same(some.g16.data(), untouched.g16.data(), n * 2) &&
              same(some.u16.data(), untouched.u16.data(), n * 2))
      << tag << " outputs not asked for are written";
}

bool packed_here() { return cpu_isa() == Isa::Avx512 && cpu::packed_bf16_kernels(); }

}  // namespace

TEST(GateUpSwiglu, HasTheBitsOfTheTwoLinearsAndTheSwiglu) {
  if (!packed_here())
    GTEST_SKIP() << "no packed bf16 kernels (no AMX nor AVX512-BF16, LEANTUNE_PACKED_BF16=0, ISA below avx512)";
  std::mt19937 rng(11);
  for (const Case& c : {Case{192, 64, 48, 16, 16}, Case{96, 576, 1536, 16, 16}, Case{128, 896, 160, 8, 8},
                        Case{128, 800, 1040, 4, 12}, Case{64, 128, 80, 0, 0}, Case{192, 256, 64, 16, 16}})
    for (int threads : {1, 2}) check(c, threads, rng);
}

// The epilogue alone on values the products rarely give: f32 denormals in g and u and gates that
// make h denormal (vcvtneps2bf16 reads denormals as zero: its fast rounding must step aside),
// zeros of both signs, ±Inf, NaN, values that round up to Inf, halfway cases; its bits against
// swiglu_forward_half(BF16, RoundInPlace) on the same g and u, a few rows at a time as the GEMM
// calls it.
TEST(GateUpSwiglu, EpilogueHasSwigluForwardHalfsBitsOnEdgeValues) {
  if (cpu_isa() != Isa::Avx512) GTEST_SKIP() << "the epilogue is AVX-512 code";
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float edge[] = {1e-39f, -3e-40f, 1.2e-38f, 0.0f, -0.0f, inf, -inf, nan, 3.4e38f, -3.39e38f,
                        -95.0f, -100.0f, -89.0f, -87.5f, 1.00390625f, 1.01171875f, 2.0f, -1.5f, 7e-45f, 88.0f};
  const int rows = 32, F = 32, ldc = 2 * 16 + 16;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pick(0, int(std::size(edge)) - 1);
  std::vector<float> c(size_t(rows) * ldc), g(size_t(rows) * F), u(g.size());
  // two blocks of 16 columns (f0 = 0 and 16), each block's row [g 16 | u 16] in c
  std::vector<uint16_t> h16(g.size(), 1), g16(g.size(), 1), u16(g.size(), 1), rh16(g.size()), rg16(g.size()),
      ru16(g.size());
  std::vector<float> h(g.size(), 5.0f), go(g.size(), 5.0f), uo(g.size(), 5.0f), rh(g.size());
  const GluOutputs o{h16.data(), h.data(), g16.data(), u16.data(), go.data(), uo.data(), F};
  for (int f0 : {0, 16}) {
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < 16; ++j) {
        const float gv = edge[pick(rng)], uv = (i + j) % 3 ? edge[pick(rng)] : 0.75f;
        c[size_t(i) * ldc + j] = gv, c[size_t(i) * ldc + 16 + j] = uv;
        g[size_t(i) * F + f0 + j] = gv, u[size_t(i) * F + f0 + j] = uv;
      }
    for (int r = 0; r < rows; r += 3)
      cpu::avx512::swiglu_glu_block(o, r, std::min(3, rows - r), f0, c.data() + size_t(r) * ldc, ldc);
  }
  ops_cpu().swiglu_forward_half(DType::BF16, HalfInputs::RoundInPlace, rh.data(), rh16.data(), g.data(), rg16.data(),
                                u.data(), ru16.data(), rows, F);
  const size_t n = g.size();
  EXPECT_TRUE(same(h16.data(), rh16.data(), n * 2)) << "h16";
  EXPECT_TRUE(same(h.data(), rh.data(), n * 4)) << "h";
  EXPECT_TRUE(same(g16.data(), rg16.data(), n * 2)) << "gate16";
  EXPECT_TRUE(same(u16.data(), ru16.data(), n * 2)) << "up16";
  EXPECT_TRUE(same(go.data(), g.data(), n * 4)) << "gate";
  EXPECT_TRUE(same(uo.data(), u.data(), n * 4)) << "up";
  int denormal_h = 0;
  for (float v : rh) denormal_h += std::fpclassify(v) == FP_SUBNORMAL;
  EXPECT_GT(denormal_h, 0) << "no denormal h: the case does not test what it says";
}

TEST(GateUpSwiglu, DeclinesOffItsPathAndWritesNothing) {
  const Ops& ops = ops_cpu();
  if (!ops.gate_up_swiglu) GTEST_SKIP() << "this table has no fused pass";
  std::mt19937 rng(3);
  auto declines = [&](const Case& c, auto&& edit) {
    Problem p(c, rng);
    LinearWeights wg = p.weights(false), wu = p.weights(true);
    LinearInput in{p.x.data(), p.x16.p, c.T};
    edit(wg, wu, in);
    Scratch s(c.T, c.IC, c.F);
    Outs o(c);
    const GluOutputs go{o.h16.data(), o.h.data(), o.g16.data(), o.u16.data(), o.g.data(), o.u.data(), c.F};
    const bool ran = ops.gate_up_swiglu(go, o.xag.data(), o.xau.data(), in, wg, wu, s.s);
    const Outs untouched(c);
    return !ran && o.h16 == untouched.h16 && o.h == untouched.h && o.g == untouched.g && o.xag == untouched.xag;
  };
  auto none = [](LinearWeights&, LinearWeights&, LinearInput&) {};
  const std::vector<float> bias(64, 1.0f);
  EXPECT_TRUE(declines(Case{48, 64, 64, 16, 16}, none)) << "rows";
  EXPECT_TRUE(declines(Case{64, 64, 40, 16, 16}, none)) << "F not a multiple of 16";
  EXPECT_TRUE(declines(Case{256, 1056, 256, 16, 16}, none)) << "K past one slice";
  EXPECT_TRUE(declines(Case{64, 64, 64, 16, 16}, [&](LinearWeights& g, LinearWeights&, LinearInput&) {
    g.bias = bias.data();
  })) << "bias";
  EXPECT_TRUE(declines(Case{64, 64, 64, 16, 16}, [&](LinearWeights& g, LinearWeights& u, LinearInput&) {
    g.w.kind = u.w.kind = WeightKind::F16;
  })) << "f16 weights";
  EXPECT_TRUE(declines(Case{64, 64, 64, 16, 16}, [&](LinearWeights&, LinearWeights& u, LinearInput&) {
    u.lora.bf16 = false, u.lora.dropout = 0.1f;
  })) << "LoRA with dropout";
  EXPECT_TRUE(declines(Case{64, 64, 64, 16, 0}, none)) << "LoRA on gate alone";
  EXPECT_TRUE(declines(Case{64, 64, 64, 24, 16}, none)) << "ranks past 32";
  if (!packed_here()) EXPECT_TRUE(declines(Case{64, 64, 64, 16, 16}, none)) << "no packed kernels";
}
