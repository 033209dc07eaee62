// AdamW's element update: dispatch and the scalar loop (adamw.h).
#include "kernels/cpu/adamw.h"

#include <cmath>

#include "core/cpu_features.h"

namespace lt::cpu {

namespace scalar {
void adamw_range(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, size_t n,
                 const AdamWScalars& s) {
  for (size_t i = 0; i < n; i++) {
    const float pi = p[i] * s.decay_factor;
    const float gi = g[i];
    // torch: exp_avg.lerp_(grad, 1-β1) = m + (1-β1)·(g - m)
    const float mi = m[i] + s.one_minus_b1 * (gi - m[i]);
    // torch: exp_avg_sq.mul_(β2).addcmul_(grad, grad, value=1-β2)
    const float vi = s.beta2 * v[i] + s.one_minus_b2 * gi * gi;
    // torch: denom = (exp_avg_sq.sqrt() / sqrt(bc2)).add_(eps); param.addcdiv_(exp_avg, denom, value=-step_size)
    const float denom = std::sqrt(vi) / s.bc2_sqrt + s.eps;
    p[i] = pi + s.neg_step_size * mi / denom;
    m[i] = mi;
    v[i] = vi;
  }
}
}  // namespace scalar

void adamw_range(float* p, const float* g, float* m, float* v, size_t n, const AdamWScalars& s) {
  switch (cpu_isa()) {
    case Isa::Avx512: return avx512::adamw_range(p, g, m, v, n, s);
    case Isa::Avx2: return avx2::adamw_range(p, g, m, v, n, s);
    case Isa::Scalar: break;
  }
  scalar::adamw_range(p, g, m, v, n, s);
}

}  // namespace lt::cpu
