// The bf16 GEMM of gemm.h on AMX tiles (tdpbf16ps), for CPUs where amx_bf16_kernels(): C (f32) =
// alpha · op(A) · op(B) + beta · C with A, B in bf16. oneDNN 2.x's matmul reaches 460-2100
// GFLOP/s on the training shapes of these machines, depending on whether its operands are in cache
// and on 64-byte row alignment; this one packs its operands itself, so it runs the same on any
// layout and cache state (1650-2500 GFLOP/s at 2 threads on a Xeon with AMX).
//   Blocking (Goto-style): per thread, panels of kNc columns of op(B) over a kc slice of K are
//   packed into the pair layout AMX reads as B (16 pair rows × 16 columns × 2 bf16 per tile,
//   ~1 MiB, L2); for each 32-row block of op(A), its kc slice is packed into A tiles (32 rows ×
//   32 bf16 per k step, ≤ 64 KiB, L1) and multiplied with each 32-column block of the panel: a
//   2 × 2 tile micro-kernel (tiles 0-3 C, 4-5 A, 6-7 B). Sizes past M, N or K pack as zeros.
//   Work is split by rows (or by columns when op(B) is wider than op(A) is tall) in contiguous
//   ranges of 32; each element of C is one thread's sum over k in a fixed order, so its bits do not
//   depend on the thread count. gemm_bf16_appended adds a second product of inner dimension <= 32
//   as one more k step of the last slice, packed beside the first's (no concatenated copies).
//   gemm_bf16_glu (a Llama MLP's gate and up, one K slice) packs op(B)'s columns from the two weights
//   16 at a time, so each 32-column block of C holds 16 of gate's and the same 16 of up's; C's rows
//   accumulate in a per-thread buffer, and each finished block goes to an epilogue (the SwiGLU) run a
//   few rows at a time between the tile products of the next row block (two C buffers).
//   Without AMX the same packed operands go to an AVX-512 micro-kernel (gemm.h's PackedMode): 8 rows
//   of the 32 × 32 block at a time (16 zmm accumulators) over the k steps, with vdpbf16ps, or with f32
//   FMAs on the operands widened (A's sub-slice of at most 8 steps once per row block, each packed
//   panel of B once, into f32 copies) where vdpbf16ps is slow (half the FMA rate's FLOPs on some Xeons
//   without AMX). Packing buffers are allocated once per thread (1.33 MiB; 3.4 MiB with the f32 copies), on the
//   first call, which the memory plan's baseline probe makes (docs/ARCHITECTURE.md).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/cpu_features.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm.h"

namespace lt::cpu::amx {
namespace {

using u16 = uint16_t;
using u32 = uint32_t;
#include "kernels/cpu/transpose_u32.inc"

constexpr int kBlock = 32;   // rows and columns of C per micro-kernel call
constexpr int kMaxKc = 1024;  // K per packed slice
// A slice of more than kWholeSteps k steps (a 32-row block of op(A) over it: 40 KiB) is split evenly
// into sub-slices of at most kSubSteps: a block's sub-slice (<= 16 KiB) stays in L1 while it meets
// every 32-column block of the packed panel streaming from L2, and the C blocks it accumulates on
// stay in L2 between sub-slices. A whole slice of up to 1024 (a 64 KiB block) did not fit L1 beside
// the B stream (a Xeon with 48 KiB of L1d: Qwen2.5-0.5B-shaped GEMMs 12-18% faster, its bf16 LoRA
// step 6-7%); SmolLM2's K = 576 (36 KiB) ran as fast or faster whole.
constexpr int kSubSteps = 8, kWholeSteps = 20;
constexpr size_t kPanelBytes = size_t(1) << 20;  // a packed panel of op(B): kc × nc bf16 (L2)
constexpr size_t kABytes = size_t(kBlock) * (kMaxKc + 32) * 2;  // a packed 32-row block of op(A), + a tail step
constexpr int kMaxLoraK = 8192;  // gemm_bf16_lora's inner dimension at most
constexpr size_t kLoraBytes = size_t(kMaxLoraK) * kBlock * 2;  // its packed op(L) (K × 32 bf16)
constexpr int kGluCols = 1024;  // gemm_bf16_glu: columns per panel at most, its C row block (32 × them, f32) in L2
constexpr int kGluLd = kGluCols + 16;  // the row block's row stride: rows 4 KiB apart would share L1's sets
constexpr int kFmaSubSteps = 8;  // PackedMode::Fma: k steps per sub-slice at most (its A widened: 4 KiB a step)
constexpr size_t kAfBytes = size_t(kFmaSubSteps + 1) * 1024 * 4;

#include "kernels/cpu/amx_tile_config.inc"

int round_up(int n, int m) { return (n + m - 1) / m * m; }

// A matrix as the product sees it: element (r, c) of op(X) for stored X with row stride ld.
struct Op {
  const u16* p;
  int ld;
  bool trans;
  u16 at(int r, int c) const { return trans ? p[size_t(c) * ld + r] : p[size_t(r) * ld + c]; }
};

// n bf16 values at s (n in 0..32) as 32 lanes, zeros past n
__m512i load_row32(const u16* s, int n) {
  if (n >= 32) return _mm512_loadu_si512(s);
  return _mm512_maskz_loadu_epi16(__mmask32((uint64_t(1) << n) - 1), s);
}
// n bf16 values at s (n in 0..16) widened to 32-bit lanes, zeros past n
__m512i load_pairs_lo(const u16* s, int n) {
  if (n >= 16) return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
  return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(__mmask16((1u << n) - 1), s));
}
// row k and row k + 1 of a stored (K, cols) matrix as 16 pairs, columns c0.. (valid: n), zeros
// past K or n
__m512i interleave_rows(const u16* x, int ld, int k, int K, int c0, int n) {
  const __m512i lo = load_pairs_lo(x + size_t(k) * ld + c0, n);
  const __m512i hi = k + 1 < K ? load_pairs_lo(x + size_t(k + 1) * ld + c0, n) : _mm512_setzero_si512();
  return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

// 32 columns of two stored rows r0, r1 as pairs: columns 0-15 into lo, 16-31 into hi (unpacks
// within 128-bit lanes, then the lanes' qwords put back in column order)
void interleave_32(const u16* r0, const u16* r1, __m512i& lo, __m512i& hi) {
  const __m512i a = _mm512_loadu_si512(r0), b = _mm512_loadu_si512(r1);
  const __m512i l = _mm512_unpacklo_epi16(a, b), h = _mm512_unpackhi_epi16(a, b);
  lo = _mm512_permutex2var_epi64(l, _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), h);
  hi = _mm512_permutex2var_epi64(l, _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15), h);
}

// op(A) rows m0 .. m0 + rows, columns k0 .. k0 + kc into dst: per k step of 32, 32 rows of 32 bf16
// (two A tiles), zeros past rows / kc.
void pack_a(u16* dst, Op a, int m0, int rows, int k0, int kc) {
  const int steps = round_up(kc, 32) / 32;
  for (int s = 0; s < steps; ++s) {
    u16* d = dst + size_t(s) * kBlock * 32;
    const int n = std::min(32, kc - s * 32);
    if (!a.trans) {
      for (int i = 0; i < kBlock; ++i)
        _mm512_storeu_si512(d + i * 32, i < rows ? load_row32(a.p + size_t(m0 + i) * a.ld + k0 + s * 32, n)
                                                 : _mm512_setzero_si512());
      continue;
    }
    // stored (K, M): pairs of k rows interleaved (16 k pairs × 16 rows as 32-bit lanes), transposed
    alignas(64) u32 t[2][16 * 16];
    if (rows == kBlock && n == 32) {
      for (int r = 0; r < 16; ++r) {
        const u16* x = a.p + size_t(k0 + s * 32 + 2 * r) * a.ld + m0;
        __m512i lo, hi;
        interleave_32(x, x + a.ld, lo, hi);
        _mm512_store_si512(t[0] + r * 16, lo);
        _mm512_store_si512(t[1] + r * 16, hi);
      }
      for (int h = 0; h < 2; ++h) transpose_16x16_u32(reinterpret_cast<u32*>(d + h * 16 * 32), 16, t[h], 16);
      continue;
    }
    for (int h = 0; h < 2; ++h) {
      const int nr = std::clamp(rows - h * 16, 0, 16);
      for (int r = 0; r < 16; ++r) {
        const int k = s * 32 + 2 * r;
        _mm512_store_si512(t[0] + r * 16, k < kc ? interleave_rows(a.p, a.ld, k0 + k, k0 + kc, m0 + h * 16, nr)
                                                 : _mm512_setzero_si512());
      }
      transpose_16x16_u32(reinterpret_cast<u32*>(d + h * 16 * 32), 16, t[0], 16);
    }
  }
}

// op(B) rows k0 .. k0 + kc, columns n0 .. n0 + cols into dst: per 16 columns and k step of 32, a B
// tile (16 pair rows × 16 columns × 2), zeros past kc / cols; a column group's tiles `stride` steps
// apart, these at steps first.. (an appended product's after the main one's). With odd (op(B) stored
// (N, K), n0 a multiple of 32: gemm_bf16_glu) op(B)'s columns interleave two stored matrices 16 at a
// time: group g of the columns from n0 is b's (g even) or odd's (g odd) rows n0 / 2 + g / 2 · 16 ...
void pack_b(u16* dst, Op b, int k0, int kc, int n0, int cols, int stride, int first, const u16* odd = nullptr) {
  const int steps = round_up(kc, 32) / 32, groups = round_up(cols, kBlock) / 16;
  auto row = [&](int g, int c) {  // the stored row of op(B)'s column n0 + g · 16 + c
    if (!odd) return b.p + size_t(n0 + g * 16 + c) * b.ld;
    return (g % 2 ? odd : b.p) + size_t(n0 / 2 + g / 2 * 16 + c) * b.ld;
  };
  // stored (K, N): k steps outer, so the rows are read along (a column group's strip down them, lines
  // 2 KiB and more apart, ran at a third of the rate); stored (N, K): each group's rows along k
  const int outer = b.trans ? groups : steps, inner = b.trans ? steps : groups;
  for (int o = 0; o < outer; ++o)
    for (int i = 0; i < inner; ++i) {
      const int g = b.trans ? o : i, s = b.trans ? i : o;
      u32* d = reinterpret_cast<u32*>(dst + (size_t(g) * stride + first + s) * 512);
      const int nc = std::clamp(cols - g * 16, 0, 16), nk = std::min(32, kc - s * 32);
      if (!b.trans && g % 2 == 0 && cols - g * 16 >= 32 && nk == 32) {  // 32 columns × 32 k at once
        u32* d1 = d + size_t(stride) * 256;
        for (int r = 0; r < 16; ++r) {
          const u16* x = b.p + size_t(k0 + s * 32 + 2 * r) * b.ld + n0 + g * 16;
          __m512i lo, hi;
          interleave_32(x, x + b.ld, lo, hi);
          _mm512_storeu_si512(d + r * 16, lo);
          _mm512_storeu_si512(d1 + r * 16, hi);
        }
      } else if (!b.trans && (g % 2 == 0 || cols - (g - 1) * 16 < 32 || nk < 32)) {  // stored (K, N): k pairs interleaved
        for (int r = 0; r < 16; ++r) {
          const int k = s * 32 + 2 * r;
          _mm512_storeu_si512(d + r * 16, k < kc && nc > 0 ? interleave_rows(b.p, b.ld, k0 + k, k0 + kc, n0 + g * 16, nc)
                                                           : _mm512_setzero_si512());
        }
      } else if (b.trans && nc == 16 && nk == 32 && b.ld % 2 == 0) {  // stored (N, K): a transpose of k pairs
        const u16* src = row(g, 0) + k0 + s * 32;
        transpose_16x16_u32(d, 16, reinterpret_cast<const u32*>(src), b.ld / 2);
      } else if (b.trans) {
        alignas(64) u32 t[16 * 16];
        for (int c = 0; c < 16; ++c) {
          const __m512i r = c < nc ? load_row32(row(g, c) + k0 + s * 32, nk) : _mm512_setzero_si512();
          _mm512_store_si512(t + c * 16, r);
        }
        transpose_16x16_u32(d, 16, t, 16);
      }
    }
}

// Where a 32-row block of op(A) is read as A tiles: its k step s at p + s · step, rows 16-31 at
// p + half, row stride `stride` elements. Packed (pack_a): 32, 1024, 512; straight from a stored
// (M, K) matrix with 64-byte rows: lda, 32, 16 · lda.
struct ATiles {
  const u16* p;
  int stride, step;
  size_t half;
  const float* f = nullptr;  // PackedMode::Fma: the steps widened, row r of step s at f + s · 1024 + r · 32
};

// Tiles 4-7 × packed B groups b0, b1 at k step s into the accumulators 0-3, A from a at its step i
inline void k_step(ATiles a, int i, const u16* b0, const u16* b1, int s) {
  const u16* a0 = a.p + size_t(i) * a.step;
  const int as = a.stride * 2;
  _tile_loadd(4, a0, as);
  _tile_loadd(6, b0 + s * 512, 64);
  _tile_dpbf16ps(0, 4, 6);
  _tile_loadd(7, b1 + s * 512, 64);
  _tile_dpbf16ps(1, 4, 7);
  _tile_loadd(5, a0 + a.half, as);
  _tile_dpbf16ps(2, 5, 6);
  _tile_dpbf16ps(3, 5, 7);
}

// gemm_bf16_glu: the epilogue of a finished row block (rows m0.., its blocks over the panel's columns
// n .. n + cols in c), run kDeferRows rows at a time between the k steps of the next row block's
// tile products (the vector units idle while the tiles multiply: the SwiGLU's exp and divide after
// the product cost a third of it, and half of it with Qwen2.5's sub-slices of 7 k steps)
constexpr int kDeferRows = 2;
struct Deferred {
  GluEpilogue epi = nullptr;
  const GluOutputs* o = nullptr;
  const float* c = nullptr;  // null: nothing pending
  int ldc = 0, m0 = 0, rows = 0, n = 0, cols = 0;
  int j = 0, r = 0;  // next: rows r.. of block j
  void run(int k) {
    while (k > 0 && c && j < cols) {
      const int take = std::min(k, rows - r);
      epi(*o, m0 + r, take, (n + j) / 2, c + size_t(r) * ldc + j, ldc);
      r += take, k -= take;
      if (r == rows) r = 0, j += kBlock;
    }
  }
  void finish() {
    run(kBlock * kGluCols);
    c = nullptr;
  }
};

// Tiles 0-3 = (32 × 32) C block over `steps` k steps of A, then `tail_steps` of the appended
// product's A (tail), and two packed B column groups (b0, b1) holding both; accumulators zeroed or
// loaded from c (row stride ldc floats), stored to c. d: another block's epilogue, spread over the steps.
void micro_kernel(float* c, int ldc, bool load_c, ATiles a, const u16* b0, const u16* b1, int steps, ATiles tail,
                  int tail_steps, Deferred* d = nullptr) {
  const int stride = ldc * 4;
  if (load_c) {
    _tile_loadd(0, c, stride);
    _tile_loadd(1, c + 16, stride);
    _tile_loadd(2, c + size_t(16) * ldc, stride);
    _tile_loadd(3, c + size_t(16) * ldc + 16, stride);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int s = 0; s < steps; ++s) {
    k_step(a, s, b0, b1, s);
    if (d) d->run(kDeferRows);
  }
  for (int s = 0; s < tail_steps; ++s) {
    k_step(tail, s, b0, b1, steps + s);
    if (d) d->run(kDeferRows);
  }
  _tile_stored(0, c, stride);
  _tile_stored(1, c + 16, stride);
  _tile_stored(2, c + size_t(16) * ldc, stride);
  _tile_stored(3, c + size_t(16) * ldc + 16, stride);
}

// Row `row` (0..31) of k step s of a
inline const u16* a_row(const ATiles& a, int s, int row) {
  return a.p + size_t(s) * a.step + (row < 16 ? size_t(row) * a.stride : a.half + size_t(row - 16) * a.stride);
}

// 8 rows (r0..) of the (32 × 32) block with AVX512-BF16 (vdpbf16ps) instead of tiles: the same
// packed operands, each C row's 16-column half an accumulator (16), two B rows (one k pair of each
// column group) loaded per k pair and A's pair broadcast from the tile rows. k steps from `first`.
template <int G>
__attribute__((always_inline)) inline void vec_rows(__m512 (&acc)[8][2], ATiles a, int r0, const u16* b0,
                                                    const u16* b1, int steps, int first) {
  const u16* rows[8];
  for (int r = 0; r < 8; ++r) rows[r] = a_row(a, 0, r0 + r);
  for (int s = 0; s < steps; ++s) {
    const u16* x = b0 + size_t(first + s) * 512;
    const u16* y = b1 + size_t(first + s) * 512;
    const size_t as = size_t(s) * a.step;
#pragma GCC unroll 16
    for (int q = 0; q < 16; ++q) {
      const __m512bh bx = (__m512bh)_mm512_loadu_si512(x + q * 32), by = (__m512bh)_mm512_loadu_si512(y + q * 32);
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) {
        u32 v;
        std::memcpy(&v, rows[r] + as + 2 * q, 4);
        const __m512bh av = (__m512bh)_mm512_set1_epi32(int(v));
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, bx);
        if constexpr (G == 2) acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, by);
      }
    }
  }
}

// 8 rows (r0..) of the (32 × 32) block in f32 FMAs on the widened operands (bf16 -> f32 is exact, and
// so is a product of two): per k step the rows' 32 values are widened into aw, each B pair row into
// its even and odd k rows, and each product added in k order (a plain f32 dot product's sums).
template <int G>
__attribute__((always_inline)) inline void fma_rows(__m512 (&acc)[8][2], ATiles a, int r0, const u16* b0,
                                                    const u16* b1, int steps, int first) {
  alignas(64) float aw[8 * 32];
  for (int s = 0; s < steps; ++s) {
    const float* w = a.f ? a.f + size_t(s) * 1024 + r0 * 32 : aw;
    if (!a.f)  // widened here (lora_rows' A, read in place)
      for (int r = 0; r < 8; ++r) {
        const u16* x = a_row(a, s, r0 + r);
        for (int h = 0; h < 2; ++h)
          _mm512_store_si512(aw + r * 32 + 16 * h, _mm512_slli_epi32(load_pairs_lo(x + 16 * h, 16), 16));
      }
    const float* x = reinterpret_cast<const float*>(b0) + size_t(first + s) * 512;
    const float* y = reinterpret_cast<const float*>(b1) + size_t(first + s) * 512;
#pragma GCC unroll 4
    for (int k = 0; k < 32; ++k) {
      const __m512 bx = _mm512_load_ps(x + k * 16), by = G == 2 ? _mm512_load_ps(y + k * 16) : bx;
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) {
        const __m512 av = _mm512_set1_ps(w[r * 32 + k]);
        acc[r][0] = _mm512_fmadd_ps(av, bx, acc[r][0]);
        if constexpr (G == 2) acc[r][1] = _mm512_fmadd_ps(av, by, acc[r][1]);
      }
    }
  }
}

// PackedMode::Fma's B: `tiles` packed B tiles (pair layout) widened, each into 32 k rows of 16 f32
// (the even k of a pair row, then the odd)
void widen_b(float* dst, const u16* src, size_t tiles) {
  const __m512i odd = _mm512_set1_epi32(int(0xFFFF0000u));
  for (size_t t = 0; t < tiles; ++t)
    for (int q = 0; q < 16; ++q) {
      const __m512i v = _mm512_load_si512(src + t * 512 + q * 32);
      _mm512_store_si512(dst + t * 512 + (2 * q) * 16, _mm512_slli_epi32(v, 16));
      _mm512_store_si512(dst + t * 512 + (2 * q + 1) * 16, _mm512_and_si512(v, odd));
    }
}

// Packed B tile t of a panel: bf16 at b, or (PackedMode::Fma) its widened copy at bf, passed on as u16*
inline const u16* b_tile(const u16* b, const float* bf, size_t t) {
  return bf ? reinterpret_cast<const u16*>(bf + t * 512) : b + t * 512;
}

// The 32 rows of `steps` k steps of a (the tile layout) widened to f32 into f (ATiles::f's layout)
void widen_a(float* f, const ATiles& a, int steps) {
  for (int s = 0; s < steps; ++s)
    for (int row = 0; row < kBlock; ++row) {
      const u16* x = a_row(a, s, row);
      for (int h = 0; h < 2; ++h)
        _mm512_store_ps(f + size_t(s) * 1024 + row * 32 + 16 * h,
                        _mm512_castsi512_ps(_mm512_slli_epi32(load_pairs_lo(x + 16 * h, 16), 16)));
    }
}

// micro_kernel_avx512: micro_kernel's product on AVX-512 (the Problem's mode, Fma or vdpbf16ps): passes
// of 8 rows over the k steps, B's rows read from L1 by each, only over the block's rows (nrows) and
// column groups (G: one where ncols <= 16, as a LoRA gradient's r = 16 columns); d's epilogue rows run
// between the k steps of the first pass.
template <bool Fma, int G>
void avx512_passes(float* c, int ldc, bool load_c, ATiles a, const u16* b0, const u16* b1, int steps, ATiles tail,
                   int tail_steps, Deferred* d, int nrows) {
  const auto rows = [](__m512(&acc)[8][2], ATiles a, int r0, const u16* b0, const u16* b1, int steps, int first)
                        __attribute__((always_inline)) {
    if constexpr (Fma) fma_rows<G>(acc, a, r0, b0, b1, steps, first);
    else vec_rows<G>(acc, a, r0, b0, b1, steps, first);
  };
  for (int r0 = 0; r0 < nrows; r0 += 8) {
    __m512 acc[8][2];
    for (int r = 0; r < 8; ++r)
      for (int h = 0; h < G; ++h)
        acc[r][h] = load_c ? _mm512_loadu_ps(c + size_t(r0 + r) * ldc + 16 * h) : _mm512_setzero_ps();
    if (d && r0 == 0) {
      for (int s = 0; s < steps; ++s)
        rows(acc, ATiles{a.p + size_t(s) * a.step, a.stride, a.step, a.half, a.f ? a.f + size_t(s) * 1024 : nullptr},
             0, b0, b1, 1, s),
            d->run(kDeferRows);
      for (int s = 0; s < tail_steps; ++s)
        rows(acc,
             ATiles{tail.p + size_t(s) * tail.step, tail.stride, tail.step, tail.half,
                    tail.f ? tail.f + size_t(s) * 1024 : nullptr},
             0, b0, b1, 1, steps + s),
            d->run(kDeferRows);
    } else {
      rows(acc, a, r0, b0, b1, steps, 0);
      rows(acc, tail, r0, b0, b1, tail_steps, steps);
    }
    for (int r = 0; r < 8; ++r)
      for (int h = 0; h < G; ++h) _mm512_storeu_ps(c + size_t(r0 + r) * ldc + 16 * h, acc[r][h]);
  }
}

template <bool Fma>
void micro_kernel_avx512(float* c, int ldc, bool load_c, ATiles a, const u16* b0, const u16* b1, int steps,
                         ATiles tail, int tail_steps, Deferred* d, int nrows, int ncols) {
  if (ncols <= 16) avx512_passes<Fma, 1>(c, ldc, load_c, a, b0, b1, steps, tail, tail_steps, d, nrows);
  else avx512_passes<Fma, 2>(c, ldc, load_c, a, b0, b1, steps, tail, tail_steps, d, nrows);
}

// The AMX micro-kernel with micro_kernel_avx512's signature (the whole block always)
void micro_kernel_amx(float* c, int ldc, bool load_c, ATiles a, const u16* b0, const u16* b1, int steps, ATiles tail,
                      int tail_steps, Deferred* d, int, int) {
  micro_kernel(c, ldc, load_c, a, b0, b1, steps, tail, tail_steps, d);
}

struct Problem {
  Op a, b;
  int M, N, K;
  Op a2, b2;  // the appended product (gemm_bf16_appended), over K2 <= 32 (0: none)
  int K2;
  float alpha, beta;
  float* C;
  int ldc;
  int kc;  // K per slice, a multiple of 32
  int nc;  // columns per panel, a multiple of 32 (kc · nc bf16 within kPanelBytes)
  // gemm_bf16_lora: a2's rows (xa16, M × K2, row stride a2.ld) computed per row block as a · op(l)
  // (K × K2), in f32 into xa (M × K2) and rounded to bf16, before their first use (null: stored)
  Op l{};
  float* xa = nullptr;
  // gemm_f16_split: op(B) is the f16 weight w (stored (N, K / wparts)) with each k step repeated
  // wparts (2 or 4) times, packed straight from w as its bf16 split's hi or lo parts (pack_b_split)
  Op w{};
  int wparts = 0;
  // lora_rows: xa's columns R1.. into xa_b (LoraRankTerm)
  int R1 = 0;
  float* xa_b = nullptr;
  // gemm_bf16_glu: op(B)'s odd column groups from b_odd (pack_b); C's blocks accumulate in the
  // thread's row block buffer and each finished one goes to epi (p.C unused)
  const u16* b_odd = nullptr;
  const GluOutputs* glu = nullptr;
  GluEpilogue epi = nullptr;
  PackedMode mode = PackedMode::Amx;  // the micro-kernel: AMX tiles, or AVX-512 (micro_kernel_avx512)
};

// 32 f16 values at s as the bf16 split: hi = bf16(v), lo = bf16(v - hi) (0 where v == hi, as ±Inf).
// f16 values are never f32 denormals (>= 2^-24), nor are their lo parts, so vcvtneps2bf16's DAZ
// changes nothing: it rounds to nearest even as dtype.h does.
void split_row32(const u16* s, __m512i& hi, __m512i& lo) {
  __m256i h[2], l[2];
  for (int i = 0; i < 2; ++i) {
    const __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 16 * i)));
    h[i] = (__m256i)_mm512_cvtneps_pbh(v);
    const __m512 r = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h[i]), 16));
    l[i] = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_sub_ps(~_mm512_cmp_ps_mask(v, r, _CMP_EQ_OQ), v, r));
  }
  hi = _mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1);
  lo = _mm512_inserti64x4(_mm512_castsi256_si512(l[0]), l[1], 1);
}

// pack_b of gemm_f16_split's op(B), rows k0 .. k0 + kc (whole k steps), columns n0 .. n0 + cols:
// k step j is w's k step j / wparts, as its hi part or (four parts, j odd) its lo part. Each of w's
// steps is split once into B tiles (hi, lo) and copied to the steps that use it.
void pack_b_split(u16* dst, const Problem& p, int k0, int kc, int n0, int cols, int stride) {
  const int steps = kc / 32, groups = round_up(cols, kBlock) / 16;
  for (int g = 0; g < groups; ++g) {
    const int nc = std::clamp(cols - g * 16, 0, 16);
    alignas(64) u32 t[2][16 * 16], tiles[2][16 * 16];
    int split = -1;  // w's k step in tiles
    for (int s = 0; s < steps; ++s) {
      const int j = k0 / 32 + s, ws = j / p.wparts;
      if (ws != split) {
        for (int c = 0; c < 16; ++c) {
          __m512i hi = _mm512_setzero_si512(), lo = hi;
          if (c < nc) split_row32(p.w.p + size_t(n0 + g * 16 + c) * p.w.ld + size_t(ws) * 32, hi, lo);
          _mm512_store_si512(t[0] + c * 16, hi);
          _mm512_store_si512(t[1] + c * 16, lo);
        }
        for (int h = 0; h < 2; ++h) transpose_16x16_u32(tiles[h], 16, t[h], 16);
        split = ws;
      }
      const u32* src = tiles[p.wparts == 4 && j % 2 == 1];
      u32* d = reinterpret_cast<u32*>(dst + (size_t(g) * stride + s) * 512);
      for (int r = 0; r < 16; ++r) _mm512_storeu_si512(d + r * 16, _mm512_load_si512(src + r * 16));
    }
  }
}

// C block (m0, n0) of rows × cols from the packed (sub-)slice at k0. Where alpha is 1 (and on the
// first slice beta is 0 or 1) the tiles continue C's sums: loaded from C (beta 1 or a later slice) or
// zeroed (beta 0), a part block through a (32 × 32) buffer, so the bits do not depend on where the
// slices end. Else through the buffer, C = alpha · P + beta · C (first slice; beta 0 never reads C)
// or C += alpha · P. The k steps of one slice: `steps` of A, then `tail_steps` (0 or 1) of the
// appended product's A.
struct SliceA {
  ATiles a, tail;
  int steps, tail_steps;
};

void block(const Problem& p, float* c, int ldc, int rows, int cols, bool first, const SliceA& s, const u16* b0,
           const u16* b1, Deferred* d = nullptr) {
  const bool load = !first || p.beta != 0.0f;
  const auto kernel = p.mode == PackedMode::Amx      ? micro_kernel_amx
                      : p.mode == PackedMode::Dpbf16 ? micro_kernel_avx512<false>
                                                     : micro_kernel_avx512<true>;
  if (p.alpha == 1.0f && (!first || p.beta == 0.0f || p.beta == 1.0f)) {  // the tiles continue C's sums
    if (rows == kBlock && cols == kBlock)
      return kernel(c, ldc, load, s.a, b0, b1, s.steps, s.tail, s.tail_steps, d, kBlock, kBlock);
    alignas(64) float t[kBlock * kBlock];
    if (load)
      for (int i = 0; i < rows; ++i) std::copy(c + size_t(i) * ldc, c + size_t(i) * ldc + cols, t + i * kBlock);
    kernel(t, kBlock, load, s.a, b0, b1, s.steps, s.tail, s.tail_steps, d, rows, cols);
    for (int i = 0; i < rows; ++i) std::copy(t + i * kBlock, t + i * kBlock + cols, c + size_t(i) * ldc);
    return;
  }
  alignas(64) float t[kBlock * kBlock];
  kernel(t, kBlock, false, s.a, b0, b1, s.steps, s.tail, s.tail_steps, d, rows, cols);
  for (int i = 0; i < rows; ++i) {
    float* ci = c + size_t(i) * ldc;
    const float* v = t + i * kBlock;
    if (!first) for (int j = 0; j < cols; ++j) ci[j] += p.alpha * v[j];
    else if (p.beta == 0.0f) for (int j = 0; j < cols; ++j) ci[j] = p.alpha * v[j];
    else for (int j = 0; j < cols; ++j) ci[j] = p.alpha * v[j] + p.beta * ci[j];
  }
}

struct Buffers {
  u16* a = nullptr;
  u16* b = nullptr;
  u16* l = nullptr;  // gemm_bf16_lora's packed op(l): two column groups over all of K
  float* c = nullptr;  // gemm_bf16_glu's row blocks of C, two (32 × kGluCols, row stride kGluLd)
  float* af = nullptr;  // PackedMode::Fma: a sub-slice of op(A)'s 32-row block widened (ATiles::f)
  float* bf = nullptr;  // PackedMode::Fma: the panel b widened (widen_b), kPanelBytes · 2 / 2
  float* lf = nullptr;  // PackedMode::Fma: l widened, kLoraBytes · 2
};

Buffers& thread_buffers(PackedMode mode) {
  struct Owned {
    Buffers b;
    ~Owned() {
      std::free(b.a), std::free(b.b), std::free(b.l), std::free(b.c), std::free(b.af), std::free(b.bf), std::free(b.lf);
    }
  };
  thread_local Owned o;
  if (!o.b.a) {
    o.b.a = static_cast<u16*>(std::aligned_alloc(64, kABytes));
    o.b.b = static_cast<u16*>(std::aligned_alloc(64, kPanelBytes));
    o.b.l = static_cast<u16*>(std::aligned_alloc(64, kLoraBytes));
    o.b.c = static_cast<float*>(std::aligned_alloc(64, size_t(2 * kBlock) * kGluLd * 4));
    // touched whole now: the memory plan's baseline probe (which runs every GEMM variant once)
    // then measures the pages a step will use
    std::memset(o.b.a, 0, kABytes);
    std::memset(o.b.b, 0, kPanelBytes);
    std::memset(o.b.l, 0, kLoraBytes);
    std::memset(o.b.c, 0, size_t(2 * kBlock) * kGluLd * 4);
  }
  if (mode == PackedMode::Fma && !o.b.af) {
    o.b.af = static_cast<float*>(std::aligned_alloc(64, kAfBytes));
    o.b.bf = static_cast<float*>(std::aligned_alloc(64, kPanelBytes));
    o.b.lf = static_cast<float*>(std::aligned_alloc(64, kLoraBytes * 2));
    std::memset(o.b.af, 0, kAfBytes);
    std::memset(o.b.bf, 0, kPanelBytes);
    std::memset(o.b.lf, 0, kLoraBytes * 2);
  }
  return o.b;
}

// Part `part` of `parts` of the cache lines of op(A)'s 32-row block at m0 over k0 .. k0 + kc, asked
// into L2 while the block before it is multiplied (32 rows read a line at a time are more streams
// than the hardware prefetchers follow).
void prefetch_a(Op a, int M, int m0, int k0, int kc, int part, int parts) {
  if (m0 >= M) return;
  const int rows = a.trans ? kc : std::min(kBlock, M - m0), per_row = a.trans ? 1 : (kc * 2 + 63) / 64;
  const int lines = rows * per_row, l0 = lines * part / parts, l1 = lines * (part + 1) / parts;
  for (int l = l0; l < l1; ++l) {
    const int r = l / per_row, c = l % per_row * 32;
    const u16* x = a.trans ? a.p + size_t(k0 + r) * a.ld + m0 : a.p + size_t(m0 + r) * a.ld + k0 + c;
    _mm_prefetch(reinterpret_cast<const char*>(x), _MM_HINT_T1);
  }
}

void blocking(Problem& p);

// gemm_bf16_lora: rows m0 .. m0 + 32 of xa = a · op(l), block by block as gemm_bf16(false,
// trans_l, M, K2, K, 1, a, lda, l, ldl, 0, xa, K2) computes them (the same slices of K and block(),
// a read in place, op(l) packed whole at pl: its bits), then rounded into a2's rows; with xa_b its
// columns R1.. go there.
void lora_rows(const Problem& p, const u16* pl, const float* plf, int m0) {
  Problem q{p.a, p.l, p.M, p.K2, p.K, {}, {}, 0, 1.0f, 0.0f, nullptr, kBlock, 0, 0};
  q.mode = p.mode;
  blocking(q);
  alignas(64) float t[kBlock * kBlock];
  const int ksteps = p.K / 32;
  for (int k0 = 0; k0 < p.K; k0 += q.kc) {
    const int steps = std::min(q.kc, p.K - k0) / 32;
    const ATiles a{p.a.p + size_t(m0) * p.a.ld + k0, p.a.ld, 32, size_t(16) * p.a.ld};
    const SliceA s{a, a, steps, 0};
    block(q, t, kBlock, kBlock, p.K2, k0 == 0, s, b_tile(pl, plf, size_t(k0 / 32)),
          b_tile(pl, plf, size_t(ksteps + k0 / 32)));
  }
  const int R1 = p.xa_b ? p.R1 : p.K2;
  for (int i = 0; i < kBlock; ++i) {
    const float* ti = t + i * kBlock;
    std::copy(ti, ti + R1, p.xa + size_t(m0 + i) * R1);
    if (p.xa_b) std::copy(ti + R1, ti + p.K2, p.xa_b + size_t(m0 + i) * (p.K2 - R1));
    avx512::f32_to_half(true, const_cast<u16*>(p.a2.p) + size_t(m0 + i) * p.a2.ld, nullptr, ti, size_t(p.K2));
  }
}

// Rows [mb0, mb1) × columns [nb0, nb1) of C in 32-blocks, all of K.
void run_range(const Problem& p, int mb0, int mb1, int nb0, int nb1) {
  Buffers& buf = thread_buffers(p.mode);
  const bool fma = p.mode == PackedMode::Fma;
  if (p.l.p) pack_b(buf.l, p.l, 0, p.K, 0, p.K2, p.K / 32, 0);
  if (p.l.p && fma) widen_b(buf.lf, buf.l, size_t(p.K / 32) * 2);
  // op(A) read in place: stored (M, K) with whole k steps and rows on 64-byte lines
  const bool direct = !p.a.trans && p.K % 32 == 0 && p.a.ld % 32 == 0 && reinterpret_cast<uintptr_t>(p.a.p) % 64 == 0;
  for (int n = nb0 * kBlock; n < std::min(p.N, nb1 * kBlock); n += p.nc) {
    const int cols = std::min({p.nc, p.N - n, nb1 * kBlock - n});
    for (int k0 = 0; k0 < p.K; k0 += p.kc) {
      const int kc = std::min(p.kc, p.K - k0), steps = round_up(kc, 32) / 32;
      const int tail = k0 + kc >= p.K && p.K2 > 0 ? 1 : 0, stride = steps + tail;  // the appended step: last slice
      if (p.wparts) pack_b_split(buf.b, p, k0, kc, n, cols, stride);
      else pack_b(buf.b, p.b, k0, kc, n, cols, stride, 0, p.b_odd);
      if (tail) pack_b(buf.b, p.b2, 0, p.K2, n, cols, stride, steps);
      if (fma) widen_b(buf.bf, buf.b, size_t(round_up(cols, kBlock) / 16) * stride);
      Deferred d;  // gemm_bf16_glu: the row block before this one's epilogue (its C buffer the other one)
      for (int mb = mb0; mb < mb1; ++mb) {
        const int m0 = mb * kBlock, rows = std::min(kBlock, p.M - m0);
        float* cb = p.epi ? buf.c + size_t(mb % 2) * kBlock * kGluLd : nullptr;
        const bool in_place = direct && rows == kBlock;
        // a slice of more than kWholeSteps split evenly into sub-slices of at most kSubSteps
        const int subs = fma ? (steps + kFmaSubSteps - 1) / kFmaSubSteps
                             : steps > kWholeSteps ? (steps + kSubSteps - 1) / kSubSteps : 1;
        const int per = (steps + subs - 1) / subs;
        for (int s0 = 0; s0 < steps; s0 += per) {  // A's sub-slices, each over all of the panel's columns
          const int sub = std::min(per, steps - s0), ks = k0 + s0 * 32, kcs = std::min(sub * 32, kc - s0 * 32);
          const int t = s0 + sub == steps ? tail : 0;
          SliceA sa{{buf.a, 32, 1024, 512}, {buf.a + size_t(in_place ? 0 : sub) * 1024, 32, 1024, 512}, sub, t};
          if (in_place) sa.a = ATiles{p.a.p + size_t(m0) * p.a.ld + ks, p.a.ld, 32, size_t(16) * p.a.ld};
          else pack_a(buf.a, p.a, m0, rows, ks, kcs);
          if (t && p.l.p && n == nb0 * kBlock) lora_rows(p, buf.l, fma ? buf.lf : nullptr, m0);  // the rows' first use
          if (t) pack_a(const_cast<u16*>(sa.tail.p), p.a2, m0, rows, 0, p.K2);
          if (fma) {
            widen_a(buf.af, sa.a, sub), sa.a.f = buf.af;
            if (t) widen_a(buf.af + size_t(sub) * 1024, sa.tail, 1), sa.tail.f = buf.af + size_t(sub) * 1024;
          }
          // the next sub-slice's A into L2 meanwhile: this block's, else the next block's first
          const bool more = s0 + sub < steps;
          const int nm0 = more ? m0 : m0 + kBlock, nks = more ? ks + sub * 32 : k0;
          const int nkc = more ? std::min(per * 32, kc - (s0 + sub) * 32) : std::min(per * 32, kc);
          const int calls = (cols + kBlock - 1) / kBlock;
          for (int j = 0; j < cols; j += kBlock) {
            if (more || mb + 1 < mb1) prefetch_a(p.a, p.M, nm0, nks, nkc, j / kBlock, calls);
            const size_t t0 = size_t(j / 16) * stride + s0;
            const u16* b0 = b_tile(buf.b, fma ? buf.bf : nullptr, t0);
            const u16* b1 = b_tile(buf.b, fma ? buf.bf : nullptr, t0 + stride);
            // gemm_bf16_glu: C's row block in one of the thread's two buffers (one slice of K)
            float* c = p.epi ? cb + j : p.C + size_t(m0) * p.ldc + n + j;
            const int ldc = p.epi ? kGluLd : p.ldc;
            block(p, c, ldc, rows, std::min(kBlock, cols - j), ks == 0, sa, b0, b1, d.c ? &d : nullptr);
          }
        }
        if (p.epi) {  // this row block finished: the one before's epilogue done, this one's pending
          d.finish();
          d = Deferred{p.epi, p.glu, cb, kGluLd, m0, rows, n, cols};
        }
      }
      d.finish();
    }
  }
}

// Elements each thread packs when the threads split the rows (split_rows) or the columns of C:
// the packed panels of op(B) over its columns, and op(A)'s rows once per panel.
double packed_per_thread(bool split_rows, int M, int N, int K, int nc, int nt) {
  const double Mt = split_rows ? (M + nt - 1) / nt : M, Nt = split_rows ? N : (N + nt - 1) / nt;
  return (Nt + std::ceil(Nt / nc) * Mt) * K;
}

// The threads' split of p's C, each thread running its range (rows or columns, whichever packs less).
void run(const Problem& p) {
  const int mblocks = (p.M + kBlock - 1) / kBlock, nblocks = (p.N + kBlock - 1) / kBlock;
  const int nt = omp_get_max_threads();
  // (xa's rows are computed by the one thread that owns them)
  const bool split_rows = p.l.p || nblocks < nt ||
                          (mblocks >= nt && packed_per_thread(true, p.M, p.N, p.K, p.nc, nt) <=
                                                packed_per_thread(false, p.M, p.N, p.K, p.nc, nt));
#pragma omp parallel num_threads(nt)
  {
    if (p.mode == PackedMode::Amx) load_tile_config();
    const int n = omp_get_num_threads(), id = omp_get_thread_num();
    if (split_rows)
      run_range(p, int(int64_t(mblocks) * id / n), int(int64_t(mblocks) * (id + 1) / n), 0, nblocks);
    else
      run_range(p, 0, mblocks, int(int64_t(nblocks) * id / n), int(int64_t(nblocks) * (id + 1) / n));
    if (p.mode == PackedMode::Amx) _tile_release();
  }
}

// K per slice (a multiple of 32) and columns per panel (the slice's packed panel, with an appended
// step, within kPanelBytes)
void blocking(Problem& p) {
  p.mode = packed_bf16_mode();
  const int slices = (p.K + kMaxKc - 1) / kMaxKc;
  p.kc = round_up((p.K + slices - 1) / slices, 32);
  const size_t step_bytes = size_t(p.kc + (p.K2 > 0 ? 32 : 0)) * 2;
  const size_t panel = p.mode == PackedMode::Fma ? kPanelBytes / 2 : kPanelBytes;  // Fma: its widened copy in bf
  p.nc = std::max(kBlock, int(panel / step_bytes) / kBlock * kBlock);
  if (p.epi) p.nc = std::min(p.nc, kGluCols);
}

}  // namespace

void avx512_dot_rates(double& dpbf16, double& fma) {
  constexpr int kIters = 20000;  // x 16 instructions: ~1 ms at the slower unit's rate
  auto time = [](auto body) {
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      body();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  __m512 acc[16];
  for (auto& a : acc) a = _mm512_setzero_ps();
  __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80);
  __m512 f = _mm512_set1_ps(1e-7f);
  const double tdp = time([&] {
    for (int i = 0; i < kIters; ++i) {
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], x, x);
      __asm__ volatile("" : "+v"(x));
    }
  });
  const double tfma = time([&] {
    for (int i = 0; i < kIters; ++i) {
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(acc[j], f, f);
      __asm__ volatile("" : "+v"(f));
    }
  });
  float sink = 0;
  for (auto& a : acc) sink += _mm512_reduce_add_ps(a);
  __asm__ volatile("" : : "x"(sink));
  dpbf16 = kIters * 16 * 64.0 / tdp * 1e-9;
  fma = kIters * 16 * 32.0 / tfma * 1e-9;
}

void gemm_f16_split(int M, int N, int K, int parts, const uint16_t* A, int lda, const uint16_t* W, int ldw,
                    float* C, int ldc) {
  Problem p{{A, lda, false}, {W, ldw, true}, M, N, parts * K, {}, {}, 0, 1.0f, 0.0f, C, ldc, 0, 0};
  p.w = Op{W, ldw, true}, p.wparts = parts;
  blocking(p);
  run(p);
}

bool lora_fuses(int M, int K, int R, const uint16_t* A, int lda) {
  return M % kBlock == 0 && K % 32 == 0 && K <= kMaxLoraK && R >= 1 && R <= 32 && lda % 32 == 0 &&
         reinterpret_cast<uintptr_t>(A) % 64 == 0;
}

void gemm_bf16_lora(bool trans_b, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                    const LoraRankTerm& r, float beta, float* C, int ldc) {
  Problem p{{A, lda, false}, {B, ldb, trans_b}, M, N, K, {r.xa16, r.ld16, false}, {r.B2, r.ldb2, trans_b}, r.R,
            1.0f, beta, C, ldc, 0, 0};
  p.l = Op{r.L, r.ldl, r.trans_l}, p.xa = r.xa, p.R1 = r.R1, p.xa_b = r.xa_b;
  blocking(p);
  run(p);
}

bool glu_fuses(int M, int F, int K, const uint16_t* A, int lda) {
  return M % kBlock == 0 && F % 16 == 0 && K % 32 == 0 && K <= kMaxKc && lda % 32 == 0 &&
         reinterpret_cast<uintptr_t>(A) % 64 == 0;
}

void gemm_bf16_glu(int M, int F, int K, const uint16_t* A, int lda, const uint16_t* Wg, const uint16_t* Wu, int ldw,
                   const LoraRankTerm* r, const GluOutputs& o, GluEpilogue epi) {
  Problem p{{A, lda, false}, {Wg, ldw, true}, M, 2 * F, K, {}, {}, 0, 1.0f, 0.0f, nullptr, 0, 0, 0};
  if (r) {
    p.a2 = Op{r->xa16, r->ld16, false}, p.b2 = Op{r->B2, r->ldb2, true}, p.K2 = r->R;
    p.l = Op{r->L, r->ldl, r->trans_l}, p.xa = r->xa, p.R1 = r->R1, p.xa_b = r->xa_b;
  }
  p.b_odd = Wu, p.glu = &o, p.epi = epi;
  blocking(p);
  run(p);
}

void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t* A, int lda,
               const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  Problem p{{A, lda, trans_a}, {B, ldb, trans_b}, M, N, K, {}, {}, 0, alpha, beta, C, ldc, 0, 0};
  blocking(p);
  run(p);
}

void gemm_bf16_appended(bool trans_b, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                        int K2, const uint16_t* A2, int lda2, const uint16_t* B2, int ldb2, float beta, float* C,
                        int ldc) {
  Problem p{{A, lda, false}, {B, ldb, trans_b}, M, N, K, {A2, lda2, false}, {B2, ldb2, trans_b}, K2, 1.0f, beta,
            C, ldc, 0, 0};
  blocking(p);
  run(p);
}

}  // namespace lt::cpu::amx
