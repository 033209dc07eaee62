// Fast fused lm_head + softmax + cross-entropy: the reference algorithm (kernels/ref/
// cross_entropy.cpp) with the three products done as GEMMs per chunk and the row softmax in
// parallel. Ignored rows get zero dlogits, so they add nothing to dx or dw. Row losses are summed
// in a fixed order after the parallel loop, so the result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/backward.h"
#include "kernels/cpu/gemm.h"

namespace lt::cpu {

float lm_head_loss(float* dx, float* dw, float* logits_chunk, const float* x, const float* w, const int* labels,
                   int T, int C, int V, int chunk, float loss_scale) {
  LT_ASSERT(chunk > 0);
  const int count = count_loss_labels(labels, T, V);
  if (count == 0) {
    if (dx) std::fill(dx, dx + size_t(T) * C, 0.0f);
    return 0.0f;
  }
  const bool want_grad = dx || dw;
  const float gscale = loss_scale / float(count);
  double loss_sum = 0.0;
  std::vector<double> row_loss(size_t(std::min(chunk, T)));
  for (int t0 = 0; t0 < T; t0 += chunk) {
    const int n = std::min(chunk, T - t0);
    gemm_f32(false, true, n, V, C, 1.0f, x + size_t(t0) * C, C, w, C, 0.0f, logits_chunk, V);  // (n, V)
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
      const int y = labels[t0 + r];
      float* lr = logits_chunk + size_t(r) * V;
      row_loss[r] = 0.0;
      if (y == kIgnoreLabel) {
        std::memset(lr, 0, size_t(V) * sizeof(float));
        continue;
      }
      float mx = lr[0];
      for (int v = 1; v < V; v++) mx = std::max(mx, lr[v]);
      double sum = 0.0;
      for (int v = 0; v < V; v++) sum += std::exp(double(lr[v]) - mx);
      const double lse = double(mx) + std::log(sum);
      row_loss[r] = lse - double(lr[y]);
      if (want_grad)
        for (int v = 0; v < V; v++) lr[v] = float((std::exp(double(lr[v]) - lse) - (v == y ? 1.0 : 0.0)) * gscale);
    }
    for (int r = 0; r < n; r++) loss_sum += row_loss[r];
    if (dx) gemm_f32(false, false, n, C, V, 1.0f, logits_chunk, V, w, C, 0.0f, dx + size_t(t0) * C, C);
    if (dw) gemm_f32(true, false, V, C, n, 1.0f, logits_chunk, V, x + size_t(t0) * C, C, 1.0f, dw, C);
  }
  return float(loss_sum / count);
}

}  // namespace lt::cpu
