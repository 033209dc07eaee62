// The linear op (kernels/linear.h) for every weight kind — f32, bf16, f16, int8 (LLM.int8 with
// outlier columns), nf4, fp4 (double-quantized scales) — with and without bias and LoRA (with and
// without dropout): the fast tables (every ISA) against the reference in each direction, within a
// bound derived from f32 rounding; finite differences of the reference (dX, dW, db, dA, dB); and
// the operand errors.
//
// Tolerance, ref vs fast: both evaluate the same formula on the same f32 operands (the same decoded
// weights, the same 16-bit rounding of dout, the same LLM.int8 integer product, which is exact), and
// differ only in summation order and FMA use. Each output is a sum of products; a product term that
// passes through at most n roundings (the dot product's additions, then the bias add, the LoRA
// scale, the add into the output) is within γ_n·|term| of exact (Higham, Accuracy and Stability,
// §3.1), so |ref - fast| <= 2·γ_n·Σ|terms|, with Σ|terms| computed in double below per element.
// bf16 LoRA (LoraView::bf16, a bf16 weight, no dropout): A, B and dout are rounded to bf16 the same
// way on both sides, so the forward and dx keep that bound, the LoRA terms of Σ|terms| taken 2^-6
// larger (each of the term's two rounded factors may exceed its f32 value by 2^-8 relative). dB and
// dA also round xa and g, which the two sides computed in different orders: where they straddle a
// bf16 rounding boundary the rounded operands differ by one bf16 step, at most 2^-7 of the value,
// so those get 2^-6 · Σ|terms| more (the step plus the magnitudes' own 2^-8 factors).
// bf16 products of a quantized weight (WeightView::bf16_products): both sides round the decoded W
// and dout to bf16 the same way (x is bf16 already), so the bound stands with |bf16(w)| <= |w|·(1 + 2^-8).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/backward.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/train_kernels.h"
#include "kernels/ops.h"
#include "kernels/ref/ref.h"
#include "kernel_test_util.h"
#include "linear_test_util.h"

namespace lt::test {
namespace {

using Vec = std::vector<float>;
using VecD = std::vector<double>;

struct Shape {
  int T, IC, OC;
};
// T = 2 takes the f32 GEMV path; OC = 150 > 128 and 530 > 512 split the quantized / f16 tiles;
// IC = 71 and 33 start rows on odd 4-bit elements and mid-block; IC >= 2·OC (130, 40) takes bf16
// LoRA's forward as two products (the others as one over IC + R); T = 64 with IC, OC multiples of
// 32 takes, on AMX, the appended product instead of the concatenations (gemm_bf16_appended).
constexpr Shape kShapes[] = {{2, 71, 150}, {9, 64, 33}, {4, 33, 530}, {5, 130, 40}, {64, 64, 96}};
constexpr int kR = 3;

// One operand set: weight of a kind, input, bias (or none), LoRA (rank 0, or R with dropout p).
struct LinCase {
  Shape sh;
  KindWeight w;
  KindInput x;
  Vec bias;
  OwnedLora lora;
  bool bf16_products;
  LinCase(WeightKind k, Shape s, bool with_bias, int R, float p, unsigned seed, bool bf16 = false)
      : sh(s), w(k, s.OC, s.IC, seed), x(w, s.T, seed + 1, bf16), lora(R, s.IC, s.OC, p, seed + 2),
        bf16_products(bf16) {
    if (with_bias) bias = random_vec(size_t(s.OC), seed + 3);
  }
  WeightView view() const {
    WeightView v = w.view();
    v.bf16_products = bf16_products;
    return v;
  }
  LinearWeights weights() const {
    LinearWeights lw;
    lw.w = view();
    lw.bias = bias.empty() ? nullptr : bias.data();
    lw.lora = lora.v;
    return lw;
  }
  std::string name() const {
    return std::string(weight_kind_name(w.kind)) + " T=" + std::to_string(sh.T) + " IC=" + std::to_string(sh.IC) +
           " OC=" + std::to_string(sh.OC) + (bias.empty() ? "" : " bias") +
           (lora.v.rank ? " lora p=" + std::to_string(lora.v.dropout) : "") + (bf16_products ? " bf16 products" : "");
  }
};

// Calls f(setup) for every kind x shape x bias x LoRA mode (none, no dropout, dropout 0.3, and on
// a bf16 weight the bf16 LoRA products); a quantized weight also with bf16 products (modes 4-6: no
// LoRA, bf16 LoRA, f32 LoRA with dropout).
template <class F>
void for_each_case(F f) {
  unsigned seed = 10;
  for (WeightKind k : kAllKinds)
    for (Shape s : kShapes)
      for (bool b : {false, true})
        for (int mode = 0; mode < 7; ++mode) {
          if (mode == 3 && k != WeightKind::BF16) continue;
          const bool bf16_products = mode >= 4;
          if (bf16_products && k != WeightKind::Int8 && k != WeightKind::NF4 && k != WeightKind::FP4 &&
              k != WeightKind::Int4)
            continue;
          const int m = bf16_products ? mode - 4 : mode;
          LinCase c(k, s, b, m ? kR : 0, m == 2 ? 0.3f : 0.0f, seed += 7, bf16_products);
          c.lora.v.bf16 = mode == 3 || mode == 5;
          f(c);
        }
}
// The LoRA terms' factor in Σ|terms| (the header's 2^-6 for bf16 LoRA), and y / dB / dA / dx's extra
// bound: their bf16 products round an f32 sum (xa or g) that the two sides add in different orders,
// so a rounding may land one bf16 step apart (2^-7 of the value, < 2^-6 of its Σ|terms|).
double lora_mag(const LoraView& l) { return l.bf16 ? 1 + std::ldexp(1.0, -6) : 1.0; }
double lora_extra(const LoraView& l) { return l.bf16 ? std::ldexp(1.0, -6) : 0.0; }

// The fast tables of every ISA this CPU runs.
std::vector<Isa> isas() {
  std::vector<Isa> v;
  for (Isa i : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (cpu_supports(i)) v.push_back(i);
  return v;
}

// |got - want| <= (2·γ_n + extra)·mag elementwise (a zero bound allows only equality)
void expect_within(const Vec& got, const Vec& want, const VecD& mag, double n, const std::string& what,
                   double extra = 0) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    ASSERT_LE(err, (2 * gamma_n(n) + extra) * mag[i]) << what << " element " << i << ": got " << got[i] << " want "
                                                       << want[i];
  }
}

double mask(const LoraView& l, size_t e) {
  return l.dropout > 0 ? lora_dropout_scale(l.dropout_key, e, l.dropout) : 1.0;
}
// |W[o, i]| as the products see it (bf16 products: rounded, at most 2^-8 larger)
double wabs(const WeightView& w, int o, int i) {
  return std::fabs(double(ref::weight_at(w, o, i))) * (w.bf16_products ? 1 + std::ldexp(1.0, -8) : 1.0);
}
double grad_as(const WeightView& w, float v) {
  if (w.kind == WeightKind::BF16 || w.bf16_products) return bf16_to_f32(f32_to_bf16(v));
  const WeightKind k = w.kind;
  if (k == WeightKind::F16) return f16_to_f32(f32_to_f16(v));
  return v;
}

// Σ|terms| of each forward output y[t,o] (Int8: each non-outlier x within half a quantization step
// of the row, am_t / 254, of its quantized value).
VecD forward_magnitude(const LinCase& su) {
  const auto [T, IC, OC] = su.sh;
  const WeightView w = su.view();
  const LoraView& l = su.lora.v;
  const Vec& x = su.x.x;
  VecD mag(size_t(T) * OC);
  for (int t = 0; t < T; ++t) {
    double am = 0;
    for (int i = 0; i < IC; ++i)
      if (std::fabs(x[size_t(t) * IC + i]) < su.w.threshold) am = std::max(am, std::fabs(double(x[size_t(t) * IC + i])));
    for (int o = 0; o < OC; ++o) {
      double m = su.bias.empty() ? 0 : std::fabs(su.bias[o]);
      for (int i = 0; i < IC; ++i) m += (std::fabs(x[size_t(t) * IC + i]) + (w.kind == WeightKind::Int8 ? am / 254 : 0)) * wabs(w, o, i);
      for (int r = 0; r < l.rank; ++r)
        for (int i = 0; i < IC; ++i)
          m += lora_mag(l) * l.scale *
               std::fabs(x[size_t(t) * IC + i] * mask(l, size_t(t) * IC + i) * l.A[size_t(r) * IC + i] *
                         l.B[size_t(o) * l.rank + r]);
      mag[size_t(t) * OC + o] = m;
    }
  }
  return mag;
}

TEST(LinearOp, ForwardFastMatchesReferenceForEveryKind) {
  int checked = 0;
  for_each_case([&](const LinCase& su) {
    const auto [T, IC, OC] = su.sh;
    const LinearWeights lw = su.weights();
    OwnedScratch sr(lw.w, T, kR);
    Vec y_ref(size_t(T) * OC), xa_ref(size_t(T) * kR);
    ops_ref().linear_forward(y_ref.data(), xa_ref.data(), su.x.in(T), lw, sr.s);
    const VecD mag = forward_magnitude(su);
    for (Isa isa : isas()) {
      OwnedScratch sf(lw.w, T, kR);
      Vec y(size_t(T) * OC, NAN), xa(size_t(T) * kR);
      ops_cpu_for(isa).linear_forward(y.data(), xa.data(), su.x.in(T), lw, sf.s);
      expect_within(y, y_ref, mag, IC + kR + 4, su.name() + " " + isa_name(isa) + " y", lora_extra(su.lora.v));
      ++checked;
    }
  });
  EXPECT_GE(checked, 108 + 6);
}

// dout (T, OC) in [-1, 1] and an accumulator start value for each gradient
struct Grads {
  Vec dout, dx, dw, db, dA, dB;
  Grads(const LinCase& su, unsigned seed) {
    const auto [T, IC, OC] = su.sh;
    dout = random_vec(size_t(T) * OC, seed);
    dx = random_vec(size_t(T) * IC, seed + 1);
    dw = random_vec(size_t(OC) * IC, seed + 2);
    db = random_vec(size_t(OC), seed + 3);
    dA = random_vec(size_t(kR) * IC, seed + 4);
    dB = random_vec(size_t(OC) * kR, seed + 5);
  }
  LinearGrads weight_grads(const LinCase& su) {
    return {su.w.view().quantized() ? nullptr : dw.data(), db.data(), su.lora.v.rank ? dA.data() : nullptr,
            su.lora.v.rank ? dB.data() : nullptr};
  }
};

TEST(LinearOp, BackwardInputFastMatchesReferenceForEveryKind) {
  for_each_case([&](const LinCase& su) {
    const auto [T, IC, OC] = su.sh;
    const LinearWeights lw = su.weights();
    const LoraView& l = su.lora.v;
    Grads ref(su, 5);
    OwnedScratch sr(lw.w, T, kR);
    const Vec dx0 = ref.dx;
    train_ops_ref().linear_backward_input(ref.dx.data(), ref.dout.data(), T, lw, sr.s);
    VecD mag(dx0.size());
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < IC; ++i) {
        double m = std::fabs(dx0[size_t(t) * IC + i]);
        for (int o = 0; o < OC; ++o) {
          const double d = ref.dout[size_t(t) * OC + o];
          m += std::fabs(grad_as(lw.w, float(d))) * wabs(lw.w, o, i);
          for (int r = 0; r < l.rank; ++r)
            m += lora_mag(l) * l.scale * mask(l, size_t(t) * IC + i) *
                 std::fabs(d * l.B[size_t(o) * kR + r] * l.A[size_t(r) * IC + i]);
        }
        mag[size_t(t) * IC + i] = m;
      }
    for (Isa isa : isas()) {
      Grads g(su, 5);
      OwnedScratch sf(lw.w, T, kR);
      train_ops_cpu_for(isa).linear_backward_input(g.dx.data(), g.dout.data(), T, lw, sf.s);
      expect_within(g.dx, ref.dx, mag, OC + kR + 4, su.name() + " " + isa_name(isa) + " dx", lora_extra(l));
    }
  });
}

// Σ|terms| of dW, db, dB, dA as linear_backward_weight accumulates them onto the start values g0.
struct WeightMagnitudes {
  VecD dw, db, dA, dB;
  WeightMagnitudes(const LinCase& su, const Grads& g0, const Vec& xa) {
    const auto [T, IC, OC] = su.sh;
    const LoraView& l = su.lora.v;
    const Vec& x = su.x.x;
    const WeightView k = su.view();
    auto d = [&](int t, int o) { return double(g0.dout[size_t(t) * OC + o]); };
    for (int o = 0; o < OC; ++o) {
      for (int i = 0; i < IC; ++i) {
        double m = std::fabs(g0.dw[size_t(o) * IC + i]);
        for (int t = 0; t < T; ++t) m += std::fabs(grad_as(k, float(d(t, o))) * x[size_t(t) * IC + i]);
        dw.push_back(m);
      }
      double m = std::fabs(g0.db[o]);
      for (int t = 0; t < T; ++t) m += std::fabs(d(t, o));
      db.push_back(m);
      for (int r = 0; r < kR; ++r) {
        double mb = std::fabs(g0.dB[size_t(o) * kR + r]);
        for (int t = 0; t < T && l.rank; ++t) mb += lora_mag(l) * l.scale * std::fabs(d(t, o) * xa[size_t(t) * kR + r]);
        dB.push_back(mb);
      }
    }
    for (int r = 0; r < kR; ++r)
      for (int i = 0; i < IC; ++i) {
        double m = std::fabs(g0.dA[size_t(r) * IC + i]);
        for (int t = 0; t < T && l.rank; ++t)
          for (int o = 0; o < OC; ++o)
            m += lora_mag(l) * lora_mag(l) * l.scale *
                 std::fabs(d(t, o) * l.B[size_t(o) * kR + r] * x[size_t(t) * IC + i] * mask(l, size_t(t) * IC + i));
        dA.push_back(m);
      }
  }
};

TEST(LinearOp, BackwardWeightFastMatchesReferenceForEveryKind) {
  for_each_case([&](const LinCase& su) {
    const auto [T, IC, OC] = su.sh;
    const LinearWeights lw = su.weights();
    OwnedScratch sr(lw.w, T, kR);
    Vec y(size_t(T) * OC), xa(size_t(T) * kR);
    ops_ref().linear_forward(y.data(), xa.data(), su.x.in(T), lw, sr.s);  // the saved xa both backwards read
    Grads ref(su, 9);
    const WeightMagnitudes mag(su, ref, xa);
    train_ops_ref().linear_backward_weight(ref.weight_grads(su), ref.dout.data(), su.x.in(T), xa.data(), lw, sr.s);
    for (Isa isa : isas()) {
      Grads g(su, 9);
      OwnedScratch sf(lw.w, T, kR);
      train_ops_cpu_for(isa).linear_backward_weight(g.weight_grads(su), g.dout.data(), su.x.in(T), xa.data(), lw,
                                                    sf.s);
      const std::string n = su.name() + " " + isa_name(isa);
      expect_within(g.dw, ref.dw, mag.dw, T + 2, n + " dw");
      expect_within(g.db, ref.db, mag.db, T + 2, n + " db");
      expect_within(g.dB, ref.dB, mag.dB, T + 3, n + " dB", lora_extra(su.lora.v));
      expect_within(g.dA, ref.dA, mag.dA, T + OC + 3, n + " dA", lora_extra(su.lora.v));
    }
  });
}

// bf16 products of a quantized weight are the products of a BF16 weight holding the decoded values
// rounded to bf16 (linear.h): the forward and dx of both, each through the reference and every ISA's
// tables, agree within the header's bound (the same rounded operands, other summation orders).
TEST(LinearOp, QuantizedBf16ProductsAreThoseOfTheRoundedDecodedWeight) {
  for (WeightKind k : {WeightKind::NF4, WeightKind::FP4, WeightKind::Int4, WeightKind::Int8})
    for (Shape sh : {Shape{9, 64, 33}, Shape{64, 64, 300}, Shape{3, 71, 150}}) {
      const auto [T, IC, OC] = sh;
      LinCase q(k, sh, false, 0, 0.0f, 77, true);
      std::vector<uint16_t> w16;
      for (int o = 0; o < OC; ++o)
        for (int i = 0; i < IC; ++i) w16.push_back(f32_to_bf16(ref::weight_at(q.w.view(), o, i)));
      LinearWeights qw = q.weights(), hw;
      hw.w = half_weight(WeightKind::BF16, w16.data(), OC, IC);
      VecD ymag(size_t(T) * OC), dxmag(size_t(T) * IC);
      const Vec dout = random_vec(size_t(T) * OC, 5);
      for (int t = 0; t < T; ++t)
        for (int o = 0; o < OC; ++o)
          for (int i = 0; i < IC; ++i) {
            const double w = std::fabs(double(bf16_to_f32(w16[size_t(o) * IC + i])));
            ymag[size_t(t) * OC + o] += std::fabs(q.x.x[size_t(t) * IC + i]) * w;
            dxmag[size_t(t) * IC + i] += std::fabs(grad_as(qw.w, dout[size_t(t) * OC + o])) * w;
          }
      const std::string n = q.name();
      OwnedScratch sh16(hw.w, T, kR);
      Vec y16(size_t(T) * OC), dx16(size_t(T) * IC, 0.0f);
      ops_ref().linear_forward(y16.data(), nullptr, q.x.in(T), hw, sh16.s);
      train_ops_ref().linear_backward_input(dx16.data(), dout.data(), T, hw, sh16.s);
      std::vector<std::pair<const Ops*, const TrainOps*>> tables = {{&ops_ref(), &train_ops_ref()}};
      for (Isa isa : isas()) tables.push_back({&ops_cpu_for(isa), &train_ops_cpu_for(isa)});
      for (auto [ops, tops] : tables) {
        OwnedScratch sq(qw.w, T, kR);
        Vec y(size_t(T) * OC, NAN), dx(size_t(T) * IC, 0.0f);
        ops->linear_forward(y.data(), nullptr, q.x.in(T), qw, sq.s);
        tops->linear_backward_input(dx.data(), dout.data(), T, qw, sq.s);
        if (k != WeightKind::Int8) expect_within(y, y16, ymag, IC + 2, n + " y");  // Int8: the LLM.int8 forward
        expect_within(dx, dx16, dxmag, OC + 2, n + " dx");
      }
    }
}

}  // namespace
}  // namespace lt::test
