// llama.cpp's q8_0 weight format (ggml's block_q8_0): the matrix flattened row-major in blocks of 32
// elements, each stored as its f16 scale d followed by its 32 int8 codes (34 bytes, unaligned), so a
// q8_0 tensor of a GGUF file is this storage byte for byte (read in place, nothing decoded).
//   quantize   amax = max |x|, d = amax / 127, id = d ? 1/d : 0, q = roundf(x·id) (half away from
//              zero); d stored as f16                                   (ggml's quantize_row_q8_0_ref)
//   decode     float(q) · f16_to_f32(d) (exact in f32: 8 × 11 significant bits)
#pragma once
#include <cstddef>
#include <cstdint>

namespace lt {

inline constexpr int kQ8Block = 32;          // elements per block
inline constexpr size_t kQ8BlockBytes = 34;  // f16 scale + 32 int8

// x (n, a multiple of 32) -> n / 32 blocks at out.
void quantize_q8_0(const float* x, int64_t n, uint8_t* out);
// n / 32 blocks -> y (n).
void dequantize_q8_0(const uint8_t* in, int64_t n, float* y);

}  // namespace lt
