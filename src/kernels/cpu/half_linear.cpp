// The fast linear products against 16-bit weights (BF16 / F16 kinds, kernels/linear.h; mixed
// precision, DESIGN.md §3): y = x·Wᵀ, dX += dY·W, dW += dYᵀ·X with f32 accumulation into f32
// outputs. bf16 runs on oneDNN's bf16 matmul (gemm_bf16, AVX512-BF16 where present). f16 is
// emulated exactly: f16 values are exact in f32, so W is widened kHalfTileRows rows at a time into
// the tile scratch and multiplied with gemm_f32 against x's f32 values. The incoming gradient dY is
// rounded to the 16-bit type first, as a 16-bit GEMM would see it: with f16 that is where a too
// large loss scale overflows to Inf (train/loss_scaler.h).
//
// The bf16 split of an f16 forward (WeightView::bf16_values, where AMX bf16 tiles run oneDNN's bf16
// matmul): an f16 weight whose values are all bf16s is copied to bf16 a tile of rows at a time, and
// each f16 value of x is split as hi = bf16(x) (nearest even) plus lo = x - hi. lo is exact in f32
// and in bf16: it is a multiple of x's f16 spacing no larger than half of hi's bf16 spacing, so at
// most 3 significant bits (bf16's exponent range holds f16's subnormals). One bf16 GEMM of the
// stacked [hi; lo] (2T, IC) against the tile gives both halves' products, and y = y_hi + y_lo: every
// product x·w is a product of 8-bit significands, exact in f32; the sums are f32. No f32 denormal
// arises (operands >= 2^-24, so nonzero sums of products are >= 2^-48), so the bf16 units' DAZ/FTZ
// changes nothing. x = ±Inf gives lo = 0. It costs two bf16 products per weight against one f32
// product, and AMX runs bf16 products many times faster than AVX-512 runs f32 FMAs.
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "core/cpu_features.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/linear_kernels.h"

namespace lt::cpu {

namespace {

constexpr size_t kChunk = 2048;  // elements converted at a time through an L1 buffer
// The bf16 weight rows of one split GEMM: about 1 MiB, so the tile the conversion writes is still in
// L2 when oneDNN reads it (at least 16 rows).
constexpr size_t kSplitTileBytes = size_t(1) << 20;
size_t align64(size_t b) { return (b + 63) & ~size_t(63); }

// hi[i] = bf16(x[i]), lo[i] = bf16(x[i] - hi[i]): both exact for f16 values x (the top of the file)
void split_input(uint16_t* hi, uint16_t* lo, const float* x, size_t n) {
  const int64_t chunks = int64_t((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks >= 16)
  for (int64_t c = 0; c < chunks; ++c) {
    alignas(64) float r[kChunk];
    const size_t i0 = size_t(c) * kChunk, m = std::min(kChunk, n - i0);
    const float* xc = x + i0;
    avx512::f32_to_half(true, hi + i0, r, xc, m);
    for (size_t i = 0; i < m; ++i) r[i] = xc[i] == r[i] ? 0.0f : xc[i] - r[i];  // ±Inf: 0, not NaN
    avx512::f32_to_half(true, lo + i0, nullptr, r, m);
  }
}

// dst = the bf16 bits of n f16 values that are all bf16s (through f32: exact both ways)
void f16_to_bf16(uint16_t* dst, const uint16_t* src, size_t n) {
  const int64_t chunks = int64_t((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks >= 16)
  for (int64_t c = 0; c < chunks; ++c) {
    alignas(64) float r[kChunk];
    const size_t i0 = size_t(c) * kChunk, m = std::min(kChunk, n - i0);
    avx512::half_to_f32(false, r, src + i0, m);
    avx512::f32_to_half(true, dst + i0, nullptr, r, m);
  }
}

// The scratch layout of the split: [hi; lo] (2T, IC) bf16, then `rows` weight rows in bf16, then
// the (2T, rows) f32 products.
size_t split_bytes(int T, int IC, int rows) {
  return align64(4 * size_t(T) * IC) + align64(2 * size_t(rows) * IC) + 8 * size_t(T) * rows;
}

void split_forward(float* out, const float* x, const WeightView& w, int T, char* tile, int tile_rows) {
  const int IC = w.cols, OC = w.rows;
  const size_t n = size_t(T) * IC;
  auto* xs = reinterpret_cast<uint16_t*>(tile);
  auto* wt = reinterpret_cast<uint16_t*>(tile + align64(4 * n));
  auto* yt = reinterpret_cast<float*>(tile + align64(4 * n) + align64(2 * size_t(tile_rows) * IC));
  split_input(xs, xs + n, x, n);
  const auto* w16 = static_cast<const uint16_t*>(w.data);
  for (int o0 = 0; o0 < OC; o0 += tile_rows) {
    const int rows = std::min(tile_rows, OC - o0);
    f16_to_bf16(wt, w16 + size_t(o0) * IC, size_t(rows) * IC);
    gemm_bf16(false, true, 2 * T, rows, IC, 1.0f, xs, IC, wt, IC, 0.0f, yt, rows);
#pragma omp parallel for schedule(static) if (int64_t(T) * rows >= 65536)
    for (int t = 0; t < T; ++t) {
      const float *a = yt + size_t(t) * rows, *b = yt + size_t(T + t) * rows;
      float* y = out + size_t(t) * OC + o0;
      for (int j = 0; j < rows; ++j) y[j] = a[j] + b[j];
    }
  }
}

}  // namespace

int half_split_rows(const WeightView& w, int T, size_t tile_bytes) {
  if (w.kind != WeightKind::F16 || !w.bf16_values || T <= 0 || cpu_isa() != Isa::Avx512 || !amx_bf16_kernels())
    return 0;
  const int IC = w.cols, OC = w.rows;
  // + 128: the rounding up of the tile's offset to 64 bytes and of the weight section's end (each < 64)
  const size_t fixed = split_bytes(T, IC, 0) + 128;
  if (tile_bytes <= fixed) return 0;
  size_t rows = (tile_bytes - fixed) / (2 * size_t(IC) + 8 * size_t(T));
  rows = std::min({rows, std::max(kSplitTileBytes / (2 * size_t(IC)), size_t(16)), size_t(OC)});
  if (rows < size_t(OC)) rows -= rows % 16;
  return rows >= 16 || rows == size_t(OC) ? int(rows) : 0;
}

void half_forward(float* out, const float* x, const uint16_t* x16, const WeightView& w, int T, void* tile,
                  size_t tile_bytes) {
  const int IC = w.cols, OC = w.rows;
  const auto* w16 = static_cast<const uint16_t*>(w.data);
  if (w.kind == WeightKind::BF16) {
    LT_CHECK(x16, "linear_forward: a bf16 weight needs the input's bf16 bits (LinearInput::x16)");
    gemm_bf16(false, true, T, OC, IC, 1.0f, x16, IC, w16, IC, 0.0f, out, OC);
    return;
  }
  LT_ASSERT(w.kind == WeightKind::F16 && tile);
  if (const int rows = half_split_rows(w, T, tile_bytes)) {
    const auto at = reinterpret_cast<uintptr_t>(tile);
    return split_forward(out, x, w, T, static_cast<char*>(tile) + (align64(at) - at), rows);
  }
  auto* t32 = static_cast<float*>(tile);
  const int team = omp_get_max_threads();
  for (int o0 = 0; o0 < OC; o0 += kHalfTileRows) {
    const int rows = std::min(kHalfTileRows, OC - o0);
    if (team > 1 && T <= kSlicedMaxTokens) {  // a prefill: each thread widens and multiplies its slice alone
      for_row_slices(rows, team, [&](int r0, int n) {
        float* wt = t32 + size_t(r0) * IC;
        half_to_f32(DType::F16, wt, w16 + size_t(o0 + r0) * IC, size_t(n) * IC);
        gemm_f32(false, true, T, n, IC, 1.0f, x, IC, wt, IC, 0.0f, out + o0 + r0, OC);
      });
      continue;
    }
    half_to_f32(DType::F16, t32, w16 + size_t(o0) * IC, size_t(rows) * IC);
    gemm_f32(false, true, T, rows, IC, 1.0f, x, IC, t32, IC, 0.0f, out + o0, OC);
  }
}

void half_backward(float* dx, float* dw, const float* dout, const float* x, const uint16_t* x16, const WeightView& w,
                   int T, void* dy, float* tile) {
  if (!dx && !dw) return;
  const int IC = w.cols, OC = w.rows;
  const auto* w16 = static_cast<const uint16_t*>(w.data);
  const size_t n = size_t(T) * OC;
  LT_CHECK(dy, "linear backward: a {} weight needs the dy scratch (linear_dy_bytes)", weight_kind_name(w.kind));
  if (w.kind == WeightKind::BF16) {
    auto* dy16 = static_cast<uint16_t*>(dy);
    f32_to_half(DType::BF16, dy16, nullptr, dout, n);
    if (dx) gemm_bf16(false, false, T, IC, OC, 1.0f, dy16, OC, w16, IC, 1.0f, dx, IC);
    if (dw) {
      LT_CHECK(x16, "linear_backward_weight: a bf16 weight needs the input's bf16 bits (LinearInput::x16)");
      gemm_bf16(true, false, OC, IC, T, 1.0f, dy16, OC, x16, IC, 1.0f, dw, IC);
    }
    return;
  }
  LT_ASSERT(w.kind == WeightKind::F16);
  auto* dy32 = static_cast<float*>(dy);
  f32_to_half(DType::F16, nullptr, dy32, dout, n);
  if (dx) {
    LT_ASSERT(tile);
    for (int o0 = 0; o0 < OC; o0 += kHalfTileRows) {
      const int rows = std::min(kHalfTileRows, OC - o0);
      half_to_f32(DType::F16, tile, w16 + size_t(o0) * IC, size_t(rows) * IC);
      gemm_f32(false, false, T, IC, rows, 1.0f, dy32 + o0, OC, tile, IC, 1.0f, dx, IC);
    }
  }
  if (dw) gemm_f32(true, false, OC, IC, T, 1.0f, dy32, OC, x, IC, 1.0f, dw, IC);
}

}  // namespace lt::cpu
