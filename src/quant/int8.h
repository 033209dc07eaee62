// LLM.int8 (Dettmers et al. 2022) weights as bitsandbytes stores them: int8 codes with one absmax
// per output row.
//   quantize:   q = round_half_even(x * ((1/absmax) * 127)), absmax = max |row|
//   dequantize: w = (q * absmax) * (1/127)
// The LLM.int8 product itself (activations quantized per row at run time, int32 accumulation,
// outlier columns in f32) is the Int8 kind of the linear op (kernels/linear.h); quant_tensor.h's
// weight_view() hands these weights to it.
#pragma once
#include <cstdint>

namespace lt {

// Row-wise int8: q (rows, cols), row_absmax (rows). An all-zero row gets zero codes and absmax 0.
void quantize_int8_rows(int8_t* q, float* row_absmax, const float* w, int64_t rows, int64_t cols);
// out (rows, cols) = (q * row_absmax) * (1/127).
void dequantize_int8_rows(float* out, const int8_t* q, const float* row_absmax, int64_t rows, int64_t cols);

}  // namespace lt
