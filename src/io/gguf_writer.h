// GGUF writer (version 3, little-endian, 32-byte alignment): metadata key/values and tensors,
// written as llama.cpp's gguf reader expects (the types and block formats: io/gguf_format.h).
// Shapes are given outermost first (as PyTorch / safetensors store them); the file stores them
// innermost first (ggml's ne[0] = row length).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/gguf_format.h"

namespace lt::gguf {

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
