// The avx512 FMA loop behind peak_f32_gflops() (plan/peak.h).
#include <immintrin.h>

#include <chrono>

#include "plan/peak.h"

namespace lt::detail {

double fma_gflops_avx512(double seconds) {
  // twelve named accumulators so they live in registers: 12 independent FMA chains cover the
  // FMA latency on two pipes
  __m512 c0 = _mm512_set1_ps(0.f), c1 = _mm512_set1_ps(1e-3f), c2 = _mm512_set1_ps(2e-3f), c3 = _mm512_set1_ps(3e-3f), c4 = _mm512_set1_ps(4e-3f),
         c5 = _mm512_set1_ps(5e-3f), c6 = _mm512_set1_ps(6e-3f), c7 = _mm512_set1_ps(7e-3f), c8 = _mm512_set1_ps(8e-3f), c9 = _mm512_set1_ps(9e-3f),
         c10 = _mm512_set1_ps(1e-2f), c11 = _mm512_set1_ps(1.1e-2f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  long iters = 0;
  auto t0 = std::chrono::steady_clock::now();
  double s = 0;
  do {
    for (int r = 0; r < 4096; ++r) {
      c0 = _mm512_fmadd_ps(c0, a, b); c1 = _mm512_fmadd_ps(c1, a, b); c2 = _mm512_fmadd_ps(c2, a, b); c3 = _mm512_fmadd_ps(c3, a, b);
      c4 = _mm512_fmadd_ps(c4, a, b); c5 = _mm512_fmadd_ps(c5, a, b); c6 = _mm512_fmadd_ps(c6, a, b); c7 = _mm512_fmadd_ps(c7, a, b);
      c8 = _mm512_fmadd_ps(c8, a, b); c9 = _mm512_fmadd_ps(c9, a, b); c10 = _mm512_fmadd_ps(c10, a, b); c11 = _mm512_fmadd_ps(c11, a, b);
    }
    iters += 4096;
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (s < seconds);
  __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)), _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
  sum = _mm512_add_ps(sum, _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
  alignas(64) float tmp[16];
  _mm512_store_ps(tmp, sum);
  volatile float sink = tmp[0];
  (void)sink;
  return 2.0 * 16 * 12 * double(iters) / s / 1e9;
}

double bf16_gflops_avx512(double seconds) {
  // vdpbf16ps: 16 lanes x 2 bf16 products accumulated in f32 = 64 FLOPs per instruction. The twelve
  // accumulators start from different values: equal ones are one chain to the compiler, which then
  // issues a single latency-bound vdpbf16ps per row of twelve (that counted 12x the work done).
  __m512 c0 = _mm512_set1_ps(0.f), c1 = _mm512_set1_ps(1.f), c2 = _mm512_set1_ps(2.f), c3 = _mm512_set1_ps(3.f),
         c4 = _mm512_set1_ps(4.f), c5 = _mm512_set1_ps(5.f), c6 = _mm512_set1_ps(6.f), c7 = _mm512_set1_ps(7.f),
         c8 = _mm512_set1_ps(8.f), c9 = _mm512_set1_ps(9.f), c10 = _mm512_set1_ps(10.f), c11 = _mm512_set1_ps(11.f);
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);  // 1, ~6e-8
  long iters = 0;
  auto t0 = std::chrono::steady_clock::now();
  double s = 0;
  do {
    for (int r = 0; r < 4096; ++r) {
      c0 = _mm512_dpbf16_ps(c0, a, b); c1 = _mm512_dpbf16_ps(c1, a, b); c2 = _mm512_dpbf16_ps(c2, a, b);
      c3 = _mm512_dpbf16_ps(c3, a, b); c4 = _mm512_dpbf16_ps(c4, a, b); c5 = _mm512_dpbf16_ps(c5, a, b);
      c6 = _mm512_dpbf16_ps(c6, a, b); c7 = _mm512_dpbf16_ps(c7, a, b); c8 = _mm512_dpbf16_ps(c8, a, b);
      c9 = _mm512_dpbf16_ps(c9, a, b); c10 = _mm512_dpbf16_ps(c10, a, b); c11 = _mm512_dpbf16_ps(c11, a, b);
    }
    iters += 4096;
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (s < seconds);
  __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                             _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
  sum = _mm512_add_ps(sum, _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
  alignas(64) float tmp[16];
  _mm512_store_ps(tmp, sum);
  volatile float sink = tmp[0];
  (void)sink;
  return 64.0 * 12 * double(iters) / s / 1e9;
}

}  // namespace lt::detail
