// The decode products (decode_gemv.h) on AVX2 + FMA + F16C: 8 lanes, four accumulators per token
// (FMA latency), 16-bit weights widened in registers, 4-bit codes looked up with two vpermps and a
// blend on the code's high bit. Compiled with the AVX2 flags (file name suffix).
#include <immintrin.h>

#include "core/dtype.h"
#include "kernels/cpu/decode_gemv.h"

namespace lt::cpu::gemv::avx2 {
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <bool BF16>
inline __m256 load8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  else return _mm256_cvtph_ps(h);
}

// R rows at once, each with its own four accumulators per token and the single-row order (the bits
// do not depend on R): R weight streams side by side for the hardware prefetchers (avx512's
// half_row_group; 16 ymm registers hold the accumulators of two rows for one token)
template <int R, int NT, bool BF16>
void half_row_group(float* y, const float* x, const uint16_t* w0, int IC, int OC, int o) {
  __m256 acc[R][4][NT];
  for (auto& r : acc)
    for (auto& a : r)
      for (auto& v : a) v = _mm256_setzero_ps();
  int c = 0;
  for (; c + 32 <= IC; c += 32) {
    for (int r = 0; r < R; ++r) prefetch_ahead(w0 + size_t(r) * IC + c);
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u)
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        const __m256 wv = load8<BF16>(w0 + size_t(r) * IC + c + 8 * u);
#pragma GCC unroll 3
        for (int t = 0; t < NT; ++t)
          acc[r][u][t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + size_t(t) * IC + c + 8 * u), acc[r][u][t]);
      }
  }
  for (; c + 8 <= IC; c += 8)
    for (int r = 0; r < R; ++r) {
      const __m256 wv = load8<BF16>(w0 + size_t(r) * IC + c);
      for (int t = 0; t < NT; ++t)
        acc[r][0][t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + size_t(t) * IC + c), acc[r][0][t]);
    }
  for (int r = 0; r < R; ++r) {
    const uint16_t* wr = w0 + size_t(r) * IC;
    for (int t = 0; t < NT; ++t) {
      float s = hsum(_mm256_add_ps(_mm256_add_ps(acc[r][0][t], acc[r][1][t]), _mm256_add_ps(acc[r][2][t], acc[r][3][t])));
      for (int i = c; i < IC; ++i) s += x[size_t(t) * IC + i] * (BF16 ? bf16_to_f32(wr[i]) : f16_to_f32(wr[i]));
      y[size_t(t) * OC + o + r] = s;
    }
  }
}

template <int NT, bool BF16>
void half_rows_t(float* y, const LinearInput& in, const WeightView& w, int o0, int o1) {
  constexpr int R = NT == 1 ? 2 : 1;
  const auto* w16 = static_cast<const uint16_t*>(w.data);
  int o = o0;
  for (; o + R <= o1; o += R) half_row_group<R, NT, BF16>(y, in.x, w16 + size_t(o) * w.cols, w.cols, w.rows, o);
  for (; o < o1; ++o) half_row_group<1, NT, BF16>(y, in.x, w16 + size_t(o) * w.cols, w.cols, w.rows, o);
}

// 8 codes (as 32-bit indices) -> their table values
inline __m256 lookup(__m256i idx, __m256 tlo, __m256 thi) {
  const __m256 lo = _mm256_permutevar8x32_ps(tlo, idx), hi = _mm256_permutevar8x32_ps(thi, idx);
  return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

template <int NT>
void four_bit_rows_t(float* y, const LinearInput& in, const WeightView& w, int o0, int o1) {
  const int IC = w.cols, OC = w.rows, bs = w.blocksize;
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const __m256 tlo = _mm256_loadu_ps(w.code_values), thi = _mm256_loadu_ps(w.code_values + 8);
  const __m128i low4 = _mm_set1_epi8(15);
  for (int o = o0; o < o1; ++o) {
    const int64_t f0 = int64_t(o) * IC;
    const uint8_t* cr = codes + f0 / 2;
    __m256 acc[NT];
    for (auto& a : acc) a = _mm256_setzero_ps();
    for (int b0 = 0; b0 < IC; b0 += bs) {
      __m256 sum[2][NT];
      for (auto& s : sum)
        for (auto& v : s) v = _mm256_setzero_ps();
      for (int c = b0; c < b0 + bs; c += 32) {
        if ((c & 127) == 0) prefetch_ahead(cr + c / 2);
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(cr + c / 2));
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low4), lo = _mm_and_si128(raw, low4);
        const __m128i e0 = _mm_unpacklo_epi8(hi, lo), e1 = _mm_unpackhi_epi8(hi, lo);  // element order
        const __m256 v[4] = {lookup(_mm256_cvtepu8_epi32(e0), tlo, thi),
                             lookup(_mm256_cvtepu8_epi32(_mm_srli_si128(e0, 8)), tlo, thi),
                             lookup(_mm256_cvtepu8_epi32(e1), tlo, thi),
                             lookup(_mm256_cvtepu8_epi32(_mm_srli_si128(e1, 8)), tlo, thi)};
#pragma GCC unroll 3
        for (int t = 0; t < NT; ++t) {
          const float* x = in.x + size_t(t) * IC + c;
          sum[0][t] = _mm256_fmadd_ps(v[0], _mm256_loadu_ps(x), sum[0][t]);
          sum[1][t] = _mm256_fmadd_ps(v[1], _mm256_loadu_ps(x + 8), sum[1][t]);
          sum[0][t] = _mm256_fmadd_ps(v[2], _mm256_loadu_ps(x + 16), sum[0][t]);
          sum[1][t] = _mm256_fmadd_ps(v[3], _mm256_loadu_ps(x + 24), sum[1][t]);
        }
      }
      const __m256 s = _mm256_set1_ps(w.absmax[(f0 + b0) / bs]);
      for (int t = 0; t < NT; ++t) acc[t] = _mm256_fmadd_ps(_mm256_add_ps(sum[0][t], sum[1][t]), s, acc[t]);
    }
    for (int t = 0; t < NT; ++t) y[size_t(t) * OC + o] = hsum(acc[t]);
  }
}

inline float f16_scale(const uint8_t* blk) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(blk[0] | (blk[1] << 8)))); }

// A block's 32 codes for vpmaddubsw's unsigned operand, with what makes the product exact:
// q8_0: |w| (−128 -> 128 as unsigned), x then takes w's sign (sign_x); q4_0: the nibbles as stored
// (w + 8, low nibbles then high, as ggml's bytes_from_nibbles_32), the lanes then start at −8 times
// the sum of their 4 x codes (gemv::code_offsets), so either way each int32 lane holds its exact Σ w·x.
template <bool Q4>
struct BlockCodes {
  __m256i u, w;  // unsigned operand; q8_0: the signed codes (for their signs)
  explicit BlockCodes(const uint8_t* blk) {
    if constexpr (Q4) {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
      u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(15));
      w = u;
    } else {
      w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      u = _mm256_sign_epi8(w, w);
    }
  }
  // 8 int32 lanes of Σ w·x over the block against x's codes xv (q4_0: off, x's lane offsets)
  __m256i dot(__m256i xv, __m256i off) const {
    if constexpr (Q4) return _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), _mm256_set1_epi16(1)), off);
    else return _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(xv, w)), _mm256_set1_epi16(1));
  }
};

// NR rows at a time (x's codes and offsets loaded once for them; independent FMA chains). A row's
// sums are formed the same way alone or paired. q4_0 rows go two at a time, q8_0 rows one: on a
// Zen 3 core pairs took q8_0 decode (SmolLM2 shape) from ~70 to ~44 tok/s, q4_0 from ~81 to ~84.
template <int NT, int NR, bool Q4>
void rows_at(float* y, const int8_t* xq, const float* xd, const int32_t* xo, const WeightView& w, int o) {
  const int IC = w.cols, OC = w.rows, nb = IC / 32;
  constexpr size_t kBytes = Q4 ? 18 : 34;
  const auto* blocks = static_cast<const uint8_t*>(w.data);
  const uint8_t* row[NR];
  for (int r = 0; r < NR; ++r) row[r] = blocks + size_t(o + r) * nb * kBytes;
  __m256 acc[NR][NT];
  for (auto& a : acc)
    for (auto& v : a) v = _mm256_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    float dw[NR];
    const BlockCodes<Q4> c0(row[0] + size_t(b) * kBytes), c1(row[NR - 1] + size_t(b) * kBytes);
    for (int r = 0; r < NR; ++r) {
      prefetch_ahead(row[r] + size_t(b) * kBytes);
      dw[r] = f16_scale(row[r] + size_t(b) * kBytes);
    }
#pragma GCC unroll 3
    for (int t = 0; t < NT; ++t) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + size_t(t) * IC + b * 32));
      const __m256i off = Q4 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xo + (size_t(t) * IC + b * 32) / 4))
                             : _mm256_setzero_si256();
      const float dx = xd[size_t(t) * nb + b];
      for (int r = 0; r < NR; ++r)
        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps((r == 0 ? c0 : c1).dot(xv, off)), _mm256_set1_ps(dx * dw[r]), acc[r][t]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int t = 0; t < NT; ++t) y[size_t(t) * OC + o + r] = hsum(acc[r][t]);
}

template <int NT, bool Q4>
void block_rows_t(float* y, const gemv::QuantizedX& x, const WeightView& w, int o0, int o1) {
  int o = o0;
  if constexpr (Q4)
    for (; o + 2 <= o1; o += 2) rows_at<NT, 2, Q4>(y, x.q, x.d, x.off, w, o);
  for (; o < o1; ++o) rows_at<NT, 1, Q4>(y, x.q, x.d, x.off, w, o);
}

}  // namespace

void quantize_x(const float* x, int64_t n, int8_t* q, float* d) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < n / 32; ++b) {
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + b * 32 + 8 * i);
    const __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
                                   _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    __m256i c[4];
    for (int i = 0; i < 4; ++i) c[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], id), kRound));
    // int32 -> int8 (|c| <= 127: no saturation), packs work per 128-bit lane: put the 4-byte groups back in order
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * 32), _mm256_permutevar8x32_epi32(p, order));
    d[b] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(amax / 127.0f), _MM_FROUND_TO_NEAREST_INT)));
  }
}

void q8_0_rows(float* y, const QuantizedX& x, const WeightView& w, int o0, int o1) {
  switch (x.T) {
    case 1: return block_rows_t<1, false>(y, x, w, o0, o1);
    case 2: return block_rows_t<2, false>(y, x, w, o0, o1);
    default: return block_rows_t<3, false>(y, x, w, o0, o1);
  }
}

void q4_0_rows(float* y, const QuantizedX& x, const WeightView& w, int o0, int o1) {
  switch (x.T) {
    case 1: return block_rows_t<1, true>(y, x, w, o0, o1);
    case 2: return block_rows_t<2, true>(y, x, w, o0, o1);
    default: return block_rows_t<3, true>(y, x, w, o0, o1);
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

void four_bit_rows(float* y, const LinearInput& in, const WeightView& w, int o0, int o1) {
  switch (in.T) {
    case 1: return four_bit_rows_t<1>(y, in, w, o0, o1);
    case 2: return four_bit_rows_t<2>(y, in, w, o0, o1);
    default: return four_bit_rows_t<3>(y, in, w, o0, o1);
  }
}

}  // namespace lt::cpu::gemv::avx2
