// Helpers shared by the kernel tests: seeded random tensors, closeness checks that report the
// first offending index, and a fixture that runs a test once per ISA through LEANTUNE_ISA.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/kernels.h"
#include "kernels/ops.h"

namespace lt::test {

inline std::vector<float> random_vec(size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// |got - want| <= rel * |want| + abs_tol, elementwise; reports the worst index.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel, double abs_tol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, worst = 0;
  double worst_excess = 0;
  for (size_t i = 0; i < got.size(); i++) {
    double err = std::fabs((double)got[i] - want[i]), lim = rel * std::fabs((double)want[i]) + abs_tol;
    if (!(err <= lim)) {
      if (bad == 0 || err - lim > worst_excess) worst = i, worst_excess = err - lim;
      bad++;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements differ; worst at " << worst
                     << ": got " << got[worst] << " want " << want[worst];
}

// Document layouts: "one" (plain causal), "every17" (restart every 17 tokens), "irregular"
// (documents of 1, 2, 40, 3, ... tokens: one-token documents and ones longer than a key tile),
// "window20" (the irregular documents under a sliding window of 20 keys: max(start, t - 19), as
// TrainModel passes it), "unsorted" (starts that go back and forth, which no model passes: the
// kernels must not rely on their order).
inline std::vector<int> make_doc_start(int T, const std::string& kind) {
  std::vector<int> ds(T);
  if (kind == "one") return std::vector<int>(T, 0);
  if (kind == "window20") {
    ds = make_doc_start(T, "irregular");
    for (int t = 0; t < T; t++) ds[t] = std::max(ds[t], t - 19);
    return ds;
  }
  if (kind == "unsorted") {
    for (int t = 0; t < T; t++) ds[t] = t % 3 == 0 ? t / 2 : t % 3 == 1 ? 0 : t;
    return ds;
  }
  if (kind == "every17") {
    for (int t = 0; t < T; t++) ds[t] = t - t % 17;
    return ds;
  }
  static const int lens[] = {1, 2, 40, 3, 1, 70, 5};
  int start = 0, li = 0, end = lens[0];
  for (int t = 0; t < T; t++) {
    if (t == end) start = end, end += lens[++li % 7];
    ds[t] = start;
  }
  return ds;
}

// Runs each TEST_P once per ISA, selecting it the way users do (LEANTUNE_ISA before ops_cpu()).
class KernelIsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!cpu_supports(GetParam())) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam());
    const char* old = std::getenv("LEANTUNE_ISA");
    had_old_ = old != nullptr;
    if (old) old_ = old;
    setenv("LEANTUNE_ISA", isa_name(GetParam()), 1);
    ASSERT_EQ(cpu_isa(), GetParam());
    ops_ = &ops_cpu();
    ASSERT_EQ(std::string(ops_->name), std::string("cpu-") + isa_name(GetParam()));
  }
  void TearDown() override {
    if (had_old_) setenv("LEANTUNE_ISA", old_.c_str(), 1);
    else unsetenv("LEANTUNE_ISA");
  }
  const Ops& cpu() const { return *ops_; }
  const Ops& ref() const { return ops_ref(); }

 private:
  const Ops* ops_ = nullptr;
  bool had_old_ = false;
  std::string old_;
};

inline std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) { return isa_name(info.param); }

#define LT_INSTANTIATE_ISAS(suite) \
  INSTANTIATE_TEST_SUITE_P(KernelIsa, suite, ::testing::Values(Isa::Scalar, Isa::Avx2, Isa::Avx512), isa_param_name)

}  // namespace lt::test

namespace lt::test {

// Causal GQA attention in double precision, straight from the softmax formula (an oracle that
// shares no code with either backend). Layouts as in ops.h.
inline void attention_double(std::vector<float>& out, std::vector<float>& lse, const std::vector<float>& q,
                             const std::vector<float>& k, const std::vector<float>& v, int T, int pos0, int NH,
                             int NKV, int HS) {
  out.assign((size_t)T * NH * HS, 0.0f);
  lse.assign((size_t)NH * T, 0.0f);
  for (int h = 0; h < NH; h++) {
    int hk = h / (NH / NKV);
    for (int t = 0; t < T; t++) {
      int n = pos0 + t + 1;
      std::vector<double> s(n);
      double mx = -INFINITY;
      for (int j = 0; j < n; j++) {
        double d = 0;
        for (int i = 0; i < HS; i++) d += (double)q[((size_t)t * NH + h) * HS + i] * k[((size_t)j * NKV + hk) * HS + i];
        s[j] = d / std::sqrt((double)HS);
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (int j = 0; j < n; j++) sum += std::exp(s[j] - mx);
      for (int i = 0; i < HS; i++) {
        double o = 0;
        for (int j = 0; j < n; j++) o += std::exp(s[j] - mx) / sum * v[((size_t)j * NKV + hk) * HS + i];
        out[((size_t)t * NH + h) * HS + i] = (float)o;
      }
      lse[(size_t)h * T + t] = (float)(mx + std::log(sum));
    }
  }
}

}  // namespace lt::test
