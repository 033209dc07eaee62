// llama.cpp's q4_0 weight format (ggml's block_q4_0): the matrix flattened row-major in blocks of 32
// elements, each stored as its f16 scale d followed by 16 bytes of codes (18 bytes, unaligned): byte j
// holds element j in its low nibble and element j + 16 in its high one, so a q4_0 tensor of a GGUF
// file is this storage byte for byte (read in place, nothing decoded).
//   quantize   m = the element of largest |x| (the first on ties), d = m / −8, id = d ? 1/d : 0,
//              q = min(15, trunc(x·id + 8.5)); d stored as f16          (ggml's quantize_row_q4_0_ref)
//   decode     float(q − 8) · f16_to_f32(d) (exact in f32)
// Unlike Int4 (quant/int4.h: the same grid, but an f32 scale, any block size and NF4's nibble order),
// this is the GGUF storage itself.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lt {

inline constexpr int kQ4_0Block = 32;          // elements per block
inline constexpr size_t kQ4_0BlockBytes = 18;  // f16 scale + 16 bytes of nibbles

// x (n, a multiple of 32) -> n / 32 blocks at out.
void quantize_q4_0(const float* x, int64_t n, uint8_t* out);
// n / 32 blocks -> y (n).
void dequantize_q4_0(const uint8_t* in, int64_t n, float* y);

}  // namespace lt
