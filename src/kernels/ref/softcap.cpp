// Reference logit soft-capping (Gemma 2): y = cap * tanh(x / cap), in PyTorch's order (divide,
// tanh, multiply), and its backward dx = dy * (1 - (y / cap)²).
#include <cmath>

#include "kernels/backward.h"
#include "kernels/ref/ref.h"

namespace lt::ref {

void softcap_forward(float* x, size_t n, float cap) {
  for (size_t i = 0; i < n; i++) x[i] = std::tanh(x[i] / cap) * cap;
}

void softcap_backward(float* dx, const float* y, size_t n, float cap) {
  for (size_t i = 0; i < n; i++) {
    const float t = y[i] / cap;
    dx[i] *= 1.0f - t * t;
  }
}

}  // namespace lt::ref
