// Finite differences of the reference linear op (train_ops_ref().linear_backward_*) for every weight
// kind, with bias and a LoRA with dropout: L = Σ R∘y (in double), y = ops_ref().linear_forward.
// Checked: dX (not for Int8, whose forward quantizes x: its dX is the straight-through gradient of
// the decoded weight, checked against the fast path in test_linear.cpp), dW (f32; 16-bit and
// quantized weights are stored rounded, their dW is of the f32 master), db, dA, dB.
//
// Tolerance: y is linear in each of x, W, b, A and B taken alone (the dropout mask is fixed by its
// key), so a central difference of any step h is exact in exact arithmetic; only rounding remains.
// fl(y) is within γ_n·|y|_abs of y, where |y|_abs is the same forward on the absolute values of
// every operand (n = IC + R + 4 roundings on any product's path, Higham §3.1), so
//   |fd - ∂L/∂p| <= Σ_{t,o} |R|·γ_n·(|y+|_abs + |y-|_abs) / (2h),
// and the analytic gradient is within γ_m·|g|_abs (the backward on absolute values, m = T + OC +
// R + 4). R is a multiple of 1/64, so the 16-bit kinds' rounding of dout leaves it unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/backward.h"
#include "kernels/ops.h"
#include "kernels/ref/ref.h"
#include "linear_test_util.h"

namespace lt::test {
namespace {

constexpr int T = 3, IC = 10, OC = 7, R = 2;
constexpr double kStep = 0.5;

// The operands as plain vectors, so that an absolute-valued f32 twin can run the same formula.
struct Operands {
  WeightKind kind;
  WeightView w;          // the kind's view (x16 is not read by the reference)
  std::vector<float> x, b, A, B;
  float scale = 1.5f, p = 0.3f;
  uint64_t key = 77;

  LinearWeights weights(const WeightView& view, const float* bias, const float* a, const float* bb) const {
    LinearWeights lw;
    lw.w = view;
    lw.bias = bias;
    lw.lora = {R, a, bb, scale, p, key};
    return lw;
  }
};

// y (T, OC) of the reference op
std::vector<float> forward(const Operands& o, const WeightView& w, const std::vector<float>& x,
                           const std::vector<float>& b, const std::vector<float>& A, const std::vector<float>& B) {
  std::vector<float> y(size_t(T) * OC), xa(size_t(T) * R), tile(4096);
  LinearScratch s;
  s.tile = tile.data();
  s.tile_bytes = tile.size() * 4;
  ops_ref().linear_forward(y.data(), xa.data(), {x.data(), nullptr, T}, o.weights(w, b.data(), A.data(), B.data()), s);
  return y;
}

std::vector<float> abs_of(std::vector<float> v) {
  for (float& e : v) e = std::fabs(e);
  return v;
}

// The f32 view of |decoded W|, for the magnitude twin.
struct AbsWeight {
  std::vector<float> w;
  explicit AbsWeight(const WeightView& v) {
    for (int o = 0; o < OC; ++o)
      for (int i = 0; i < IC; ++i) w.push_back(std::fabs(ref::weight_at(v, o, i)));
  }
  WeightView view() const { return f32_weight(w.data(), OC, IC); }
};

// Central difference of L = Σ R∘y wrt element j of `param` (one of o's vectors, or the f32 weight),
// with its rounding bound from the absolute-valued twin (see the top of the file).
struct Fd {
  double value, bound;
};
Fd central_difference(Operands& o, std::vector<float>& param, size_t j, const std::vector<float>& Rg,
                      const std::function<std::vector<float>()>& twin_y) {
  const float keep = param[j];
  auto loss = [&](float v) {
    param[j] = v;
    const auto y = forward(o, o.w, o.x, o.b, o.A, o.B);
    double L = 0;
    for (size_t i = 0; i < y.size(); ++i) L += double(Rg[i]) * y[i];
    return L;
  };
  const double lp = loss(keep + float(kStep)), lm = loss(keep - float(kStep));
  param[j] = std::fabs(keep) + float(kStep);  // the twin at the larger of |p ± h|
  const auto ya = twin_y();
  param[j] = keep;
  double noise = 0;
  for (size_t i = 0; i < ya.size(); ++i) noise += std::fabs(Rg[i]) * gamma_n(IC + R + 4) * 2 * ya[i];
  return {(lp - lm) / (2 * kStep), noise / (2 * kStep)};
}

void check_kind(WeightKind kind) {
  KindWeight kw(kind, OC, IC, 5);
  Operands o{kind, kw.view(), {}, {}, {}, {}};
  o.x = KindInput(kw, T, 6).x;
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int i = 0; i < OC; ++i) o.b.push_back(u(rng));
  for (int i = 0; i < R * IC; ++i) o.A.push_back(u(rng) * 0.5f);
  for (int i = 0; i < OC * R; ++i) o.B.push_back(u(rng) * 0.5f);
  std::vector<float> Rg;
  for (int i = 0; i < T * OC; ++i) Rg.push_back(float(int(rng() % 129) - 64) / 64.0f);
  std::vector<float> w32 = kw.f32;  // the f32 kind's weight, perturbed for dW
  if (kind == WeightKind::F32) o.w.data = w32.data();

  // analytic gradients of the reference op, and of its absolute-valued twin
  auto grads = [&](const Operands& op, const WeightView& w, const std::vector<float>& x, const std::vector<float>& b,
                   const std::vector<float>& A, const std::vector<float>& B, const std::vector<float>& dout) {
    std::vector<float> y(size_t(T) * OC), xa(size_t(T) * R), g(size_t(T) * R), tile(4096);
    std::vector<std::vector<float>> out = {std::vector<float>(x.size()), std::vector<float>(size_t(OC) * IC),
                                           std::vector<float>(b.size()), std::vector<float>(A.size()),
                                           std::vector<float>(B.size())};
    LinearScratch s;
    s.tile = tile.data();
    s.tile_bytes = tile.size() * 4;
    s.lora_g = g.data();
    const LinearWeights lw = op.weights(w, b.data(), A.data(), B.data());
    ops_ref().linear_forward(y.data(), xa.data(), {x.data(), nullptr, T}, lw, s);
    train_ops_ref().linear_backward_input(out[0].data(), dout.data(), T, lw, s);
    const LinearGrads lg{w.quantized() ? nullptr : out[1].data(), out[2].data(), out[3].data(), out[4].data()};
    train_ops_ref().linear_backward_weight(lg, dout.data(), {x.data(), nullptr, T}, xa.data(), lw, s);
    return out;
  };
  const AbsWeight aw(o.w);
  std::vector<float> xabs = abs_of(o.x);
  if (kind == WeightKind::Int8) {  // the LLM.int8 product sees each x within am_t / 254 of its value
    for (int t = 0; t < T; ++t) {
      float am = 0;
      for (int i = 0; i < IC; ++i) am = std::max(am, xabs[size_t(t) * IC + i]);
      for (int i = 0; i < IC; ++i) xabs[size_t(t) * IC + i] += am / 254;
    }
  }
  const auto g = grads(o, o.w, o.x, o.b, o.A, o.B, Rg);
  const auto gabs = grads(o, aw.view(), xabs, abs_of(o.b), abs_of(o.A), abs_of(o.B), abs_of(Rg));

  // param k: 0 x, 1 W (f32 only), 2 b, 3 A, 4 B; the twin's copy of it is perturbed alongside
  std::vector<float>* params[5] = {&o.x, &w32, &o.b, &o.A, &o.B};
  const char* names[5] = {"dX", "dW", "db", "dA", "dB"};
  for (int k = 0; k < 5; ++k) {
    if ((k == 0 && kind == WeightKind::Int8) || (k == 1 && kind != WeightKind::F32)) continue;
    std::vector<float>& p = *params[k];
    double gmax = 0;
    for (size_t j = 0; j < p.size(); ++j) {
      std::vector<float> tx = xabs, tb = abs_of(o.b), tA = abs_of(o.A), tB = abs_of(o.B);
      AbsWeight tw(o.w);
      std::vector<float>* twin[5] = {&tx, &tw.w, &tb, &tA, &tB};
      const Fd fd = central_difference(o, p, j, Rg, [&] {
        (*twin[k])[j] = std::fabs(p[j]);  // central_difference set p[j] to |p_j| + h
        return forward(o, tw.view(), tx, tb, tA, tB);
      });
      const double tol = fd.bound + gamma_n(T + OC + R + 4) * gabs[k][j];
      EXPECT_NEAR(g[k][j], fd.value, tol) << weight_kind_name(kind) << " " << names[k] << "[" << j << "]";
      gmax = std::max(gmax, std::fabs(double(g[k][j])) / std::max(tol, 1e-30));
    }
    EXPECT_GT(gmax, 100.0) << weight_kind_name(kind) << " " << names[k] << ": the gradient is lost in its bound";
  }
}

TEST(LinearOpGrad, ReferenceMatchesFiniteDifferencesF32) { check_kind(WeightKind::F32); }
TEST(LinearOpGrad, ReferenceMatchesFiniteDifferencesBf16) { check_kind(WeightKind::BF16); }
TEST(LinearOpGrad, ReferenceMatchesFiniteDifferencesF16) { check_kind(WeightKind::F16); }
TEST(LinearOpGrad, ReferenceMatchesFiniteDifferencesInt8) { check_kind(WeightKind::Int8); }
TEST(LinearOpGrad, ReferenceMatchesFiniteDifferencesNf4) { check_kind(WeightKind::NF4); }
TEST(LinearOpGrad, ReferenceMatchesFiniteDifferencesFp4) { check_kind(WeightKind::FP4); }

}  // namespace
}  // namespace lt::test
