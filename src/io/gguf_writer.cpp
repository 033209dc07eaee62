// GGUF v3 serialization: header, key/values, tensor infos, 32-byte aligned data.
#include "io/gguf_writer.h"

#include <bit>
#include <cerrno>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/atomic_file.h"

static_assert(std::endian::native == std::endian::little, "the GGUF writer assumes a little-endian host");

namespace lt::gguf {

namespace {

// gguf_type of metadata values
constexpr uint32_t kU32 = uint32_t(ValueType::U32), kI32 = uint32_t(ValueType::I32), kF32 = uint32_t(ValueType::F32),
                   kBool = uint32_t(ValueType::Bool), kString = uint32_t(ValueType::String),
                   kArray = uint32_t(ValueType::Array);

template <class T>
void put(std::vector<uint8_t>& b, T v) {
  uint8_t tmp[sizeof(T)];
  std::memcpy(tmp, &v, sizeof(T));
  b.insert(b.end(), tmp, tmp + sizeof(T));
}

void put_str(std::vector<uint8_t>& b, const std::string& s) {
  put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

uint64_t align_up(uint64_t x) { return (x + kAlignment - 1) / kAlignment * kAlignment; }

void write_all(std::FILE* f, const void* p, size_t n, const std::string& what) {
  if (n == 0) return;
  LT_CHECK(std::fwrite(p, 1, n, f) == n, "writing the GGUF {} failed: {}", what, std::strerror(errno));
}

}  // namespace

void Writer::key(const std::string& k, uint32_t vtype) {
  put_str(kv_, k);
  put<uint32_t>(kv_, vtype);
  ++n_kv_;
}

void Writer::add_u32(const std::string& k, uint32_t v) { key(k, kU32); put(kv_, v); }
void Writer::add_i32(const std::string& k, int32_t v) { key(k, kI32); put(kv_, v); }
void Writer::add_f32(const std::string& k, float v) { key(k, kF32); put(kv_, v); }
void Writer::add_bool(const std::string& k, bool v) { key(k, kBool); put<uint8_t>(kv_, v ? 1 : 0); }
void Writer::add_string(const std::string& k, const std::string& v) { key(k, kString); put_str(kv_, v); }

void Writer::add_strings(const std::string& k, const std::vector<std::string>& v) {
  key(k, kArray);
  put<uint32_t>(kv_, kString);
  put<uint64_t>(kv_, v.size());
  for (const auto& s : v) put_str(kv_, s);
}

void Writer::add_f32s(const std::string& k, const std::vector<float>& v) {
  key(k, kArray);
  put<uint32_t>(kv_, kF32);
  put<uint64_t>(kv_, v.size());
  for (float x : v) put(kv_, x);
}

void Writer::add_i32s(const std::string& k, const std::vector<int32_t>& v) {
  key(k, kArray);
  put<uint32_t>(kv_, kI32);
  put<uint64_t>(kv_, v.size());
  for (int32_t x : v) put(kv_, x);
}

void Writer::add_tensor(const std::string& name, const std::vector<int64_t>& shape, const float* data,
                        TensorType type) {
  LT_CHECK(!shape.empty() && shape.size() <= 4, "GGUF tensor {}: {} dimensions (expected 1 to 4)", name,
           shape.size());
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const bool block = type == TensorType::Q8_0 || type == TensorType::Q4_0;
  LT_CHECK(!block || shape.back() % kBlock == 0,
           "GGUF tensor {}: row length {} is not a multiple of {}, so it cannot be stored as {}", name,
           shape.back(), kBlock, type_name(type));
  Tensor t{name, shape, type, std::vector<uint8_t>(type_bytes(type, n))};
  uint8_t* out = t.bytes.data();
  switch (type) {
    case TensorType::F32: std::memcpy(out, data, t.bytes.size()); break;
    case TensorType::F16:
      for (int64_t i = 0; i < n; ++i) { uint16_t h = f32_to_f16(data[i]); std::memcpy(out + 2 * i, &h, 2); }
      break;
    case TensorType::BF16:
      for (int64_t i = 0; i < n; ++i) { uint16_t h = f32_to_bf16(data[i]); std::memcpy(out + 2 * i, &h, 2); }
      break;
    case TensorType::Q8_0: quantize_q8_0(data, n, out); break;
    case TensorType::Q4_0: quantize_q4_0(data, n, out); break;
  }
  tensors_.push_back(std::move(t));
}

void Writer::write(const std::string& path) const {
  std::vector<uint8_t> head;
  put<uint32_t>(head, kMagic);
  put<uint32_t>(head, 3);            // version
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, n_kv_);
  head.insert(head.end(), kv_.begin(), kv_.end());
  uint64_t offset = 0;  // of each tensor's data, from the start of the data section
  for (const auto& t : tensors_) {
    put_str(head, t.name);
    put<uint32_t>(head, uint32_t(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put<uint64_t>(head, uint64_t(*it));
    put<uint32_t>(head, uint32_t(t.type));
    put<uint64_t>(head, offset);
    offset = align_up(offset + t.bytes.size());
  }
  head.resize(align_up(head.size()), 0);
  write_file_atomic(path, [&](std::FILE* f) {
    write_all(f, head.data(), head.size(), "header");
    static const uint8_t zeros[kAlignment] = {};
    for (const auto& t : tensors_) {
      write_all(f, t.bytes.data(), t.bytes.size(), "tensor " + t.name);
      write_all(f, zeros, align_up(t.bytes.size()) - t.bytes.size(), "padding");
    }
  });
}

}  // namespace lt::gguf
