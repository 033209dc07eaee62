// dtype conversions: bf16/f16 round to nearest even, exact round trips, Inf/NaN/subnormals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"

using namespace lt;

TEST(CoreDtype, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0)
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808000u)), 0x3f80);
  // 1.0078125 + 2^-8 is halfway between 0x3f81 and 0x3f82: ties to even (0x3f82)
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f818000u)), 0x3f82);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808001u)), 0x3f81);  // just above half rounds up
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  EXPECT_EQ(f32_to_bf16(bits_f32(0x7f7fffffu)), 0x7f80);  // max float rounds to Inf
}

TEST(CoreDtype, Bf16RoundTripIsExactForAllBf16Values) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = bf16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), h) << h;
  }
}

TEST(CoreDtype, F16RoundTripIsExactForAllF16Values) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) { ASSERT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))); continue; }
    ASSERT_EQ(f32_to_f16(f), h) << h;
  }
}

// Every f16 value against the definition (finite, and its f32 value survives a round trip through bf16), one
// at a time and inside arrays longer than the function's 4096-element chunks.
TEST(CoreDtype, F16ValuesAreBf16MatchesTheDefinition) {
  std::vector<uint16_t> exact;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t v = uint16_t(h);
    const float f = f16_to_f32(v);
    const bool want = std::isfinite(f) && (f32_bits(f) & 0xffffu) == 0;
    ASSERT_EQ(f16_values_are_bf16(&v, 1), want) << std::hex << h;
    if (want) exact.push_back(v);
  }
  EXPECT_GT(exact.size(), 8000u);
  EXPECT_TRUE(f16_values_are_bf16(exact.data(), exact.size()));
  for (size_t at : {size_t(0), size_t(4095), size_t(4096), exact.size() - 1}) {
    std::vector<uint16_t> v = exact;
    v[at] = 0x3c01;  // 1 + 2^-10: 11 significant bits
    EXPECT_FALSE(f16_values_are_bf16(v.data(), v.size())) << at;
    v[at] = 0x0101;  // a subnormal with 9 significant bits
    EXPECT_FALSE(f16_values_are_bf16(v.data(), v.size())) << at;
  }
  EXPECT_TRUE(f16_values_are_bf16(nullptr, 0));
}

TEST(CoreDtype, F16MatchesHardwareConversion) {
  // every f32 between representative exponents, against a double-precision RNE reference
  auto ref = [](float f) -> uint16_t {
    // reference: nearest of the two neighbouring f16 values, ties to even, via exhaustive search
    uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    double a = std::fabs(double(f));
    uint16_t best = 0;
    double bestd = INFINITY;
    for (uint32_t h = 0; h < 0x7c00; ++h) {
      double d = std::fabs(double(f16_to_f32(uint16_t(h))) - a);
      if (d < bestd || (d == bestd && (h & 1) == 0)) { bestd = d; best = uint16_t(h); }
    }
    if (a >= 65520.0) best = 0x7c00;
    return sign | best;
  };
  const float samples[] = {0.0f, 1e-8f, 2.98e-8f, 2.9802322e-8f, 5.96e-8f, 6.0e-8f, 1e-7f, 3.1e-5f, 6.1e-5f,
                           6.103515625e-05f, 0.1f, 0.333333f, 1.0009765625f, 1.00048828125f, 3.14159f, 1000.1f,
                           65504.0f, 65519.0f, 65520.0f, 1e6f, -0.1f, -65519.9f};
  for (float f : samples) EXPECT_EQ(f32_to_f16(f), ref(f)) << f;
}

TEST(CoreDtype, ConvertToF32) {
  uint16_t b[3] = {f32_to_bf16(1.5f), f32_to_bf16(-2.0f), f32_to_bf16(0.0f)};
  float out[3];
  convert_to_f32(out, b, DType::BF16, 3);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.0f);
  uint16_t h[2] = {f32_to_f16(0.5f), f32_to_f16(-3.25f)};
  convert_to_f32(out, h, DType::F16, 2);
  EXPECT_EQ(out[0], 0.5f);
  EXPECT_EQ(out[1], -3.25f);
}
