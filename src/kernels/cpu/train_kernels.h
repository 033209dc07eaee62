// Internal to the CPU backend: the per-ISA training kernel sets behind train_ops_cpu() and the
// dispatch the tests use. train_ops_cpu() picks the table for cpu_isa() on every call (so
// LEANTUNE_ISA set before a call takes effect); train_ops_cpu_for(isa) returns one table directly
// and throws if this CPU lacks that ISA. Contracts: kernels/backward.h (ref/ is the oracle).
#pragma once
#include "core/cpu_features.h"
#include "kernels/backward.h"

namespace lt {

const TrainOps& train_ops_cpu_for(Isa isa);

namespace cpu {
// Each fills lm_head_loss and lm_head_loss_bf16 (with its row function), rmsnorm_backward,
// attention_train_forward, attention_backward and swiglu_backward with its ISA's kernels (train_kernels_{scalar,avx2,avx512}.cpp, all from train_kernels.inc).
namespace scalar { void fill_train_ops(TrainOps& ops); }
namespace avx2 { void fill_train_ops(TrainOps& ops); }
namespace avx512 { void fill_train_ops(TrainOps& ops); }

// The bf16 training attention on AVX512-BF16 (attention_bf16_{fwd,bwd}_avx512.cpp; contracts in
// backward.h); installed in the avx512 table only when the CPU has avx512_bf16.
namespace avx512 {
bool attention_train_forward_bf16(float* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                  const int* doc_start, int T, int NH, int NKV, int HS);
bool attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const uint16_t* q,
                             const uint16_t* k, const uint16_t* v, const uint16_t* out, const float* lse,
                             const int* doc_start, int T, int NH, int NKV, int HS, void* ds_rows, size_t ds_bytes);
}  // namespace avx512

// The same on AMX tiles (attention_bf16_{fwd,bwd}_amx.cpp); only where amx_bf16_kernels(). Head
// sizes not a multiple of 32 go to the AVX-512 kernels.
namespace amx {
bool attention_train_forward_bf16(float* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                  const int* doc_start, int T, int NH, int NKV, int HS);
bool attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const uint16_t* q,
                             const uint16_t* k, const uint16_t* v, const uint16_t* out, const float* lse,
                             const int* doc_start, int T, int NH, int NKV, int HS, void* ds_rows, size_t ds_bytes);
}  // namespace amx

// ISA-independent training kernels (train_common.cpp): scatter-adds, RoPE (cos/sin bound, kept
// bit-identical to ref), and the linear-layer backward as oneDNN GEMMs.
void embedding_backward(float* dtable, const float* dout, const int* tokens, int T, int C);
void rope_backward(float* dx, const int* pos, const float* inv_freq, int T, int NH, int HS, bool interleaved);
void rope_apply_backward(float* dx, const float* cos_sin, int T, int NH, int HS, bool interleaved);
void matmul_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w, int T,
                     int IC, int OC);
// Gemma's geglu / softcap / capped attention backward entries, every ISA (gemma_kernels.cpp).
void fill_gemma_train_ops(TrainOps& ops);
}  // namespace cpu

}  // namespace lt
