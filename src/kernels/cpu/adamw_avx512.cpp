// AdamW's element update, 16 floats per vector, masked tail (adamw.h: the scalar loop's operations
// in its order; this file builds with -ffp-contract=off).
#include <immintrin.h>

#include "kernels/cpu/adamw.h"

namespace lt::cpu::avx512 {

void adamw_range(float* p, const float* g, float* m, float* v, size_t n, const AdamWScalars& s) {
  const __m512 decay = _mm512_set1_ps(s.decay_factor), omb1 = _mm512_set1_ps(s.one_minus_b1);
  const __m512 b2 = _mm512_set1_ps(s.beta2), omb2 = _mm512_set1_ps(s.one_minus_b2);
  const __m512 bc2 = _mm512_set1_ps(s.bc2_sqrt), eps = _mm512_set1_ps(s.eps), nss = _mm512_set1_ps(s.neg_step_size);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m512 pi = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + i), decay);
    const __m512 gi = _mm512_maskz_loadu_ps(k, g + i), m0 = _mm512_maskz_loadu_ps(k, m + i);
    const __m512 mi = _mm512_add_ps(m0, _mm512_mul_ps(omb1, _mm512_sub_ps(gi, m0)));
    const __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_maskz_loadu_ps(k, v + i)),
                                    _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2), eps);
    _mm512_mask_storeu_ps(p + i, k, _mm512_add_ps(pi, _mm512_div_ps(_mm512_mul_ps(nss, mi), denom)));
    _mm512_mask_storeu_ps(m + i, k, mi);
    _mm512_mask_storeu_ps(v + i, k, vi);
  }
}

}  // namespace lt::cpu::avx512
