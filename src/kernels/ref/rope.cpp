// Reference rotary position embedding, in place on x (T, NH, HS).
// Angle of pair i at position p: float(p) * inv_freq[i], in f32, then cosf / sinf (as HF does).
// Halves layout (HF): pair (i, i + HS/2). Interleaved layout (llama2.c / Meta): pair (2i, 2i+1).
// rope_table / rope_apply: the same in two steps, the angles' cos / sin kept in a (2, T, HS/2) table.
#include <cmath>

#include "kernels/ref/ref.h"

namespace lt::ref {

void rope_forward(float* x, const int* pos, const float* inv_freq, int T, int NH, int HS, bool interleaved) {
  int half = HS / 2;
  for (int t = 0; t < T; t++) {
    for (int h = 0; h < NH; h++) {
      float* xh = x + ((size_t)t * NH + h) * HS;  // (HS)
      for (int i = 0; i < half; i++) {
        float angle = (float)pos[t] * inv_freq[i];
        float c = std::cos(angle), s = std::sin(angle);
        int i0 = interleaved ? 2 * i : i;
        int i1 = interleaved ? 2 * i + 1 : i + half;
        float x0 = xh[i0], x1 = xh[i1];
        xh[i0] = x0 * c - x1 * s;
        xh[i1] = x1 * c + x0 * s;
      }
    }
  }
}

void rope_table(float* cos_sin, const int* pos, const float* inv_freq, int T, int HS) {
  const int half = HS / 2;
  float* sn = cos_sin + (size_t)T * half;
  for (int t = 0; t < T; t++)
    for (int i = 0; i < half; i++) {
      float angle = (float)pos[t] * inv_freq[i];
      cos_sin[(size_t)t * half + i] = std::cos(angle);
      sn[(size_t)t * half + i] = std::sin(angle);
    }
}

void rope_apply(float* x, const float* cos_sin, int T, int NH, int HS, bool interleaved) {
  const int half = HS / 2;
  for (int t = 0; t < T; t++) {
    const float* cs = cos_sin + (size_t)t * half;
    const float* sn = cos_sin + ((size_t)T + t) * half;
    for (int h = 0; h < NH; h++) {
      float* xh = x + ((size_t)t * NH + h) * HS;  // (HS)
      for (int i = 0; i < half; i++) {
        int i0 = interleaved ? 2 * i : i;
        int i1 = interleaved ? 2 * i + 1 : i + half;
        float x0 = xh[i0], x1 = xh[i1];
        xh[i0] = x0 * cs[i] - x1 * sn[i];
        xh[i1] = x1 * cs[i] + x0 * sn[i];
      }
    }
  }
}

}  // namespace lt::ref
