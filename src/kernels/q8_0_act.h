// The input side of the q8_0 product (kernels/linear.h, kind Q8_0): as llama.cpp's CPU backend does
// before a q8_0 weight's dot products (ggml-cpu quantize_row_q8_0 on x86), each row of x is quantized
// in blocks of 32: amax = max |x|, d = amax / 127 stored as f16, q = x · (127 / amax) rounded to
// nearest even (0 for an all-zero block). Every backend quantizes the input with these functions, so
// the products' int8 operands are the same bits everywhere.
#pragma once
#include <cstdint>

namespace lt {

// x (n, a multiple of 32) -> q (n) and d (n / 32: each block's f16 scale, as f32).
void quantize_act_q8_0(const float* x, int64_t n, int8_t* q, float* d);
// out (n) = q · d of x quantized as above (the input the q8_0 product sees, as floats; exact in f32).
void fake_quantize_act_q8_0(const float* x, int64_t n, float* out);

}  // namespace lt
