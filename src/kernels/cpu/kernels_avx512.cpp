// AVX-512 instantiation of simd_kernels.inc (16 floats per vector, masked tails). Compiled with
// the AVX-512 flags by CMake (file name suffix); called only when cpu_isa() == Avx512.
// GCC 12 warns about _mm512_undefined_ps() inside its own intrinsics (reduce, masked ops): false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <omp.h>

#include <cmath>
#include <type_traits>

#include "core/error.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_kernels.h"

namespace lt::cpu::avx512 {
namespace {
#include "kernels/cpu/simd_vec_avx512.inc"
}  // namespace

constexpr Isa kIsa = Isa::Avx512;  // for the linear op
#include "kernels/cpu/simd_kernels.inc"

namespace {
#include "kernels/cpu/bf16_round_avx512.inc"
}  // namespace

// gemm.h's GluEpilogue for the SwiGLU: per row, g and u rounded as convert.h rounds them and
// silu_mul on their values (swiglu_forward_half's bits for each element)
void swiglu_glu_block(const GluOutputs& o, int m0, int rows, int f0, const float* c, int ldc) {
  alignas(64) float g[16], u[16], h[16];
  for (int i = 0; i < rows; ++i) {
    const float* ci = c + size_t(i) * ldc;
    const size_t at = size_t(m0 + i) * o.F + f0;
    const __m256i g16 = bf16_round_fast(_mm512_loadu_ps(ci)), u16 = bf16_round_fast(_mm512_loadu_ps(ci + 16));
    _mm512_store_ps(g, bf16_widen(g16));
    _mm512_store_ps(u, bf16_widen(u16));
    if (o.gate16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.gate16 + at), g16);
    if (o.up16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.up16 + at), u16);
    if (o.gate) _mm512_storeu_ps(o.gate + at, _mm512_load_ps(g));
    if (o.up) _mm512_storeu_ps(o.up + at, _mm512_load_ps(u));
    V::store(h, silu_mul(V::load(g), V::load(u)));
    const __m256i h16 = bf16_round_fast(_mm512_load_ps(h));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.h16 + at), h16);
    if (o.h) _mm512_storeu_ps(o.h + at, bf16_widen(h16));
  }
}

}  // namespace lt::cpu::avx512
