// core/linalg.h and core/lora_init.h: the QR against numpy / LAPACK's reference values (signs
// included), the factorizations' defining properties on random matrices of both orientations, the
// randomized SVD's exactness on a low-rank matrix, and PiSSA / OLoRA initialisations that leave
// W_res + s·B·A equal to W.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/linalg.h"
#include "core/lora_init.h"

namespace lt {
namespace {

std::vector<double> random_matrix(int m, int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0, 1);
  std::vector<double> a(size_t(m) * n);
  for (double& x : a) x = nd(rng);
  return a;
}

// max |X·Y − Z| for X (m, k), Y (k, n), with Y's rows scaled by s when given
double product_error(const std::vector<double>& X, const std::vector<double>& Y, const std::vector<double>& Z, int m,
                     int k, int n, const std::vector<double>* s = nullptr) {
  double err = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double v = 0;
      for (int t = 0; t < k; ++t) v += X[size_t(i) * k + t] * (s ? (*s)[size_t(t)] : 1.0) * Y[size_t(t) * n + j];
      err = std::max(err, std::fabs(v - Z[size_t(i) * n + j]));
    }
  return err;
}

// max |Xᵀ·X − I| over the k columns of X (rows, k)
double orthonormality_error(const std::vector<double>& X, int rows, int k, bool columns) {
  double err = 0;
  for (int a = 0; a < k; ++a)
    for (int b = 0; b < k; ++b) {
      double d = 0;
      for (int i = 0; i < rows; ++i)
        d += columns ? X[size_t(i) * k + a] * X[size_t(i) * k + b] : X[size_t(a) * rows + i] * X[size_t(b) * rows + i];
      err = std::max(err, std::fabs(d - (a == b)));
    }
  return err;
}

TEST(Linalg, QrMatchesLapackSigns) {
  // numpy.linalg.qr([[1,2],[3,4],[5,6]]) (LAPACK dgeqrf / dorgqr)
  const std::vector<double> a = {1, 2, 3, 4, 5, 6};
  std::vector<double> Q(6), R(4);
  qr_householder(a.data(), 3, 2, Q.data(), R.data());
  const double q[6] = {-0.16903085, 0.89708523, -0.50709255, 0.27602622, -0.84515425, -0.34503278};
  const double r[4] = {-5.91607978, -7.43735744, 0.0, 0.82807867};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(Q[size_t(i)], q[i], 1e-7) << "Q " << i;
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(R[size_t(i)], r[i], 1e-7) << "R " << i;
}

TEST(Linalg, QrFactorsTallAndWideMatrices) {
  for (auto [m, n] : {std::pair{30, 12}, std::pair{12, 30}, std::pair{17, 17}}) {
    const auto a = random_matrix(m, n, unsigned(m * 100 + n));
    const int k = std::min(m, n);
    std::vector<double> Q(size_t(m) * k), R(size_t(k) * n);
    qr_householder(a.data(), m, n, Q.data(), R.data());
    EXPECT_LT(product_error(Q, R, a, m, k, n), 1e-12) << m << "x" << n;
    EXPECT_LT(orthonormality_error(Q, m, k, true), 1e-12) << m << "x" << n;
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < i; ++j) EXPECT_EQ(R[size_t(i) * n + j], 0.0);
  }
}

TEST(Linalg, JacobiSvdFactorsTallAndWideMatrices) {
  for (auto [m, n] : {std::pair{40, 15}, std::pair{15, 40}, std::pair{20, 20}}) {
    const auto a = random_matrix(m, n, unsigned(m * 7 + n));
    const int k = std::min(m, n);
    std::vector<double> U(size_t(m) * k), S(static_cast<size_t>(k)), Vt(size_t(k) * n);
    svd_jacobi(a.data(), m, n, U.data(), S.data(), Vt.data());
    EXPECT_LT(product_error(U, Vt, a, m, k, n, &S), 1e-11) << m << "x" << n;
    EXPECT_LT(orthonormality_error(U, m, k, true), 1e-12);
    EXPECT_LT(orthonormality_error(Vt, n, k, false), 1e-12);
    for (int i = 1; i < k; ++i) EXPECT_GE(S[size_t(i) - 1], S[size_t(i)]);
    // the singular values are the square roots of AᵀA's eigenvalues: their squares sum to ‖A‖²_F
    double fro = 0, s2 = 0;
    for (double x : a) fro += x * x;
    for (double s : S) s2 += s * s;
    EXPECT_NEAR(s2, fro, 1e-10 * fro);
  }
}

TEST(Linalg, JacobiSvdOfAKnownSpectrum) {
  // A = Q1·diag(5, 3, 1)·Q2ᵀ with orthonormal Q1 (6, 3), Q2 (4, 3) from QR
  std::vector<double> Q1(18), R1(9), Q2(12), R2(9);
  qr_householder(random_matrix(6, 3, 1).data(), 6, 3, Q1.data(), R1.data());
  qr_householder(random_matrix(4, 3, 2).data(), 4, 3, Q2.data(), R2.data());
  const std::vector<double> sv = {5, 3, 1};
  std::vector<double> a(24, 0.0), Q2t(12);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) Q2t[size_t(j) * 4 + i] = Q2[size_t(i) * 3 + j];
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j)
      for (int t = 0; t < 3; ++t) a[size_t(i) * 4 + j] += Q1[size_t(i) * 3 + t] * sv[size_t(t)] * Q2t[size_t(t) * 4 + j];
  std::vector<double> U(24), S(4), Vt(16);
  svd_jacobi(a.data(), 6, 4, U.data(), S.data(), Vt.data());
  EXPECT_NEAR(S[0], 5, 1e-12);
  EXPECT_NEAR(S[1], 3, 1e-12);
  EXPECT_NEAR(S[2], 1, 1e-12);
  EXPECT_NEAR(S[3], 0, 1e-12);
  // each pair is Q1's / Q2's column up to one common sign
  for (int t = 0; t < 3; ++t) {
    double du = 0, dv = 0;
    for (int i = 0; i < 6; ++i) du += U[size_t(i) * 4 + t] * Q1[size_t(i) * 3 + t];
    for (int j = 0; j < 4; ++j) dv += Vt[size_t(t) * 4 + j] * Q2[size_t(j) * 3 + t];
    EXPECT_NEAR(std::fabs(du), 1, 1e-12);
    EXPECT_NEAR(du, dv, 1e-12);
  }
}

TEST(Linalg, RandomizedSvdIsExactOnALowRankMatrix) {
  // rank 3 (30, 20): the range finder captures it whatever Ω, with or without iterations
  const auto X = random_matrix(30, 3, 5), Y = random_matrix(3, 20, 6);
  std::vector<double> a(600, 0.0);
  for (int i = 0; i < 30; ++i)
    for (int j = 0; j < 20; ++j)
      for (int t = 0; t < 3; ++t) a[size_t(i) * 20 + j] += X[size_t(i) * 3 + t] * Y[size_t(t) * 20 + j];
  std::vector<double> U(600), S(20), Vt(400);
  svd_jacobi(a.data(), 30, 20, U.data(), S.data(), Vt.data());
  for (int niter : {0, 2}) {
    std::vector<double> u(90), s(3), vt(60);
    svd_randomized(a.data(), 30, 20, 3, niter, 42, u.data(), s.data(), vt.data());
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(s[size_t(i)], S[size_t(i)], 1e-10 * S[0]) << "niter " << niter;
    EXPECT_LT(product_error(u, vt, a, 30, 3, 20, &s), 1e-10);
  }
  // full rank: with iterations the top singular values converge to the exact ones
  const auto b = random_matrix(40, 25, 9);
  U.resize(40 * 25), S.resize(25), Vt.resize(25 * 25);
  svd_jacobi(b.data(), 40, 25, U.data(), S.data(), Vt.data());
  std::vector<double> u(160), s(4), vt(100);
  svd_randomized(b.data(), 40, 25, 4, 30, 7, u.data(), s.data(), vt.data());
  EXPECT_NEAR(s[0], S[0], 1e-6 * S[0]);
  EXPECT_THROW(svd_randomized(b.data(), 40, 25, 26, 1, 7, u.data(), s.data(), vt.data()), Error);
}

// W_res + s·B·A == W, and the factors' structure
void check_lora_init(bool pissa, int niter, int out, int in) {
  const int r = 4;
  const float scale = 2.5f;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 0.1f);
  std::vector<float> W(size_t(out) * in), A(size_t(r) * in), B(size_t(out) * r);
  for (float& x : W) x = nd(rng);
  const std::vector<float> W0 = W;
  if (pissa) pissa_init(W.data(), out, in, r, scale, niter, 1, A.data(), B.data());
  else olora_init(W.data(), out, in, r, scale, A.data(), B.data());
  double err = 0, moved = 0;
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i) {
      double ba = 0;
      for (int k = 0; k < r; ++k) ba += double(B[size_t(o) * r + k]) * A[size_t(k) * in + i];
      err = std::max(err, std::fabs(W[size_t(o) * in + i] + scale * ba - W0[size_t(o) * in + i]));
      moved = std::max(moved, std::fabs(double(W[size_t(o) * in + i]) - W0[size_t(o) * in + i]));
    }
  EXPECT_LT(err, 1e-6) << (pissa ? "pissa" : "olora");
  EXPECT_GT(moved, 1e-2) << "the base weight was not made the residual";
  // PiSSA: s·BᵀB = diag(S_r) = s·A·Aᵀ (both halves carry sqrt(S_r / s)); OLoRA: B's columns orthonormal
  for (int a = 0; a < r; ++a)
    for (int b = 0; b < r; ++b) {
      double bb = 0, aa = 0;
      for (int o = 0; o < out; ++o) bb += double(B[size_t(o) * r + a]) * B[size_t(o) * r + b];
      for (int i = 0; i < in; ++i) aa += double(A[size_t(a) * in + i]) * A[size_t(b) * in + i];
      if (pissa) {
        EXPECT_NEAR(bb, aa, 1e-5 * (1 + std::fabs(aa)));
      } else {
        EXPECT_NEAR(bb, a == b, 1e-6);
      }
      if (pissa && a != b) {
        EXPECT_NEAR(bb, 0, 1e-5);
      }
    }
}

TEST(LoraInit, PissaAndOloraLeaveTheModelUnchanged) {
  for (auto [out, in] : {std::pair{24, 40}, std::pair{40, 24}}) {
    check_lora_init(true, -1, out, in);
    check_lora_init(true, 8, out, in);
    check_lora_init(false, -1, out, in);
  }
}

TEST(LoraInit, PissaTakesTheTopSingularTriplets) {
  // s·B·A is the best rank-r approximation: its Frobenius norm² is the sum of the top r σ²
  const int out = 20, in = 30, r = 3;
  const auto a = random_matrix(out, in, 12);
  std::vector<float> W(a.begin(), a.end()), A(size_t(r) * in), B(size_t(out) * r);
  pissa_init(W.data(), out, in, r, 1.0f, -1, 0, A.data(), B.data());
  std::vector<double> U(size_t(out) * out), S(static_cast<size_t>(out)), Vt(size_t(out) * in);
  svd_jacobi(a.data(), out, in, U.data(), S.data(), Vt.data());
  double top = 0, res = 0, all = 0;
  for (int k = 0; k < r; ++k) top += S[size_t(k)] * S[size_t(k)];
  for (double s : S) all += s * s;
  for (float w : W) res += double(w) * w;
  EXPECT_NEAR(res, all - top, 1e-4 * all);
}

}  // namespace
}  // namespace lt
