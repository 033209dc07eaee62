// Element types and exact conversions. bf16 and f16 are stored as uint16_t; conversions from f32
// round to nearest, ties to even, and keep NaN a NaN (quiet) and Inf an Inf.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace lt {

enum class DType : uint8_t { F32, F16, BF16, I32, I64, U8, I8 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float bf16_to_f32(uint16_t h) { return bits_f32(uint32_t(h) << 16); }
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// True when every value of the f16 array h[0, n) is exactly a finite bf16: ±0 or at most 8
// significant bits (a normal f16 whose 3 low mantissa bits are zero, or such a subnormal). An f16
// converted from a finite bf16 checkpoint always is. Inf and NaN count as not exact: the split
// GEMM that relies on this would make Inf · (a zero low part) a NaN where x · Inf is Inf.
bool f16_values_are_bf16(const uint16_t* h, size_t n);

// Converts n elements of type `t` at `src` to f32 in `dst`.
void convert_to_f32(float* dst, const void* src, DType t, size_t n);

}  // namespace lt
