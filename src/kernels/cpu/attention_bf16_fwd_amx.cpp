// The bf16 training attention's forward on AMX tiles (tdpbf16ps), for CPUs where amx_bf16_usable():
// the same contract, masking, rounding and online softmax as attention_bf16_fwd_avx512.cpp (read its
// header), with the two products of a key tile done as tile multiplies. A work item is 16 queries
// of one head (one tile of rows); per tile of kBk = 32 keys:
//   s (16, 32)    = Q (16, HS) · K tileᵀ   tiles 0, 1 (16 keys each), HS/32 multiplies each;
//                                          B = the packed score tile (HS/2, 32, 2), already in the
//                                          pair layout AMX reads;
//   softmax       per row on AVX-512 (softmax_step: P rounded to bf16, running max / sum in f32);
//   acc (16, HS)  = acc · alpha + P (16, 32) · V tile   tiles 4-7 (16 dims each), B = the packed
//                                          row-pair tile (16, HS, 2); the product lands in a scratch
//                                          and is added to acc row by row (the rescale is per row).
// Tiles 2 and 3 hold the A and B operands. Every row of a tile sums its 32 products in the unit's
// fixed order, so results are deterministic and do not depend on the thread count; they differ
// from the vdpbf16ps kernel's only in f32 summation order. AMX flushes bf16 subnormal inputs
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

void fwd_item(const FwdArgs& a, int h, int t0) {
  alignas(64) u16 qr[kRows * kMaxHS];     // (16, HS) query rows, zero past nq
  alignas(64) float acc[kRows * kMaxHS];  // (16, HS) unnormalized outputs
  alignas(64) float s[kRows * kBk];       // (16, 32) scores of a key tile
  alignas(64) u16 p16[kRows * kBk];       // (16, 32) rounded probabilities
  alignas(64) float pv[kRows * 64];       // (16, 64) P · V for four tiles of dims
  float m[kRows], l[kRows], alpha[kRows];
  const int T = a.T, NH = a.NH, NKV = a.NKV, HS = a.HS;
  const int t1 = imin(t0 + kRows, T), nq = t1 - t0, hk = h / (NH / NKV);
  int jlo = t1 - 1;
  std::memset(qr, 0, sizeof(u16) * kRows * HS);
  for (int t = t0; t < t1; t++) {
    jlo = imin(jlo, a.doc_start[t]);
    std::memcpy(qr + (size_t)(t - t0) * HS, a.q + ((size_t)t * NH + h) * HS, sizeof(u16) * HS);
  }
  std::memset(acc, 0, sizeof(float) * kRows * HS);
  for (int i = 0; i < kRows; i++) m[i] = -INFINITY, l[i] = 0.0f;
  for (int kb = jlo - jlo % kBk; kb < t1; kb += kBk) {
    const int nb = imin(kBk, t1 - kb);
    if (!any_sees(a.doc_start, t0, nq, kb + nb - 1)) continue;
    const u16* kt = a.tiles.at(kScoreK, hk, kb);
    const u16* vp = a.tiles.at(kPairsV, hk, kb);
    scores_16x32(s, qr, HS * 2, kt, HS);
    for (int i = 0; i < kRows; i++) {
      const int t = t0 + i;
      const int lo = i < nq ? imax(a.doc_start[t], kb) - kb : 1, hi = i < nq ? imin(t, kb + nb - 1) - kb : 0;
      if (lo > hi) {  // nothing of this tile: the row's P is zero and its acc unchanged
        std::memset(p16 + i * kBk, 0, sizeof(u16) * kBk);
        alpha[i] = 1.0f;
        continue;
      }
      alpha[i] = softmax_step(p16 + i * kBk, s + i * kBk, lo, hi, a.scale, m[i], l[i]);
    }
    for (int d0 = 0; d0 < HS; d0 += 64) {
      const int nt = imin(4, (HS - d0) / 16);
      pairs_16xN(pv, p16, kBk * 2, vp + (size_t)d0 * 2, HS * 4, nt);
      for (int i = 0; i < kRows; i++) {
        const __m512 al = _mm512_set1_ps(alpha[i]);
        float* ar = acc + (size_t)i * HS + d0;
        for (int u = 0; u < nt; u++)
          _mm512_storeu_ps(ar + u * 16, _mm512_fmadd_ps(_mm512_loadu_ps(ar + u * 16), al,
                                                         _mm512_loadu_ps(pv + i * 64 + u * 16)));
      }
    }
  }
  for (int i = 0; i < nq; i++) {
    const int t = t0 + i;
    float* ot = a.out + ((size_t)t * NH + h) * HS;
    const __m512 inv = _mm512_set1_ps(1.0f / l[i]);
    for (int d = 0; d < HS; d += 16) _mm512_storeu_ps(ot + d, _mm512_mul_ps(_mm512_loadu_ps(acc + (size_t)i * HS + d), inv));
    if (a.lse) a.lse[(size_t)h * T + t] = m[i] + std::log(l[i]);
  }
}

}  // namespace

bool attention_train_forward_bf16(float* out, float* lse, const u16* q, const u16* k, const u16* v,
                                  const int* doc_start, int T, int NH, int NKV, int HS) {
  if (HS % 32 != 0 || HS > kMaxHS) return avx512::attention_train_forward_bf16(out, lse, q, k, v, doc_start, T, NH, NKV, HS);
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
