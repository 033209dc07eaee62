// AVX2 + FMA instantiation of train_kernels.inc (8 floats per vector). Compiled with -mavx2
// -mfma by CMake (file name suffix); called only when cpu_isa() >= Avx2.
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

namespace lt::cpu::avx2 {
namespace {
#include "kernels/cpu/simd_vec_avx2.inc"
}  // namespace

#include "kernels/cpu/train_kernels.inc"

}  // namespace lt::cpu::avx2
