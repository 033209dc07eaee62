// 16-bit linear GEMMs (half_linear.h): bf16 through oneDNN, f16 by exact widening to f32.
#include "train/half_linear.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm.h"

namespace lt {

size_t half_dy_bytes(DType t, size_t N, size_t max_io) { return N * max_io * (t == DType::F16 ? 4 : 2); }

void HalfGemm::forward(float* out, const uint16_t* x16, const float* x32, const uint16_t* w, int IC, int OC,
                       float beta) const {
  if (t == DType::BF16) {
    cpu::gemm_bf16(false, true, N, OC, IC, 1.0f, x16, IC, w, IC, beta, out, OC);
    return;
  }
  LT_ASSERT(t == DType::F16 && x32 && wtile);
  for (int o0 = 0; o0 < OC; o0 += kHalfTileRows) {
    const int rows = std::min(kHalfTileRows, OC - o0);
    cpu::half_to_f32(t, wtile, w + size_t(o0) * IC, size_t(rows) * IC);
    cpu::gemm_f32(false, true, N, rows, IC, 1.0f, x32, IC, wtile, IC, beta, out + o0, OC);
  }
}

void HalfGemm::backward(float* dx, float* dw, const float* dout, const uint16_t* x16, const float* x32,
                        const uint16_t* w, int IC, int OC) const {
  if (!dx && !dw) return;
  const size_t n = size_t(N) * OC;
  if (t == DType::BF16) {
    cpu::f32_to_half(t, dy16, nullptr, dout, n);
    if (dx) cpu::gemm_bf16(false, false, N, IC, OC, 1.0f, dy16, OC, w, IC, 1.0f, dx, IC);
    if (dw) cpu::gemm_bf16(true, false, OC, IC, N, 1.0f, dy16, OC, x16, IC, 1.0f, dw, IC);
    return;
  }
  LT_ASSERT(t == DType::F16 && x32 && wtile);
  cpu::f32_to_half(t, nullptr, dy32, dout, n);
  if (dx)
    for (int o0 = 0; o0 < OC; o0 += kHalfTileRows) {
      const int rows = std::min(kHalfTileRows, OC - o0);
      cpu::half_to_f32(t, wtile, w + size_t(o0) * IC, size_t(rows) * IC);
      cpu::gemm_f32(false, false, N, IC, rows, 1.0f, dy32 + o0, OC, wtile, IC, 1.0f, dx, IC);
    }
  if (dw) cpu::gemm_f32(true, false, OC, IC, N, 1.0f, dy32, OC, x32, IC, 1.0f, dw, IC);
}

}  // namespace lt
