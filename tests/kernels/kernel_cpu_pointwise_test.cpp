// CPU kernels vs ref for the row-wise and elementwise ops (embedding, rmsnorm, rope, swiglu,
// add), once per ISA, on sizes that do not divide the vector widths.
#include <gtest/gtest.h>

#include <cstring>

#include "kernel_test_util.h"

namespace lt::test {
namespace {

class KernelCpuPointwise : public KernelIsaTest {};

TEST_P(KernelCpuPointwise, Embedding) {
  int V = 11, C = 67, T = 37;
  auto table = random_vec((size_t)V * C, 1);
  std::vector<int> tokens(T);
  for (int t = 0; t < T; t++) tokens[t] = (t * 7 + 3) % V;
  std::vector<float> got((size_t)T * C), want((size_t)T * C);
  cpu().embedding_forward(got.data(), tokens.data(), table.data(), T, C);
  ref().embedding_forward(want.data(), tokens.data(), table.data(), T, C);
  expect_close(got, want, 0, 0, "embedding");
}

TEST_P(KernelCpuPointwise, Rmsnorm) {
  for (int C : {1, 7, 16, 67, 300}) {
    for (int T : {1, 37}) {
      auto x = random_vec((size_t)T * C, 2 + C, -3, 3), w = random_vec(C, 3 + C);
      std::vector<float> got(x.size()), want(x.size()), rg(T), rw(T);
      cpu().rmsnorm_forward(got.data(), rg.data(), x.data(), w.data(), T, C, 1e-6f);
      ref().rmsnorm_forward(want.data(), rw.data(), x.data(), w.data(), T, C, 1e-6f);
      std::string tag = "rmsnorm C=" + std::to_string(C) + " T=" + std::to_string(T);
      expect_close(got, want, 1e-5, 1e-7, tag);
      expect_close(rg, rw, 1e-5, 0, tag + " rstd");
      cpu().rmsnorm_forward(got.data(), nullptr, x.data(), w.data(), T, C, 1e-6f);  // rstd optional
      expect_close(got, want, 1e-5, 1e-7, tag + " no rstd");
    }
  }
}

TEST_P(KernelCpuPointwise, RopeBothLayouts) {
  for (int HS : {12, 64, 6}) {
    int T = 37, NH = 3;
    auto x = random_vec((size_t)T * NH * HS, 4);
    std::vector<float> inv_freq(HS / 2);
    for (int i = 0; i < HS / 2; i++) inv_freq[i] = 1.0f / std::pow(10000.0f, 2.0f * i / HS);
    std::vector<int> pos(T);
    for (int t = 0; t < T; t++) pos[t] = 1000 + 3 * t;  // decode-like positions, large angles
    for (bool interleaved : {false, true}) {
      auto got = x, want = x;
      cpu().rope_forward(got.data(), pos.data(), inv_freq.data(), T, NH, HS, interleaved);
      ref().rope_forward(want.data(), pos.data(), inv_freq.data(), T, NH, HS, interleaved);
      expect_close(got, want, 1e-6, 1e-7, "rope HS=" + std::to_string(HS) + (interleaved ? " interleaved" : ""));
    }
  }
}

// rope_table + rope_apply (what training calls, the angles once per pass) give rope_forward's
// bits, in this table and in ref: the same cos / sin of the same f32 angles, the same expressions.
TEST_P(KernelCpuPointwise, RopeFromTableEqualsRopeForward) {
  for (int HS : {12, 64, 6})
    for (int T : {1, 37, 130}) {
      int NH = 3;
      auto x = random_vec((size_t)T * NH * HS, 7);
      std::vector<float> inv_freq(HS / 2), table((size_t)T * HS, -1.0f);
      for (int i = 0; i < HS / 2; i++) inv_freq[i] = 1.0f / std::pow(10000.0f, 2.0f * i / HS);
      std::vector<int> pos(T);
      for (int t = 0; t < T; t++) pos[t] = (t % 17) * 61 + 3;  // packed documents, large angles
      for (bool interleaved : {false, true})
        for (const Ops* o : {&cpu(), &ref()}) {
          auto got = x, want = x;
          o->rope_table(table.data(), pos.data(), inv_freq.data(), T, HS);
          o->rope_apply(got.data(), table.data(), T, NH, HS, interleaved);
          o->rope_forward(want.data(), pos.data(), inv_freq.data(), T, NH, HS, interleaved);
          EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
              << o->name << " rope from table HS=" << HS << " T=" << T << (interleaved ? " interleaved" : "");
        }
    }
}

// swiglu_forward_half (the mixed-precision MLP's one pass) against the same table's unfused
// sequence: round_half (or widen_half) of gate and up, swiglu_forward, round_half of h, in bf16
// and f16, each treatment of the inputs, sizes past the pieces and the parallel threshold; bits
// equal. HalfInputs::Round leaves the f32 gate and up as they were; h, and with Widen gate and up,
// may be null.
TEST_P(KernelCpuPointwise, SwigluHalfEqualsTheUnfusedSequence) {
  auto same = [](const auto& a, const auto& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
  };
  for (int F : {1, 13, 67, 5000})
    for (DType t : {DType::BF16, DType::F16})
      for (HalfInputs in : {HalfInputs::Round, HalfInputs::RoundInPlace, HalfInputs::Widen})
        for (const Ops* o : {&cpu(), &ref()}) {
          const int T = F > 1000 ? 5 : 37;
          const size_t n = (size_t)T * F;
          const bool widen = in == HalfInputs::Widen;
          auto g = random_vec(n, 71, -12, 12), u = random_vec(n, 72, -2, 2);
          std::vector<uint16_t> g16(n), u16(n);
          o->round_half(t, g16.data(), nullptr, g.data(), n);  // the saved halves a replay widens
          o->round_half(t, u16.data(), nullptr, u.data(), n);
          // the unfused sequence
          std::vector<float> gw = g, uw = u, hw(n, 5.0f);
          std::vector<uint16_t> g16w = g16, u16w = u16, h16w(n, 1);
          if (!widen) {
            std::fill(g16w.begin(), g16w.end(), 3), std::fill(u16w.begin(), u16w.end(), 3);
            o->round_half(t, g16w.data(), gw.data(), gw.data(), n);
            o->round_half(t, u16w.data(), uw.data(), uw.data(), n);
          } else {
            o->widen_half(t, gw.data(), g16w.data(), n);
            o->widen_half(t, uw.data(), u16w.data(), n);
          }
          o->swiglu_forward(hw.data(), gw.data(), uw.data(), T, F);
          o->round_half(t, h16w.data(), hw.data(), hw.data(), n);
          // fused
          std::vector<float> gf = widen ? std::vector<float>(n, 9.0f) : g, uf = widen ? gf : u, hf(n, -5.0f);
          std::vector<uint16_t> g16f = widen ? g16 : std::vector<uint16_t>(n, 7);
          std::vector<uint16_t> u16f = widen ? u16 : std::vector<uint16_t>(n, 7), h16f(n, 2);
          o->swiglu_forward_half(t, in, hf.data(), h16f.data(), gf.data(), g16f.data(), uf.data(), u16f.data(), T, F);
          const std::string tag = std::string(o->name) + (t == DType::BF16 ? " bf16" : " f16") + " inputs " +
                                  std::to_string(int(in)) + " F=" + std::to_string(F);
          EXPECT_TRUE(same(hf, hw)) << tag << " h";
          EXPECT_TRUE(same(h16f, h16w)) << tag << " h16";
          EXPECT_TRUE(same(g16f, g16w)) << tag << " gate16";
          EXPECT_TRUE(same(u16f, u16w)) << tag << " up16";
          EXPECT_TRUE(same(gf, in == HalfInputs::Round ? g : gw)) << tag << " gate";
          EXPECT_TRUE(same(uf, in == HalfInputs::Round ? u : uw)) << tag << " up";
          // h16 alone: h null (any treatment), and with Widen gate and up null too
          std::vector<uint16_t> h16n(n, 4), g16n = g16f, u16n = u16f;
          std::vector<float> gn = widen ? std::vector<float>() : g, un = widen ? std::vector<float>() : u;
          o->swiglu_forward_half(t, in, nullptr, h16n.data(), widen ? nullptr : gn.data(), g16n.data(),
                                 widen ? nullptr : un.data(), u16n.data(), T, F);
          EXPECT_TRUE(same(h16n, h16w)) << tag << " h16 without h" << (widen ? ", gate, up" : "");
        }
}

TEST_P(KernelCpuPointwise, Swiglu) {
  for (int F : {1, 13, 67, 5000}) {
    int T = F > 1000 ? 5 : 37;  // 5x5000 crosses the parallel threshold and chunk boundaries
    auto g = random_vec((size_t)T * F, 5, -12, 12), u = random_vec((size_t)T * F, 6, -2, 2);
    std::vector<float> got(g.size()), want(g.size());
    cpu().swiglu_forward(got.data(), g.data(), u.data(), T, F);
    ref().swiglu_forward(want.data(), g.data(), u.data(), T, F);
    expect_close(got, want, 2e-6, 1e-7, "swiglu F=" + std::to_string(F));
  }
}

TEST_P(KernelCpuPointwise, SwigluExtremeInputs) {
  std::vector<float> g = {-200, -100, -88, -87, -50, -20, -1e-3f, 0, 1e-3f, 20, 50, 87, 88, 89, 100, 200, 1e30f};
  std::vector<float> u(g.size(), 1.5f), got(g.size()), want(g.size());
  cpu().swiglu_forward(got.data(), g.data(), u.data(), 1, (int)g.size());
  ref().swiglu_forward(want.data(), g.data(), u.data(), 1, (int)g.size());
  expect_close(got, want, 2e-6, 1e-30, "swiglu extremes");
}

TEST_P(KernelCpuPointwise, AddInplace) {
  for (size_t n : {size_t(1), size_t(15), size_t(67), size_t(70001)}) {
    auto x = random_vec(n, 7), y = random_vec(n, 8), want = x;
    cpu().add_inplace(x.data(), y.data(), n);
    ref().add_inplace(want.data(), y.data(), n);
    expect_close(x, want, 0, 0, "add n=" + std::to_string(n));
  }
}

LT_INSTANTIATE_ISAS(KernelCpuPointwise);

}  // namespace
}  // namespace lt::test
