// llama.cpp's q8_0 as a weight format (quant/q8_0.h, QuantType::Q8_0): ggml's reference quantizer on a
// hand-checked block, the rounding bound (half a step plus the f16 scale's rounding), the stored view (quantize_weight, the chunked
// quantizer, copy_quant_tensor) holding exactly the blocks quantize_q8_0 writes, its decoding by the
// reference (weight_at) and by every ISA's tile loop equal to dequantize_q8_0, and the specs and
// parts refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/ref/ref.h"
#include "quant/q8_0.h"
#include "quant/quant_tensor.h"

namespace lt {
namespace {

std::vector<float> random_weights(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.1f);
  std::vector<float> w(static_cast<size_t>(n));
  for (float& x : w) x = nd(rng);
  return w;
}

TEST(QuantQ8_0, GgmlBlockOnAHandCheckedBlock) {
  // amax 1.27 -> d = 0.01, q = roundf(x / d) (halves away from zero), d stored as f16
  float x[32] = {};
  x[0] = 1.27f, x[1] = -0.635f, x[2] = 0.005f, x[3] = -0.015f, x[31] = 0.1f;
  uint8_t b[34];
  quantize_q8_0(x, 32, b);
  uint16_t dh;
  std::memcpy(&dh, b, 2);
  EXPECT_EQ(dh, f32_to_f16(1.27f / 127.0f));
  const float id = 1.0f / (1.27f / 127.0f);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(int8_t(b[2 + j]), int8_t(std::roundf(x[j] * id))) << j;
  EXPECT_EQ(int8_t(b[2]), 127);
  EXPECT_EQ(int8_t(b[3]), -64);  // -63.5 rounds away from zero
  float y[32];
  dequantize_q8_0(b, 32, y);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], float(int8_t(b[2 + j])) * f16_to_f32(dh));
  const float zeros[32] = {};
  quantize_q8_0(zeros, 32, b);  // an all-zero block: d = 0, codes 0
  for (uint8_t v : b) EXPECT_EQ(v, 0);
}

TEST(QuantQ8_0, StoredViewHoldsGgmlBlocksAndDecodesAlike) {
  const int64_t rows = 37, cols = 96, n = rows * cols;
  const auto w = random_weights(n, 5);
  std::vector<uint8_t> blocks(size_t(n / 32) * 34);
  quantize_q8_0(w.data(), n, blocks.data());
  const QuantSpec spec{QuantType::Q8_0, 32, false};
  std::vector<uint8_t> storage(quant_storage_bytes(spec, rows, cols) + 64);
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t(63));
  const size_t bytes = quant_storage_bytes(spec, rows, cols);
  const QuantTensor q = quantize_weight(aligned, bytes, w.data(), rows, cols, spec);
  ASSERT_EQ(std::memcmp(q.codes, blocks.data(), blocks.size()), 0);
  std::vector<float> deq(static_cast<size_t>(n)), want(static_cast<size_t>(n));
  dequantize_weight(deq.data(), q);
  dequantize_q8_0(blocks.data(), n, want.data());
  EXPECT_EQ(deq, want);
  // |x - q·f16(d)| <= d/2 + |q|·|d - f16(d)| <= d·(1/2 + 127·2^-11): half a step, plus d stored as f16
  for (int64_t i = 0; i < n; ++i) {
    float amax = 0;
    for (int64_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) amax = std::max(amax, std::fabs(w[size_t(j)]));
    ASSERT_LE(std::fabs(deq[size_t(i)] - w[size_t(i)]), amax / 127 * (0.5f + 127.0f / 2048) + 1e-9f) << i;
  }
  // the chunked quantizer and a copy hold the same bytes
  std::vector<float> scratch(quantize_chunked_scratch_floats(spec, rows, cols));
  std::vector<uint8_t> storage2(bytes + 64), storage3(bytes + 64);
  void* a2 = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(storage2.data()) + 63) & ~uintptr_t(63));
  void* a3 = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(storage3.data()) + 63) & ~uintptr_t(63));
  const QuantTensor qc = quantize_weight_chunked(a2, bytes, rows, cols, spec, scratch.data(), scratch.size(),
                                                 [&](float* dst, int64_t f, int64_t c) { std::copy_n(&w[size_t(f)], c, dst); });
  EXPECT_EQ(std::memcmp(qc.codes, blocks.data(), blocks.size()), 0);
  const QuantTensor cp = copy_quant_tensor(a3, bytes, q);
  EXPECT_EQ(std::memcmp(cp.codes, blocks.data(), blocks.size()), 0);
  // the linear op's view: the reference's element decoding and every ISA's tile loop
  const WeightView v = weight_view(q, 0.0f);
  EXPECT_EQ(v.kind, WeightKind::Q8_0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(ref::weight_at(v, r, c), want[size_t(r * cols + c)]);
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (!cpu_supports(isa)) continue;
    std::vector<float> tile(size_t(5 * cols), NAN);
    cpu::dequantize_rows(tile.data(), v, 11, 5, nullptr, isa);
    for (size_t i = 0; i < tile.size(); ++i) ASSERT_EQ(tile[i], want[size_t(11 * cols) + i]) << isa_name(isa);
  }
}

TEST(QuantQ8_0, SpecsAndPartsRefused) {
  EXPECT_EQ(parse_quant_type("q8_0"), QuantType::Q8_0);
  EXPECT_STREQ(quant_type_name(QuantType::Q8_0), "q8_0");
  EXPECT_NO_THROW(check_quant_spec({QuantType::Q8_0, 32, false}));
  EXPECT_THROW(check_quant_spec({QuantType::Q8_0, 64, false}), Error);
  EXPECT_THROW(check_quant_spec({QuantType::Q8_0, 32, true}), Error);
  EXPECT_THROW(quant_storage_bytes({QuantType::Q8_0, 32, false}, 4, 48), Error);  // rows not whole blocks
  std::vector<uint8_t> blocks(34 * 6);
  QuantParts p;
  p.codes = blocks.data(), p.codes_count = int64_t(blocks.size());
  EXPECT_NO_THROW(quant_tensor_view({QuantType::Q8_0, 32, false}, 3, 64, p, "w"));
  p.codes_count -= 34;  // a block short
  EXPECT_THROW(quant_tensor_view({QuantType::Q8_0, 32, false}, 3, 64, p, "w"), Error);
}

}  // namespace
}  // namespace lt
