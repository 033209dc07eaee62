// NF4 / FP4 blockwise 4-bit quantization and the 8-bit "dynamic map" blockwise quantization used
// for double quantization, bit for bit as bitsandbytes 0.50.2 computes them on the CPU:
//  - quantize_4bit: bitsandbytes.functional.quantize_4bit (backends/default/ops.py): per block
//    absmax; full blocks scaled by x * (1/max(absmax, 1e-38)), a short last block by
//    x / max(absmax, 1e-38) (and that clamped absmax is the one stored); clamp to [-1, 1];
//    torch.bucketize against the midpoints of the sorted code table; FP4 codes remapped from
//    sorted order to bit patterns; an odd element count padded with a zero code.
//  - quantize_blockwise8: the C++ quantize_cpu (csrc/cpu_ops.cpp): absmax, x * (1/absmax), a
//    65536-entry lookup table of nearest codes, index trunc(fma((v+1)*0.5, 65535, 0.5)).
//  - the double-quant offset is torch's mean of the absmax values (torch_mean_f32 reproduces
//    torch's cascade summation order).
#pragma once
#include <cstdint>

#include "quant/quant_tensor.h"

namespace lt {

// The 16 values a 4-bit code stands for (index = code), as bitsandbytes.functional.get_4bit_type.
const float* code4_table(QuantType t);  // NF4 or FP4
// bitsandbytes.functional.create_dynamic_map(signed=True): 256 sorted values in [-0.993, 1].
const float* dynamic_map_signed();


// x (n) -> codes (ceil(n/2) bytes, first element in the high nibble), absmax (ceil(n/blocksize)).
void quantize_4bit(uint8_t* codes, float* absmax, const float* x, int64_t n, int blocksize, QuantType t);
// out (n) = table[code] * absmax[block], as bitsandbytes.functional.dequantize_4bit.
void dequantize_4bit(float* out, const uint8_t* codes, const float* absmax, int64_t n, int blocksize, QuantType t);

// torch.mean of an f32 vector on the CPU: torch's cascade sum (8-lane vectors, 4-way ILP,
// multi-level accumulators), split into min(threads, ceil(n/32768)) chunks when n > 32768, then
// divided by n.
float torch_mean_f32(const float* x, int64_t n, int torch_threads = 1);

// bitsandbytes.functional.quantize_blockwise with the dynamic map: q (n), absmax (ceil(n/blocksize)).
void quantize_blockwise8(uint8_t* q, float* absmax, const float* x, int64_t n, int blocksize = 256);
// out (n) = dynamic_map_signed()[q] * absmax[block].
void dequantize_blockwise8(float* out, const uint8_t* q, const float* absmax, int64_t n, int blocksize = 256);

// Double quantization of the 4-bit absmax values (quantize_4bit's compress_statistics=True):
// offset = mean(absmax), (absmax - offset) quantized with quantize_blockwise8 in blocks of 256.
// Writes qabsmax (nblocks) and absmax2 (ceil(nblocks/256)); returns the offset.
float double_quantize(uint8_t* qabsmax, float* absmax2, const float* absmax, int64_t nblocks, int mean_threads = 1);
// absmax (count) for blocks [first, first+count): dynamic_map[q] * absmax2[b/256] + offset.
void double_dequantize(float* absmax, const uint8_t* qabsmax, const float* absmax2, float offset, int64_t first,
                       int64_t count);

}  // namespace lt
