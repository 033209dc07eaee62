// The bf16 training attention's backward on AMX tiles, for CPUs where amx_bf16_usable(): the same
// contract, rounding and two passes as attention_bf16_bwd_avx512.cpp (read its header), with the
// products as tile multiplies (amx_tiles.inc); D, P, dS and the prepared rows are shared
// (attention_bf16_bwd.inc).
//   pass 1, item = (KV head, key tile of 32): the queries that see the tile, 32 at a time (zero rows
//           pad a short batch): S and dP (32, 32) from the packed score tiles of K and V; P and dS
//           in f32, rounded to bf16 as query pairs (pair_coefs) and transposed as 32-bit pairs into
//           the A operands Pᵀ, dSᵀ (32 keys, 16 query pairs); dv += Pᵀ·dO and dk += dSᵀ·Q with dO
//           and Q packed as query-pair rows (B), accumulated in the item's f32 rows;
//   pass 2, item = (head, 16 queries): dq += dS·K against the packed key-pair tile, the A operand
//           pass 1's bf16 dS rows where it kept them (sorted document starts and the rows fit in
//           the caller's ds_rows, attention_stored_ds.h: then a barrier between the passes), else
//           S, dP, dS recomputed per key tile and dS rounded to bf16 (the same bits).
// Each item owns what it writes and every tile sums in the unit's fixed order: deterministic for
// any thread count. Head sizes not a multiple of 32 go to the AVX-512 kernel.
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

namespace lt::cpu::amx {
namespace {
#include "kernels/cpu/simd_vec_avx512.inc"

#include "kernels/cpu/attention_bf16_avx512.inc"
#include "kernels/cpu/attention_bf16_bwd.inc"
#include "kernels/cpu/amx_tiles.inc"

constexpr int kKv = 32;    // queries per pass-1 batch: the K depth of one tile multiply
constexpr int kRows = 16;  // queries per pass-2 item

// Scratch of a pass-1 item (~150 KB at HS = 256).
struct KvScratch {
  alignas(64) u16 qb[kKv * kMaxHS], db[kKv * kMaxHS];  // (32, HS) the batch's q, bf16(dO) rows
  alignas(64) u16 qT[kKv * kMaxHS], dT[kKv * kMaxHS];  // the same as query-pair rows (16, HS, 2)
  alignas(64) float p[kKv * kBk], ds[kKv * kBk];       // (32 queries, 32 keys) P, dS
  alignas(64) u32 pT[kKv / 2 * kBk], dsT[kKv / 2 * kBk];  // (16 query pairs, 32 keys)
  alignas(64) u32 pA[kBk * kKv / 2], dsA[kBk * kKv / 2];  // (32 keys, 16 query pairs): A operands
  alignas(64) float dkb[kBk * kMaxHS], dvb[kBk * kMaxHS]; // (32, HS) the tile's dk, dv
};

// One batch of np <= 32 queries (pend) of head h against the key tile kb..kend.
void kv_batch(const BwdArgs& a, KvScratch& w, const int* pend, int np, int h, int kb, int kend) {
  const int hk = h / (a.NH / a.NKV), HS = a.HS;
  const u16* kt = a.tiles.at(kScoreK, hk, kb);
  const u16* vt = a.tiles.at(kScoreV, hk, kb);
  const u16* qrows[kKv];
  const u16* drows[kKv];
  for (int g = 0; g < kKv; g++) {
    qrows[g] = g < np ? a.qrow(pend[g], h) : nullptr;
    drows[g] = g < np ? a.drow(pend[g], h) : nullptr;
    u16* qd = w.qb + (size_t)g * HS;
    u16* dd = w.db + (size_t)g * HS;
    if (g < np) std::memcpy(qd, qrows[g], sizeof(u16) * HS), std::memcpy(dd, drows[g], sizeof(u16) * HS);
  }
  const int ngroups = (np + 15) / 16;
  for (int gr = 0; gr < ngroups; gr++) {
    scores_16x32(w.p + gr * 16 * kBk, w.qb + (size_t)gr * 16 * HS, HS * 2, kt, HS);
    scores_16x32(w.ds + gr * 16 * kBk, w.db + (size_t)gr * 16 * HS, HS * 2, vt, HS);
  }
  for (int g = 0; g < kKv; g++) {
    if (g >= np) {
      std::memset(w.p + g * kBk, 0, sizeof(float) * kBk);
      std::memset(w.ds + g * kBk, 0, sizeof(float) * kBk);
      continue;
    }
    const int tq = pend[g];
    const int lo = imax(a.doc_start[tq], kb) - kb, hi = imin(tq, kend) - kb;
    tile_probs(w.p + g * kBk, w.ds + g * kBk, a.scale, a.lse[(size_t)h * a.T + tq], a.D[(size_t)h * a.T + tq],
               range_mask(lo, hi));
  }
  if (a.ds16)  // kept for pass 2: the same bf16(dS) it would compute (zero outside the mask)
    for (int g = 0; g < np; g++) round_masked(a.ds_row(h, kb, pend[g]), w.ds + g * kBk, 0xffffffffu);
  pair_coefs(w.pT, w.p, kKv);
  pair_coefs(w.dsT, w.ds, kKv);
  for (int kg = 0; kg < 2; kg++) {
    transpose_16x16_u32(w.pA + kg * 16 * 16, 16, w.pT + kg * 16, kBk);
    transpose_16x16_u32(w.dsA + kg * 16 * 16, 16, w.dsT + kg * 16, kBk);
  }
  pack_pair_rows(w.qT, qrows, kKv / 2, HS, HS);
  pack_pair_rows(w.dT, drows, kKv / 2, HS, HS);
  const int nkg = (kend - kb + 1 + 15) / 16;
  for (int kg = 0; kg < nkg; kg++)
    for (int d0 = 0; d0 < HS; d0 += 64) {
      const int nt = imin(4, (HS - d0) / 16);
      pairs_acc_16xN(w.dvb + (size_t)kg * 16 * HS + d0, HS * 4, reinterpret_cast<const u16*>(w.pA + kg * 16 * 16), 64,
                     w.dT + (size_t)d0 * 2, HS * 4, nt);
      pairs_acc_16xN(w.dkb + (size_t)kg * 16 * HS + d0, HS * 4, reinterpret_cast<const u16*>(w.dsA + kg * 16 * 16), 64,
                     w.qT + (size_t)d0 * 2, HS * 4, nt);
    }
}

// Pass 1: dk, dv rows kb..kb+nb-1 of KV head hk (the queries gathered as the AVX-512 kernel does).
void kv_item(const BwdArgs& a, int hk, int kb) {
  KvScratch w;  // uninitialized: every part read is written first
  const int T = a.T, HS = a.HS, group = a.NH / a.NKV;
  const int nb = imin(kBk, T - kb), kend = kb + nb - 1;
  const size_t stride = (size_t)a.NKV * HS, ko = ((size_t)kb * a.NKV + hk) * HS;
  std::memset(w.dkb, 0, sizeof(float) * kBk * HS);
  std::memset(w.dvb, 0, sizeof(float) * kBk * HS);
  for (int h = hk * group; h < (hk + 1) * group; h++) {
    for_query_batches<kKv>(a, kb, kend, [&](const int* pend, int np) { kv_batch(a, w, pend, np, h, kb, kend); });
  }
  for (int j = 0; j < nb; j++)
    for (int d = 0; d < HS; d += 16) {
      float* dkr = a.dk + ko + j * stride + d;
      float* dvr = a.dv + ko + j * stride + d;
      _mm512_storeu_ps(dkr, _mm512_add_ps(_mm512_loadu_ps(dkr), _mm512_loadu_ps(w.dkb + (size_t)j * HS + d)));
      _mm512_storeu_ps(dvr, _mm512_add_ps(_mm512_loadu_ps(dvr), _mm512_loadu_ps(w.dvb + (size_t)j * HS + d)));
    }
}

// The A operand (16 queries t0.., 32 keys kb..) of dq += dS·K from pass 1's kept rows: the rows
// themselves (stride kBk) when all 16 queries see the tile, else copied into buf with zero rows for
// the queries that do not (or are past T).
const u16* stored_ds_tile(const BwdArgs& a, u16* buf, int h, int t0, int nq, int kb, int nb) {
  bool all = nq == kRows;
  for (int i = 0; i < nq && all; i++) all = a.doc_start[t0 + i] <= kb + nb - 1 && t0 + i >= kb;
  if (all) return a.ds_row(h, kb, t0);
  for (int i = 0; i < kRows; i++) {
    const int t = t0 + i;
    u16* r = buf + i * kBk;
    if (i < nq && t >= kb && a.doc_start[t] <= kb + nb - 1) std::memcpy(r, a.ds_row(h, kb, t), sizeof(u16) * kBk);
    else std::memset(r, 0, sizeof(u16) * kBk);
  }
  return buf;
}

// dst[0..HS) += src[0..HS), HS a multiple of 16
void add_rows(float* dst, const float* src, int HS) {
  for (int d = 0; d < HS; d += 16) _mm512_storeu_ps(dst + d, _mm512_add_ps(_mm512_loadu_ps(dst + d), _mm512_loadu_ps(src + d)));
}

// dq (rows t0..t1-1 of head h) += the item's sum over the key tiles kb >= jlo of dS·K, with pass
// 1's rows as the A operand and dq's accumulators kept in tiles 4-7 over the key tiles (64 of the
// head's dims at a time): the same sums as accumulating through memory.
void q_item_stored(const BwdArgs& a, int h, int t0, int t1, int jlo) {
  alignas(64) u16 buf[kRows * kBk];
  alignas(64) float dqb[kRows * kMaxHS];
  const int HS = a.HS, hk = h / (a.NH / a.NKV), nq = t1 - t0;
  for (int d0 = 0; d0 < HS; d0 += 64) {
    const int nt = imin(4, (HS - d0) / 16);
    acc_zero(nt);
    for (int kb = jlo - jlo % kBk; kb < t1; kb += kBk) {
      const int nb = imin(kBk, t1 - kb);
      if (!any_sees(a.doc_start, t0, nq, kb + nb - 1)) continue;
      const u16* rows = stored_ds_tile(a, buf, h, t0, nq, kb, nb);
      pairs_into_acc(rows, kBk * 2, a.tiles.at(kPairsK, hk, kb) + (size_t)d0 * 2, HS * 4, nt);
    }
    acc_store(dqb + d0, HS * 4, nt);
  }
  for (int t = t0; t < t1; t++) add_rows(a.dq + ((size_t)t * a.NH + h) * HS, dqb + (size_t)(t - t0) * HS, HS);
}

// Pass 2: dq rows t0..t0+15 of head h.
void q_item(const BwdArgs& a, int h, int t0) {
  alignas(64) u16 qb[kRows * kMaxHS], db[kRows * kMaxHS];  // (16, HS) q, bf16(dO) rows, zero past nq
  alignas(64) float dqb[kRows * kMaxHS];                   // (16, HS) the item's dq
  alignas(64) float p[kRows * kBk], ds[kRows * kBk];
  alignas(64) u16 ds16[kRows * kBk];
  const int T = a.T, NH = a.NH, HS = a.HS, hk = h / (NH / a.NKV);
  const int t1 = imin(t0 + kRows, T), nq = t1 - t0;
  int jlo = t1 - 1;
  for (int t = t0; t < t1; t++) jlo = imin(jlo, a.doc_start[t]);
  if (a.ds16) return q_item_stored(a, h, t0, t1, jlo);
  std::memset(qb, 0, sizeof(u16) * kRows * HS);
  std::memset(db, 0, sizeof(u16) * kRows * HS);
  for (int t = t0; t < t1; t++) {
    std::memcpy(qb + (size_t)(t - t0) * HS, a.qrow(t, h), sizeof(u16) * HS);
    std::memcpy(db + (size_t)(t - t0) * HS, a.drow(t, h), sizeof(u16) * HS);
  }
  std::memset(dqb, 0, sizeof(float) * kRows * HS);
  for (int kb = jlo - jlo % kBk; kb < t1; kb += kBk) {
    const int nb = imin(kBk, t1 - kb);
    if (!any_sees(a.doc_start, t0, nq, kb + nb - 1)) continue;
    const u16* kp = a.tiles.at(kPairsK, hk, kb);
    scores_16x32(p, qb, HS * 2, a.tiles.at(kScoreK, hk, kb), HS);
    scores_16x32(ds, db, HS * 2, a.tiles.at(kScoreV, hk, kb), HS);
    for (int i = 0; i < kRows; i++) {
      const int t = t0 + i;
      const int lo = i < nq ? imax(a.doc_start[t], kb) - kb : 1, hi = i < nq ? imin(t, kb + nb - 1) - kb : 0;
      if (lo > hi) {
        std::memset(ds16 + i * kBk, 0, sizeof(u16) * kBk);
        continue;
      }
      tile_probs(p + i * kBk, ds + i * kBk, a.scale, a.lse[(size_t)h * T + t], a.D[(size_t)h * T + t], range_mask(lo, hi));
      round_masked(ds16 + i * kBk, ds + i * kBk, range_mask(lo, hi));
    }
    for (int d0 = 0; d0 < HS; d0 += 64)
      pairs_acc_16xN(dqb + d0, HS * 4, ds16, kBk * 2, kp + (size_t)d0 * 2, HS * 4, imin(4, (HS - d0) / 16));
  }
  for (int t = t0; t < t1; t++) add_rows(a.dq + ((size_t)t * NH + h) * HS, dqb + (size_t)(t - t0) * HS, HS);
}

}  // namespace

static_assert(kBk == kStoredDsTile, "attention_ds_rows_bytes sizes the rows by kStoredDsTile keys");

bool attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const u16* q, const u16* k,
                             const u16* v, const u16* out, const float* lse, const int* doc_start, int T, int NH,
                             int NKV, int HS, void* ds_rows, size_t ds_bytes) {
  if (HS % 32 != 0 || HS > kMaxHS)
    return avx512::attention_backward_bf16(dq, dk, dv, dout, q, k, v, out, lse, doc_start, T, NH, NKV, HS, ds_rows,
                                           ds_bytes);
  LT_CHECK(NKV >= 1 && NH % NKV == 0, "attention_backward_bf16 (amx): NH={} is not a multiple of NKV={}", NH, NKV);
  const bool sorted = check_doc_start(doc_start, T, "attention_backward_bf16 (amx)");
  AttentionWorkspace ws = bound_attention_workspace();  // in the order attention_workspace_bytes adds them up
  static thread_local std::vector<u16> own_rows;
  static thread_local std::vector<float> own_d;
  static thread_local std::vector<size_t> own_off;
  const PackedTiles tiles = packed_tiles_buffer(ws, T, NKV, HS);
  float* D = ws.take(attn_d_elems(T, NH), own_d);
  size_t* ds_off = ws.take(attn_key_tiles(T), own_off);
  u16* rows16 = ws.take(attn_rows16_elems(T, NH, HS), own_rows);  // d16 (HS is even here)
  BwdArgs a{dq, dk, dv, dout, q, k, v, out, lse, doc_start, sorted, T, NH, NKV, HS, 1.0f / std::sqrt((float)HS),
            tiles, rows16, nullptr, D};
  if (sorted && ds_rows) {  // as the AVX-512 kernel: pass 1 keeps its bf16 dS rows where they fit
    const size_t head = stored_ds_offsets(ds_off, doc_start, T, kBk);
    if ((size_t)NH * head * sizeof(u16) <= ds_bytes)
      a.ds16 = static_cast<u16*>(ds_rows), a.ds_off = ds_off, a.ds_head = head;
  }
  const int nkb = (T + kBk - 1) / kBk, nqb = (T + kRows - 1) / kRows;
#pragma omp parallel if ((long)T * NH > kRows)
  {
    pack_tiles(a.tiles, (1u << kScoreK) | (1u << kScoreV) | (1u << kPairsK), k, v, T, NKV, HS);
    prepare_rows(a);  // ends with the barrier
    load_tile_config();
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
      for (int b = 0; b < nqb; b++) q_item(a, h, b * kRows);
    _tile_release();
  }
  return true;
}

}  // namespace lt::cpu::amx
