// The bf16 training attention (TrainOps::attention_train_forward_bf16 / attention_backward_bf16)
// against the f32 reference, once per ISA level (LEANTUNE_ISA): present exactly where the CPU has
// AVX512-BF16 and the level is avx512, null below (the model then runs the f32 kernels). Odd shapes:
// T = 1, 5, 37, 130; HS = 64, 12 and 9 (not a multiple of the vector width, odd); GQA groups 1, 3
// and 7; document masks, a sliding window, unsorted starts.
//
// Tolerances. The reference runs in f32 on the same bf16 inputs widened exactly (q, k, v, out, and
// dO, which the kernel rounds to bf16 itself), so the input rounding is no part of the difference;
// what is left is the kernel's own rounding of P and dS to bf16 before their products (round to
// nearest of an 8-bit significand: relative error |e| <= u = 2^-8 each), the f32 accumulations
// being far smaller. Forward: out = Σ p̃_j v_j / Σ p̃_j with p̃_j = p_j (1 + e_j) differs from
// Σ p_j v_j by Σ p_j (e_j − ē) v_j / (1 + ē), ē = Σ p_j e_j; the e_j lie in an interval of length
// 2u, so their mean absolute deviation Σ p_j |e_j − ē| is at most u: |error| <= u max|v| = 2^-8
// max|v| (to first order). lse = log Σ p̃ is off by log(1 + ē), at most 2^-8 (absolute). Backward:
// dv = Σ_t p̃ dO has one rounded factor per term, so |error| <= 2^-8 · Σ_t p |dO| elementwise, the
// bound being the reference's dv for |dO|. dq, dk: dS = P ∘ (dP − D) is computed in f32 from bf16
// operands (D from the same rounded dO, so the difference cancels as in the reference) and
// rounded once: 2^-8 of |dS| per term (with P's own 2^-8), tested against 2^-6 of the tensor's
// largest magnitude (sums of terms of both signs). A kernel that dropped, doubled or misplaced one
// key's contribution errs by O(1/T) of the magnitude and fails these bounds on the short
// sequences, and a masking error fails them all.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/backward.h"
#include "kernels/cpu/train_kernels.h"

namespace lt::test {
namespace {

using VecF = std::vector<float>;
using Vec16 = std::vector<uint16_t>;

// x rounded to bf16 (returned) and x replaced by the rounded values widened back.
Vec16 to_bf16(VecF& x) {
  Vec16 h(x.size());
  for (size_t i = 0; i < x.size(); i++) h[i] = f32_to_bf16(x[i]), x[i] = bf16_to_f32(h[i]);
  return h;
}

double max_abs(const VecF& x) {
  double m = 0;
  for (float v : x) m = std::max(m, (double)std::fabs(v));
  return m;
}

// |got - want| <= bound, elementwise
void expect_within(const VecF& got, const VecF& want, double bound, const std::string& what) {
  expect_close(got, want, 0.0, bound, what);
}

class KernelAttentionBf16 : public KernelIsaTest {
 protected:
  void SetUp() override {
    KernelIsaTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    tops_ = &train_ops_cpu();
  }
  const TrainOps& t() const { return *tops_; }
  // Whether this level has the bf16 entries; they must exist exactly on avx512 with avx512_bf16.
  bool has_bf16() const {
    bool want = GetParam() == Isa::Avx512 && cpu_features().avx512_bf16;
    EXPECT_EQ(t().attention_train_forward_bf16 != nullptr, want);
    EXPECT_EQ(t().attention_backward_bf16 != nullptr, want);
    return want && t().attention_train_forward_bf16 && t().attention_backward_bf16;
  }

 private:
  const TrainOps* tops_ = nullptr;
};

struct Case {
  int T, NH, NKV, HS;
  std::string docs;
  std::string name() const {
    return "T=" + std::to_string(T) + " NH=" + std::to_string(NH) + " NKV=" + std::to_string(NKV) +
           " HS=" + std::to_string(HS) + " docs=" + docs;
  }
};

std::vector<Case> cases() {
  std::vector<Case> cs;
  for (int T : {1, 5, 37, 130})
    for (int HS : {64, 12, 9})
      for (auto [NH, NKV] : {std::pair{3, 3}, std::pair{6, 2}, std::pair{7, 1}})
        for (const char* docs : {"one", "every17", "irregular", "window20", "unsorted"})
          cs.push_back({T, NH, NKV, HS, docs});
  return cs;
}

// One case's bf16 inputs (and their widened f32 values) and the reference results on those.
struct Inputs {
  Case c;
  std::vector<int> ds;
  VecF q, k, v, dout, out_r, lse_r, dq_r, dk_r, dv_r, dv_abs;  // dv_abs: Σ_t p |dout_t|
  Vec16 q16, k16, v16, out16;
  // growth > 0: q and k positive and key t scaled by growth · (t + 1) / T, so a query's largest
  // scores come last and its running max moves by far more than one key tile's worth
  explicit Inputs(const Case& cs, unsigned seed, float growth = 0) : c(cs), ds(make_doc_start(cs.T, cs.docs)) {
    const size_t nq = (size_t)c.T * c.NH * c.HS, nk = (size_t)c.T * c.NKV * c.HS;
    q = random_vec(nq, seed, -2, 2), k = random_vec(nk, seed + 1, -2, 2), v = random_vec(nk, seed + 2);
    if (growth > 0) {
      for (float& x : q) x = std::fabs(x);
      for (size_t i = 0; i < nk; i++) k[i] = std::fabs(k[i]) * growth * float(i / ((size_t)c.NKV * c.HS) + 1) / c.T;
    }
    dout = random_vec(nq, seed + 3);
    to_bf16(dout);
    q16 = to_bf16(q), k16 = to_bf16(k), v16 = to_bf16(v);
    out_r.assign(nq, 0.0f), lse_r.assign((size_t)c.NH * c.T, 0.0f);
    train_ops_ref().attention_train_forward(out_r.data(), lse_r.data(), q.data(), k.data(), v.data(), ds.data(), c.T,
                                            c.NH, c.NKV, c.HS);
    VecF out_rounded = out_r;
    out16 = to_bf16(out_rounded);  // the backward sees out as the model stores it: in bf16
    dq_r = random_vec(nq, seed + 4), dk_r = random_vec(nk, seed + 5), dv_r = random_vec(nk, seed + 6);  // "+=" targets
    train_ops_ref().attention_backward(dq_r.data(), dk_r.data(), dv_r.data(), dout.data(), q.data(), k.data(),
                                       v.data(), out_rounded.data(), lse_r.data(), ds.data(), c.T, c.NH, c.NKV,
                                       c.HS, nullptr, 0);
    VecF dout_abs = dout, zq(nq, 0.0f), zk(nk, 0.0f);
    for (float& x : dout_abs) x = std::fabs(x);
    dv_abs.assign(nk, 0.0f);
    train_ops_ref().attention_backward(zq.data(), zk.data(), dv_abs.data(), dout_abs.data(), q.data(), k.data(),
                                       v.data(), out_rounded.data(), lse_r.data(), ds.data(), c.T, c.NH, c.NKV,
                                       c.HS, nullptr, 0);
  }
};

TEST_P(KernelAttentionBf16, ForwardMatchesF32Reference) {
  if (!has_bf16()) GTEST_SKIP() << "no bf16 attention at this level: the model runs the f32 kernels";
  for (const Case& c : cases()) {
    Inputs r(c, 100 + c.T + c.HS);
    VecF out(r.out_r.size(), 7.0f), lse(r.lse_r.size(), 7.0f);
    ASSERT_TRUE(t().attention_train_forward_bf16(out.data(), lse.data(), r.q16.data(), r.k16.data(), r.v16.data(),
                                                 r.ds.data(), c.T, c.NH, c.NKV, c.HS));
    expect_within(out, r.out_r, std::ldexp(1.0, -8) * max_abs(r.v) + 1e-6, "out " + c.name());
    expect_close(lse, r.lse_r, 1e-6, std::ldexp(1.0, -8) + 1e-6, "lse " + c.name());
    VecF out2(out.size(), -3.0f);  // lse may be null
    ASSERT_TRUE(t().attention_train_forward_bf16(out2.data(), nullptr, r.q16.data(), r.k16.data(), r.v16.data(),
                                                 r.ds.data(), c.T, c.NH, c.NKV, c.HS));
    EXPECT_EQ(out2, out) << "out without lse " << c.name();
  }
}

using BwdFn = bool (*)(float*, float*, float*, const float*, const uint16_t*, const uint16_t*, const uint16_t*,
                      const uint16_t*, const float*, const int*, int, int, int, int, void*, size_t);

// Room for every kept bf16 dS row of a call (attention_stored_ds.h): at most kBk = 32 per (head,
// query, key tile) pair of a query and a tile it sees, so NH * T * (T + 32).
Vec16 ds_rows_for(int T, int NH) { return Vec16((size_t)NH * T * (T + 32)); }

// One case of the backward against the reference, with the bounds of the file's header.
void expect_backward_within_bounds(BwdFn bwd, const Case& c, unsigned seed, const std::string& who) {
  Inputs r(c, seed);
  const size_t nq = r.q.size(), nk = r.k.size();
  VecF dq = random_vec(nq, seed + 4), dk = random_vec(nk, seed + 5), dv = random_vec(nk, seed + 6);  // "+=" targets
  const VecF dq0 = dq, dk0 = dk;
  Vec16 rows = ds_rows_for(c.T, c.NH);  // the kept dS rows, as a training run has them
  ASSERT_TRUE(bwd(dq.data(), dk.data(), dv.data(), r.dout.data(), r.q16.data(), r.k16.data(), r.v16.data(),
                  r.out16.data(), r.lse_r.data(), r.ds.data(), c.T, c.NH, c.NKV, c.HS, rows.data(), rows.size() * 2));
  auto delta = [](const VecF& a, const VecF& a0) {  // the gradient alone, for its magnitude
    VecF d(a.size());
    for (size_t i = 0; i < a.size(); i++) d[i] = a[i] - a0[i];
    return d;
  };
  VecF dv_lim(nk);
  for (size_t i = 0; i < nk; i++) dv_lim[i] = std::fabs(dv[i] - r.dv_r[i]) - std::ldexp(1.0f, -8) * r.dv_abs[i];
  EXPECT_LE(*std::max_element(dv_lim.begin(), dv_lim.end()), 1e-6) << who << "dv beyond 2^-8 Σ p|dO| " << c.name();
  expect_within(dk, r.dk_r, std::ldexp(1.0, -6) * max_abs(delta(r.dk_r, dk0)) + 1e-6, who + "dk " + c.name());
  expect_within(dq, r.dq_r, std::ldexp(1.0, -6) * max_abs(delta(r.dq_r, dq0)) + 1e-6, who + "dq " + c.name());
}

TEST_P(KernelAttentionBf16, BackwardMatchesF32Reference) {
  if (!has_bf16()) GTEST_SKIP() << "no bf16 attention at this level: the model runs the f32 kernels";
  for (const Case& c : cases()) expect_backward_within_bounds(t().attention_backward_bf16, c, 200 + c.T + c.HS, "");
}

// The AVX-512 and AMX backwards keep pass 1's bf16 dS rows for pass 2 where document starts are
// sorted and the caller's ds_rows hold them (else pass 2 recomputes them): both paths round the same
// f32 dS computed in the same order, so they must give the same bits.
void expect_stored_and_recomputed_ds_agree(BwdFn bwd, const std::vector<Case>& cases, const std::string& who) {
  for (const Case& c : cases) {
    Inputs r(c, 500 + c.T);
    auto run = [&](bool stored) {
      VecF g(r.q.size() + 2 * r.k.size(), 0.5f);
      Vec16 rows = stored ? ds_rows_for(c.T, c.NH) : Vec16();
      float* dq = g.data();
      float* dk = dq + r.q.size();
      EXPECT_TRUE(bwd(dq, dk, dk + r.k.size(), r.dout.data(), r.q16.data(), r.k16.data(), r.v16.data(),
                      r.out16.data(), r.lse_r.data(), r.ds.data(), c.T, c.NH, c.NKV, c.HS,
                      stored ? rows.data() : nullptr, rows.size() * 2));
      return g;
    };
    const VecF stored = run(true), recomputed = run(false);
    EXPECT_EQ(stored, recomputed) << who << c.name();
  }
}

TEST(KernelAttentionBf16Avx512, StoredAndRecomputedDsGiveTheSameBits) {
  if (cpu_isa() != Isa::Avx512 || !cpu_features().avx512_bf16) GTEST_SKIP() << "no AVX512-BF16 here";
  expect_stored_and_recomputed_ds_agree(cpu::avx512::attention_backward_bf16,
                                        {Case{1, 3, 3, 64, "one"}, Case{37, 6, 2, 9, "every17"},
                                         Case{130, 7, 1, 12, "irregular"}, Case{130, 6, 2, 64, "window20"},
                                         Case{300, 9, 3, 64, "one"}},
                                        "avx512 ");
}

// The AMX kernel's pass 2 loads the kept rows as its A tile, straight when all 16 queries see the
// key tile, else copied with zero rows: T = 1, partial item at the end (T = 37, 130), documents
// starting inside items and tiles, GQA 1, 3 and 7, HS 32 / 64 / 128 (a multiple of 32: AMX's own).
TEST(KernelAttentionBf16Amx, StoredAndRecomputedDsGiveTheSameBits) {
  if (!amx_bf16_kernels() || !cpu_features().avx512_bf16) GTEST_SKIP() << "no AMX bf16 tiles here (or LEANTUNE_AMX=0)";
  expect_stored_and_recomputed_ds_agree(cpu::amx::attention_backward_bf16,
                                        {Case{1, 3, 3, 64, "one"}, Case{37, 6, 2, 32, "every17"},
                                         Case{130, 7, 1, 64, "irregular"}, Case{130, 6, 2, 128, "window20"},
                                         Case{300, 9, 3, 64, "one"}, Case{200, 7, 1, 64, "every17"}},
                                        "amx ");
}

// Several tiles per document at HS = 64: identical bits on a rerun and on 1 thread vs all.
TEST_P(KernelAttentionBf16, DeterministicAcrossRunsAndThreads) {
  if (!has_bf16()) GTEST_SKIP() << "no bf16 attention at this level";
  Inputs r({300, 9, 3, 64, "irregular"}, 31);
  auto run = [&](VecF& out, VecF& lse, VecF& dq, VecF& dk, VecF& dv) {
    out.assign(r.out_r.size(), 0.0f), lse.assign(r.lse_r.size(), 0.0f);
    dq.assign(r.q.size(), 0.5f), dk.assign(r.k.size(), 0.25f), dv.assign(r.k.size(), -0.5f);
    t().attention_train_forward_bf16(out.data(), lse.data(), r.q16.data(), r.k16.data(), r.v16.data(), r.ds.data(),
                                     300, 9, 3, 64);
    Vec16 rows = ds_rows_for(300, 9);
    t().attention_backward_bf16(dq.data(), dk.data(), dv.data(), r.dout.data(), r.q16.data(), r.k16.data(),
                                r.v16.data(), r.out16.data(), lse.data(), r.ds.data(), 300, 9, 3, 64, rows.data(),
                                rows.size() * 2);
  };
  VecF a[5], b[5], c[5];
  run(a[0], a[1], a[2], a[3], a[4]);
  run(b[0], b[1], b[2], b[3], b[4]);
  const int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  run(c[0], c[1], c[2], c[3], c[4]);
  omp_set_num_threads(nt);
  const char* names[5] = {"out", "lse", "dq", "dk", "dv"};
  for (int i = 0; i < 5; i++) {
    EXPECT_EQ(a[i], b[i]) << "rerun " << names[i];
    EXPECT_EQ(a[i], c[i]) << "1 thread vs " << nt << ": " << names[i];
  }
}

// With a bound workspace of attention_workspace_bytes (bf16) the kernels put their packed tiles, D
// and bf16 rows there and give the bits they give with their own vectors (odd HS: q's rows too).
TEST_P(KernelAttentionBf16, BoundWorkspaceIsUsedAndGivesTheSameBits) {
  if (!has_bf16()) GTEST_SKIP() << "no bf16 attention at this level";
  for (int HS : {64, 33}) {
    Inputs r({150, 6, 2, HS, "irregular"}, 37);
    const size_t bytes = attention_workspace_bytes(150, 6, 2, HS, true);
    auto run = [&](bool bound, size_t* untouched) {
      std::vector<uint16_t> ws(bytes / 2 + 32, 0xFFFF);
      auto* buf = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) & ~uintptr_t(63));
      bind_attention_workspace(bound ? buf : nullptr, bound ? bytes : 0);
      VecF out(r.out_r.size()), lse(r.lse_r.size()), g(r.q.size() + 2 * r.k.size(), 0.5f);
      t().attention_train_forward_bf16(out.data(), lse.data(), r.q16.data(), r.k16.data(), r.v16.data(), r.ds.data(),
                                       150, 6, 2, HS);
      t().attention_backward_bf16(g.data(), g.data() + r.q.size(), g.data() + r.q.size() + r.k.size(), r.dout.data(),
                                  r.q16.data(), r.k16.data(), r.v16.data(), r.out16.data(), lse.data(), r.ds.data(), 150,
                                  6, 2, HS, nullptr, 0);
      bind_attention_workspace(nullptr, 0);
      *untouched = (size_t)std::count(buf, buf + bytes / 2, uint16_t(0xFFFF));
      out.insert(out.end(), g.begin(), g.end());
      return out;
    };
    size_t used = 0, none = 0;
    const VecF a = run(true, &used), b = run(false, &none);
    EXPECT_LT(used, bytes / 2 / 4) << "HS " << HS << ": the bound workspace holds the call's scratch";
    EXPECT_EQ(none, bytes / 2) << "HS " << HS;
    EXPECT_EQ(a, b) << "HS " << HS;
  }
}

// Head sizes past the kernel's limit are declined without writing; bad starts are rejected.
TEST_P(KernelAttentionBf16, DeclinesHugeHeadsAndRejectsBadStarts) {
  if (!has_bf16()) GTEST_SKIP() << "no bf16 attention at this level";
  int T = 5, NH = 2, NKV = 1, HS = 260;
  std::vector<int> ds(T, 0);
  Vec16 q((size_t)T * NH * HS, 0x3f80), kv((size_t)T * NKV * HS, 0x3f80);
  VecF out(q.size(), 7.0f), lse((size_t)NH * T, 7.0f), dq(q.size(), 7.0f), dk(kv.size(), 7.0f), dv(kv.size(), 7.0f);
  EXPECT_FALSE(t().attention_train_forward_bf16(out.data(), lse.data(), q.data(), kv.data(), kv.data(), ds.data(), T,
                                                NH, NKV, HS));
  EXPECT_FALSE(t().attention_backward_bf16(dq.data(), dk.data(), dv.data(), out.data(), q.data(), kv.data(),
                                           kv.data(), q.data(), lse.data(), ds.data(), T, NH, NKV, HS, nullptr, 0));
  EXPECT_EQ(out, VecF(q.size(), 7.0f));
  EXPECT_EQ(dk, VecF(kv.size(), 7.0f));
  ds = {0, 0, 3, 0, 0};  // doc_start[2] > 2
  HS = 4;
  EXPECT_THROW(t().attention_train_forward_bf16(out.data(), lse.data(), q.data(), kv.data(), kv.data(), ds.data(), T,
                                                NH, NKV, HS),
               Error);
  EXPECT_THROW(t().attention_backward_bf16(dq.data(), dk.data(), dv.data(), out.data(), q.data(), kv.data(),
                                           kv.data(), q.data(), lse.data(), ds.data(), T, NH, NKV, HS, nullptr, 0),
               Error);
}

LT_INSTANTIATE_ISAS(KernelAttentionBf16);

// The AMX forward and backward (on CPUs with AMX tiles the avx512 table's entries, so the tests
// above run them at HS = 64) called directly, at every head size it takes (multiples of 32: one to four tiles of a
// tile row, one to eight tiles of dims) and at 12 (handed to the AVX-512 kernel), with T around the
// 16-query work item and the 32-key tile; the same bounds as the AVX-512 kernel (the tile unit
// rounds the same bf16 P and sums in f32, only in another order).
TEST(KernelAttentionBf16Amx, ForwardAndBackwardMatchF32Reference) {
  if (!amx_bf16_kernels() || !cpu_features().avx512_bf16) GTEST_SKIP() << "no AMX bf16 tiles here (or LEANTUNE_AMX=0)";
  for (int T : {1, 15, 16, 17, 33, 70})
    for (int HS : {32, 64, 128, 12})
      for (auto [NH, NKV] : {std::pair{3, 3}, std::pair{6, 2}, std::pair{7, 1}})
        for (const char* docs : {"one", "every17", "window20", "unsorted"}) {
          const Case c{T, NH, NKV, HS, docs};
          Inputs r(c, 300 + T + HS);
          VecF out(r.out_r.size(), 7.0f), lse(r.lse_r.size(), 7.0f), out2(r.out_r.size(), -3.0f);
          ASSERT_TRUE(cpu::amx::attention_train_forward_bf16(out.data(), lse.data(), r.q16.data(), r.k16.data(),
                                                             r.v16.data(), r.ds.data(), T, NH, NKV, HS));
          expect_within(out, r.out_r, std::ldexp(1.0, -8) * max_abs(r.v) + 1e-6, "amx out " + c.name());
          expect_close(lse, r.lse_r, 1e-6, std::ldexp(1.0, -8) + 1e-6, "amx lse " + c.name());
          ASSERT_TRUE(cpu::amx::attention_train_forward_bf16(out2.data(), nullptr, r.q16.data(), r.k16.data(),
                                                             r.v16.data(), r.ds.data(), T, NH, NKV, HS));
          EXPECT_EQ(out2, out) << "amx out without lse " << c.name();
          expect_backward_within_bounds(cpu::amx::attention_backward_bf16, c, 400 + T + HS, "amx ");
        }
}

// The AMX forward lets a row's running max lag its true max by up to 8 (scaled) before moving it
// and rescaling the accumulators (attention_bf16_fwd_amx.cpp). Scores that grow along the keys to
// ~150 times the scale (growth 40 at HS 64) move every row's max by more than that on most key
// tiles: the moves, rescales and sums are checked against the reference with the bounds above
// (a kernel that never moved the max overflows exp; one that moved it without rescaling errs by
// the whole output).
TEST(KernelAttentionBf16Amx, ForwardWithScoresGrowingAlongTheKeys) {
  if (!amx_bf16_kernels() || !cpu_features().avx512_bf16) GTEST_SKIP() << "no AMX bf16 tiles here (or LEANTUNE_AMX=0)";
  for (int T : {33, 70, 130})
    for (int HS : {32, 64, 128})
      for (const char* docs : {"one", "every17", "unsorted"}) {
        const Case c{T, 6, 2, HS, docs};
        Inputs r(c, 500 + T + HS, 40.0f);
        VecF out(r.out_r.size(), 7.0f), lse(r.lse_r.size(), 7.0f);
        ASSERT_TRUE(cpu::amx::attention_train_forward_bf16(out.data(), lse.data(), r.q16.data(), r.k16.data(),
                                                           r.v16.data(), r.ds.data(), T, 6, 2, HS));
        expect_within(out, r.out_r, std::ldexp(1.0, -8) * max_abs(r.v) + 1e-6, "amx out " + c.name());
        expect_close(lse, r.lse_r, 1e-6, std::ldexp(1.0, -8) + 1e-6, "amx lse " + c.name());
      }
}

}  // namespace
}  // namespace lt::test
