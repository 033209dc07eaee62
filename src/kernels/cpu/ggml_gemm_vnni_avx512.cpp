// The q8_0 / q4_0 product (kernels/linear.h) for prefill on AVX512-VNNI (vpdpbusd), for CPUs with
// avx512_vnni but no AMX int8: the AMX path's integer form and numerics (ggml_gemm_amx.cpp),
//   y[t,o] = Σ_b (dx[t,b] · dw[o,b]) · float(Σ_{c in b} qx[t,c] · qw[o,c])
// every block's int32 sum exact, the block terms added in f32 in block order, each with an FMA
// (so the same bits as the AMX path: the same products, roundings and order).
//   x      quantized to q8_0 per token (the bits of kernels/q8_0_act.h, gemv::avx512::quantize_x):
//          codes (T, IC) as they are, scales dx (T, IC / 32), and per block −k·(its 32 codes' sum),
//          off (T, IC / 32), k = 128 for q8_0 and 8 for q4_0.
//   W      kItemRows rows at a time (a work item) spread into a panel, per block and 16 rows: 8
//          vectors, vector j holding dword j (4 codes) of each of the 16 rows (a 16 × 8 dword
//          transpose), the codes made unsigned for vpdpbusd (q8_0: w + 128; q4_0: the nibbles as
//          stored, w + 8); rows past OC zero codes and scales.
//   C      per block, lanes = 16 rows: each int32 lane starts at the token's off, then 8 vpdpbusd of
//          the panel vectors with x's dword j broadcast, so the lane holds Σ qw·qx exactly; it is
//          converted and FMA'd by dw (16 rows) · dx (the token's) into f32 accumulators. kRowGroups ×
//          kTokens (2 × 6) of them stay in registers, so each panel load serves 6 tokens and each
//          broadcast 2 row groups. The lanes are rows, so y's rows are stored as they are.
//          Zen 4 (one zmm vpdpbusd a cycle: 3.6 G/s): ~300 GOP/s a thread at 128 tokens, 65% of that
//          peak; 16 × 12, 48 × 4 and 64 × 3 tiles ran the same, and without the per-block scaling
//          (convert, dx·dw, FMA) it ran 360: that, which the numerics ask for, is most of the rest.
// Work items (row groups, and token chunks where the rows are too few for the team) are split over
// one OpenMP team statically; every result is computed by one thread in a fixed order, so the bits
// do not depend on the thread count (nor on the tiling). Compiled with the AVX-512 flags
// (*_avx512.cpp in CMakeLists.txt, which include -mavx512vnni); called only where the CPU has VNNI.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12: false positives inside the AVX-512 intrinsics
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cpu/decode_gemv.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/ggml_blocks.h"

namespace lt::cpu::vnni {
namespace {

constexpr int kRowGroups = kItemRows / 16;  // 16-row vectors per work item
constexpr int kTokens = 6;                  // tokens per register tile
constexpr int kDwordRow = 4 * kItemRows;                 // panel bytes of one dword j of the item's rows
constexpr size_t kBlockPanel = size_t(8) * kDwordRow;     // panel bytes per block (32 codes of each row)

// The quantized input and one thread's panel, carved from the scratch.
struct QuantX {
  const int8_t* q;      // (T, IC) codes
  const float* d;       // (T, IC / 32) scales
  const int32_t* off;   // (T, IC / 32) −k · Σ codes of the block
  int IC, nb;
};
struct Panel {
  uint8_t* codes;  // (nb, 8, kItemRows) dwords of 4 unsigned codes: [block][dword j][row]
  float* d;        // (nb, kItemRows) scales
};

// Token t's row of x quantized: codes, scales, and each block's offset −k·Σ codes.
void quantize_token(int8_t* q, float* d, int32_t* off, const float* x, int IC, int k) {
  gemv::avx512::quantize_x(x, IC, q, d);
  for (int b = 0; b < IC / 32; ++b) {
    const __m512i lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + b * 32)));
    const __m512i hi = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + b * 32 + 16)));
    off[b] = -k * _mm512_reduce_add_epi32(_mm512_add_epi32(lo, hi));
  }
}

// A block's 32 codes made unsigned (q8_0: xor 0x80; q4_0: low nibbles, then high ones, as stored).
inline __m256i unsigned_codes(const uint8_t* blk, bool q4) {
  if (!q4)
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)),
                            _mm256_set1_epi8(char(0x80)));
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)), low4 = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), _mm_and_si128(raw, low4));
}

// 16 rows' blocks b (row[r], nullptr past OC) into 8 vectors at dst + j·kDwordRow (lane r: dword j
// of row r): rows r and r + 8 share a vector, transposed 8 × 8 in both halves at once.
void transpose_block(uint8_t* dst, const uint8_t* const* row, size_t b, size_t bytes, bool q4) {
  __m512i v[8], t[8];
  for (int i = 0; i < 8; ++i) {
    const __m256i a = row[i] ? unsigned_codes(row[i] + b * bytes, q4) : _mm256_setzero_si256();
    const __m256i c = row[i + 8] ? unsigned_codes(row[i + 8] + b * bytes, q4) : _mm256_setzero_si256();
    v[i] = _mm512_inserti64x4(_mm512_castsi256_si512(a), c, 1);
  }
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    v[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    v[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    v[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    v[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // v[0..3]: dwords 0-3 (and 4-7 in the upper 128 bits of each half) of rows 0-3; v[4..7] of rows 4-7
  const __m512i first = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
  const __m512i second = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
  for (int j = 0; j < 4; ++j) {
    _mm512_store_si512(dst + j * kDwordRow, _mm512_permutex2var_epi64(v[j], first, v[j + 4]));
    _mm512_store_si512(dst + (j + 4) * kDwordRow, _mm512_permutex2var_epi64(v[j], second, v[j + 4]));
  }
}

// Rows [o0, o0 + kItemRows) of w into the panel; each block's 16 f16 scales of a row group gathered
// (one dword at each row's block start, its low half the scale) and widened at once.
void fill_panel(const Panel& p, const WeightView& w, int o0) {
  const int nb = w.cols / 32;
  const size_t bytes = ggml_block_bytes(w.kind), row_bytes = size_t(nb) * bytes;
  const bool q4 = w.kind == WeightKind::Q4_0;
  const __m512i at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                        _mm512_set1_epi32(int(row_bytes)));
  for (int g = 0; g < kRowGroups; ++g) {
    const int first = o0 + g * 16, rows = std::clamp(w.rows - first, 0, 16);
    const uint8_t* row[16];
    for (int r = 0; r < 16; ++r) row[r] = r < rows ? ggml_block(w, int64_t(first + r) * nb) : nullptr;
    const __mmask16 present = __mmask16((1u << rows) - 1);
    for (int b = 0; b < nb; ++b) {
      transpose_block(p.codes + b * kBlockPanel + g * 64, row, size_t(b), bytes, q4);
      const __m512i d = rows ? _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), present, at, row[0] + b * bytes, 1)
                             : _mm512_setzero_si512();
      _mm512_store_ps(p.d + b * kItemRows + g * 16, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d)));
    }
  }
}

// y rows [o0, o0 + kItemRows) ∩ [0, OC) for tokens [t0, t0 + RT): the block loop on registers.
template <int RT>
void tile_product(float* y, const Panel& p, const QuantX& x, int OC, int o0, int t0) {
  const int nb = x.nb;
  __m512 acc[kRowGroups][RT];
#pragma GCC unroll 16
  for (auto& a : acc)
#pragma GCC unroll 16
    for (auto& v : a) v = _mm512_setzero_ps();
  const int8_t* xq = x.q + size_t(t0) * x.IC;
  const float* xd = x.d + size_t(t0) * nb;
  const int32_t* xo = x.off + size_t(t0) * nb;
  for (int b = 0; b < nb; ++b) {
    __m512i c[kRowGroups][RT];
#pragma GCC unroll 16
    for (int t = 0; t < RT; ++t)
#pragma GCC unroll 16
      for (int g = 0; g < kRowGroups; ++g) c[g][t] = _mm512_set1_epi32(xo[t * nb + b]);
    const uint8_t* pb = p.codes + b * kBlockPanel;
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      __m512i wv[kRowGroups];
#pragma GCC unroll 16
      for (int g = 0; g < kRowGroups; ++g) wv[g] = _mm512_load_si512(pb + j * kDwordRow + g * 64);
#pragma GCC unroll 16
      for (int t = 0; t < RT; ++t) {
        int32_t xj;
        std::memcpy(&xj, xq + size_t(t) * x.IC + b * 32 + j * 4, 4);
        const __m512i xv = _mm512_set1_epi32(xj);
#pragma GCC unroll 16
        for (int g = 0; g < kRowGroups; ++g) c[g][t] = _mm512_dpbusd_epi32(c[g][t], wv[g], xv);
      }
    }
#pragma GCC unroll 16
    for (int g = 0; g < kRowGroups; ++g) {
      const __m512 dw = _mm512_load_ps(p.d + b * kItemRows + g * 16);
#pragma GCC unroll 16
      for (int t = 0; t < RT; ++t) {
        const __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(xd[t * nb + b]));
        acc[g][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c[g][t]), s, acc[g][t]);
      }
    }
  }
#pragma GCC unroll 16
  for (int g = 0; g < kRowGroups; ++g) {
    const int rows = std::min(16, OC - o0 - g * 16);
    if (rows <= 0) break;
    const __mmask16 m = __mmask16((1u << rows) - 1);
#pragma GCC unroll 16
    for (int t = 0; t < RT; ++t) _mm512_mask_storeu_ps(y + size_t(t0 + t) * OC + o0 + g * 16, m, acc[g][t]);
  }
}

// Tokens [t0, t1) against the panel, kTokens at a time, then the rest.
void tokens_product(float* y, const Panel& p, const QuantX& x, int OC, int o0, int t0, int t1) {
  int t = t0;
  for (; t + kTokens <= t1; t += kTokens) tile_product<kTokens>(y, p, x, OC, o0, t);
  switch (t1 - t) {
    case 5: return tile_product<5>(y, p, x, OC, o0, t);
    case 4: return tile_product<4>(y, p, x, OC, o0, t);
    case 3: return tile_product<3>(y, p, x, OC, o0, t);
    case 2: return tile_product<2>(y, p, x, OC, o0, t);
    case 1: return tile_product<1>(y, p, x, OC, o0, t);
    default: return;
  }
}

}  // namespace

void ggml_forward(float* y, const float* x, const WeightView& w, int T, void* scratch, int threads) {
  const int IC = w.cols, OC = w.rows, nb = IC / 32;
  char* p = static_cast<char*>(scratch);
  auto* xq = reinterpret_cast<int8_t*>(p);
  auto* xd = reinterpret_cast<float*>(p + align64(size_t(T) * IC));
  auto* xo = reinterpret_cast<int32_t*>(p + align64(size_t(T) * IC) + align64(size_t(T) * nb * 4));
  char* panels = p + ggml_forward_scratch_bytes(T, IC, 0);
  const int k = w.kind == WeightKind::Q4_0 ? 8 : 128;
  const QuantX qx{xq, xd, xo, IC, nb};
  // work items: row groups, each split into `chunks` token ranges of whole register tiles where the
  // row groups alone are fewer than twice the team
  const int groups = (OC + kItemRows - 1) / kItemRows, tiles = std::max(1, (T + kTokens - 1) / kTokens);
  const int chunks = std::clamp((2 * threads + groups - 1) / groups, 1, tiles);
  const int chunk_tokens = (tiles + chunks - 1) / chunks * kTokens;
#pragma omp parallel num_threads(threads)
  {
#pragma omp for schedule(static)
    for (int t = 0; t < T; ++t)
      quantize_token(xq + size_t(t) * IC, xd + size_t(t) * nb, xo + size_t(t) * nb, x + size_t(t) * IC, IC, k);
    char* mine = panels + size_t(omp_get_thread_num()) * ggml_forward_panel_bytes(IC);
    const Panel pn{reinterpret_cast<uint8_t*>(mine), reinterpret_cast<float*>(mine + align64(size_t(kItemRows) * IC))};
    int filled = -1;  // the row group the panel holds
#pragma omp for schedule(static)
    for (int i = 0; i < groups * chunks; ++i) {
      const int g = i / chunks, t0 = (i % chunks) * chunk_tokens;
      if (t0 >= T) continue;
      if (g != filled) fill_panel(pn, w, g * kItemRows), filled = g;
      tokens_product(y, pn, qx, OC, g * kItemRows, t0, std::min(T, t0 + chunk_tokens));
    }
  }
}

}  // namespace lt::cpu::vnni
