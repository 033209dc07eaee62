// Scalar instantiation of train_kernels.inc (vector width 1): the fallback for CPUs without
// AVX2 and the LEANTUNE_ISA=scalar path. V is the same as in kernels_scalar.cpp.
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

namespace lt::cpu::scalar {
namespace {
#include "kernels/cpu/simd_vec_scalar.inc"
}  // namespace

#include "kernels/cpu/train_kernels.inc"

}  // namespace lt::cpu::scalar
