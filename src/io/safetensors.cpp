// safetensors reader and writer. The reader trusts nothing in the file: every length, offset,
// shape and dtype is checked (with overflow-safe arithmetic) before a pointer into the map is made.
#include "io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_parse.h"
#include "core/atomic_file.h"

namespace lt {

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's limit

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A non-negative JSON integer, or lt::Error naming `what`.
uint64_t get_index(const json& j, const std::string& path, const std::string& tensor, const char* what) {
  LT_CHECK(j.is_number_integer(), "{}: tensor '{}': {} must be an integer, got {}", path, excerpt(tensor), what,
           json_excerpt(j));
  LT_CHECK(j.is_number_unsigned(), "{}: tensor '{}': {} must not be negative, got {}", path, excerpt(tensor), what,
           json_excerpt(j));
  return j.get<uint64_t>();
}

Entry parse_entry(const std::string& path, const std::string& name, const json& v) {
  LT_CHECK(v.is_object(), "{}: tensor '{}': entry must be a JSON object, got {}", path, excerpt(name), v.type_name());
  Entry e;
  e.name = name;
  auto dt = v.find("dtype");
  LT_CHECK(dt != v.end() && dt->is_string(), "{}: tensor '{}': missing or non-string \"dtype\"", path, excerpt(name));
  const std::string& dts = dt->get_ref<const std::string&>();
  LT_CHECK(parse_safetensors_dtype(dts, &e.dtype),
           "{}: tensor '{}': unsupported dtype '{}' (supported: F32, F16, BF16, I32, I64, U8, I8)", path, excerpt(name),
           excerpt(dts));

  auto sh = v.find("shape");
  LT_CHECK(sh != v.end() && sh->is_array(), "{}: tensor '{}': missing or non-array \"shape\"", path, excerpt(name));
  for (const auto& d : *sh) {
    uint64_t x = get_index(d, path, name, "each shape dimension");
    LT_CHECK(x <= uint64_t(std::numeric_limits<int64_t>::max()), "{}: tensor '{}': shape dimension {} is too large",
             path, excerpt(name), x);
    e.shape.push_back(int64_t(x));
  }

  auto off = v.find("data_offsets");
  LT_CHECK(off != v.end() && off->is_array() && off->size() == 2,
           "{}: tensor '{}': \"data_offsets\" must be an array [begin, end]", path, excerpt(name));
  e.begin = get_index((*off)[0], path, name, "data_offsets begin");
  e.end = get_index((*off)[1], path, name, "data_offsets end");
  return e;
}

// Checks an entry against the buffer of `buf_size` bytes that starts at file offset `buf_start`.
void check_entry(const std::string& path, const Entry& e, uint64_t buf_start, uint64_t buf_size) {
  uint64_t esize = dtype_size(e.dtype), bytes = esize;
  for (int64_t d : e.shape)
    LT_CHECK(!__builtin_mul_overflow(bytes, uint64_t(d), &bytes), "{}: tensor '{}': shape is too large", path,
             excerpt(e.name));
  LT_CHECK(e.begin <= e.end, "{}: tensor '{}': data_offsets end {} is before begin {}", path, excerpt(e.name), e.end,
           e.begin);
  LT_CHECK(e.end <= buf_size, "{}: tensor '{}': data ends at byte {} past the end of the data buffer ({} bytes)", path,
           excerpt(e.name), e.end, buf_size);
  LT_CHECK(e.end - e.begin == bytes,
           "{}: tensor '{}': data_offsets [{}, {}] hold {} bytes but a {} tensor of shape [{}] needs {}", path,
           excerpt(e.name), e.begin, e.end, e.end - e.begin, dtype_name(e.dtype), fmt::join(e.shape, ", "), bytes);
  LT_CHECK((buf_start + e.begin) % esize == 0,
           "{}: tensor '{}': data at file offset {} is not aligned to its {}-byte {} elements", path, excerpt(e.name),
           buf_start + e.begin, esize, dtype_name(e.dtype));
}

}  // namespace

std::string_view safetensors_dtype_name(DType t) { return dtype_name(t); }

bool parse_safetensors_dtype(std::string_view name, DType* out) {
  static constexpr DType kAll[] = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8, DType::I8};
  for (DType t : kAll)
    if (dtype_name(t) == name) {
      *out = t;
      return true;
    }
  return false;
}

SafetensorsMetadata load_safetensors(const std::string& path, TensorSet& out) {
  auto file = std::make_shared<MappedFile>(path);
  const uint8_t* p = file->data();
  uint64_t size = file->size();
  LT_CHECK(size >= 8, "{}: not a safetensors file: {} bytes, shorter than the 8-byte header length", path, size);
  uint64_t n = read_u64_le(p);
  LT_CHECK(n <= size - 8, "{}: header length {} runs past the end of the file ({} bytes); truncated or not safetensors",
           path, n, size);
  LT_CHECK(n <= kMaxHeaderBytes, "{}: header length {} is larger than the {} byte limit", path, n, kMaxHeaderBytes);

  json header = parse_json(std::string_view(reinterpret_cast<const char*>(p + 8), n), path + " (JSON header)");
  LT_CHECK(header.is_object(), "{}: JSON header must be an object, got {}", path, header.type_name());

  SafetensorsMetadata meta;
  std::vector<Entry> entries;
  const uint64_t buf_start = 8 + n, buf_size = size - buf_start;
  for (const auto& [key, v] : header.items()) {
    if (key == "__metadata__") {
      LT_CHECK(v.is_object(), "{}: \"__metadata__\" must be an object of strings", path);
      for (const auto& [mk, mv] : v.items()) {
        LT_CHECK(mv.is_string(), "{}: \"__metadata__\" entry '{}' must be a string, got {}", path, excerpt(mk),
                 mv.type_name());
        meta[mk] = mv.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, key, v));
    check_entry(path, entries.back(), buf_start, buf_size);
  }

  std::vector<const Entry*> order;
  for (const auto& e : entries)
    if (e.end > e.begin) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < order.size(); ++i)
    LT_CHECK(order[i - 1]->end <= order[i]->begin, "{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", path,
             excerpt(order[i - 1]->name), order[i - 1]->begin, order[i - 1]->end, excerpt(order[i]->name),
             order[i]->begin, order[i]->end);

  for (auto& e : entries) {
    TensorInfo t;
    t.name = e.name;
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    t.data = p + buf_start + e.begin;
    t.nbytes = size_t(e.end - e.begin);
    t.file = path;
    out.add(std::move(t));
  }
  out.add_file(std::move(file));
  return meta;
}

void save_safetensors(const std::string& path, const std::vector<TensorInfo>& tensors,
                      const SafetensorsMetadata& metadata, const TensorDataWriter& write_data) {
  std::vector<const TensorInfo*> order;
  for (const auto& t : tensors) {
    LT_CHECK(!t.name.empty() && t.name != "__metadata__", "{}: invalid tensor name '{}'", path, t.name);
    uint64_t bytes = dtype_size(t.dtype);
    for (int64_t d : t.shape) {
      LT_CHECK(d >= 0, "{}: tensor '{}' has a negative dimension {}", path, t.name, d);
      LT_CHECK(!__builtin_mul_overflow(bytes, uint64_t(d), &bytes), "{}: tensor '{}' is too large", path, t.name);
    }
    LT_CHECK(bytes == t.nbytes, "{}: tensor '{}' has nbytes {} but its shape and dtype need {}", path, t.name,
             t.nbytes, bytes);
    LT_CHECK(bytes == 0 || t.data || write_data, "{}: tensor '{}' has no data", path, t.name);
    order.push_back(&t);
  }
  // Largest element first keeps every tensor aligned (the buffer starts at a multiple of 8).
  std::stable_sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
    size_t sa = dtype_size(a->dtype), sb = dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });

  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorInfo* t : order) {
    LT_CHECK(!header.contains(t->name), "{}: tensor '{}' appears twice", path, t->name);
    header[t->name] = {{"dtype", std::string(safetensors_dtype_name(t->dtype))},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->nbytes}}};
    offset += t->nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    fail("{}: cannot encode the header (tensor names and metadata must be UTF-8): {}", path, e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  write_file_atomic(path, [&](std::FILE* f) {
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
    bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
    for (const TensorInfo* t : order)
      ok = ok && (t->nbytes == 0 || (t->data ? std::fwrite(t->data, 1, t->nbytes, f) == t->nbytes : write_data(*t, f)));
    LT_CHECK(ok, "{}: write failed: {}", path, std::strerror(errno));
  });
}

void save_safetensors(const std::string& path, const TensorSet& tensors, const SafetensorsMetadata& metadata) {
  std::vector<TensorInfo> v;
  for (const auto& [name, t] : tensors.all()) v.push_back(t);
  save_safetensors(path, v, metadata);
}

}  // namespace lt
