// ISA-independent CPU kernels: embedding (row copies) and RoPE. RoPE computes cos/sin once per
// (token, pair) into a stack array (rope_forward) or the caller's table (rope_table) and applies
// them to every head with the same f32 expressions as ref, so results are bit-identical to
// ref/rope.cpp (this file is built without FMA).
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

namespace {

// Token t's heads xt (NH, HS) rotated by its pairs' angles (cs, sn: HS/2 each), in place.
void rotate_heads(float* xt, const float* cs, const float* sn, int NH, int HS, bool interleaved) {
  const int half = HS / 2;
  for (int h = 0; h < NH; h++) {
    float* xh = xt + (size_t)h * HS;  // (HS)
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

// cos / sin of token t's angles (HS/2 pairs) into cs, sn
void token_angles(float* cs, float* sn, int pos, const float* inv_freq, int half) {
  for (int i = 0; i < half; i++) {
    float angle = (float)pos * inv_freq[i];
    cs[i] = std::cos(angle);
    sn[i] = std::sin(angle);
  }
}

}  // namespace

void rope_forward(float* x, const int* pos, const float* inv_freq, int T, int NH, int HS, bool interleaved) {
  constexpr int kMaxHalf = 512;
  int half = HS / 2;
  LT_CHECK(half <= kMaxHalf, "rope_forward: head size {} exceeds the supported {}", HS, 2 * kMaxHalf);
#pragma omp parallel for schedule(static) if ((size_t)T * NH * HS >= (1 << 14))
  for (int t = 0; t < T; t++) {
    float cs[kMaxHalf], sn[kMaxHalf];  // (HS/2) cos and sin of this token's angles
    token_angles(cs, sn, pos[t], inv_freq, half);
    rotate_heads(x + (size_t)t * NH * HS, cs, sn, NH, HS, interleaved);
  }
}

void rope_table(float* cos_sin, const int* pos, const float* inv_freq, int T, int HS) {
  const int half = HS / 2;
#pragma omp parallel for schedule(static) if ((size_t)T * half >= (1 << 12))
  for (int t = 0; t < T; t++)
    token_angles(cos_sin + (size_t)t * half, cos_sin + ((size_t)T + t) * half, pos[t], inv_freq, half);
}

void rope_apply(float* x, const float* cos_sin, int T, int NH, int HS, bool interleaved) {
  const int half = HS / 2;
#pragma omp parallel for schedule(static) if ((size_t)T * NH * HS >= (1 << 14))
  for (int t = 0; t < T; t++)
    rotate_heads(x + (size_t)t * NH * HS, cos_sin + (size_t)t * half, cos_sin + ((size_t)T + t) * half, NH, HS,
                 interleaved);
}

}  // namespace lt::cpu
