// Training attention with document masking: attention_train_forward against ops_ref()'s causal
// attention (one document), against a plain two-pass double-precision softmax (several
// documents), isolation of documents, and attention_backward against central differences of
// L = sum(out * R) in double. Shapes: T=5, HS=6, NH=4 with NKV=2 (GQA), NKV=4 (MHA) and NKV=1 (MQA);
// documents {0,0,0,3,3} (two), {0,1,1,1,4} (one-token documents at
// both ends), {0,1,2,3,4} (all one-token: out = v, no score gradient).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "kernels/backward.h"
#include "backward_test_util.h"
#include "kernels/ops.h"

using namespace lt;

namespace {

using namespace lt::test;

// Plain document-masked causal attention in double: scores, max, exp, normalize (two passes).
void attn_double(VecD& out, VecD* lse, const VecD& q, const VecD& k, const VecD& v, const int* doc_start, int T,
                 int NH, int NKV, int HS) {
  int group = NH / NKV;
  double scale = 1.0 / std::sqrt((double)HS);
  out.assign((size_t)T * NH * HS, 0.0);
  if (lse) lse->assign((size_t)NH * T, 0.0);
  std::vector<double> s(T);
  for (int h = 0; h < NH; h++)
    for (int t = 0; t < T; t++) {
      int hk = h / group;
      double mx = -INFINITY;
      for (int j = doc_start[t]; j <= t; j++) {
        double d = 0;
        for (int c = 0; c < HS; c++) d += q[(t * NH + h) * HS + c] * k[(j * NKV + hk) * HS + c];
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (int j = doc_start[t]; j <= t; j++) sum += std::exp(s[j] - mx);
      for (int j = doc_start[t]; j <= t; j++) {
        double p = std::exp(s[j] - mx) / sum;
        for (int c = 0; c < HS; c++) out[(t * NH + h) * HS + c] += p * v[(j * NKV + hk) * HS + c];
      }
      if (lse) (*lse)[h * T + t] = mx + std::log(sum);
    }
}

struct Heads {
  int NH, NKV;
};

}  // namespace

class BackwardAttention : public ::testing::TestWithParam<Heads> {};

TEST_P(BackwardAttention, OneDocumentMatchesCausalForwardOfOpsRef) {
  const auto [NH, NKV] = GetParam();
  const int HS = 6;
  for (int T : {5, 37}) {
    std::mt19937 rng(10 + T);
    VecF q = rand_vec((size_t)T * NH * HS, rng, -2, 2), k = rand_vec((size_t)T * NKV * HS, rng, -2, 2);
    VecF v = rand_vec(k.size(), rng);
    std::vector<int> doc(T, 0);
    VecF out(q.size()), lse((size_t)NH * T), out_ref(q.size()), lse_ref(lse.size());
    train_ops_ref().attention_train_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), doc.data(), T, NH,
                                            NKV, HS);
    ops_ref().attention_forward(out_ref.data(), lse_ref.data(), q.data(), k.data(), v.data(), T, 0, NH, NKV, HS, 0, 0);
    for (size_t i = 0; i < out.size(); i++) ASSERT_NEAR(out[i], out_ref[i], 2e-6) << "T=" << T << " out " << i;
    for (size_t i = 0; i < lse.size(); i++) ASSERT_NEAR(lse[i], lse_ref[i], 2e-6) << "T=" << T << " lse " << i;
  }
}

TEST_P(BackwardAttention, DocumentsMatchDoubleReferenceAndAreIsolated) {
  const auto [NH, NKV] = GetParam();
  const int T = 5, HS = 6;
  const int doc[T] = {0, 0, 0, 3, 3};
  std::mt19937 rng(20);
  VecF q = rand_vec((size_t)T * NH * HS, rng, -2, 2), k = rand_vec((size_t)T * NKV * HS, rng, -2, 2);
  VecF v = rand_vec(k.size(), rng);
  VecF out(q.size()), lse((size_t)NH * T);
  train_ops_ref().attention_train_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), doc, T, NH, NKV, HS);
  VecD out_d, lse_d;
  attn_double(out_d, &lse_d, to_d(q), to_d(k), to_d(v), doc, T, NH, NKV, HS);
  for (size_t i = 0; i < out.size(); i++) ASSERT_NEAR(out[i], out_d[i], 2e-6) << "out " << i;
  for (size_t i = 0; i < lse.size(); i++) ASSERT_NEAR(lse[i], lse_d[i], 2e-6) << "lse " << i;

  // the second document (tokens 3, 4) is attention over itself alone, starting at position 0
  const int T2 = 2, t0 = 3;
  VecF out2((size_t)T2 * NH * HS);
  ops_ref().attention_forward(out2.data(), nullptr, q.data() + (size_t)t0 * NH * HS, k.data() + (size_t)t0 * NKV * HS,
                              v.data() + (size_t)t0 * NKV * HS, T2, 0, NH, NKV, HS, 0, 0);
  for (size_t i = 0; i < out2.size(); i++) EXPECT_NEAR(out[t0 * NH * HS + i], out2[i], 2e-6) << i;

  // changing everything of the first document leaves the second one's outputs bit-identical
  VecF q3 = q, k3 = k, v3 = v;
  for (size_t i = 0; i < (size_t)t0 * NH * HS; i++) q3[i] += 0.5f;
  for (size_t i = 0; i < (size_t)t0 * NKV * HS; i++) k3[i] *= -3.0f, v3[i] += 7.0f;
  VecF out3(q.size()), lse3(lse.size());
  train_ops_ref().attention_train_forward(out3.data(), lse3.data(), q3.data(), k3.data(), v3.data(), doc, T, NH, NKV,
                                          HS);
  for (size_t i = (size_t)t0 * NH * HS; i < out.size(); i++) EXPECT_EQ(out3[i], out[i]) << i;
  for (int h = 0; h < NH; h++)
    for (int t = t0; t < T; t++) EXPECT_EQ(lse3[h * T + t], lse[h * T + t]);
  bool first_changed = false;
  for (size_t i = 0; i < (size_t)t0 * NH * HS; i++) first_changed |= out3[i] != out[i];
  EXPECT_TRUE(first_changed);
}

TEST_P(BackwardAttention, BackwardMatchesFiniteDifferences) {
  const auto [NH, NKV] = GetParam();
  const int T = 5, HS = 6;
  const std::vector<std::vector<int>> docs = {{0, 0, 0, 3, 3}, {0, 0, 0, 0, 0}, {0, 1, 1, 1, 4}};
  for (const auto& dv_doc : docs) {
    const int* doc = dv_doc.data();
    std::mt19937 rng(30);
    VecF q = rand_vec((size_t)T * NH * HS, rng, -2, 2), k = rand_vec((size_t)T * NKV * HS, rng, -2, 2);
    VecF v = rand_vec(k.size(), rng), R = rand_vec(q.size(), rng);
    VecF out(q.size()), lse((size_t)NH * T);
    train_ops_ref().attention_train_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), doc, T, NH, NKV,
                                            HS);
    VecF gq0 = rand_vec(q.size(), rng), gk0 = rand_vec(k.size(), rng), gv0 = rand_vec(v.size(), rng);
    VecF dq = gq0, dk = gk0, dv = gv0;
    train_ops_ref().attention_backward(dq.data(), dk.data(), dv.data(), R.data(), q.data(), k.data(), v.data(),
                                       out.data(), lse.data(), doc, T, NH, NKV, HS, nullptr, 0);
    VecD qd = to_d(q), kd = to_d(k), vd = to_d(v);
    auto L = [&](const VecD& qq, const VecD& kk, const VecD& vv) {
      VecD o;
      attn_double(o, nullptr, qq, kk, vv, doc, T, NH, NKV, HS);
      double s = 0;
      for (size_t i = 0; i < o.size(); i++) s += o[i] * R[i];
      return s;
    };
    SCOPED_TRACE(::testing::Message() << "doc_start {" << doc[0] << doc[1] << doc[2] << doc[3] << doc[4] << "}");
    expect_grad_close(minus(dq, gq0), numeric_grad(qd, [&](const VecD& p) { return L(p, kd, vd); }), 1e-4, "dq");
    expect_grad_close(minus(dk, gk0), numeric_grad(kd, [&](const VecD& p) { return L(qd, p, vd); }), 1e-4, "dk");
    expect_grad_close(minus(dv, gv0), numeric_grad(vd, [&](const VecD& p) { return L(qd, kd, p); }), 1e-4, "dv");
  }
}

INSTANTIATE_TEST_SUITE_P(BackwardAttentionHeads, BackwardAttention, ::testing::Values(Heads{4, 2}, Heads{4, 4}, Heads{4, 1}),
                         [](const auto& info) {
                           return "NH" + std::to_string(info.param.NH) + "_NKV" + std::to_string(info.param.NKV);
                         });

TEST(BackwardAttentionSingletons, SingleTokenDocumentsCopyValueAndHaveNoScoreGradient) {
  const int T = 5, NH = 4, NKV = 2, HS = 6;
  const int doc[T] = {0, 1, 2, 3, 4};
  std::mt19937 rng(40);
  VecF q = rand_vec((size_t)T * NH * HS, rng), k = rand_vec((size_t)T * NKV * HS, rng), v = rand_vec(k.size(), rng);
  VecF R = rand_vec(q.size(), rng), out(q.size()), lse((size_t)NH * T);
  train_ops_ref().attention_train_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), doc, T, NH, NKV, HS);
  for (int t = 0; t < T; t++)
    for (int h = 0; h < NH; h++)
      for (int c = 0; c < HS; c++) EXPECT_NEAR(out[(t * NH + h) * HS + c], v[(t * NKV + h / 2) * HS + c], 1e-6);
  VecF dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
  train_ops_ref().attention_backward(dq.data(), dk.data(), dv.data(), R.data(), q.data(), k.data(), v.data(),
                                     out.data(), lse.data(), doc, T, NH, NKV, HS, nullptr, 0);
  for (float g : dq) EXPECT_NEAR(g, 0.0f, 1e-6);
  for (float g : dk) EXPECT_NEAR(g, 0.0f, 1e-6);
  // dv of KV head hk = sum of dout over its query heads
  for (int t = 0; t < T; t++)
    for (int hk = 0; hk < NKV; hk++)
      for (int c = 0; c < HS; c++)
        EXPECT_NEAR(dv[(t * NKV + hk) * HS + c],
                    R[(t * NH + 2 * hk) * HS + c] + R[(t * NH + 2 * hk + 1) * HS + c], 1e-6);
}
