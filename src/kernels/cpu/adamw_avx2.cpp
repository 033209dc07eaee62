// AdamW's element update, 8 floats per vector, the tail by the scalar loop (adamw.h: the scalar
// loop's operations in its order; this file builds with -ffp-contract=off).
#include <immintrin.h>

#include "kernels/cpu/adamw.h"

namespace lt::cpu::avx2 {

void adamw_range(float* p, const float* g, float* m, float* v, size_t n, const AdamWScalars& s) {
  const __m256 decay = _mm256_set1_ps(s.decay_factor), omb1 = _mm256_set1_ps(s.one_minus_b1);
  const __m256 b2 = _mm256_set1_ps(s.beta2), omb2 = _mm256_set1_ps(s.one_minus_b2);
  const __m256 bc2 = _mm256_set1_ps(s.bc2_sqrt), eps = _mm256_set1_ps(s.eps), nss = _mm256_set1_ps(s.neg_step_size);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 pi = _mm256_mul_ps(_mm256_loadu_ps(p + i), decay);
    const __m256 gi = _mm256_loadu_ps(g + i), m0 = _mm256_loadu_ps(m + i);
    const __m256 mi = _mm256_add_ps(m0, _mm256_mul_ps(omb1, _mm256_sub_ps(gi, m0)));
    const __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)), _mm256_mul_ps(_mm256_mul_ps(omb2, gi), gi));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
    _mm256_storeu_ps(p + i, _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(nss, mi), denom)));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
  }
  scalar::adamw_range(p + i, g + i, m + i, v + i, n - i, s);
}

}  // namespace lt::cpu::avx2
