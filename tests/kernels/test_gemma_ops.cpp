// Gemma's ops (kernels/ops.h, backward.h): GeGLU with the tanh gelu, logit soft-capping, and
// attention with soft-capped scores. Forwards against double-precision formulas written out here
// (PyTorch's gelu(approximate="tanh"), cap * tanh(s / cap) on the scaled scores); backwards of the
// reference against central differences of L = sum(out * R) in double; the CPU entries against the
// reference; and the capped attention at a huge cap equal to the uncapped one (the same masks).
#include <cstring>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backward_test_util.h"
#include "kernels/backward.h"
#include "kernels/ops.h"

using namespace lt;
using namespace lt::test;

namespace {

double gelu_tanh_d(double g) { return 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g))); }

double dot_r(const VecD& out, const VecF& R) {
  double s = 0;
  for (size_t i = 0; i < out.size(); i++) s += out[i] * R[i];
  return s;
}

// Capped causal attention with document starts, in double: the specification of the capped ops.
void capped_attention_d(double* out, const double* q, const double* k, const double* v, const int* doc, int T, int NH,
                        int NKV, int HS, double cap) {
  const int group = NH / NKV;
  for (int t = 0; t < T; t++)
    for (int h = 0; h < NH; h++) {
      const int hk = h / group;
      std::vector<double> s(size_t(t + 1));
      double mx = -INFINITY, sum = 0;
      for (int j = doc[t]; j <= t; j++) {
        double d = 0;
        for (int c = 0; c < HS; c++) d += q[(t * NH + h) * HS + c] * k[(j * NKV + hk) * HS + c];
        s[size_t(j)] = cap * std::tanh(d / std::sqrt(double(HS)) / cap);
        mx = std::max(mx, s[size_t(j)]);
      }
      for (int j = doc[t]; j <= t; j++) sum += std::exp(s[size_t(j)] - mx);
      for (int c = 0; c < HS; c++) {
        double o = 0;
        for (int j = doc[t]; j <= t; j++) o += std::exp(s[size_t(j)] - mx) / sum * v[(j * NKV + hk) * HS + c];
        out[(t * NH + h) * HS + c] = o;
      }
    }
}

}  // namespace

TEST(GemmaOps, GegluForwardMatchesTheFormulaOnEveryTable) {
  std::mt19937 rng(1);
  const int T = 3, F = 37;
  VecF g = rand_vec(size_t(T) * F, rng, -6, 6), u = rand_vec(g.size(), rng);
  for (const Ops* ops : {&ops_ref(), &ops_cpu()}) {
    VecF out(g.size());
    ops->geglu_forward(out.data(), g.data(), u.data(), T, F);
    for (size_t i = 0; i < g.size(); i++)
      EXPECT_NEAR(out[i], gelu_tanh_d(g[i]) * u[i], 2e-6 * (1 + std::fabs(out[i]))) << ops->name << " " << i;
  }
}

// dup written over dout (the training step's in-place use) gives the same bits as separate buffers.
TEST(GemmaOps, GegluBackwardInPlaceGivesTheSameBits) {
  std::mt19937 rng(3);
  const int T = 5, F = 3001;
  const size_t n = size_t(T) * F;
  VecF g = rand_vec(n, rng, -3, 3), u = rand_vec(n, rng), R = rand_vec(n, rng);
  for (const TrainOps* t : {&train_ops_ref(), &train_ops_cpu()}) {
    VecF dg(n), du(n), dg2(n), io = R;
    t->geglu_backward(dg.data(), du.data(), R.data(), g.data(), u.data(), T, F);
    t->geglu_backward(dg2.data(), io.data(), io.data(), g.data(), u.data(), T, F);
    EXPECT_EQ(0, std::memcmp(dg.data(), dg2.data(), n * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(du.data(), io.data(), n * sizeof(float)));
  }
}

TEST(GemmaOps, GegluBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(2);
  const int T = 5, F = 7;
  const size_t n = size_t(T) * F;
  VecF g = rand_vec(n, rng, -3, 3), u = rand_vec(n, rng), R = rand_vec(n, rng);
  for (const TrainOps* t : {&train_ops_ref(), &train_ops_cpu()}) {
    VecF dg(n, std::numeric_limits<float>::quiet_NaN()), du = dg;  // written, not accumulated
    t->geglu_backward(dg.data(), du.data(), R.data(), g.data(), u.data(), T, F);
    auto Lg = [&](const VecD& gd) {
      VecD o(n);
      for (size_t i = 0; i < n; i++) o[i] = gelu_tanh_d(gd[i]) * u[i];
      return dot_r(o, R);
    };
    auto Lu = [&](const VecD& ud) {
      VecD o(n);
      for (size_t i = 0; i < n; i++) o[i] = gelu_tanh_d(g[i]) * ud[i];
      return dot_r(o, R);
    };
    expect_grad_close(dg, numeric_grad(to_d(g), Lg), 1e-4, "geglu dgate");
    expect_grad_close(du, numeric_grad(to_d(u), Lu), 1e-4, "geglu dup");
  }
}

TEST(GemmaOps, SoftcapForwardAndBackward) {
  std::mt19937 rng(3);
  const float cap = 3.0f;
  VecF x = rand_vec(41, rng, -12, 12), R = rand_vec(x.size(), rng);
  for (const Ops* ops : {&ops_ref(), &ops_cpu()}) {
    VecF y = x;
    ops->softcap_forward(y.data(), y.size(), cap);
    for (size_t i = 0; i < x.size(); i++) {
      EXPECT_NEAR(y[i], cap * std::tanh(double(x[i]) / cap), 1e-6) << ops->name;
      EXPECT_LT(std::fabs(y[i]), cap + 1e-6f);
    }
  }
  VecF y = x;
  ops_ref().softcap_forward(y.data(), y.size(), cap);
  for (const TrainOps* t : {&train_ops_ref(), &train_ops_cpu()}) {
    VecF dx = R;
    t->softcap_backward(dx.data(), y.data(), dx.size(), cap);
    auto L = [&](const VecD& xd) {
      VecD o(xd.size());
      for (size_t i = 0; i < xd.size(); i++) o[i] = cap * std::tanh(xd[i] / cap);
      return dot_r(o, R);
    };
    expect_grad_close(dx, numeric_grad(to_d(x), L), 1e-4, "softcap");
  }
}

TEST(GemmaOps, CappedTrainingAttentionMatchesDoubleAndFiniteDifferences) {
  std::mt19937 rng(4);
  const int T = 6, NH = 4, NKV = 2, HS = 6;
  const float cap = 0.7f;  // small: the cap bends every score
  const int doc[T] = {0, 0, 0, 3, 3, 3};
  VecF q = rand_vec(size_t(T) * NH * HS, rng, -2, 2), k = rand_vec(size_t(T) * NKV * HS, rng, -2, 2);
  VecF v = rand_vec(k.size(), rng), R = rand_vec(q.size(), rng);
  VecF out(q.size()), lse(size_t(NH) * T);
  train_ops_ref().attention_softcap_train_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), doc, T, NH,
                                                  NKV, HS, cap);
  VecD want(q.size());
  capped_attention_d(want.data(), to_d(q).data(), to_d(k).data(), to_d(v).data(), doc, T, NH, NKV, HS, cap);
  for (size_t i = 0; i < out.size(); i++) EXPECT_NEAR(out[i], want[i], 1e-5) << i;
  // the uncapped kernel differs: the cap is applied
  VecF plain(q.size());
  train_ops_ref().attention_train_forward(plain.data(), nullptr, q.data(), k.data(), v.data(), doc, T, NH, NKV, HS);
  double moved = 0;
  for (size_t i = 0; i < out.size(); i++) moved = std::max(moved, double(std::fabs(plain[i] - out[i])));
  EXPECT_GT(moved, 1e-2);
  for (const TrainOps* t : {&train_ops_ref(), &train_ops_cpu()}) {
    VecF g0 = rand_vec(q.size(), rng), dq = g0, dk0 = rand_vec(k.size(), rng), dk = dk0, dv0 = rand_vec(v.size(), rng),
         dv = dv0;
    t->attention_softcap_backward(dq.data(), dk.data(), dv.data(), R.data(), q.data(), k.data(), v.data(), out.data(),
                                  lse.data(), doc, T, NH, NKV, HS, cap);
    auto L = [&](const VecD& qd, const VecD& kd, const VecD& vd) {
      VecD o(q.size());
      capped_attention_d(o.data(), qd.data(), kd.data(), vd.data(), doc, T, NH, NKV, HS, cap);
      return dot_r(o, R);
    };
    const VecD qd = to_d(q), kd = to_d(k), vd = to_d(v);
    expect_grad_close(minus(dq, g0), numeric_grad(qd, [&](const VecD& p) { return L(p, kd, vd); }), 1e-4, "dq");
    expect_grad_close(minus(dk, dk0), numeric_grad(kd, [&](const VecD& p) { return L(qd, p, vd); }), 1e-4, "dk");
    expect_grad_close(minus(dv, dv0), numeric_grad(vd, [&](const VecD& p) { return L(qd, kd, p); }), 1e-4, "dv");
  }
}

TEST(GemmaOps, CappedCacheAttentionMatchesTrainingOneAndWindows) {
  std::mt19937 rng(5);
  const int T = 9, NH = 4, NKV = 2, HS = 8, W = 4;
  const float cap = 1.5f;
  VecF q = rand_vec(size_t(T) * NH * HS, rng, -2, 2), k = rand_vec(size_t(T) * NKV * HS, rng, -2, 2);
  VecF v = rand_vec(k.size(), rng);
  std::vector<int> start(T, 0), wstart(T);
  for (int t = 0; t < T; t++) wstart[size_t(t)] = std::max(0, t - W + 1);
  for (int window : {0, W}) {
    VecF want(q.size()), got(q.size());
    train_ops_ref().attention_softcap_train_forward(want.data(), nullptr, q.data(), k.data(), v.data(),
                                                    window ? wstart.data() : start.data(), T, NH, NKV, HS, cap);
    for (const Ops* ops : {&ops_ref(), &ops_cpu()}) {
      ops->attention_softcap_forward(got.data(), nullptr, q.data(), k.data(), v.data(), T, 0, NH, NKV, HS, window, 0,
                                     cap);
      for (size_t i = 0; i < got.size(); i++) EXPECT_NEAR(got[i], want[i], 1e-6) << ops->name << " w" << window;
    }
  }
  // a cap far above every score: the uncapped attention
  VecF a(q.size()), b(q.size());
  ops_ref().attention_softcap_forward(a.data(), nullptr, q.data(), k.data(), v.data(), T, 0, NH, NKV, HS, 0, 0, 1e6f);
  ops_ref().attention_forward(b.data(), nullptr, q.data(), k.data(), v.data(), T, 0, NH, NKV, HS, 0, 0);
  for (size_t i = 0; i < a.size(); i++) EXPECT_NEAR(a[i], b[i], 1e-6);
}
