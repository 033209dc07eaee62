// Reference SwiGLU backward. Forward: out = silu(g) * up, silu(g) = g * sig(g), sig(g) = 1/(1+exp(-g)).
// dgate = dout * up * sig(g) * (1 + g * (1 - sig(g))), dup = dout * silu(g). Both are WRITTEN:
// gate and up are fresh activations of one matmul each, so nothing else contributes to them.
#include <cmath>

#include "core/dtype.h"
#include "kernels/backward.h"

namespace lt::ref {

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int T, int F) {
  size_t n = (size_t)T * F;
  for (size_t i = 0; i < n; i++) {
    float g = gate[i];
    float sig = 1.0f / (1.0f + std::exp(-g));
    float silu = g * sig;
    dgate[i] = dout[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
    dup[i] = dout[i] * silu;
  }
}

void swiglu_backward_bf16(float* dgate, float* dup, const float* dout, const uint16_t* gate16, const uint16_t* up16,
                          int T, int F) {
  const size_t n = (size_t)T * F;
  for (size_t i = 0; i < n; i++) {
    const float g = bf16_to_f32(gate16[i]), u = bf16_to_f32(up16[i]);
    swiglu_backward(dgate + i, dup + i, dout + i, &g, &u, 1, 1);
  }
}

}  // namespace lt::ref
