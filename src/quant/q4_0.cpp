// quant/q4_0.h: ggml's q4_0 reference quantizer and its decoding.
#include "quant/q4_0.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace lt {

void quantize_q4_0(const float* x, int64_t n, uint8_t* out) {
  LT_CHECK(n % kQ4_0Block == 0, "q4_0: {} elements are not whole blocks of {}", n, kQ4_0Block);
  for (int64_t b = 0; b < n / kQ4_0Block; ++b, x += kQ4_0Block, out += kQ4_0BlockBytes) {
    float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, with its sign
    for (int j = 0; j < kQ4_0Block; ++j)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]), max = x[j];
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = f32_to_f16(d);
    std::memcpy(out, &dh, 2);
    for (int j = 0; j < kQ4_0Block / 2; ++j) {  // element j in the low nibble, j + 16 in the high one
      const int lo = std::min(15, int(int8_t(x[j] * id + 8.5f)));
      const int hi = std::min(15, int(int8_t(x[j + kQ4_0Block / 2] * id + 8.5f)));
      out[2 + j] = uint8_t(lo | (hi << 4));
    }
  }
}

void dequantize_q4_0(const uint8_t* in, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQ4_0Block; ++b, in += kQ4_0BlockBytes, y += kQ4_0Block) {
    uint16_t dh;
    std::memcpy(&dh, in, 2);
    const float d = f16_to_f32(dh);
    for (int j = 0; j < kQ4_0Block / 2; ++j) {
      y[j] = float((in[2 + j] & 0x0f) - 8) * d;
      y[j + kQ4_0Block / 2] = float((in[2 + j] >> 4) - 8) * d;
    }
  }
}

}  // namespace lt
