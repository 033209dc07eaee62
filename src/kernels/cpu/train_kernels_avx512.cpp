// AVX-512 instantiation of train_kernels.inc (16 floats per vector, masked tails). Compiled with
// the AVX-512 flags by CMake (file name suffix); called only when cpu_isa() == Avx512. V is the same
// as in kernels_avx512.cpp (a private copy: that one has internal linkage).
// GCC 12 warns about _mm512_undefined_ps() inside its own intrinsics (reduce, masked ops): false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/backward.h"
#include "kernels/cpu/attention_stored_ds.h"
#include "kernels/cpu/attention_workspace.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/train_kernels.h"

namespace lt::cpu::avx512 {
namespace {
#include "kernels/cpu/simd_vec_avx512.inc"
}  // namespace

#include "kernels/cpu/train_kernels.inc"

}  // namespace lt::cpu::avx512
