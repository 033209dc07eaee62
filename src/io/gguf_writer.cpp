// GGUF v3 serialization (header, key/values, tensor infos, 32-byte aligned data) and ggml's
// reference q8_0 / q4_0 block quantizers (ggml-quants.c quantize_row_q{8,4}_0_ref).
#include "io/gguf_writer.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/atomic_file.h"

static_assert(std::endian::native == std::endian::little, "the GGUF writer assumes a little-endian host");

namespace lt::gguf {

namespace {

// gguf_type of metadata values
enum : uint32_t { kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9, kU64 = 10 };

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

void quantize_q8_0(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / kBlock; ++b, x += kBlock, out += kQ8Bytes) {
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = f32_to_f16(d);
    std::memcpy(out, &dh, 2);
    for (int j = 0; j < kBlock; ++j) out[2 + j] = uint8_t(int8_t(std::roundf(x[j] * id)));
  }
}

void quantize_q4_0(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / kBlock; ++b, x += kBlock, out += kQ4Bytes) {
    float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, with its sign
    for (int j = 0; j < kBlock; ++j)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]), max = x[j];
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = f32_to_f16(d);
    std::memcpy(out, &dh, 2);
    for (int j = 0; j < kBlock / 2; ++j) {  // element j in the low nibble, j + 16 in the high one
      const int lo = std::min(15, int(int8_t(x[j] * id + 8.5f)));
      const int hi = std::min(15, int(int8_t(x[j + kBlock / 2] * id + 8.5f)));
      out[2 + j] = uint8_t(lo | (hi << 4));
    }
  }
}

void dequantize_q8_0(const uint8_t* in, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kBlock; ++b, in += kQ8Bytes, y += kBlock) {
    uint16_t dh;
    std::memcpy(&dh, in, 2);
    const float d = f16_to_f32(dh);
    for (int j = 0; j < kBlock; ++j) y[j] = float(int8_t(in[2 + j])) * d;
  }
}

void dequantize_q4_0(const uint8_t* in, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kBlock; ++b, in += kQ4Bytes, y += kBlock) {
    uint16_t dh;
    std::memcpy(&dh, in, 2);
    const float d = f16_to_f32(dh);
    for (int j = 0; j < kBlock / 2; ++j) {
      y[j] = float((in[2 + j] & 0x0f) - 8) * d;
      y[j + kBlock / 2] = float((in[2 + j] >> 4) - 8) * d;
    }
  }
}

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
  put<uint32_t>(head, 0x46554747u);  // "GGUF"
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
