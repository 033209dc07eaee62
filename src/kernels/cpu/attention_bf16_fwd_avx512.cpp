// Training attention with bf16 Q, K, V, O and dO tiles on AVX512-BF16 (`vdpbf16ps`), f32
// accumulation: the TrainOps entries attention_train_forward_bf16 / attention_backward_bf16
// (contracts in kernels/backward.h). Same tiling, work items and masking as the f32 kernels of
// train_kernels.inc (flash-style online softmax, no T×T buffer; every work item owns the rows it
// writes, so results do not depend on the thread count), with the products done on bf16 pairs:
//   scores  s = q·kᵀ, dp = dO·vᵀ   pairs along the head dimension: a key tile is packed as
//                                  (HS/2, kBk, 2) and one vdpbf16ps scores 16 keys for 2 dims;
//   P·V, dS·K (dq)                 pairs along the keys: the tile packed as (kBk/2, HR, 2), the
//                                  probabilities (or dS) of two keys broadcast as one bf16 pair;
//   Pᵀ·dO, dSᵀ·Q (dv, dk)          pairs along the queries: kKvBatch queries packed (16/2, HR, 2).
// P and dS are rounded to bf16 (as FlashAttention does on GPUs); the softmax (max, exp, sums, lse)
// and every accumulator stay f32, and the running sum l adds the rounded P, so out is the exact
// normalization of what P·V summed. HR = HS rounded up to 16; odd HS is zero-padded.
// This file: the forward; attention_bf16_bwd_avx512.cpp the backward; attention_bf16_avx512.inc
// the shared tile helpers. Compiled with the AVX-512 flags (file suffix); installed in the
// TrainOps table only when the CPU has avx512_bf16 (train_common.cpp).
// GCC 12 warns about _mm512_undefined_ps() inside its own intrinsics: false positive.
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

namespace lt::cpu::avx512 {
namespace {
#include "kernels/cpu/simd_vec_avx512.inc"

#include "kernels/cpu/attention_bf16_avx512.inc"

// ---- forward ----

struct FwdArgs {
  float* out;
  float* lse;
  const u16 *q, *k, *v;
  const int* doc_start;
  int T, NH, NKV, HS;
  float scale;
  PackedTiles tiles;  // kScoreK, kPairsV
};

void fwd_item(const FwdArgs& a, int h, int t0) {
  alignas(64) u16 qr[kBq * kMaxHS];      // (nq, HR) query rows
  alignas(64) float acc[kBq * kMaxHS];   // (nq, HR) unnormalized outputs
  alignas(64) float s[kQG * kBk];        // scores of a query group
  alignas(64) u16 p16[kQG * kBk];        // rounded probabilities of a query group
  alignas(64) float dummy[kMaxHS];       // accumulator of a group's unused slots
  float m[kBq], l[kBq];
  const int T = a.T, NH = a.NH, NKV = a.NKV, HS = a.HS, HR = round16(HS);
  const int t1 = imin(t0 + kBq, T), nq = t1 - t0, hk = h / (NH / NKV);
  int jlo = t1 - 1;
  for (int t = t0; t < t1; t++) {
    jlo = imin(jlo, a.doc_start[t]);
    copy_row(qr + (size_t)(t - t0) * HR, a.q + ((size_t)t * NH + h) * HS, HS, HR);
  }
  std::memset(acc, 0, sizeof(float) * nq * HR);
  for (int i = 0; i < nq; i++) m[i] = -INFINITY, l[i] = 0.0f;
  for (int kb = jlo - jlo % kBk; kb < t1; kb += kBk) {  // the packed tiles start at multiples of kBk
    const int nb = imin(kBk, t1 - kb);
    const u16* kt = a.tiles.at(kScoreK, hk, kb);
    const u16* vp = a.tiles.at(kPairsV, hk, kb);
    for (int tg = imax(t0, kb); tg < t1; tg += kQG) {
      const int ng = imin(kQG, t1 - tg);
      if (!any_sees(a.doc_start, tg, ng, kb + nb - 1)) continue;
      const u16* xs[kQG];
      float* accs[kQG];
      const u16* ps[kQG];
      float alpha[kQG];
      for (int g = 0; g < kQG; g++) xs[g] = qr + (size_t)(tg + imin(g, ng - 1) - t0) * HR;
      tile_scores<kQG>(s, xs, kt, HS);
      int jp0 = kBk / 2, jp1 = 0;
      for (int g = 0; g < kQG; g++) {
        const int t = tg + g, i = t - t0;
        ps[g] = p16 + g * kBk;
        const int lo = g < ng ? imax(a.doc_start[t], kb) - kb : 1, hi = g < ng ? imin(t, kb + nb - 1) - kb : 0;
        if (lo > hi) {  // nothing of this tile: unchanged
          std::memset(p16 + g * kBk, 0, sizeof(u16) * kBk);
          accs[g] = dummy, alpha[g] = 0.0f;
          continue;
        }
        alpha[g] = softmax_step(p16 + g * kBk, s + g * kBk, lo, hi, a.scale, m[i], l[i]);
        accs[g] = acc + (size_t)i * HR;
        jp0 = imin(jp0, lo / 2), jp1 = imax(jp1, hi / 2 + 1);
      }
      if (jp0 < jp1) accumulate_pairs<kQG>(accs, alpha, ps, vp, jp0, jp1, HR);
    }
  }
  for (int i = 0; i < nq; i++) {
    const int t = t0 + i;
    float* ot = a.out + ((size_t)t * NH + h) * HS;
    const float inv = 1.0f / l[i];
    for (int d = 0; d < HS; d += 16) {
      __mmask16 mk = mask16(HS - d);
      _mm512_mask_storeu_ps(ot + d, mk, _mm512_mul_ps(_mm512_loadu_ps(acc + (size_t)i * HR + d), _mm512_set1_ps(inv)));
    }
    if (a.lse) a.lse[(size_t)h * T + t] = m[i] + std::log(l[i]);
  }
}

}  // namespace

bool attention_train_forward_bf16(float* out, float* lse, const u16* q, const u16* k, const u16* v,
                                  const int* doc_start, int T, int NH, int NKV, int HS) {
  LT_CHECK(NKV >= 1 && NH % NKV == 0, "attention_train_forward_bf16: NH={} is not a multiple of NKV={}", NH, NKV);
  if (HS > kMaxHS) return false;
  check_doc_start(doc_start, T, "attention_train_forward_bf16");
  AttentionWorkspace ws = bound_attention_workspace();
  const FwdArgs a{out, lse, q, k, v, doc_start, T, NH, NKV, HS, 1.0f / std::sqrt((float)HS),
                  packed_tiles_buffer(ws, T, NKV, HS)};
  const int nqb = (T + kBq - 1) / kBq;
#pragma omp parallel if ((long)T * NH > kBq)
  {
    pack_tiles(a.tiles, (1u << kScoreK) | (1u << kPairsV), k, v, T, NKV, HS);
#pragma omp barrier
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int h = 0; h < NH; h++)
      for (int b = 0; b < nqb; b++) fwd_item(a, h, b * kBq);
  }
  return true;
}


}  // namespace lt::cpu::avx512
