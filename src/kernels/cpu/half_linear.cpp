// The fast linear products against 16-bit weights (BF16 / F16 kinds, kernels/linear.h; mixed
// precision, DESIGN.md §3): y = x·Wᵀ, dX += dY·W, dW += dYᵀ·X with f32 accumulation into f32
// outputs. bf16 runs on oneDNN's bf16 matmul (gemm_bf16, AVX512-BF16 where present). f16 is
// emulated exactly: f16 values are exact in f32, so W is widened kHalfTileRows rows at a time into
// the tile scratch and multiplied with gemm_f32 against x's f32 values. The incoming gradient dY is
// rounded to the 16-bit type first, as a 16-bit GEMM would see it: with f16 that is where a too
// large loss scale overflows to Inf (train/loss_scaler.h).
//
// The bf16 split of an f16 forward (where AMX bf16 tiles run the GEMM): each f16 value of x is
// split as hi = bf16(x) (nearest even) plus lo = x - hi. lo is exact in f32 and in bf16: it is a
// multiple of x's f16 spacing no larger than half of hi's bf16 spacing, so at most 3 significant bits
// (bf16's exponent range holds f16's subnormals). W is split the same way as the GEMM packs it
// (amx::gemm_f16_split: no bf16 copy of W). An f16 weight whose values are all bf16s
// (WeightView::bf16_values) is its own hi: y = [x_hi | x_lo] · [W | W]ᵀ; any other f16 weight
// needs four products: y = [x_hi | x_hi | x_lo | x_lo] · [W_hi | W_lo | W_hi | W_lo]ᵀ (per k step of
// 32, interleaved: amx::gemm_f16_split splits each step of W once). Every
// product is one of significands of at most 8 bits, exact in f32; the sums are f32 (one sum of
// 2·IC or 4·IC exact terms per output). No f32 denormal arises (operands >= 2^-24, so nonzero sums
// of products are >= 2^-48), so the bf16 units' DAZ/FTZ changes nothing. x = ±Inf gives lo = 0; with
// four products x_hi·W_lo would be Inf·0 = NaN where W is a bf16 value, so a chunk of x holding an
// infinity takes the f32 path. An infinite weight (no trained model has one) makes its output column
// NaN instead of ±Inf: non-finite either way. It costs two (four) bf16 products per weight against one
// f32 product, and AMX runs bf16 products many times faster than AVX-512 runs f32 FMAs.
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
size_t align64(size_t b) { return (b + 63) & ~size_t(63); }

// The copies of x's (and W's) parts along K: 2 for bf16 values, else 4 (the top of the file).
int split_parts(const WeightView& w) { return w.bf16_values ? 2 : 4; }

// xs (T, parts · IC): x's rows split, hi = bf16(x) and lo = bf16(x - hi), both exact for f16 values
// (the top of the file), each k step of 32 as [hi, lo] (parts 2) or [hi, hi, lo, lo] (parts 4), to
// match amx::gemm_f16_split's op(B). Returns whether any x is ±Inf.
bool split_input(uint16_t* xs, const float* x, int T, int IC, int parts) {
  bool inf = false;
#pragma omp parallel for schedule(static) reduction(|| : inf) if (int64_t(T) * IC >= 32768)
  for (int t = 0; t < T; ++t) {
    alignas(64) uint16_t hi[kChunk], lo[kChunk];
    uint16_t* r = xs + size_t(t) * parts * IC;
    for (int i0 = 0; i0 < IC; i0 += int(kChunk)) {
      const int n = std::min(int(kChunk), IC - i0);
      inf = avx512::bf16_split(hi, lo, x + size_t(t) * IC + i0, size_t(n)) || inf;
      for (int k = 0; k < n; k += 32) {
        uint16_t* d = r + size_t(i0 + k) * parts;
        const int h = parts / 2;  // copies of each part
        for (int c = 0; c < h; ++c) std::copy(hi + k, hi + k + 32, d + 32 * c);
        for (int c = 0; c < h; ++c) std::copy(lo + k, lo + k + 32, d + 32 * (h + c));
      }
    }
  }
  return inf;
}

// out (T, OC) = x · Wᵀ with W widened to f32 kHalfTileRows rows at a time into t32
void widened_forward(float* out, const float* x, const uint16_t* w16, int T, int IC, int OC, float* t32) {
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

}  // namespace

int half_split_tokens(const WeightView& w, int T, size_t tile_bytes) {
  if (w.kind != WeightKind::F16 || w.cols % 32 || cpu_isa() != Isa::Avx512 || !amx_bf16_kernels()) return 0;
  const int least = w.bf16_values ? kSplitMinTokensBf16 : kSplitMinTokens;
  const size_t per_token = 2 * size_t(split_parts(w)) * w.cols;  // + 64: the rounding up of the tile's offset
  const size_t fit = tile_bytes > 64 ? (tile_bytes - 64) / per_token : 0;
  return T >= least && fit >= size_t(least) ? int(std::min(fit, size_t(T))) : 0;
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
  if (const int chunk = half_split_tokens(w, T, tile_bytes)) {  // token chunks: W packed once a chunk
    const auto at = reinterpret_cast<uintptr_t>(tile);
    auto* xs = reinterpret_cast<uint16_t*>(static_cast<char*>(tile) + (align64(at) - at));
    const int parts = split_parts(w);
    for (int t0 = 0; t0 < T; t0 += chunk) {
      const int n = std::min(chunk, T - t0);
      const float* xc = x + size_t(t0) * IC;
      float* yc = out + size_t(t0) * OC;
      // an infinite x times a zero W_lo would give NaN where x·w is ±Inf: such a chunk widens W
      if (split_input(xs, xc, n, IC, parts) && parts == 4)
        widened_forward(yc, xc, w16, n, IC, OC, static_cast<float*>(tile));
      else amx::gemm_f16_split(n, OC, IC, parts, xs, parts * IC, w16, IC, yc, OC);
    }
    return;
  }
  widened_forward(out, x, w16, T, IC, OC, static_cast<float*>(tile));
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
