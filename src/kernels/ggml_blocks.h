// llama.cpp's block weight kinds (WeightKind::Q8_0 and Q4_0, kernels/linear.h) element by element, for
// the loops that read them one value at a time (the reference, the scalar decode, the tile decode).
// Both are rows of whole blocks of 32 elements, each block an f16 scale d (2 bytes, little-endian)
// then its codes:
//   Q8_0  34 bytes: 32 int8 q; element j is q[j]
//   Q4_0  18 bytes: 16 bytes of nibbles; element j is (low nibble of byte j) − 8 for j < 16, (high
//         nibble of byte j − 16) − 8 else
// and the element's value is float(code) · f16_to_f32(d).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/linear.h"

namespace lt {

inline bool ggml_block_kind(WeightKind k) { return k == WeightKind::Q8_0 || k == WeightKind::Q4_0; }
inline size_t ggml_block_bytes(WeightKind k) { return k == WeightKind::Q8_0 ? 34 : 18; }
// block b of the weight (row-major, blocks of 32)
inline const uint8_t* ggml_block(const WeightView& w, int64_t b) {
  return static_cast<const uint8_t*>(w.data) + size_t(b) * ggml_block_bytes(w.kind);
}
inline float ggml_block_scale(const uint8_t* blk) { return f16_to_f32(uint16_t(blk[0] | (blk[1] << 8))); }
// the integer code of element j (0..31) of block blk
inline int ggml_block_code(WeightKind k, const uint8_t* blk, int j) {
  if (k == WeightKind::Q8_0) return int8_t(blk[2 + j]);
  return j < 16 ? (blk[2 + j] & 15) - 8 : (blk[2 + j - 16] >> 4) - 8;
}

}  // namespace lt
