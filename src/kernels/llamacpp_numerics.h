// llama.cpp's CPU arithmetic, op for op: what ggml-cpu computes for a Llama decoder with q8_0 / q4_0
// weights and an f32 KV cache (non-flash attention: llama-cpp-python's default), in the same order
// and with the same roundings, so that leantune's logits equal llama.cpp's bit for bit
// (InferenceOptions::llama_cpp_numerics). The orders are those of ggml-cpu's AVX-512 build (GCC,
// -march=native; llama-cpp-python 0.3.36), read from its source and its binary; each function names
// the ggml routine it follows. They are plain scalar loops, the same bits on every CPU, and slow
// beside the fast kernels: a mode for matching llama.cpp, not for speed.
// Layout: leantune's (q/k rows in Hugging Face order, rotated in halves). Where ggml's order depends
// on an element's place in its interleaved layout (RoPE pairs, the q·k dot) the index is mapped:
// ggml's element 2i + h of a head is leantune's element i + h·HS/2.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/linear.h"

namespace lt::llamacpp {

// ggml_compute_forward_rms_norm_f32, then mul: out = (x · scale) · w with
// scale = 1 / sqrtf(float(Σ double(x·x) / C) + eps), the sum sequential in double. out may be x.
void rmsnorm(float* out, const float* x, const float* w, int T, int C, float eps);

// ggml_rope (mode NORMAL, no scaling) in place on x (T, NH, HS): pair i's angle is pos·ts^i formed by
// repeated f32 products (ts = powf(base, -2/HS)), cosf / sinf of it, and the rotation fused as ggml's
// build vectorizes it: x0' = fma(x0, c, -(x1·s)), x1' = fma(x0, s, x1·c).
void rope(float* x, const int* pos, int T, int NH, int HS, float base);

// ggml_vec_swiglu_f32: out = g / (1 + ggml_v_expf(0 - g)) · u (n elements; out may be g).
void swiglu(float* out, const float* g, const float* u, size_t n);

// The q8_0 / q4_0 product (ggml_vec_dot_q8_0_q8_0 / q4_0_q8_0; tinyBLAS_Q0_AVX gives the same bits for
// T > 1): x's rows quantized as kernels/q8_0_act.h, then per output the blocks in order, eight lanes of
// exact four-code integer sums each fused into its lane's f32 accumulator with d = d_w · d_x, and
// ggml's hsum_float_8; + bias (ggml_add) when not null. xq (T·IC) and xd (T·IC/32) are scratch.
void block_linear(float* out, const float* x, const WeightView& w, const float* bias, int T, int8_t* xq, float* xd);

// Scratch floats per thread that attention() needs for a cache of P positions.
size_t attention_scratch_floats(int P, int HS);

// llama.cpp's non-flash attention over an f32 cache (rows = positions, as Ops::attention_forward):
// per query and head, kq = ggml_vec_dot_f32 over HS (ggml's element order), · 1/sqrtf(HS), masked
// causally; ggml_vec_soft_max_f32 (max, then ggml_v_expf over 16-cell chunks from cell 0, each
// chunk's 16-lane tree summed in double, · float(1/sum)); then each output element as
// tinyBLAS's f32 GEMM forms it when the batch has T >= 2 tokens (16 lanes over the cells), or as
// ggml_vec_dot_f32 does for T == 1 (4 × 16 lanes). HS a multiple of 64; scratch (scratch_floats)
// holds attention_scratch_floats(pos0 + T, HS) floats per thread, and no more threads run than it has
// room for.
void attention(float* out, const float* q, const float* k, const float* v, int T, int pos0, int NH, int NKV, int HS,
               float* scratch, size_t scratch_floats);

}  // namespace lt::llamacpp
