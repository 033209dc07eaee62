// Checks the scalar reference kernels (the spec) against independent double-precision formulas
// and known properties, so the fast kernels are not merely compared with a wrong oracle.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/ref/ref.h"

namespace lt::test {
namespace {

TEST(KernelRef, RmsnormMatchesFormula) {
  int T = 3, C = 67;
  float eps = 1e-5f;
  auto x = random_vec((size_t)T * C, 1, -2, 2), w = random_vec(C, 2);
  std::vector<float> out(x.size()), rstd(T), want(x.size()), want_rstd(T);
  ops_ref().rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), T, C, eps);
  for (int t = 0; t < T; t++) {
    double ss = 0;
    for (int c = 0; c < C; c++) ss += (double)x[t * C + c] * x[t * C + c];
    double r = 1.0 / std::sqrt(ss / C + eps);
    want_rstd[t] = (float)r;
    for (int c = 0; c < C; c++) want[t * C + c] = (float)(w[c] * x[t * C + c] * r);
  }
  expect_close(out, want, 1e-6, 1e-7, "rmsnorm out");
  expect_close(rstd, want_rstd, 1e-6, 0, "rmsnorm rstd");
}

TEST(KernelRef, RopeRotatesPairsByPositionAngle) {
  int T = 2, NH = 3, HS = 12;
  auto x = random_vec((size_t)T * NH * HS, 3), inv_freq = random_vec(HS / 2, 4, 0.001f, 1.0f);
  int pos[2] = {0, 5};
  for (bool interleaved : {false, true}) {
    auto y = x;
    ops_ref().rope_forward(y.data(), pos, inv_freq.data(), T, NH, HS, interleaved);
    std::vector<float> want(x.size());
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH; h++)
        for (int i = 0; i < HS / 2; i++) {
          size_t b = ((size_t)t * NH + h) * HS;
          int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + HS / 2;
          double a = (double)pos[t] * inv_freq[i];
          want[b + i0] = (float)(x[b + i0] * std::cos(a) - x[b + i1] * std::sin(a));
          want[b + i1] = (float)(x[b + i1] * std::cos(a) + x[b + i0] * std::sin(a));
        }
    expect_close(y, want, 1e-5, 1e-6, interleaved ? "rope interleaved" : "rope halves");
    // position 0 is the identity
    for (int i = 0; i < NH * HS; i++) EXPECT_EQ(y[i], x[i]);
  }
}

TEST(KernelRef, AttentionMatchesDoubleSoftmax) {
  int T = 5, pos0 = 7, NH = 8, NKV = 2, HS = 12, P = pos0 + T;
  auto q = random_vec((size_t)T * NH * HS, 5, -3, 3), k = random_vec((size_t)P * NKV * HS, 6, -3, 3),
       v = random_vec((size_t)P * NKV * HS, 7);
  std::vector<float> out((size_t)T * NH * HS), lse((size_t)NH * T), want, want_lse;
  ops_ref().attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), T, pos0, NH, NKV, HS, 0, 0);
  attention_double(want, want_lse, q, k, v, T, pos0, NH, NKV, HS);
  expect_close(out, want, 1e-5, 1e-6, "attention out");
  expect_close(lse, want_lse, 1e-5, 1e-6, "attention lse");
}

TEST(KernelRef, SwigluAndMatmulMatchFormulas) {
  auto g = random_vec(50, 8, -6, 6), u = random_vec(50, 9);
  std::vector<float> out(50), want(50);
  ops_ref().swiglu_forward(out.data(), g.data(), u.data(), 5, 10);
  for (int i = 0; i < 50; i++) want[i] = (float)(g[i] / (1.0 + std::exp(-(double)g[i])) * u[i]);
  expect_close(out, want, 1e-6, 1e-7, "swiglu");

  int T = 2, IC = 7, OC = 3;
  auto x = random_vec(T * IC, 10), w = random_vec(OC * IC, 11), b = random_vec(OC, 12);
  std::vector<float> y(T * OC), wy(T * OC);
  ops_ref().matmul_forward(y.data(), x.data(), w.data(), b.data(), T, IC, OC);
  for (int t = 0; t < T; t++)
    for (int o = 0; o < OC; o++) {
      double s = b[o];
      for (int i = 0; i < IC; i++) s += (double)x[t * IC + i] * w[o * IC + i];
      wy[t * OC + o] = (float)s;
    }
  expect_close(y, wy, 1e-6, 1e-6, "matmul");
}

}  // namespace
}  // namespace lt::test
