// `leantune quant-dump --in x.safetensors [--tensor NAME] --type nf4|fp4|int8 [--blocksize 64]
// [--double-quant] [--mean-threads N] --out q.safetensors`: quantizes one f32/f16/bf16 tensor
// (its last dimension = columns) and writes every part of the result, the code tables and the
// dequantized tensor (reference and tiled fast path) so tests can compare them with bitsandbytes.
// Output tensors: codes (U8, packed) + absmax (F32), or qabsmax (U8) + absmax2 (F32) + offset
// (F32 [1]) + code2 (F32 [256]) with --double-quant; code (F32 [16]); qweight (I8) + row_absmax
// (F32) for int8; dequant and dequant_tiles (F32, the input's shape).
#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "commands.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "kernels/cpu/linear_kernels.h"
#include "quant/quant4.h"
#include "quant/quant_tensor.h"

namespace lt::cli {
namespace {

const TensorInfo& pick_tensor(const TensorSet& set, const std::string& path, const std::string& name) {
  if (!name.empty()) {
    const TensorInfo* t = set.find(name);
    LT_CHECK(t, "{}: no tensor named '{}'", path, name);
    return *t;
  }
  LT_CHECK(set.all().size() == 1, "{}: holds {} tensors; say which one with --tensor", path, set.all().size());
  return set.all().begin()->second;
}

TensorInfo out_tensor(const std::string& name, DType dt, std::vector<int64_t> shape, const void* data) {
  TensorInfo t;
  t.name = name;
  t.dtype = dt;
  t.shape = std::move(shape);
  t.data = data;
  t.nbytes = size_t(t.numel()) * dtype_size(dt);
  return t;
}

}  // namespace

void add_quant_command(CLI::App& app) {
  struct Args { std::string in, tensor, type = "nf4", out; int blocksize = 64; bool dq = false; int mean_threads = 1; };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand("quant-dump", "Quantize one tensor (nf4/fp4/int8) and write all its parts");
  c->add_option("--in", a->in, "input .safetensors")->required();
  c->add_option("--tensor", a->tensor, "tensor name (default: the file's only tensor)");
  c->add_option("--type", a->type, "nf4, fp4 or int8");
  c->add_option("--blocksize", a->blocksize, "4-bit block size: a power of two from 64 to 4096");
  c->add_flag("--double-quant", a->dq, "quantize the absmax values to 8 bits (4-bit types)");
  c->add_option("--mean-threads", a->mean_threads, "torch thread count whose mean the double-quant offset reproduces");
  c->add_option("--out", a->out, "output .safetensors")->required();
  c->callback([a] {
    TensorSet set;
    load_safetensors(a->in, set);
    const TensorInfo& src = pick_tensor(set, a->in, a->tensor);
    LT_CHECK(src.dtype == DType::F32 || src.dtype == DType::F16 || src.dtype == DType::BF16,
             "{}: tensor '{}' is {}; quant-dump quantizes F32, F16 or BF16 tensors (a U8/I8 tensor is already "
             "quantized)", a->in, src.name, dtype_name(src.dtype));
    LT_CHECK(!src.shape.empty() && src.numel() > 0, "{}: tensor '{}' is empty or a scalar", a->in, src.name);
    const int64_t cols = src.shape.back(), rows = src.numel() / cols;
    std::vector<float> w(size_t(src.numel()));
    convert_to_f32(w.data(), src.data, src.dtype, w.size());

    QuantSpec spec{parse_quant_type(a->type), a->blocksize, a->dq};
    if (spec.type == QuantType::Int8) spec.blocksize = 64;  // unused
    std::vector<uint8_t> storage(quant_storage_bytes(spec, rows, cols) + 64);
    void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t(63));
    const QuantTensor q = quantize_weight(aligned, storage.size() - 64, w.data(), rows, cols, spec, a->mean_threads);

    std::vector<float> deq(w.size()), tiles(w.size());
    dequantize_weight(deq.data(), q);
    const int64_t tile_rows = std::min<int64_t>(rows, kQuantTileRows);
    const WeightView view = weight_view(q, 0.0f);  // the fast path's tile decoding, as the linear op runs it
    std::vector<float> scratch(cpu::dequantize_rows_scratch_floats(view, tile_rows) + 1);
    for (int64_t r0 = 0; r0 < rows; r0 += tile_rows)
      cpu::dequantize_rows(tiles.data() + r0 * cols, view, r0, std::min(tile_rows, rows - r0), scratch.data(),
                           cpu_isa());

    std::vector<TensorInfo> out;
    const int64_t n = q.numel();
    const float offset = q.offset;
    if (spec.type == QuantType::Int8) {
      out.push_back(out_tensor("qweight", DType::I8, {rows, cols}, q.qweight));
      out.push_back(out_tensor("row_absmax", DType::F32, {rows}, q.row_absmax));
    } else {
      out.push_back(out_tensor("codes", DType::U8, {(n + 1) / 2}, q.codes));
      out.push_back(out_tensor("code", DType::F32, {16}, code4_table(spec.type)));
      if (!spec.double_quant) {
        out.push_back(out_tensor("absmax", DType::F32, {q.nblocks()}, q.absmax));
      } else {
        out.push_back(out_tensor("qabsmax", DType::U8, {q.nblocks()}, q.qabsmax));
        out.push_back(out_tensor("absmax2", DType::F32, {q.nblocks2()}, q.absmax2));
        out.push_back(out_tensor("offset", DType::F32, {1}, &offset));
        out.push_back(out_tensor("code2", DType::F32, {256}, dynamic_map_signed()));
      }
    }
    out.push_back(out_tensor("dequant", DType::F32, src.shape, deq.data()));
    out.push_back(out_tensor("dequant_tiles", DType::F32, src.shape, tiles.data()));
    save_safetensors(a->out, out, {{"type", quant_type_name(spec.type)}, {"blocksize", std::to_string(spec.blocksize)},
                                   {"double_quant", spec.double_quant ? "1" : "0"}, {"isa", isa_name(cpu_isa())}});
    fmt::print("{}: {} {} x {} -> {} ({} bytes)\n", src.name, quant_type_name(spec.type), rows, cols, a->out,
               quant_storage_bytes(spec, rows, cols));
  });
}

}  // namespace lt::cli
