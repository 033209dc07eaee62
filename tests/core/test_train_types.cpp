// The run choices as types (core/train_types.h, core/quant_spec.h): every value's name parses back
// to it, and any other name is refused with the message the CLI flags show.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/train_types.h"

namespace lt {
namespace {

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TrainTypes, NamesParseBack) {
  for (Method m : {Method::Lora, Method::Full}) EXPECT_EQ(parse_method(method_name(m)), m);
  for (Precision p : {Precision::FP32, Precision::BF16, Precision::FP16})
    EXPECT_EQ(parse_precision(precision_name(p)), p);
  for (QuantType t : {QuantType::NF4, QuantType::FP4, QuantType::Int8})
    EXPECT_EQ(parse_quantization(quantization_name(t)), t);
  EXPECT_EQ(parse_quantization("none"), std::nullopt);
  EXPECT_EQ(parse_quantization(""), std::nullopt);
  EXPECT_STREQ(quantization_name(std::nullopt), "none");
  EXPECT_STREQ(method_name(Method::Full), "full");
  EXPECT_STREQ(precision_name(Precision::BF16), "bf16");
}

TEST(TrainTypes, OtherNamesAreRefused) {
  EXPECT_EQ(find_method("qlora"), std::nullopt);  // an alias only the config file accepts
  EXPECT_EQ(find_precision("f16"), std::nullopt);
  EXPECT_EQ(find_quant_type("none"), std::nullopt);
  EXPECT_EQ(error_of([] { parse_method("dora"); }), "method: 'dora' is not one of lora, full");
  EXPECT_EQ(error_of([] { parse_precision("FP16"); }), "precision: 'FP16' is not one of fp32, bf16, fp16");
  EXPECT_EQ(error_of([] { parse_quantization("nf5"); }), "unknown quantization 'nf5': expected nf4, fp4, int8, int4, int4_asym, q8_0 or q4_0");
}

}  // namespace
}  // namespace lt
