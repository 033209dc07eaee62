// Linear layers against quantized frozen weights, without materializing the dequantized matrix:
// W (OC, IC) is dequantized kQuantTileRows rows at a time into a workspace tile and multiplied with
// the f32 GEMM (kernels/cpu/gemm.h). The tile dequantization has a scalar reference and AVX2 /
// AVX-512 versions, picked at run time from cpu_isa() (LEANTUNE_ISA caps it); all give the same
// bits. Int8 weights run the LLM.int8 product (int8.h) in the forward pass.
// Nothing allocates inside a call: the caller passes quant_workspace_bytes(...) bytes, 64-byte aligned.
// gemm_f32 runs its own OpenMP team: never call these inside a parallel region.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/cpu_features.h"
#include "quant/quant_tensor.h"

namespace lt {

constexpr int64_t kQuantTileRows = 128;  // weight rows per dequantized tile

// Workspace bytes of quant_linear_forward / quant_linear_backward_input for T tokens.
size_t quant_workspace_bytes(const QuantSpec& spec, int T, int IC, int OC);

// Floats of scale scratch dequantize_rows needs for `nrows` rows of w (0 unless double quant).
size_t dequantize_rows_scratch_floats(const QuantTensor& w, int64_t nrows);
// out (nrows, cols) = rows [row0, row0 + nrows) of w in f32, with the kernels of `isa` (must be
// usable here). scale_scratch holds dequantize_rows_scratch_floats(w, nrows) floats.
void dequantize_rows(float* out, const QuantTensor& w, int64_t row0, int64_t nrows, float* scale_scratch, Isa isa);

// y (T, OC) = x (T, IC) · Wᵀ. int8_threshold: LLM.int8 outlier threshold (Int8 weights only;
// 0 disables outliers).
void quant_linear_forward(float* y, const float* x, const QuantTensor& w, int T, void* workspace,
                          size_t workspace_bytes, float int8_threshold = 6.0f);

// dx (T, IC) = dy (T, OC) · W, plus beta * dx (beta = 1 accumulates into dx).
void quant_linear_backward_input(float* dx, const float* dy, const QuantTensor& w, int T, void* workspace,
                                 size_t workspace_bytes, float beta = 0.0f);

}  // namespace lt
