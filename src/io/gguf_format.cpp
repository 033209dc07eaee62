// GGUF types: metadata value types, ggml tensor types (names, sizes) and ggml's reference
// q8_0 / q4_0 block quantizers (ggml-quants.c quantize_row_q{8,4}_0_ref) with their inverses.
#include "io/gguf_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/q4_0.h"
#include "quant/q8_0.h"

namespace lt::gguf {

std::string value_type_name(uint32_t t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64",
                                "i64", "f64"};
  return t < 13 ? names[t] : "type " + std::to_string(t);
}

size_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::Bool: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::String: case ValueType::Array: return 0;
  }
  return 0;
}

const char* ggml_type_name(uint32_t t) {
  // ggml.c type_traits[].type_name; numbers ggml retired (4, 5, 31-33, 36-38) have none.
  static const char* names[] = {"f32",     "f16",    "q4_0",    "q4_1",  "",       "",      "q5_0",   "q5_1",
                                "q8_0",    "q8_1",   "q2_K",    "q3_K",  "q4_K",   "q5_K",  "q6_K",   "q8_K",
                                "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s", "iq2_s",  "iq4_xs",
                                "i8",      "i16",    "i32",     "i64",   "f64",    "iq1_m", "bf16",   "",
                                "",        "",       "tq1_0",   "tq2_0", "",       "",      "",       "mxfp4"};
  return t < sizeof(names) / sizeof(names[0]) ? names[t] : "";
}

std::optional<TensorType> supported_type(uint32_t t) {
  switch (t) {
    case 0: return TensorType::F32;
    case 1: return TensorType::F16;
    case 2: return TensorType::Q4_0;
    case 8: return TensorType::Q8_0;
    case 30: return TensorType::BF16;
    default: return std::nullopt;
  }
}

int type_block(TensorType t) { return t == TensorType::Q8_0 || t == TensorType::Q4_0 ? kBlock : 1; }

TensorType parse_type(const std::string& s) {
  if (s == "f32") return TensorType::F32;
  if (s == "f16") return TensorType::F16;
  if (s == "bf16") return TensorType::BF16;
  if (s == "q8_0") return TensorType::Q8_0;
  if (s == "q4_0") return TensorType::Q4_0;
  fail("--type '{}': unknown GGUF tensor type (expected f32, f16, bf16, q8_0 or q4_0)", s);
}

const char* type_name(TensorType t) {
  switch (t) {
    case TensorType::F32: return "f32";
    case TensorType::F16: return "f16";
    case TensorType::BF16: return "bf16";
    case TensorType::Q8_0: return "q8_0";
    case TensorType::Q4_0: return "q4_0";
  }
  return "?";
}

size_t type_bytes(TensorType t, int64_t n) {
  switch (t) {
    case TensorType::F32: return size_t(n) * 4;
    case TensorType::F16:
    case TensorType::BF16: return size_t(n) * 2;
    case TensorType::Q8_0: return size_t(n / kBlock) * kQ8Bytes;
    case TensorType::Q4_0: return size_t(n / kBlock) * kQ4Bytes;
  }
  return 0;
}

void quantize_q8_0(const float* x, int64_t n, uint8_t* out) { lt::quantize_q8_0(x, n, out); }  // quant/q8_0.h

void quantize_q4_0(const float* x, int64_t n, uint8_t* out) { lt::quantize_q4_0(x, n, out); }  // quant/q4_0.h

void dequantize_q8_0(const uint8_t* in, int64_t n, float* y) { lt::dequantize_q8_0(in, n, y); }

void dequantize_q4_0(const uint8_t* in, int64_t n, float* y) { lt::dequantize_q4_0(in, n, y); }

}  // namespace lt::gguf
