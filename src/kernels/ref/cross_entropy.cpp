// Reference fused lm_head + softmax + cross-entropy (DESIGN.md §5). The T rows of x are taken
// `chunk` at a time: logits (chunk, V) = x_chunk · wᵀ into the caller's scratch, the loss of each
// row from a max-subtracted log-sum-exp in double, then the scratch is overwritten in place by
// dlogits = (softmax - onehot(label)) * loss_scale / count, and dx_chunk = dlogits · w (written),
// dw += dlogitsᵀ · x_chunk. Peak logits memory is chunk*V floats instead of T*V.
// Rows whose label is kIgnoreLabel (-100) cost nothing and get zero gradient; count is the number
// of other rows, so the loss is the mean over real targets (PyTorch's reduction='mean').
// lm_head_loss_softcap: the same with each logit soft-capped (Gemma 2), z -> cap * tanh(z / cap).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/backward.h"

namespace lt {

int count_loss_labels(const int* labels, int T, int V) {
  int count = 0;
  for (int t = 0; t < T; t++) {
    int y = labels[t];
    if (y == kIgnoreLabel) continue;
    LT_CHECK(y >= 0 && y < V, "lm_head_loss: label {} of token {} is outside the vocabulary [0, {}) and is not "
             "the ignore value {}; check that the data was tokenized with this model's tokenizer",
             y, t, V, kIgnoreLabel);
    count++;
  }
  return count;
}

}  // namespace lt

namespace lt::ref {

namespace {
// The loss with logits soft-capped at cap (0: none): the one loop of both entries.
float lm_head_loss_capped(float* dx, float* dw, float* logits_chunk, const float* x, const float* w,
                          const int* labels, int T, int C, int V, int chunk, float loss_scale, float cap) {
  LT_ASSERT(chunk > 0);
  const int count = count_loss_labels(labels, T, V);
  if (count == 0) {
    if (dx) std::fill(dx, dx + (size_t)T * C, 0.0f);
    return 0.0f;
  }
  bool want_grad = dx || dw;
  float gscale = loss_scale / (float)count;  // d(loss_scale * sum / count) / d(row loss)
  double loss_sum = 0.0;
  for (int t0 = 0; t0 < T; t0 += chunk) {
    int n = std::min(chunk, T - t0);
    // logits, row loss, and dlogits in place
    for (int r = 0; r < n; r++) {
      int y = labels[t0 + r];
      if (y == kIgnoreLabel) continue;
      const float* xt = x + (size_t)(t0 + r) * C;  // (C)
      float* lr = logits_chunk + (size_t)r * V;    // (V)
      for (int vi = 0; vi < V; vi++) {
        const float* wv = w + (size_t)vi * C;  // (C)
        float s = 0.0f;
        for (int c = 0; c < C; c++) s += xt[c] * wv[c];
        lr[vi] = cap > 0 ? std::tanh(s / cap) * cap : s;
      }
      float mx = lr[0];
      for (int vi = 1; vi < V; vi++) mx = std::max(mx, lr[vi]);
      double sum = 0.0;
      for (int vi = 0; vi < V; vi++) sum += std::exp((double)lr[vi] - mx);
      double lse = (double)mx + std::log(sum);
      loss_sum += lse - (double)lr[y];
      if (want_grad) {
        for (int vi = 0; vi < V; vi++) {
          double p = std::exp((double)lr[vi] - lse);
          const float tc = cap > 0 ? lr[vi] / cap : 0.0f;  // d capped / d logit = 1 - tc²
          lr[vi] = (float)((p - (vi == y ? 1.0 : 0.0)) * gscale);
          if (cap > 0) lr[vi] *= 1.0f - tc * tc;
        }
      }
    }
    if (dx) {
      for (int r = 0; r < n; r++) {
        float* dxt = dx + (size_t)(t0 + r) * C;  // (C)
        std::fill(dxt, dxt + C, 0.0f);
        if (labels[t0 + r] == kIgnoreLabel) continue;
        const float* lr = logits_chunk + (size_t)r * V;
        for (int vi = 0; vi < V; vi++) {
          const float* wv = w + (size_t)vi * C;
          for (int c = 0; c < C; c++) dxt[c] += lr[vi] * wv[c];
        }
      }
    }
    if (dw) {
      for (int vi = 0; vi < V; vi++) {
        float* dwv = dw + (size_t)vi * C;  // (C)
        for (int r = 0; r < n; r++) {
          if (labels[t0 + r] == kIgnoreLabel) continue;
          float g = logits_chunk[(size_t)r * V + vi];
          const float* xt = x + (size_t)(t0 + r) * C;
          for (int c = 0; c < C; c++) dwv[c] += g * xt[c];
        }
      }
    }
  }
  return (float)(loss_sum / count);
}
}  // namespace

float lm_head_loss(float* dx, float* dw, float* logits_chunk, const float* x, const float* w, const int* labels,
                   int T, int C, int V, int chunk, float loss_scale) {
  return lm_head_loss_capped(dx, dw, logits_chunk, x, w, labels, T, C, V, chunk, loss_scale, 0.0f);
}

float lm_head_loss_softcap(float* dx, float* dw, float* logits_chunk, const float* x, const float* w,
                           const int* labels, int T, int C, int V, int chunk, float loss_scale, float cap) {
  LT_CHECK(cap > 0, "lm_head_loss_softcap: cap must be positive, got {}", cap);
  return lm_head_loss_capped(dx, dw, logits_chunk, x, w, labels, T, C, V, chunk, loss_scale, cap);
}

}  // namespace lt::ref
