// LLM.int8 (Dettmers et al. 2022) as bitsandbytes computes it: int8 weights with one absmax per
// output row, activations quantized per row at run time, int32 accumulation, and outlier feature
// columns (any |x| >= threshold in that column) taken out of the int8 product and computed in f32
// against the matching dequantized weight columns.
//   quantize:   q = round_half_even(x * ((1/absmax) * 127)), absmax = max |row|
//   dequantize: w = (q * absmax) * (1/127)
//   product:    y[t,o] = Σ_c xq·wq * ((absmax_x[t] * absmax_w[o]) / 127²)  (+ outlier columns in f32)
// The int32 product runs on AVX512-VNNI when cpu_features() has it and cpu_isa() is Avx512,
// else on the scalar reference; both give identical bits.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/cpu_features.h"

namespace lt {

// Row-wise int8: q (rows, cols), row_absmax (rows). An all-zero row gets zero codes and absmax 0.
void quantize_int8_rows(int8_t* q, float* row_absmax, const float* w, int64_t rows, int64_t cols);
// out (rows, cols) = (q * row_absmax) * (1/127).
void dequantize_int8_rows(float* out, const int8_t* q, const float* row_absmax, int64_t rows, int64_t cols);

// Activations x (T, IC) for the LLM.int8 product: outlier columns (threshold > 0 and some
// |x[t,c]| >= threshold) are listed in outlier_cols (ascending, count returned) and get zero codes;
// each row's absmax covers the other columns only.
int quantize_int8_activations(int8_t* xq, float* x_absmax, int32_t* outlier_cols, const float* x, int T, int IC,
                              float threshold);

// y (T, OC) = int8 product of xq (T, IC) and wq (OC, IC), scaled (no outlier part).
// use_vnni needs int8_vnni_available(); false runs the scalar reference.
void int8_gemm_scaled(float* y, const int8_t* xq, const float* x_absmax, const int8_t* wq, const float* w_absmax,
                      int T, int IC, int OC, bool use_vnni);
bool int8_vnni_available();  // cpu_isa() == Avx512 and the CPU has AVX512-VNNI

// Workspace of int8_linear_forward for T tokens (the memory planner calls this).
size_t int8_linear_workspace_bytes(int T, int IC, int OC);

// The LLM.int8 linear layer: y (T, OC) = x (T, IC) · Wᵀ with W given as wq (OC, IC) + w_absmax (OC);
// threshold 0 disables outliers. Nothing is allocated: `workspace` holds
// int8_linear_workspace_bytes(T, IC, OC) bytes, 64-byte aligned. use_vnni as in int8_gemm_scaled.
void int8_linear_forward(float* y, const float* x, const int8_t* wq, const float* w_absmax, int T, int IC, int OC,
                         float threshold, void* workspace, size_t workspace_bytes, bool use_vnni);

}  // namespace lt
