// Reference SwiGLU: out (T, F) = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
#include <cmath>

#include "kernels/ref/ref.h"

namespace lt::ref {

void swiglu_forward(float* out, const float* gate, const float* up, int T, int F) {
  size_t n = (size_t)T * F;
  for (size_t i = 0; i < n; i++) {
    float g = gate[i];
    float s = g / (1.0f + std::exp(-g));
    out[i] = s * up[i];
  }
}

}  // namespace lt::ref
