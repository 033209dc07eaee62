// The bf16 lm_head + cross-entropy (TrainOps::lm_head_loss_bf16), ref and every CPU ISA, against
// the exact (double) loss and gradients of the same x and the widened bf16 lm_head, on odd shapes:
// T = 1, C and V not multiples of 16, chunks that do not divide T, ignored labels.
//
// Tolerances come from the two roundings the bf16 kernel adds (bf16 keeps 8 significant bits: a
// rounding moves a value by at most 2^-9 of itself):
//   logits: x is rounded, so |Δz_tv| <= 2^-9 Σ_c |x_tc w_vc| (+ f32 accumulation, ~C·2^-24 of the
//     same sum); δ_t = 2^-8 max_v Σ_c |x_tc w_vc| bounds it with a factor 2 to spare.
//   loss: lse and z_y each move by at most δ_t, so |Δ row loss| <= 2 δ_t.
//   dlogits: p_v = exp(z_v - lse) moves by a factor exp(±2δ_t), |Δp_v| <= 3 δ_t p_v (δ_t < 0.3),
//     then the rounding to bf16 adds 2^-9 |dl_v|; bound 3 δ_t p_v g + 2^-8 |dl_v|.
//   dx = dl · w: Σ_v (bound on Δdl_tv) |w_vc|; dw = dlᵀ · x: Σ_t (bound on Δdl_tv + 2^-8 |dl_tv|) |x_tc|
//     (x's rounding as well), plus 1e-6 absolute for the f32 sums of terms that cancel.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "kernels/backward.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/train_kernels.h"

using namespace lt;

namespace {

struct Case {
  int T, C, V, chunk;
};

struct Oracle {
  double loss = 0, loss_tol = 0;
  std::vector<double> dx, dx_tol, dw, dw_tol;
};

// The exact loss and gradients of x and the widened w, with the bounds above.
Oracle oracle(const std::vector<float>& x, const std::vector<float>& w, const std::vector<int>& labels, const Case& k,
              float loss_scale) {
  const int T = k.T, C = k.C, V = k.V;
  int count = 0;
  for (int y : labels) count += y != kIgnoreLabel;
  const double g = double(loss_scale) / count;
  Oracle o;
  o.dx.assign(size_t(T) * C, 0);
  o.dx_tol.assign(size_t(T) * C, 1e-6);
  o.dw.assign(size_t(V) * C, 0);
  o.dw_tol.assign(size_t(V) * C, 1e-6);
  for (int t = 0; t < T; ++t) {
    const int y = labels[size_t(t)];
    if (y == kIgnoreLabel) continue;
    std::vector<double> z(static_cast<size_t>(V), 0.0), mag(static_cast<size_t>(V), 0.0);
    double delta = 0, mx = -1e300;
    for (int v = 0; v < V; ++v) {
      for (int c = 0; c < C; ++c) {
        z[size_t(v)] += double(x[size_t(t) * C + c]) * w[size_t(v) * C + c];
        mag[size_t(v)] += std::fabs(double(x[size_t(t) * C + c]) * w[size_t(v) * C + c]);
      }
      delta = std::max(delta, std::ldexp(mag[size_t(v)], -8));
      mx = std::max(mx, z[size_t(v)]);
    }
    EXPECT_LT(delta, 0.3) << "the bound on the dlogits assumes small logit errors";
    double sum = 0;
    for (double zv : z) sum += std::exp(zv - mx);
    const double lse = mx + std::log(sum);
    o.loss += (lse - z[size_t(y)]) / count;
    o.loss_tol += 2 * delta / count;
    for (int v = 0; v < V; ++v) {
      const double p = std::exp(z[size_t(v)] - lse), dl = (p - (v == y ? 1.0 : 0.0)) * g;
      const double dl_tol = 3 * delta * p * g + std::ldexp(std::fabs(dl), -8);
      for (int c = 0; c < C; ++c) {
        const double xv = x[size_t(t) * C + c], wv = w[size_t(v) * C + c];
        o.dx[size_t(t) * C + c] += dl * wv;
        o.dx_tol[size_t(t) * C + c] += dl_tol * std::fabs(wv);
        o.dw[size_t(v) * C + c] += dl * xv;
        o.dw_tol[size_t(v) * C + c] += (dl_tol + std::ldexp(std::fabs(dl), -8)) * std::fabs(xv);
      }
    }
  }
  return o;
}

using LossBf16 = decltype(TrainOps::lm_head_loss_bf16);

// The kernel `f` on case k: the loss and gradients within the oracle's bounds, ignored rows' dx
// exactly zero, dw accumulated onto what was there, and the loss alone (no gradients) the same.
void check(LossBf16 f, const Case& k, const std::string& what) {
  SCOPED_TRACE(what + " T=" + std::to_string(k.T) + " C=" + std::to_string(k.C) + " V=" + std::to_string(k.V) +
               " chunk=" + std::to_string(k.chunk));
  const int T = k.T, C = k.C, V = k.V;
  std::mt19937 rng(unsigned(T * 131 + C * 7 + V + k.chunk));
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> x(size_t(T) * C), w(size_t(V) * C);
  std::vector<uint16_t> w16(w.size());
  for (auto& v : x) v = nd(rng);
  for (size_t i = 0; i < w.size(); ++i) {
    w16[i] = f32_to_bf16(0.4f * nd(rng));
    w[i] = bf16_to_f32(w16[i]);
  }
  std::vector<int> labels(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) labels[size_t(t)] = (T > 1 && t % 4 == 1) ? kIgnoreLabel : int(rng() % unsigned(V));
  const float loss_scale = 0.7f;
  const Oracle o = oracle(x, w, labels, k, loss_scale);
  const size_t rows = size_t(std::min(k.chunk, T));
  std::vector<float> dx(size_t(T) * C, 9.0f), dw(size_t(V) * C, 0.5f), logits(rows * V);
  std::vector<uint16_t> x16(rows * C);
  const float loss = f(dx.data(), dw.data(), logits.data(), x16.data(), x.data(), w16.data(), labels.data(), T, C, V,
                       k.chunk, loss_scale);
  EXPECT_NEAR(loss, o.loss, o.loss_tol + 1e-6);
  for (size_t i = 0; i < dx.size(); ++i) {
    if (labels[i / size_t(C)] == kIgnoreLabel) EXPECT_EQ(dx[i], 0.0f) << i;
    EXPECT_NEAR(dx[i], o.dx[i], o.dx_tol[i]) << "dx " << i;
  }
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw[i] - 0.5, o.dw[i], o.dw_tol[i]) << "dw " << i;
  // frozen lm_head (dw null): the same dx; loss only: the same loss
  std::vector<float> dx2(dx.size(), -3.0f);
  EXPECT_EQ(f(dx2.data(), nullptr, logits.data(), x16.data(), x.data(), w16.data(), labels.data(), T, C, V, k.chunk,
              loss_scale), loss);
  EXPECT_EQ(dx2, dx);
  EXPECT_EQ(f(nullptr, nullptr, logits.data(), x16.data(), x.data(), w16.data(), labels.data(), T, C, V, k.chunk,
              loss_scale), loss);
}

const Case kCases[] = {{1, 17, 29, 1}, {1, 40, 50, 8}, {13, 33, 37, 5}, {7, 19, 50, 64}, {16, 64, 96, 3}};

}  // namespace

TEST(KernelCrossEntropyBf16, RefWithinBf16Rounding) {
  for (const Case& k : kCases) check(train_ops_ref().lm_head_loss_bf16, k, "ref");
}

TEST(KernelCrossEntropyBf16, CpuWithinBf16Rounding) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (!cpu_supports(isa)) continue;
    for (const Case& k : kCases) check(train_ops_cpu_for(isa).lm_head_loss_bf16, k, isa_name(isa));
  }
}
