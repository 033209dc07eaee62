// Reference fused lm_head + cross-entropy with a bf16 lm_head (TrainOps::lm_head_loss_bf16): the
// f32 reference (cross_entropy.cpp) with x's rows rounded to bf16 before the products, the lm_head
// widened element by element, and each row's dlogits rounded to bf16 before dx and dw. The row
// softmax, log-sum-exp and loss are as in the f32 reference (f32 logits, double sums). The bf16
// dlogits live in place in the logits scratch (kernels/bf16_rows.h): row r's in the first 2V bytes
// of logits_chunk + r*V.
#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/backward.h"
#include "kernels/bf16_rows.h"

namespace lt::ref {

float lm_head_loss_bf16(float* dx, float* dw, float* logits_chunk, uint16_t* x16, const float* x, const uint16_t* w,
                        const int* labels, int T, int C, int V, int chunk, float loss_scale) {
  LT_ASSERT(chunk > 0);
  const int count = count_loss_labels(labels, T, V);
  if (count == 0) {
    if (dx) std::fill(dx, dx + size_t(T) * C, 0.0f);
    return 0.0f;
  }
  const bool want_grad = dx || dw;
  const float gscale = loss_scale / float(count);
  double loss_sum = 0.0;
  for (int t0 = 0; t0 < T; t0 += chunk) {
    const int n = std::min(chunk, T - t0);
    for (size_t i = 0; i < size_t(n) * C; i++) x16[i] = f32_to_bf16(x[size_t(t0) * C + i]);
    for (int r = 0; r < n; r++) {
      const int y = labels[t0 + r];
      float* lr = logits_chunk + size_t(r) * V;  // (V)
      if (y == kIgnoreLabel) {
        std::fill(lr, lr + V, 0.0f);  // zero dlogits, in either reading
        continue;
      }
      const uint16_t* xt = x16 + size_t(r) * C;
      for (int v = 0; v < V; v++) {
        const uint16_t* wv = w + size_t(v) * C;
        float s = 0.0f;
        for (int c = 0; c < C; c++) s += bf16_to_f32(xt[c]) * bf16_to_f32(wv[c]);
        lr[v] = s;
      }
      float mx = lr[0];
      for (int v = 1; v < V; v++) mx = std::max(mx, lr[v]);
      double sum = 0.0;
      for (int v = 0; v < V; v++) sum += std::exp(double(lr[v]) - mx);
      const double lse = double(mx) + std::log(sum);
      loss_sum += lse - double(lr[y]);
      if (!want_grad) continue;
      for (int v = 0; v < V; v++) lr[v] = float((std::exp(double(lr[v]) - lse) - (v == y ? 1.0 : 0.0)) * gscale);
      round_row_bf16_inplace(lr, size_t(V));
    }
    if (!want_grad) continue;
    if (dx) {
      for (int r = 0; r < n; r++) {
        float* dxt = dx + size_t(t0 + r) * C;  // (C)
        std::fill(dxt, dxt + C, 0.0f);
        const float* lr = logits_chunk + size_t(r) * V;
        for (int v = 0; v < V; v++) {
          const float g = bf16_row_at(lr, size_t(v));
          const uint16_t* wv = w + size_t(v) * C;
          for (int c = 0; c < C; c++) dxt[c] += g * bf16_to_f32(wv[c]);
        }
      }
    }
    if (dw) {
      for (int v = 0; v < V; v++) {
        float* dwv = dw + size_t(v) * C;  // (C)
        for (int r = 0; r < n; r++) {
          const float g = bf16_row_at(logits_chunk + size_t(r) * V, size_t(v));
          const uint16_t* xt = x16 + size_t(r) * C;
          for (int c = 0; c < C; c++) dwv[c] += g * bf16_to_f32(xt[c]);
        }
      }
    }
  }
  return float(loss_sum / count);
}

}  // namespace lt::ref
