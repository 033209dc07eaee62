// The fast linear products against 16-bit weights (BF16 / F16 kinds, kernels/linear.h; mixed
// precision, DESIGN.md §3): y = x·Wᵀ, dX += dY·W, dW += dYᵀ·X with f32 accumulation into f32
// outputs. bf16 runs on oneDNN's bf16 matmul (gemm_bf16, AVX512-BF16 where present). f16 is
// emulated exactly: f16 values are exact in f32, so W is widened kHalfTileRows rows at a time into
// the tile scratch and multiplied with gemm_f32 against x's f32 values. The incoming gradient dY is
// rounded to the 16-bit type first, as a 16-bit GEMM would see it: with f16 that is where a too
// large loss scale overflows to Inf (train/loss_scaler.h).
#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/linear_kernels.h"

namespace lt::cpu {

void half_forward(float* out, const float* x, const uint16_t* x16, const WeightView& w, int T, float* tile) {
  const int IC = w.cols, OC = w.rows;
  const auto* w16 = static_cast<const uint16_t*>(w.data);
  if (w.kind == WeightKind::BF16) {
    LT_CHECK(x16, "linear_forward: a bf16 weight needs the input's bf16 bits (LinearInput::x16)");
    gemm_bf16(false, true, T, OC, IC, 1.0f, x16, IC, w16, IC, 0.0f, out, OC);
    return;
  }
  LT_ASSERT(w.kind == WeightKind::F16 && tile);
  for (int o0 = 0; o0 < OC; o0 += kHalfTileRows) {
    const int rows = std::min(kHalfTileRows, OC - o0);
    half_to_f32(DType::F16, tile, w16 + size_t(o0) * IC, size_t(rows) * IC);
    gemm_f32(false, true, T, rows, IC, 1.0f, x, IC, tile, IC, 0.0f, out + o0, OC);
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
