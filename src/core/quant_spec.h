// The quantization formats of frozen weights (bitsandbytes' NF4 / FP4, LLM.int8, and the integer
// 4-bit grids of llama.cpp's q4_0 / q4_1, which INT4 quantization-aware training exports) as a type, and
// how to quantize (QuantSpec), parsed once where a config or a file names them. The storage,
// kernels and quantizers are in quant/; this is what configs (model, training) below quant need.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace lt {

// Int4: symmetric, per block d = m / −8 (m the element of largest |x|), x ≈ (q − 8)·d, q in 0..15
// (llama.cpp's q4_0 grid); Int4Asym: per block x ≈ q·d + min, d = (max − min) / 15 (q4_1's grid).
// Q8_0: llama.cpp's q8_0, blocks of 32 int8 with one f16 scale each (quant/q8_0.h); Q4_0: llama.cpp's
// q4_0 as stored in a GGUF (quant/q4_0.h: Int4's grid, one f16 scale per block of 32, ggml's nibble order).
enum class QuantType : uint8_t { NF4, FP4, Int8, Int4, Int4Asym, Q8_0, Q4_0 };
// llama.cpp's block formats (rows of whole blocks of 32, products on q8_0-quantized inputs)
inline bool is_ggml_block(QuantType t) { return t == QuantType::Q8_0 || t == QuantType::Q4_0; }
inline bool is_int4(QuantType t) { return t == QuantType::Int4 || t == QuantType::Int4Asym; }

const char* quant_type_name(QuantType t);           // "nf4", "fp4", "int8", "int4", "int4_asym", "q8_0", "q4_0"
QuantType parse_quant_type(std::string_view name);  // throws lt::Error naming the accepted values
std::optional<QuantType> find_quant_type(std::string_view name);  // nullopt for any other name

// The storage of frozen linear weights in a run: a QuantType, or nullopt for none (as they are).
using Quantization = std::optional<QuantType>;
const char* quantization_name(Quantization q);  // "none", or quant_type_name()
// "" or "none" -> nullopt; else parse_quant_type() (lt::Error naming nf4, fp4, int8).
Quantization parse_quantization(std::string_view name);

// How to quantize: the format, its block size (4-bit only) and double quantization (4-bit only).
struct QuantSpec {
  QuantType type = QuantType::NF4;
  int blocksize = 64;         // power of two in [64, 4096] ([32, 4096] for int4)
  bool double_quant = false;  // 8-bit absmax with 256-blocks of second-level scales
};

// Throws lt::Error unless the spec is valid (block size a power of two in [64, 4096], [32, 4096]
// for Int4 / Int4Asym, 32 for Q8_0 / Q4_0; double quantization for NF4 / FP4 only).
void check_quant_spec(const QuantSpec& spec);
// lt::Error unless blocksize is a power of two in [64, 4096].
void check_blocksize4(int blocksize);

}  // namespace lt
