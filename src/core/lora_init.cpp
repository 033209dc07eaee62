// core/lora_init.h: PiSSA / OLoRA A and B from the factorizations of core/linalg.h, W made the residual.
#include "core/lora_init.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/linalg.h"

namespace lt {

namespace {

// W (out, in) -= s · (B·A), B·A in f32 as a matmul sums it
void subtract_lora(float* W, int out, int in, int r, float scale, const float* A, const float* B) {
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i) {
      float ba = 0.0f;
      for (int k = 0; k < r; ++k) ba += B[size_t(o) * r + k] * A[size_t(k) * in + i];
      W[size_t(o) * in + i] -= scale * ba;
    }
}

void check_shape(const char* what, int out, int in, int r, float scale) {
  LT_CHECK(out > 0 && in > 0 && r >= 1 && r <= std::min(out, in) && std::isfinite(scale) && scale > 0,
           "{}: rank {} must be in [1, min({}, {})] and the scale {} > 0", what, r, out, in, scale);
}

}  // namespace

void pissa_init(float* W, int out, int in, int r, float scale, int niter, uint64_t seed, float* A, float* B) {
  check_shape("pissa_init", out, in, r, scale);
  const int k = niter < 0 ? std::min(out, in) : r;
  std::vector<double> w(W, W + size_t(out) * in), U(size_t(out) * k), S(static_cast<size_t>(k)), Vt(size_t(k) * in);
  if (niter < 0) svd_jacobi(w.data(), out, in, U.data(), S.data(), Vt.data());
  else svd_randomized(w.data(), out, in, r, niter, seed, U.data(), S.data(), Vt.data());
  for (int j = 0; j < r; ++j) {
    const double root = std::sqrt(S[size_t(j)] / scale);
    for (int i = 0; i < in; ++i) A[size_t(j) * in + i] = float(root * Vt[size_t(j) * in + i]);
    for (int o = 0; o < out; ++o) B[size_t(o) * r + j] = float(U[size_t(o) * k + j] * root);
  }
  subtract_lora(W, out, in, r, scale, A, B);
}

void olora_init(float* W, int out, int in, int r, float scale, float* A, float* B) {
  check_shape("olora_init", out, in, r, scale);
  const int k = std::min(out, in);
  std::vector<double> w(W, W + size_t(out) * in), Q(size_t(out) * k), R(size_t(k) * in);
  qr_householder(w.data(), out, in, Q.data(), R.data());
  for (int j = 0; j < r; ++j)
    for (int i = 0; i < in; ++i) A[size_t(j) * in + i] = float(R[size_t(j) * in + i]);
  for (int o = 0; o < out; ++o)
    for (int j = 0; j < r; ++j) B[size_t(o) * r + j] = float(Q[size_t(o) * k + j]);
  subtract_lora(W, out, in, r, scale, A, B);
}

}  // namespace lt
