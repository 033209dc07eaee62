// Reference training attention with document masking (packed sequences), forward and backward.
// Query t of head h attends keys doc_start[t]..t of KV head h / (NH/NKV), scores scaled by
// 1/sqrt(HS). Forward: online softmax key by key (running max m, sum l, unnormalized output),
// so no T×T matrix exists; it saves lse = m + log(l) per (head, query). Backward (flash-attention-2):
// recompute p = exp(s - lse), D = rowsum(dout * out), dv += p*dout, ds = p*(dout·v - D),
// dq += ds*scale*k, dk += ds*scale*q. GQA: the query heads of a group accumulate into one dk/dv.
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/backward.h"

namespace lt::ref {

void attention_train_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const int* doc_start, int T, int NH, int NKV, int HS) {
  LT_ASSERT(NKV > 0 && NH % NKV == 0);
  int group = NH / NKV;  // query heads per KV head
  float scale = 1.0f / std::sqrt((float)HS);
  std::vector<float> acc(HS);  // (HS) unnormalized output of one query
  for (int t = 0; t < T; t++) {
    int j0 = doc_start[t];
    LT_ASSERT(0 <= j0 && j0 <= t);
    for (int h = 0; h < NH; h++) {
      int hk = h / group;
      const float* qt = q + ((size_t)t * NH + h) * HS;  // (HS)
      float m = -INFINITY, l = 0.0f;
      for (int d = 0; d < HS; d++) acc[d] = 0.0f;
      for (int j = j0; j <= t; j++) {
        const float* kj = k + ((size_t)j * NKV + hk) * HS;  // (HS)
        const float* vj = v + ((size_t)j * NKV + hk) * HS;  // (HS)
        float s = 0.0f;
        for (int d = 0; d < HS; d++) s += qt[d] * kj[d];
        s *= scale;
        if (s > m) {  // new running max: rescale what was summed so far (exp(-inf) = 0 at the start)
          float corr = std::exp(m - s);
          l *= corr;
          for (int d = 0; d < HS; d++) acc[d] *= corr;
          m = s;
        }
        float p = std::exp(s - m);
        l += p;
        for (int d = 0; d < HS; d++) acc[d] += p * vj[d];
      }
      float* ot = out + ((size_t)t * NH + h) * HS;  // (HS)
      for (int d = 0; d < HS; d++) ot[d] = acc[d] / l;
      if (lse) lse[(size_t)h * T + t] = m + std::log(l);
    }
  }
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, const int* doc_start, int T, int NH,
                        int NKV, int HS, void* /*ds_rows*/, size_t /*ds_bytes*/) {
  LT_ASSERT(NKV > 0 && NH % NKV == 0);
  int group = NH / NKV;
  float scale = 1.0f / std::sqrt((float)HS);
  for (int t = 0; t < T; t++) {
    int j0 = doc_start[t];
    LT_ASSERT(0 <= j0 && j0 <= t);
    for (int h = 0; h < NH; h++) {
      int hk = h / group;
      size_t qo = ((size_t)t * NH + h) * HS;
      const float* qt = q + qo;     // (HS)
      const float* dt = dout + qo;  // (HS)
      const float* ot = out + qo;   // (HS)
      float* dqt = dq + qo;         // (HS)
      float D = 0.0f;  // rowsum(dout * out) = sum_j p_j * (dout · v_j)
      for (int d = 0; d < HS; d++) D += dt[d] * ot[d];
      float lse_t = lse[(size_t)h * T + t];
      for (int j = j0; j <= t; j++) {
        size_t ko = ((size_t)j * NKV + hk) * HS;
        const float* kj = k + ko;  // (HS)
        const float* vj = v + ko;  // (HS)
        float s = 0.0f, dp = 0.0f;
        for (int d = 0; d < HS; d++) {
          s += qt[d] * kj[d];
          dp += dt[d] * vj[d];
        }
        float p = std::exp(s * scale - lse_t);
        float ds = p * (dp - D) * scale;  // gradient wrt the unscaled score q·k
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
