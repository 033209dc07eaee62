// Reference RMSNorm, in f32 in the order Hugging Face's LlamaRMSNorm uses:
// var = mean(x^2); rstd = 1/sqrt(var + eps); out = w * (x * rstd).
#include <cmath>

#include "kernels/ref/ref.h"

namespace lt::ref {

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int T, int C, float eps) {
  for (int t = 0; t < T; t++) {
    const float* xt = x + (size_t)t * C;   // (C)
    float* ot = out + (size_t)t * C;       // (C)
    float ss = 0.0f;
    for (int c = 0; c < C; c++) ss += xt[c] * xt[c];
    float r = 1.0f / std::sqrt(ss / (float)C + eps);
    for (int c = 0; c < C; c++) ot[c] = w[c] * (xt[c] * r);
    if (rstd) rstd[t] = r;
  }
}

}  // namespace lt::ref
