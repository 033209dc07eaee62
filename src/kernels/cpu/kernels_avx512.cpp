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

}  // namespace lt::cpu::avx512
