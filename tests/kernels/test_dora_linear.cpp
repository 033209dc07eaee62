// DoRA in the linear op (kernels/linear.h): the reference against finite differences (the weight
// norm held constant, as PEFT detaches it), the fast CPU op against the reference for every kind
// with and without dropout, dora_weight_norm against a double-precision row norm, and the
// combinations the op refuses.
//
// Finite differences: with the norm n fixed, y is linear in each of x, b, A, B and m taken alone
// (the dropout mask is fixed by its key), so a central difference is exact but for rounding. fl(y)
// is within γ_k·|y|_abs of y (k = IC + R + 8 roundings on a path, Higham §3.1), |y|_abs the same
// formula on absolute values, computed here in double; the difference quotient inherits that
// error divided by the step. The analytic gradient is an f32 sum of at most T·(OC + R) + IC terms
// of the same magnitudes, within γ of the same absolute sums (bounded by its own |g|_abs, taken
// here as the finite-difference bound plus 1e-5 relative, far below the O(1) errors of a wrong
// term: each check also asserts that the gradient stands well above its bound). A 16-bit weight's
// dX also carries the rounding of k∘dout to the type (2^-8 relative for bf16, per term).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/backward.h"
#include "kernels/ops.h"
#include "kernels/ref/ref.h"
#include "linear_test_util.h"

namespace lt::test {
namespace {

constexpr int T = 3, IC = 10, OC = 7, R = 2;
constexpr double kStep = 0.5;

struct DoraOperands {
  KindWeight kw;
  std::vector<float> x, b, A, B, m, norm;
  float scale = 1.5f, p;
  DoraOperands(WeightKind k, float dropout) : kw(k, OC, IC, 5), p(dropout) {
    x = KindInput(kw, T, 6).x;
    std::mt19937 rng(8);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f), pos(0.5f, 1.5f);
    for (int i = 0; i < OC; ++i) b.push_back(u(rng));
    for (int i = 0; i < R * IC; ++i) A.push_back(u(rng) * 0.5f);
    for (int i = 0; i < OC * R; ++i) B.push_back(u(rng) * 0.5f);
    norm.resize(OC);
    dora_weight_norm(norm.data(), kw.view(), lora());
    for (int i = 0; i < OC; ++i) m.push_back(norm[size_t(i)] * pos(rng));  // k = m / n in [0.5, 1.5]
  }
  LoraView lora() const {
    LoraView l{R, A.data(), B.data(), scale, p, 99};
    l.magnitude = m.empty() ? nullptr : m.data();
    l.weight_norm = m.empty() ? nullptr : norm.data();
    return l;
  }
  LinearWeights weights() const { return {kw.view(), b.data(), lora()}; }
};

std::vector<float> forward(const DoraOperands& o) {
  OwnedScratch sc(o.kw.view(), T, R);
  std::vector<float> y(size_t(T) * OC), xa(size_t(T) * R);
  ops_ref().linear_forward(y.data(), xa.data(), {o.x.data(), nullptr, T}, o.weights(), sc.s);
  return y;
}

// |y|_abs: the DoRA formula on absolute values, in double
std::vector<double> y_abs(const DoraOperands& o) {
  std::vector<double> y(size_t(T) * OC);
  const LoraView l = o.lora();
  for (int t = 0; t < T; ++t)
    for (int oc = 0; oc < OC; ++oc) {
      double base = 0, based = 0, lr = 0;
      for (int i = 0; i < IC; ++i) {
        const size_t e = size_t(t) * IC + i;
        const double mask = l.dropout > 0 ? lora_dropout_scale(l.dropout_key, e, l.dropout) : 1.0;
        const double w = std::fabs(ref::weight_at(o.kw.view(), oc, i));
        base += std::fabs(o.x[e]) * w;
        based += std::fabs(o.x[e]) * mask * w;
      }
      for (int r = 0; r < R; ++r) {
        double xa = 0;
        for (int i = 0; i < IC; ++i) {
          const size_t e = size_t(t) * IC + i;
          const double mask = l.dropout > 0 ? lora_dropout_scale(l.dropout_key, e, l.dropout) : 1.0;
          xa += std::fabs(o.x[e]) * mask * std::fabs(o.A[size_t(r) * IC + i]);
        }
        lr += xa * std::fabs(o.B[size_t(oc) * R + r]);
      }
      const double k = std::fabs(o.m[size_t(oc)]) / o.norm[size_t(oc)];
      y[size_t(t) * OC + oc] = base + (k + 1) * based + k * o.scale * lr + std::fabs(o.b[size_t(oc)]);
    }
  return y;
}

void check_fd(WeightKind kind, float dropout) {
  DoraOperands o(kind, dropout);
  std::mt19937 rng(3);
  std::vector<float> Rg;
  for (int i = 0; i < T * OC; ++i) Rg.push_back(float(int(rng() % 129) - 64) / 64.0f);
  // analytic gradients of the reference: dx, db, dA, dB, dm
  std::vector<std::vector<float>> g = {std::vector<float>(o.x.size()), std::vector<float>(OC),
                                       std::vector<float>(o.A.size()), std::vector<float>(o.B.size()),
                                       std::vector<float>(OC)};
  {
    OwnedScratch sc(o.kw.view(), T, R);
    std::vector<float> y(size_t(T) * OC), xa(size_t(T) * R);
    const LinearWeights lw = o.weights();
    ops_ref().linear_forward(y.data(), xa.data(), {o.x.data(), nullptr, T}, lw, sc.s);
    train_ops_ref().linear_backward_input(g[0].data(), Rg.data(), T, lw, sc.s);
    LinearGrads lg{nullptr, g[1].data(), g[2].data(), g[3].data(), g[4].data()};
    train_ops_ref().linear_backward_weight(lg, Rg.data(), {o.x.data(), nullptr, T}, xa.data(), lw, sc.s);
  }
  std::vector<float>* params[5] = {&o.x, &o.b, &o.A, &o.B, &o.m};
  const char* names[5] = {"dX", "db", "dA", "dB", "dm"};
  for (int k = 0; k < 5; ++k) {
    if (k == 0 && kind == WeightKind::Int8) continue;  // its forward quantizes x
    std::vector<float>& p = *params[k];
    double best = 0;
    for (size_t j = 0; j < p.size(); ++j) {
      const float keep = p[j];
      auto loss = [&](float v) {
        p[j] = v;
        const auto y = forward(o);
        double L = 0;
        for (size_t i = 0; i < y.size(); ++i) L += double(Rg[i]) * y[i];
        return L;
      };
      const double fd = (loss(keep + float(kStep)) - loss(keep - float(kStep))) / (2 * kStep);
      p[j] = std::fabs(keep) + float(kStep);
      const auto ya = y_abs(o);
      p[j] = keep;
      double noise = 0;
      for (size_t i = 0; i < ya.size(); ++i) noise += std::fabs(Rg[i]) * gamma_n(IC + R + 8) * 2 * ya[i];
      double tol = noise / (2 * kStep) + 1e-5 * (std::fabs(fd) + 1e-3);
      if (k == 0 && o.kw.view().half()) {  // the 16-bit backward rounds k∘dout to the type (2^-8 relative for bf16)
        const size_t t = j / IC, i = j % IC;
        for (int oc = 0; oc < OC; ++oc)
          tol += std::ldexp(1.0, -8) * std::fabs(Rg[t * OC + size_t(oc)]) * o.m[size_t(oc)] / o.norm[size_t(oc)] *
                 std::fabs(ref::weight_at(o.kw.view(), oc, int64_t(i)));
      }
      EXPECT_NEAR(g[size_t(k)][j], fd, tol) << weight_kind_name(kind) << " p=" << dropout << " " << names[k] << "["
                                             << j << "]";
      best = std::max(best, std::fabs(double(g[size_t(k)][j])) / tol);
    }
    EXPECT_GT(best, 100.0) << names[k] << ": the gradient is lost in its bound";
  }
}

TEST(DoraLinear, ReferenceMatchesFiniteDifferencesF32) { check_fd(WeightKind::F32, 0.0f); }
TEST(DoraLinear, ReferenceMatchesFiniteDifferencesF32Dropout) { check_fd(WeightKind::F32, 0.3f); }
TEST(DoraLinear, ReferenceMatchesFiniteDifferencesBf16) { check_fd(WeightKind::BF16, 0.0f); }
TEST(DoraLinear, ReferenceMatchesFiniteDifferencesNf4Dropout) { check_fd(WeightKind::NF4, 0.3f); }
TEST(DoraLinear, ReferenceMatchesFiniteDifferencesInt8) { check_fd(WeightKind::Int8, 0.0f); }

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), n += double(b[i]) * b[i];
  return std::sqrt(d / std::max(n, 1e-30));
}

// Every result of one backend on the operands: y, dx, db, dA, dB, dm.
std::vector<std::vector<float>> run_all(const Ops& ops, const TrainOps& tops, const DoraOperands& o, int T2,
                                        const KindInput& in) {
  OwnedScratch sc(o.kw.view(), T2, R);
  std::vector<std::vector<float>> r = {std::vector<float>(size_t(T2) * OC), std::vector<float>(size_t(T2) * IC),
                                       std::vector<float>(OC), std::vector<float>(o.A.size()),
                                       std::vector<float>(o.B.size()), std::vector<float>(OC)};
  std::vector<float> xa(size_t(T2) * R), dout(size_t(T2) * OC);
  std::mt19937 rng(4);
  for (float& v : dout) v = float(int(rng() % 129) - 64) / 64.0f;
  const LinearWeights lw = o.weights();
  ops.linear_forward(r[0].data(), xa.data(), in.in(T2), lw, sc.s);
  tops.linear_backward_input(r[1].data(), dout.data(), T2, lw, sc.s);
  tops.linear_backward_weight({nullptr, r[2].data(), r[3].data(), r[4].data(), r[5].data()}, dout.data(), in.in(T2),
                              xa.data(), lw, sc.s);
  return r;
}

TEST(DoraLinear, FastMatchesReferenceEveryKind) {
  const char* what[6] = {"y", "dx", "db", "dA", "dB", "dm"};
  for (WeightKind kind : kAllKinds)
    for (float p : {0.0f, 0.3f}) {
      if (p > 0 && (kind == WeightKind::BF16 || kind == WeightKind::F16 || kind == WeightKind::Int8)) continue;
      DoraOperands o(kind, p);
      const int T2 = 37;  // past the GEMV path: the oneDNN GEMMs
      const KindInput in(o.kw, T2, 11);
      const auto ref = run_all(ops_ref(), train_ops_ref(), o, T2, in);
      const auto fast = run_all(ops_cpu(), train_ops_cpu(), o, T2, in);
      for (int k = 0; k < 6; ++k) {
        // f32 sums of <= T2 + OC + IC terms in another order (and, for Int8, the same integer
        // product): ~1e-6 relative; a missing or wrong DoRA term is O(1)
        EXPECT_LT(rel(fast[size_t(k)], ref[size_t(k)]), 2e-5) << weight_kind_name(kind) << " p=" << p << " " << what[k];
      }
      // DoRA changed the result: the same op without the magnitude differs
      DoraOperands plain = o;
      plain.m.clear();
      EXPECT_GT(rel(run_all(ops_ref(), train_ops_ref(), plain, T2, in)[0], ref[0]), 1e-2) << weight_kind_name(kind);
    }
}

TEST(DoraLinear, WeightNormIsTheRowNormOfTheAdaptedWeight) {
  for (WeightKind kind : kAllKinds)
    for (int rank : {0, R}) {
      DoraOperands o(kind, 0.0f);
      LoraView l = o.lora();
      l.rank = rank;
      std::vector<float> n(OC);
      dora_weight_norm(n.data(), o.kw.view(), l);
      for (int r = 0; r < OC; ++r) {
        double ss = 0;
        for (int i = 0; i < IC; ++i) {
          double ba = 0;
          for (int k = 0; k < rank; ++k) ba += double(o.B[size_t(r) * R + k]) * o.A[size_t(k) * IC + i];
          const double v = ref::weight_at(o.kw.view(), r, i) + o.scale * ba;
          ss += v * v;
        }
        EXPECT_NEAR(n[size_t(r)], std::sqrt(ss), 1e-5 * std::sqrt(ss)) << weight_kind_name(kind) << " rank " << rank;
      }
    }
}

TEST(DoraLinear, RefusesWhatItCannotCompute) {
  DoraOperands o(WeightKind::BF16, 0.3f);
  OwnedScratch sc(o.kw.view(), T, R);
  std::vector<float> y(size_t(T) * OC), xa(size_t(T) * R);
  const KindInput in(o.kw, T, 6);
  for (const Ops* ops : {&ops_ref(), &ops_cpu()}) {
    try {
      ops->linear_forward(y.data(), xa.data(), in.in(T), o.weights(), sc.s);
      ADD_FAILURE() << "DoRA with dropout on a bf16 weight was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("DoRA with dropout"), std::string::npos) << e.what();
    }
  }
  DoraOperands f(WeightKind::F32, 0.0f);
  LinearWeights lw = f.weights();
  lw.lora.weight_norm = nullptr;
  EXPECT_THROW(ops_ref().linear_forward(y.data(), xa.data(), {f.x.data(), nullptr, T}, lw, sc.s), Error);
  LinearScratch none = sc.s;
  none.dora = nullptr;
  EXPECT_THROW(ops_cpu().linear_forward(y.data(), xa.data(), {f.x.data(), nullptr, T}, f.weights(), none), Error);
}

}  // namespace
}  // namespace lt::test
