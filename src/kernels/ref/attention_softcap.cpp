// Reference attention with soft-capped scores (Gemma 2 attn_logit_softcapping): the scaled score
// s = q·k / sqrt(HS) becomes c = cap * tanh(s / cap) before the softmax. Three entries, each the
// uncapped reference's loop with that one step added: over a KV cache (inference, window and
// rolling cache as attention_forward), and the document-masked training forward and backward
// (the backward multiplies dS by dc/ds = 1 - (c / cap)²). Plain scalar loops: the specification.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/backward.h"
#include "kernels/ref/ref.h"

namespace lt::ref {

namespace {
float capped(float s, float cap) { return std::tanh(s / cap) * cap; }
}  // namespace

void attention_softcap_forward(float* out, float* lse, const float* q, const float* k, const float* v, int T,
                               int pos0, int NH, int NKV, int HS, int window, int ring, float cap) {
  LT_CHECK(window >= 0 && ring >= 0 && (ring == 0 || (window > 0 && ring >= window + T - 1)),
           "attention_softcap_forward: window {} and ring {} do not fit a block of {} queries", window, ring, T);
  LT_CHECK(cap > 0 && NKV > 0 && NH % NKV == 0, "attention_softcap_forward: cap {} NH {} NKV {}", cap, NH, NKV);
  const int group = NH / NKV;
  const float scale = 1.0f / std::sqrt((float)HS);
  std::vector<float> scores(size_t(pos0 + T));
  auto row = [&](int j) { return (size_t)(ring > 0 ? j % ring : j); };
  for (int h = 0; h < NH; h++) {
    const int hk = h / group;
    for (int t = 0; t < T; t++) {
      const float* qt = q + ((size_t)t * NH + h) * HS;
      const int n = pos0 + t + 1;
      const int j0 = window > 0 ? std::max(0, n - window) : 0;
      float mx = -INFINITY;
      for (int j = j0; j < n; j++) {
        const float* kj = k + (row(j) * NKV + hk) * HS;
        float s = 0.0f;
        for (int d = 0; d < HS; d++) s += qt[d] * kj[d];
        scores[j] = capped(s * scale, cap);
        mx = std::max(mx, scores[j]);
      }
      float sum = 0.0f;
      for (int j = j0; j < n; j++) {
        scores[j] = std::exp(scores[j] - mx);
        sum += scores[j];
      }
      float* ot = out + ((size_t)t * NH + h) * HS;
      for (int d = 0; d < HS; d++) ot[d] = 0.0f;
      for (int j = j0; j < n; j++) {
        const float* vj = v + (row(j) * NKV + hk) * HS;
        const float p = scores[j] / sum;
        for (int d = 0; d < HS; d++) ot[d] += p * vj[d];
      }
      if (lse) lse[(size_t)h * T + t] = mx + std::log(sum);
    }
  }
}

void attention_softcap_train_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                     const int* doc_start, int T, int NH, int NKV, int HS, float cap) {
  LT_ASSERT(NKV > 0 && NH % NKV == 0 && cap > 0);
  const int group = NH / NKV;
  const float scale = 1.0f / std::sqrt((float)HS);
  std::vector<float> acc(static_cast<size_t>(HS));
  for (int t = 0; t < T; t++) {
    const int j0 = doc_start[t];
    LT_ASSERT(0 <= j0 && j0 <= t);
    for (int h = 0; h < NH; h++) {
      const int hk = h / group;
      const float* qt = q + ((size_t)t * NH + h) * HS;
      float m = -INFINITY, l = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int j = j0; j <= t; j++) {
        const float* kj = k + ((size_t)j * NKV + hk) * HS;
        const float* vj = v + ((size_t)j * NKV + hk) * HS;
        float s = 0.0f;
        for (int d = 0; d < HS; d++) s += qt[d] * kj[d];
        s = capped(s * scale, cap);
        if (s > m) {  // online softmax: rescale what was summed under the old max
          const float corr = std::exp(m - s);
          l *= corr;
          for (int d = 0; d < HS; d++) acc[size_t(d)] *= corr;
          m = s;
        }
        const float p = std::exp(s - m);
        l += p;
        for (int d = 0; d < HS; d++) acc[size_t(d)] += p * vj[d];
      }
      float* ot = out + ((size_t)t * NH + h) * HS;
      for (int d = 0; d < HS; d++) ot[d] = acc[size_t(d)] / l;
      if (lse) lse[(size_t)h * T + t] = m + std::log(l);
    }
  }
}

void attention_softcap_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                                const float* v, const float* out, const float* lse, const int* doc_start, int T,
                                int NH, int NKV, int HS, float cap) {
  LT_ASSERT(NKV > 0 && NH % NKV == 0 && cap > 0);
  const int group = NH / NKV;
  const float scale = 1.0f / std::sqrt((float)HS);
  for (int t = 0; t < T; t++) {
    const int j0 = doc_start[t];
    for (int h = 0; h < NH; h++) {
      const int hk = h / group;
      const size_t qo = ((size_t)t * NH + h) * HS;
      const float *qt = q + qo, *dt = dout + qo, *ot = out + qo;
      float* dqt = dq + qo;
      float D = 0.0f;
      for (int d = 0; d < HS; d++) D += dt[d] * ot[d];
      const float lse_t = lse[(size_t)h * T + t];
      for (int j = j0; j <= t; j++) {
        const size_t ko = ((size_t)j * NKV + hk) * HS;
        const float *kj = k + ko, *vj = v + ko;
        float s = 0.0f, dp = 0.0f;
        for (int d = 0; d < HS; d++) {
          s += qt[d] * kj[d];
          dp += dt[d] * vj[d];
        }
        const float c = capped(s * scale, cap), tc = c / cap;
        const float p = std::exp(c - lse_t);
        const float ds = p * (dp - D) * (1.0f - tc * tc) * scale;  // gradient wrt the unscaled q·k
        for (int d = 0; d < HS; d++) {
          dv[ko + d] += p * dt[d];
          dqt[d] += ds * kj[d];
          dk[ko + d] += ds * qt[d];
        }
      }
    }
  }
}

}  // namespace lt::ref
