// AVX2 + F16C loops of convert.h, 8 elements per vector, the last n % 8 by dtype.h's scalar
// conversions. The same arithmetic as convert_avx512.cpp: bf16 rounded in integer arithmetic
// (u + 0x7fff + lsb, NaN kept quiet), f16 with vcvtps2ph / vcvtph2ps (round to nearest even, IEEE
// subnormals), so every ISA gives dtype.h's bits. Without these, AVX2 machines converted one
// element per call (f16 prefill on a Zen 3 core spent 38% of its time widening weight tiles).
#include <immintrin.h>

#include "kernels/cpu/convert.h"

namespace lt::cpu::avx2 {

namespace {

inline __m128i bf16_round(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  // NaN (|u| > Inf, a signed compare is right: |u| < 2^31): the top half with the quiet bit set
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
  const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  r = _mm256_blendv_epi8(r, q, nan);
  // 8 values < 2^16 to 16 bits: pack within the 128-bit lanes, then gather the two lanes' low halves
  const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  return _mm256_castsi256_si128(p);
}

inline __m256 bf16_widen(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }

}  // namespace

void f32_to_half(bool bf16, uint16_t* dst16, float* dst32, const float* src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {  // in place (dst16 on src's bytes): each 8 are loaded before stored
    const __m256 v = _mm256_loadu_ps(src + i);
    const __m128i h = bf16 ? bf16_round(v) : _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (dst16) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst16 + i), h);
    if (dst32) _mm256_storeu_ps(dst32 + i, bf16 ? bf16_widen(h) : _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) {
    const uint16_t h = bf16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
    if (dst16) dst16[i] = h;
    if (dst32) dst32[i] = bf16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
}

void half_to_f32(bool bf16, float* dst, const uint16_t* src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, bf16 ? bf16_widen(h) : _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = bf16 ? bf16_to_f32(src[i]) : f16_to_f32(src[i]);
}

}  // namespace lt::cpu::avx2
