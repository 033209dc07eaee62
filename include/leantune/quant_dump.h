// A testing aid for quantization parity with bitsandbytes: quantizes one f32 / f16 / bf16 tensor
// of a .safetensors file (its last dimension the columns) and writes every part of the result,
// the code tables and the tensor dequantized (reference and tiled fast path).
// Output tensors: codes (U8, packed) + absmax (F32), or qabsmax (U8) + absmax2 (F32) + offset
// (F32 [1]) + code2 (F32 [256]) with double quantization; code (F32 [16]); qweight (I8) +
// row_absmax (F32) for int8; dequant and dequant_tiles (F32, the input's shape).
//
// Usage:
//   leantune::QuantDumpOptions o;
//   o.type = leantune::Quantization::NF4;
//   leantune::QuantDumpResult r = leantune::quant_dump("w.safetensors", "q.safetensors", o);
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "leantune/model.h"

namespace leantune {

struct QuantDumpOptions {
  std::string tensor;                     // the tensor's name; "": the file's only tensor
  Quantization type = Quantization::NF4;  // not None
  int blocksize = 64;                     // 4-bit block size: a power of two from 64 to 4096
  bool double_quant = false;              // 4-bit: quantize the absmax values to 8 bits
  int mean_threads = 1;                   // torch's thread count, whose mean the double-quant offset reproduces
};

struct QuantDumpResult {
  std::string tensor;
  int64_t rows = 0, cols = 0;
  size_t storage_bytes = 0;  // the quantized tensor's bytes as the engine stores it
};

// Reads `in`, writes `out` (metadata: type, blocksize, double_quant, isa). leantune::Error naming
// the file and tensor when it is missing, empty, or not F32 / F16 / BF16.
QuantDumpResult quant_dump(const std::string& in, const std::string& out, const QuantDumpOptions& options);

}  // namespace leantune
