// The quantization formats of frozen weights (bitsandbytes' NF4 / FP4, LLM.int8) as a type, and
// how to quantize (QuantSpec), parsed once where a config or a file names them. The storage,
// kernels and quantizers are in quant/; this is what configs (model, training) below quant need.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace lt {

enum class QuantType : uint8_t { NF4, FP4, Int8 };

const char* quant_type_name(QuantType t);           // "nf4", "fp4", "int8"
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
  int blocksize = 64;         // power of two in [64, 4096]
  bool double_quant = false;  // 8-bit absmax with 256-blocks of second-level scales
};

// Throws lt::Error unless the spec is valid (block size a power of two in [64, 4096]; no double
// quantization for Int8).
void check_quant_spec(const QuantSpec& spec);
// lt::Error unless blocksize is a power of two in [64, 4096].
void check_blocksize4(int blocksize);

}  // namespace lt
