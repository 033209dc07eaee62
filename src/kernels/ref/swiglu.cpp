// Reference SwiGLU: out (T, F) = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
#include <algorithm>
#include <cmath>
#include <vector>

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

// The unfused sequence (ops.h): the gate and up values rounded (or widened), the activation, h rounded.
void swiglu_forward_half(DType t, HalfInputs in, float* h, uint16_t* h16, float* gate, uint16_t* gate16, float* up,
                         uint16_t* up16, int T, int F) {
  const size_t n = (size_t)T * F;
  std::vector<float> g(n), u(n);
  if (in != HalfInputs::Widen) {
    round_half(t, gate16, g.data(), gate, n);
    round_half(t, up16, u.data(), up, n);
    if (in == HalfInputs::RoundInPlace) std::copy(g.begin(), g.end(), gate), std::copy(u.begin(), u.end(), up);
  } else {
    widen_half(t, g.data(), gate16, n);
    widen_half(t, u.data(), up16, n);
    if (gate) std::copy(g.begin(), g.end(), gate);
    if (up) std::copy(u.begin(), u.end(), up);
  }
  std::vector<float> own;
  if (!h) own.resize(n), h = own.data();
  swiglu_forward(h, g.data(), u.data(), T, F);
  round_half(t, h16, h, h, n);
}

}  // namespace lt::ref
