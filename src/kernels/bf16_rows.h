// bf16 rows kept in place in an f32 buffer (the fused loss's dlogits, kernels/backward.h
// lm_head_loss_bf16): a row of n floats rounded to bf16 occupies the row's first 2n bytes, so the
// bf16 matrix has a row stride of twice the f32 one (in elements). Written front to back in blocks
// of 16, each block's floats loaded before its halves are stored: a store only overwrites floats
// already read. memcpy keeps the aliasing defined (the buffer is read as float and as uint16_t).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace lt {

// row[0..n) f32 -> bf16 (round to nearest even, core/dtype.h), stored at the row's first 2n bytes.
inline void round_row_bf16_inplace(float* row, size_t n) {
  auto* bytes = reinterpret_cast<unsigned char*>(row);
  constexpr size_t B = 16;
  for (size_t i = 0; i < n; i += B) {
    const size_t k = n - i < B ? n - i : B;
    float f[B];
    uint16_t h[B];
    std::memcpy(f, bytes + i * sizeof(float), k * sizeof(float));
    for (size_t j = 0; j < k; j++) h[j] = f32_to_bf16(f[j]);
    std::memcpy(bytes + i * sizeof(uint16_t), h, k * sizeof(uint16_t));
  }
}

// Element i of a row rounded in place by round_row_bf16_inplace, widened to f32.
inline float bf16_row_at(const float* row, size_t i) {
  uint16_t h;
  std::memcpy(&h, reinterpret_cast<const unsigned char*>(row) + i * sizeof(uint16_t), sizeof h);
  return bf16_to_f32(h);
}

}  // namespace lt
