// The GGUF format's shared vocabulary (reader and writer): the magic, the metadata value types,
// the ggml tensor types leantune reads and writes (f32, f16, bf16, q8_0, q4_0) with their sizes,
// the names of every ggml type (to name an unsupported one), and ggml's q8_0 / q4_0 block
// quantizers and their inverses.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace lt::gguf {

constexpr uint32_t kMagic = 0x46554747u;  // "GGUF" read as a little-endian u32

// gguf_type: the type of a metadata value (or of an array's elements).
enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8, Array = 9, U64 = 10,
  I64 = 11, F64 = 12
};
// "u8", ..., "array"; "type N" for a number outside the enum.
std::string value_type_name(uint32_t t);
// Bytes of one scalar of type t (0 for String and Array, whose size is in the file).
size_t value_type_size(ValueType t);

// ggml tensor types leantune reads and writes (values of ggml_type).
enum class TensorType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 8, BF16 = 30 };

constexpr int kBlock = 32;               // elements per q8_0 / q4_0 block
constexpr size_t kQ8Bytes = 2 + 32;      // f16 scale + 32 int8
constexpr size_t kQ4Bytes = 2 + 16;      // f16 scale + 32 nibbles
constexpr uint64_t kAlignment = 32;

// "f32" | "f16" | "bf16" | "q8_0" | "q4_0" -> type; lt::Error naming the value otherwise.
TensorType parse_type(const std::string& s);
const char* type_name(TensorType t);
// Bytes of n elements (n a multiple of 32 for the block types).
size_t type_bytes(TensorType t, int64_t n);

// ggml's quantize_row_q8_0_ref / q4_0_ref over n (a multiple of 32) floats, and the inverse.
void quantize_q8_0(const float* x, int64_t n, uint8_t* out);
void quantize_q4_0(const float* x, int64_t n, uint8_t* out);
void dequantize_q8_0(const uint8_t* in, int64_t n, float* y);
void dequantize_q4_0(const uint8_t* in, int64_t n, float* y);

// The name ggml gives type number t ("q4_K", "iq2_xs", ...), or "" when ggml has no such type.
const char* ggml_type_name(uint32_t t);
// t as a TensorType when it is one of the supported five, else nullopt.
std::optional<TensorType> supported_type(uint32_t t);
constexpr const char* kSupportedTypes = "f32, f16, bf16, q8_0, q4_0";
// Elements per block of a supported type (1 for f32 / f16 / bf16, 32 for q8_0 / q4_0).
int type_block(TensorType t);

}  // namespace lt::gguf
