// kernels/q8_0_act.h: the q8_0 product's input quantization.
#include "kernels/q8_0_act.h"

#include <cmath>

#include "core/dtype.h"

namespace lt {

// one block of 32: codes into q, the f16-rounded scale returned
static float quantize_block(const float* x, int8_t* q) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  for (int j = 0; j < 32; ++j) q[j] = int8_t(std::nearbyint(x[j] * id));  // the default mode: to nearest even
  return f16_to_f32(f32_to_f16(amax / 127.0f));
}

void quantize_act_q8_0(const float* x, int64_t n, int8_t* q, float* d) {
  for (int64_t b = 0; b < n / 32; ++b) d[b] = quantize_block(x + b * 32, q + b * 32);
}

void fake_quantize_act_q8_0(const float* x, int64_t n, float* out) {
  int8_t q[32];
  for (int64_t b = 0; b < n / 32; ++b) {
    const float d = quantize_block(x + b * 32, q);
    for (int j = 0; j < 32; ++j) out[b * 32 + j] = float(q[j]) * d;
  }
}

}  // namespace lt
