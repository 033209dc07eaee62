// GGUF writer: the q8_0 / q4_0 block quantizers against a per-element scalar reference of ggml's
// formulas, their round-trip error bounds, the q/k row permutation, and the file layout
// (header, counts, 32-byte aligned data) with its errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "model/gguf_export.h"
#include "io/gguf_writer.h"
#include "io_test_util.h"

namespace lt::gguf {
namespace {

// 4 blocks of random values, one all-zero block, one whose largest magnitude is negative.
std::vector<float> sample(int blocks, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(blocks) * kBlock);
  for (auto& v : x) v = nd(rng);
  std::fill(x.begin() + 4 * kBlock, x.begin() + 5 * kBlock, 0.0f);
  x[5 * kBlock + 7] = -9.0f;
  return x;
}

uint16_t scale_of(const uint8_t* block) {
  uint16_t d;
  std::memcpy(&d, block, 2);
  return d;
}

// ggml's q8_0, one element at a time: d = amax/127 stored as f16, q = round(x / d) as int8.
std::vector<uint8_t> ref_q8_0(const std::vector<float>& x) {
  std::vector<uint8_t> out;
  for (size_t b = 0; b < x.size() / kBlock; ++b) {
    float amax = 0;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[b * kBlock + j]));
    const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
    const uint16_t dh = f32_to_f16(d);
    out.push_back(uint8_t(dh & 0xff));
    out.push_back(uint8_t(dh >> 8));
    for (int j = 0; j < kBlock; ++j) out.push_back(uint8_t(int8_t(std::lround(x[b * kBlock + j] * id))));
  }
  return out;
}

// ggml's q4_0: d = (signed value of largest magnitude) / -8, q = clamp(trunc(x/d + 8.5), 15);
// byte j holds element j in its low nibble and element j + 16 in its high nibble.
std::vector<uint8_t> ref_q4_0(const std::vector<float>& x) {
  std::vector<uint8_t> out;
  for (size_t b = 0; b < x.size() / kBlock; ++b) {
    const float* v = &x[b * kBlock];
    float amax = 0, max = 0;
    for (int j = 0; j < kBlock; ++j)
      if (std::fabs(v[j]) > amax) amax = std::fabs(v[j]), max = v[j];
    const float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
    const uint16_t dh = f32_to_f16(d);
    out.push_back(uint8_t(dh & 0xff));
    out.push_back(uint8_t(dh >> 8));
    int q[kBlock];
    for (int j = 0; j < kBlock; ++j) q[j] = std::min(15, int(v[j] * id + 8.5f));
    for (int j = 0; j < kBlock / 2; ++j) out.push_back(uint8_t(q[j] | (q[j + 16] << 4)));
  }
  return out;
}

TEST(GgufQuant, Q8_0MatchesScalarReference) {
  const auto x = sample(6, 1);
  std::vector<uint8_t> got(type_bytes(TensorType::Q8_0, int64_t(x.size())));
  quantize_q8_0(x.data(), int64_t(x.size()), got.data());
  EXPECT_EQ(got, ref_q8_0(x));
  EXPECT_EQ(scale_of(&got[4 * kQ8Bytes]), 0);  // the zero block: scale 0, all q 0
}

TEST(GgufQuant, Q4_0MatchesScalarReference) {
  const auto x = sample(6, 2);
  std::vector<uint8_t> got(type_bytes(TensorType::Q4_0, int64_t(x.size())));
  quantize_q4_0(x.data(), int64_t(x.size()), got.data());
  EXPECT_EQ(got, ref_q4_0(x));
  // the block whose extreme is -9: d = 9/8 > 0 and -9 maps to q = 0 (low nibble of byte 7)
  EXPECT_NEAR(f16_to_f32(scale_of(&got[5 * kQ4Bytes])), 9.0f / 8.0f, 1e-3);
  EXPECT_EQ(got[5 * kQ4Bytes + 2 + 7] & 0x0f, 0);
}

// q8_0: |x - q·d16| <= |x - q·d| + |q|·|d - d16| <= d/2 + 127·d·2^-11 (f16 keeps 11 significant
// bits, so rounding d to f16 moves it by at most d·2^-11). q4_0: the step is |d| and the codes
// -8..7 cover [-8|d|, 7|d|] from the extreme side, so the same bound with 8 for 127, except the
// element at +8|d| on the far side, clamped to 7: error |d| (+ f16 term).
TEST(GgufQuant, DequantizedWithinHalfAStep) {
  const auto x = sample(6, 3);
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> q8(type_bytes(TensorType::Q8_0, n)), q4(type_bytes(TensorType::Q4_0, n));
  std::vector<float> y8(x.size()), y4(x.size());
  quantize_q8_0(x.data(), n, q8.data());
  dequantize_q8_0(q8.data(), n, y8.data());
  quantize_q4_0(x.data(), n, q4.data());
  dequantize_q4_0(q4.data(), n, y4.data());
  for (size_t b = 0; b < x.size() / kBlock; ++b) {
    float amax = 0;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[b * kBlock + j]));
    const float d8 = amax / 127, d4 = amax / 8, f16 = 1.0f / 2048;
    for (int j = 0; j < kBlock; ++j) {
      const size_t i = b * kBlock + j;
      EXPECT_LE(std::fabs(x[i] - y8[i]), d8 * (0.5f + 127 * f16) + 1e-7f) << i;
      EXPECT_LE(std::fabs(x[i] - y4[i]), d4 * (1.0f + 8 * f16) + 1e-7f) << i;
    }
  }
  EXPECT_GT(std::fabs(y8[3]), 0.0f);  // not all zero
}

TEST(GgufPermute, HalvesToInterleavedPerHead) {
  // 2 heads of size 4, one column: head rows (a0 a1 b0 b1) -> (a0 b0 a1 b1)
  const float w[8] = {0, 1, 2, 3, 10, 11, 12, 13};
  const auto p = permute_qk(w, 8, 1, 2);
  EXPECT_EQ(p, (std::vector<float>{0, 2, 1, 3, 10, 12, 11, 13}));
  const float w2[8] = {0, 1, 2, 3, 4, 5, 6, 7};  // 4 rows x 2 columns: rows move whole
  EXPECT_EQ(permute_qk(w2, 4, 2, 1), (std::vector<float>{0, 1, 4, 5, 2, 3, 6, 7}));
  EXPECT_LT_ERROR(permute_qk(w, 6, 1, 2), {"6", "2 heads"});
}

TEST(GgufWriter, HeaderCountsAndAlignment) {
  test::TempDir dir;
  Writer w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 3);
  const std::vector<float> a(5, 1.5f), b(64, -2.0f);
  w.add_tensor("a", {5}, a.data(), TensorType::F32);
  w.add_tensor("b", {2, 32}, b.data(), TensorType::Q8_0);
  w.write(dir / "m.gguf");
  const std::string s = read_text_file(dir / "m.gguf");
  ASSERT_GE(s.size(), 24u);
  uint32_t magic, version;
  uint64_t nt, nkv;
  std::memcpy(&magic, s.data(), 4), std::memcpy(&version, s.data() + 4, 4);
  std::memcpy(&nt, s.data() + 8, 8), std::memcpy(&nkv, s.data() + 16, 8);
  EXPECT_EQ(s.substr(0, 4), "GGUF");
  EXPECT_EQ(version, 3u);
  EXPECT_EQ(nt, 2u);
  EXPECT_EQ(nkv, 2u);
  // data: a (20 bytes, padded to 32) then b (2 blocks of 34 bytes = 68, padded to 96)
  EXPECT_EQ(s.size() % kAlignment, 0u);
  const size_t data = s.size() - 32 - 96;
  float a0;
  std::memcpy(&a0, s.data() + data, 4);
  EXPECT_EQ(a0, 1.5f);
  EXPECT_EQ(scale_of(reinterpret_cast<const uint8_t*>(s.data()) + data + 32), f32_to_f16(2.0f / 127.0f))
      << "q8_0 scale of a block of -2s";
  EXPECT_EQ(int8_t(s[data + 32 + 2]), -127);
  EXPECT_EQ(std::filesystem::directory_iterator(dir.path)->path().filename(), "m.gguf");  // no temp file left
}

TEST(GgufWriter, Errors) {
  Writer w;
  const std::vector<float> x(48, 0.0f);
  EXPECT_LT_ERROR(w.add_tensor("blk.0.ffn_down.weight", {1, 48}, x.data(), TensorType::Q4_0),
                  {"blk.0.ffn_down.weight", "48", "32", "q4_0"});
  EXPECT_LT_ERROR(parse_type("q5_k"), {"q5_k", "q8_0"});
  EXPECT_LT_ERROR(w.write("/nonexistent_dir_lt/m.gguf"), {"/nonexistent_dir_lt/m.gguf"});
}

}  // namespace
}  // namespace lt::gguf
