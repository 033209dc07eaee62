// The scalar reference kernels (namespace lt::ref), one file per op family. Plain loops that read
// like the formulas in ops.h; they are the specification every fast backend is tested against.
// Use them through ops_ref(); this header exists so tests can call one directly.
#pragma once
#include <cstddef>

#include "core/dtype.h"
#include "kernels/linear.h"
#include "kernels/ops.h"

namespace lt::ref {

void embedding_forward(float* out, const int* tokens, const float* table, int T, int C);
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int T, int C, float eps);
void rope_forward(float* x, const int* pos, const float* inv_freq, int T, int NH, int HS, bool interleaved);
void rope_table(float* cos_sin, const int* pos, const float* inv_freq, int T, int HS);
void rope_apply(float* x, const float* cos_sin, int T, int NH, int HS, bool interleaved);
// k, v bf16: the rows attention reads widened into f32 copies, then attention_forward
void attention_forward_kv16(float* out, const float* q, const uint16_t* k, const uint16_t* v, int T, int pos0, int NH,
                            int NKV, int HS, int window, int ring);
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int T, int pos0,
                       int NH, int NKV, int HS, int window, int ring);
void swiglu_forward(float* out, const float* gate, const float* up, int T, int F);
void swiglu_forward_half(DType t, HalfInputs in, float* h, uint16_t* h16, float* gate, uint16_t* gate16, float* up,
                         uint16_t* up16, int T, int F);
void matmul_forward(float* out, const float* x, const float* w, const float* bias, int T, int IC, int OC);
void add_inplace(float* x, const float* y, size_t n);
void round_half(DType t, uint16_t* dst16, float* dst32, const float* src, size_t n);
void widen_half(DType t, float* dst, const uint16_t* src, size_t n);
void linear_forward(float* out, float* xa, const LinearInput& in, const LinearWeights& w, const LinearScratch& s);
void geglu_forward(float* out, const float* gate, const float* up, int T, int F);
void softcap_forward(float* x, size_t n, float cap);
void attention_softcap_forward(float* out, float* lse, const float* q, const float* k, const float* v, int T,
                               int pos0, int NH, int NKV, int HS, int window, int ring, float cap);
// gelu with the tanh approximation, in f32 as PyTorch's gelu(approximate="tanh"), and its derivative.
float gelu_tanh(float g);
float gelu_tanh_grad(float g);
// Element (r, c) of w decoded to f32 (kernels/linear.h's table): the reference decoding.
float weight_at(const WeightView& w, int64_t r, int64_t c);

}  // namespace lt::ref
