// CPU entries for Gemma's ops: GeGLU forward / backward and logit soft-capping, the reference's
// per-element formulas (kernels/ref/geglu.cpp, softcap.cpp) over threads, element for element the
// same results. The soft-capped attention runs the reference kernels (no fused fast path yet:
// Gemma 2's capped layers are slower than the others on CPU). The soft-capped loss is in
// cross_entropy.cpp with the other loss.
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/train_kernels.h"
#include "kernels/ref/ref.h"

namespace lt::cpu {

namespace {
constexpr size_t kParallelMin = 1 << 14;  // elements below which one thread does it all
}  // namespace

void geglu_forward(float* out, const float* gate, const float* up, int T, int F) {
  const long n = long(T) * F;
#pragma omp parallel for schedule(static) if (n >= long(kParallelMin))
  for (long i = 0; i < n; i++) out[i] = ref::gelu_tanh(gate[i]) * up[i];
}

void geglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int T, int F) {
  const long n = long(T) * F;
#pragma omp parallel for schedule(static) if (n >= long(kParallelMin))
  for (long i = 0; i < n; i++) {
    const float g = gate[i], d = dout[i];
    dgate[i] = d * up[i] * ref::gelu_tanh_grad(g);
    dup[i] = d * ref::gelu_tanh(g);
  }
}

void softcap_forward(float* x, size_t n, float cap) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (long i = 0; i < long(n); i++) ref::softcap_forward(x + i, 1, cap);
}

void softcap_backward(float* dx, const float* y, size_t n, float cap) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (long i = 0; i < long(n); i++) ref::softcap_backward(dx + i, y + i, 1, cap);
}

void fill_gemma_ops(Ops& ops) {
  ops.geglu_forward = geglu_forward;
  ops.softcap_forward = softcap_forward;
  ops.attention_softcap_forward = ref::attention_softcap_forward;
}

void fill_gemma_train_ops(TrainOps& ops) {
  ops.geglu_backward = geglu_backward;
  ops.softcap_backward = softcap_backward;
  ops.attention_softcap_train_forward = ref::attention_softcap_train_forward;
  ops.attention_softcap_backward = ref::attention_softcap_backward;
  ops.lm_head_loss_softcap = lm_head_loss_softcap;
}

}  // namespace lt::cpu
