// Internal to the CPU backend: the per-ISA inner loops that decode quantized weight rows and the
// LLM.int8 integer product (behind quant_linear.cpp and int8_linear.cpp). dequant_scalar.cpp is
// the reference; the dequant_avx2.cpp / dequant_avx512.cpp versions must produce identical bits
// (they only reorder independent element-wise products, never sums). Formats: kernels/linear.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include "kernels/carve.h"

namespace lt::cpu::dequant {

// out[i] = table16[code of flat element f0+i] * scales[block(f0+i) - b_first] for i < n; codes
// packed two per byte, even flat index in the high nibble.
using Dequant4Fn = void (*)(float* out, const uint8_t* codes, int64_t f0, int64_t n, const float* scales,
                            int64_t b_first, int blocksize, const float* table16);
// out (rows, cols) = (float(q) * row_absmax[r]) * kInt8Inv127, as bitsandbytes' int8_vectorwise_dequant.
using Dequant8Fn = void (*)(float* out, const int8_t* q, const float* row_absmax, int64_t rows, int64_t cols);
// out[32·b + j] = float(code j of block b) * (block b's f16 scale) for b < nblocks: consecutive
// llama.cpp q8_0 (q4 false) or q4_0 blocks (kernels/ggml_blocks.h), one f32 multiply per element.
using DequantGgmlFn = void (*)(float* out, const uint8_t* blocks, int64_t nblocks, bool q4);

namespace scalar {
void dequant4(float* out, const uint8_t* codes, int64_t f0, int64_t n, const float* scales, int64_t b_first,
              int blocksize, const float* table16);
void dequant8(float* out, const int8_t* q, const float* row_absmax, int64_t rows, int64_t cols);
void dequant_ggml(float* out, const uint8_t* blocks, int64_t nblocks, bool q4);
// y (T, OC) = float(Σ_c xq[t,c]·wq[o,c]) * ((x_absmax[t] * w_absmax[o]) * kInt8Inv127Sq), int32 accumulation.
void int8_gemm(float* y, const int8_t* xq, const float* x_absmax, const int8_t* wq, const float* w_absmax, int T,
               int IC, int OC);
}  // namespace scalar
namespace avx2 {
// scalar::int8_gemm's bits (exact int32 sums) with vpmaddubsw: |w| (u8) times x carrying w's sign
void int8_gemm(float* y, const int8_t* xq, const float* x_absmax, const int8_t* wq, const float* w_absmax, int T,
               int IC, int OC);
void dequant4(float* out, const uint8_t* codes, int64_t f0, int64_t n, const float* scales, int64_t b_first,
              int blocksize, const float* table16);
void dequant8(float* out, const int8_t* q, const float* row_absmax, int64_t rows, int64_t cols);
void dequant_ggml(float* out, const uint8_t* blocks, int64_t nblocks, bool q4);
}  // namespace avx2
namespace avx512 {
void dequant4(float* out, const uint8_t* codes, int64_t f0, int64_t n, const float* scales, int64_t b_first,
              int blocksize, const float* table16);
void dequant8(float* out, const int8_t* q, const float* row_absmax, int64_t rows, int64_t cols);
void dequant_ggml(float* out, const uint8_t* blocks, int64_t nblocks, bool q4);
// qr = quantize_int8_activations' codes of a row x with no outlier column; returns its absmax
float quantize_int8_row(int8_t* qr, const float* x, int64_t n);
void int8_gemm_vnni(float* y, const int8_t* xq, const float* x_absmax, const int8_t* wq, const float* w_absmax,
                    int T, int IC, int OC);  // needs AVX512-VNNI
}  // namespace avx512

using kernels::align64;
using kernels::carve;
using kernels::kParallelMin;

}  // namespace lt::cpu::dequant
