// AVX2 + FMA instantiation of simd_kernels.inc (8 floats per vector). Compiled with -mavx2 -mfma
// by CMake (file name suffix); called only when cpu_isa() >= Avx2.
#include <immintrin.h>

#include <omp.h>

#include <cmath>
#include <type_traits>

#include "core/error.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_kernels.h"

namespace lt::cpu::avx2 {
namespace {
#include "kernels/cpu/simd_vec_avx2.inc"
}  // namespace

constexpr Isa kIsa = Isa::Avx2;  // for the linear op
#include "kernels/cpu/simd_kernels.inc"

}  // namespace lt::cpu::avx2
