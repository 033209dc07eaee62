// GGUF reader (versions 2 and 3, little-endian): maps the file and parses the header, every
// metadata key/value (all value types, nested arrays), the tensor infos, general.alignment and
// the data section. Everything is validated before use, so a truncated or damaged file is an
// lt::Error naming the file, the key or tensor, what was expected and what was found: the magic
// and version; every count, string and array length against the bytes left; n_dims <= 4;
// dimensions whose product overflows; tensor data misaligned, past the end of the file or
// overlapping another tensor; duplicate keys or tensor names; tensor types leantune does not
// read (named by ggml number and name, with the supported list).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "io/gguf_format.h"

namespace lt::gguf {

// One metadata value. Numeric arrays stay in the mapped file (`raw`); the typed getters of
// Reader convert them.
struct Value {
  ValueType type = ValueType::U8;
  uint64_t u = 0;    // U8, U16, U32, U64, Bool (0 or 1)
  int64_t i = 0;     // I8, I16, I32, I64
  double f = 0;      // F32, F64
  std::string str;   // String
  ValueType elem = ValueType::U8;    // Array: the elements' type
  uint64_t count = 0;                // Array: the number of elements
  const uint8_t* raw = nullptr;      // Array of numbers or bools: the elements as stored
  std::vector<std::string> strings;  // Array of String
  std::vector<Value> arrays;         // Array of Array
};

struct TensorEntry {
  std::string name;
  TensorType type = TensorType::F32;
  std::vector<int64_t> shape;     // outermost first (ggml's ne reversed), as PyTorch shapes
  uint64_t offset = 0;            // of the data, from the start of the file
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // in the mapping
  int64_t numel() const;
};

// Nested arrays deeper than this are refused (no real file nests more than 2).
constexpr int kMaxArrayDepth = 8;

class Reader {
 public:
  // Maps and validates `path`; lt::Error naming it on any defect (see above).
  explicit Reader(const std::string& path);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the data section
  const std::shared_ptr<MappedFile>& file() const { return file_; }

  // Keys in file order; find() is nullptr when absent.
  const std::vector<std::string>& keys() const { return keys_; }
  const Value* find(std::string_view key) const;
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  const TensorEntry* find_tensor(std::string_view name) const;

  // Typed metadata: nullopt / nullptr when the key is absent; lt::Error naming the file and the key
  // with the expected and the found type when it has another type (or an integer out of range).
  std::optional<int64_t> get_int(std::string_view key) const;   // any integer type
  std::optional<double> get_float(std::string_view key) const;  // f32, f64
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  const std::vector<std::string>* get_strings(std::string_view key) const;         // array of string
  std::optional<std::vector<float>> get_floats(std::string_view key) const;      // array of f32 / f64
  std::optional<std::vector<int64_t>> get_ints(std::string_view key) const;      // array of integers

 private:
  std::string path_;
  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32, data_offset_ = 0;
  std::vector<std::string> keys_;
  std::map<std::string, Value, std::less<>> values_;
  std::vector<TensorEntry> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;

  friend struct Parser;
};

// Whether `path` is a regular file starting with the GGUF magic (false when it cannot be read).
bool is_gguf_file(const std::string& path);

}  // namespace lt::gguf
