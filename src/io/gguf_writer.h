// GGUF writer (version 3, little-endian, 32-byte alignment): metadata key/values and tensors,
// written as llama.cpp's gguf reader expects; plus ggml's q8_0 / q4_0 block quantizers.
// Shapes are given outermost first (as PyTorch / safetensors store them); the file stores them
// innermost first (ggml's ne[0] = row length).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lt::gguf {

// ggml tensor types this writer produces (values of ggml_type).
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

class Writer {
 public:
  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string(const std::string& key, const std::string& v);
  void add_strings(const std::string& key, const std::vector<std::string>& v);
  void add_f32s(const std::string& key, const std::vector<float>& v);
  void add_i32s(const std::string& key, const std::vector<int32_t>& v);

  // Converts `data` (numel of `shape`, f32) to `type` and keeps the bytes. Block types need a
  // row length (the last dim) that is a multiple of 32: lt::Error naming the tensor otherwise.
  void add_tensor(const std::string& name, const std::vector<int64_t>& shape, const float* data, TensorType type);

  // Writes the file atomically (temp file + fsync + rename); lt::Error naming `path` on failure.
  void write(const std::string& path) const;

  size_t tensor_count() const { return tensors_.size(); }

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    TensorType type;
    std::vector<uint8_t> bytes;
  };
  void key(const std::string& k, uint32_t vtype);
  std::vector<uint8_t> kv_;  // the serialized key/value section
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace lt::gguf
