// Reference embedding backward: dtable (V, C) += dout (T, C) scattered into rows tokens[t].
#include "kernels/backward.h"

namespace lt::ref {

void embedding_backward(float* dtable, const float* dout, const int* tokens, int T, int C) {
  for (int t = 0; t < T; t++) {
    float* row = dtable + (size_t)tokens[t] * C;  // (C)
    const float* dt = dout + (size_t)t * C;       // (C)
    for (int c = 0; c < C; c++) row[c] += dt[c];
  }
}

}  // namespace lt::ref
