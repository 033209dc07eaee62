// Reference embedding lookup: out (T, C) = table (V, C) [tokens[t]].
#include "kernels/ref/ref.h"

namespace lt::ref {

void embedding_forward(float* out, const int* tokens, const float* table, int T, int C) {
  for (int t = 0; t < T; t++) {
    const float* row = table + (size_t)tokens[t] * C;
    for (int c = 0; c < C; c++) out[(size_t)t * C + c] = row[c];
  }
}

}  // namespace lt::ref
