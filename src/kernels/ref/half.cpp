// Reference conversions between f32 and the 16-bit types of mixed precision (bf16, f16): one
// element at a time through core/dtype.h's exact conversions, rounding to nearest even.
#include "core/dtype.h"
#include "kernels/ref/ref.h"

namespace lt::ref {

static uint16_t round_one(DType t, float x) { return t == DType::BF16 ? f32_to_bf16(x) : f32_to_f16(x); }
static float widen_one(DType t, uint16_t h) { return t == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h); }

void round_half(DType t, uint16_t* dst16, float* dst32, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = round_one(t, src[i]);
    dst16[i] = h;
    if (dst32) dst32[i] = widen_one(t, h);
  }
}

void widen_half(DType t, float* dst, const uint16_t* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = widen_one(t, src[i]);
}

}  // namespace lt::ref
