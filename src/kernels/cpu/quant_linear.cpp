// The fast linear products against quantized weights (Int8, NF4, FP4, Int4, Q8_0, Q4_0;
// kernels/linear.h), without materializing the decoded matrix: W (OC, IC) is decoded
// kQuantTileRows rows at a time into the tile scratch and multiplied with the f32 GEMM (gemm.h).
// The decoding has a scalar reference and AVX2 / AVX-512 versions (dequant_*.cpp), all giving the
// same bits. The Int8 forward is the LLM.int8 product (int8_linear.cpp). Q8_0 / Q4_0 rows are
// decoded a block at a time per ISA (the plain loop, left scalar by the compiler, took 1.5 ns a
// weight, near the f32 GEMM's time in a 128-token prefill; the AVX-512 one 0.18 ns), and
// multiplied with x quantized to q8_0 and decoded again (kernels/q8_0_act.h), the q8_0 / q4_0
// product's input. On a CPU with AMX int8 the q8_0 / q4_0 forward is the integer product on tiles
// instead (ggml_gemm_amx.cpp), and on one with AVX512-VNNI but no AMX int8 the same product on
// vpdpbusd (ggml_gemm_vnni_avx512.cpp), where the tile scratch holds its operands. Otherwise a
// prefill's tile is split over the team by rows (kSlicedMaxTokens), each thread running its slice alone.
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/decode_gemv.h"
#include "kernels/cpu/dequant_kernels.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_kernels.h"
#include "kernels/ggml_blocks.h"
#include "kernels/q8_0_act.h"

namespace lt::cpu {
namespace {

using dequant::kParallelMin;

// fake_quantize_act_q8_0 (kernels/q8_0_act.h) with the ISA's quantization loop (the same bits)
void fake_quantize_x(Isa isa, const float* x, int64_t n, float* out) {
  if (isa == Isa::Scalar) return fake_quantize_act_q8_0(x, n, out);
  const auto quantize = gemv::act_quantizer(isa);
  int8_t q[32];
  float d;
  for (int64_t b = 0; b < n / 32; ++b) {
    quantize(x + b * 32, 32, q, &d);
    for (int j = 0; j < 32; ++j) out[b * 32 + j] = float(q[j]) * d;
  }
}

// The ISA's version of a decoding loop (dequant_kernels.h), the scalar reference below AVX2.
template <class Fn>
Fn for_isa(Isa isa, Fn scalar, Fn avx2, Fn avx512) {
  return isa == Isa::Avx512 ? avx512 : isa == Isa::Avx2 ? avx2 : scalar;
}

size_t tile_scratch_floats(WeightKind k, int blocksize, bool double_quant, int64_t rows, int64_t cols) {
  if (k == WeightKind::Int8 || ggml_block_kind(k) || !double_quant) return 0;
  return size_t(rows * cols / blocksize + 2);  // blocks touched by `rows` consecutive rows
}

// The decoded scales of blocks [first, first + count) of a double-quantized 4-bit weight.
void decode_scales(float* out, const WeightView& w, int64_t first, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t b = first + i;
    const float a = w.absmax_code_values[w.qabsmax[b]] * w.absmax2[b / 256];  // rounded before the add: no FMA
    out[i] = a + w.offset;
  }
}

struct Tile {
  float* w;      // (kQuantTileRows, IC)
  float* scale;  // dequantize_rows scratch
};

Tile carve_tile(const WeightView& w, int T, void* tile, size_t tile_bytes, const char* who) {
  const size_t need = linear_tile_bytes(w.kind, w.blocksize, w.qabsmax != nullptr, T, w.cols, w.rows);
  LT_CHECK(tile && tile_bytes >= need, "{}: tile scratch of {} bytes, needs {} ({} {} x {}, T={})", who, tile_bytes,
           need, weight_kind_name(w.kind), w.rows, w.cols, T);
  char* p = static_cast<char*>(tile);
  const int64_t rows = std::min<int64_t>(w.rows, kQuantTileRows);
  Tile t;
  t.w = dequant::carve<float>(p, size_t(rows * w.cols));
  t.scale = dequant::carve<float>(p, dequantize_rows_scratch_floats(w, rows));
  return t;
}

// The integer q8_0 / q4_0 product (AMX int8 tiles, or AVX512-VNNI) where the tile scratch holds
// its operands for at least one thread (as many threads as it holds, up to OpenMP's count); false
// (nothing done) where it does not.
using IntegerForwardFn = void (*)(float* y, const float* x, const WeightView& w, int T, void* scratch, int threads);
using IntegerScratchFn = size_t (*)(int T, int IC, int threads);
bool integer_forward(IntegerForwardFn forward, IntegerScratchFn scratch_bytes, float* y, const float* x,
                     const WeightView& w, int T, void* tile, size_t tile_bytes) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(tile), aligned = (at + 63) & ~uintptr_t(63);
  if (!tile || tile_bytes < aligned - at) return false;
  const size_t bytes = tile_bytes - (aligned - at);
  const size_t base = scratch_bytes(T, w.cols, 0);
  const size_t per_thread = scratch_bytes(T, w.cols, 1) - base;
  if (bytes < base + per_thread) return false;
  const int threads = int(std::min<size_t>(size_t(omp_get_max_threads()), (bytes - base) / per_thread));
  forward(y, x, w, T, reinterpret_cast<void*>(aligned), threads);
  return true;
}

// The q8_0 / q4_0 forward as an integer product at the avx512 level: AMX int8 where usable, else
// AVX512-VNNI (the same bits); false where neither runs (then the decoded tiles do).
bool integer_ggml_forward(Isa isa, float* y, const float* x, const WeightView& w, int T, void* tile,
                          size_t tile_bytes) {
  if (!ggml_block_kind(w.kind) || isa != Isa::Avx512) return false;
  if (amx_int8_kernels() &&
      integer_forward(amx::ggml_forward, amx::ggml_forward_scratch_bytes, y, x, w, T, tile, tile_bytes))
    return true;
  return cpu_features().avx512_vnni &&
         integer_forward(vnni::ggml_forward, vnni::ggml_forward_scratch_bytes, y, x, w, T, tile, tile_bytes);
}

}  // namespace

size_t dequantize_rows_scratch_floats(const WeightView& w, int64_t nrows) {
  return tile_scratch_floats(w.kind, w.blocksize, w.qabsmax != nullptr, nrows, w.cols);
}

void dequantize_rows(float* out, const WeightView& w, int64_t row0, int64_t nrows, float* scale_scratch, Isa isa) {
  LT_CHECK(w.quantized(), "dequantize_rows: a {} weight is not quantized", weight_kind_name(w.kind));
  LT_CHECK(row0 >= 0 && nrows >= 0 && row0 + nrows <= w.rows, "dequantize_rows: rows [{}, {}) outside the {} rows "
           "of the {} tensor", row0, row0 + nrows, w.rows, weight_kind_name(w.kind));
  LT_CHECK(cpu_supports(isa), "dequantize_rows: this CPU ({}) cannot run the {} kernels", cpu_features_string(),
           isa_name(isa));
  const int64_t cols = w.cols;
  if (w.kind == WeightKind::Int8) {
    const dequant::Dequant8Fn fn =
        for_isa(isa, dequant::scalar::dequant8, dequant::avx2::dequant8, dequant::avx512::dequant8);
    const auto* q = static_cast<const int8_t*>(w.data);
#pragma omp parallel for schedule(static) if (nrows * cols >= kParallelMin)
    for (int64_t r = 0; r < nrows; ++r) fn(out + r * cols, q + (row0 + r) * cols, w.row_absmax + row0 + r, 1, cols);
    return;
  }
  if (ggml_block_kind(w.kind)) {
    const int64_t nb = cols / 32;  // blocks per row (check_linear: whole blocks)
    const dequant::DequantGgmlFn fn =
        for_isa(isa, dequant::scalar::dequant_ggml, dequant::avx2::dequant_ggml, dequant::avx512::dequant_ggml);
    const bool q4 = w.kind == WeightKind::Q4_0;
#pragma omp parallel for schedule(static) if (nrows * cols >= kParallelMin)
    for (int64_t r = 0; r < nrows; ++r) fn(out + r * cols, ggml_block(w, (row0 + r) * nb), nb, q4);
    return;
  }
  if (nrows == 0) return;
  const int64_t f0 = row0 * cols, n = nrows * cols;
  const int64_t b_first = f0 / w.blocksize, b_last = (f0 + n - 1) / w.blocksize;
  const float* scales = w.absmax + b_first;
  if (w.qabsmax) {
    decode_scales(scale_scratch, w, b_first, b_last - b_first + 1);
    scales = scale_scratch;
  }
  const dequant::Dequant4Fn fn =
      for_isa(isa, dequant::scalar::dequant4, dequant::avx2::dequant4, dequant::avx512::dequant4);
  const auto* codes = static_cast<const uint8_t*>(w.data);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t r = 0; r < nrows; ++r) {
    fn(out + r * cols, codes, f0 + r * cols, cols, scales, b_first, w.blocksize, w.code_values);
    if (w.block_offset)  // asymmetric Int4: the rounded product, then the block's offset
      for (int64_t i = 0; i < cols; ++i) out[r * cols + i] += w.block_offset[(f0 + r * cols + i) / w.blocksize];
  }
}

void quant_forward(Isa isa, float* y, const float* x, const WeightView& w, int T, void* tile, size_t tile_bytes) {
  const int IC = w.cols, OC = w.rows;
  if (w.kind == WeightKind::Int8) {
    int8_linear_forward(y, x, w, T, tile, tile_bytes, isa);
    return;
  }
  if (integer_ggml_forward(isa, y, x, w, T, tile, tile_bytes)) return;
  const Tile t = carve_tile(w, T, tile, tile_bytes, "linear_forward");
  if (ggml_block_kind(w.kind)) {  // the input as the q8_0 / q4_0 product sees it, after the tile
    char* p = reinterpret_cast<char*>(t.w) + dequant::align64(size_t(std::min(kQuantTileRows, OC)) * IC * 4);
    float* xf = dequant::carve<float>(p, size_t(T) * IC);
    fake_quantize_x(isa, x, int64_t(T) * IC, xf);
    x = xf;
  }
  const int team = omp_get_max_threads();
  const bool sliced = team > 1 && ggml_block_kind(w.kind) && T <= kSlicedMaxTokens;
  for (int o0 = 0; o0 < OC; o0 += kQuantTileRows) {
    const int rows = std::min(kQuantTileRows, OC - o0);
    if (!sliced) {
      dequantize_rows(t.w, w, o0, rows, t.scale, isa);
      gemm_f32(false, true, T, rows, IC, 1.0f, x, IC, t.w, IC, 0.0f, y + o0, OC);
      continue;
    }
    for_row_slices(rows, team, [&](int r0, int n) {  // one thread's rows of the tile: decoded and multiplied by it
      float* wt = t.w + size_t(r0) * IC;
      dequantize_rows(wt, w, o0 + r0, n, nullptr, isa);
      gemm_f32(false, true, T, n, IC, 1.0f, x, IC, wt, IC, 0.0f, y + o0 + r0, OC);
    });
  }
}

void quant_backward_input(Isa isa, float* dx, const float* dy, const WeightView& w, int T, void* tile,
                          size_t tile_bytes) {
  const int IC = w.cols, OC = w.rows;
  const Tile t = carve_tile(w, T, tile, tile_bytes, "linear_backward_input");
  for (int o0 = 0; o0 < OC; o0 += kQuantTileRows) {
    const int rows = std::min(kQuantTileRows, OC - o0);
    dequantize_rows(t.w, w, o0, rows, t.scale, isa);
    // dx += dy[:, o0:o0+rows] · W[o0:o0+rows, :]
    gemm_f32(false, false, T, IC, rows, 1.0f, dy + o0, OC, t.w, IC, 1.0f, dx, IC);
  }
}

}  // namespace lt::cpu

namespace lt {

size_t linear_tile_bytes(WeightKind k, int blocksize, bool double_quant, int T, int IC, int OC) {
  using cpu::dequant::align64;
  if (k == WeightKind::F16) return size_t(std::min(kHalfTileRows, OC)) * IC * sizeof(float);
  if (k == WeightKind::F32 || k == WeightKind::BF16) return 0;
  if (ggml_block_kind(k))  // decoded rows, then x quantized (decode: codes and scales; prefill: as floats), or
    return std::max(       // at least the VNNI product's operands for one thread (and the alignment)
        align64(size_t(std::min<int64_t>(OC, kQuantTileRows) * IC) * 4) + align64(size_t(T) * IC * 4),
        cpu::vnni::ggml_forward_scratch_bytes(T, IC, 1) + 64);
  LT_CHECK(k == WeightKind::Int8 || (blocksize >= 1 && (blocksize & (blocksize - 1)) == 0),
           "linear_tile_bytes: {} block size {} is not a power of two", weight_kind_name(k), blocksize);
  const int64_t rows = std::min<int64_t>(OC, kQuantTileRows);
  const size_t scales = cpu::tile_scratch_floats(k, blocksize, double_quant, rows, IC);
  const size_t tiled = align64(size_t(rows * IC) * 4) + align64(scales * 4);
  if (k != WeightKind::Int8) return tiled;
  return std::max(tiled, cpu::int8_linear_workspace_bytes(T, IC, OC));
}

}  // namespace lt
