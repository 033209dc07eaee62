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
  }
  return "?";
}

std::optional<QuantType> find_quant_type(std::string_view name) {
  if (name == "nf4") return QuantType::NF4;
  if (name == "fp4") return QuantType::FP4;
  if (name == "int8") return QuantType::Int8;
  return std::nullopt;
}

QuantType parse_quant_type(std::string_view name) {
  if (auto t = find_quant_type(name)) return *t;
  fail("unknown quantization '{}': expected nf4, fp4 or int8", name);
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
  check_blocksize4(spec.blocksize);
}

}  // namespace lt
