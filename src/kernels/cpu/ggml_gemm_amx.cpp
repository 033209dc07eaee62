// The q8_0 / q4_0 product (kernels/linear.h) for prefill on AMX int8 tiles (tdpbssd), for CPUs
// where amx_int8_kernels(). The same product the other paths compute, in its integer form:
//   y[t,o] = Σ_b (dx[t,b] · dw[o,b]) · float(Σ_{c in b} qx[t,c] · qw[o,c])
// with every block's int32 sum exact and the block terms added in f32 in block order (each with
// an FMA: one rounding fewer than the reference's separate multiply and add).
//   x      quantized to q8_0 per token (the bits of kernels/q8_0_act.h, vectorized) straight into
//          the B layout AMX reads: per group of 16 tokens and block of 32, 8 rows (4 codes each) ×
//          16 tokens × 4 bytes, and the 16 tokens' scales beside it (zeros past T).
//   W      16 rows at a time (a work item) spread into an int8 panel (16, IC) (q4_0: nibbles to
//          codes − 8) and the rows' scales per block, read as A (16 rows × 32 codes of a block).
//   C      one tdpbssd per (token group, block): a 16 × 16 int32 tile, stored and scaled into 16
//          f32 accumulators (lanes = tokens) by dx (16 tokens) · dw (the row's); tiles 4 and 5
//          alternate so one block's multiply runs while the previous is scaled.
// Every result is computed by one thread in a fixed order: the bits do not depend on the thread
// count. Compiled with the AVX-512 and AMX flags (*_amx.cpp in CMakeLists.txt).
#pragma GCC diagnostic ignored "-Wuninitialized"
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

namespace lt::cpu::amx {
namespace {

constexpr int kT = 16;              // tokens per B tile, weight rows per A tile
constexpr size_t kBTileBytes = 512;  // 8 rows of 64 bytes

#include "kernels/cpu/amx_tile_config.inc"

// tiles 0, 1: A (16 rows × 32 int8); 2, 3: B (8 rows × 64 bytes); 4, 5: C (16 × 16 int32)
void load_config() {
  TileConfig cfg;
  for (int t : {0, 1}) cfg.colsb[t] = 32, cfg.rows[t] = 16;
  for (int t : {2, 3}) cfg.colsb[t] = 64, cfg.rows[t] = 8;
  for (int t : {4, 5}) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  _tile_loadconfig(&cfg);
}

size_t align64(size_t n) { return (n + 63) & ~size_t(63); }
int groups(int T) { return (T + kT - 1) / kT; }
size_t packed_codes_bytes(int T, int IC) { return align64(size_t(groups(T)) * kT * IC); }
size_t packed_x_bytes(int T, int IC) { return packed_codes_bytes(T, IC) + align64(size_t(groups(T)) * IC / 32 * kT * 4); }
size_t panel_bytes(int IC) { return align64(size_t(kT) * IC) + align64(size_t(IC / 32) * kT * 4); }

// Token t's row of x into the B layout of its group: codes of block b at bx + b·512, dword k of
// the block in row k, column t % 16; its scale at dxs[b·16 + t % 16] (quantize_act_q8_0's bits,
// gemv::avx512::quantize_x).
void pack_token(int8_t* bx, float* dxs, const float* x, int IC, int t) {
  const int col = t % kT;
  for (int b = 0; b < IC / 32; ++b) {
    alignas(32) int32_t codes[8];
    gemv::avx512::quantize_x(x + b * 32, 32, reinterpret_cast<int8_t*>(codes), dxs + b * kT + col);
    int32_t* tile = reinterpret_cast<int32_t*>(bx + size_t(b) * kBTileBytes);
    for (int k = 0; k < 8; ++k) tile[k * kT + col] = codes[k];
  }
}

// Rows [o0, o0 + 16) of w into the panel: codes (16, IC), scales (IC / 32, 16); rows past OC zero.
void fill_panel(int8_t* codes, float* dws, const WeightView& w, int o0) {
  const int IC = w.cols, nb = IC / 32;
  const bool q4 = w.kind == WeightKind::Q4_0;
  for (int r = 0; r < kT; ++r) {
    int8_t* dst = codes + size_t(r) * IC;
    if (o0 + r >= w.rows) {
      std::memset(dst, 0, size_t(IC));
      for (int b = 0; b < nb; ++b) dws[b * kT + r] = 0.0f;
      continue;
    }
    const uint8_t* blk = ggml_block(w, int64_t(o0 + r) * nb);
    const size_t bytes = ggml_block_bytes(w.kind);
    for (int b = 0; b < nb; ++b, blk += bytes) {
      dws[b * kT + r] = ggml_block_scale(blk);
      if (!q4) {
        std::memcpy(dst + b * 32, blk + 2, 32);
        continue;
      }
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
      const __m128i low4 = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + b * 32), _mm_sub_epi8(_mm_and_si128(raw, low4), eight));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + b * 32 + 16),
                       _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), eight));
    }
  }
}

// acc[r] (lanes = 16 tokens) += float(c[r]) · (dx · dw[r]) for the 16 rows of a C tile
inline void scale_into(__m512* acc, const int32_t* c, const float* dx, const float* dw) {
  const __m512 d = _mm512_loadu_ps(dx);
#pragma GCC unroll 16
  for (int r = 0; r < kT; ++r) {
    const __m512 s = _mm512_mul_ps(d, _mm512_set1_ps(dw[r]));
    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + r * kT)), s, acc[r]);
  }
}

// y rows [o0, o0 + 16) ∩ [0, OC) for token group g (tokens [16g, min(16g + 16, T)))
void group_product(float* y, const int8_t* codes, const float* dws, const int8_t* bx, const float* dxs, int IC,
                   int OC, int T, int o0, int g) {
  const int nb = IC / 32;
  alignas(64) int32_t c[2][kT * kT];
  __m512 acc[kT];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const int8_t* bg = bx + size_t(g) * nb * kBTileBytes;
  const float* dg = dxs + size_t(g) * nb * kT;
  int b = 0;
  for (; b + 1 < nb; b += 2) {
    _tile_zero(4);
    _tile_loadd(0, codes + b * 32, IC);
    _tile_loadd(2, bg + size_t(b) * kBTileBytes, 64);
    _tile_dpbssd(4, 0, 2);
    _tile_zero(5);
    _tile_loadd(1, codes + b * 32 + 32, IC);
    _tile_loadd(3, bg + size_t(b + 1) * kBTileBytes, 64);
    _tile_dpbssd(5, 1, 3);
    _tile_stored(4, c[0], 64);
    scale_into(acc, c[0], dg + b * kT, dws + b * kT);
    _tile_stored(5, c[1], 64);
    scale_into(acc, c[1], dg + (b + 1) * kT, dws + (b + 1) * kT);
  }
  if (b < nb) {
    _tile_zero(4);
    _tile_loadd(0, codes + b * 32, IC);
    _tile_loadd(2, bg + size_t(b) * kBTileBytes, 64);
    _tile_dpbssd(4, 0, 2);
    _tile_stored(4, c[0], 64);
    scale_into(acc, c[0], dg + b * kT, dws + b * kT);
  }
  alignas(64) float out[kT][kT];
  for (int r = 0; r < kT; ++r) _mm512_store_ps(out[r], acc[r]);
  const int rows = std::min(kT, OC - o0), toks = std::min(kT, T - g * kT);
  for (int t = 0; t < toks; ++t)
    for (int r = 0; r < rows; ++r) y[size_t(g * kT + t) * OC + o0 + r] = out[r][t];
}

}  // namespace

size_t ggml_forward_scratch_bytes(int T, int IC, int threads) {
  return packed_x_bytes(T, IC) + size_t(threads) * panel_bytes(IC);
}

void ggml_forward(float* y, const float* x, const WeightView& w, int T, void* scratch, int threads) {
  const int IC = w.cols, OC = w.rows, nb = IC / 32, G = groups(T);
  char* p = static_cast<char*>(scratch);
  int8_t* bx = reinterpret_cast<int8_t*>(p);
  float* dxs = reinterpret_cast<float*>(p + packed_codes_bytes(T, IC));
  char* panels = p + packed_x_bytes(T, IC);
  std::memset(p, 0, packed_x_bytes(T, IC));  // tokens past T: zero codes and scales
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int t = 0; t < T; ++t)
    pack_token(bx + size_t(t / kT) * nb * kBTileBytes, dxs + size_t(t / kT) * nb * kT, x + size_t(t) * IC, IC, t);
  const int tiles = (OC + kT - 1) / kT;
#pragma omp parallel num_threads(threads)
  {
    char* mine = panels + size_t(omp_get_thread_num()) * panel_bytes(IC);
    int8_t* codes = reinterpret_cast<int8_t*>(mine);
    float* dws = reinterpret_cast<float*>(mine + align64(size_t(kT) * IC));
    load_config();
#pragma omp for schedule(static)
    for (int i = 0; i < tiles; ++i) {
      fill_panel(codes, dws, w, i * kT);
      for (int g = 0; g < G; ++g) group_product(y, codes, dws, bx, dxs, IC, OC, T, i * kT, g);
    }
    _tile_release();
  }
}

}  // namespace lt::cpu::amx
