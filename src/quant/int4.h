// The integer 4-bit formats (core/quant_spec.h Int4, Int4Asym): llama.cpp's q4_0 / q4_1 grids with
// f32 scales, over the matrix flattened row-major in blocks of `blocksize` (the last may be short).
//   int4       m = the element of largest |x| (the first on ties), d = m / −8, id = d ? 1/d : 0,
//              q = min(15, trunc(x·id + 8.5)); decoded (q − 8)·d     (ggml's quantize_row_q4_0_ref)
//   int4_asym  lo, hi = the block's min and max, d = (hi − lo) / 15, id = d ? 1/d : 0,
//              q = min(15, trunc((x − lo)·id + 0.5)); decoded q·d, rounded, + lo (quantize_row_q4_1_ref)
// Codes two per byte, first element in the high nibble (as NF4 / FP4 here, not ggml's order). The
// decoded value is int4_code_table(t)[q] · d (+ lo), which is how the linear op reads the stored
// format (kernels/linear.h), so fake_quantize_int4 and a quantized weight decode to the same floats:
// what quantization-aware training sees in its forward is what the exported 4-bit model computes.
#pragma once
#include <cstdint>

#include "core/quant_spec.h"

namespace lt {

// The 16 code values: int4 {−8, ..., 7}, int4_asym {0, ..., 15}.
const float* int4_code_table(QuantType t);

// x (n) -> codes (ceil(n/2) bytes), scales (nblocks: d), mins (nblocks: lo; int4_asym only, else
// may be null).
void quantize_int4(uint8_t* codes, float* scales, float* mins, const float* x, int64_t n, int blocksize, QuantType t);

// out (n) = x quantized and decoded again (no storage): the weights a 4-bit model would use.
void fake_quantize_int4(float* out, const float* x, int64_t n, int blocksize, QuantType t);

// out (n) = the decoded values of a stored int4 / int4_asym tensor.
void dequantize_int4(float* out, const uint8_t* codes, const float* scales, const float* mins, int64_t n,
                     int blocksize, QuantType t);

}  // namespace lt
