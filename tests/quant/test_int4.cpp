// The integer 4-bit formats (quant/int4.h): ggml's q4_0 / q4_1 grids on a hand-checked block,
// the rounding bound, fake quantization equal bit for bit to storing and decoding (the linear op's
// decoding of the stored view included, on every ISA's tile loops), the chunked quantizer's bytes,
// and the block sizes accepted.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/ref/ref.h"
#include "quant/int4.h"
#include "quant/quant_tensor.h"

namespace lt {
namespace {

std::vector<float> random_weights(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.1f);
  std::vector<float> w(static_cast<size_t>(n));
  for (float& x : w) x = nd(rng);
  w[3] = 0.9f;  // an outlier in the first block
  return w;
}

TEST(QuantInt4, Q4_0AndQ4_1GridsOnAHandCheckedBlock) {
  // one block of 4: int4 takes m = -2 (largest |x|), d = m / -8 = 0.25, q = trunc(x / d + 8.5)
  const float x[4] = {1.0f, -2.0f, 0.3f, 1.9f};
  uint8_t codes[2];
  float d, lo;
  quantize_int4(codes, &d, nullptr, x, 4, 4, QuantType::Int4);
  EXPECT_EQ(d, 0.25f);
  EXPECT_EQ(codes[0], (12 << 4) | 0);  // 1.0 -> 12 (+4 steps); -2 -> 0 (-8 steps)
  EXPECT_EQ(codes[1], (9 << 4) | 15);  // 0.3 -> trunc(9.7) = 9; 1.9 -> trunc(16.1) = 16, clamped to 15
  float out[4];
  dequantize_int4(out, codes, &d, nullptr, 4, 4, QuantType::Int4);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 0.25f);
  EXPECT_EQ(out[3], 1.75f);
  // int4_asym: lo = -2, d = (1.9 + 2) / 15 = 0.26, q = trunc((x - lo) / d + 0.5)
  quantize_int4(codes, &d, &lo, x, 4, 4, QuantType::Int4Asym);
  EXPECT_EQ(lo, -2.0f);
  EXPECT_FLOAT_EQ(d, 3.9f / 15);
  EXPECT_EQ(codes[0] >> 4, 12);  // 3 / 0.26 = 11.54 -> 12
  EXPECT_EQ(codes[0] & 15, 0);
  EXPECT_EQ(codes[1] >> 4, 9);   // 2.3 / 0.26 = 8.85 -> 9
  EXPECT_EQ(codes[1] & 15, 15);
}

TEST(QuantInt4, WithinHalfAStepAndFakeQuantizationIsStoreThenDecode) {
  const int64_t rows = 13, cols = 72, n = rows * cols;  // blocks straddle rows; a short last block
  const auto w = random_weights(n, 3);
  for (QuantType t : {QuantType::Int4, QuantType::Int4Asym})
    for (int bs : {32, 64, 128}) {
      const QuantSpec spec{t, bs, false};
      std::vector<uint8_t> storage(quant_storage_bytes(spec, rows, cols) + 64);
      void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t(63));
      const QuantTensor q = quantize_weight(aligned, quant_storage_bytes(spec, rows, cols), w.data(), rows, cols, spec);
      std::vector<float> deq(static_cast<size_t>(n)), fake(static_cast<size_t>(n));
      dequantize_weight(deq.data(), q);
      fake_quantize_int4(fake.data(), w.data(), n, bs, t);
      EXPECT_EQ(0, std::memcmp(deq.data(), fake.data(), size_t(n) * 4)) << quant_type_name(t) << " " << bs;
      for (int64_t i = 0; i < n; ++i) {
        const float d = std::fabs(q.absmax[i / bs]);
        // half a step, plus the clamp of the top code (int4: +8 steps is not a code, 7.5 would round to it)
        EXPECT_LE(std::fabs(deq[size_t(i)] - w[size_t(i)]), (t == QuantType::Int4 ? 1.0f : 0.5f) * d * 1.0001f + 1e-7f)
            << quant_type_name(t) << " element " << i;
      }
      // the linear op reads the stored view to the same floats: the reference and every ISA's tiles
      const WeightView v = weight_view(q, 0);
      EXPECT_EQ(v.kind, WeightKind::Int4);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(ref::weight_at(v, r, c), deq[size_t(r * cols + c)]);
      for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
        if (!cpu_supports(isa)) continue;
        std::vector<float> tile(static_cast<size_t>(n)), scratch(cpu::dequantize_rows_scratch_floats(v, rows) + 1);
        cpu::dequantize_rows(tile.data(), v, 0, rows, scratch.data(), isa);
        EXPECT_EQ(0, std::memcmp(tile.data(), deq.data(), size_t(n) * 4)) << isa_name(isa);
      }
      // chunked quantization (converting a file chunk by chunk) writes the same bytes
      std::vector<float> scratch(quantize_chunked_scratch_floats(spec, rows, cols));
      std::vector<uint8_t> storage2(storage.size());
      void* aligned2 = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(storage2.data()) + 63) & ~uintptr_t(63));
      const QuantTensor q2 = quantize_weight_chunked(aligned2, quant_storage_bytes(spec, rows, cols), rows, cols, spec,
                                                     scratch.data(), scratch.size(), [&](float* dst, int64_t f, int64_t k) {
                                                       std::memcpy(dst, w.data() + f, size_t(k) * 4);
                                                     });
      EXPECT_EQ(0, std::memcmp(q2.codes, q.codes, size_t(n + 1) / 2));
      EXPECT_EQ(0, std::memcmp(q2.absmax, q.absmax, size_t(q.nblocks()) * 4));
      if (t == QuantType::Int4Asym) {
        EXPECT_EQ(0, std::memcmp(q2.mins, q.mins, size_t(q.nblocks()) * 4));
      }
    }
}

TEST(QuantInt4, BlockSizesAndNames) {
  EXPECT_EQ(parse_quant_type("int4"), QuantType::Int4);
  EXPECT_EQ(parse_quant_type("int4_asym"), QuantType::Int4Asym);
  for (int bs : {32, 64, 128, 4096}) EXPECT_NO_THROW(check_quant_spec({QuantType::Int4, bs, false}));
  for (int bs : {16, 48, 8192}) EXPECT_THROW(check_quant_spec({QuantType::Int4Asym, bs, false}), Error);
  EXPECT_THROW(check_quant_spec({QuantType::Int4, 64, true}), Error);  // no double quantization
  EXPECT_THROW(check_quant_spec({QuantType::NF4, 32, false}), Error);  // 32 is for int4 only
}

}  // namespace
}  // namespace lt
