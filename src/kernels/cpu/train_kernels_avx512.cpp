// AVX-512 instantiation of train_kernels.inc (16 floats per vector, masked tails). Compiled with
// the AVX-512 flags by CMake (file name suffix); called only when cpu_isa() == Avx512. V is the same
// as in kernels_avx512.cpp (a private copy: that one has internal linkage).
// GCC 12 warns about _mm512_undefined_ps() inside its own intrinsics (reduce, masked ops): false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <omp.h>

#include <cmath>

#include "core/error.h"
#include "kernels/backward.h"
#include "kernels/cpu/train_kernels.h"

namespace lt::cpu::avx512 {
namespace {

struct V {
  static constexpr int W = 16;
  __m512 v;
  static __mmask16 mask(int n) { return (__mmask16)((1u << n) - 1); }
  static V zero() { return {_mm512_setzero_ps()}; }
  static V set1(float a) { return {_mm512_set1_ps(a)}; }
  static V load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static V load_n(const float* p, int n) { return {_mm512_maskz_loadu_ps(mask(n), p)}; }  // zero-filled
  static void store(float* p, V a) { _mm512_storeu_ps(p, a.v); }
  static void store_n(float* p, V a, int n) { _mm512_mask_storeu_ps(p, mask(n), a.v); }
  static V fmadd(V a, V b, V c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  static float reduce_add(V a) { return _mm512_reduce_add_ps(a.v); }
  // Cephes expf (see kernels_avx2.cpp); scalef applies 2^n without integer exponent tricks.
  static V exp(V a) {
    __m512 x = _mm512_min_ps(_mm512_max_ps(a.v, _mm512_set1_ps(-87.3365447504f)), _mm512_set1_ps(88.3762626647f));
    __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
    return {_mm512_scalef_ps(p, fx)};
  }
};
inline V operator+(V a, V b) { return {_mm512_add_ps(a.v, b.v)}; }
inline V operator-(V a, V b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline V operator*(V a, V b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline V operator/(V a, V b) { return {_mm512_div_ps(a.v, b.v)}; }

}  // namespace

#include "kernels/cpu/train_kernels.inc"

}  // namespace lt::cpu::avx512
