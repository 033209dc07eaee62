// llama3_scaling_from_factors: the Llama 3 rope scaling recovered from llama.cpp's per-pair
// rope_freqs factors gives the same inverse frequencies as the original scaling (Llama 3.1 / 3.2
// and a small test model, where few or no pairs fall in the smooth band), no scaling when every
// factor is 1, and nothing for factors no Llama 3 scaling gives.
#include <gtest/gtest.h>

#include <cmath>

#include "core/rope_freqs.h"

namespace lt {
namespace {

ModelConfig config(float theta, int head_dim, float factor, float low, float high, int orig) {
  ModelConfig c;
  c.head_dim = head_dim, c.rope_theta = theta;
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = factor, c.rope_scaling.low_freq_factor = low, c.rope_scaling.high_freq_factor = high;
  c.rope_scaling.original_max_position_embeddings = orig;
  return c;
}

// rope_freqs.weight as convert_hf_to_gguf.py writes it: unscaled / scaled frequency per pair.
std::vector<float> factors_of(const ModelConfig& c) {
  ModelConfig plain = c;
  plain.rope_scaling = RopeScaling{};
  const auto base = rope_inv_freq(plain), scaled = rope_inv_freq(c);
  std::vector<float> f(base.size());
  for (size_t i = 0; i < f.size(); ++i) f[i] = base[i] / scaled[i];
  return f;
}

TEST(RopeLlama3Fit, Llama3ScalingRecoveredFromFactors) {
  for (const ModelConfig& c : {config(500000, 128, 8, 1, 4, 8192), config(500000, 64, 32, 1, 4, 8192),
                               config(500000, 16, 8, 1, 4, 64), config(10000, 8, 4, 2, 8, 32),
                               config(500000, 4, 8, 1, 4, 8192)}) {
    ModelConfig plain = c;
    plain.rope_scaling = RopeScaling{};
    const auto s = llama3_scaling_from_factors(plain, factors_of(c));
    ASSERT_TRUE(s.has_value()) << c.head_dim << " " << c.rope_scaling.factor;
    EXPECT_EQ(s->type, "llama3");
    // with 2 pairs no pair is fully scaled: another factor gives the same frequencies
    if (c.head_dim > 4) {
      EXPECT_FLOAT_EQ(s->factor, c.rope_scaling.factor);
    }
    ModelConfig fitted = plain;
    fitted.rope_scaling = *s;
    const auto want = rope_inv_freq(c), got = rope_inv_freq(fitted);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-6 * want[i]) << c.head_dim << " pair " << i;
    if (c.rope_scaling.original_max_position_embeddings == 8192 && c.head_dim >= 64) {  // the real values come back
      EXPECT_NEAR(s->low_freq_factor, c.rope_scaling.low_freq_factor, 1e-3);
      EXPECT_NEAR(s->high_freq_factor, c.rope_scaling.high_freq_factor, 1e-3);
    }
  }
}

TEST(RopeLlama3Fit, OnesAreNoScalingAndOtherFactorsNothing) {
  ModelConfig c = config(10000, 8, 1, 1, 4, 8192);
  c.rope_scaling = RopeScaling{};
  const auto none = llama3_scaling_from_factors(c, {1, 1, 1, 1});
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->type, "");
  EXPECT_FALSE(llama3_scaling_from_factors(c, {4, 1, 3, 1}).has_value());   // not monotone
  EXPECT_FALSE(llama3_scaling_from_factors(c, {1, 1, 1}).has_value());      // one per pair
  EXPECT_FALSE(llama3_scaling_from_factors(c, {1, 0.5f, 1, 1}).has_value());  // below 1
  EXPECT_FALSE(llama3_scaling_from_factors(c, {1, NAN, 1, 1}).has_value());
}

}  // namespace
}  // namespace lt
