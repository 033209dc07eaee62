// ISA-independent CPU kernels: embedding (row copies) and RoPE. RoPE computes cos/sin once per
// (token, pair) into a stack array and applies them to every head with the same f32 expressions
// as ref, so results are bit-identical to ref/rope.cpp (this file is built without FMA).
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/kernels.h"

namespace lt::cpu {

void embedding_forward(float* out, const int* tokens, const float* table, int T, int C) {
#pragma omp parallel for schedule(static) if ((size_t)T * C >= (1 << 16))
  for (int t = 0; t < T; t++) {
    LT_ASSERT(tokens[t] >= 0);
    std::memcpy(out + (size_t)t * C, table + (size_t)tokens[t] * C, sizeof(float) * C);
  }
}

void rope_forward(float* x, const int* pos, const float* inv_freq, int T, int NH, int HS, bool interleaved) {
  constexpr int kMaxHalf = 512;
  int half = HS / 2;
  LT_CHECK(half <= kMaxHalf, "rope_forward: head size {} exceeds the supported {}", HS, 2 * kMaxHalf);
#pragma omp parallel for schedule(static) if ((size_t)T * NH * HS >= (1 << 14))
  for (int t = 0; t < T; t++) {
    float cs[kMaxHalf], sn[kMaxHalf];  // (HS/2) cos and sin of this token's angles
    for (int i = 0; i < half; i++) {
      float angle = (float)pos[t] * inv_freq[i];
      cs[i] = std::cos(angle);
      sn[i] = std::sin(angle);
    }
    for (int h = 0; h < NH; h++) {
      float* xh = x + ((size_t)t * NH + h) * HS;  // (HS)
      if (interleaved) {
        for (int i = 0; i < half; i++) {
          float x0 = xh[2 * i], x1 = xh[2 * i + 1];
          xh[2 * i] = x0 * cs[i] - x1 * sn[i];
          xh[2 * i + 1] = x1 * cs[i] + x0 * sn[i];
        }
      } else {
        float* lo = xh;
        float* hi = xh + half;
        for (int i = 0; i < half; i++) {
          float x0 = lo[i], x1 = hi[i];
          lo[i] = x0 * cs[i] - x1 * sn[i];
          hi[i] = x1 * cs[i] + x0 * sn[i];
        }
      }
    }
  }
}

}  // namespace lt::cpu
