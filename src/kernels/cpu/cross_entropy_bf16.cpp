// Fast fused lm_head + cross-entropy with a bf16 lm_head (TrainOps::lm_head_loss_bf16): per chunk
// of rows, x rounded to bf16 into the x16 scratch, logits = x16 · wᵀ as a bf16 GEMM (f32
// accumulation), the row softmax / loss / dlogits in f32 in parallel (the ISA's row function, as
// lm_head_loss_rows), each dlogits row rounded to bf16 in place (kernels/bf16_rows.h), then
// dx = dlogits16 · w and, for a trained lm_head, dw += dlogits16ᵀ · x16 as bf16 GEMMs. Row losses
// are summed in a fixed order, so the loss does not depend on the thread count.
#include <algorithm>
#include <cstring>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/backward.h"
#include "kernels/bf16_rows.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm.h"

namespace lt::cpu {

float lm_head_loss_rows_bf16(XentRowFn row_fn, float* dx, float* dw, float* logits_chunk, uint16_t* x16,
                             const float* x, const uint16_t* w, const int* labels, int T, int C, int V, int chunk,
                             float loss_scale) {
  LT_ASSERT(chunk > 0);
  const int count = count_loss_labels(labels, T, V);
  if (count == 0) {
    if (dx) std::fill(dx, dx + size_t(T) * C, 0.0f);
    return 0.0f;
  }
  const bool want_grad = dx || dw;
  const float gscale = loss_scale / float(count);
  double loss_sum = 0.0;
  constexpr int kRows = 512;  // row losses of one block, summed in order afterwards (no allocation)
  double row_loss[kRows];
  // the bf16 dlogits in place: row r at the first 2V bytes of the f32 row r, a row stride of 2V halves
  const auto* dl16 = reinterpret_cast<const uint16_t*>(logits_chunk);
  const bool avx512 = cpu_isa() == Isa::Avx512;  // its rounding loop (in-place safe, convert.h)
  for (int t0 = 0; t0 < T; t0 += chunk) {
    const int n = std::min(chunk, T - t0);
    f32_to_half(DType::BF16, x16, nullptr, x + size_t(t0) * C, size_t(n) * C);
    gemm_bf16(false, true, n, V, C, 1.0f, x16, C, w, C, 0.0f, logits_chunk, V);  // (n, V)
    for (int r0 = 0; r0 < n; r0 += kRows) {
      const int nr = std::min(kRows, n - r0);
#pragma omp parallel for schedule(static)
      for (int r = 0; r < nr; r++) {
        const int y = labels[t0 + r0 + r];
        float* lr = logits_chunk + size_t(r0 + r) * V;
        if (y == kIgnoreLabel) {
          std::memset(lr, 0, size_t(V) * sizeof(float));  // zero in either reading
          row_loss[r] = 0.0;
        } else {
          row_loss[r] = row_fn(lr, V, y, gscale, want_grad);
          if (want_grad && avx512) avx512::f32_to_half(true, reinterpret_cast<uint16_t*>(lr), nullptr, lr, size_t(V));
          else if (want_grad) round_row_bf16_inplace(lr, size_t(V));
        }
      }
      for (int r = 0; r < nr; r++) loss_sum += row_loss[r];
    }
    if (dx) gemm_bf16(false, false, n, C, V, 1.0f, dl16, 2 * V, w, C, 0.0f, dx + size_t(t0) * C, C);
    if (dw) gemm_bf16(true, false, V, C, n, 1.0f, dl16, 2 * V, x16, C, 1.0f, dw, C);
  }
  return float(loss_sum / count);
}

}  // namespace lt::cpu
