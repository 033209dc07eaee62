// Array conversions between f32 and the 16-bit float types (bf16, f16) for mixed-precision
// training: activations saved for the backward, gradients fed to 16-bit GEMMs, working copies of
// trainable weights. Round to nearest, ties to even, bit-identical to dtype.h's scalar
// conversions (NaN stays a quiet NaN, overflow becomes Inf). AVX-512 or AVX2 + F16C loops per the
// ISA (convert_avx512.cpp, convert_avx2.cpp), the scalar ones otherwise; large arrays are split over the OpenMP team.
// Usage: cpu::f32_to_half(DType::BF16, x16, nullptr, x, n); cpu::half_to_f32(DType::BF16, x, x16, n);
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/cpu_features.h"
#include "core/dtype.h"

namespace lt::cpu {

// dst16[i] = t(src[i]) for i < n, t = BF16 or F16; dst32[i] = float(dst16[i]) (the value rounded to
// t, exact in f32). Either output may be null; dst32 may equal src (rounds in place).
void f32_to_half(DType t, uint16_t* dst16, float* dst32, const float* src, size_t n);
// dst rows (row stride dld) = src rows (row stride sld) rounded to t, `cols` values each, rows over the team.
void f32_to_half_rows(DType t, uint16_t* dst, size_t dld, const float* src, size_t sld, size_t rows, size_t cols);

// dst[i] = float(src[i]) for i < n, src of type t = BF16 or F16 (exact).
void half_to_f32(DType t, float* dst, const uint16_t* src, size_t n);

// The same on the calling thread only, with the loop of ISA level isa (the same bits at every
// level): for kernels already inside their own parallel loop (no OpenMP region per call).
void f32_to_half_serial(Isa isa, bool bf16, uint16_t* dst16, float* dst32, const float* src, size_t n);
void half_to_f32_serial(Isa isa, bool bf16, float* dst, const uint16_t* src, size_t n);

namespace avx512 {  // one thread's range; called only when cpu_isa() == Avx512
// dst16 may also be src's own bytes (in place, as kernels/bf16_rows.h): each block of 16 is loaded
// before its halves are stored, at half its byte offset.
void f32_to_half(bool bf16, uint16_t* dst16, float* dst32, const float* src, size_t n);
void half_to_f32(bool bf16, float* dst, const uint16_t* src, size_t n);
// The bf16 split of n values v: hi[i] = bf16(v), lo[i] = bf16(v - hi), with lo = 0 where v == hi
// (±Inf). For f16 values both parts are exact (kernels/cpu/half_linear.cpp). Returns whether any v
// is ±Inf.
bool bf16_split(uint16_t* hi, uint16_t* lo, const float* src, size_t n);
}  // namespace avx512

namespace avx2 {  // the same, called only when cpu_isa() >= Avx2 (AVX2 + FMA + F16C)
void f32_to_half(bool bf16, uint16_t* dst16, float* dst32, const float* src, size_t n);
void half_to_f32(bool bf16, float* dst, const uint16_t* src, size_t n);
}  // namespace avx2

}  // namespace lt::cpu
