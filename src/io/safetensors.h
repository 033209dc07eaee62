// safetensors files (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {string: string}}, then the byte buffer (offsets are relative to its start).
// Reading memory-maps the file and validates every entry; writing is atomic (core/atomic_file.h).
#pragma once
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/tensor_set.h"

namespace lt {

using SafetensorsMetadata = std::map<std::string, std::string>;

// Maps `path` and adds each of its tensors to `out` (data points into the map, which `out` keeps
// alive). Returns the "__metadata__" entries. Throws lt::Error naming the file and the tensor on
// any malformed, unsupported, out-of-range, misaligned or overlapping entry.
SafetensorsMetadata load_safetensors(const std::string& path, TensorSet& out);

// Writes `tensors` (each: name, dtype, shape, data, nbytes == numel * dtype size) and `metadata`
// to `path` atomically. Tensors are laid out contiguously, largest element size first, so every
// tensor's data is aligned for its dtype when the file is mapped.
// write_data (optional) writes the bytes of a tensor given with data == nullptr to the file
// (exactly nbytes; false on a write error), so a tensor spread over memory needs no contiguous copy.
using TensorDataWriter = std::function<bool(const TensorInfo& t, std::FILE* f)>;
void save_safetensors(const std::string& path, const std::vector<TensorInfo>& tensors,
                      const SafetensorsMetadata& metadata = {}, const TensorDataWriter& write_data = {});
void save_safetensors(const std::string& path, const TensorSet& tensors, const SafetensorsMetadata& metadata = {});

// The safetensors name of a dtype ("F32", "BF16", ...) and the reverse (false if not supported).
std::string_view safetensors_dtype_name(DType t);
bool parse_safetensors_dtype(std::string_view name, DType* out);

}  // namespace lt
