// AVX2 versions of the dequantization inner loops (dequant_kernels.h): 4-bit codes looked up 8 at a
// time (two vpermps over the 16-entry table, blended on bit 3), int8 rows widened and scaled.
// Compiled with the AVX2 flags (file name suffix); called only for an
// isa this CPU supports (dequantize_rows checks cpu_supports).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/linear.h"
#include "kernels/cpu/dequant_kernels.h"
#include "kernels/ggml_blocks.h"

namespace lt::cpu::dequant::avx2 {
namespace {
#include "kernels/cpu/ggml_codes.inc"
}  // namespace

void dequant4(float* out, const uint8_t* codes, int64_t f0, int64_t n, const float* scales, int64_t b_first,
              int blocksize, const float* table16) {
  const __m256 tab_lo = _mm256_loadu_ps(table16), tab_hi = _mm256_loadu_ps(table16 + 8);
  const __m128i low4 = _mm_set1_epi8(15);
  const int64_t fend = f0 + n;
  int64_t f = f0;
  while (f < fend) {  // one block segment at a time: its scale is constant
    const int64_t blk = f / blocksize, seg_end = std::min(fend, (blk + 1) * blocksize);
    const float s = scales[blk - b_first];
    const __m256 vs = _mm256_set1_ps(s);
    if (f & 1) {
      out[f - f0] = table16[codes[f >> 1] & 15] * s;
      ++f;
    }
    for (; f + 8 <= seg_end; f += 8) {
      int32_t w32;
      std::memcpy(&w32, codes + (f >> 1), 4);
      const __m128i raw = _mm_cvtsi32_si128(w32);
      const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low4);
      const __m128i lo = _mm_and_si128(raw, low4);
      const __m256i idx = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(hi, lo));
      const __m256 a = _mm256_permutevar8x32_ps(tab_lo, idx), b = _mm256_permutevar8x32_ps(tab_hi, idx);
      const __m256 v = _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
      _mm256_storeu_ps(out + (f - f0), _mm256_mul_ps(v, vs));
    }
    for (; f < seg_end; ++f) {
      const uint8_t byte = codes[f >> 1];
      out[f - f0] = table16[(f & 1) ? (byte & 15) : (byte >> 4)] * s;
    }
  }
}

void dequant8(float* out, const int8_t* q, const float* row_absmax, int64_t rows, int64_t cols) {
  const __m256 inv = _mm256_set1_ps(kInt8Inv127);
  for (int64_t r = 0; r < rows; ++r) {
    const float sr = row_absmax[r];
    const __m256 s = _mm256_set1_ps(sr);
    const int8_t* qr = q + r * cols;
    float* o = out + r * cols;
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qr + c));
      const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
      _mm256_storeu_ps(o + c, _mm256_mul_ps(_mm256_mul_ps(v, s), inv));
    }
    for (; c < cols; ++c) o[c] = (float(qr[c]) * sr) * kInt8Inv127;
  }
}

void int8_gemm(float* y, const int8_t* xq, const float* x_absmax, const int8_t* wq, const float* w_absmax, int T,
               int IC, int OC) {
  const __m256i ones = _mm256_set1_epi16(1);
#pragma omp parallel for schedule(static) if (int64_t(T) * IC * OC >= kParallelMin)
  for (int o = 0; o < OC; ++o) {
    const int8_t* w = wq + int64_t(o) * IC;
    for (int t = 0; t < T; ++t) {
      const int8_t* x = xq + int64_t(t) * IC;
      __m256i acc = _mm256_setzero_si256();
      int c = 0;
      for (; c + 32 <= IC; c += 32) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c));
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + c));
        // |w| <= 128, |x| <= 127 (the activations are clamped): a pair sums to at most 32512, no saturation
        const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, ones));
      }
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
      int32_t s = _mm_cvtsi128_si32(s4);
      for (; c < IC; ++c) s += int32_t(x[c]) * int32_t(w[c]);
      y[int64_t(t) * OC + o] = float(s) * ((x_absmax[t] * w_absmax[o]) * kInt8Inv127Sq);
    }
  }
}

void dequant_ggml(float* out, const uint8_t* blocks, int64_t nblocks, bool q4) {
  const size_t bytes = q4 ? 18 : 34;
  for (int64_t b = 0; b < nblocks; ++b) {
    const uint8_t* blk = blocks + size_t(b) * bytes;
    const __m256 d = _mm256_set1_ps(ggml_block_scale(blk));
    __m128i lo, hi;
    ggml_block_codes16(blk, q4, lo, hi);
    const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int i = 0; i < 4; ++i)
      _mm256_storeu_ps(out + b * 32 + 8 * i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[i])), d));
  }
}

}  // namespace lt::cpu::dequant::avx2
