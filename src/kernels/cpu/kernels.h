// Internal to the CPU backend: the per-ISA kernel sets and the dispatch tests use.
// ops_cpu() picks the table for cpu_isa() on every call (so LEANTUNE_ISA set before a call takes
// effect); ops_cpu_for(isa) returns one table directly and throws if this CPU lacks that ISA.
#pragma once
#include "core/cpu_features.h"
#include "kernels/ops.h"

namespace lt {

const Ops& ops_cpu_for(Isa isa);
bool cpu_supports(Isa isa);  // hardware support, ignoring the LEANTUNE_ISA cap

namespace cpu {
// Each fills rmsnorm, attention, swiglu, matmul and add_inplace with its ISA's kernels
// (kernels_scalar.cpp, kernels_avx2.cpp, kernels_avx512.cpp; all from simd_kernels.inc).
namespace scalar { void fill_ops(Ops& ops); }
namespace avx2 { void fill_ops(Ops& ops); }
namespace avx512 { void fill_ops(Ops& ops); }

// ISA-independent kernels (kernels_common.cpp): memory-bound or dominated by cos/sin, and kept
// bit-identical to ref by using the same f32 formulas.
void embedding_forward(float* out, const int* tokens, const float* table, int T, int C);
void rope_forward(float* x, const int* pos, const float* inv_freq, int T, int NH, int HS, bool interleaved);
void rope_table(float* cos_sin, const int* pos, const float* inv_freq, int T, int HS);
void rope_apply(float* x, const float* cos_sin, int T, int NH, int HS, bool interleaved);
// Gemma's geglu / softcap / capped attention entries, the same for every ISA (gemma_kernels.cpp).
void fill_gemma_ops(Ops& ops);
// Ops::gate_up_swiglu (linear.cpp): gemm_bf16_glu with the AVX-512 SwiGLU epilogue
bool gate_up_swiglu(const GluOutputs& o, float* xa_gate, float* xa_up, const LinearInput& in,
                    const LinearWeights& gate, const LinearWeights& up, const LinearScratch& s);
}  // namespace cpu

}  // namespace lt
