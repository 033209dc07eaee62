// quant_dump.h: quantize_weight, dequantize_weight and the tiled dequantization of one tensor,
// every part saved under a fixed name.
#include "leantune/quant_dump.h"

#include <vector>

#include "api/guard.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "kernels/cpu/linear_kernels.h"
#include "quant/quant4.h"
#include "quant/quant_tensor.h"

namespace leantune {

namespace {

const lt::TensorInfo& pick_tensor(const lt::TensorSet& set, const std::string& path, const std::string& name) {
  if (!name.empty()) {
    const lt::TensorInfo* t = set.find(name);
    LT_CHECK(t, "{}: no tensor named '{}'", path, name);
    return *t;
  }
  LT_CHECK(set.all().size() == 1, "{}: holds {} tensors; say which one with --tensor", path, set.all().size());
  return set.all().begin()->second;
}

lt::TensorInfo out_tensor(const std::string& name, lt::DType dt, std::vector<int64_t> shape, const void* data) {
  lt::TensorInfo t;
  t.name = name;
  t.dtype = dt;
  t.shape = std::move(shape);
  t.data = data;
  t.nbytes = size_t(t.numel()) * lt::dtype_size(dt);
  return t;
}

// The parts of q: int8 weights and row scales, or 4-bit codes, code table and (double-quantized) scales.
void add_parts(std::vector<lt::TensorInfo>& out, const lt::QuantTensor& q, const float* offset) {
  const int64_t n = q.numel();
  if (q.type == lt::QuantType::Int8) {
    out.push_back(out_tensor("qweight", lt::DType::I8, {q.rows, q.cols}, q.qweight));
    out.push_back(out_tensor("row_absmax", lt::DType::F32, {q.rows}, q.row_absmax));
    return;
  }
  out.push_back(out_tensor("codes", lt::DType::U8, {(n + 1) / 2}, q.codes));
  out.push_back(out_tensor("code", lt::DType::F32, {16}, lt::code4_table(q.type)));
  if (!q.double_quant) {
    out.push_back(out_tensor("absmax", lt::DType::F32, {q.nblocks()}, q.absmax));
    return;
  }
  out.push_back(out_tensor("qabsmax", lt::DType::U8, {q.nblocks()}, q.qabsmax));
  out.push_back(out_tensor("absmax2", lt::DType::F32, {q.nblocks2()}, q.absmax2));
  out.push_back(out_tensor("offset", lt::DType::F32, {1}, offset));
  out.push_back(out_tensor("code2", lt::DType::F32, {256}, lt::dynamic_map_signed()));
}

}  // namespace

QuantDumpResult quant_dump(const std::string& in, const std::string& out_path, const QuantDumpOptions& o) {
  return detail::guard([&] {
    lt::TensorSet set;
    lt::load_safetensors(in, set);
    const lt::TensorInfo& src = pick_tensor(set, in, o.tensor);
    LT_CHECK(src.dtype == lt::DType::F32 || src.dtype == lt::DType::F16 || src.dtype == lt::DType::BF16,
             "{}: tensor '{}' is {}; quant-dump quantizes F32, F16 or BF16 tensors (a U8/I8 tensor is already "
             "quantized)", in, src.name, lt::dtype_name(src.dtype));
    LT_CHECK(!src.shape.empty() && src.numel() > 0, "{}: tensor '{}' is empty or a scalar", in, src.name);
    const int64_t cols = src.shape.back(), rows = src.numel() / cols;
    std::vector<float> w(size_t(src.numel()));
    lt::convert_to_f32(w.data(), src.data, src.dtype, w.size());

    lt::QuantSpec spec{lt::parse_quant_type(quantization_name(o.type)), o.blocksize, o.double_quant};
    if (spec.type == lt::QuantType::Int8) spec.blocksize = 64;  // unused
    std::vector<uint8_t> storage(lt::quant_storage_bytes(spec, rows, cols) + 64);
    void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t(63));
    const lt::QuantTensor q = lt::quantize_weight(aligned, storage.size() - 64, w.data(), rows, cols, spec,
                                                  o.mean_threads);

    std::vector<float> deq(w.size()), tiles(w.size());
    lt::dequantize_weight(deq.data(), q);
    const int64_t tile_rows = std::min<int64_t>(rows, lt::kQuantTileRows);
    const lt::WeightView view = lt::weight_view(q, 0.0f);  // the fast path's tile decoding, as the linear op runs it
    std::vector<float> scratch(lt::cpu::dequantize_rows_scratch_floats(view, tile_rows) + 1);
    for (int64_t r0 = 0; r0 < rows; r0 += tile_rows)
      lt::cpu::dequantize_rows(tiles.data() + r0 * cols, view, r0, std::min(tile_rows, rows - r0), scratch.data(),
                               lt::cpu_isa());

    std::vector<lt::TensorInfo> out;
    const float offset = q.offset;
    add_parts(out, q, &offset);
    out.push_back(out_tensor("dequant", lt::DType::F32, src.shape, deq.data()));
    out.push_back(out_tensor("dequant_tiles", lt::DType::F32, src.shape, tiles.data()));
    lt::save_safetensors(out_path, out, {{"type", lt::quant_type_name(spec.type)},
                                         {"blocksize", std::to_string(spec.blocksize)},
                                         {"double_quant", spec.double_quant ? "1" : "0"},
                                         {"isa", lt::isa_name(lt::cpu_isa())}});
    return QuantDumpResult{src.name, rows, cols, lt::quant_storage_bytes(spec, rows, cols)};
  });
}

}  // namespace leantune
