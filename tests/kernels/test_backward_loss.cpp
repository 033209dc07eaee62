// The chunked fused lm_head + cross-entropy (lm_head_loss) against a double-precision full-logits
// reference: the mean loss over non-ignored labels, dx (written) and dw (accumulated) against
// central differences of loss_scale * mean loss, for chunk sizes that do and do not divide T,
// optional gradients, all labels ignored, huge logits (the log-sum-exp must be max-subtracted)
// and an out-of-vocabulary label (lt::Error). Shapes: T=7, C=5, V=11.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/backward.h"
#include "backward_test_util.h"

using namespace lt;

namespace {

using namespace lt::test;

// Mean cross-entropy over non-ignored labels with all T×V logits at once, in double.
double loss_double(const VecD& x, const VecD& w, const std::vector<int>& labels, int T, int C, int V) {
  double sum = 0;
  int count = 0;
  VecD logits(V);
  for (int t = 0; t < T; t++) {
    if (labels[t] == kIgnoreLabel) continue;
    count++;
    double mx = -INFINITY;
    for (int v = 0; v < V; v++) {
      double s = 0;
      for (int c = 0; c < C; c++) s += x[t * C + c] * w[v * C + c];
      logits[v] = s;
      mx = std::max(mx, s);
    }
    double se = 0;
    for (int v = 0; v < V; v++) se += std::exp(logits[v] - mx);
    sum += mx + std::log(se) - logits[labels[t]];
  }
  return count ? sum / count : 0.0;
}

const int T = 7, C = 5, V = 11;
const std::vector<int> kLabels = {3, kIgnoreLabel, 0, 10, kIgnoreLabel, 7, 3};

}  // namespace

class BackwardLoss : public ::testing::TestWithParam<int> {};  // the chunk size

TEST_P(BackwardLoss, MatchesFiniteDifferences) {
  const int chunk = GetParam();
  const float loss_scale = 0.5f;
  std::mt19937 rng(50);
  VecF x = rand_vec((size_t)T * C, rng, -2, 2), w = rand_vec((size_t)V * C, rng, -2, 2);
  VecF gw0 = rand_vec(w.size(), rng), dw = gw0;
  VecF dx(x.size(), std::numeric_limits<float>::quiet_NaN());  // written: NaNs must be overwritten
  VecF scratch((size_t)chunk * V);
  float loss = train_ops_ref().lm_head_loss(dx.data(), dw.data(), scratch.data(), x.data(), w.data(), kLabels.data(),
                                            T, C, V, chunk, loss_scale);
  VecD xd = to_d(x), wd = to_d(w);
  EXPECT_NEAR(loss, loss_double(xd, wd, kLabels, T, C, V), 1e-5);
  auto Lx = [&](const VecD& p) { return loss_scale * loss_double(p, wd, kLabels, T, C, V); };
  auto Lw = [&](const VecD& p) { return loss_scale * loss_double(xd, p, kLabels, T, C, V); };
  expect_grad_close(dx, numeric_grad(xd, Lx), 1e-4, "dx");
  expect_grad_close(minus(dw, gw0), numeric_grad(wd, Lw), 1e-4, "dw");
  for (int t : {1, 4})
    for (int c = 0; c < C; c++) EXPECT_EQ(dx[t * C + c], 0.0f) << "ignored row " << t;

  // optional gradients: loss only, dx only, dw only give the same numbers
  float loss0 = train_ops_ref().lm_head_loss(nullptr, nullptr, scratch.data(), x.data(), w.data(), kLabels.data(), T,
                                             C, V, chunk, loss_scale);
  EXPECT_EQ(loss0, loss);
  VecF dx1(x.size(), -1.0f), dw1 = gw0;
  train_ops_ref().lm_head_loss(dx1.data(), nullptr, scratch.data(), x.data(), w.data(), kLabels.data(), T, C, V,
                               chunk, loss_scale);
  train_ops_ref().lm_head_loss(nullptr, dw1.data(), scratch.data(), x.data(), w.data(), kLabels.data(), T, C, V,
                               chunk, loss_scale);
  EXPECT_EQ(dx1, dx);
  EXPECT_EQ(dw1, dw);
}

INSTANTIATE_TEST_SUITE_P(BackwardLossChunks, BackwardLoss, ::testing::Values(1, 3, 4, 7, 10));

TEST(BackwardLossEdge, AllLabelsIgnoredGivesZeroLossAndGradients) {
  std::mt19937 rng(51);
  VecF x = rand_vec((size_t)T * C, rng), w = rand_vec((size_t)V * C, rng);
  std::vector<int> labels(T, kIgnoreLabel);
  VecF dx(x.size(), std::numeric_limits<float>::quiet_NaN()), gw0 = rand_vec(w.size(), rng), dw = gw0;
  VecF scratch((size_t)3 * V);
  float loss = train_ops_ref().lm_head_loss(dx.data(), dw.data(), scratch.data(), x.data(), w.data(), labels.data(), T,
                                            C, V, 3, 1.0f);
  EXPECT_EQ(loss, 0.0f);
  for (float g : dx) EXPECT_EQ(g, 0.0f);
  EXPECT_EQ(dw, gw0);
}

TEST(BackwardLossEdge, HugeLogitsStayFinite) {
  std::mt19937 rng(52);
  VecF x = rand_vec((size_t)T * C, rng, -30, 30), w = rand_vec((size_t)V * C, rng, -30, 30);  // logits ~1e3
  VecF dx(x.size()), dw(w.size(), 0.0f), scratch((size_t)2 * V);
  float loss = train_ops_ref().lm_head_loss(dx.data(), dw.data(), scratch.data(), x.data(), w.data(), kLabels.data(),
                                            T, C, V, 2, 1.0f);
  ASSERT_TRUE(std::isfinite(loss));
  double ref = loss_double(to_d(x), to_d(w), kLabels, T, C, V);
  EXPECT_GT(ref, 10.0);  // the case really is far from softmax ~ uniform
  EXPECT_NEAR(loss, ref, 1e-5 * ref + 1e-3);
  for (float g : dx) ASSERT_TRUE(std::isfinite(g));
  for (float g : dw) ASSERT_TRUE(std::isfinite(g));
}

TEST(BackwardLossEdge, LabelOutsideVocabularyThrows) {
  std::mt19937 rng(53);
  VecF x = rand_vec((size_t)T * C, rng), w = rand_vec((size_t)V * C, rng), scratch((size_t)T * V);
  std::vector<int> labels = kLabels;
  labels[2] = V;
  EXPECT_THROW(train_ops_ref().lm_head_loss(nullptr, nullptr, scratch.data(), x.data(), w.data(), labels.data(), T, C,
                                            V, T, 1.0f),
               lt::Error);
  labels[2] = -1;
  EXPECT_THROW(train_ops_ref().lm_head_loss(nullptr, nullptr, scratch.data(), x.data(), w.data(), labels.data(), T, C,
                                            V, T, 1.0f),
               lt::Error);
}
