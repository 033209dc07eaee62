// AVX-512 loops of convert.h, 16 elements per vector with masked tails. bf16 rounding is done in
// integer arithmetic (u + 0x7fff + lsb, NaN kept quiet) rather than with vcvtneps2bf16, which
// treats denormal inputs as zero and so would not match dtype.h bit for bit; the loop is memory
// bound either way. f16 uses vcvtps2ph / vcvtph2ps (round to nearest even, IEEE subnormals).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/convert.h"

namespace lt::cpu::avx512 {

namespace {
#include "kernels/cpu/bf16_round_avx512.inc"
}  // namespace

void f32_to_half(bool bf16, uint16_t* dst16, float* dst32, const float* src, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(k, src + i);
    const __m256i h = bf16 ? bf16_round(v) : _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (dst16) _mm256_mask_storeu_epi16(dst16 + i, k, h);
    if (dst32) _mm512_mask_storeu_ps(dst32 + i, k, bf16 ? bf16_widen(h) : _mm512_cvtph_ps(h));
  }
}

void half_to_f32(bool bf16, float* dst, const uint16_t* src, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m256i h = _mm256_maskz_loadu_epi16(k, src + i);
    _mm512_mask_storeu_ps(dst + i, k, bf16 ? bf16_widen(h) : _mm512_cvtph_ps(h));
  }
}

namespace {

// hi = bf16(v), lo = bf16(v - hi) (0 where v == hi: ±Inf gives 0, not NaN)
inline void store_split(uint16_t* hi, uint16_t* lo, __mmask16 k, __m512 v) {
  const __m256i h = bf16_round(v);
  const __m512 r = bf16_widen(h);
  const __m512 d = _mm512_maskz_sub_ps(~_mm512_cmp_ps_mask(v, r, _CMP_EQ_OQ), v, r);
  _mm256_mask_storeu_epi16(hi + 0, k, h);
  _mm256_mask_storeu_epi16(lo + 0, k, bf16_round(d));
}

}  // namespace

bool bf16_split(uint16_t* hi, uint16_t* lo, const float* src, size_t n) {
  __mmask16 inf = 0;
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(k, src + i);
    inf |= _mm512_fpclass_ps_mask(v, 0x18);  // +Inf, -Inf
    store_split(hi + i, lo + i, k, v);
  }
  return inf != 0;
}

}  // namespace lt::cpu::avx512
