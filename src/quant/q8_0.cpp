// quant/q8_0.h: ggml's q8_0 reference quantizer and its decoding.
#include "quant/q8_0.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace lt {

void quantize_q8_0(const float* x, int64_t n, uint8_t* out) {
  LT_CHECK(n % kQ8Block == 0, "q8_0: {} elements are not whole blocks of {}", n, kQ8Block);
  for (int64_t b = 0; b < n / kQ8Block; ++b, x += kQ8Block, out += kQ8BlockBytes) {
    float amax = 0.0f;
    for (int j = 0; j < kQ8Block; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = f32_to_f16(d);
    std::memcpy(out, &dh, 2);
    for (int j = 0; j < kQ8Block; ++j) out[2 + j] = uint8_t(int8_t(std::roundf(x[j] * id)));
  }
}

void dequantize_q8_0(const uint8_t* in, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQ8Block; ++b, in += kQ8BlockBytes, y += kQ8Block) {
    uint16_t dh;
    std::memcpy(&dh, in, 2);
    const float d = f16_to_f32(dh);
    for (int j = 0; j < kQ8Block; ++j) y[j] = float(int8_t(in[2 + j])) * d;
  }
}

}  // namespace lt
