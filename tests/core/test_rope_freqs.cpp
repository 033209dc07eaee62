// RoPE frequencies per rope_scaling type against their definitions (transformers'
// modeling_rope_utils.py), the attention factors, the per-call update of dynamic and longrope,
// rope_scale_queries and the validation errors. End-to-end logits against transformers for each
// type are in tests/python/test_rope_scaling_parity.py.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/rope_freqs.h"

namespace lt {
namespace {

ModelConfig base_config() {
  ModelConfig c;
  c.dim = 64;
  c.n_layers = 1;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.head_dim = 16;
  c.hidden_dim = 128;
  c.vocab_size = 32;
  c.max_seq_len = 128;
  c.rope_theta = 10000.0f;
  return c;
}

double plain(const ModelConfig& c, int i) { return 1.0 / std::pow(double(c.rope_theta), 2.0 * i / c.head_dim); }

TEST(RopeFreqs, LinearDividesEveryFrequency) {
  ModelConfig c = base_config();
  c.rope_scaling.type = "linear";
  c.rope_scaling.factor = 4.0f;
  auto f = rope_inv_freq(c);
  ASSERT_EQ(f.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(f[i], plain(c, i) / 4.0, 1e-7 * plain(c, i)) << i;
  EXPECT_FALSE(rope_depends_on_length(c));
}

TEST(RopeFreqs, DynamicGrowsTheBaseBeyondTheContext) {
  ModelConfig c = base_config();
  c.rope_scaling.type = "dynamic";
  c.rope_scaling.factor = 2.0f;
  auto at_init = rope_inv_freq(c, 0);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(at_init[i], float(plain(c, i)));
  EXPECT_EQ(rope_inv_freq(c, 100), at_init);  // within max_position_embeddings: unchanged
  // seq_len 256 = 2 x 128: base' = theta * (2 * 2 - 1)^(16 / 14)
  const double base = 10000.0 * std::pow(3.0, 16.0 / 14.0);
  auto grown = rope_inv_freq(c, 256);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(grown[i], 1.0 / std::pow(base, 2.0 * i / 16), 1e-6 * grown[i]) << i;
  EXPECT_TRUE(rope_depends_on_length(c));
}

TEST(RopeFreqs, DynamicStateGrowsAndResetsAsTransformers) {
  ModelConfig c = base_config();
  c.rope_scaling.type = "dynamic";
  c.rope_scaling.factor = 2.0f;
  RopeFreqState s(c);
  const auto init = s.inv_freq();
  EXPECT_FALSE(s.update(127));  // seq_len 128: no growth
  EXPECT_TRUE(s.update(199));   // 200 > 128
  EXPECT_EQ(s.inv_freq(), rope_inv_freq(c, 200));
  EXPECT_FALSE(s.update(150));  // shorter but not below 128: kept
  EXPECT_EQ(s.inv_freq(), rope_inv_freq(c, 200));
  EXPECT_TRUE(s.update(250));
  EXPECT_EQ(s.inv_freq(), rope_inv_freq(c, 251));
  EXPECT_TRUE(s.update(10));  // below max_position_embeddings: back to the original frequencies
  EXPECT_EQ(s.inv_freq(), init);
  EXPECT_FALSE(s.update(20));
}

TEST(RopeFreqs, YarnRampsFromExtrapolationToInterpolation) {
  ModelConfig c = base_config();
  c.rope_scaling.type = "yarn";
  c.rope_scaling.factor = 4.0f;
  c.rope_scaling.original_max_position_embeddings = 32;
  auto f = rope_inv_freq(c, 0);
  // correction range: HS * ln(orig / (beta * 2 pi)) / (2 ln theta), floor / ceil, clamped to [0, HS-1]
  auto dim = [&](double beta) { return 16.0 * std::log(32.0 / (beta * 2 * M_PI)) / (2 * std::log(10000.0)); };
  const double low = std::max(std::floor(dim(32)), 0.0), high = std::min(std::ceil(dim(1)), 15.0);
  ASSERT_LT(low, high);
  for (int i = 0; i < 8; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double want = plain(c, i) / 4.0 * ramp + plain(c, i) * (1.0 - ramp);
    EXPECT_NEAR(f[i], want, 1e-6 * want) << i;
  }
  EXPECT_FLOAT_EQ(f[0], float(plain(c, 0)));         // fastest pair: extrapolated
  EXPECT_NEAR(f[7], plain(c, 7) / 4.0, 1e-6 * f[7]);  // slowest: interpolated
  EXPECT_NEAR(rope_attention_factor(c.rope_scaling), 0.1 * std::log(4.0) + 1.0, 1e-6);
  c.rope_scaling.mscale = 2.0f;
  c.rope_scaling.mscale_all_dim = 1.0f;
  EXPECT_NEAR(rope_attention_factor(c.rope_scaling), (0.2 * std::log(4.0) + 1.0) / (0.1 * std::log(4.0) + 1.0), 1e-6);
  c.rope_scaling.attention_factor = 0.75f;
  EXPECT_FLOAT_EQ(rope_attention_factor(c.rope_scaling), 0.75f);
}

TEST(RopeFreqs, LongropeShortAndLongFactors) {
  ModelConfig c = base_config();
  c.rope_scaling.type = "longrope";
  c.rope_scaling.factor = 4.0f;
  c.rope_scaling.original_max_position_embeddings = 32;
  c.rope_scaling.short_factor = {1, 1, 1, 1, 1.5f, 1.5f, 2, 2};
  c.rope_scaling.long_factor = {1, 2, 3, 4, 5, 6, 7, 8};
  auto s = rope_inv_freq(c, 0), l = rope_inv_freq(c, 33);
  EXPECT_EQ(rope_inv_freq(c, 32), s);  // up to the original context: short
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(s[i], plain(c, i) / c.rope_scaling.short_factor[i], 1e-6 * s[i]) << i;
    EXPECT_NEAR(l[i], plain(c, i) / c.rope_scaling.long_factor[i], 1e-6 * l[i]) << i;
  }
  EXPECT_NEAR(rope_attention_factor(c.rope_scaling), std::sqrt(1.0 + std::log(4.0) / std::log(32.0)), 1e-6);
  RopeFreqState st(c);
  EXPECT_EQ(st.inv_freq(), s);
  EXPECT_FALSE(st.update(31));
  EXPECT_TRUE(st.update(32));  // seq_len 33
  EXPECT_EQ(st.inv_freq(), l);
  EXPECT_FALSE(st.update(40));
  EXPECT_TRUE(st.update(5));
  EXPECT_EQ(st.inv_freq(), s);
}

TEST(RopeFreqs, OtherTypesHaveNoAttentionFactorAndNeverChange) {
  for (const char* t : {"", "linear", "dynamic", "llama3"}) {
    ModelConfig c = base_config();
    c.rope_scaling.type = t;
    c.rope_scaling.factor = 2.0f;
    EXPECT_EQ(rope_attention_factor(c.rope_scaling), 1.0f) << t;
  }
  ModelConfig c = base_config();
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = 8.0f;
  RopeFreqState st(c);
  EXPECT_FALSE(st.update(10000));
  EXPECT_EQ(st.inv_freq(), rope_inv_freq(c));
}

TEST(RopeFreqs, OneTableApiRefusesWhatItCannotRepresent) {
  // rope_inv_freq(c) is for a model without per-call frequencies or the attention factor
  for (const char* t : {"dynamic", "yarn", "longrope"}) {
    ModelConfig c = base_config();
    c.rope_scaling.type = t;
    c.rope_scaling.factor = 2.0f;
    c.rope_scaling.short_factor = c.rope_scaling.long_factor = std::vector<float>(8, 1.0f);
    try {
      rope_inv_freq(c);
      ADD_FAILURE() << t << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + t + "' is not supported by this model code yet"),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(RopeFreqState(c).inv_freq(), rope_inv_freq(c, 0)) << t;
  }
}

TEST(RopeFreqs, ScaleQueriesBySquaredFactor) {
  ModelConfig c = base_config();
  float q[3] = {1.0f, -2.0f, 0.5f};
  rope_scale_queries(q, 3, c);  // factor 1: untouched
  EXPECT_EQ(q[1], -2.0f);
  c.rope_attention_factor = 1.5f;
  rope_scale_queries(q, 3, c);
  EXPECT_FLOAT_EQ(q[0], 2.25f);
  EXPECT_FLOAT_EQ(q[1], -4.5f);
}

TEST(RopeFreqs, ValidationNamesTheProblem) {
  auto error_of = [](const ModelConfig& c) -> std::string {
    try {
      validate_rope_scaling(c, "m/config.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "<no error>";
  };
  ModelConfig c = base_config();
  c.rope_scaling.type = "ntk-by-parts";
  EXPECT_NE(error_of(c).find("'ntk-by-parts' is not supported; supported: linear, dynamic, yarn, longrope, llama3"),
            std::string::npos);
  c.rope_scaling.type = "longrope";
  c.rope_scaling.short_factor.assign(8, 1.0f);
  c.rope_scaling.long_factor.assign(7, 1.0f);
  EXPECT_NE(error_of(c).find("long_factor must hold head_dim / 2 = 8 numbers, got 7"), std::string::npos) << error_of(c);
  c.rope_scaling.long_factor.assign(8, 0.0f);
  EXPECT_NE(error_of(c).find("long_factor holds 0"), std::string::npos) << error_of(c);
  c = base_config();
  c.rope_scaling.type = "yarn";
  c.rope_scaling.factor = -1;
  EXPECT_NE(error_of(c).find("m/config.json: rope_scaling.factor must be positive"), std::string::npos);
  c.rope_scaling.factor = 2;
  c.rope_scaling.beta_fast = 0;
  EXPECT_NE(error_of(c).find("beta_fast"), std::string::npos);
}

}  // namespace
}  // namespace lt
