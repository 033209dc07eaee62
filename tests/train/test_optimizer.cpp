// AdamW, gradient clipping and the finiteness check (train/optimizer.h): steps against the
// textbook formulas evaluated in double, against values produced by torch.optim.AdamW, frozen
// groups left bit-identical, and large groups that take the OpenMP path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "train/optimizer.h"

namespace lt {
namespace {

// A group with its own storage.
struct Buf {
  std::vector<float> p, g, m, v;
  explicit Buf(std::vector<float> params) : p(std::move(params)), g(p.size()), m(p.size()), v(p.size()) {}
  ParamGroup group(float lr_factor = 1.0f, bool wd = true, bool frozen = false) {
    ParamGroup pg;
    pg.param = p.data();
    pg.grad = g.data();
    pg.m = m.data();
    pg.v = v.data();
    pg.n = p.size();
    pg.lr_factor = lr_factor;
    pg.weight_decay = wd;
    pg.frozen = frozen;
    return pg;
  }
};

// The AdamW update in double, written as the paper / torch docs state it (bias-corrected moments).
struct RefAdamW {
  std::vector<double> p, m, v;
  explicit RefAdamW(const std::vector<float>& p0) : p(p0.begin(), p0.end()), m(p0.size()), v(p0.size()) {}
  void step(const std::vector<float>& g, double lr, double wd, int t, const AdamWOptions& o) {
    for (size_t i = 0; i < p.size(); i++) {
      p[i] *= 1.0 - lr * wd;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * double(g[i]) * g[i];
      const double mhat = m[i] / (1 - std::pow(o.beta1, t));
      const double vhat = v[i] / (1 - std::pow(o.beta2, t));
      p[i] -= lr * mhat / (std::sqrt(vhat) + o.eps);
    }
  }
};

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++)
    EXPECT_NEAR(got[i], want[i], rel * std::max(1.0, std::fabs(want[i]))) << what << "[" << i << "]";
}

TEST(TrainOptAdamW, OneStepMatchesDoubleFormula) {
  AdamWOptions o;
  Buf b({0.5f, -1.25f, 2.0f, 0.0f, 3.5f});
  b.g = {0.1f, -0.2f, 0.3f, -0.4f, 1e-4f};
  RefAdamW ref(b.p);
  ParamGroup groups[] = {b.group()};
  adamw_step(groups, o, 1e-3f, 1);
  ref.step(b.g, double(1e-3f), 0.01, 1, o);
  expect_close(b.p, ref.p, 1e-6, "p");
  expect_close(b.m, ref.m, 1e-6, "m");
  expect_close(b.v, ref.v, 1e-6, "v");
  // Step 1 moves every element with a gradient much larger than eps by about lr·sign(g),
  // after decay: a check that does not depend on the reference above.
  EXPECT_NEAR(b.p[0], 0.5 * (1 - 1e-5) - 1e-3, 1e-7);
  EXPECT_NEAR(b.p[1], -1.25 * (1 - 1e-5) + 1e-3, 1e-7);
}

TEST(TrainOptAdamW, SeveralStepsWithAndWithoutDecayAndLrFactor) {
  AdamWOptions o;
  o.weight_decay = 0.1;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> p0(37);
  for (auto& x : p0) x = nd(rng);
  Buf a(p0), b(p0), c(p0);
  RefAdamW ra(p0), rb(p0), rc(p0);
  const float lr = 3e-3f;
  for (int t = 1; t <= 6; t++) {
    for (size_t i = 0; i < p0.size(); i++) a.g[i] = b.g[i] = c.g[i] = nd(rng) * (i % 5 == 0 ? 1e-3f : 1.0f);
    ParamGroup groups[] = {a.group(), b.group(1.0f, /*wd=*/false), c.group(0.25f)};
    adamw_step(groups, o, lr, t);
    ra.step(a.g, lr, 0.1, t, o);
    rb.step(b.g, lr, 0.0, t, o);
    rc.step(c.g, double(lr) * 0.25, 0.1, t, o);
  }
  expect_close(a.p, ra.p, 2e-6, "decay");
  expect_close(b.p, rb.p, 2e-6, "no decay");
  expect_close(c.p, rc.p, 2e-6, "lr_factor 0.25");
  // The three runs saw identical gradients, so they differ only through decay and lr.
  EXPECT_NE(a.p, b.p);
  EXPECT_NE(a.p, c.p);
}

TEST(TrainOptAdamW, FrozenGroupUntouched) {
  AdamWOptions o;
  Buf a({1.0f, 2.0f, 3.0f}), f({4.0f, 5.0f, 6.0f});
  a.g = f.g = {1.0f, 1.0f, 1.0f};
  f.m = {0.5f, 0.5f, 0.5f};
  const Buf f_before = f;
  ParamGroup groups[] = {a.group(), f.group(1.0f, true, /*frozen=*/true)};
  groups[1].grad = nullptr;  // frozen groups may have no gradient at all
  adamw_step(groups, o, 1e-2f, 1);
  EXPECT_EQ(0, std::memcmp(f.p.data(), f_before.p.data(), 3 * sizeof(float)));
  EXPECT_EQ(f.m, f_before.m);
  EXPECT_EQ(f.v, f_before.v);
  EXPECT_NE(a.p[0], 1.0f);
}

// Ages (grad_topk's variance correction): an entry sent once in 4 steps with 4 steps' worth of
// gradient adds 16/4 to v, as 4 dense steps add about 4·1; the first moment and the update follow
// the usual formulas; ages count the zero steps and reset on a nonzero gradient.
TEST(TrainOptAdamW, AgesCountASparseEntrysSquareOverItsSteps) {
  AdamWOptions o;
  o.weight_decay = 0;
  Buf dense({0.5f, 0.5f}), sparse({0.5f, 0.5f}), plain({0.5f, 0.5f});
  std::vector<float> age = {0.0f, 0.0f};
  for (int t = 1; t <= 4; ++t) {
    dense.g = {1.0f, 1.0f};
    sparse.g = plain.g = t < 4 ? std::vector<float>{0.0f, 1.0f} : std::vector<float>{4.0f, 1.0f};
    ParamGroup d = dense.group(), s = sparse.group(), p = plain.group();
    s.age = age.data();
    adamw_step(std::span<ParamGroup>(&d, 1), o, 1e-2f, t);
    adamw_step(std::span<ParamGroup>(&s, 1), o, 1e-2f, t);
    adamw_step(std::span<ParamGroup>(&p, 1), o, 1e-2f, t);
    EXPECT_EQ(age[0], t < 4 ? float(t) : 0.0f) << t;
    EXPECT_EQ(age[1], 0.0f) << t;
  }
  const double b2 = o.beta2;
  EXPECT_FLOAT_EQ(sparse.v[0], float((1 - b2) * 16.0 / 4.0));
  EXPECT_NEAR(sparse.v[0], dense.v[0], 0.01 * dense.v[0]);     // as the dense entry's
  EXPECT_NEAR(plain.v[0], 4 * dense.v[0], 0.01 * dense.v[0]);  // 4x without ages
  EXPECT_EQ(sparse.m, plain.m);
  // an entry nonzero every step (age 0) is plain AdamW, bit for bit
  EXPECT_EQ(sparse.v[1], plain.v[1]);
  EXPECT_EQ(sparse.p[1], plain.p[1]);
}

// Expected values produced once with torch 2.15 (CPU) in /work/main/.venv by:
//   pa = tensor([0.5, -1.25, 2.0, 0.0, 3.5]); pb = tensor([-0.75, 0.125, 1.5])
//   opt = torch.optim.AdamW([{"params": [pa], "lr": 1e-3, "weight_decay": 0.01},
//                            {"params": [pb], "lr": 1e-3 * 0.5, "weight_decay": 0.0}],
//                           betas=(0.9, 0.999), eps=1e-8)
//   three opt.step() calls with the gradients below, printing with "%.9g".
TEST(TrainOptAdamW, MatchesTorchAdamW) {
  const std::vector<std::vector<float>> grads_a = {
      {0.1f, -0.2f, 0.3f, -0.4f, 1e-4f}, {0.05f, 0.5f, -0.25f, 0.0f, -2.0f}, {-0.3f, 0.01f, 0.02f, 1.5f, 0.7f}};
  const std::vector<std::vector<float>> grads_b = {
      {1.0f, -1e-3f, 0.0f}, {-0.5f, 2.0f, 0.25f}, {0.125f, -0.75f, 3.0f}};
  const std::vector<std::vector<float>> torch_pa = {
      {0.498995006f, -1.24898744f, 1.99897993f, 0.00100000005f, 3.49896502f},
      {0.498057812f, -1.24941719f, 1.99892175f, 0.00167004834f, 3.49967408f},
      {0.498400062f, -1.24975836f, 1.99883962f, 0.00118608016f, 3.49997067f}};
  const std::vector<std::vector<float>> torch_pb = {{-0.750500023f, 0.125499994f, 1.5f},
                                                    {-0.75063318f, 0.12512809f, 1.49962795f},
                                                    {-0.750770986f, 0.124971129f, 1.49928582f}};
  const std::vector<float> torch_ma = {-0.0174000002f, 0.0297999978f, 0.00380000053f, 0.117600001f, -0.109991901f};
  const std::vector<float> torch_va = {0.000102477519f, 0.000289770047f, 0.000152657609f, 0.00240968028f,
                                       0.00448600017f};
  AdamWOptions o;  // torch defaults: betas (0.9, 0.999), eps 1e-8, weight_decay 0.01
  Buf a({0.5f, -1.25f, 2.0f, 0.0f, 3.5f}), b({-0.75f, 0.125f, 1.5f});
  for (int t = 1; t <= 3; t++) {
    a.g = grads_a[t - 1];
    b.g = grads_b[t - 1];
    ParamGroup groups[] = {a.group(), b.group(0.5f, /*wd=*/false)};
    adamw_step(groups, o, 1e-3f, t);
    for (size_t i = 0; i < a.p.size(); i++) EXPECT_FLOAT_EQ(a.p[i], torch_pa[t - 1][i]) << "step " << t << " a" << i;
    for (size_t i = 0; i < b.p.size(); i++) EXPECT_FLOAT_EQ(b.p[i], torch_pb[t - 1][i]) << "step " << t << " b" << i;
  }
  for (size_t i = 0; i < a.m.size(); i++) EXPECT_FLOAT_EQ(a.m[i], torch_ma[i]) << i;
  for (size_t i = 0; i < a.v.size(); i++) EXPECT_FLOAT_EQ(a.v[i], torch_va[i]) << i;
}

TEST(TrainOptAdamW, LargeGroupTakesParallelPathAndMatches) {
  AdamWOptions o;
  const size_t n = 100003;  // above the parallel threshold, not a multiple of any SIMD width
  std::vector<float> p0(n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  for (auto& x : p0) x = ud(rng);
  Buf a(p0);
  RefAdamW ref(p0);
  for (int t = 1; t <= 2; t++) {
    for (auto& x : a.g) x = ud(rng);
    ParamGroup groups[] = {a.group()};
    adamw_step(groups, o, 1e-3f, t);
    ref.step(a.g, double(1e-3f), 0.01, t, o);
  }
  expect_close(a.p, ref.p, 1e-6, "p");
}

TEST(TrainOptAdamW, RejectsZeroStep) {
  Buf a({1.0f});
  ParamGroup groups[] = {a.group()};
  EXPECT_THROW(adamw_step(groups, AdamWOptions{}, 1e-3f, 0), std::runtime_error);
}

TEST(TrainOptClip, ScalesLikeTorch) {
  // torch.nn.utils.clip_grad_norm_([a, b], 1.0) with a.grad = [3, 4], b.grad = [12] returns 13 and
  // leaves a.grad = [0.23076921701431274, 0.307692289352417], b.grad = [0.923076868057251].
  Buf a({0, 0}), b({0}), frozen({0, 0});
  a.g = {3, 4};
  b.g = {12};
  frozen.g = {100, 100};
  ParamGroup groups[] = {a.group(), frozen.group(1, true, /*frozen=*/true), b.group()};
  EXPECT_FLOAT_EQ(clip_grad_norm(groups, 1.0f), 13.0f);
  EXPECT_FLOAT_EQ(a.g[0], 0.23076921701431274f);
  EXPECT_FLOAT_EQ(a.g[1], 0.307692289352417f);
  EXPECT_FLOAT_EQ(b.g[0], 0.923076868057251f);
  EXPECT_EQ(frozen.g[0], 100.0f);  // frozen groups neither count nor get scaled
}

TEST(TrainOptClip, BelowMaxNormUnchanged) {
  Buf a({0, 0});
  a.g = {3, 4};
  ParamGroup groups[] = {a.group()};
  EXPECT_FLOAT_EQ(clip_grad_norm(groups, 5.5f), 5.0f);
  EXPECT_EQ(a.g, (std::vector<float>{3, 4}));
}

TEST(TrainOptClip, LargeGroupsDeterministicAndAccurate) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Buf a(std::vector<float>(70001)), b(std::vector<float>(40000));
  for (auto& x : a.g) x = nd(rng);
  for (auto& x : b.g) x = 1e-3f * nd(rng);
  double want = 0;
  for (float x : a.g) want += double(x) * x;
  for (float x : b.g) want += double(x) * x;
  want = std::sqrt(want);
  ParamGroup groups[] = {a.group(), b.group()};
  const float n1 = clip_grad_norm(groups, 1e9f);  // no clipping
  const float n2 = clip_grad_norm(groups, 1e9f);
  EXPECT_EQ(n1, n2);
  EXPECT_NEAR(n1, want, 1e-6 * want);
  const std::vector<float> a_before = a.g;
  const float n3 = clip_grad_norm(groups, 2.0f);
  EXPECT_EQ(n3, n1);
  const float c = float(2.0 / (double(n1) + 1e-6));
  EXPECT_FLOAT_EQ(a.g[12345], a_before[12345] * c);
  EXPECT_NEAR(clip_grad_norm(groups, 1e9f), 2.0, 1e-5);
}

TEST(TrainOptClip, NonFiniteNormLeavesGradients) {
  Buf a({0, 0, 0});
  a.g = {1, std::numeric_limits<float>::infinity(), 2};
  ParamGroup groups[] = {a.group()};
  EXPECT_FALSE(std::isfinite(clip_grad_norm(groups, 1.0f)));
  EXPECT_EQ(a.g[0], 1.0f);
  EXPECT_EQ(a.g[2], 2.0f);
}

TEST(TrainOptGradsFinite, DetectsInfAndNanAnywhere) {
  Buf a(std::vector<float>(50000, 0.0f)), small(std::vector<float>(3, 0.0f));
  for (size_t i = 0; i < a.g.size(); i++) a.g[i] = float(i) * 1e-3f;
  ParamGroup groups[] = {small.group(), a.group()};
  EXPECT_TRUE(grads_finite(groups));
  a.g.back() = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(grads_finite(groups));
  a.g.back() = 0;
  small.g[1] = -std::numeric_limits<float>::infinity();
  EXPECT_FALSE(grads_finite(groups));
  groups[0].frozen = true;  // a frozen group's gradient is not looked at
  EXPECT_TRUE(grads_finite(groups));
}

}  // namespace
}  // namespace lt
