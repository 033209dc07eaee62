// Reference RMSNorm backward. Forward: n = x * rstd, out = w * n, rstd = 1/sqrt(mean(x^2) + eps).
// With g = dout * w: dx = rstd * (g - n * mean(g * n)) (the eps term is carried by the saved rstd),
// dw = sum over tokens of dout * n. Both accumulate; dw is skipped when null (frozen norm).
#include "kernels/backward.h"

namespace lt::ref {

void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int T, int C) {
  for (int t = 0; t < T; t++) {
    const float* xt = x + (size_t)t * C;     // (C)
    const float* dt = dout + (size_t)t * C;  // (C)
    float* dxt = dx + (size_t)t * C;         // (C)
    float r = rstd[t];
    float gn = 0.0f;  // sum_c g_c * n_c
    for (int c = 0; c < C; c++) gn += dt[c] * w[c] * (xt[c] * r);
    float mean_gn = gn / (float)C;
    for (int c = 0; c < C; c++) {
      float n = xt[c] * r;
      dxt[c] += r * (dt[c] * w[c] - n * mean_gn);
      if (dw) dw[c] += dt[c] * n;
    }
  }
}

}  // namespace lt::ref
