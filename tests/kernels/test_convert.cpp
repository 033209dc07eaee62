// The array conversions f32 <-> bf16 / f16 (kernels/cpu/convert.h) against dtype.h's scalar ones,
// bit for bit: random values over the whole exponent range, ties, subnormals, Inf, NaN, the f16
// overflow threshold; lengths that leave a masked tail and one long enough to be split over threads.
// Once per ISA (LEANTUNE_ISA): the AVX-512, AVX2 + F16C and scalar loops must all give these bits.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/convert.h"
#include "kernel_test_util.h"

using namespace lt;
using test::isa_param_name;

namespace {

std::vector<float> test_values(size_t n) {
  std::mt19937 rng(11);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t u = rng();
    if (i % 3 == 0) u = (u & 0x80000000u) | (uint32_t(rng() % 40 + 100) << 23) | (u & 0x7fffffu);  // near f16 range
    if (i % 7 == 0) u = (u & 0xffff0000u) | 0x8000u;  // bf16 ties
    if (i % 11 == 0) u = (u & 0xffffe000u) | 0x1000u;  // f16 ties
    v[i] = bits_f32(u);
  }
  const float special[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), 65504.0f, 65519.99f, 65520.0f, -65536.0f,
                           std::numeric_limits<float>::denorm_min(), 5.96e-8f, 2.98e-8f, 1e-40f, 3.0e38f,
                           std::numeric_limits<float>::max()};
  for (size_t i = 0; i < std::size(special) && i < n; ++i) v[i] = special[i];
  return v;
}

void expect_same_bits(float a, float b, size_t i) {
  if (std::isnan(b)) EXPECT_TRUE(std::isnan(a)) << i;
  else EXPECT_EQ(f32_bits(a), f32_bits(b)) << i << " " << b;
}

}  // namespace

class Convert : public test::KernelIsaTest {};

TEST_P(Convert, HalfConversionsMatchTheScalarOnesBitForBit) {
  for (DType t : {DType::BF16, DType::F16}) {
    for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(15), size_t(33), size_t(200003)}) {
      const std::vector<float> x = test_values(n);
      std::vector<uint16_t> h(n), h_only(n);
      std::vector<float> r(n), back(n), inplace = x;
      cpu::f32_to_half(t, h.data(), r.data(), x.data(), n);
      cpu::f32_to_half(t, h_only.data(), nullptr, x.data(), n);
      cpu::f32_to_half(t, nullptr, inplace.data(), inplace.data(), n);
      cpu::half_to_f32(t, back.data(), h.data(), n);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t want = t == DType::BF16 ? f32_to_bf16(x[i]) : f32_to_f16(x[i]);
        const float wantf = t == DType::BF16 ? bf16_to_f32(want) : f16_to_f32(want);
        ASSERT_EQ(h[i], want) << dtype_name(t) << " n=" << n << " i=" << i << " x=" << x[i];
        ASSERT_EQ(h_only[i], want) << i;
        expect_same_bits(r[i], wantf, i);
        expect_same_bits(inplace[i], wantf, i);
        expect_same_bits(back[i], wantf, i);
      }
    }
  }
  EXPECT_THROW(cpu::half_to_f32(DType::F32, nullptr, nullptr, 0), Error);
}

LT_INSTANTIATE_ISAS(Convert);
