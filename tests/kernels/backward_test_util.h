// Shared helpers of the backward tests: random vectors, central differences in double, and the
// gradient comparison that also refuses a trivially-zero gradient.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace lt::test {

using VecD = std::vector<double>;
using VecF = std::vector<float>;

inline VecF rand_vec(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  VecF v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

inline VecD to_d(const VecF& v) { return VecD(v.begin(), v.end()); }

// Central differences of L at p, in double.
inline VecD numeric_grad(VecD p, const std::function<double(const VecD&)>& L, double eps = 1e-6) {
  VecD g(p.size());
  for (size_t i = 0; i < p.size(); i++) {
    double keep = p[i];
    p[i] = keep + eps;
    double lp = L(p);
    p[i] = keep - eps;
    double lm = L(p);
    p[i] = keep;
    g[i] = (lp - lm) / (2 * eps);
  }
  return g;
}

// analytic (f32) vs numeric (double): |a - n| <= tol * (max|n| + |n|), and the gradient is not trivially 0.
inline void expect_grad_close(const VecF& analytic, const VecD& numeric, double tol, const char* what) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  double mx = 0;
  for (double n : numeric) mx = std::max(mx, std::fabs(n));
  EXPECT_GT(mx, 1e-3) << what << ": the numeric gradient is ~0, the test would not see a wrong backward";
  for (size_t i = 0; i < numeric.size(); i++)
    EXPECT_NEAR(analytic[i], numeric[i], tol * (mx + std::fabs(numeric[i]))) << what << " [" << i << "]";
}

inline VecF minus(const VecF& a, const VecF& b) {
  VecF r(a.size());
  for (size_t i = 0; i < a.size(); i++) r[i] = a[i] - b[i];
  return r;
}

}  // namespace lt::test
