// Adaptive LoRA rank (train/adaptive_rank.h): AdaLoRA's cubic budget schedule, the importance
// scores against a scalar double reference of their definitions (sensitivity and variance), the
// pruning (budget met exactly, lowest scores first, a module keeps one component, masked entries
// zero in parameters, gradients and moments and staying so), the checkpoint state round trip,
// and the config's checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "train/adaptive_rank.h"
#include "train/train_config.h"
#include "kernels/ops.h"
#include "train/train_model.h"
#include "tiny_lora_model.h"

namespace lt {
namespace {

// Two LoRA modules (A (r, in), B (out, r)) with buffers of their own and a frozen bias-like tensor
// between them that the allocator must ignore.
struct Fixture {
  std::vector<std::vector<float>> buf;  // p, g, m, v per tensor
  std::vector<TrainParam> params;
  Fixture(int r, std::vector<std::pair<int, int>> shapes) {  // (in, out) per module
    std::vector<std::pair<std::string, std::vector<int64_t>>> ts;
    for (size_t k = 0; k < shapes.size(); ++k) {
      const std::string m = "base_model.model.model.layers." + std::to_string(k) + ".self_attn.q_proj";
      ts.push_back({m + ".lora_A.weight", {r, shapes[k].first}});
      ts.push_back({m + ".lora_B.weight", {shapes[k].second, r}});
      ts.push_back({"model.layers." + std::to_string(k) + ".input_layernorm.weight", {shapes[k].first}});
    }
    buf.resize(ts.size() * 4);
    for (size_t i = 0; i < ts.size(); ++i) {
      size_t n = 1;
      for (auto d : ts[i].second) n *= size_t(d);
      for (int j = 0; j < 4; ++j) buf[4 * i + size_t(j)].assign(n, 0.0f);
      params.push_back({ts[i].first, ts[i].second, buf[4 * i].data(), buf[4 * i + 1].data(), buf[4 * i + 2].data(),
                        buf[4 * i + 3].data(), n, int(i / 3), true});
    }
    // each lora_A carries its module's state, as TrainModel points it at the plan's rows
    state.resize(shapes.size() * 3);
    for (size_t k = 0; k < shapes.size(); ++k) {
      const size_t entries = size_t(r) * size_t(shapes[k].first + shapes[k].second);
      state[3 * k].assign(entries, 7.0f);  // garbage the allocator must reset
      state[3 * k + 1].assign(entries, 7.0f);
      state[3 * k + 2].assign(size_t(r), 7.0f);
      params[3 * k].rank = {state[3 * k].data(), state[3 * k + 1].data(), state[3 * k + 2].data()};
    }
  }
  std::vector<std::vector<float>> state;  // ema1, ema2, mask per module
  void fill(std::mt19937& rng, bool grads_only = false) {
    std::normal_distribution<float> d;
    for (size_t i = 0; i < buf.size(); ++i)
      if (!grads_only || i % 4 == 1)
        for (float& x : buf[i]) x = d(rng);
  }
};

AdaptiveRankOptions opts(int init_r, int target_r, int total, RankImportance imp = RankImportance::Sensitivity) {
  AdaptiveRankOptions o;
  o.init_r = init_r;
  o.target_r = target_r;
  o.total_steps = total;
  o.importance = imp;
  return o;
}

TEST(AdaptiveRank, BudgetFollowsAdaLoRAsCubicSchedule) {
  AdaptiveRankOptions o = opts(8, 2, 100);
  o.tinit = 10;
  o.tfinal = 20;
  o.delta_t = 5;
  const int M = 7;
  for (int t = 1; t <= 100; ++t) {
    bool prune = false;
    const int b = rank_budget(o, M, t, &prune);
    int want;
    bool want_prune;
    if (t <= 10) {
      want = 8 * M;
      want_prune = false;
    } else if (t > 80) {
      want = 2 * M;
      want_prune = true;
    } else {  // PEFT: int((init_bgt - target_bgt) * mul ** 3 + target_bgt)
      const double mul = 1.0 - double(t - 10) / double(100 - 20 - 10);
      want = int((8.0 * M - 2.0 * M) * mul * mul * mul + 2.0 * M);
      want_prune = t % 5 == 0 || t == 80;
    }
    EXPECT_EQ(b, want) << t;
    EXPECT_EQ(prune, want_prune) << t;
  }
}

// The component scores of the header's definitions, in double, from the sequence of (w, g).
std::vector<double> reference_scores(const std::vector<std::vector<std::vector<float>>>& w,
                                     const std::vector<std::vector<std::vector<float>>>& g, int r, int in, int out,
                                     RankImportance imp, double b1, double b2) {
  // w[step][tensor] for tensors A, B of one module
  const size_t nA = size_t(r * in), nB = size_t(out * r);
  std::vector<double> e1(nA + nB, 0), e2(nA + nB, 0);
  for (size_t s = 0; s < w.size(); ++s)
    for (size_t j = 0; j < nA + nB; ++j) {
      const double wj = j < nA ? w[s][0][j] : w[s][1][j - nA], gj = j < nA ? g[s][0][j] : g[s][1][j - nA];
      if (imp == RankImportance::Sensitivity) {
        const double ipt = std::fabs(wj * gj);
        e1[j] = b1 * e1[j] + (1 - b1) * ipt;
        e2[j] = b2 * e2[j] + (1 - b2) * std::fabs(ipt - e1[j]);
      } else {
        e1[j] = b1 * e1[j] + (1 - b1) * gj;
        e2[j] = b2 * e2[j] + (1 - b2) * gj * gj;
      }
    }
  auto entry = [&](size_t j) {
    return imp == RankImportance::Sensitivity ? e1[j] * e2[j] : std::max(0.0, e2[j] - e1[j] * e1[j]);
  };
  std::vector<double> s(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) {
    double a = 0, b = 0;
    for (int c = 0; c < in; ++c) a += entry(size_t(i * in + c));
    for (int o = 0; o < out; ++o) b += entry(nA + size_t(o * r + i));
    s[size_t(i)] = a / in + b / out;
  }
  return s;
}

class ImportanceTest : public ::testing::TestWithParam<RankImportance> {};

TEST_P(ImportanceTest, ScoresMatchTheScalarReference) {
  const int r = 4, in = 6, out = 5;
  Fixture f(r, {{in, out}});
  AdaptiveRankOptions o = opts(r, 2, 1000, GetParam());
  o.tinit = 1000 - 1;  // no pruning during the test
  o.beta1 = 0.8;
  o.beta2 = 0.7;
  RankAllocator ra(o, f.params);
  std::mt19937 rng(3);
  std::vector<std::vector<std::vector<float>>> w, g;
  for (int step = 1; step <= 6; ++step) {
    f.fill(rng);
    w.push_back({f.buf[0], f.buf[4]});
    g.push_back({f.buf[1], f.buf[5]});
    EXPECT_FALSE(ra.update(step));
  }
  const auto want = reference_scores(w, g, r, in, out, GetParam(), 0.8, 0.7);
  const auto got = ra.scores();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_GT(want[i], 0);
    EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Both, ImportanceTest, ::testing::Values(RankImportance::Sensitivity, RankImportance::Variance));

// Sensitivity is the first-order estimate of the loss change when an entry is removed: on
// L(w) = sum_j c_j w_j^2 / 2 + d_j w_j (gradient g_j = c_j w_j + d_j), one step with beta1 = beta2 =
// 0.5 gives Ī = I/2, U = |I - I/2|/2 = I/4, entry score I²/8 with I = |w_j g_j|, which the finite
// difference |L(w) - L(w with w_j = 0)| matches to O(w_j²).
TEST(AdaptiveRank, SensitivityIsTheFirstOrderLossChangeOfRemovingAnEntry) {
  const int r = 2, in = 3, out = 2;
  Fixture f(r, {{in, out}});
  AdaptiveRankOptions o = opts(r, 1, 1000);
  o.tinit = 999;
  o.beta1 = 0.5;
  o.beta2 = 0.5;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1, 1);
  const size_t nA = size_t(r * in), nB = size_t(out * r);
  std::vector<double> c(nA + nB), d(nA + nB);
  for (size_t j = 0; j < nA + nB; ++j) {
    c[j] = 1 + u(rng);
    d[j] = (u(rng) < 0 ? -1 : 1) * (0.5 + std::fabs(u(rng)));
  }
  auto w_at = [&](size_t j) -> float& { return j < nA ? f.buf[0][j] : f.buf[4][j - nA]; };
  auto loss = [&] {
    double L = 0;
    for (size_t j = 0; j < nA + nB; ++j) L += c[j] * w_at(j) * w_at(j) / 2 + d[j] * w_at(j);
    return L;
  };
  for (size_t j = 0; j < nA + nB; ++j) w_at(j) = 1e-3f * u(rng);
  for (size_t j = 0; j < nA; ++j) f.buf[1][j] = float(c[j] * f.buf[0][j] + d[j]);
  for (size_t j = 0; j < nB; ++j) f.buf[5][j] = float(c[nA + j] * f.buf[4][j] + d[nA + j]);
  RankAllocator ra(o, f.params);
  ra.update(1);
  const double L0 = loss();
  std::vector<double> fd(nA + nB);
  for (size_t j = 0; j < nA + nB; ++j) {
    const float keep = w_at(j);
    w_at(j) = 0;
    fd[j] = std::fabs(L0 - loss());
    w_at(j) = keep;
  }
  const auto s = ra.scores();
  for (int i = 0; i < r; ++i) {
    double a = 0, b = 0;
    for (int cc = 0; cc < in; ++cc) a += fd[size_t(i * in + cc)] * fd[size_t(i * in + cc)] / 8;
    for (int oo = 0; oo < out; ++oo) b += fd[nA + size_t(oo * r + i)] * fd[nA + size_t(oo * r + i)] / 8;
    const double want = a / in + b / out;
    EXPECT_NEAR(s[size_t(i)], want, 1e-2 * want) << i;  // first order: |w| ~ 1e-3 against |g| >= 0.5
  }
}

TEST(AdaptiveRank, PrunesLowestScoresToTheBudgetExactlyAndMasksStayZero) {
  const int r = 4;
  Fixture f(r, {{6, 5}, {3, 8}, {4, 4}});
  AdaptiveRankOptions o = opts(r, 1, 20);
  o.tinit = 2;
  o.tfinal = 4;
  RankAllocator ra(o, f.params);
  std::mt19937 rng(5);
  f.fill(rng);
  for (int step = 1; step <= 20; ++step) {
    f.fill(rng, /*grads_only=*/true);
    for (size_t t : {size_t(2), size_t(6)}) f.buf[t].assign(f.buf[t].size(), 1.0f);  // moments non-zero
    const auto before = ra.scores();
    std::vector<std::vector<uint8_t>> keep0;
    for (const auto& m : ra.modules()) keep0.push_back(m.keep);
    ra.update(step);
    bool prune = false;
    const int budget = rank_budget(o, 3, step, &prune);
    if (prune) EXPECT_EQ(ra.active_total(), budget) << step;
    EXPECT_GE(ra.active_total(), budget);
    for (size_t k = 0; k < ra.modules().size(); ++k) {
      const RankModule& m = ra.modules()[k];
      EXPECT_GE(m.active(), 1);
      for (int i = 0; i < r; ++i) EXPECT_EQ(f.state[3 * k + 2][size_t(i)], m.keep[size_t(i)] ? 1.0f : 0.0f);
      const TrainParam &A = f.params[m.a], &B = f.params[m.b];
      for (int i = 0; i < r; ++i) {
        if (keep0[k][size_t(i)] == 0) {
          EXPECT_EQ(m.keep[size_t(i)], 0) << "a pruned component came back";
        }
        if (m.keep[size_t(i)]) continue;
        for (const float* t : {A.p, A.g, A.m, A.v})
          for (int c = 0; c < m.in; ++c) ASSERT_EQ(t[i * m.in + c], 0.0f);
        for (const float* t : {B.p, B.g, B.m, B.v})
          for (int oo = 0; oo < m.out; ++oo) ASSERT_EQ(t[oo * m.r + i], 0.0f);
      }
    }
    EXPECT_EQ(ra.active_lora_floats() <= ra.init_lora_floats(), true);
    (void)before;
  }
  EXPECT_EQ(ra.active_total(), 3);  // target 1 per module
  EXPECT_EQ(ra.active_lora_floats(), size_t(6 + 5 + 3 + 8 + 4 + 4));
}

TEST(AdaptiveRank, PrunesTheLowestScoringComponentsFirst) {
  const int r = 3;
  Fixture f(r, {{2, 2}, {2, 2}});
  AdaptiveRankOptions o = opts(r, 2, 2);  // step 1 <= tinit: none; step 2 = T - tfinal: the final budget 4 of 6
  o.tinit = 1;
  o.beta1 = 0.5;
  o.beta2 = 0.5;
  RankAllocator ra(o, f.params);
  // importance grows with the component index in module 0, falls in module 1
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < r; ++i) {
      const float v = float(k == 0 ? i + 1 : r - i) * (k == 0 ? 1.0f : 1.5f);
      for (int c = 0; c < 2; ++c) f.buf[12 * k][size_t(i * 2 + c)] = v, f.buf[12 * k + 1][size_t(i * 2 + c)] = v;
      for (int oo = 0; oo < 2; ++oo) f.buf[12 * k + 4][size_t(oo * r + i)] = v, f.buf[12 * k + 5][size_t(oo * r + i)] = v;
    }
  ra.update(1);  // scores only (step 1 < 2)
  EXPECT_EQ(ra.active_total(), 6);
  ra.update(2);
  EXPECT_EQ(ra.active_total(), 4);
  EXPECT_EQ(ra.modules()[0].keep, (std::vector<uint8_t>{0, 1, 1}));  // scores 1 (lowest) and 1.5 go
  EXPECT_EQ(ra.modules()[1].keep, (std::vector<uint8_t>{1, 1, 0}));
}

TEST(AdaptiveRank, StateRoundTripsThroughACheckpoint) {
  const int r = 4;
  Fixture f(r, {{6, 5}, {3, 8}});
  AdaptiveRankOptions o = opts(r, 2, 10);
  RankAllocator ra(o, f.params);
  std::mt19937 rng(1);
  for (int step = 1; step <= 5; ++step) {
    f.fill(rng);
    ra.update(step);
  }
  ASSERT_LT(ra.active_total(), 8);
  TensorSet ts;
  for (const TensorInfo& t : ra.state_tensors()) ts.add(t);
  Fixture g(r, {{6, 5}, {3, 8}});
  g.fill(rng);  // the loaded masks zero the parameters again
  RankAllocator rb(o, g.params);
  rb.load_state(ts);
  EXPECT_EQ(rb.active_total(), ra.active_total());
  EXPECT_EQ(rb.scores(), ra.scores());
  for (size_t k = 0; k < 2; ++k) {
    const RankModule& m = rb.modules()[k];
    EXPECT_EQ(m.keep, ra.modules()[k].keep);
    for (int i = 0; i < r; ++i)
      if (!m.keep[size_t(i)]) EXPECT_EQ(g.params[m.a].p[i * m.in], 0.0f);
  }
}

// The EMAs and masks are persistent OptimizerState rows of the plan, sized r·(in + out) and r per
// module; the model allocates exactly the plan and the allocator works in those buffers.
// The release at the final budget (tfinal): in the model's own OptimizerState arena, the moments of
// A and B shrink to the active rows / columns in place, the EMAs go, the tail's pages go back to the
// OS, and AdamW over optimizer_groups leaves every parameter and moment bit-identical to AdamW over the
// full masked tensors of a twin that does not release. What stays is within the plan's bound.
TEST(AdaptiveRankRelease, CompactsTheMomentsAndAdamWKeepsTheBits) {
  TinyModel tm;
  TrainModelOptions o = TinyModel::options({});
  o.adaptive_rank = true;
  const MemoryPlan plan = plan_training(tm.cfg, o);
  TrainModel m1(tm.cfg, tm.ts, o, ops_cpu()), m2(tm.cfg, tm.ts, o, ops_cpu());
  std::vector<TrainParam>&p1 = m1.params(), &p2 = m2.params();
  AdaptiveRankOptions ao = opts(4, 2, 10);
  ao.tfinal = 2;  // the budget is final after step 8
  RankAllocator r1(ao, p1), r2(ao, p2);
  r1.set_arena(m1.arenas(), category_plan(plan, Category::OptimizerState));
  std::mt19937 rng(3);
  std::normal_distribution<float> d;
  auto fill = [&](bool grads_only) {  // the same numbers into both models (v >= 0)
    for (size_t i = 0; i < p1.size(); ++i) {
      float* const a[4] = {p1[i].p, p1[i].g, p1[i].m, p1[i].v};
      float* const b[4] = {p2[i].p, p2[i].g, p2[i].m, p2[i].v};
      for (int t = grads_only ? 1 : 0; t < (grads_only ? 2 : 4); ++t)
        for (size_t j = 0; j < p1[i].n; ++j) a[t][j] = b[t][j] = t == 3 ? std::fabs(d(rng)) : d(rng);
    }
  };
  fill(false);
  for (int step = 1; step <= 8; ++step) {
    fill(true);
    EXPECT_FALSE(r1.released());
    r1.update(step);
    r2.update(step);
  }
  ASSERT_TRUE(r1.released());
  ASSERT_FALSE(r2.released());
  ASSERT_EQ(r1.active_total(), 2 * 7);
  const RankReleaseStats& st = r1.release_stats();
  EXPECT_GT(st.released_bytes, 0u);
  EXPECT_LT(st.resident_after, st.resident_before);
  EXPECT_LE(st.resident_after, released_optimizer_bound(plan, 4, 2)) << st.kept_bytes << " " << st.resident_before;
  EXPECT_LT(released_optimizer_bound(plan, 4, 2), plan.arena_bytes(Category::OptimizerState));
  for (TensorInfo& t : r1.state_tensors()) EXPECT_TRUE(t.name.starts_with("rank_mask.")) << t.name;
  auto groups = [](std::vector<TrainParam>& ps) {
    std::vector<ParamGroup> g;
    for (auto& p : ps) g.push_back({p.p, p.g, p.m, p.v, p.n, 1.0f, p.decay});
    return g;
  };
  for (int step = 9; step <= 10; ++step) {
    fill(true);
    r1.apply_masks();  // masked gradients are zero in a run (both factors are)
    r2.apply_masks();
    std::vector<ParamGroup> g1 = r1.optimizer_groups(groups(p1));
    std::vector<ParamGroup> g2 = groups(p2);
    EXPECT_GT(g1.size(), g2.size());
    adamw_step(g1, AdamWOptions{}, 1e-2f, step);
    adamw_step(g2, AdamWOptions{}, 1e-2f, step);
    r1.update(step);
    r2.update(step);
  }
  for (size_t i = 0; i < p1.size(); ++i) {
    EXPECT_EQ(std::memcmp(p1[i].p, p2[i].p, p1[i].n * sizeof(float)), 0) << p1[i].name;
    const std::vector<int64_t> shape = r1.moment_shape(i);
    std::vector<float> m_full, v_full;  // r2's moments gathered at r1's active components
    const bool a = p1[i].name.ends_with(".lora_A.weight"), b = p1[i].name.ends_with(".lora_B.weight");
    if (!a && !b) {
      EXPECT_EQ(shape, p1[i].shape);
      EXPECT_EQ(std::memcmp(p1[i].m, p2[i].m, p1[i].n * sizeof(float)), 0) << p1[i].name;
      continue;
    }
    const std::string mod = p1[i].name.substr(0, p1[i].name.size() - 14);
    const RankModule& k = *std::find_if(r1.modules().begin(), r1.modules().end(), [&](auto& x) { return x.name == mod; });
    const std::vector<int64_t> want = a ? std::vector<int64_t>{k.active(), k.in} : std::vector<int64_t>{k.out, k.active()};
    EXPECT_EQ(shape, want);
    for (int64_t row = 0; row < (a ? 4 : k.out); ++row)
      for (int64_t c = 0; c < (a ? k.in : 4); ++c)
        if (k.keep[size_t(a ? row : c)]) {
          m_full.push_back(p2[i].m[row * (a ? k.in : 4) + c]);
          v_full.push_back(p2[i].v[row * (a ? k.in : 4) + c]);
        }
    ASSERT_EQ(m_full.size(), size_t(shape[0] * shape[1])) << p1[i].name;
    EXPECT_EQ(std::memcmp(p1[i].m, m_full.data(), m_full.size() * sizeof(float)), 0) << p1[i].name;
    EXPECT_EQ(std::memcmp(p1[i].v, v_full.data(), v_full.size() * sizeof(float)), 0) << p1[i].name;
  }
}

TEST(AdaptiveRankPlan, StateIsOptimizerStateRowsTheAllocatorUses) {
  TinyModel tm;
  TrainModelOptions o = TinyModel::options({});
  const MemoryPlan fixed = plan_training(tm.cfg, o);
  o.adaptive_rank = true;
  const MemoryPlan plan = plan_training(tm.cfg, o);
  TrainModel m(tm.cfg, tm.ts, o, ops_cpu());
  for (size_t c = 0; c < kNumCategories; ++c)
    EXPECT_EQ(m.arenas().allocated_bytes(Category(c)), plan.arena_bytes(Category(c))) << category_name(Category(c));
  RankAllocator ra(opts(4, 2, 10), m.params());
  ASSERT_EQ(ra.modules().size(), 7u);
  size_t extra = 0;
  auto row = [&](const std::string& name) {
    auto it = std::find_if(plan.buffers.begin(), plan.buffers.end(), [&](const BufferSpec& b) { return b.name == name; });
    EXPECT_NE(it, plan.buffers.end()) << name;
    return it == plan.buffers.end() ? BufferSpec{} : *it;
  };
  for (const TensorInfo& t : ra.state_tensors()) {  // the checkpoint's tensors are the plan's rows
    const BufferSpec b = row(t.name);
    EXPECT_EQ(b.cat, Category::OptimizerState) << t.name;
    EXPECT_EQ(b.life, Lifetime::Persistent) << t.name;
    EXPECT_EQ(b.bytes, t.nbytes) << t.name;
    EXPECT_EQ(t.data, m.arenas().get(t.name)) << t.name;
    extra += align_up(t.nbytes);
  }
  for (const RankModule& k : ra.modules()) {
    EXPECT_EQ(row("rank_ema1." + k.name).bytes, size_t(4 * (k.in + k.out)) * sizeof(float)) << k.name;
    EXPECT_EQ(row("rank_mask." + k.name).bytes, 4 * sizeof(float)) << k.name;
  }
  EXPECT_EQ(plan.buffers.size(), fixed.buffers.size() + 3 * 7);
  EXPECT_EQ(plan.arena_bytes(Category::OptimizerState), fixed.arena_bytes(Category::OptimizerState) + extra);
}

TEST(AdaptiveRank, RejectsBadOptionsAndConfigs) {
  Fixture f(4, {{6, 5}});
  EXPECT_THROW(RankAllocator(opts(4, 4, 10), f.params), Error);  // target must be below init
  EXPECT_THROW(RankAllocator(opts(4, 0, 10), f.params), Error);
  AdaptiveRankOptions o = opts(4, 2, 10);
  o.tinit = 5;
  o.tfinal = 5;
  EXPECT_THROW(RankAllocator(o, f.params), Error);  // no window
  f.params[0].rank = {};
  EXPECT_THROW(RankAllocator(opts(4, 2, 10), f.params), Error);  // its state is not planned
  EXPECT_THROW(parse_rank_importance("fisher"), Error);
  auto config_error = [](const std::string& yaml) {
    try {
      TrainConfig c = parse_train_config_text("base_model: m\ndatasets: [d.txt]\n" + yaml, "t.yaml");
      validate_train_config(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(config_error("lora_rank_policy: adaptive\nlora_r: 8\n").find("lora_target_r"), std::string::npos);
  EXPECT_NE(config_error("lora_rank_policy: adaptive\nlora_r: 8\nlora_target_r: 8\n").find("lora_target_r"),
            std::string::npos);
  EXPECT_NE(config_error("lora_rank_policy: sometimes\n").find("lora_rank_policy"), std::string::npos);
  EXPECT_NE(config_error("lora_target_r: 4\n").find("adaptive"), std::string::npos);
  EXPECT_NE(config_error("lora_rank_policy: adaptive\nlora_target_r: 4\nlora_rank_importance: x\n").find("lora_rank_importance"),
            std::string::npos);
  EXPECT_NE(config_error("lora_rank_policy: adaptive\nlora_target_r: 4\nlora_rank_beta1: 1\n").find("lora_rank_beta1"),
            std::string::npos);
  EXPECT_NE(config_error("lora_rank_policy: adaptive\nlora_target_r: 4\nmax_steps: 10\nlora_rank_tinit: 6\n"
                         "lora_rank_tfinal: 4\n").find("window"), std::string::npos);
  EXPECT_NE(config_error("lora_rank_policy: adaptive\nlora_target_r: 4\nmethod: full\n").find("method: lora"),
            std::string::npos);
}

}  // namespace
}  // namespace lt
