// Reference linear layer: out (T, OC) = x (T, IC) · w (OC, IC)ᵀ + bias (OC, may be null).
#include "kernels/ref/ref.h"

namespace lt::ref {

void matmul_forward(float* out, const float* x, const float* w, const float* bias, int T, int IC, int OC) {
  for (int t = 0; t < T; t++) {
    const float* xt = x + (size_t)t * IC;  // (IC)
    for (int o = 0; o < OC; o++) {
      const float* wo = w + (size_t)o * IC;  // (IC)
      float s = bias ? bias[o] : 0.0f;
      for (int i = 0; i < IC; i++) s += xt[i] * wo[i];
      out[(size_t)t * OC + o] = s;
    }
  }
}

}  // namespace lt::ref
