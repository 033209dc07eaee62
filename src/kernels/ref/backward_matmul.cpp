// Reference linear-layer backward for out (T, OC) = x (T, IC) · w (OC, IC)ᵀ + b (OC):
// dx += dout·w, dw += doutᵀ·x, db += column sums of dout. Each gradient may be null (skipped),
// so a frozen layer asks only for dx and the first layer of a chain only for dw.
#include "kernels/backward.h"

namespace lt::ref {

void matmul_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w, int T,
                     int IC, int OC) {
  if (dx) {
    for (int t = 0; t < T; t++) {
      const float* dt = dout + (size_t)t * OC;  // (OC)
      float* dxt = dx + (size_t)t * IC;         // (IC)
      for (int i = 0; i < IC; i++) {
        float s = 0.0f;
        for (int o = 0; o < OC; o++) s += dt[o] * w[(size_t)o * IC + i];
        dxt[i] += s;
      }
    }
  }
  if (dw) {
    for (int o = 0; o < OC; o++) {
      float* dwo = dw + (size_t)o * IC;  // (IC)
      for (int i = 0; i < IC; i++) {
        float s = 0.0f;
        for (int t = 0; t < T; t++) s += dout[(size_t)t * OC + o] * x[(size_t)t * IC + i];
        dwo[i] += s;
      }
    }
  }
  if (db) {
    for (int o = 0; o < OC; o++) {
      float s = 0.0f;
      for (int t = 0; t < T; t++) s += dout[(size_t)t * OC + o];
      db[o] += s;
    }
  }
}

}  // namespace lt::ref
