// TensorSet: named tensors read in place from memory-mapped checkpoint files (or, converted on
// load, from memory the set owns). Loaders
// (safetensors, llama2.c) produce one, keyed by Hugging Face names
// ("model.layers.0.self_attn.q_proj.weight"); the model builder takes tensors out by name and
// checks their shapes against the ModelConfig.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace lt {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // points into a mapped file
  size_t nbytes = 0;
  std::string file;            // the file it came from, for error messages

  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

class TensorSet {
 public:
  void add_file(std::shared_ptr<MappedFile> f) { files_.push_back(std::move(f)); }
  // `bytes` of memory the set owns, 64-byte aligned and uninitialized, for tensors that cannot
  // point into a file (converted on load: dequantized GGUF blocks, reordered rows); it lives as
  // long as the set or any copy of it.
  uint8_t* allocate(size_t bytes);
  // Adds a tensor; lt::Error if the name is already present.
  void add(TensorInfo t);
  const TensorInfo* find(const std::string& name) const;
  // Removes `name` (no-op when absent); the memory it points into stays mapped / owned.
  void erase(const std::string& name) { tensors_.erase(name); }
  // The tensor `name` with exactly `shape`; lt::Error naming file, tensor, and expected vs actual shape.
  const TensorInfo& get(const std::string& name, const std::vector<int64_t>& shape) const;
  const std::map<std::string, TensorInfo>& all() const { return tensors_; }
  std::string source;  // folder or file the set was loaded from (for messages)
  // lt::Error naming the file and tensor when a model weight ("*.weight", "*.bias"; not the
  // suffixed parts of a quantized weight) is not F32, F16 or BF16, the dtypes read as weights.
  void check_weight_dtypes() const;

 private:
  std::vector<std::shared_ptr<MappedFile>> files_;
  std::vector<std::shared_ptr<uint8_t>> owned_;
  std::map<std::string, TensorInfo> tensors_;
};

}  // namespace lt
