// The bf16 training attention's forward on AMX tiles (tdpbf16ps), for CPUs where amx_bf16_usable():
// the same contract, masking, rounding and online softmax as attention_bf16_fwd_avx512.cpp (read its
// header), with the two products of a key tile done as tile multiplies. A work item is 16 queries
// of one head (one tile of rows); per tile of kBk = 32 keys:
//   s (16, 32)    = Q (16, HS) · K tileᵀ   tiles 0, 1 (16 keys each), HS/32 multiplies each;
//                                          B = the packed score tile (HS/2, 32, 2), already in the
//                                          pair layout AMX reads;
//   softmax       the 16 rows together on AVX-512: P = exp(s · scale − m) rounded to bf16, each
//                 row's sum in f32 partial sums. The running max m of a row lags: it moves only
//                 when a tile holds a score more than kMaxLag above it (then as FlashAttention's
//                 m_new = max(m, row max), the accumulators and sums rescaled by exp(m − m_new));
//                 softmax is invariant to the shift and P <= e^kMaxLag stays far inside f32;
//   acc (16, HS) += P (16, 32) · V tile    tiles 4-7 (16 dims each), B = the packed row-pair tile
//                                          (16, HS, 2); with HS <= 64 the accumulators stay in the
//                                          tiles from one key tile to the next while no max moves.
// Tiles 2 and 3 hold the A and B operands. Every row of a tile sums its 32 products in the unit's
// fixed order, so results are deterministic and do not depend on the thread count; they differ
// from the vdpbf16ps kernel's in f32 summation order, in the rescale's exp (a vector polynomial
// here, libm there) and in P's rounding under the lagging max (bf16 rounding is relative: the
// same bound). AMX flushes bf16 subnormal inputs
// and f32 subnormal results to zero (far below the bf16 rounding of q, k, v, P).
// Head sizes not a multiple of 32 (a tile row is 32 bf16) go to the AVX-512 kernel.
// Compiled with the AVX-512 and AMX flags (*_amx.cpp in CMakeLists.txt).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/backward.h"
#include "kernels/cpu/attention_workspace.h"
#include "kernels/cpu/train_kernels.h"

namespace lt::cpu::amx {
namespace {
#include "kernels/cpu/simd_vec_avx512.inc"

#include "kernels/cpu/attention_bf16_avx512.inc"
#include "kernels/cpu/amx_tiles.inc"

constexpr int kRows = 16;  // queries per work item: one tile of rows

struct FwdArgs {
  float* out;
  float* lse;
  const u16* q;
  const int* doc_start;
  int T, NH, NKV, HS;
  float scale;
  PackedTiles tiles;  // kScoreK, kPairsV
};

// Row r of the (16, 16) f32 buf reduced to lane r of the result: buf transposed, then combined
// down its rows (max or add).
template <bool kMax>
__m512 reduce_rows_16(const float* buf) {
  alignas(64) float tr[16 * 16];
  transpose_16x16_u32(reinterpret_cast<u32*>(tr), 16, reinterpret_cast<const u32*>(buf), 16);
  __m512 r = _mm512_load_ps(tr);
  for (int j = 1; j < 16; j++) {
    const __m512 x = _mm512_load_ps(tr + j * 16);
    r = kMax ? _mm512_max_ps(r, x) : _mm512_add_ps(r, x);
  }
  return r;
}

// How far (in scaled-score units) a tile's scores may exceed a row's running max before the max
// moves: up to e^8 ≈ 2981 per probability, far from f32's range; softmax is invariant to the shift.
constexpr float kMaxLag = 8.0f;

// Whether every row of the tile can keep its running max: each row that sees part of the tile
// already has one, and the tile's largest visible score is within kMaxLag of the smallest of them.
bool maxima_hold(const float* s, const uint32_t* keep, const float* m, float scale) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  __m512 mx = ninf;
  float lo = INFINITY;
  for (int i = 0; i < kRows; i++) {
    if (!keep[i]) continue;
    if (m[i] == -INFINITY) return false;
    lo = std::min(lo, m[i]);
    const float* r = s + i * kBk;
    mx = _mm512_max_ps(mx, _mm512_max_ps(_mm512_mask_loadu_ps(ninf, (__mmask16)keep[i], r),
                                         _mm512_mask_loadu_ps(ninf, (__mmask16)(keep[i] >> 16), r + 16)));
  }
  return _mm512_reduce_max_ps(mx) * scale <= lo + kMaxLag;
}

// P = exp(s · scale - m) rounded to bf16 for the 16 rows with their maxima unchanged; each row's
// rounded probabilities added to its partial sums lsum (16 lanes a row, reduced at the end).
void probabilities_16rows(u16* p16, const float* s, const uint32_t* keep, float scale, const float* m, float* lsum) {
  const V vs = V::set1(scale);
  for (int i = 0; i < kRows; i++) {
    u16* pr = p16 + i * kBk;
    if (!keep[i]) {
      std::memset(pr, 0, sizeof(u16) * kBk);
      continue;
    }
    const V vmi = V::set1(m[i]);
    const __m512 e0 = _mm512_maskz_mov_ps((__mmask16)keep[i], V::exp(V::load(s + i * kBk) * vs - vmi).v);
    const __m512 e1 = _mm512_maskz_mov_ps((__mmask16)(keep[i] >> 16), V::exp(V::load(s + i * kBk + 16) * vs - vmi).v);
    const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(e1, e0);
    _mm512_storeu_si512(pr, h);
    const __m512 sum = _mm512_add_ps(widen(_mm512_castsi512_si256(h)), widen(_mm512_extracti64x4_epi64(h, 1)));
    _mm512_store_ps(lsum + i * 16, _mm512_add_ps(_mm512_load_ps(lsum + i * 16), sum));
  }
}

// softmax_step (attention_bf16_avx512.inc) for the item's 16 rows at once where a row's max moves:
// row i's scores s + i·kBk on the lanes of keep[i] (0: the row sees nothing of the tile; its P row
// is zero, m stays, alpha is 1). The rows' maxima go through a 16 × 16 transpose instead of a
// horizontal reduction per row, the rescales exp(m - m_new) through one vector exp; the partial
// sums lsum are rescaled, then take the tile's probabilities.
void softmax_16rows(u16* p16, const float* s, const uint32_t* keep, float scale, float* m, float* lsum, float* alpha) {
  alignas(64) float buf[16 * 16];
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  __mmask16 seen = 0;
  for (int i = 0; i < kRows; i++) {
    const float* r = s + i * kBk;
    seen |= keep[i] ? (__mmask16)(1u << i) : (__mmask16)0;
    _mm512_store_ps(buf + i * 16, _mm512_max_ps(_mm512_mask_loadu_ps(ninf, (__mmask16)keep[i], r),
                                                _mm512_mask_loadu_ps(ninf, (__mmask16)(keep[i] >> 16), r + 16)));
  }
  const __m512 vm = _mm512_loadu_ps(m);
  const __m512 vn = _mm512_mask_max_ps(vm, seen, vm, _mm512_mul_ps(reduce_rows_16<true>(buf), _mm512_set1_ps(scale)));
  const __m512 va = _mm512_mask_blend_ps(seen, _mm512_set1_ps(1.0f), V::exp(V{_mm512_sub_ps(vm, vn)}).v);
  _mm512_storeu_ps(m, vn);
  _mm512_storeu_ps(alpha, va);
  for (int i = 0; i < kRows; i++)
    _mm512_store_ps(lsum + i * 16, _mm512_mul_ps(_mm512_load_ps(lsum + i * 16), _mm512_set1_ps(alpha[i])));
  probabilities_16rows(p16, s, keep, scale, m, lsum);
}

// acc (16, HS) = acc · alpha, row by row
void rescale_rows(float* acc, int HS, const float* alpha) {
  for (int i = 0; i < kRows; i++) {
    const __m512 al = _mm512_set1_ps(alpha[i]);
    float* ar = acc + (size_t)i * HS;
    for (int d = 0; d < HS; d += 16) _mm512_storeu_ps(ar + d, _mm512_mul_ps(_mm512_loadu_ps(ar + d), al));
  }
}

// The item's running maxima lag the true ones by up to kMaxLag (maxima_hold): a tile whose scores
// stay within that of every row's max leaves the maxima, and so the accumulators, unscaled. With
// HS <= 64 the accumulators then stay in tiles 4-7 across such key tiles (stored, rescaled and
// reloaded only where a max moves); larger heads go through memory every tile.
void fwd_item(const FwdArgs& a, int h, int t0) {
  alignas(64) u16 qr[kRows * kMaxHS];     // (16, HS) query rows, zero past nq
  alignas(64) float acc[kRows * kMaxHS];  // (16, HS) unnormalized outputs
  alignas(64) float s[kRows * kBk];       // (16, 32) scores of a key tile
  alignas(64) u16 p16[kRows * kBk];       // (16, 32) rounded probabilities
  alignas(64) float lsum[kRows * 16];     // per row, 16 partial sums of its probabilities
  alignas(64) float m[kRows], alpha[kRows];
  const int T = a.T, NH = a.NH, NKV = a.NKV, HS = a.HS;
  const int t1 = imin(t0 + kRows, T), nq = t1 - t0, hk = h / (NH / NKV);
  const bool in_tiles = HS <= 64;  // the accumulators live in tiles 4..3+HS/16
  const int nt = imin(4, HS / 16);
  int jlo = t1 - 1;
  std::memset(qr, 0, sizeof(u16) * kRows * HS);
  for (int t = t0; t < t1; t++) {
    jlo = imin(jlo, a.doc_start[t]);
    std::memcpy(qr + (size_t)(t - t0) * HS, a.q + ((size_t)t * NH + h) * HS, sizeof(u16) * HS);
  }
  std::memset(acc, 0, sizeof(float) * kRows * HS);
  std::memset(lsum, 0, sizeof lsum);
  for (int i = 0; i < kRows; i++) m[i] = -INFINITY;
  if (in_tiles) acc_zero(nt);
  for (int kb = jlo - jlo % kBk; kb < t1; kb += kBk) {
    const int nb = imin(kBk, t1 - kb);
    if (!any_sees(a.doc_start, t0, nq, kb + nb - 1)) continue;
    const u16* kt = a.tiles.at(kScoreK, hk, kb);
    const u16* vp = a.tiles.at(kPairsV, hk, kb);
    scores_16x32(s, qr, HS * 2, kt, HS);
    uint32_t keep[kRows];  // 0 where a row sees nothing of this tile: its P is zero and its acc unchanged
    for (int i = 0; i < kRows; i++) {
      const int t = t0 + i;
      keep[i] = i < nq ? range_mask(imax(a.doc_start[t], kb) - kb, imin(t, kb + nb - 1) - kb) : 0u;
    }
    if (maxima_hold(s, keep, m, a.scale)) {
      probabilities_16rows(p16, s, keep, a.scale, m, lsum);
    } else {
      if (in_tiles) acc_store(acc, HS * 4, nt);
      softmax_16rows(p16, s, keep, a.scale, m, lsum, alpha);
      rescale_rows(acc, HS, alpha);
      if (in_tiles) acc_load(acc, HS * 4, nt);
    }
    if (in_tiles) {
      pairs_into_acc(p16, kBk * 2, vp, HS * 4, nt);
      continue;
    }
    for (int d0 = 0; d0 < HS; d0 += 64)
      pairs_acc_16xN(acc + d0, HS * 4, p16, kBk * 2, vp + (size_t)d0 * 2, HS * 4, imin(4, (HS - d0) / 16));
  }
  if (in_tiles) acc_store(acc, HS * 4, nt);
  const __m512 l = reduce_rows_16<false>(lsum);
  alignas(64) float lv[kRows];
  _mm512_store_ps(lv, l);
  for (int i = 0; i < nq; i++) {
    const int t = t0 + i;
    float* ot = a.out + ((size_t)t * NH + h) * HS;
    const __m512 inv = _mm512_set1_ps(1.0f / lv[i]);
    for (int d = 0; d < HS; d += 16)
      _mm512_storeu_ps(ot + d, _mm512_mul_ps(_mm512_loadu_ps(acc + (size_t)i * HS + d), inv));
    if (a.lse) a.lse[(size_t)h * T + t] = m[i] + std::log(lv[i]);
  }
}

}  // namespace

bool attention_train_forward_bf16(float* out, float* lse, const u16* q, const u16* k, const u16* v,
                                  const int* doc_start, int T, int NH, int NKV, int HS) {
  if (HS % 32 != 0 || HS > kMaxHS)
    return avx512::attention_train_forward_bf16(out, lse, q, k, v, doc_start, T, NH, NKV, HS);
  LT_CHECK(NKV >= 1 && NH % NKV == 0, "attention_train_forward_bf16 (amx): NH={} is not a multiple of NKV={}", NH, NKV);
  check_doc_start(doc_start, T, "attention_train_forward_bf16 (amx)");
  AttentionWorkspace ws = bound_attention_workspace();
  const FwdArgs a{out, lse, q, doc_start, T, NH, NKV, HS, 1.0f / std::sqrt((float)HS),
                  packed_tiles_buffer(ws, T, NKV, HS)};
  const int nqb = (T + kRows - 1) / kRows;
#pragma omp parallel if ((long)T * NH > kRows)
  {
    pack_tiles(a.tiles, (1u << kScoreK) | (1u << kPairsV), k, v, T, NKV, HS);
    load_tile_config();
#pragma omp barrier
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int h = 0; h < NH; h++)
      for (int b = 0; b < nqb; b++) fwd_item(a, h, b * kRows);
    _tile_release();
  }
  return true;
}

}  // namespace lt::cpu::amx
