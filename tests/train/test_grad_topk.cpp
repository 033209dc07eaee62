// Top-k gradient sparsification (train/grad_topk.h): the k largest magnitudes kept, ties broken by
// index, the residual holding exactly what was not sent (so sent + residual over steps equals the
// sum of the gradients), compensation scaling preserving the 2-norm, and the config's checks.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "train/grad_topk.h"

namespace lt {
namespace {

TEST(GradTopK, KeepCountsRoundUpAndNeverZero) {
  EXPECT_EQ(topk_keep(100, 0.15), 15u);
  EXPECT_EQ(topk_keep(101, 0.15), 16u);
  EXPECT_EQ(topk_keep(3, 0.15), 1u);
  EXPECT_EQ(topk_keep(8, 1.0), 8u);
  EXPECT_EQ(topk_keep(0, 0.5), 0u);
}

TEST(GradTopK, KeepsLargestMagnitudesAscendingWithIndexTieBreak) {
  GradTopK t({0.5, TopkFeedback::Residual, 1}, {6});
  const float g[6] = {0.1f, -3.0f, 2.0f, -2.0f, 0.0f, 2.0f};  // |2| three times: indices 2, 3 win over 5
  uint32_t idx[3];
  float val[3];
  t.select(0, 0, g, idx, val);
  EXPECT_EQ(std::vector<uint32_t>(idx, idx + 3), (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(std::vector<float>(val, val + 3), (std::vector<float>{-3.0f, 2.0f, -2.0f}));
  const float* e = t.residual(0, 0);
  EXPECT_EQ(std::vector<float>(e, e + 6), (std::vector<float>{0.1f, 0, 0, 0, 0, 2.0f}));
  // next step: the residual is added before selecting, so index 5 (2 + 0.5) now goes out
  const float g2[6] = {0, 0, 0, 0, 0, 0.5f};
  t.select(0, 0, g2, idx, val);
  EXPECT_EQ(idx[0], 0u);
  EXPECT_EQ(idx[2], 5u);
  EXPECT_FLOAT_EQ(val[2], 2.5f);
}

TEST(GradTopK, ErrorFeedbackLosesNothing) {
  // over steps, what was sent plus what is left equals the sum of the gradients (to rounding)
  const size_t n = 1000;
  GradTopK t({0.15, TopkFeedback::Residual, 2}, {n, 37});
  std::mt19937 rng(7);
  std::normal_distribution<float> d;
  std::vector<double> sent(n, 0), total(n, 0);
  std::vector<uint32_t> idx(n);
  std::vector<float> val(n), g(n);
  for (int step = 0; step < 20; ++step) {
    for (size_t j = 0; j < n; ++j) total[j] += g[j] = d(rng);
    t.select(0, 1, g.data(), idx.data(), val.data());
    for (size_t j = 0; j < t.keep(0); ++j) sent[idx[j]] += val[j];
  }
  EXPECT_EQ(t.keep(0), 150u);
  const float* e = t.residual(0, 1);
  for (size_t j = 0; j < n; ++j) EXPECT_NEAR(sent[j] + e[j], total[j], 1e-4) << j;
  const float* other = t.residual(0, 0);  // worker 0 never ran
  for (size_t j = 0; j < n; ++j) ASSERT_EQ(other[j], 0.0f);
}

TEST(GradTopK, CompensationScalingKeepsTheNorm) {
  GradTopK t({0.25, TopkFeedback::Scale, 1}, {8});
  EXPECT_EQ(t.residual(0, 0), nullptr);
  const float g[8] = {1, -2, 3, -4, 0.5f, 0.25f, 0, 1};
  uint32_t idx[2];
  float val[2];
  t.select(0, 0, g, idx, val);
  EXPECT_EQ(idx[0], 2u);
  EXPECT_EQ(idx[1], 3u);
  double all = 0;
  for (float x : g) all += double(x) * x;
  EXPECT_NEAR(std::sqrt(double(val[0]) * val[0] + double(val[1]) * val[1]), std::sqrt(all), 1e-5);
  EXPECT_NEAR(val[0] / val[1], 3.0 / -4.0, 1e-6);
}

TEST(GradTopK, ScatterAddsInOrder) {
  std::vector<float> g = {1, 1, 1};
  const uint32_t idx[2] = {0, 2};
  const float val[2] = {2, -1};
  scatter_add(g.data(), idx, val, 2);
  EXPECT_EQ(g, (std::vector<float>{3, 1, 0}));
}

TEST(GradTopK, RejectsBadOptions) {
  EXPECT_THROW(GradTopK({0, TopkFeedback::Residual, 1}, {4}), Error);
  EXPECT_THROW(GradTopK({1.5, TopkFeedback::Residual, 1}, {4}), Error);
  EXPECT_THROW(GradTopK({0.1, TopkFeedback::Residual, 0}, {4}), Error);
  EXPECT_THROW(parse_topk_feedback("dgc"), Error);
  EXPECT_EQ(parse_topk_feedback("scale"), TopkFeedback::Scale);
}

}  // namespace
}  // namespace lt
