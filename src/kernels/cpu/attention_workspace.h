// The CPU training attention kernels' workspace: what a call needs besides its inputs and outputs
// (train_kernels.inc, attention_bf16_*.cpp):
//   tiles    the key / value tiles packed once per call: f32 (HS, kBk) transposed, 1 kind forward
//            and 2 backward; bf16 kNumLayouts layouts of (kBk, round16(HS))
//   D        (NH, T) f32 rowsum(dO ∘ O), backward
//   offsets  one size_t per key tile: where pass 1 keeps a tile's dS rows (attention_stored_ds.h)
//   rows     bf16 copies of dO (and of q, odd HS) for the bf16 backward, (T, NH, round16(HS)) each
// A training run binds a buffer of its memory plan as the calling thread's workspace
// (bind_attention_workspace, sized by attention_workspace_bytes), and each call carves its pieces
// from it in order, 64-byte aligned; a piece that does not fit (nothing bound: tests, benches)
// comes from a vector of the calling thread, reused from call to call.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

namespace lt::cpu {

inline constexpr int kAttnTile = 32;  // keys per tile (kBk) of every CPU training attention kernel
inline constexpr int kAttnLayouts16 = 4;  // bf16 tile layouts (attention_bf16_avx512.inc kNumLayouts)

inline size_t attn_align64(size_t bytes) { return (bytes + 63) & ~size_t(63); }
inline size_t attn_round16(int n) { return size_t((n + 15) & ~15); }
inline size_t attn_key_tiles(int T) { return size_t((T + kAttnTile - 1) / kAttnTile); }

// Elements of each piece (the kernels ask for these; attention_workspace_bytes adds them up).
inline size_t attn_tiles32_elems(int T, int NKV, int HS, int kinds) {
  return size_t(kinds) * size_t(NKV) * attn_key_tiles(T) * size_t(HS) * kAttnTile;
}
inline size_t attn_tiles16_elems(int T, int NKV, int HS) {
  return size_t(kAttnLayouts16) * size_t(NKV) * attn_key_tiles(T) * kAttnTile * attn_round16(HS);
}
inline size_t attn_d_elems(int T, int NH) { return size_t(NH) * size_t(T); }
inline size_t attn_rows16_elems(int T, int NH, int HS) {  // dO, and q beside it for odd HS
  return size_t(T) * size_t(NH) * attn_round16(HS) * (HS % 2 ? 2 : 1);
}

// The calling thread's bound buffer, carved piece by piece.
struct AttentionWorkspace {
  char* p = nullptr;
  size_t left = 0;
  template <class E>
  E* take(size_t n, std::vector<E>& own) {
    const size_t bytes = attn_align64(n * sizeof(E));
    if (bytes <= left) {
      E* r = reinterpret_cast<E*>(p);
      p += bytes, left -= bytes;
      return r;
    }
    if (own.size() < n) own.resize(n);
    return own.data();
  }
};
AttentionWorkspace bound_attention_workspace();  // train_common.cpp

// The bytes of the largest call: f32 forward / backward, and with bf16 the bf16 ones as well (the
// f32 entries stay the fallback for head sizes the bf16 kernels do not take).
inline size_t attention_workspace_bytes_for(int T, int NH, int NKV, int HS, bool bf16) {
  const size_t d = attn_align64(attn_d_elems(T, NH) * 4), off = attn_align64(attn_key_tiles(T) * sizeof(size_t));
  size_t bytes = attn_align64(attn_tiles32_elems(T, NKV, HS, 2) * 4) + d + off;  // the backward's > the forward's
  if (bf16)
    bytes = std::max(bytes, attn_align64(attn_tiles16_elems(T, NKV, HS) * 2) + d + off +
                                attn_align64(attn_rows16_elems(T, NH, HS) * 2));
  return bytes;
}

}  // namespace lt::cpu
