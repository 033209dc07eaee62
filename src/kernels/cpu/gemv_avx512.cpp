// The decode products (decode_gemv.h) on AVX-512: 16 lanes, masked tails, 16-bit weights widened
// in registers or (bf16_dot_rows, AVX-512 BF16) multiplied in bf16 pairs with vdpbf16ps, 4-bit
// codes looked up 16 at a time with one vpermps. Compiled with the AVX-512 flags (file name suffix).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/decode_gemv.h"

namespace lt::cpu::gemv::avx512 {
namespace {

template <bool BF16>
inline __m512 widen16(__m256i h) {
  if constexpr (BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  else return _mm512_cvtph_ps(h);
}

template <int NT, bool BF16>
void half_row(float* y, const float* x, const uint16_t* wr, int IC, int OC, int o) {
  __m512 acc[2][NT];
  for (auto& a : acc)
    for (auto& v : a) v = _mm512_setzero_ps();
  int c = 0;
  for (; c + 32 <= IC; c += 32) {
    prefetch_ahead(wr + c);
#pragma GCC unroll 2
    for (int u = 0; u < 2; ++u) {
      const __m512 wv = widen16<BF16>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + c + 16 * u)));
#pragma GCC unroll 3
      for (int t = 0; t < NT; ++t)
        acc[u][t] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + size_t(t) * IC + c + 16 * u), acc[u][t]);
    }
  }
  for (; c < IC; c += 16) {
    const int n = IC - c < 16 ? IC - c : 16;
    const __mmask16 m = __mmask16((1u << n) - 1);
    const __m512 wv = widen16<BF16>(_mm256_maskz_loadu_epi16(m, wr + c));
    for (int t = 0; t < NT; ++t)
      acc[0][t] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + size_t(t) * IC + c), acc[0][t]);
  }
  for (int t = 0; t < NT; ++t) y[size_t(t) * OC + o] = _mm512_reduce_add_ps(_mm512_add_ps(acc[0][t], acc[1][t]));
}

template <int NT, bool BF16>
void half_rows_t(float* y, const LinearInput& in, const WeightView& w, int o0, int o1) {
  const auto* w16 = static_cast<const uint16_t*>(w.data);
  for (int o = o0; o < o1; ++o) half_row<NT, BF16>(y, in.x, w16 + size_t(o) * w.cols, w.cols, w.rows, o);
}

inline __m512bh as_bh(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

// 32 bf16 pairs per vdpbf16ps: x16 (the input's bf16 bits) against the row
template <int NT>
void bf16_dot_rows_t(float* y, const LinearInput& in, const WeightView& w, int o0, int o1) {
  const int IC = w.cols, OC = w.rows;
  const auto* w16 = static_cast<const uint16_t*>(w.data);
  for (int o = o0; o < o1; ++o) {
    const uint16_t* wr = w16 + size_t(o) * IC;
    __m512 acc[2][NT];
    for (auto& a : acc)
      for (auto& v : a) v = _mm512_setzero_ps();
    int c = 0;
    for (; c + 64 <= IC; c += 64)
#pragma GCC unroll 2
      for (int u = 0; u < 2; ++u) {
        prefetch_ahead(wr + c + 32 * u);
        const __m512bh wv = as_bh(_mm512_loadu_si512(wr + c + 32 * u));
#pragma GCC unroll 3
        for (int t = 0; t < NT; ++t)
          acc[u][t] = _mm512_dpbf16_ps(acc[u][t], as_bh(_mm512_loadu_si512(in.x16 + size_t(t) * IC + c + 32 * u)), wv);
      }
    for (; c < IC; c += 32) {
      const int n = IC - c < 32 ? IC - c : 32;
      const __mmask32 m = n == 32 ? ~__mmask32(0) : __mmask32((1u << n) - 1);
      const __m512bh wv = as_bh(_mm512_maskz_loadu_epi16(m, wr + c));
      for (int t = 0; t < NT; ++t)
        acc[0][t] = _mm512_dpbf16_ps(acc[0][t], as_bh(_mm512_maskz_loadu_epi16(m, in.x16 + size_t(t) * IC + c)), wv);
    }
    for (int t = 0; t < NT; ++t) y[size_t(t) * OC + o] = _mm512_reduce_add_ps(_mm512_add_ps(acc[0][t], acc[1][t]));
  }
}

template <int NT>
void four_bit_rows_t(float* y, const LinearInput& in, const WeightView& w, int o0, int o1) {
  const int IC = w.cols, OC = w.rows, bs = w.blocksize;
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const __m512 tab = _mm512_loadu_ps(w.code_values);
  const __m128i low4 = _mm_set1_epi8(15);
  for (int o = o0; o < o1; ++o) {
    const int64_t f0 = int64_t(o) * IC;
    const uint8_t* cr = codes + f0 / 2;
    __m512 acc[NT];
    for (auto& a : acc) a = _mm512_setzero_ps();
    for (int b0 = 0; b0 < IC; b0 += bs) {
      __m512 sum[2][NT];
      for (auto& s : sum)
        for (auto& v : s) v = _mm512_setzero_ps();
      for (int c = b0; c < b0 + bs; c += 32) {
        if ((c & 127) == 0) prefetch_ahead(cr + c / 2);
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(cr + c / 2));
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low4), lo = _mm_and_si128(raw, low4);
        const __m512 v0 = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(hi, lo)), tab);
        const __m512 v1 = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(hi, lo)), tab);
#pragma GCC unroll 3
        for (int t = 0; t < NT; ++t) {
          const float* x = in.x + size_t(t) * IC + c;
          sum[0][t] = _mm512_fmadd_ps(v0, _mm512_loadu_ps(x), sum[0][t]);
          sum[1][t] = _mm512_fmadd_ps(v1, _mm512_loadu_ps(x + 16), sum[1][t]);
        }
      }
      const __m512 s = _mm512_set1_ps(w.absmax[(f0 + b0) / bs]);
      for (int t = 0; t < NT; ++t) acc[t] = _mm512_fmadd_ps(_mm512_add_ps(sum[0][t], sum[1][t]), s, acc[t]);
    }
    for (int t = 0; t < NT; ++t) y[size_t(t) * OC + o] = _mm512_reduce_add_ps(acc[t]);
  }
}

// 8 int32 lanes of Σ u·s over 32 byte pairs (u unsigned, s signed) with one VNNI vpdpbusd
inline __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// a block's 32 codes as int8: q8_0's as stored; q4_0's nibbles spread (low nibbles, then high) minus 8
template <bool Q4>
inline __m256i block_codes(const uint8_t* blk) {
  if constexpr (Q4) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(15)), _mm256_set1_epi8(8));
  } else {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  }
}

template <int NT, bool Q4>
void block_rows_t(float* y, const int8_t* xq, const float* xd, const WeightView& w, int o0, int o1) {
  const int IC = w.cols, OC = w.rows, nb = IC / 32;
  constexpr size_t kBytes = Q4 ? 18 : 34;
  const auto* blocks = static_cast<const uint8_t*>(w.data);
  for (int o = o0; o < o1; ++o) {
    const uint8_t* row = blocks + size_t(o) * nb * kBytes;
    __m256 acc[NT];
    for (auto& a : acc) a = _mm256_setzero_ps();
    for (int b = 0; b < nb; ++b) {
      const uint8_t* blk = row + size_t(b) * kBytes;
      prefetch_ahead(blk);
      const __m256i wv = block_codes<Q4>(blk);
      const __m256i aw = _mm256_sign_epi8(wv, wv);  // |w| (-128 -> 128 as unsigned)
      const float dw = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(blk[0] | (blk[1] << 8))));
#pragma GCC unroll 3
      for (int t = 0; t < NT; ++t) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + size_t(t) * IC + b * 32));
        const __m256i sx = _mm256_sign_epi8(xv, wv);  // x with w's sign: |w| * sx = w * x
        const __m256i dot = dot_u8s8(aw, sx);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(xd[size_t(t) * nb + b] * dw), acc[t]);
      }
    }
    for (int t = 0; t < NT; ++t) y[size_t(t) * OC + o] = hsum8(acc[t]);
  }
}

}  // namespace

void q8_0_rows_vnni(float* y, const int8_t* xq, const float* xd, int T, const WeightView& w, int o0, int o1) {
  switch (T) {
    case 1: return block_rows_t<1, false>(y, xq, xd, w, o0, o1);
    case 2: return block_rows_t<2, false>(y, xq, xd, w, o0, o1);
    default: return block_rows_t<3, false>(y, xq, xd, w, o0, o1);
  }
}

void q4_0_rows_vnni(float* y, const int8_t* xq, const float* xd, int T, const WeightView& w, int o0, int o1) {
  switch (T) {
    case 1: return block_rows_t<1, true>(y, xq, xd, w, o0, o1);
    case 2: return block_rows_t<2, true>(y, xq, xd, w, o0, o1);
    default: return block_rows_t<3, true>(y, xq, xd, w, o0, o1);
  }
}

void half_rows(float* y, const LinearInput& in, const WeightView& w, int o0, int o1) {
  const bool b = w.kind == WeightKind::BF16;
  switch (in.T) {
    case 1: return b ? half_rows_t<1, true>(y, in, w, o0, o1) : half_rows_t<1, false>(y, in, w, o0, o1);
    case 2: return b ? half_rows_t<2, true>(y, in, w, o0, o1) : half_rows_t<2, false>(y, in, w, o0, o1);
    default: return b ? half_rows_t<3, true>(y, in, w, o0, o1) : half_rows_t<3, false>(y, in, w, o0, o1);
  }
}

void bf16_dot_rows(float* y, const LinearInput& in, const WeightView& w, int o0, int o1) {
  switch (in.T) {
    case 1: return bf16_dot_rows_t<1>(y, in, w, o0, o1);
    case 2: return bf16_dot_rows_t<2>(y, in, w, o0, o1);
    default: return bf16_dot_rows_t<3>(y, in, w, o0, o1);
  }
}

void four_bit_rows(float* y, const LinearInput& in, const WeightView& w, int o0, int o1) {
  switch (in.T) {
    case 1: return four_bit_rows_t<1>(y, in, w, o0, o1);
    case 2: return four_bit_rows_t<2>(y, in, w, o0, o1);
    default: return four_bit_rows_t<3>(y, in, w, o0, o1);
  }
}

}  // namespace lt::cpu::gemv::avx512
