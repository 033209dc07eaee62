// Finite-difference checks of the reference backward ops that are not attention or the loss:
// embedding, rmsnorm, rope (both layouts), swiglu, matmul. Each test builds L = sum(out * R) for a
// fixed random R, takes central differences of L in double precision through a templated copy of
// the forward (whose f32 instantiation is first checked against ops_ref(), so it follows the same
// conventions), and compares them with the analytic gradient of train_ops_ref(). Gradient outputs
// are pre-filled with random values (accumulating ops) or NaN (written ops) to check += vs =.
// Shapes are odd on purpose (T=5, C=7, HS=6, F=7, IC=7, OC=3).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "kernels/backward.h"
#include "backward_test_util.h"
#include "kernels/ops.h"

using namespace lt;

namespace {

using namespace lt::test;

double dot_r(const VecD& out, const VecF& R) {
  double s = 0;
  for (size_t i = 0; i < out.size(); i++) s += out[i] * R[i];
  return s;
}

template <class F>
void rmsnorm_fwd(F* out, const F* x, const F* w, int T, int C, F eps) {
  for (int t = 0; t < T; t++) {
    F ss = 0;
    for (int c = 0; c < C; c++) ss += x[t * C + c] * x[t * C + c];
    F r = F(1) / std::sqrt(ss / F(C) + eps);
    for (int c = 0; c < C; c++) out[t * C + c] = w[c] * (x[t * C + c] * r);
  }
}

template <class F>
void rope_fwd(F* x, const int* pos, const float* inv_freq, int T, int NH, int HS, bool interleaved) {
  int half = HS / 2;
  for (int t = 0; t < T; t++)
    for (int h = 0; h < NH; h++) {
      F* xh = x + (t * NH + h) * HS;
      for (int i = 0; i < half; i++) {
        float angle = (float)pos[t] * inv_freq[i];  // f32, as the forward contract says
        F c = std::cos((F)angle), s = std::sin((F)angle);
        int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
        F x0 = xh[i0], x1 = xh[i1];
        xh[i0] = x0 * c - x1 * s;
        xh[i1] = x1 * c + x0 * s;
      }
    }
}

template <class F>
void swiglu_fwd(F* out, const F* gate, const F* up, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = gate[i] / (F(1) + std::exp(-gate[i])) * up[i];
}

template <class F>
void matmul_fwd(F* out, const F* x, const F* w, const F* b, int T, int IC, int OC) {
  for (int t = 0; t < T; t++)
    for (int o = 0; o < OC; o++) {
      F s = b ? b[o] : F(0);
      for (int i = 0; i < IC; i++) s += x[t * IC + i] * w[o * IC + i];
      out[t * OC + o] = s;
    }
}

}  // namespace

TEST(BackwardEmbedding, ScatterAddsRepeatedTokens) {
  const int T = 5, C = 7, V = 8;
  std::mt19937 rng(1);
  int tokens[T] = {3, 1, 3, 0, 6};
  VecF table = rand_vec((size_t)V * C, rng), R = rand_vec((size_t)T * C, rng);
  VecF g0 = rand_vec(table.size(), rng), dtable = g0;
  train_ops_ref().embedding_backward(dtable.data(), R.data(), tokens, T, C);
  auto L = [&](const VecD& tab) {
    VecD outd((size_t)T * C);
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++) outd[t * C + c] = tab[tokens[t] * C + c];
    return dot_r(outd, R);
  };
  expect_grad_close(minus(dtable, g0), numeric_grad(to_d(table), L), 1e-5, "dtable");
  // rows of tokens that do not occur are left exactly as they were
  for (int c = 0; c < C; c++) EXPECT_EQ(dtable[2 * C + c], g0[2 * C + c]);
  for (int c = 0; c < C; c++) EXPECT_EQ(dtable[3 * C + c] - g0[3 * C + c], R[0 * C + c] + R[2 * C + c]);
}

TEST(BackwardRmsnorm, MatchesFiniteDifferences) {
  const int T = 5, C = 7;
  const float eps = 1e-5f;
  std::mt19937 rng(2);
  VecF x = rand_vec((size_t)T * C, rng), w = rand_vec(C, rng, 0.5f, 1.5f), R = rand_vec(x.size(), rng);
  x[3 * C + 2] = 3.0f;  // one row with an outlier
  VecF out(x.size()), rstd(T), out_t(x.size());
  ops_ref().rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), T, C, eps);
  rmsnorm_fwd<float>(out_t.data(), x.data(), w.data(), T, C, eps);
  for (size_t i = 0; i < out.size(); i++) ASSERT_NEAR(out[i], out_t[i], 1e-6) << "test forward != ops_ref";

  VecF gx0 = rand_vec(x.size(), rng), gw0 = rand_vec(C, rng), dx = gx0, dw = gw0;
  train_ops_ref().rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), T, C);
  VecD xd = to_d(x), wd = to_d(w);
  auto Lx = [&](const VecD& p) {
    VecD o(p.size());
    rmsnorm_fwd<double>(o.data(), p.data(), wd.data(), T, C, eps);
    return dot_r(o, R);
  };
  auto Lw = [&](const VecD& p) {
    VecD o(xd.size());
    rmsnorm_fwd<double>(o.data(), xd.data(), p.data(), T, C, eps);
    return dot_r(o, R);
  };
  expect_grad_close(minus(dx, gx0), numeric_grad(xd, Lx), 1e-4, "dx");
  expect_grad_close(minus(dw, gw0), numeric_grad(wd, Lw), 1e-4, "dw");

  // frozen weight: dw null gives the same dx
  VecF dx2 = gx0;
  train_ops_ref().rmsnorm_backward(dx2.data(), nullptr, R.data(), x.data(), w.data(), rstd.data(), T, C);
  EXPECT_EQ(dx2, dx);
}

class BackwardRope : public ::testing::TestWithParam<bool> {};

TEST_P(BackwardRope, MatchesFiniteDifferencesAndInvertsForward) {
  const bool interleaved = GetParam();
  const int T = 5, NH = 3, HS = 6;
  std::mt19937 rng(3);
  int pos[T] = {0, 3, 7, 8, 1000};  // a large position: angle rounding in f32 must match the forward
  VecF inv_freq(HS / 2);
  for (int i = 0; i < HS / 2; i++) inv_freq[i] = 1.0f / std::pow(10000.0f, 2.0f * i / HS);
  VecF x = rand_vec((size_t)T * NH * HS, rng), R = rand_vec(x.size(), rng);

  VecF y = x, y_t = x;
  ops_ref().rope_forward(y.data(), pos, inv_freq.data(), T, NH, HS, interleaved);
  rope_fwd<float>(y_t.data(), pos, inv_freq.data(), T, NH, HS, interleaved);
  for (size_t i = 0; i < y.size(); i++) ASSERT_NEAR(y[i], y_t[i], 1e-6) << "test forward != ops_ref";

  VecF dx = R;
  train_ops_ref().rope_backward(dx.data(), pos, inv_freq.data(), T, NH, HS, interleaved);
  auto L = [&](const VecD& p) {
    VecD o = p;
    rope_fwd<double>(o.data(), pos, inv_freq.data(), T, NH, HS, interleaved);
    return dot_r(o, R);
  };
  expect_grad_close(dx, numeric_grad(to_d(x), L), 1e-5, "dx");

  // a rotation's transpose is its inverse: backward(forward(x)) == x
  train_ops_ref().rope_backward(y.data(), pos, inv_freq.data(), T, NH, HS, interleaved);
  for (size_t i = 0; i < x.size(); i++) EXPECT_NEAR(y[i], x[i], 1e-6) << i;
}

INSTANTIATE_TEST_SUITE_P(BackwardRopeLayouts, BackwardRope, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Interleaved" : "Halves"; });

TEST(BackwardSwiglu, MatchesFiniteDifferencesAndOverwrites) {
  const int T = 5, F = 7;
  std::mt19937 rng(4);
  VecF gate = rand_vec((size_t)T * F, rng, -5.0f, 5.0f), up = rand_vec(gate.size(), rng, -2.0f, 2.0f);
  VecF R = rand_vec(gate.size(), rng);
  VecF out(gate.size()), out_t(gate.size());
  ops_ref().swiglu_forward(out.data(), gate.data(), up.data(), T, F);
  swiglu_fwd<float>(out_t.data(), gate.data(), up.data(), out.size());
  for (size_t i = 0; i < out.size(); i++) ASSERT_NEAR(out[i], out_t[i], 1e-6) << "test forward != ops_ref";

  const float nan = std::numeric_limits<float>::quiet_NaN();
  VecF dgate(gate.size(), nan), dup(gate.size(), nan);  // written, so the NaNs must disappear
  train_ops_ref().swiglu_backward(dgate.data(), dup.data(), R.data(), gate.data(), up.data(), T, F);
  VecD gd = to_d(gate), ud = to_d(up);
  auto Lg = [&](const VecD& p) {
    VecD o(p.size());
    swiglu_fwd<double>(o.data(), p.data(), ud.data(), o.size());
    return dot_r(o, R);
  };
  auto Lu = [&](const VecD& p) {
    VecD o(p.size());
    swiglu_fwd<double>(o.data(), gd.data(), p.data(), o.size());
    return dot_r(o, R);
  };
  expect_grad_close(dgate, numeric_grad(gd, Lg), 1e-4, "dgate");
  expect_grad_close(dup, numeric_grad(ud, Lu), 1e-5, "dup");
}

TEST(BackwardMatmul, MatchesFiniteDifferencesWithOptionalGradients) {
  const int T = 5, IC = 7, OC = 3;
  std::mt19937 rng(5);
  VecF x = rand_vec((size_t)T * IC, rng), w = rand_vec((size_t)OC * IC, rng), b = rand_vec(OC, rng);
  VecF R = rand_vec((size_t)T * OC, rng);
  VecF out(R.size()), out_t(R.size());
  ops_ref().matmul_forward(out.data(), x.data(), w.data(), b.data(), T, IC, OC);
  matmul_fwd<float>(out_t.data(), x.data(), w.data(), b.data(), T, IC, OC);
  for (size_t i = 0; i < out.size(); i++) ASSERT_NEAR(out[i], out_t[i], 1e-6) << "test forward != ops_ref";

  VecF gx0 = rand_vec(x.size(), rng), gw0 = rand_vec(w.size(), rng), gb0 = rand_vec(b.size(), rng);
  VecF dx = gx0, dw = gw0, db = gb0;
  train_ops_ref().matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), T, IC, OC);
  VecD xd = to_d(x), wd = to_d(w), bd = to_d(b);
  auto fwd = [&](const VecD& xx, const VecD& ww, const VecD& bb) {
    VecD o(R.size());
    matmul_fwd<double>(o.data(), xx.data(), ww.data(), bb.data(), T, IC, OC);
    return dot_r(o, R);
  };
  expect_grad_close(minus(dx, gx0), numeric_grad(xd, [&](const VecD& p) { return fwd(p, wd, bd); }), 1e-5, "dx");
  expect_grad_close(minus(dw, gw0), numeric_grad(wd, [&](const VecD& p) { return fwd(xd, p, bd); }), 1e-5, "dw");
  expect_grad_close(minus(db, gb0), numeric_grad(bd, [&](const VecD& p) { return fwd(xd, wd, p); }), 1e-5, "db");

  // each gradient alone (others null) gives the same values
  VecF dx1 = gx0, dw1 = gw0, db1 = gb0;
  train_ops_ref().matmul_backward(dx1.data(), nullptr, nullptr, R.data(), x.data(), w.data(), T, IC, OC);
  train_ops_ref().matmul_backward(nullptr, dw1.data(), nullptr, R.data(), x.data(), w.data(), T, IC, OC);
  train_ops_ref().matmul_backward(nullptr, nullptr, db1.data(), R.data(), x.data(), w.data(), T, IC, OC);
  EXPECT_EQ(dx1, dx);
  EXPECT_EQ(dw1, dw);
  EXPECT_EQ(db1, db);
}
