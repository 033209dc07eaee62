// core/linalg.h: Householder QR and one-sided Jacobi SVD in double, and the randomized SVD built on them.
#include "core/linalg.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"

namespace lt {

void qr_householder(const double* a, int m, int n, double* Q, double* R) {
  LT_CHECK(m > 0 && n > 0, "qr_householder: shape ({}, {}) must be positive", m, n);
  const int k = std::min(m, n);
  std::vector<double> A(a, a + size_t(m) * n), tau(size_t(k), 0.0);
  auto at = [&](int i, int j) -> double& { return A[size_t(i) * n + j]; };
  // column j: the reflector H = I − τ·v·vᵀ (v[j] = 1, v below it stored in A) zeroing A[j+1:, j]
  for (int j = 0; j < k; ++j) {
    double xnorm = 0;
    for (int i = j + 1; i < m; ++i) xnorm += at(i, j) * at(i, j);
    xnorm = std::sqrt(xnorm);
    const double alpha = at(j, j);
    if (xnorm == 0) continue;  // τ = 0: H is the identity (LAPACK's dlarfg)
    const double beta = -std::copysign(std::hypot(alpha, xnorm), alpha);
    tau[size_t(j)] = (beta - alpha) / beta;
    for (int i = j + 1; i < m; ++i) at(i, j) /= alpha - beta;
    at(j, j) = beta;
    for (int c = j + 1; c < n; ++c) {  // A[j:, c] -= τ·v·(vᵀ·A[j:, c])
      double d = at(j, c);
      for (int i = j + 1; i < m; ++i) d += at(i, j) * at(i, c);
      d *= tau[size_t(j)];
      at(j, c) -= d;
      for (int i = j + 1; i < m; ++i) at(i, c) -= d * at(i, j);
    }
  }
  for (int i = 0; i < k; ++i)
    for (int c = 0; c < n; ++c) R[size_t(i) * n + c] = c >= i ? at(i, c) : 0.0;
  // Q = H_0 ··· H_{k-1} applied to the first k columns of I, last reflector first
  for (int i = 0; i < m; ++i)
    for (int c = 0; c < k; ++c) Q[size_t(i) * k + c] = i == c ? 1.0 : 0.0;
  for (int j = k - 1; j >= 0; --j) {
    if (tau[size_t(j)] == 0) continue;
    for (int c = 0; c < k; ++c) {
      double d = Q[size_t(j) * k + c];
      for (int i = j + 1; i < m; ++i) d += at(i, j) * Q[size_t(i) * k + c];
      d *= tau[size_t(j)];
      Q[size_t(j) * k + c] -= d;
      for (int i = j + 1; i < m; ++i) Q[size_t(i) * k + c] -= d * at(i, j);
    }
  }
}

namespace {

// One-sided Jacobi on the columns of G (rows, cols) stored column by column (G[c] has `rows`
// entries), rows >= cols: rotations until the columns are orthogonal, accumulated into V (cols,
// cols, column by column).
void jacobi_columns(std::vector<double>& G, int rows, int cols, std::vector<double>& V) {
  V.assign(size_t(cols) * cols, 0.0);
  for (int c = 0; c < cols; ++c) V[size_t(c) * cols + c] = 1.0;
  for (int sweep = 0; sweep < 80; ++sweep) {
    bool rotated = false;
    for (int p = 0; p + 1 < cols; ++p)
      for (int q = p + 1; q < cols; ++q) {
        double* gp = &G[size_t(p) * rows];
        double* gq = &G[size_t(q) * rows];
        double al = 0, be = 0, ga = 0;
        for (int i = 0; i < rows; ++i) al += gp[i] * gp[i], be += gq[i] * gq[i], ga += gp[i] * gq[i];
        if (ga == 0 || std::fabs(ga) <= 1e-15 * std::sqrt(al * be)) continue;
        rotated = true;
        const double zeta = (be - al) / (2 * ga);
        const double t = std::copysign(1.0, zeta) / (std::fabs(zeta) + std::sqrt(1 + zeta * zeta));
        const double cs = 1 / std::sqrt(1 + t * t), sn = cs * t;
        for (int i = 0; i < rows; ++i) {
          const double x = gp[i], y = gq[i];
          gp[i] = cs * x - sn * y;
          gq[i] = sn * x + cs * y;
        }
        double* vp = &V[size_t(p) * cols];
        double* vq = &V[size_t(q) * cols];
        for (int i = 0; i < cols; ++i) {
          const double x = vp[i], y = vq[i];
          vp[i] = cs * x - sn * y;
          vq[i] = sn * x + cs * y;
        }
      }
    if (!rotated) return;
  }
}

}  // namespace

void svd_jacobi(const double* a, int m, int n, double* U, double* S, double* Vt) {
  LT_CHECK(m > 0 && n > 0, "svd_jacobi: shape ({}, {}) must be positive", m, n);
  // G's columns: A's columns when m >= n (A = G), else Aᵀ's (A = (U' S V'ᵀ)ᵀ = V' S U'ᵀ)
  const bool tall = m >= n;
  const int rows = tall ? m : n, cols = tall ? n : m, k = cols;
  std::vector<double> G(size_t(rows) * cols), V;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      const double x = a[size_t(i) * n + j];
      if (tall) G[size_t(j) * rows + i] = x;
      else G[size_t(i) * rows + j] = x;
    }
  jacobi_columns(G, rows, cols, V);
  std::vector<double> norm(static_cast<size_t>(k));
  for (int c = 0; c < k; ++c) {
    double s = 0;
    for (int i = 0; i < rows; ++i) s += G[size_t(c) * rows + i] * G[size_t(c) * rows + i];
    norm[size_t(c)] = std::sqrt(s);
  }
  std::vector<int> order(static_cast<size_t>(k));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return norm[size_t(x)] > norm[size_t(y)]; });
  // G's column c / its norm is a left vector of G, V's column c the matching right one
  for (int o = 0; o < k; ++o) {
    const int c = order[size_t(o)];
    const double s = norm[size_t(c)];
    S[o] = s;
    for (int i = 0; i < rows; ++i) {  // left vector of G
      const double u = s > 0 ? G[size_t(c) * rows + i] / s : 0.0;
      if (tall) U[size_t(i) * k + o] = u;
      else Vt[size_t(o) * n + i] = u;
    }
    for (int i = 0; i < cols; ++i) {  // right vector of G
      const double v = V[size_t(c) * cols + i];
      if (tall) Vt[size_t(o) * n + i] = v;
      else U[size_t(i) * k + o] = v;
    }
  }
}

void svd_randomized(const double* a, int m, int n, int q, int niter, uint64_t seed, double* U, double* S,
                    double* Vt) {
  LT_CHECK(q >= 1 && q <= std::min(m, n) && niter >= 0, "svd_randomized: q {} must be in [1, min({}, {})] and niter "
           "{} >= 0", q, m, n, niter);
  auto mul = [](const double* x, const double* y, int r, int inner, int c, bool xt, double* out) {
    // out (r, c) = op(x) · y, op(x) = x (r, inner) or xᵀ with x (inner, r); y (inner, c)
    for (int i = 0; i < r; ++i)
      for (int j = 0; j < c; ++j) {
        double s = 0;
        for (int t = 0; t < inner; ++t) s += (xt ? x[size_t(t) * r + i] : x[size_t(i) * inner + t]) * y[size_t(t) * c + j];
        out[size_t(i) * c + j] = s;
      }
  };
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> omega(size_t(n) * q), Y(size_t(m) * q), Z(size_t(n) * q), Qm(size_t(m) * q),
      Qn(size_t(n) * q), R(size_t(q) * q);
  for (auto& x : omega) x = nd(rng);
  mul(a, omega.data(), m, n, q, false, Y.data());  // Y = A·Ω
  qr_householder(Y.data(), m, q, Qm.data(), R.data());
  for (int it = 0; it < niter; ++it) {
    mul(a, Qm.data(), n, m, q, true, Z.data());  // Z = Aᵀ·Q
    qr_householder(Z.data(), n, q, Qn.data(), R.data());
    mul(a, Qn.data(), m, n, q, false, Y.data());  // Y = A·Qn
    qr_householder(Y.data(), m, q, Qm.data(), R.data());
  }
  std::vector<double> Bm(size_t(q) * n), Ub(size_t(q) * q);
  mul(Qm.data(), a, q, m, n, true, Bm.data());  // B = Qᵀ·A (q, n)
  svd_jacobi(Bm.data(), q, n, Ub.data(), S, Vt);
  mul(Qm.data(), Ub.data(), m, q, q, false, U);  // U = Q·U_B
}

}  // namespace lt
