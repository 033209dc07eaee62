// quant/int4.h: ggml's q4_0 / q4_1 reference quantizers on f32 scales, and their decoding.
#include "quant/int4.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lt {

namespace {

struct Block {
  float d = 0, lo = 0, id = 0;
};

// One block's scale (and minimum) as ggml computes them.
Block block_params(const float* x, int64_t n, QuantType t) {
  Block b;
  if (t == QuantType::Int4) {
    float amax = 0, m = 0;
    for (int64_t i = 0; i < n; ++i)
      if (amax < std::fabs(x[i])) amax = std::fabs(x[i]), m = x[i];
    b.d = m / -8.0f;
  } else {
    float lo = x[0], hi = x[0];
    for (int64_t i = 1; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
    b.d = (hi - lo) / 15.0f;
    b.lo = lo;
  }
  b.id = b.d != 0 ? 1.0f / b.d : 0.0f;
  return b;
}

int code_of(float x, const Block& b, QuantType t) {
  const float v = t == QuantType::Int4 ? x * b.id + 8.5f : (x - b.lo) * b.id + 0.5f;
  return std::min(15, int(int8_t(v)));  // ggml's (int8_t) truncation, then the clamp
}

// The decoded value of code q: table[q]·d, rounded, then + lo (int4_asym)
float decode(int q, float d, float lo, QuantType t) {
  const float v = int4_code_table(t)[q] * d;
  return t == QuantType::Int4 ? v : v + lo;
}

void check_args(int64_t n, int blocksize, QuantType t) {
  LT_CHECK(is_int4(t) && n >= 0 && blocksize > 0, "int4: {} over {} elements in blocks of {}", quant_type_name(t), n,
           blocksize);
}

}  // namespace

const float* int4_code_table(QuantType t) {
  static const float sym[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
  static const float asym[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  LT_CHECK(is_int4(t), "int4_code_table: {} is not an integer 4-bit format", quant_type_name(t));
  return t == QuantType::Int4 ? sym : asym;
}

void quantize_int4(uint8_t* codes, float* scales, float* mins, const float* x, int64_t n, int blocksize, QuantType t) {
  check_args(n, blocksize, t);
  for (int64_t b0 = 0, blk = 0; b0 < n; b0 += blocksize, ++blk) {
    const int64_t len = std::min<int64_t>(blocksize, n - b0);
    const Block b = block_params(x + b0, len, t);
    scales[blk] = b.d;
    if (t == QuantType::Int4Asym) mins[blk] = b.lo;
    for (int64_t i = b0; i < b0 + len; ++i) {
      const uint8_t q = uint8_t(code_of(x[i], b, t));
      codes[i >> 1] = (i & 1) ? uint8_t((codes[i >> 1] & 0xF0) | q) : uint8_t(q << 4);
    }
  }
}

void fake_quantize_int4(float* out, const float* x, int64_t n, int blocksize, QuantType t) {
  check_args(n, blocksize, t);
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t b0 = 0; b0 < n; b0 += blocksize) {
    const int64_t len = std::min<int64_t>(blocksize, n - b0);
    const Block b = block_params(x + b0, len, t);
    for (int64_t i = b0; i < b0 + len; ++i) out[i] = decode(code_of(x[i], b, t), b.d, b.lo, t);
  }
}

void dequantize_int4(float* out, const uint8_t* codes, const float* scales, const float* mins, int64_t n,
                     int blocksize, QuantType t) {
  check_args(n, blocksize, t);
  for (int64_t i = 0; i < n; ++i) {
    const int q = (i & 1) ? (codes[i >> 1] & 15) : (codes[i >> 1] >> 4);
    const int64_t blk = i / blocksize;
    out[i] = decode(q, scales[blk], t == QuantType::Int4Asym ? mins[blk] : 0.0f, t);
  }
}

}  // namespace lt
