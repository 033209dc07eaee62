// GGUF parsing over a mapped file. A cursor reads the header, the key/values and the tensor infos
// in order, checking each length against the bytes left before it reads or allocates anything;
// then the data section is placed (general.alignment) and every tensor's bytes are checked to be
// aligned, inside the file and not overlapping. Messages name the file, the part being read (key
// or tensor, by name and index) and what was expected against what was found.
#include "io/gguf_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace lt::gguf {

int64_t TensorEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The cursor and the checks; a friend of Reader, filling it in.
struct Parser {
  Reader& r;
  const uint8_t* p;
  size_t size;
  size_t off = 0;
  std::string where;  // the part being read, for messages ("metadata key 3 ('general.name')")

  size_t left() const { return size - off; }

  void need(uint64_t n, const char* what) const {
    LT_CHECK(n <= left(), "{}: truncated GGUF: {}: {} needs {} bytes at offset {}, only {} left in the file ({} bytes)",
             r.path_, where, what, n, off, left(), size);
  }

  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p + off, sizeof(T));
    off += sizeof(T);
    return v;
  }

  std::string str(const char* what) {
    const uint64_t n = get<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(p + off), size_t(n));
    off += size_t(n);
    return s;
  }

  void header(uint64_t* n_tensors, uint64_t* n_kv);
  Value value(ValueType t, int depth);
  Value array(int depth);
  void metadata(uint64_t n_kv);
  void tensor_info(uint64_t index);
  void data_section();
};

void Parser::header(uint64_t* n_tensors, uint64_t* n_kv) {
  where = "header";
  LT_CHECK(size >= 4, "{}: not a GGUF file: {} bytes, too short for the 4-byte magic 'GGUF'", r.path_, size);
  const uint32_t magic = get<uint32_t>("the magic");
  LT_CHECK(magic == kMagic, "{}: not a GGUF file: the first 4 bytes are '{}', expected 'GGUF'", r.path_,
           excerpt(std::string_view(reinterpret_cast<const char*>(p), 4)));
  r.version_ = get<uint32_t>("the version");
  LT_CHECK(r.version_ != 0x03000000u && r.version_ != 0x02000000u,
           "{}: a big-endian GGUF file (version bytes {:#010x}); leantune reads little-endian GGUF only", r.path_,
           r.version_);
  LT_CHECK(r.version_ == 2 || r.version_ == 3,
           "{}: GGUF version {} is not supported (expected 2 or 3{})", r.path_, r.version_,
           r.version_ == 1 ? "; version 1 files predate 64-bit counts: convert it again with a current llama.cpp" : "");
  *n_tensors = get<uint64_t>("the tensor count");
  *n_kv = get<uint64_t>("the metadata key/value count");
  // a key/value needs at least 8 + 4 bytes, a tensor info 8 + 4 + 4 + 8
  LT_CHECK(*n_kv <= left() / 12, "{}: damaged GGUF header: {} metadata key/values cannot fit in the {} bytes left",
           r.path_, *n_kv, left());
  LT_CHECK(*n_tensors <= left() / 24, "{}: damaged GGUF header: {} tensor infos cannot fit in the {} bytes left",
           r.path_, *n_tensors, left());
}

Value Parser::value(ValueType t, int depth) {
  Value v;
  v.type = t;
  switch (t) {
    case ValueType::U8: v.u = get<uint8_t>("a u8 value"); break;
    case ValueType::I8: v.i = get<int8_t>("an i8 value"); break;
    case ValueType::U16: v.u = get<uint16_t>("a u16 value"); break;
    case ValueType::I16: v.i = get<int16_t>("an i16 value"); break;
    case ValueType::U32: v.u = get<uint32_t>("a u32 value"); break;
    case ValueType::I32: v.i = get<int32_t>("an i32 value"); break;
    case ValueType::U64: v.u = get<uint64_t>("a u64 value"); break;
    case ValueType::I64: v.i = get<int64_t>("an i64 value"); break;
    case ValueType::F32: v.f = get<float>("an f32 value"); break;
    case ValueType::F64: v.f = get<double>("an f64 value"); break;
    case ValueType::Bool:
      v.u = get<uint8_t>("a bool value");
      LT_CHECK(v.u <= 1, "{}: {}: a bool value must be 0 or 1, found {}", r.path_, where, v.u);
      break;
    case ValueType::String: v.str = str("a string value"); break;
    case ValueType::Array: return array(depth + 1);
  }
  return v;
}

Value Parser::array(int depth) {
  LT_CHECK(depth <= kMaxArrayDepth, "{}: {}: arrays nested more than {} deep", r.path_, where, kMaxArrayDepth);
  Value v;
  v.type = ValueType::Array;
  const uint32_t et = get<uint32_t>("the array element type");
  LT_CHECK(et <= uint32_t(ValueType::F64), "{}: {}: unknown array element type {} (expected 0 to 12: u8 ... f64)",
           r.path_, where, et);
  v.elem = ValueType(et);
  v.count = get<uint64_t>("the array length");
  const size_t min_size = v.elem == ValueType::String ? 8 : v.elem == ValueType::Array ? 12 : value_type_size(v.elem);
  LT_CHECK(v.count <= left() / min_size,
           "{}: truncated GGUF: {}: an array of {} {} elements needs at least {} bytes per element, only {} bytes left",
           r.path_, where, v.count, value_type_name(et), min_size, left());
  if (v.elem == ValueType::String) {
    v.strings.reserve(size_t(v.count));
    for (uint64_t k = 0; k < v.count; ++k) v.strings.push_back(str("an array string"));
  } else if (v.elem == ValueType::Array) {
    v.arrays.reserve(size_t(v.count));
    for (uint64_t k = 0; k < v.count; ++k) v.arrays.push_back(array(depth + 1));
  } else {
    v.raw = p + off;
    off += size_t(v.count) * min_size;
    if (v.elem == ValueType::Bool)
      for (uint64_t k = 0; k < v.count; ++k)
        LT_CHECK(v.raw[k] <= 1, "{}: {}: bool element {} must be 0 or 1, found {}", r.path_, where, k, v.raw[k]);
  }
  return v;
}

void Parser::metadata(uint64_t n_kv) {
  for (uint64_t k = 0; k < n_kv; ++k) {
    where = fmt::format("metadata key/value {}", k);
    std::string key = str("the key");
    where = fmt::format("metadata key {} ('{}')", k, excerpt(key));
    LT_CHECK(!r.values_.count(key), "{}: GGUF metadata key '{}' appears twice (key/values {} and earlier)", r.path_,
             excerpt(key), k);
    const uint32_t t = get<uint32_t>("the value type");
    LT_CHECK(t <= uint32_t(ValueType::F64), "{}: {}: unknown value type {} (expected 0 to 12: u8 ... f64)", r.path_,
             where, t);
    Value v = value(ValueType(t), 0);
    r.keys_.push_back(key);
    r.values_.emplace(std::move(key), std::move(v));
  }
}

void Parser::tensor_info(uint64_t index) {
  where = fmt::format("tensor info {}", index);
  TensorEntry t;
  t.name = str("the tensor name");
  where = fmt::format("tensor {} ('{}')", index, excerpt(t.name));
  LT_CHECK(!r.tensor_index_.count(t.name), "{}: GGUF tensor '{}' appears twice (tensor infos {} and earlier)",
           r.path_, excerpt(t.name), index);
  const uint32_t n_dims = get<uint32_t>("the number of dimensions");
  LT_CHECK(n_dims <= 4, "{}: {}: {} dimensions, expected at most 4", r.path_, where, n_dims);
  std::vector<uint64_t> ne;
  unsigned __int128 numel = 1;  // < 2^63 after each check, so one more factor < 2^64 cannot wrap it
  for (uint32_t k = 0; k < n_dims; ++k) {
    ne.push_back(get<uint64_t>("a dimension"));
    numel *= ne.back();
    LT_CHECK(ne.back() <= uint64_t(INT64_MAX) && numel <= INT64_MAX, "{}: {}: dimensions (innermost first) [{}, ...] "
             "overflow: their product is past 2^63 elements", r.path_, where, fmt::join(ne, ", "));
  }
  const uint32_t type = get<uint32_t>("the tensor type");
  const auto st = supported_type(type);
  if (!st) {
    const std::string name = ggml_type_name(type);
    fail("{}: {}: ggml type {} ({}) is not supported; leantune reads {}", r.path_, where, type,
         name.empty() ? "not a ggml type" : name, kSupportedTypes);
  }
  t.type = *st;
  const int block = type_block(t.type);
  LT_CHECK(n_dims > 0 ? ne[0] % uint64_t(block) == 0 : block == 1, "{}: {}: a {} row holds blocks of {} elements, "
           "but the row length (ne[0]) is {}", r.path_, where, type_name(t.type), block, n_dims > 0 ? ne[0] : 1);
  for (auto it = ne.rbegin(); it != ne.rend(); ++it) t.shape.push_back(int64_t(*it));
  const unsigned __int128 nbytes = numel / unsigned(block) * type_bytes(t.type, block);  // < 2^63 * 4
  t.nbytes = nbytes > UINT64_MAX ? UINT64_MAX : uint64_t(nbytes);  // past any file: refused by data_section()
  t.offset = get<uint64_t>("the data offset");  // relative to the data section until data_section()
  r.tensor_index_.emplace(t.name, r.tensors_.size());
  r.tensors_.push_back(std::move(t));
}

void Parser::data_section() {
  where = "data section";
  const uint64_t a = r.alignment_;
  const uint64_t start = (uint64_t(off) + a - 1) / a * a;  // off < 2^63: no overflow
  r.data_offset_ = start;
  LT_CHECK(r.tensors_.empty() || start <= size, "{}: truncated GGUF: the data section starts at offset {} (after the "
           "tensor infos, aligned to {}), past the end of the file ({} bytes)", r.path_, start, a, size);
  std::vector<const TensorEntry*> by_offset;
  for (auto& t : r.tensors_) {
    LT_CHECK(t.offset % a == 0, "{}: GGUF tensor '{}': data offset {} is not a multiple of the alignment {}",
             r.path_, excerpt(t.name), t.offset, a);
    const uint64_t room = size - std::min<uint64_t>(size, start);
    LT_CHECK(t.offset <= room && t.nbytes <= room - t.offset,
             "{}: GGUF tensor '{}' ({} [{}]): its {} bytes at data offset {} end past the end of the file (the data "
             "section holds {} bytes): truncated or damaged file", r.path_, excerpt(t.name), type_name(t.type),
             fmt::join(t.shape, ", "), t.nbytes, t.offset, room);
    t.offset += start;
    t.data = p + t.offset;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* x, auto* y) { return x->offset < y->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const TensorEntry &prev = *by_offset[k - 1], &t = *by_offset[k];
    LT_CHECK(prev.offset + prev.nbytes <= t.offset || t.nbytes == 0 || prev.nbytes == 0,
             "{}: GGUF tensors '{}' (bytes {} to {}) and '{}' (from byte {}) overlap", r.path_, excerpt(prev.name),
             prev.offset, prev.offset + prev.nbytes, excerpt(t.name), t.offset);
  }
}

Reader::Reader(const std::string& path) : path_(path), file_(std::make_shared<MappedFile>(path)) {
  Parser ps{*this, file_->data(), file_->size(), 0, {}};
  uint64_t n_tensors = 0, n_kv = 0;
  ps.header(&n_tensors, &n_kv);
  ps.metadata(n_kv);
  if (const Value* a = find("general.alignment")) {
    LT_CHECK(a->type == ValueType::U32, "{}: general.alignment: expected a u32, found {}", path,
             value_type_name(uint32_t(a->type)));
    LT_CHECK(a->u > 0 && std::has_single_bit(a->u), "{}: general.alignment is {}; expected a power of two", path, a->u);
    alignment_ = a->u;
  }
  for (uint64_t k = 0; k < n_tensors; ++k) ps.tensor_info(k);
  ps.data_section();
}

const Value* Reader::find(std::string_view key) const {
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

const TensorEntry* Reader::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

bool is_integer(ValueType t) {
  return t == ValueType::U8 || t == ValueType::I8 || t == ValueType::U16 || t == ValueType::I16 ||
         t == ValueType::U32 || t == ValueType::I32 || t == ValueType::U64 || t == ValueType::I64;
}
bool is_signed(ValueType t) {
  return t == ValueType::I8 || t == ValueType::I16 || t == ValueType::I32 || t == ValueType::I64;
}

std::string type_of(const Value& v) {
  return v.type == ValueType::Array ? "an array of " + value_type_name(uint32_t(v.elem))
                                    : "a " + value_type_name(uint32_t(v.type));
}

// Element k of a numeric array as stored.
template <class T>
T element(const Value& v, uint64_t k) {
  T x;
  std::memcpy(&x, v.raw + k * sizeof(T), sizeof(T));
  return x;
}

}  // namespace

std::optional<int64_t> Reader::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  LT_CHECK(is_integer(v->type), "{}: GGUF key '{}': expected an integer, found {}", path_, key, type_of(*v));
  if (is_signed(v->type)) return v->i;
  LT_CHECK(v->u <= uint64_t(INT64_MAX), "{}: GGUF key '{}': {} is out of range", path_, key, v->u);
  return int64_t(v->u);
}

std::optional<double> Reader::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  LT_CHECK(v->type == ValueType::F32 || v->type == ValueType::F64, "{}: GGUF key '{}': expected an f32, found {}",
           path_, key, type_of(*v));
  return v->f;
}

std::optional<bool> Reader::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  LT_CHECK(v->type == ValueType::Bool, "{}: GGUF key '{}': expected a bool, found {}", path_, key, type_of(*v));
  return v->u != 0;
}

std::optional<std::string> Reader::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  LT_CHECK(v->type == ValueType::String, "{}: GGUF key '{}': expected a string, found {}", path_, key, type_of(*v));
  return v->str;
}

const std::vector<std::string>* Reader::get_strings(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return nullptr;
  LT_CHECK(v->type == ValueType::Array && v->elem == ValueType::String,
           "{}: GGUF key '{}': expected an array of string, found {}", path_, key, type_of(*v));
  return &v->strings;
}

std::optional<std::vector<float>> Reader::get_floats(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  LT_CHECK(v->type == ValueType::Array && (v->elem == ValueType::F32 || v->elem == ValueType::F64),
           "{}: GGUF key '{}': expected an array of f32, found {}", path_, key, type_of(*v));
  std::vector<float> out(size_t(v->count));
  for (uint64_t k = 0; k < v->count; ++k) {
    const double x = v->elem == ValueType::F32 ? element<float>(*v, k) : element<double>(*v, k);
    LT_CHECK(!(std::fabs(x) > FLT_MAX) || std::isinf(x), "{}: GGUF key '{}': element {} ({}) is out of the f32 range",
             path_, key, k, x);
    out[k] = float(x);
  }
  return out;
}

std::optional<std::vector<int64_t>> Reader::get_ints(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  LT_CHECK(v->type == ValueType::Array && is_integer(v->elem), "{}: GGUF key '{}': expected an array of integers, "
           "found {}", path_, key, type_of(*v));
  std::vector<int64_t> out(size_t(v->count));
  for (uint64_t k = 0; k < v->count; ++k) {
    switch (v->elem) {
      case ValueType::U8: out[k] = element<uint8_t>(*v, k); break;
      case ValueType::I8: out[k] = element<int8_t>(*v, k); break;
      case ValueType::U16: out[k] = element<uint16_t>(*v, k); break;
      case ValueType::I16: out[k] = element<int16_t>(*v, k); break;
      case ValueType::U32: out[k] = element<uint32_t>(*v, k); break;
      case ValueType::I32: out[k] = element<int32_t>(*v, k); break;
      case ValueType::I64: out[k] = element<int64_t>(*v, k); break;
      default: {
        const uint64_t u = element<uint64_t>(*v, k);
        LT_CHECK(u <= uint64_t(INT64_MAX), "{}: GGUF key '{}': element {} ({}) is out of range", path_, key, k, u);
        out[k] = int64_t(u);
      }
    }
  }
  return out;
}

bool is_gguf_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  std::ifstream f(path, std::ios::binary);
  uint32_t magic = 0;
  return f.read(reinterpret_cast<char*>(&magic), 4) && magic == kMagic;
}

}  // namespace lt::gguf
