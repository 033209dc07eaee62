// Fast fused lm_head + softmax + cross-entropy: the reference algorithm (kernels/ref/
// cross_entropy.cpp) with the three products done as GEMMs per chunk and the row softmax in
// parallel (per ISA: the row function comes from train_kernels.inc). Ignored rows get zero dlogits, so they add nothing to dx or dw. Row losses are summed
// in a fixed order after the parallel loop, so the result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/backward.h"
#include "kernels/cpu/gemm.h"

namespace lt::cpu {

float lm_head_loss_rows(XentRowFn row_fn, float* dx, float* dw, float* logits_chunk, const float* x, const float* w,
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
  constexpr int kRows = 512;  // row losses of one block, summed in order afterwards (no allocation)
  double row_loss[kRows];
  for (int t0 = 0; t0 < T; t0 += chunk) {
    const int n = std::min(chunk, T - t0);
    gemm_f32(false, true, n, V, C, 1.0f, x + size_t(t0) * C, C, w, C, 0.0f, logits_chunk, V);  // (n, V)
    for (int r0 = 0; r0 < n; r0 += kRows) {
      const int nr = std::min(kRows, n - r0);
#pragma omp parallel for schedule(static)
      for (int r = 0; r < nr; r++) {
        const int y = labels[t0 + r0 + r];
        float* lr = logits_chunk + size_t(r0 + r) * V;
        if (y == kIgnoreLabel) {
          std::memset(lr, 0, size_t(V) * sizeof(float));
          row_loss[r] = 0.0;
        } else {
          row_loss[r] = row_fn(lr, V, y, gscale, want_grad);
        }
      }
      for (int r = 0; r < nr; r++) loss_sum += row_loss[r];
    }
    if (dx) gemm_f32(false, false, n, C, V, 1.0f, logits_chunk, V, w, C, 0.0f, dx + size_t(t0) * C, C);
    if (dw) gemm_f32(true, false, V, C, n, 1.0f, logits_chunk, V, x + size_t(t0) * C, C, 1.0f, dw, C);
  }
  return float(loss_sum / count);
}

// The row in double throughout: the ISA-independent table entry (and the scalar baseline).
static double xent_row_double(float* lr, int V, int y, float gscale, bool want_grad) {
  float mx = lr[0];
  for (int v = 1; v < V; v++) mx = std::max(mx, lr[v]);
  double sum = 0.0;
  for (int v = 0; v < V; v++) sum += std::exp(double(lr[v]) - mx);
  const double lse = double(mx) + std::log(sum);
  const double loss = lse - double(lr[y]);
  if (want_grad)
    for (int v = 0; v < V; v++) lr[v] = float((std::exp(double(lr[v]) - lse) - (v == y ? 1.0 : 0.0)) * gscale);
  return loss;
}

float lm_head_loss(float* dx, float* dw, float* logits_chunk, const float* x, const float* w, const int* labels,
                   int T, int C, int V, int chunk, float loss_scale) {
  return lm_head_loss_rows(xent_row_double, dx, dw, logits_chunk, x, w, labels, T, C, V, chunk, loss_scale);
}

// Soft-capped logits (Gemma 2): lm_head_loss_rows' loop with each row capped in place before its
// loss, and its dlogits then multiplied by d capped / d logit = 1 - (capped / cap)², recomputed
// from the logits kept in a second chunk-sized buffer.
float lm_head_loss_softcap(float* dx, float* dw, float* logits_chunk, const float* x, const float* w,
                           const int* labels, int T, int C, int V, int chunk, float loss_scale, float cap) {
  LT_CHECK(cap > 0, "lm_head_loss_softcap: cap must be positive, got {}", cap);
  const int count = count_loss_labels(labels, T, V);
  if (count == 0) {
    if (dx) std::fill(dx, dx + size_t(T) * C, 0.0f);
    return 0.0f;
  }
  const bool want_grad = dx || dw;
  const float gscale = loss_scale / float(count);
  double loss_sum = 0.0;
  std::vector<double> row_loss(size_t(std::min(chunk, T)));
  std::vector<float> capped(size_t(std::min(chunk, T)) * size_t(V));
  for (int t0 = 0; t0 < T; t0 += chunk) {
    const int n = std::min(chunk, T - t0);
    gemm_f32(false, true, n, V, C, 1.0f, x + size_t(t0) * C, C, w, C, 0.0f, logits_chunk, V);  // (n, V)
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
      const int y = labels[t0 + r];
      float* lr = logits_chunk + size_t(r) * V;
      float* cr = capped.data() + size_t(r) * V;
      row_loss[size_t(r)] = 0.0;
      if (y == kIgnoreLabel) {
        std::memset(lr, 0, size_t(V) * sizeof(float));
        continue;
      }
      for (int v = 0; v < V; v++) cr[v] = lr[v] = std::tanh(lr[v] / cap) * cap;
      row_loss[size_t(r)] = xent_row_double(lr, V, y, gscale, want_grad);
      if (want_grad)
        for (int v = 0; v < V; v++) {
          const float tc = cr[v] / cap;
          lr[v] *= 1.0f - tc * tc;
        }
    }
    for (int r = 0; r < n; r++) loss_sum += row_loss[size_t(r)];
    if (dx) gemm_f32(false, false, n, C, V, 1.0f, logits_chunk, V, w, C, 0.0f, dx + size_t(t0) * C, C);
    if (dw) gemm_f32(true, false, V, C, n, 1.0f, logits_chunk, V, x + size_t(t0) * C, C, 1.0f, dw, C);
  }
  return float(loss_sum / count);
}

}  // namespace lt::cpu
