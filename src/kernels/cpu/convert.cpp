// f32 <-> bf16 / f16 array conversions (convert.h): dispatch, the scalar loops (dtype.h) and the
// split of large arrays over the OpenMP team.
#include "kernels/cpu/convert.h"

#include <algorithm>

#include "core/cpu_features.h"
#include "core/error.h"

namespace lt::cpu {

namespace {

constexpr size_t kParallelMin = size_t(1) << 16;  // below this one thread converts
constexpr size_t kBlock = size_t(1) << 14;        // elements per scheduled block

void scalar_to_half(bool bf16, uint16_t* d16, float* d32, const float* s, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = bf16 ? f32_to_bf16(s[i]) : f32_to_f16(s[i]);
    if (d16) d16[i] = h;
    if (d32) d32[i] = bf16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
}

void scalar_to_f32(bool bf16, float* d, const uint16_t* s, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = bf16 ? bf16_to_f32(s[i]) : f16_to_f32(s[i]);
}

bool is_bf16(DType t) {
  LT_CHECK(t == DType::BF16 || t == DType::F16, "16-bit conversion: {} is not bf16 or f16", dtype_name(t));
  return t == DType::BF16;
}

// Runs fn(lo, hi) over [0, n) in blocks, in parallel when n is large.
template <class Fn>
void blocks(size_t n, Fn fn) {
  const ptrdiff_t nb = ptrdiff_t((n + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (ptrdiff_t b = 0; b < nb; ++b) fn(size_t(b) * kBlock, std::min(n, size_t(b + 1) * kBlock));
}

}  // namespace

void f32_to_half(DType t, uint16_t* dst16, float* dst32, const float* src, size_t n) {
  const bool bf16 = is_bf16(t);
  const Isa isa = cpu_isa();
  blocks(n, [&](size_t lo, size_t hi) {
    uint16_t* d16 = dst16 ? dst16 + lo : nullptr;
    float* d32 = dst32 ? dst32 + lo : nullptr;
    if (isa == Isa::Avx512) avx512::f32_to_half(bf16, d16, d32, src + lo, hi - lo);
    else if (isa == Isa::Avx2) avx2::f32_to_half(bf16, d16, d32, src + lo, hi - lo);
    else scalar_to_half(bf16, d16, d32, src + lo, hi - lo);
  });
}

void f32_to_half_serial(Isa isa, bool bf16, uint16_t* dst16, float* dst32, const float* src, size_t n) {
  if (isa == Isa::Avx512) avx512::f32_to_half(bf16, dst16, dst32, src, n);
  else if (isa == Isa::Avx2) avx2::f32_to_half(bf16, dst16, dst32, src, n);
  else scalar_to_half(bf16, dst16, dst32, src, n);
}

void half_to_f32_serial(Isa isa, bool bf16, float* dst, const uint16_t* src, size_t n) {
  if (isa == Isa::Avx512) avx512::half_to_f32(bf16, dst, src, n);
  else if (isa == Isa::Avx2) avx2::half_to_f32(bf16, dst, src, n);
  else scalar_to_f32(bf16, dst, src, n);
}

void f32_to_half_rows(DType t, uint16_t* dst, size_t dld, const float* src, size_t sld, size_t rows, size_t cols) {
  const bool bf16 = is_bf16(t);
  const Isa isa = cpu_isa();
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
  for (ptrdiff_t r = 0; r < ptrdiff_t(rows); ++r) {
    uint16_t* d = dst + size_t(r) * dld;
    const float* s = src + size_t(r) * sld;
    if (isa == Isa::Avx512) avx512::f32_to_half(bf16, d, nullptr, s, cols);
    else if (isa == Isa::Avx2) avx2::f32_to_half(bf16, d, nullptr, s, cols);
    else scalar_to_half(bf16, d, nullptr, s, cols);
  }
}

void half_to_f32(DType t, float* dst, const uint16_t* src, size_t n) {
  const bool bf16 = is_bf16(t);
  const Isa isa = cpu_isa();
  blocks(n, [&](size_t lo, size_t hi) {
    if (isa == Isa::Avx512) avx512::half_to_f32(bf16, dst + lo, src + lo, hi - lo);
    else if (isa == Isa::Avx2) avx2::half_to_f32(bf16, dst + lo, src + lo, hi - lo);
    else scalar_to_f32(bf16, dst + lo, src + lo, hi - lo);
  });
}

}  // namespace lt::cpu
