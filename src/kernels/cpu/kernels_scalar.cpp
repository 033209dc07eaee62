// Scalar instantiation of simd_kernels.inc (vector width 1): the fallback for CPUs without AVX2,
// and the LEANTUNE_ISA=scalar path. Uses std::exp, so it matches ref's exp exactly.
#include <omp.h>

#include <cmath>
#include <type_traits>

#include "core/error.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_kernels.h"

namespace lt::cpu::scalar {
namespace {
#include "kernels/cpu/simd_vec_scalar.inc"
}  // namespace

constexpr Isa kIsa = Isa::Scalar;  // for the linear op
#include "kernels/cpu/simd_kernels.inc"

}  // namespace lt::cpu::scalar
