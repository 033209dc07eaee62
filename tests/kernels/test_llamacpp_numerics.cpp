// llama.cpp's arithmetic (kernels/llamacpp_numerics.h). Agreement with llama.cpp bit for bit is
// tests/python/test_llamacpp_parity.py's (it needs llama-cpp-python: logits equal over 64 greedy
// steps at q8_0 and q4_0). Here, without llama.cpp:
//   - each op against the math in double (or the scalar reference kernels) within a bound from its
//     roundings, which a wrong formula, index map, pairing or lane assignment breaks by far;
//   - the properties of ggml's orders that need no llama.cpp, exactly: every result the same bits
//     for 1 and 2 threads; a product row the same bits alone (decode) as inside a batch (prefill),
//     as ggml's vec_dot and tinyBLAS give; the norm in place equal to out of place.
// Bounds: u = 2^-24 (one f32 rounding), γ_n as Higham (linear_test_util.h). ggml_v_expf is within
// 1.45 ulp + 0.5 ulp of exp (its source), so < 2 ulp = 4u relative.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/ggml_blocks.h"
#include "kernels/llamacpp_numerics.h"
#include "kernels/ops.h"
#include "kernels/q8_0_act.h"
#include "linear_test_util.h"

namespace lt::test {
namespace {

using Vec = std::vector<float>;
const double u = std::ldexp(1.0, -24);

Vec uniform(size_t n, unsigned seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  Vec v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

template <class F>
void with_threads(int n, F f) {
  const int old = omp_get_max_threads();
  omp_set_num_threads(n);
  f();
  omp_set_num_threads(old);
}

void expect_same_bits(const Vec& a, const Vec& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(f32_bits(a[i]), f32_bits(b[i])) << what << " at " << i << ": " << a[i] << " vs " << b[i];
}

// silu(g)·u = g/(1+exp(-g))·u: v_expf < 4u relative, then an add, a divide and a multiply (u each):
// < 8u relative to the exact value (and exact zeros / saturation at the ends of exp's range)
TEST(LlamaCppNumerics, SwigluFollowsExp) {
  Vec g = uniform(4000, 1, -110.0f, 110.0f), up = uniform(4000, 2, -2.0f, 2.0f);
  for (float e : {0.0f, -0.0f, 1e-30f, -87.5f, -88.8f, -103.9f, -104.1f, 88.7f, 150.0f, -150.0f})
    g.push_back(e), up.push_back(1.5f);
  g.push_back(NAN), up.push_back(1.0f);  // a NaN stays NaN (no float-to-int conversion of it)
  Vec out(g.size());
  llamacpp::swiglu(out.data(), g.data(), up.data(), g.size());
  EXPECT_TRUE(std::isnan(out.back()));
  for (size_t i = 0; i + 1 < g.size(); ++i) {
    const double want = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * up[i];
    EXPECT_LE(std::fabs(out[i] - want), 8 * u * std::fabs(want) + 1e-30) << "g " << g[i] << " up " << up[i];
  }
}

// (x·scale)·w with scale = 1/sqrtf(mean + eps): the double sum is exact to 2^-53 relative; the mean,
// + eps, sqrt, divide and the two products round once each (sqrt halves its argument's error): < 6u
TEST(LlamaCppNumerics, RmsNormFollowsTheMath) {
  for (auto [T, C] : {std::pair{1, 576}, {5, 96}, {3, 2048}, {2, 1}}) {
    const Vec x = uniform(size_t(T) * C, 3 + C, -4.0f, 4.0f), w = uniform(size_t(C), 4 + C, 0.5f, 1.5f);
    Vec out(x.size());
    llamacpp::rmsnorm(out.data(), x.data(), w.data(), T, C, 1e-5f);
    for (int t = 0; t < T; ++t) {
      double ss = 0;
      for (int i = 0; i < C; ++i) ss += double(x[size_t(t) * C + i]) * x[size_t(t) * C + i];
      const double r = 1.0 / std::sqrt(ss / C + double(1e-5f));
      for (int i = 0; i < C; ++i) {
        const double want = x[size_t(t) * C + i] * r * w[size_t(i)];
        EXPECT_LE(std::fabs(out[size_t(t) * C + i] - want), 6 * u * std::fabs(want)) << "T " << T << " C " << C;
      }
    }
    Vec in_place = x;
    llamacpp::rmsnorm(in_place.data(), in_place.data(), w.data(), T, C, 1e-5f);
    expect_same_bits(in_place, out, "in place");
  }
}

// Pair i of a head (leantune's halves layout: x[i], x[i + HS/2]) rotated by pos·base^(-2i/HS). ggml's
// angle is pos·ts^i by i f32 products from ts = powf(base, -2/HS) (< 1 ulp): relative error
// < (1.5·i + 1)·2u, so the absolute angle error is θ·(3i + 2)·u; cos / sin add u; the rotation's two
// products and fused add 2u of (|x0| + |x1|)
TEST(LlamaCppNumerics, RopeRotatesPairsByTheirAngles) {
  for (auto [T, NH, HS, p0] : {std::tuple{3, 9, 64, 0}, {2, 2, 128, 250}, {1, 3, 64, 4095}}) {
    const float base = HS == 128 ? 500000.0f : 100000.0f;
    const Vec x = uniform(size_t(T) * NH * HS, 5 + HS, -2.0f, 2.0f);
    std::vector<int> pos(T, 0);
    for (int t = 0; t < T; ++t) pos[size_t(t)] = p0 + 7 * t;
    Vec out = x;
    llamacpp::rope(out.data(), pos.data(), T, NH, HS, base);
    const int half = HS / 2;
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h)
        for (int i = 0; i < half; ++i) {
          const size_t o = (size_t(t) * NH + h) * HS;
          const double th = pos[size_t(t)] * std::pow(double(base), -2.0 * i / HS);
          const double x0 = x[o + i], x1 = x[o + i + half];
          const double tol = (std::fabs(x0) + std::fabs(x1)) * (th * (3 * i + 2) * u + 3 * u);
          EXPECT_LE(std::fabs(out[o + i] - (x0 * std::cos(th) - x1 * std::sin(th))), tol)
              << "pos " << pos[size_t(t)] << " pair " << i;
          EXPECT_LE(std::fabs(out[o + i + half] - (x0 * std::sin(th) + x1 * std::cos(th))), tol)
              << "pos " << pos[size_t(t)] << " pair " << i;
        }
  }
}

// q8_0 / q4_0 blocks with random codes and scales (every code value), as test_decode_gemv's
std::vector<uint8_t> random_blocks(WeightKind k, int rows, int cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> pos(0.5f, 1.5f);
  std::vector<uint8_t> b;
  for (int i = 0; i < rows * cols / 32; ++i) {
    const uint16_t d = f32_to_f16(pos(rng) * (k == WeightKind::Q8_0 ? 4e-4f : 6e-3f));
    b.push_back(uint8_t(d & 255)), b.push_back(uint8_t(d >> 8));
    for (int j = 0; j < (k == WeightKind::Q8_0 ? 32 : 16); ++j) b.push_back(uint8_t(rng()));
  }
  return b;
}

// Against the reference's product (the same quantized input, blocks added left to right): both
// within γ_{IC+4}·Σ|x̃·w| of the exact sum (test_decode_gemv.cpp's argument), so within twice that
// of each other; each row alone equals its row in the batch, bit for bit; 1 and 2 threads too.
TEST(LlamaCppNumerics, BlockProductFollowsTheReference) {
  for (WeightKind k : {WeightKind::Q8_0, WeightKind::Q4_0})
    for (auto [T, IC, OC] : {std::tuple{1, 32, 37}, {5, 96, 7}, {3, 576, 193}, {2, 1536, 9}}) {
      const std::string what =
          std::string(weight_kind_name(k)) + " T=" + std::to_string(T) + " IC=" + std::to_string(IC);
      const auto blocks = random_blocks(k, OC, IC, unsigned(IC + OC));
      WeightView w;
      w.kind = k, w.rows = OC, w.cols = IC, w.data = blocks.data(), w.blocksize = 32;
      const Vec x = uniform(size_t(T) * IC, unsigned(T + IC), -1.0f, 1.0f), bias = uniform(size_t(OC), 9, -1.0f, 1.0f);
      std::vector<int8_t> xq(size_t(T) * IC);
      Vec xd(size_t(T) * IC / 32), out(size_t(T) * OC), want(out.size()), xt(x.size());
      with_threads(2, [&] { llamacpp::block_linear(out.data(), x.data(), w, bias.data(), T, xq.data(), xd.data()); });
      LinearWeights lw;
      lw.w = w, lw.bias = bias.data();
      ops_ref().linear_forward(want.data(), nullptr, LinearInput{x.data(), nullptr, T}, lw, LinearScratch{});
      fake_quantize_act_q8_0(x.data(), int64_t(x.size()), xt.data());
      for (int t = 0; t < T; ++t)
        for (int o = 0; o < OC; ++o) {
          double mag = std::fabs(bias[size_t(o)]);
          for (int i = 0; i < IC; ++i) {
            const uint8_t* blk = ggml_block(w, int64_t(o) * (IC / 32) + i / 32);
            mag += std::fabs(double(xt[size_t(t) * IC + i]) * ggml_block_code(k, blk, i % 32) * ggml_block_scale(blk));
          }
          const size_t j = size_t(t) * OC + o;
          EXPECT_LE(std::fabs(double(out[j]) - want[j]), 2 * gamma_n(IC + 4) * mag) << what << " row " << o;
        }
      Vec one(OC, 0.0f), serial(out.size());
      for (int t = 0; t < T; ++t) {
        llamacpp::block_linear(one.data(), x.data() + size_t(t) * IC, w, bias.data(), 1, xq.data(), xd.data());
        expect_same_bits(one, Vec(out.begin() + t * OC, out.begin() + (t + 1) * OC), what + " row alone");
      }
      with_threads(1,
                   [&] { llamacpp::block_linear(serial.data(), x.data(), w, bias.data(), T, xq.data(), xd.data()); });
      expect_same_bits(serial, out, what + " 1 vs 2 threads");
    }
}

// Against the reference attention (ops_ref, exact softmax in another order). The scores differ by at
// most 2·γ_HS·Σ|q·k|·scale; exp adds 4u, the normalization γ_n, the weighted sum γ_n·Σp|v| per side:
// the outputs within max|v|·(2·δs + 8u + 4·γ_n) with δs the score bound. The decode order (T = 1) and
// the batch order both checked; 1 and 2 threads the same bits.
TEST(LlamaCppNumerics, AttentionFollowsTheReference) {
  for (auto [T, pos0, NH, NKV, HS] : {std::tuple{1, 0, 9, 3, 64},
                                      {1, 40, 9, 3, 64},
                                      {5, 0, 7, 1, 64},
                                      {4, 37, 3, 3, 128},
                                      {1, 70, 14, 2, 64},
                                      {12, 3, 9, 9, 64}}) {
    const std::string what = "T=" + std::to_string(T) + " pos0=" + std::to_string(pos0) + " NH=" + std::to_string(NH) +
                             " NKV=" + std::to_string(NKV) + " HS=" + std::to_string(HS);
    const int P = pos0 + T, KVD = NKV * HS;
    const Vec q = uniform(size_t(T) * NH * HS, 11, -1.0f, 1.0f), k = uniform(size_t(P) * KVD, 12, -1.0f, 1.0f),
              v = uniform(size_t(P) * KVD, 13, -1.0f, 1.0f);
    Vec scratch(2 * llamacpp::attention_scratch_floats(P, HS)), out(q.size()), serial(q.size()), want(q.size());
    with_threads(2, [&] {
      llamacpp::attention(out.data(), q.data(), k.data(), v.data(), T, pos0, NH, NKV, HS, scratch.data(),
                          scratch.size());
    });
    ops_ref().attention_forward(want.data(), nullptr, q.data(), k.data(), v.data(), T, pos0, NH, NKV, HS, 0, 0);
    const double scale = 1.0 / std::sqrt(double(HS));
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h) {
        double qk = 0;  // max over the cells of Σ|q·k|
        for (int c = 0; c <= pos0 + t; ++c) {
          double s = 0;
          for (int d = 0; d < HS; ++d)
            s += std::fabs(q[(size_t(t) * NH + h) * HS + d] * k[size_t(c) * KVD + size_t(h / (NH / NKV)) * HS + d]);
          qk = std::max(qk, s);
        }
        const double n = pos0 + t + 1, tol = 2 * (2 * gamma_n(HS) * qk * scale) + 8 * u + 4 * gamma_n(n);
        for (int d = 0; d < HS; ++d) {
          const size_t i = (size_t(t) * NH + h) * HS + d;
          EXPECT_LE(std::fabs(out[i] - want[i]), tol) << what << " t " << t << " h " << h << " d " << d;
        }
      }
    with_threads(1, [&] {
      llamacpp::attention(serial.data(), q.data(), k.data(), v.data(), T, pos0, NH, NKV, HS, scratch.data(),
                          scratch.size());
    });
    expect_same_bits(serial, out, what + " 1 vs 2 threads");
    // scratch with room for one thread only: two threads asked for, one runs (ASan: nothing past it)
    Vec one_thread(llamacpp::attention_scratch_floats(P, HS)), clamped(q.size());
    with_threads(2, [&] {
      llamacpp::attention(clamped.data(), q.data(), k.data(), v.data(), T, pos0, NH, NKV, HS, one_thread.data(),
                          one_thread.size());
    });
    expect_same_bits(clamped, out, what + " scratch for one thread");
  }
}

}  // namespace
}  // namespace lt::test
