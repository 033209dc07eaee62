// The backward of the bf16 training attention (attention_bf16_fwd_avx512.cpp has the layouts and
// the rounding rules), flash-attention-2 style in two passes like train_kernels.inc's f32 one:
//   pass 1, item = (KV head, key tile): dk, dv rows of the tile; the queries of the group's heads
//           that see the tile, kKvBatch at a time, give P and dS tiles whose bf16 query pairs
//           update dk += dSᵀ·Q, dv += Pᵀ·dO (vdpbf16ps along the queries);
//   pass 2, item = (head, query tile): dq += dS·K, with the bf16 dS rows pass 1 kept where it can
//           (attention_stored_ds.h), else recomputing P and dS.
// Every item owns the rows it writes: deterministic for any thread count. dO arrives in f32 and is
// rounded to bf16 per row as it is packed; D = rowsum(dO ∘ O) uses the same rounded dO, so that
// D = Σ_j P_j dP_j holds for what dP used (with the f32 dO the difference dP − D would carry dO's
// rounding uncancelled: at T = 1, dS is 0 exactly only this way).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/backward.h"
#include "kernels/cpu/attention_stored_ds.h"
#include "kernels/cpu/attention_workspace.h"
#include "kernels/cpu/train_kernels.h"

namespace lt::cpu::avx512 {
namespace {
#include "kernels/cpu/simd_vec_avx512.inc"

#include "kernels/cpu/attention_bf16_avx512.inc"
#include "kernels/cpu/attention_bf16_bwd.inc"

// s (NQ, kBk) = x[i] · xt and dp (NQ, kBk) = y[i] · yt (score tiles), one sweep (NQ * 4 chains).
template <int NQ>
inline void tile_scores2(float* s, float* dp, const u16* const* x, const u16* xt, const u16* const* y,
                         const u16* yt, int HS) {
  __m512 a[NQ][2], b[NQ][2];
  for (int i = 0; i < NQ; i++) a[i][0] = a[i][1] = b[i][0] = b[i][1] = _mm512_setzero_ps();
  const int HP = (HS + 1) / 2;
  for (int p = 0; p < HP; p++) {
    const u16* tx = xt + (size_t)p * kBk * 2;
    const u16* ty = yt + (size_t)p * kBk * 2;
    __m512bh x0 = (__m512bh)_mm512_loadu_si512(tx), x1 = (__m512bh)_mm512_loadu_si512(tx + 32);
    __m512bh y0 = (__m512bh)_mm512_loadu_si512(ty), y1 = (__m512bh)_mm512_loadu_si512(ty + 32);
#pragma GCC unroll 8
    for (int i = 0; i < NQ; i++) {
      __m512bh bx = (__m512bh)_mm512_set1_epi32((int)pair_at(x[i], p));
      __m512bh by = (__m512bh)_mm512_set1_epi32((int)pair_at(y[i], p));
      a[i][0] = _mm512_dpbf16_ps(a[i][0], bx, x0);
      a[i][1] = _mm512_dpbf16_ps(a[i][1], bx, x1);
      b[i][0] = _mm512_dpbf16_ps(b[i][0], by, y0);
      b[i][1] = _mm512_dpbf16_ps(b[i][1], by, y1);
    }
  }
  for (int i = 0; i < NQ; i++) {
    _mm512_storeu_ps(s + i * kBk, a[i][0]), _mm512_storeu_ps(s + i * kBk + 16, a[i][1]);
    _mm512_storeu_ps(dp + i * kBk, b[i][0]), _mm512_storeu_ps(dp + i * kBk + 16, b[i][1]);
  }
}

// Rows d0p, d1p (NV vectors from d0) += Σ_tp cT[tp][j], cT[tp][j + 1] · rows pair tp: 2 * NV chains
// in registers while the pairs stream through. NV is a template argument: with a run-time count GCC
// keeps the accumulator arrays on the stack (a load and a store around every vdpbf16ps).
template <int NV>
inline void rank_update_block(float* d0p, float* d1p, bool two, const u32* cT, int j, const u16* rows, int npair,
                              int HR, int d0) {
  __m512 a[NV], b[NV];
#pragma GCC unroll 4
  for (int u = 0; u < NV; u++) a[u] = _mm512_loadu_ps(d0p + d0 + u * 16), b[u] = _mm512_loadu_ps(d1p + d0 + u * 16);
  for (int tp = 0; tp < npair; tp++) {
    const u32 c0 = cT[tp * kBk + j], c1 = two ? cT[tp * kBk + j + 1] : 0u;
    const u16* r = rows + ((size_t)tp * HR + d0) * 2;
#pragma GCC unroll 4
    for (int u = 0; u < NV; u++) a[u] = dpbf16(a[u], c0, r + u * 32), b[u] = dpbf16(b[u], c1, r + u * 32);
  }
#pragma GCC unroll 4
  for (int u = 0; u < NV; u++) {
    _mm512_storeu_ps(d0p + d0 + u * 16, a[u]);
    if (two) _mm512_storeu_ps(d1p + d0 + u * 16, b[u]);
  }
}

// dst (nb, HR) += Σ_tp cT[tp][j] · rows pair tp (row-pair layout (npair, HR, 2)): two dst rows by
// up to kU vectors at a time.
void rank_update_pairs(float* dst, const u32* cT, const u16* rows, int npair, int nb, int HR) {
  for (int j = 0; j < nb; j += 2) {
    const bool two = j + 1 < nb;
    float* d0p = dst + (size_t)j * HR;
    float* d1p = two ? d0p + HR : d0p;
    for (int d0 = 0; d0 < HR; d0 += kU * 16) {
      switch (imin(kU, (HR - d0) / 16)) {
        case 4: rank_update_block<4>(d0p, d1p, two, cT, j, rows, npair, HR, d0); break;
        case 3: rank_update_block<3>(d0p, d1p, two, cT, j, rows, npair, HR, d0); break;
        case 2: rank_update_block<2>(d0p, d1p, two, cT, j, rows, npair, HR, d0); break;
        default: rank_update_block<1>(d0p, d1p, two, cT, j, rows, npair, HR, d0); break;
      }
    }
  }
}

// Scratch of a pass-1 item, on the worker's stack (~135 KB at HS = 256, as the f32 kernels' items).
struct KvScratch {
  alignas(64) u16 qT[kKvBatch * kMaxHS], dT[kKvBatch * kMaxHS];  // the same as query pairs (np/2, HR, 2)
  alignas(64) float p[kKvBatch * kBk], ds[kKvBatch * kBk];       // (np, kBk) P, dS
  alignas(64) u32 pT[kKvBatch / 2 * kBk], dsT[kKvBatch / 2 * kBk];
  alignas(64) float dkb[kBk * kMaxHS], dvb[kBk * kMaxHS];        // (nb, HR) the tile's dk, dv
};

// One batch of np queries (pend) of head h against the tile kb..kend: dkb, dvb updated.
void kv_batch(const BwdArgs& a, KvScratch& w, const int* pend, int np, int h, int kb, int kend) {
  const u16* kt = a.tiles.at(kScoreK, h / (a.NH / a.NKV), kb);
  const u16* vt = a.tiles.at(kScoreV, h / (a.NH / a.NKV), kb);
  const int HS = a.HS, HR = round16(HS);
  const u16* qrows[kKvBatch + 1];
  const u16* drows[kKvBatch + 1];
  for (int g = 0; g < np; g++) qrows[g] = a.qrow(pend[g], h), drows[g] = a.drow(pend[g], h);
  qrows[np] = drows[np] = nullptr;  // the zero partner of an odd last query
  for (int g0 = 0; g0 < np; g0 += kQG2) {
    const u16* xs[kQG2];
    const u16* ys[kQG2];
    for (int g = 0; g < kQG2; g++) xs[g] = qrows[imin(g0 + g, np - 1)], ys[g] = drows[imin(g0 + g, np - 1)];
    tile_scores2<kQG2>(w.p + g0 * kBk, w.ds + g0 * kBk, xs, kt, ys, vt, HS);
  }
  for (int g = 0; g < np; g++) {
    const int tq = pend[g];
    const int lo = imax(a.doc_start[tq], kb) - kb, hi = imin(tq, kend) - kb;
    tile_probs(w.p + g * kBk, w.ds + g * kBk, a.scale, a.lse[(size_t)h * a.T + tq], a.D[(size_t)h * a.T + tq],
               range_mask(lo, hi));
  }
  if (a.ds16)  // kept for pass 2: the same bf16(dS) it would compute (zero outside the mask)
    for (int g = 0; g < np; g++) round_masked(a.ds_row(h, kb, pend[g]), w.ds + g * kBk, 0xffffffffu);
  const int npair = (np + 1) / 2;
  pair_coefs(w.pT, w.p, np);
  pair_coefs(w.dsT, w.ds, np);
  pack_pair_rows(w.qT, qrows, npair, HS, HR);
  pack_pair_rows(w.dT, drows, npair, HS, HR);
  const int nb = kend - kb + 1;
  rank_update_pairs(w.dvb, w.pT, w.dT, npair, nb, HR);
  rank_update_pairs(w.dkb, w.dsT, w.qT, npair, nb, HR);
}

// Pass 1: dk, dv rows kb..kb+nb-1 of KV head hk (query gathering as in train_kernels.inc).
void kv_item(const BwdArgs& a, int hk, int kb) {
  KvScratch w;  // uninitialized: every part read is written first
  const int T = a.T, HS = a.HS, HR = round16(HS), group = a.NH / a.NKV;
  const int nb = imin(kBk, T - kb), kend = kb + nb - 1;
  const size_t stride = (size_t)a.NKV * HS, ko = ((size_t)kb * a.NKV + hk) * HS;
  std::memset(w.dkb, 0, sizeof(float) * nb * HR);
  std::memset(w.dvb, 0, sizeof(float) * nb * HR);
  for (int h = hk * group; h < (hk + 1) * group; h++) {
    for_query_batches<kKvBatch>(a, kb, kend, [&](const int* pend, int np) { kv_batch(a, w, pend, np, h, kb, kend); });
  }
  for (int j = 0; j < nb; j++)
    for (int d = 0; d < HS; d += 16) {
      __mmask16 m = mask16(HS - d);
      float* dkr = a.dk + ko + j * stride + d;
      float* dvr = a.dv + ko + j * stride + d;
      _mm512_mask_storeu_ps(dkr, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dkr), _mm512_loadu_ps(w.dkb + (size_t)j * HR + d)));
      _mm512_mask_storeu_ps(dvr, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dvr), _mm512_loadu_ps(w.dvb + (size_t)j * HR + d)));
    }
}

struct QScratch {
  alignas(64) float dqb[kBq * kMaxHS];                                   // (nq, HR) the item's dq
  alignas(64) float p[kQG * kBk], ds[kQG * kBk];
  alignas(64) u16 ds16[kQG * kBk];
  alignas(64) float dummy[kMaxHS];
};

// Pass 2: dq rows t0..t0+kBq-1 of head h.
void q_item(const BwdArgs& a, int h, int t0) {
  QScratch w;
  const int T = a.T, NH = a.NH, HS = a.HS, HR = round16(HS), hk = h / (NH / a.NKV);
  const int t1 = imin(t0 + kBq, T), nq = t1 - t0;
  int jlo = t1 - 1;
  for (int t = t0; t < t1; t++) jlo = imin(jlo, a.doc_start[t]);
  std::memset(w.dqb, 0, sizeof(float) * nq * HR);
  const float ones[kQG] = {1.0f, 1.0f, 1.0f, 1.0f};
  for (int kb = jlo - jlo % kBk; kb < t1; kb += kBk) {  // the packed tiles start at multiples of kBk
    const int nb = imin(kBk, t1 - kb);
    const u16* kt = a.tiles.at(kScoreK, hk, kb);
    const u16* vt = a.tiles.at(kScoreV, hk, kb);
    const u16* kp = a.tiles.at(kPairsK, hk, kb);
    for (int tg = imax(t0, kb); tg < t1; tg += kQG) {
      const int ng = imin(kQG, t1 - tg);
      if (!any_sees(a.doc_start, tg, ng, kb + nb - 1)) continue;
      const u16* xs[kQG];
      const u16* ys[kQG];
      const u16* cs[kQG];
      float* accs[kQG];
      for (int g = 0; g < kQG; g++) {
        const int t = tg + imin(g, ng - 1);
        xs[g] = a.qrow(t, h), ys[g] = a.drow(t, h);
      }
      if (!a.ds16) tile_scores2<kQG>(w.p, w.ds, xs, kt, ys, vt, HS);
      int jp0 = kBk / 2, jp1 = 0;
      for (int g = 0; g < kQG; g++) {
        const int t = tg + g;
        const int lo = g < ng ? imax(a.doc_start[t], kb) - kb : 1, hi = g < ng ? imin(t, kb + nb - 1) - kb : 0;
        cs[g] = w.ds16 + g * kBk;
        accs[g] = lo > hi ? w.dummy : w.dqb + (size_t)(t - t0) * HR;
        if (lo > hi) {
          std::memset(w.ds16 + g * kBk, 0, sizeof(u16) * kBk);
          continue;
        }
        if (a.ds16) {
          cs[g] = a.ds_row(h, kb, t);
        } else {
          tile_probs(w.p + g * kBk, w.ds + g * kBk, a.scale, a.lse[(size_t)h * T + t], a.D[(size_t)h * T + t],
                     range_mask(lo, hi));
          round_masked(w.ds16 + g * kBk, w.ds + g * kBk, range_mask(lo, hi));
        }
        jp0 = imin(jp0, lo / 2), jp1 = imax(jp1, hi / 2 + 1);
      }
      if (jp0 < jp1) accumulate_pairs<kQG>(accs, ones, cs, kp, jp0, jp1, HR);
    }
  }
  for (int t = t0; t < t1; t++) {
    float* dqr = a.dq + ((size_t)t * NH + h) * HS;
    const float* src = w.dqb + (size_t)(t - t0) * HR;
    for (int d = 0; d < HS; d += 16) {
      __mmask16 m = mask16(HS - d);
      _mm512_mask_storeu_ps(dqr + d, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dqr + d), _mm512_loadu_ps(src + d)));
    }
  }
}

}  // namespace

static_assert(kBk == kStoredDsTile, "attention_ds_rows_bytes sizes the rows by kStoredDsTile keys");

bool attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const u16* q, const u16* k,
                             const u16* v, const u16* out, const float* lse, const int* doc_start, int T, int NH,
                             int NKV, int HS, void* ds_rows, size_t ds_bytes) {
  LT_CHECK(NKV >= 1 && NH % NKV == 0, "attention_backward_bf16: NH={} is not a multiple of NKV={}", NH, NKV);
  if (HS > kMaxHS) return false;
  const bool sorted = check_doc_start(doc_start, T, "attention_backward_bf16");
  AttentionWorkspace ws = bound_attention_workspace();
  static thread_local std::vector<u16> own_rows;
  static thread_local std::vector<float> own_d;
  static thread_local std::vector<size_t> own_off;
  const PackedTiles tiles = packed_tiles_buffer(ws, T, NKV, HS);
  float* D = ws.take(attn_d_elems(T, NH), own_d);
  size_t* ds_off = ws.take(attn_key_tiles(T), own_off);
  u16* rows16 = ws.take(attn_rows16_elems(T, NH, HS), own_rows);  // d16, and q16 beside it for odd HS
  const size_t nrow = (size_t)T * NH * round16(HS);
  BwdArgs a{dq, dk, dv, dout, q, k, v, out, lse, doc_start, sorted, T, NH, NKV, HS, 1.0f / std::sqrt((float)HS),
            tiles, rows16, HS % 2 ? rows16 + nrow : nullptr, D};
  if (sorted && ds_rows) {
    const size_t head = stored_ds_offsets(ds_off, doc_start, T, kBk);
    if ((size_t)NH * head * sizeof(u16) <= ds_bytes)
      a.ds16 = static_cast<u16*>(ds_rows), a.ds_off = ds_off, a.ds_head = head;
  }
  const int nkb = (T + kBk - 1) / kBk, nqb = (T + kBq - 1) / kBq;
#pragma omp parallel if ((long)T * NH > kBq)
  {
    // one parallel region, one barrier before the work items: the tiles (no barrier of their
    // own), then the rows (whose omp for ends with the barrier)
    pack_tiles(a.tiles, (1u << kScoreK) | (1u << kScoreV) | (1u << kPairsK), k, v, T, NKV, HS);
    prepare_rows(a);
    if (a.ds16) {  // pass 2 reads the dS rows of pass 1: a barrier between
#pragma omp for collapse(2) schedule(dynamic, 1)
      for (int hk = 0; hk < NKV; hk++)
        for (int b = 0; b < nkb; b++) kv_item(a, hk, b * kBk);
    } else {  // dq is disjoint from dk / dv, so pass 2 needs no barrier after pass 1
#pragma omp for collapse(2) schedule(dynamic, 1) nowait
      for (int hk = 0; hk < NKV; hk++)
        for (int b = 0; b < nkb; b++) kv_item(a, hk, b * kBk);
    }
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int h = 0; h < NH; h++)
      for (int b = 0; b < nqb; b++) q_item(a, h, b * kBq);
  }
  return true;
}

}  // namespace lt::cpu::avx512
