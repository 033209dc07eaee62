// The GEMM-based lm_head + cross-entropy against the scalar reference on odd shapes and chunks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/backward.h"
#include "kernels/cpu/gemm.h"

using namespace lt;

TEST(KernelCrossEntropy, MatchesReference) {
  for (int chunk : {1, 3, 7, 64}) {
    const int T = 13, C = 17, V = 29;
    std::mt19937 rng(chunk);
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> x(T * C), w(V * C), dx0(T * C), dx1(T * C), dw0(V * C, 0.5f), dw1(V * C, 0.5f);
    std::vector<float> s0(size_t(chunk) * V), s1(size_t(chunk) * V);
    for (auto& v : x) v = nd(rng);
    for (auto& v : w) v = nd(rng);
    std::vector<int> labels(T);
    for (int t = 0; t < T; ++t) labels[t] = t % 4 == 1 ? kIgnoreLabel : int(rng() % V);
    float l0 = ref::lm_head_loss(dx0.data(), dw0.data(), s0.data(), x.data(), w.data(), labels.data(), T, C, V, chunk, 0.7f);
    float l1 = cpu::lm_head_loss(dx1.data(), dw1.data(), s1.data(), x.data(), w.data(), labels.data(), T, C, V, chunk, 0.7f);
    EXPECT_NEAR(l0, l1, 1e-5f * std::fabs(l0));
    for (int i = 0; i < T * C; ++i) EXPECT_NEAR(dx0[i], dx1[i], 1e-5f) << i;
    for (int i = 0; i < V * C; ++i) EXPECT_NEAR(dw0[i], dw1[i], 1e-5f) << i;
    for (int t = 0; t < T; ++t) {
      if (labels[t] != kIgnoreLabel) continue;
      for (int c = 0; c < C; ++c) EXPECT_EQ(dx1[t * C + c], 0.0f);
    }
  }
}
