// QuantTensor storage sizes, quantization into caller storage, full dequantization and validation
// of parts read from files (see quant_tensor.h).
#include "quant/quant_tensor.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "quant/int4.h"
#include "quant/int8.h"
#include "quant/q4_0.h"
#include "quant/q8_0.h"
#include "quant/quant4.h"
#include "quant/quant_layout.h"

namespace lt {

// the bytes of n elements (whole blocks of 32) of llama.cpp's q8_0 / q4_0
static size_t ggml_bytes(QuantType t, int64_t n) {
  return size_t(n / 32) * (t == QuantType::Q8_0 ? kQ8BlockBytes : kQ4_0BlockBytes);
}
static void quantize_ggml(QuantType t, const float* x, int64_t n, uint8_t* out) {
  (t == QuantType::Q8_0 ? quantize_q8_0 : quantize_q4_0)(x, n, out);
}

size_t quant_storage_bytes(const QuantSpec& spec, int64_t rows, int64_t cols) {
  using quant::align64;
  check_quant_spec(spec);
  LT_CHECK(rows > 0 && cols > 0, "quantized tensor: shape ({}, {}) must be positive", rows, cols);
  const size_t n = size_t(rows * cols);
  if (spec.type == QuantType::Int8) return align64(n) + align64(size_t(rows) * 4);
  if (is_ggml_block(spec.type)) {
    LT_CHECK(cols % kQ8Block == 0, "{}: a ({}, {}) matrix's rows are not whole blocks of {}; quantize it to another "
             "format (int8, int4) or keep it f32", quant_type_name(spec.type), rows, cols, kQ8Block);
    return align64(ggml_bytes(spec.type, int64_t(n)));
  }
  const size_t nblocks = (n + spec.blocksize - 1) / spec.blocksize;
  if (spec.type == QuantType::Int4Asym) return align64((n + 1) / 2) + 2 * align64(nblocks * 4);
  if (!spec.double_quant) return align64((n + 1) / 2) + align64(nblocks * 4);
  return align64((n + 1) / 2) + align64(nblocks) + align64((nblocks + 255) / 256 * 4);
}

QuantTensor quantize_weight(void* storage, size_t storage_bytes, const float* w, int64_t rows, int64_t cols,
                            const QuantSpec& spec, int mean_threads) {
  const size_t need = quant_storage_bytes(spec, rows, cols);
  LT_CHECK(storage_bytes >= need, "quantize_weight: storage of {} bytes, {} ({} x {}) needs {}", storage_bytes,
           quant_type_name(spec.type), rows, cols, need);
  QuantTensor q;
  q.type = spec.type;
  q.rows = rows;
  q.cols = cols;
  q.blocksize = spec.blocksize;
  q.double_quant = spec.double_quant;
  char* p = static_cast<char*>(storage);
  if (spec.type == QuantType::Int8) {
    int8_t* qw = quant::carve<int8_t>(p, size_t(rows * cols));
    float* am = quant::carve<float>(p, size_t(rows));
    quantize_int8_rows(qw, am, w, rows, cols);
    q.qweight = qw;
    q.row_absmax = am;
    return q;
  }
  if (is_ggml_block(spec.type)) {
    uint8_t* blocks = quant::carve<uint8_t>(p, ggml_bytes(spec.type, q.numel()));
    quantize_ggml(spec.type, w, q.numel(), blocks);
    q.codes = blocks;
    return q;
  }
  uint8_t* codes = quant::carve<uint8_t>(p, size_t(q.numel() + 1) / 2);
  q.codes = codes;
  if (is_int4(spec.type)) {
    float* d = quant::carve<float>(p, size_t(q.nblocks()));
    float* lo = spec.type == QuantType::Int4Asym ? quant::carve<float>(p, size_t(q.nblocks())) : nullptr;
    quantize_int4(codes, d, lo, w, q.numel(), spec.blocksize, spec.type);
    q.absmax = d;
    q.mins = lo;
    return q;
  }
  if (!spec.double_quant) {
    float* am = quant::carve<float>(p, size_t(q.nblocks()));
    quantize_4bit(codes, am, w, q.numel(), spec.blocksize, spec.type);
    q.absmax = am;
    return q;
  }
  std::vector<float> am(size_t(q.nblocks()));  // load-time scratch, not part of the stored tensor
  quantize_4bit(codes, am.data(), w, q.numel(), spec.blocksize, spec.type);
  uint8_t* qam = quant::carve<uint8_t>(p, size_t(q.nblocks()));
  float* am2 = quant::carve<float>(p, size_t(q.nblocks2()));
  q.offset = double_quantize(qam, am2, am.data(), q.nblocks(), mean_threads);
  q.qabsmax = qam;
  q.absmax2 = am2;
  return q;
}

namespace {

constexpr int64_t kChunkFloats = 65536;  // a multiple of every 4-bit block size

int64_t chunk_floats(const QuantSpec& spec, int64_t rows, int64_t cols) {
  if (spec.type == QuantType::Int8) return std::min(rows, std::max<int64_t>(1, kChunkFloats / cols)) * cols;
  return std::min(rows * cols, kChunkFloats);
}

}  // namespace

size_t quantize_chunked_scratch_floats(const QuantSpec& spec, int64_t rows, int64_t cols) {
  check_quant_spec(spec);
  const int64_t n = rows * cols;
  const size_t absmax = spec.double_quant ? size_t((n + spec.blocksize - 1) / spec.blocksize) : 0;
  return size_t(chunk_floats(spec, rows, cols)) + absmax;
}

QuantTensor quantize_weight_chunked(void* storage, size_t storage_bytes, int64_t rows, int64_t cols,
                                    const QuantSpec& spec, float* scratch, size_t scratch_floats,
                                    const QuantChunkReader& read) {
  const size_t need = quant_storage_bytes(spec, rows, cols), need_scratch = quantize_chunked_scratch_floats(spec, rows, cols);
  LT_CHECK(storage_bytes >= need && scratch_floats >= need_scratch, "quantize_weight_chunked: {} ({} x {}) needs {} "
           "bytes of storage and {} floats of scratch, got {} and {}", quant_type_name(spec.type), rows, cols, need,
           need_scratch, storage_bytes, scratch_floats);
  QuantTensor q;
  q.type = spec.type;
  q.rows = rows;
  q.cols = cols;
  q.blocksize = spec.blocksize;
  q.double_quant = spec.double_quant;
  const int64_t n = q.numel(), chunk = chunk_floats(spec, rows, cols);
  float* buf = scratch;  // (chunk)
  char* p = static_cast<char*>(storage);
  if (spec.type == QuantType::Int8) {
    int8_t* qw = quant::carve<int8_t>(p, size_t(n));
    float* am = quant::carve<float>(p, size_t(rows));
    for (int64_t r0 = 0; r0 < rows; r0 += chunk / cols) {
      const int64_t nr = std::min(chunk / cols, rows - r0);
      read(buf, r0 * cols, nr * cols);
      quantize_int8_rows(qw + r0 * cols, am + r0, buf, nr, cols);
    }
    q.qweight = qw;
    q.row_absmax = am;
    return q;
  }
  if (is_ggml_block(spec.type)) {  // chunk: whole blocks (65536 or all of n, a multiple of 32)
    uint8_t* blocks = quant::carve<uint8_t>(p, ggml_bytes(spec.type, n));
    for (int64_t f = 0; f < n; f += chunk) {
      const int64_t cnt = std::min(chunk, n - f);
      read(buf, f, cnt);
      quantize_ggml(spec.type, buf, cnt, blocks + ggml_bytes(spec.type, f));
    }
    q.codes = blocks;
    return q;
  }
  uint8_t* codes = quant::carve<uint8_t>(p, size_t(n + 1) / 2);
  // the f32 absmax values: in the storage, or in the scratch until they are double-quantized
  float* am = spec.double_quant ? scratch + chunk : quant::carve<float>(p, size_t(q.nblocks()));
  float* lo = spec.type == QuantType::Int4Asym ? quant::carve<float>(p, size_t(q.nblocks())) : nullptr;
  for (int64_t f = 0; f < n; f += chunk) {  // chunk is a multiple of the block size (or all of n)
    const int64_t cnt = std::min(chunk, n - f), b = f / spec.blocksize;
    read(buf, f, cnt);
    if (is_int4(spec.type)) quantize_int4(codes + f / 2, am + b, lo ? lo + b : nullptr, buf, cnt, spec.blocksize, spec.type);
    else quantize_4bit(codes + f / 2, am + b, buf, cnt, spec.blocksize, spec.type);
  }
  q.codes = codes;
  q.mins = lo;
  if (!spec.double_quant) {
    q.absmax = am;
    return q;
  }
  uint8_t* qam = quant::carve<uint8_t>(p, size_t(q.nblocks()));
  float* am2 = quant::carve<float>(p, size_t(q.nblocks2()));
  q.offset = double_quantize(qam, am2, am, q.nblocks(), 1);
  q.qabsmax = qam;
  q.absmax2 = am2;
  return q;
}

QuantTensor copy_quant_tensor(void* storage, size_t storage_bytes, const QuantTensor& src) {
  const size_t need = quant_storage_bytes(src.spec(), src.rows, src.cols);
  LT_CHECK(storage_bytes >= need, "copy_quant_tensor: storage of {} bytes, {} ({} x {}) needs {}", storage_bytes,
           quant_type_name(src.type), src.rows, src.cols, need);
  QuantTensor q = src;
  char* p = static_cast<char*>(storage);
  auto copy = [&p]<class T>(const T* from, size_t count) -> const T* {
    T* to = quant::carve<T>(p, count);
    std::copy(from, from + count, to);
    return to;
  };
  if (src.type == QuantType::Int8) {
    q.qweight = copy(src.qweight, size_t(src.numel()));
    q.row_absmax = copy(src.row_absmax, size_t(src.rows));
    return q;
  }
  if (is_ggml_block(src.type)) {
    q.codes = copy(src.codes, ggml_bytes(src.type, src.numel()));
    return q;
  }
  q.codes = copy(src.codes, size_t(src.numel() + 1) / 2);
  if (!src.double_quant) {
    q.absmax = copy(src.absmax, size_t(src.nblocks()));
    if (src.type == QuantType::Int4Asym) q.mins = copy(src.mins, size_t(src.nblocks()));
    return q;
  }
  q.qabsmax = copy(src.qabsmax, size_t(src.nblocks()));
  q.absmax2 = copy(src.absmax2, size_t(src.nblocks2()));
  return q;
}

WeightKind weight_kind(QuantType t) {
  switch (t) {
    case QuantType::NF4: return WeightKind::NF4;
    case QuantType::FP4: return WeightKind::FP4;
    case QuantType::Int4:
    case QuantType::Int4Asym: return WeightKind::Int4;
    case QuantType::Q8_0: return WeightKind::Q8_0;
    case QuantType::Q4_0: return WeightKind::Q4_0;
    case QuantType::Int8: break;
  }
  return WeightKind::Int8;
}

WeightView weight_view(const QuantTensor& q, float int8_threshold) {
  LT_CHECK(q.rows <= INT32_MAX && q.cols <= INT32_MAX, "weight_view: a {} x {} matrix is too large for the linear op",
           q.rows, q.cols);
  WeightView v;
  v.rows = int(q.rows);
  v.cols = int(q.cols);
  if (q.type == QuantType::Int8) {
    v.kind = WeightKind::Int8;
    v.data = q.qweight;
    v.row_absmax = q.row_absmax;
    v.int8_threshold = int8_threshold;
    return v;
  }
  if (is_ggml_block(q.type)) {
    v.kind = weight_kind(q.type);
    v.data = q.codes;
    v.blocksize = kQ8Block;
    return v;
  }
  v.kind = weight_kind(q.type);
  v.data = q.codes;
  v.blocksize = q.blocksize;
  v.code_values = is_int4(q.type) ? int4_code_table(q.type) : code4_table(q.type);
  if (!q.double_quant) {
    v.absmax = q.absmax;
    v.block_offset = q.type == QuantType::Int4Asym ? q.mins : nullptr;
    return v;
  }
  v.qabsmax = q.qabsmax;
  v.absmax2 = q.absmax2;
  v.absmax_code_values = dynamic_map_signed();
  v.offset = q.offset;
  return v;
}

void dequantize_weight(float* out, const QuantTensor& q) {
  if (q.type == QuantType::Int8) {
    dequantize_int8_rows(out, q.qweight, q.row_absmax, q.rows, q.cols);
    return;
  }
  if (is_ggml_block(q.type)) {
    (q.type == QuantType::Q8_0 ? dequantize_q8_0 : dequantize_q4_0)(q.codes, q.numel(), out);
    return;
  }
  if (is_int4(q.type)) {
    dequantize_int4(out, q.codes, q.absmax, q.mins, q.numel(), q.blocksize, q.type);
    return;
  }
  if (!q.double_quant) {
    dequantize_4bit(out, q.codes, q.absmax, q.numel(), q.blocksize, q.type);
    return;
  }
  std::vector<float> am(size_t(q.nblocks()));
  double_dequantize(am.data(), q.qabsmax, q.absmax2, q.offset, 0, q.nblocks());
  dequantize_4bit(out, q.codes, am.data(), q.numel(), q.blocksize, q.type);
}

namespace {

void check_part(bool present, int64_t count, int64_t expected, std::string_view name, std::string_view part,
                std::string_view what) {
  LT_CHECK(present, "quantized tensor '{}': missing its {} ({} expected)", name, part, what);
  LT_CHECK(count == expected, "quantized tensor '{}': {} has {} values, expected {} ({}); the file is truncated "
           "or the part belongs to another tensor", name, part, count, expected, what);
}

}  // namespace

QuantTensor quant_tensor_view(const QuantSpec& spec, int64_t rows, int64_t cols, const QuantParts& parts,
                              std::string_view name) {
  check_quant_spec(spec);
  LT_CHECK(rows > 0 && cols > 0, "quantized tensor '{}': shape ({}, {}) must be positive", name, rows, cols);
  QuantTensor q;
  q.type = spec.type;
  q.rows = rows;
  q.cols = cols;
  q.blocksize = spec.blocksize;
  q.double_quant = spec.double_quant;
  const std::string shape = fmt::format("{} x {}", rows, cols);
  if (spec.type == QuantType::Int8) {
    check_part(parts.qweight, parts.qweight_count, q.numel(), name, "int8 weight", "one per element");
    check_part(parts.row_absmax, parts.row_absmax_count, rows, name, "row scales", "one per row");
    q.qweight = parts.qweight;
    q.row_absmax = parts.row_absmax;
    return q;
  }
  if (is_ggml_block(spec.type)) {
    const char* t = quant_type_name(spec.type);
    LT_CHECK(cols % kQ8Block == 0, "quantized tensor '{}': a {} matrix of {} columns; rows must be whole blocks of "
             "{}", name, t, cols, kQ8Block);
    check_part(parts.codes, parts.codes_count, int64_t(ggml_bytes(spec.type, q.numel())), name,
               std::string(t) + " blocks", fmt::format("{} bytes per 32 elements of a {} matrix",
               ggml_bytes(spec.type, 32), shape));
    q.codes = parts.codes;
    return q;
  }
  const std::string per_block = fmt::format("one per {}-element block of {} elements", spec.blocksize, q.numel());
  check_part(parts.codes, parts.codes_count, (q.numel() + 1) / 2, name, "4-bit codes",
             "two per byte for a " + shape + " matrix");
  q.codes = parts.codes;
  if (!spec.double_quant) {
    check_part(parts.absmax, parts.absmax_count, q.nblocks(), name, is_int4(spec.type) ? "scales" : "absmax scales",
               per_block);
    q.absmax = parts.absmax;
    if (spec.type == QuantType::Int4Asym) {
      check_part(parts.mins, parts.mins_count, q.nblocks(), name, "block minima", per_block);
      q.mins = parts.mins;
    }
    return q;
  }
  check_part(parts.qabsmax, parts.qabsmax_count, q.nblocks(), name, "8-bit absmax codes", per_block);
  check_part(parts.absmax2, parts.absmax2_count, q.nblocks2(), name, "second-level scales",
             "one per 256 absmax values");
  LT_CHECK(std::isfinite(parts.offset), "quantized tensor '{}': double-quant offset {} is not finite", name,
           parts.offset);
  q.qabsmax = parts.qabsmax;
  q.absmax2 = parts.absmax2;
  q.offset = parts.offset;
  return q;
}

}  // namespace lt
