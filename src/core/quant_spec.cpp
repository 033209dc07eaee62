// Quantization format names and spec validation (core/quant_spec.h).
#include "core/quant_spec.h"

#include <string>

#include "core/error.h"

namespace lt {

const char* quant_type_name(QuantType t) {
  switch (t) {
    case QuantType::NF4: return "nf4";
    case QuantType::FP4: return "fp4";
    case QuantType::Int8: return "int8";
    case QuantType::Int4: return "int4";
    case QuantType::Int4Asym: return "int4_asym";
    case QuantType::Q8_0: return "q8_0";
    case QuantType::Q4_0: return "q4_0";
  }
  return "?";
}

std::optional<QuantType> find_quant_type(std::string_view name) {
  if (name == "nf4") return QuantType::NF4;
  if (name == "fp4") return QuantType::FP4;
  if (name == "int8") return QuantType::Int8;
  if (name == "int4") return QuantType::Int4;
  if (name == "int4_asym") return QuantType::Int4Asym;
  if (name == "q8_0") return QuantType::Q8_0;
  if (name == "q4_0") return QuantType::Q4_0;
  return std::nullopt;
}

QuantType parse_quant_type(std::string_view name) {
  if (auto t = find_quant_type(name)) return *t;
  fail("unknown quantization '{}': expected nf4, fp4, int8, int4, int4_asym, q8_0 or q4_0", name);
}

const char* quantization_name(Quantization q) { return q ? quant_type_name(*q) : "none"; }

Quantization parse_quantization(std::string_view name) {
  if (name.empty() || name == "none") return std::nullopt;
  return parse_quant_type(name);
}

void check_blocksize4(int blocksize) {
  LT_CHECK(blocksize >= 64 && blocksize <= 4096 && (blocksize & (blocksize - 1)) == 0,
           "4-bit quantization: block size {} is not supported; use a power of two from 64 to 4096 "
           "(64 is the NF4 default)", blocksize);
}

void check_quant_spec(const QuantSpec& spec) {
  if (spec.type == QuantType::Int8) {
    LT_CHECK(!spec.double_quant, "int8 quantization has one scale per row; double quantization applies to nf4 "
             "and fp4 only");
    return;
  }
  if (spec.type == QuantType::Q8_0 || spec.type == QuantType::Q4_0) {
    LT_CHECK(!spec.double_quant && spec.blocksize == 32, "{} has one f16 scale per block of 32 (got block size {}{})",
             quant_type_name(spec.type), spec.blocksize, spec.double_quant ? ", double quantization" : "");
    return;
  }
  if (is_int4(spec.type)) {
    LT_CHECK(!spec.double_quant, "{} keeps one f32 scale per block; double quantization applies to nf4 and fp4 only",
             quant_type_name(spec.type));
    const int bs = spec.blocksize;
    LT_CHECK(bs >= 32 && bs <= 4096 && (bs & (bs - 1)) == 0, "{} quantization: block size {} is not supported; use a "
             "power of two from 32 to 4096 (32 is llama.cpp's q4_0 / q4_1 group)", quant_type_name(spec.type), bs);
    return;
  }
  check_blocksize4(spec.blocksize);
}

}  // namespace lt
