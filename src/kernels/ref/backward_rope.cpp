// Reference RoPE backward, in place on dx (T, NH, HS). The forward rotates each pair by +angle:
// y0 = x0*c - x1*s, y1 = x1*c + x0*s; its transpose (= inverse) rotates by -angle:
// dx0 = dy0*c + dy1*s, dx1 = dy1*c - dy0*s. Angle and layouts exactly as rope_forward (ops.h):
// float(pos) * inv_freq[i] in f32; halves pairs (i, i + HS/2), interleaved pairs (2i, 2i+1).
// rope_apply_backward: the same with the cos / sin from rope_table's (2, T, HS/2) table.
#include <cmath>

#include "kernels/backward.h"

namespace lt::ref {

void rope_backward(float* dx, const int* pos, const float* inv_freq, int T, int NH, int HS, bool interleaved) {
  int half = HS / 2;
  for (int t = 0; t < T; t++) {
    for (int h = 0; h < NH; h++) {
      float* dh = dx + ((size_t)t * NH + h) * HS;  // (HS)
      for (int i = 0; i < half; i++) {
        float angle = (float)pos[t] * inv_freq[i];
        float c = std::cos(angle), s = std::sin(angle);
        int i0 = interleaved ? 2 * i : i;
        int i1 = interleaved ? 2 * i + 1 : i + half;
        float d0 = dh[i0], d1 = dh[i1];
        dh[i0] = d0 * c + d1 * s;
        dh[i1] = d1 * c - d0 * s;
      }
    }
  }
}

void rope_apply_backward(float* dx, const float* cos_sin, int T, int NH, int HS, bool interleaved) {
  const int half = HS / 2;
  for (int t = 0; t < T; t++) {
    const float* cs = cos_sin + (size_t)t * half;
    const float* sn = cos_sin + ((size_t)T + t) * half;
    for (int h = 0; h < NH; h++) {
      float* dh = dx + ((size_t)t * NH + h) * HS;  // (HS)
      for (int i = 0; i < half; i++) {
        int i0 = interleaved ? 2 * i : i;
        int i1 = interleaved ? 2 * i + 1 : i + half;
        float d0 = dh[i0], d1 = dh[i1];
        dh[i0] = d0 * cs[i] + d1 * sn[i];
        dh[i1] = d1 * cs[i] - d0 * sn[i];
      }
    }
  }
}

}  // namespace lt::ref
