// Tiled dequantize-and-GEMM linear layers over QuantTensor weights (see quant_linear.h).
#include "quant/quant_linear.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/gemm.h"
#include "quant/int8.h"
#include "quant/quant4.h"
#include "quant/quant_kernels.h"

namespace lt {
namespace {

using quant::kParallelMin;

quant::Dequant4Fn dequant4_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return quant::avx512::dequant4;
    case Isa::Avx2: return quant::avx2::dequant4;
    case Isa::Scalar: break;
  }
  return quant::scalar::dequant4;
}

quant::Dequant8Fn dequant8_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return quant::avx512::dequant8;
    case Isa::Avx2: return quant::avx2::dequant8;
    case Isa::Scalar: break;
  }
  return quant::scalar::dequant8;
}

size_t tile_scratch_floats(const QuantSpec& spec, int64_t rows, int64_t cols) {
  if (spec.type == QuantType::Int8 || !spec.double_quant) return 0;
  return size_t(rows * cols / spec.blocksize + 2);  // blocks touched by `rows` consecutive rows
}

}  // namespace

size_t dequantize_rows_scratch_floats(const QuantTensor& w, int64_t nrows) {
  return tile_scratch_floats(w.spec(), nrows, w.cols);
}

void dequantize_rows(float* out, const QuantTensor& w, int64_t row0, int64_t nrows, float* scale_scratch, Isa isa) {
  LT_CHECK(row0 >= 0 && nrows >= 0 && row0 + nrows <= w.rows, "dequantize_rows: rows [{}, {}) outside the {} rows "
           "of the {} tensor", row0, row0 + nrows, w.rows, quant_type_name(w.type));
  LT_CHECK(int(isa) <= int(cpu_isa()), "dequantize_rows: {} kernels are not usable here (best: {})", isa_name(isa),
           isa_name(cpu_isa()));
  const int64_t cols = w.cols;
  if (w.type == QuantType::Int8) {
    const quant::Dequant8Fn fn = dequant8_for(isa);
#pragma omp parallel for schedule(static) if (nrows * cols >= kParallelMin)
    for (int64_t r = 0; r < nrows; ++r) fn(out + r * cols, w.qweight + (row0 + r) * cols, w.row_absmax + row0 + r, 1, cols);
    return;
  }
  if (nrows == 0) return;
  const int64_t f0 = row0 * cols, n = nrows * cols;
  const int64_t b_first = f0 / w.blocksize, b_last = (f0 + n - 1) / w.blocksize;
  const float* scales = w.absmax + b_first;
  if (w.double_quant) {
    double_dequantize(scale_scratch, w.qabsmax, w.absmax2, w.offset, b_first, b_last - b_first + 1);
    scales = scale_scratch;
  }
  const quant::Dequant4Fn fn = dequant4_for(isa);
  const float* table = code4_table(w.type);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t r = 0; r < nrows; ++r) fn(out + r * cols, w.codes, f0 + r * cols, cols, scales, b_first, w.blocksize, table);
}

size_t quant_workspace_bytes(const QuantSpec& spec, int T, int IC, int OC) {
  check_quant_spec(spec);
  const int64_t rows = std::min<int64_t>(OC, kQuantTileRows);
  const size_t tiled = quant::align64(size_t(rows * IC) * 4) + quant::align64(tile_scratch_floats(spec, rows, IC) * 4);
  if (spec.type != QuantType::Int8) return tiled;
  return std::max(tiled, int8_linear_workspace_bytes(T, IC, OC));
}

namespace {

struct Tile {
  float* w;      // (kQuantTileRows, IC)
  float* scale;  // dequantize_rows scratch
};

Tile carve_tile(const QuantTensor& w, int T, void* workspace, size_t workspace_bytes, const char* who) {
  const size_t need = quant_workspace_bytes(w.spec(), T, int(w.cols), int(w.rows));
  LT_CHECK(workspace_bytes >= need, "{}: workspace of {} bytes, needs {} ({} {} x {}, T={})", who, workspace_bytes,
           need, quant_type_name(w.type), w.rows, w.cols, T);
  char* p = static_cast<char*>(workspace);
  const int64_t rows = std::min<int64_t>(w.rows, kQuantTileRows);
  Tile t;
  t.w = quant::carve<float>(p, size_t(rows * w.cols));
  t.scale = quant::carve<float>(p, dequantize_rows_scratch_floats(w, rows));
  return t;
}

}  // namespace

void quant_linear_forward(float* y, const float* x, const QuantTensor& w, int T, void* workspace,
                          size_t workspace_bytes, float int8_threshold) {
  const int IC = int(w.cols), OC = int(w.rows);
  if (w.type == QuantType::Int8) {
    int8_linear_forward(y, x, w.qweight, w.row_absmax, T, IC, OC, int8_threshold, workspace, workspace_bytes,
                        int8_vnni_available());
    return;
  }
  const Tile tile = carve_tile(w, T, workspace, workspace_bytes, "quant_linear_forward");
  const Isa isa = cpu_isa();
  for (int o0 = 0; o0 < OC; o0 += int(kQuantTileRows)) {
    const int rows = std::min(int(kQuantTileRows), OC - o0);
    dequantize_rows(tile.w, w, o0, rows, tile.scale, isa);
    cpu::gemm_f32(false, true, T, rows, IC, 1.0f, x, IC, tile.w, IC, 0.0f, y + o0, OC);
  }
}

void quant_linear_backward_input(float* dx, const float* dy, const QuantTensor& w, int T, void* workspace,
                                 size_t workspace_bytes, float beta) {
  const int IC = int(w.cols), OC = int(w.rows);
  const Tile tile = carve_tile(w, T, workspace, workspace_bytes, "quant_linear_backward_input");
  const Isa isa = cpu_isa();
  for (int o0 = 0; o0 < OC; o0 += int(kQuantTileRows)) {
    const int rows = std::min(int(kQuantTileRows), OC - o0);
    dequantize_rows(tile.w, w, o0, rows, tile.scale, isa);
    // dx += dy[:, o0:o0+rows] · W[o0:o0+rows, :]
    cpu::gemm_f32(false, false, T, IC, rows, 1.0f, dy + o0, OC, tile.w, IC, o0 == 0 ? beta : 1.0f, dx, IC);
  }
}

}  // namespace lt
