// Top-k gradient sparsification (train/grad_topk.h): the k largest magnitudes kept, ties broken by
// index, the residual holding exactly what was not sent (so sent + residual over steps equals the
// sum of the gradients), compensation scaling preserving the 2-norm, and the config's checks; the
// residuals and ages as rows of the memory plan: the model allocates exactly the plan, GradTopK
// works in those buffers, and a ZeRO rank's plan keeps them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "dist/zero.h"
#include "kernels/ops.h"
#include "train/grad_topk.h"
#include "train/train_model.h"
#include "tiny_lora_model.h"

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

TEST(GradTopKPlan, ResidualsAndAgesAreOptimizerStateRowsTheModelAllocates) {
  TinyModel tm;
  const TopkOptions topk{0.15, TopkFeedback::Residual, 2, true};
  const MemoryPlan dense = plan_training(tm.cfg, TinyModel::options({}));
  const MemoryPlan plan = plan_training(tm.cfg, TinyModel::options(topk));
  // per trainable tensor: W residuals and an age of its size, OptimizerState, persistent
  size_t trainable = 0, rows = 0, extra = 0;
  for (const auto& b : dense.buffers) {
    if (b.cat != Category::TrainableParams) continue;
    ++trainable;
    for (const std::string& name : {topk_residual_name(0, b.name), topk_residual_name(1, b.name), topk_age_name(b.name)}) {
      auto it = std::find_if(plan.buffers.begin(), plan.buffers.end(), [&](const BufferSpec& x) { return x.name == name; });
      ASSERT_NE(it, plan.buffers.end()) << name;
      EXPECT_EQ(it->cat, Category::OptimizerState) << name;
      EXPECT_EQ(it->bytes, b.bytes) << name;
      EXPECT_EQ(it->life, Lifetime::Persistent) << name;
      ++rows;
      extra += align_up(b.bytes);
    }
  }
  EXPECT_EQ(trainable, 14u);  // LoRA A and B of 7 linears
  EXPECT_EQ(plan.buffers.size(), dense.buffers.size() + rows);
  EXPECT_EQ(plan.arena_bytes(Category::OptimizerState), dense.arena_bytes(Category::OptimizerState) + extra);
  // the model allocates exactly the plan, and GradTopK keeps its state in those buffers
  TrainModel m(tm.cfg, tm.ts, TinyModel::options(topk), ops_cpu());
  for (size_t c = 0; c < kNumCategories; ++c)
    EXPECT_EQ(m.arenas().allocated_bytes(Category(c)), plan.arena_bytes(Category(c))) << category_name(Category(c));
  std::vector<size_t> counts;
  for (const auto& p : m.params()) counts.push_back(p.n);
  GradTopK t(topk, counts, topk_buffers(m.params()));
  for (size_t i = 0; i < counts.size(); ++i) {
    const std::string& name = m.params()[i].name;
    for (int w = 0; w < 2; ++w) EXPECT_EQ(t.residual(i, w), m.arenas().get(topk_residual_name(w, name))) << name;
    EXPECT_EQ(t.age(i), m.arenas().get(topk_age_name(name))) << name;
  }
  // compensation scaling keeps no state: no rows; without the correction, no ages
  const MemoryPlan scale = plan_training(tm.cfg, TinyModel::options({0.15, TopkFeedback::Scale, 1, true}));
  EXPECT_EQ(scale.arena_bytes(Category::OptimizerState), dense.arena_bytes(Category::OptimizerState));
  const MemoryPlan plain = plan_training(tm.cfg, TinyModel::options({0.15, TopkFeedback::Residual, 1, false}));
  EXPECT_EQ(plain.arena_bytes(Category::OptimizerState), dense.arena_bytes(Category::OptimizerState) + extra / 3);
  // a ZeRO rank: the moments go to the engine's shards, the residuals and ages stay with the model
  ZeroOptions zo;
  zo.stage = 1;
  const MemoryPlan rank = plan_zero_rank(plan, tm.cfg.n_layers, 2, zo);
  const size_t psi = trainable_floats(plan), S = (psi + 1) / 2;
  EXPECT_EQ(rank.arena_bytes(Category::OptimizerState), 2 * align_up(S * 4) + extra);
  TrainModelOptions ro = TinyModel::options(topk);
  ro.optimizer_state = false;  // as a ZeRO run builds its model
  TrainModel rm(tm.cfg, tm.ts, ro, ops_cpu());
  EXPECT_EQ(rm.arenas().allocated_bytes(Category::OptimizerState), extra);
}

TEST(GradTopK, BuffersMustMatchTheOptions) {
  std::vector<float> a(4), b(4);
  TopkBuffers ok{{{a.data()}, {b.data()}}, {}};
  EXPECT_NO_THROW(GradTopK({0.5, TopkFeedback::Residual, 2, false}, {4}, ok));
  EXPECT_THROW(GradTopK({0.5, TopkFeedback::Residual, 2, true}, {4}, ok), Error);  // no ages
  EXPECT_THROW(GradTopK({0.5, TopkFeedback::Residual, 1, false}, {4}, ok), Error);  // one worker
}

}  // namespace
}  // namespace lt
