// The layout of the dS rows that the attention backwards' pass 1 (dk, dv per key tile) keeps for
// pass 2 (dq), which then needs only dq += dS·K instead of recomputing the scores, dP and the
// exponentials: the f32 kernels (train_kernels.inc) and the bf16 AVX-512 ones
// (attention_bf16_bwd_avx512.cpp). Kept in the caller's ds_rows scratch (a buffer of the training
// memory plan, sized by attention_ds_rows_bytes) when document starts never decrease (then the
// queries that see key tile b are the contiguous kb..qend(b)) and the call's rows fit in it.
// Rows of head h, key tile b: at h * head_size + off[b], one row of kBk per query kb..qend(b).
#pragma once
#include <cstddef>

namespace lt::cpu {

inline constexpr int kStoredDsTile = 32;  // keys per tile of every kernel that keeps dS rows
inline constexpr size_t kMaxStoredDsBytes = size_t(64) << 20;  // attention_ds_rows_bytes' cap

// off[b] for each key tile of kBk keys (sorted doc_start; off: one per tile, may be null); returns
// a head's rows' element count.
inline size_t stored_ds_offsets(size_t* off, const int* doc_start, int T, int kBk) {
  const int nkb = (T + kBk - 1) / kBk;
  size_t total = 0;
  int qend = 0;
  for (int b = 0; b < nkb; b++) {
    const int kb = b * kBk, kend = (kb + kBk < T ? kb + kBk : T) - 1;
    qend = qend > kend ? qend : kend;  // every query kb..kend sees the tile
    while (qend + 1 < T && doc_start[qend + 1] <= kend) qend++;
    if (off) off[b] = total;
    total += size_t(qend - kb + 1) * size_t(kBk);
  }
  return total;
}

}  // namespace lt::cpu
