// AVX-512 versions of the quantized inner loops (dequant_kernels.h): 4-bit codes looked up 16 at a
// time with one vpermps, int8 rows widened and scaled, and the LLM.int8 product on VNNI
// (vpdpbusd: u8 x s8 -> s32). Compiled with the AVX-512 flags (file name suffix); called only for the
// Avx512 isa on a CPU that supports it (and, for int8_gemm_vnni, has AVX512-VNNI).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "kernels/linear.h"
#include "kernels/cpu/dequant_kernels.h"
#include "kernels/ggml_blocks.h"

namespace lt::cpu::dequant::avx512 {
namespace {
#include "kernels/cpu/ggml_codes.inc"
}  // namespace

void dequant4(float* out, const uint8_t* codes, int64_t f0, int64_t n, const float* scales, int64_t b_first,
              int blocksize, const float* table16) {
  const __m512 tab = _mm512_loadu_ps(table16);
  const __m128i low4 = _mm_set1_epi8(15);
  const int64_t fend = f0 + n;
  int64_t f = f0;
  while (f < fend) {  // one block segment at a time: its scale is constant
    const int64_t blk = f / blocksize, seg_end = std::min(fend, (blk + 1) * blocksize);
    const float s = scales[blk - b_first];
    const __m512 vs = _mm512_set1_ps(s);
    if (f & 1) {  // segment starts on a low nibble
      out[f - f0] = table16[codes[f >> 1] & 15] * s;
      ++f;
    }
    for (; f + 16 <= seg_end; f += 16) {
      const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + (f >> 1)));
      const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low4);
      const __m128i lo = _mm_and_si128(raw, low4);
      const __m512i idx = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(hi, lo));  // element order
      _mm512_storeu_ps(out + (f - f0), _mm512_mul_ps(_mm512_permutexvar_ps(idx, tab), vs));
    }
    for (; f < seg_end; ++f) {
      const uint8_t byte = codes[f >> 1];
      out[f - f0] = table16[(f & 1) ? (byte & 15) : (byte >> 4)] * s;
    }
  }
}

void dequant8(float* out, const int8_t* q, const float* row_absmax, int64_t rows, int64_t cols) {
  const __m512 inv = _mm512_set1_ps(kInt8Inv127);
  for (int64_t r = 0; r < rows; ++r) {
    const __m512 s = _mm512_set1_ps(row_absmax[r]);
    const int8_t* qr = q + r * cols;
    float* o = out + r * cols;
    for (int64_t c = 0; c < cols; c += 16) {
      const __mmask16 m = cols - c >= 16 ? __mmask16(0xffff) : __mmask16((1u << (cols - c)) - 1);
      const __m128i b = _mm_maskz_loadu_epi8(m, qr + c);
      const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
      _mm512_mask_storeu_ps(o + c, m, _mm512_mul_ps(_mm512_mul_ps(v, s), inv));
    }
  }
}

float quantize_int8_row(int8_t* qr, const float* x, int64_t n) {
  auto mask = [&](int64_t c) { return n - c >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - c)) - 1); };
  __m512 am = _mm512_setzero_ps();
  for (int64_t c = 0; c < n; c += 16) am = _mm512_max_ps(am, _mm512_abs_ps(_mm512_maskz_loadu_ps(mask(c), x + c)));
  const float a = _mm512_reduce_max_ps(am);
  const __m512 s = _mm512_set1_ps(a > 0.0f ? (1.0f / a) * 127.0f : 0.0f);
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  for (int64_t c = 0; c < n; c += 16) {  // nearest even, as std::nearbyint in the default rounding mode
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask(c), x + c), s);
    const __m512 n = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_min_ps(_mm512_max_ps(n, lo), hi);
    _mm_mask_storeu_epi8(qr + c, mask(c), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r)));
  }
  return a;
}

// Σ (x+128)·w over one row pair with vpdpbusd; the caller subtracts 128·Σw. Four x rows share each
// w load. Masked tails load zeros for w, so the padded x lanes (128) contribute nothing.
void int8_gemm_vnni(float* y, const int8_t* xq, const float* x_absmax, const int8_t* wq, const float* w_absmax,
                    int T, int IC, int OC) {
  const __m512i flip = _mm512_set1_epi8(char(0x80)), ones = _mm512_set1_epi8(1);
#pragma omp parallel for schedule(static) if (int64_t(T) * IC * OC >= kParallelMin)
  for (int o = 0; o < OC; ++o) {
    const int8_t* w = wq + int64_t(o) * IC;
    __m512i sw = _mm512_setzero_si512();
    for (int c = 0; c < IC; c += 64) {
      const __mmask64 m = IC - c >= 64 ? ~__mmask64(0) : (__mmask64(1) << (IC - c)) - 1;
      sw = _mm512_dpbusd_epi32(sw, ones, _mm512_maskz_loadu_epi8(m, w + c));
    }
    const int32_t wsum = _mm512_reduce_add_epi32(sw);
    for (int t0 = 0; t0 < T; t0 += 4) {
      const int nt = std::min(4, T - t0);
      __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                        _mm512_setzero_si512()};
      for (int c = 0; c < IC; c += 64) {
        const __mmask64 m = IC - c >= 64 ? ~__mmask64(0) : (__mmask64(1) << (IC - c)) - 1;
        const __m512i wv = _mm512_maskz_loadu_epi8(m, w + c);
        for (int k = 0; k < nt; ++k) {
          const __m512i xv = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, xq + int64_t(t0 + k) * IC + c), flip);
          acc[k] = _mm512_dpbusd_epi32(acc[k], xv, wv);
        }
      }
      for (int k = 0; k < nt; ++k) {
        const int t = t0 + k;
        const int32_t dot = _mm512_reduce_add_epi32(acc[k]) - 128 * wsum;
        y[int64_t(t) * OC + o] = float(dot) * ((x_absmax[t] * w_absmax[o]) * kInt8Inv127Sq);
      }
    }
  }
}

void dequant_ggml(float* out, const uint8_t* blocks, int64_t nblocks, bool q4) {
  const size_t bytes = q4 ? 18 : 34;
  for (int64_t b = 0; b < nblocks; ++b) {
    const uint8_t* blk = blocks + size_t(b) * bytes;
    const __m512 d = _mm512_set1_ps(ggml_block_scale(blk));
    __m128i lo, hi;
    ggml_block_codes16(blk, q4, lo, hi);
    _mm512_storeu_ps(out + b * 32, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), d));
    _mm512_storeu_ps(out + b * 32 + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), d));
  }
}

}  // namespace lt::cpu::dequant::avx512
