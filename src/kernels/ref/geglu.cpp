// Reference GeGLU (Gemma's MLP): out = gelu_tanh(gate) * up, forward and backward.
// gelu_tanh(g) = 0.5 g (1 + tanh(u)), u = sqrt(2/pi) (g + 0.044715 g³), in f32 in PyTorch's order
// (its gelu(approximate="tanh")). d/dg = 0.5 (1 + tanh u) + 0.5 g (1 - tanh² u) sqrt(2/pi) (1 + 3·0.044715 g²).
#include <cmath>

#include "kernels/backward.h"
#include "kernels/ref/ref.h"

namespace lt::ref {

namespace {
constexpr float kBeta = float(M_SQRT2 * M_2_SQRTPI * 0.5);  // sqrt(2/pi)
constexpr float kKappa = 0.044715f;
}  // namespace

float gelu_tanh(float g) {
  const float inner = kBeta * (g + kKappa * (g * g * g));
  return 0.5f * g * (1.0f + std::tanh(inner));
}

float gelu_tanh_grad(float g) {
  const float th = std::tanh(kBeta * (g + kKappa * (g * g * g)));
  return 0.5f * (1.0f + th) + 0.5f * g * (1.0f - th * th) * kBeta * (1.0f + 3.0f * kKappa * g * g);
}

void geglu_forward(float* out, const float* gate, const float* up, int T, int F) {
  const size_t n = size_t(T) * size_t(F);
  for (size_t i = 0; i < n; i++) out[i] = gelu_tanh(gate[i]) * up[i];
}

// Both gradients are WRITTEN (gate and up are each one matmul's fresh output).
void geglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int T, int F) {
  const size_t n = size_t(T) * size_t(F);
  for (size_t i = 0; i < n; i++) {
    const float g = gate[i];
    dgate[i] = dout[i] * up[i] * gelu_tanh_grad(g);
    dup[i] = dout[i] * gelu_tanh(g);
  }
}

}  // namespace lt::ref
