// llama.cpp's q4_0 as a weight format (quant/q4_0.h, QuantType::Q4_0): ggml's reference quantizer on a
// hand-checked block (sign of the largest element, truncation after + 8.5, the clamp at 15, ggml's
// nibble order), the rounding bound, the stored view (quantize_weight, the chunked quantizer,
// copy_quant_tensor) holding exactly the blocks quantize_q4_0 writes, a decoded block quantizing back
// to itself (why a q4_0 GGUF used as stored equals its values quantized again), its decoding by the
// reference (weight_at) and by every ISA's tile loop equal to dequantize_q4_0, and the specs and parts
// refused.
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
#include "quant/q4_0.h"
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

void* align64(std::vector<uint8_t>& v) {
  return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t(63));
}

TEST(QuantQ4_0, GgmlBlockOnAHandCheckedBlock) {
  // the largest |x| is -1 -> d = -1 / -8 = 0.125, id = 8, q = min(15, trunc(x·8 + 8.5))
  float x[32] = {};
  x[0] = -1.0f, x[1] = 0.25f, x[2] = 0.3125f, x[3] = -0.3125f, x[4] = 0.99f, x[16] = 0.25f, x[31] = -0.0625f;
  uint8_t b[18];
  quantize_q4_0(x, 32, b);
  uint16_t dh;
  std::memcpy(&dh, b, 2);
  EXPECT_EQ(dh, f32_to_f16(0.125f));
  auto code = [&](int j) { return j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4; };
  EXPECT_EQ(code(0), 0);    // -8 + 8.5 = 0.5 -> 0
  EXPECT_EQ(code(1), 10);   // 2 + 8.5
  EXPECT_EQ(code(2), 11);   // 2.5 + 8.5 = 11: a half step rounds up
  EXPECT_EQ(code(3), 6);    // -2.5 + 8.5 = 6: and up on the negative side too
  EXPECT_EQ(code(4), 15);   // 7.92 + 8.5 = 16.42: clamped to 15
  EXPECT_EQ(code(16), 10);  // element 16: the high nibble of byte 0
  EXPECT_EQ(b[2], 0xA0);
  EXPECT_EQ(code(31), 8);   // -0.5 + 8.5 = 8
  EXPECT_EQ(code(5), 8);    // zero
  float y[32];
  dequantize_q4_0(b, 32, y);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], float(code(j) - 8) * 0.125f) << j;
  x[0] = 1.0f;  // the largest element positive: d = -0.125, so it is code 0 and -1 would be clamped
  quantize_q4_0(x, 32, b);
  std::memcpy(&dh, b, 2);
  EXPECT_EQ(f16_to_f32(dh), -0.125f);
  EXPECT_EQ(code(0), 0);
  const float zeros[32] = {};
  quantize_q4_0(zeros, 32, b);  // an all-zero block: d = 0 / −8 = −0 (stored so, as ggml does), codes 8
  std::memcpy(&dh, b, 2);
  EXPECT_EQ(dh, 0x8000);
  for (int j = 2; j < 18; ++j) EXPECT_EQ(b[j], 0x88);
}

TEST(QuantQ4_0, StoredViewHoldsGgmlBlocksAndDecodesAlike) {
  const int64_t rows = 37, cols = 96, n = rows * cols;
  const auto w = random_weights(n, 5);
  std::vector<uint8_t> blocks(size_t(n / 32) * 18);
  quantize_q4_0(w.data(), n, blocks.data());
  const QuantSpec spec{QuantType::Q4_0, 32, false};
  const size_t bytes = quant_storage_bytes(spec, rows, cols);
  EXPECT_EQ(bytes, (blocks.size() + 63) / 64 * 64);
  std::vector<uint8_t> s1(bytes + 64), s2(bytes + 64), s3(bytes + 64);
  const QuantTensor q = quantize_weight(align64(s1), bytes, w.data(), rows, cols, spec);
  ASSERT_EQ(std::memcmp(q.codes, blocks.data(), blocks.size()), 0);
  std::vector<float> deq(static_cast<size_t>(n)), want(static_cast<size_t>(n));
  dequantize_weight(deq.data(), q);
  dequantize_q4_0(blocks.data(), n, want.data());
  EXPECT_EQ(deq, want);
  // |x - (q-8)·f16(d)| <= |d|·(1/2 + 8·2^-11) (half a step, d stored as f16), except the clamped codes
  // (x·id >= 7.5, the opposite end of the largest element): a whole step
  for (int64_t i = 0; i < n; ++i) {
    float amax = 0;
    for (int64_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) amax = std::max(amax, std::fabs(w[size_t(j)]));
    ASSERT_LE(std::fabs(deq[size_t(i)] - w[size_t(i)]), amax / 8 * (1.0f + 8.0f / 2048) + 1e-9f) << i;
  }
  // the decoded values quantize back to the same blocks
  std::vector<uint8_t> again(blocks.size());
  quantize_q4_0(want.data(), n, again.data());
  EXPECT_EQ(again, blocks);
  // the chunked quantizer and a copy hold the same bytes
  std::vector<float> scratch(quantize_chunked_scratch_floats(spec, rows, cols));
  const QuantTensor qc = quantize_weight_chunked(align64(s2), bytes, rows, cols, spec, scratch.data(), scratch.size(),
                                                 [&](float* dst, int64_t f, int64_t c) { std::copy_n(&w[size_t(f)], c, dst); });
  EXPECT_EQ(std::memcmp(qc.codes, blocks.data(), blocks.size()), 0);
  const QuantTensor cp = copy_quant_tensor(align64(s3), bytes, q);
  EXPECT_EQ(std::memcmp(cp.codes, blocks.data(), blocks.size()), 0);
  // the linear op's view: the reference's element decoding and every ISA's tile loop
  const WeightView v = weight_view(q, 0.0f);
  EXPECT_EQ(v.kind, WeightKind::Q4_0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(ref::weight_at(v, r, c), want[size_t(r * cols + c)]);
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (!cpu_supports(isa)) continue;
    std::vector<float> tile(size_t(5 * cols), NAN);
    cpu::dequantize_rows(tile.data(), v, 11, 5, nullptr, isa);
    for (size_t i = 0; i < tile.size(); ++i) ASSERT_EQ(tile[i], want[size_t(11 * cols) + i]) << isa_name(isa);
  }
}

TEST(QuantQ4_0, SpecsAndPartsRefused) {
  EXPECT_EQ(parse_quant_type("q4_0"), QuantType::Q4_0);
  EXPECT_STREQ(quant_type_name(QuantType::Q4_0), "q4_0");
  EXPECT_NO_THROW(check_quant_spec({QuantType::Q4_0, 32, false}));
  EXPECT_THROW(check_quant_spec({QuantType::Q4_0, 64, false}), Error);
  EXPECT_THROW(check_quant_spec({QuantType::Q4_0, 32, true}), Error);
  EXPECT_THROW(quant_storage_bytes({QuantType::Q4_0, 32, false}, 4, 48), Error);  // rows not whole blocks
  std::vector<uint8_t> blocks(18 * 6);
  QuantParts p;
  p.codes = blocks.data(), p.codes_count = int64_t(blocks.size());
  EXPECT_NO_THROW(quant_tensor_view({QuantType::Q4_0, 32, false}, 3, 64, p, "w"));
  p.codes_count -= 18;  // a block short
  EXPECT_THROW(quant_tensor_view({QuantType::Q4_0, 32, false}, 3, 64, p, "w"), Error);
}

}  // namespace
}  // namespace lt
