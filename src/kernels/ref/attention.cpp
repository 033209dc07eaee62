// Reference causal attention with GQA over a KV cache, with an optional sliding window and
// rolling cache (see ops.h for the contract). Plain softmax over a per-query score vector
// (allocated per call: this is the spec, not fast).
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/ref/ref.h"

namespace lt::ref {

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int T, int pos0,
                       int NH, int NKV, int HS, int window, int ring) {
  LT_CHECK(window >= 0 && ring >= 0 && (ring == 0 || (window > 0 && ring >= window + T - 1)),
           "attention_forward: window {} and ring {} do not fit a block of {} queries", window, ring, T);
  int group = NH / NKV;             // query heads per KV head
  float scale = 1.0f / std::sqrt((float)HS);
  std::vector<float> scores(pos0 + T);  // (P)
  auto row = [&](int j) { return (size_t)(ring > 0 ? j % ring : j); };  // the cache row of position j
  for (int h = 0; h < NH; h++) {
    int hk = h / group;
    for (int t = 0; t < T; t++) {
      const float* qt = q + ((size_t)t * NH + h) * HS;  // (HS)
      int n = pos0 + t + 1;                               // keys j0..pos0+t
      int j0 = window > 0 ? std::max(0, n - window) : 0;
      float mx = -INFINITY;
      for (int j = j0; j < n; j++) {
        const float* kj = k + (row(j) * NKV + hk) * HS;
        float s = 0.0f;
        for (int d = 0; d < HS; d++) s += qt[d] * kj[d];
        scores[j] = s * scale;
        if (scores[j] > mx) mx = scores[j];
      }
      float sum = 0.0f;
      for (int j = j0; j < n; j++) {
        scores[j] = std::exp(scores[j] - mx);
        sum += scores[j];
      }
      float* ot = out + ((size_t)t * NH + h) * HS;  // (HS)
      for (int d = 0; d < HS; d++) ot[d] = 0.0f;
      for (int j = j0; j < n; j++) {
        const float* vj = v + (row(j) * NKV + hk) * HS;
        float p = scores[j] / sum;
        for (int d = 0; d < HS; d++) ot[d] += p * vj[d];
      }
      if (lse) lse[(size_t)h * T + t] = mx + std::log(sum);
    }
  }
}

void attention_forward_kv16(float* out, const float* q, const uint16_t* k, const uint16_t* v, int T, int pos0, int NH,
                            int NKV, int HS, int window, int ring) {
  const size_t n = size_t(ring > 0 ? ring : pos0 + T) * NKV * HS;  // the cache rows attention may read
  std::vector<float> kf(n), vf(n);
  for (size_t i = 0; i < n; ++i) kf[i] = bf16_to_f32(k[i]), vf[i] = bf16_to_f32(v[i]);
  attention_forward(out, nullptr, q, kf.data(), vf.data(), T, pos0, NH, NKV, HS, window, ring);
}

}  // namespace lt::ref
