// The decode products (decode_gemv.h) on AVX-512: 16 lanes, masked tails, 16-bit weights widened
// in registers or (bf16_dot_rows, AVX-512 BF16) multiplied in bf16 pairs with vdpbf16ps, 4-bit
// codes looked up 16 at a time with one vpermps. Compiled with the AVX-512 flags (file name suffix).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/decode_gemv.h"

namespace lt::cpu::gemv::avx512 {
namespace {

// rows whose weights a 16-bit decode loop streams side by side (the accumulators of NT tokens fit)
template <int NT>
constexpr int kGroupRows = NT == 1 ? 8 : 4;

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

// kGroupRows rows at once, each with half_row's arithmetic (the same bits): that many sequential
// weight streams in flight instead of one, which the hardware prefetchers serve side by side (one
// row at a time streamed 14.8 GB/s on one thread of a Xeon VM whose triad gave 18.1).
template <int NT, bool BF16>
void half_row_group(float* y, const float* x, const uint16_t* w0, int IC, int OC, int o) {
  constexpr int R = kGroupRows<NT>;
  __m512 acc[R][2][NT];
  for (auto& r : acc)
    for (auto& a : r)
      for (auto& v : a) v = _mm512_setzero_ps();
  int c = 0;
  for (; c + 32 <= IC; c += 32) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) prefetch_next_group<R>(w0 + size_t(r) * IC + c, IC);
#pragma GCC unroll 2
    for (int u = 0; u < 2; ++u) {
      __m512 xv[NT];
#pragma GCC unroll 3
      for (int t = 0; t < NT; ++t) xv[t] = _mm512_loadu_ps(x + size_t(t) * IC + c + 16 * u);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const auto* wr = reinterpret_cast<const __m256i*>(w0 + size_t(r) * IC + c + 16 * u);
        const __m512 wv = widen16<BF16>(_mm256_loadu_si256(wr));
#pragma GCC unroll 3
        for (int t = 0; t < NT; ++t) acc[r][u][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][u][t]);
      }
    }
  }
  for (; c < IC; c += 16) {
    const int n = IC - c < 16 ? IC - c : 16;
    const __mmask16 m = __mmask16((1u << n) - 1);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = widen16<BF16>(_mm256_maskz_loadu_epi16(m, w0 + size_t(r) * IC + c));
      for (int t = 0; t < NT; ++t)
        acc[r][0][t] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + size_t(t) * IC + c), acc[r][0][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t)
      y[size_t(t) * OC + o + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0][t], acc[r][1][t]));
}

template <int NT, bool BF16>
void half_rows_t(float* y, const LinearInput& in, const WeightView& w, int o0, int o1) {
  const auto* w16 = static_cast<const uint16_t*>(w.data);
  int o = o0;
  for (; o + kGroupRows<NT> <= o1; o += kGroupRows<NT>)
    half_row_group<NT, BF16>(y, in.x, w16 + size_t(o) * w.cols, w.cols, w.rows, o);
  for (; o < o1; ++o) half_row<NT, BF16>(y, in.x, w16 + size_t(o) * w.cols, w.cols, w.rows, o);
}

inline __m512bh as_bh(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

// 32 bf16 pairs per vdpbf16ps: x16 (the input's bf16 bits) against R rows at once (half_row_group's
// streams side by side), each row with its own two accumulators per token
template <int R, int NT>
void bf16_dot_group(float* y, const LinearInput& in, const uint16_t* w0, int IC, int OC, int o) {
  __m512 acc[R][2][NT];
  for (auto& r : acc)
    for (auto& a : r)
      for (auto& v : a) v = _mm512_setzero_ps();
  int c = 0;
  for (; c + 64 <= IC; c += 64)
#pragma GCC unroll 2
    for (int u = 0; u < 2; ++u) {
      __m512bh xv[NT];
#pragma GCC unroll 3
      for (int t = 0; t < NT; ++t) xv[t] = as_bh(_mm512_loadu_si512(in.x16 + size_t(t) * IC + c + 32 * u));
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const uint16_t* wr = w0 + size_t(r) * IC + c + 32 * u;
        prefetch_next_group<R>(wr, IC);
        const __m512bh wv = as_bh(_mm512_loadu_si512(wr));
#pragma GCC unroll 3
        for (int t = 0; t < NT; ++t) acc[r][u][t] = _mm512_dpbf16_ps(acc[r][u][t], xv[t], wv);
      }
    }
  for (; c < IC; c += 32) {
    const int n = IC - c < 32 ? IC - c : 32;
    const __mmask32 m = n == 32 ? ~__mmask32(0) : __mmask32((1u << n) - 1);
    for (int r = 0; r < R; ++r) {
      const __m512bh wv = as_bh(_mm512_maskz_loadu_epi16(m, w0 + size_t(r) * IC + c));
      for (int t = 0; t < NT; ++t)
        acc[r][0][t] = _mm512_dpbf16_ps(acc[r][0][t], as_bh(_mm512_maskz_loadu_epi16(m, in.x16 + size_t(t) * IC + c)), wv);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t)
      y[size_t(t) * OC + o + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0][t], acc[r][1][t]));
}

template <int NT>
void bf16_dot_rows_t(float* y, const LinearInput& in, const WeightView& w, int o0, int o1) {
  const int IC = w.cols, OC = w.rows;
  const auto* w16 = static_cast<const uint16_t*>(w.data);
  int o = o0;
  for (; o + kGroupRows<NT> <= o1; o += kGroupRows<NT>)
    bf16_dot_group<kGroupRows<NT>, NT>(y, in, w16 + size_t(o) * IC, IC, OC, o);
  for (; o < o1; ++o) bf16_dot_group<1, NT>(y, in, w16 + size_t(o) * IC, IC, OC, o);
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

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// A block's 32 weight codes made unsigned for vpdpbusd: q8_0's w + 128 (w xor 0x80); q4_0's nibbles
// as stored, w + 8 (low nibbles, then high: both halves of the broadcast 16 bytes, the upper shifted
// by 4 with one vpsrlvw).
template <bool Q4>
inline __m256i unsigned_codes(const uint8_t* blk) {
  if constexpr (Q4) {
    const __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
    const __m256i shifts = _mm256_set_epi64x(0x0004000400040004, 0x0004000400040004, 0, 0);
    return _mm256_and_si256(_mm256_srlv_epi16(raw, shifts), _mm256_set1_epi8(15));
  } else {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)),
                            _mm256_set1_epi8(char(0x80)));
  }
}

// Blocks b0.. of NR rows, one at a time (the blocks past the last whole group or pair): vpdpbusd
// of the unsigned codes with x's, each lane started at x.off (the offset taken back), scaled by
// dx·dw into tail[r][t].
template <int NT, int NR, bool Q4>
void block_tail(__m256 (&tail)[NR][NT], const uint8_t* const* row, const QuantizedX& x, int IC, int b0) {
  constexpr size_t kBytes = Q4 ? 18 : 34;
  const int nb = IC / 32;
  for (auto& a : tail)
    for (auto& v : a) v = _mm256_setzero_ps();
  for (int b = b0; b < nb; ++b)
    for (int r = 0; r < NR; ++r) {
      const uint8_t* blk = row[r] + size_t(b) * kBytes;
      const __m256i wu = unsigned_codes<Q4>(blk);
      uint16_t d16;
      std::memcpy(&d16, blk, 2);
      const float d = _cvtsh_ss(d16);
      for (int t = 0; t < NT; ++t) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + size_t(t) * IC + b * 32));
        const __m256i ov = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.off + (size_t(t) * IC + b * 32) / 4));
        const __m256i dot = _mm256_dpbusd_epi32(ov, wu, xv);
        tail[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(x.d[size_t(t) * nb + b] * d), tail[r][t]);
      }
    }
}

// y[t][o + r] = the 16 lanes of acc[r][t] plus the 8 of tail[r][t]
template <int NT, int NR>
void store_rows(float* y, const __m512 (&acc)[NR][NT], const __m256 (&tail)[NR][NT], int OC, int o) {
  for (int r = 0; r < NR; ++r)
    for (int t = 0; t < NT; ++t) {
      const __m512 a = acc[r][t];
      const __m256 s = _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
      y[size_t(t) * OC + o + r] = hsum8(_mm256_add_ps(s, tail[r][t]));
    }
}

// q8_0 two blocks (68 bytes: 64 and a masked 4) at a time: one vpermt2w picks their 64 code bytes
// (words 1-16 and 18-33 of the window), made unsigned (xor 0x80) for one vpdpbusd against x's 64
// codes of the pair, each lane started at −128·(the sum of its 4 x codes), so every lane holds an
// exact partial Σ w·x of one block; the lanes scaled by their block's dx·dw (the 2 f16 scales, words
// 0 and 17, spread with one vpermw) into one accumulator per row and token. An odd last block runs
// alone (block_tail). The same sums whether a row runs alone or in a pair.
template <int NT, int NR>
void q8_pair_rows_at(float* y, const QuantizedX& x, const WeightView& w, int o) {
  const int IC = w.cols, OC = w.rows, nb = IC / 32, np = nb / 2;
  const uint8_t* row[NR];
  for (int r = 0; r < NR; ++r) row[r] = static_cast<const uint8_t*>(w.data) + size_t(o + r) * nb * 34;
  const __m512i pick = _mm512_set_epi16(33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 16, 15, 14,
                                        13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
  const __m512i spread_d = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 17, 17, 17, 17, 17, 17,
                                            17, 17, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i spread_x = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  __m512 acc[NR][NT];
  for (auto& a : acc)
    for (auto& v : a) v = _mm512_setzero_ps();
  for (int g = 0; g < np; ++g) {
    __m512i wu[NR];
    __m512 dw[NR];
#pragma GCC unroll 2
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = row[r] + size_t(g) * 68;
      prefetch_ahead(p);
      prefetch_ahead(p + 64);  // pairs advance 68 bytes: one prefetch each would skip a line in 17
      const __m512i a = _mm512_loadu_si512(p), b = _mm512_maskz_loadu_epi8(0xf, p + 64);
      wu[r] = _mm512_xor_si512(_mm512_permutex2var_epi16(a, pick, b), flip);
      dw[r] = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(spread_d, a)));
    }
#pragma GCC unroll 3
    for (int t = 0; t < NT; ++t) {
      const __m512i xv = _mm512_loadu_si512(x.q + size_t(t) * IC + size_t(g) * 64);
      const __m512i ov = _mm512_loadu_si512(x.off + size_t(t) * IC / 4 + size_t(g) * 16);
      // the pair's two scales: one unaligned 8-byte load (_mm_loadl_epi64 takes any address)
      const __m128i d2 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x.d + size_t(t) * nb + 2 * g));
      const __m512 dx = _mm512_permutexvar_ps(spread_x, _mm512_castps128_ps512(_mm_castsi128_ps(d2)));
#pragma GCC unroll 2
      for (int r = 0; r < NR; ++r)
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(ov, wu[r], xv)), _mm512_mul_ps(dw[r], dx),
                                    acc[r][t]);
    }
  }
  __m256 tail[NR][NT];
  block_tail<NT, NR, false>(tail, row, x, IC, 2 * np);
  store_rows<NT, NR>(y, acc, tail, OC, o);
}

template <int NT>
void q8_pair_rows_t(float* y, const QuantizedX& x, const WeightView& w, int o0, int o1) {
  int o = o0;
  for (; o + 2 <= o1; o += 2) q8_pair_rows_at<NT, 2>(y, x, w, o);
  if (o < o1) q8_pair_rows_at<NT, 1>(y, x, w, o);
}

// q4_0 four blocks (72 bytes, two loads) at a time, against x grouped by q4_0_group_x: one vpermt2w
// picks the 4 blocks' 64 nibble bytes out of the window (block k's 16 bytes into 128-bit lane k);
// their low and high nibbles (w + 8) go through vpdpbusd against the group's low and high x codes,
// each lane started at −8·(the sum of its 8 x codes), so every lane holds an exact partial Σ w·x of
// one block; the lanes are scaled by their block's dx·dw (the 4 f16 scales spread over their
// block's lanes with one vpermw) into one accumulator per row and token. The blocks past the last
// whole group (at most 3) run one at a time (block_tail). The same sums whether a row runs alone
// or in a pair. Per 4 blocks and row: ~12 vector ops where one block at a time spends ~7 per block.
template <int NT, int NR>
void q4_group_rows_at(float* y, const QuantizedX& x, const WeightView& w, int o) {
  const int IC = w.cols, OC = w.rows, nb = IC / 32, ng = nb / 4;
  const uint8_t* row[NR];
  for (int r = 0; r < NR; ++r) row[r] = static_cast<const uint8_t*>(w.data) + size_t(o + r) * nb * 18;
  // the nibbles are words 1-8, 10-17, 19-26 and 28-35 of the window (blocks start every 9 words)
  const __m512i pick = _mm512_set_epi16(35, 34, 33, 32, 31, 30, 29, 28, 26, 25, 24, 23, 22, 21, 20, 19, 17, 16, 15,
                                        14, 13, 12, 11, 10, 8, 7, 6, 5, 4, 3, 2, 1);
  // block k's f16 scale is word 9k of the window; lane i of the result takes block i / 4's
  const __m512i spread_d = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 27, 27, 27, 27, 18, 18,
                                            18, 18, 9, 9, 9, 9, 0, 0, 0, 0);
  const __m512i spread_x = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i low4 = _mm512_set1_epi8(15);
  __m512 acc[NR][NT];
  for (auto& a : acc)
    for (auto& v : a) v = _mm512_setzero_ps();
  for (int g = 0; g < ng; ++g) {
    __m512i lo[NR], hi[NR];
    __m512 dw[NR];
#pragma GCC unroll 2
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = row[r] + size_t(g) * 72;
      prefetch_ahead(p);
      prefetch_ahead(p + 64);  // groups advance 72 bytes: one prefetch each would skip a line in 9
      const __m512i a = _mm512_loadu_si512(p), b = _mm512_maskz_loadu_epi8(0xff, p + 64);
      const __m512i nib = _mm512_permutex2var_epi16(a, pick, b);
      lo[r] = _mm512_and_si512(nib, low4);
      hi[r] = _mm512_and_si512(_mm512_srli_epi16(nib, 4), low4);
      dw[r] = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(spread_d, a)));
    }
#pragma GCC unroll 3
    for (int t = 0; t < NT; ++t) {
      const int8_t* xq = x.q + size_t(t) * IC + size_t(g) * 128;
      const __m512i xl = _mm512_loadu_si512(xq), xh = _mm512_loadu_si512(xq + 64);
      const __m512i ov = _mm512_loadu_si512(x.off + size_t(t) * IC / 4 + size_t(g) * 16);
      const __m512 dx = _mm512_permutexvar_ps(spread_x, _mm512_castps128_ps512(_mm_loadu_ps(x.d + size_t(t) * nb + 4 * g)));
#pragma GCC unroll 2
      for (int r = 0; r < NR; ++r) {
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(ov, lo[r], xl), hi[r], xh);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw[r], dx), acc[r][t]);
      }
    }
  }
  __m256 tail[NR][NT];
  block_tail<NT, NR, true>(tail, row, x, IC, 4 * ng);
  store_rows<NT, NR>(y, acc, tail, OC, o);
}

template <int NT>
void q4_group_rows_t(float* y, const QuantizedX& x, const WeightView& w, int o0, int o1) {
  int o = o0;
  for (; o + 2 <= o1; o += 2) q4_group_rows_at<NT, 2>(y, x, w, o);
  if (o < o1) q4_group_rows_at<NT, 1>(y, x, w, o);
}

}  // namespace

void quantize_x(const float* x, int64_t n, int8_t* q, float* d) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (int64_t b = 0; b < n / 32; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + b * 32), v1 = _mm512_loadu_ps(x + b * 32 + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v0, id), kRound));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v1, id), kRound));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32 + 16), _mm512_cvtsepi32_epi8(q1));
    d[b] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(amax / 127.0f), _MM_FROUND_TO_NEAREST_INT)));
  }
}

void q8_0_rows_vnni(float* y, const QuantizedX& x, const WeightView& w, int o0, int o1) {
  switch (x.T) {
    case 1: return q8_pair_rows_t<1>(y, x, w, o0, o1);
    case 2: return q8_pair_rows_t<2>(y, x, w, o0, o1);
    default: return q8_pair_rows_t<3>(y, x, w, o0, o1);
  }
}

void q4_0_rows_vnni(float* y, const QuantizedX& x, const WeightView& w, int o0, int o1) {
  switch (x.T) {
    case 1: return q4_group_rows_t<1>(y, x, w, o0, o1);
    case 2: return q4_group_rows_t<2>(y, x, w, o0, o1);
    default: return q4_group_rows_t<3>(y, x, w, o0, o1);
  }
}

void q4_0_group_x(int8_t* q, int32_t* off, int64_t IC, int T) {
  const int64_t ng = IC / 128;
  for (int t = 0; t < T; ++t) {
    int8_t* qt = q + t * IC;
    int32_t* ot = off + t * IC / 4;
    for (int64_t g = 0; g < ng; ++g) {
      int8_t grouped[128];
      for (int k = 0; k < 4; ++k)
        for (int j = 0; j < 16; ++j) {
          grouped[16 * k + j] = qt[g * 128 + 32 * k + j];
          grouped[64 + 16 * k + j] = qt[g * 128 + 32 * k + 16 + j];
        }
      std::memcpy(qt + g * 128, grouped, 128);
      for (int l = 0; l < 16; ++l) {
        int32_t s = 0;
        for (int i = 0; i < 4; ++i) s += grouped[4 * l + i] + grouped[64 + 4 * l + i];
        ot[g * 16 + l] = -8 * s;
      }
    }
    code_offsets(ot + ng * 32, qt + ng * 128, IC - ng * 128, 8);  // the blocks past the last group
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
