// AVX2 + FMA instantiation of train_kernels.inc (8 floats per vector). Compiled with -mavx2
// -mfma by CMake (file name suffix); called only when cpu_isa() >= Avx2. V is the same as in
// kernels_avx2.cpp (a private copy: that one has internal linkage).
#include <immintrin.h>

#include <omp.h>

#include <cmath>

#include "core/error.h"
#include "kernels/backward.h"
#include "kernels/cpu/train_kernels.h"

namespace lt::cpu::avx2 {
namespace {

alignas(64) const int kMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

struct V {
  static constexpr int W = 8;
  __m256 v;
  static __m256i mask(int n) { return _mm256_loadu_si256((const __m256i*)(kMaskTable + 8 - n)); }
  static V zero() { return {_mm256_setzero_ps()}; }
  static V set1(float a) { return {_mm256_set1_ps(a)}; }
  static V load(const float* p) { return {_mm256_loadu_ps(p)}; }
  static V load_n(const float* p, int n) { return {_mm256_maskload_ps(p, mask(n))}; }  // zero-filled
  static void store(float* p, V a) { _mm256_storeu_ps(p, a.v); }
  static void store_n(float* p, V a, int n) { _mm256_maskstore_ps(p, mask(n), a.v); }
  static V fmadd(V a, V b, V c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
  static float reduce_add(V a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // Cephes expf: exp(x) = 2^n * e^r, |r| <= ln2/2, degree-6 polynomial; ~1 ulp over the clamp
  // range [-87.3, 88.0] (outside it the result saturates near 0 / 1.6e38 instead of 0 / inf).
  static V exp(V a) {
    __m256 x = _mm256_min_ps(_mm256_max_ps(a.v, _mm256_set1_ps(-87.3365447504f)), _mm256_set1_ps(88.0f));
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return {_mm256_mul_ps(p, _mm256_castsi256_ps(e))};
  }
};
inline V operator+(V a, V b) { return {_mm256_add_ps(a.v, b.v)}; }
inline V operator-(V a, V b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline V operator*(V a, V b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline V operator/(V a, V b) { return {_mm256_div_ps(a.v, b.v)}; }

}  // namespace

#include "kernels/cpu/train_kernels.inc"

}  // namespace lt::cpu::avx2
