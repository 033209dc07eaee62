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
// With WeightView::bf16_products (QLoRA in bf16) kQuant16TileRows rows at a time are decoded through
// an L1 buffer and rounded into a bf16 tile, multiplied with the bf16 GEMM (AMX where present) against
// x16 or the rounded dout: a 4-bit kind's forward and every kind's backward.
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/convert.h"
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

// The tile scratch as up to max_rows decoded rows of element type E (float: kQuantTileRows; uint16_t,
// bf16 products: kQuant16TileRows), then the decoded scales
template <class E>
struct Tile {
  E* w;          // (max_rows, IC)
  float* scale;  // dequantize_rows scratch
};

template <class E>
Tile<E> carve_tile(const WeightView& w, int max_rows, size_t need, void* tile, size_t tile_bytes, const char* who) {
  LT_CHECK(tile && tile_bytes >= need, "{}: tile scratch of {} bytes, needs {} ({} {} x {}{})", who, tile_bytes, need,
           weight_kind_name(w.kind), w.rows, w.cols, w.bf16_products ? ", bf16 products" : "");
  char* p = static_cast<char*>(tile);
  const int64_t rows = std::min<int64_t>(w.rows, max_rows);
  Tile<E> t;
  t.w = dequant::carve<E>(p, size_t(rows * w.cols));
  t.scale = dequant::carve<float>(p, dequantize_rows_scratch_floats(w, rows));
  return t;
}

Tile<float> carve_tile(const WeightView& w, int T, void* tile, size_t tile_bytes, const char* who) {
  const size_t need = linear_tile_bytes(w.kind, w.blocksize, w.qabsmax != nullptr, T, w.cols, w.rows);
  return carve_tile<float>(w, kQuantTileRows, need, tile, tile_bytes, who);
}

// bf16 products (WeightView::bf16_products): kQuant16TileRows rows decoded to bf16, then the scales
size_t tile16_bytes(WeightKind k, int blocksize, bool double_quant, int IC, int OC) {
  const int64_t rows = std::min<int64_t>(OC, kQuant16TileRows);
  return dequant::align64(size_t(rows * IC) * 2) +
         dequant::align64(tile_scratch_floats(k, blocksize, double_quant, rows, IC) * 4);
}

Tile<uint16_t> carve_tile16(const WeightView& w, void* tile, size_t tile_bytes, const char* who) {
  const size_t need = tile16_bytes(w.kind, w.blocksize, w.qabsmax != nullptr, w.cols, w.rows);
  return carve_tile<uint16_t>(w, kQuant16TileRows, need, tile, tile_bytes, who);
}

// y (T, OC) = x16·bf16(W)ᵀ, a tile of rows at a time on the bf16 GEMM
void quant_forward_bf16(Isa isa, float* y, const uint16_t* x16, const WeightView& w, int T, void* tile,
                        size_t tile_bytes) {
  LT_CHECK(x16, "linear_forward: bf16 products with a {} weight need the input's bf16 bits (LinearInput::x16)",
           weight_kind_name(w.kind));
  const int IC = w.cols, OC = w.rows;
  const Tile<uint16_t> t = carve_tile16(w, tile, tile_bytes, "linear_forward");
  for (int o0 = 0; o0 < OC; o0 += kQuant16TileRows) {
    const int rows = std::min(kQuant16TileRows, OC - o0);
    dequantize_rows_bf16(t.w, w, o0, rows, t.scale, isa);
    gemm_bf16(false, true, T, rows, IC, 1.0f, x16, IC, t.w, IC, 0.0f, y + o0, OC);
  }
}

}  // namespace

void quant_backward_input_bf16(Isa isa, float* dx, const uint16_t* dy16, int ld, const WeightView& w, int T,
                               void* tile, size_t tile_bytes) {
  const int IC = w.cols, OC = w.rows;
  const Tile<uint16_t> t = carve_tile16(w, tile, tile_bytes, "linear_backward_input");
  for (int o0 = 0; o0 < OC; o0 += kQuant16TileRows) {
    const int rows = std::min(kQuant16TileRows, OC - o0);
    dequantize_rows_bf16(t.w, w, o0, rows, t.scale, isa);
    gemm_bf16(false, false, T, IC, rows, 1.0f, dy16 + o0, ld, t.w, IC, 1.0f, dx, IC);
  }
}

namespace {

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

namespace {

// Decodes spans of rows [row0, row0 + nrows) of a quantized weight with the loops of one ISA: the
// kind's decoding function and, for 4-bit kinds, the span's block scales (decoded once).
class RowDecoder {
 public:
  RowDecoder(const WeightView& w, int64_t row0, int64_t nrows, float* scale_scratch, Isa isa) : w_(w) {
    LT_CHECK(w.quantized(), "dequantize_rows: a {} weight is not quantized", weight_kind_name(w.kind));
    LT_CHECK(row0 >= 0 && nrows >= 0 && row0 + nrows <= w.rows, "dequantize_rows: rows [{}, {}) outside the {} rows "
             "of the {} tensor", row0, row0 + nrows, w.rows, weight_kind_name(w.kind));
    LT_CHECK(cpu_supports(isa), "dequantize_rows: this CPU ({}) cannot run the {} kernels", cpu_features_string(),
             isa_name(isa));
    d8_ = for_isa(isa, dequant::scalar::dequant8, dequant::avx2::dequant8, dequant::avx512::dequant8);
    dg_ = for_isa(isa, dequant::scalar::dequant_ggml, dequant::avx2::dequant_ggml, dequant::avx512::dequant_ggml);
    d4_ = for_isa(isa, dequant::scalar::dequant4, dequant::avx2::dequant4, dequant::avx512::dequant4);
    if (!w.four_bit() || nrows == 0) return;
    const int64_t f0 = row0 * w.cols, n = nrows * w.cols;
    b_first_ = f0 / w.blocksize;
    scales_ = w.absmax ? w.absmax + b_first_ : scale_scratch;
    if (w.qabsmax) decode_scales(scale_scratch, w, b_first_, (f0 + n - 1) / w.blocksize - b_first_ + 1);
  }
  // out[0, n) = row r's columns [c0, c0 + n) decoded (Q8_0 / Q4_0: c0 and n whole blocks)
  void operator()(float* out, int64_t r, int64_t c0, int64_t n) const {
    const int64_t cols = w_.cols, f = r * cols + c0;
    if (w_.kind == WeightKind::Int8) return d8_(out, static_cast<const int8_t*>(w_.data) + f, w_.row_absmax + r, 1, n);
    if (ggml_block_kind(w_.kind)) return dg_(out, ggml_block(w_, f / 32), n / 32, w_.kind == WeightKind::Q4_0);
    d4_(out, static_cast<const uint8_t*>(w_.data), f, n, scales_, b_first_, w_.blocksize, w_.code_values);
    if (w_.block_offset)  // asymmetric Int4: the rounded product, then the block's offset
      for (int64_t i = 0; i < n; ++i) out[i] += w_.block_offset[(f + i) / w_.blocksize];
  }

 private:
  const WeightView& w_;
  dequant::Dequant8Fn d8_;
  dequant::DequantGgmlFn dg_;
  dequant::Dequant4Fn d4_;
  const float* scales_ = nullptr;
  int64_t b_first_ = 0;
};

// n f32 values rounded to bf16 (nearest even) with one thread's loop of the ISA
void round_bf16(Isa isa, uint16_t* dst, const float* src, size_t n) {
  if (isa == Isa::Avx512) return avx512::f32_to_half(true, dst, nullptr, src, n);
  if (isa == Isa::Avx2) return avx2::f32_to_half(true, dst, nullptr, src, n);
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

}  // namespace

void dequantize_rows(float* out, const WeightView& w, int64_t row0, int64_t nrows, float* scale_scratch, Isa isa) {
  const RowDecoder decode(w, row0, nrows, scale_scratch, isa);
  const int64_t cols = w.cols;
#pragma omp parallel for schedule(static) if (nrows * cols >= kParallelMin)
  for (int64_t r = 0; r < nrows; ++r) decode(out + r * cols, row0 + r, 0, cols);
}

void dequantize_rows_bf16(uint16_t* out, const WeightView& w, int64_t row0, int64_t nrows, float* scale_scratch,
                          Isa isa) {
  const RowDecoder decode(w, row0, nrows, scale_scratch, isa);
  const int64_t cols = w.cols;
  constexpr int64_t kSpan = 1024;  // columns decoded at a time through an L1 buffer (whole q8_0 / q4_0 blocks)
#pragma omp parallel for schedule(static) if (nrows * cols >= kParallelMin)
  for (int64_t r = 0; r < nrows; ++r) {
    alignas(64) float buf[kSpan];
    for (int64_t c0 = 0; c0 < cols; c0 += kSpan) {
      const int64_t n = std::min(kSpan, cols - c0);
      decode(buf, row0 + r, c0, n);
      round_bf16(isa, out + r * cols + c0, buf, size_t(n));
    }
  }
}

void quant_forward(Isa isa, float* y, const float* x, const uint16_t* x16, const WeightView& w, int T, void* tile,
                   size_t tile_bytes) {
  const int IC = w.cols, OC = w.rows;
  if (w.bf16_products && w.four_bit()) return quant_forward_bf16(isa, y, x16, w, T, tile, tile_bytes);
  if (w.kind == WeightKind::Int8) {
    int8_linear_forward(y, x, w, T, tile, tile_bytes, isa);
    return;
  }
  if (integer_ggml_forward(isa, y, x, w, T, tile, tile_bytes)) return;
  const Tile<float> t = carve_tile(w, T, tile, tile_bytes, "linear_forward");
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
                          size_t tile_bytes, void* dy_scratch) {
  const int IC = w.cols, OC = w.rows;
  if (w.bf16_products) {  // dy rounded into the dy scratch, then the bf16 tiles
    LT_CHECK(dy_scratch, "linear_backward_input: bf16 products with a {} weight need the dy scratch "
             "(linear_dy_bytes)", weight_kind_name(w.kind));
    auto* dy16 = static_cast<uint16_t*>(dy_scratch);
    f32_to_half(DType::BF16, dy16, nullptr, dy, size_t(T) * OC);
    return quant_backward_input_bf16(isa, dx, dy16, OC, w, T, tile, tile_bytes);
  }
  const Tile<float> t = carve_tile(w, T, tile, tile_bytes, "linear_backward_input");
  for (int o0 = 0; o0 < OC; o0 += kQuantTileRows) {
    const int rows = std::min(kQuantTileRows, OC - o0);
    dequantize_rows(t.w, w, o0, rows, t.scale, isa);
    // dx += dy[:, o0:o0+rows] · W[o0:o0+rows, :]
    gemm_f32(false, false, T, IC, rows, 1.0f, dy + o0, OC, t.w, IC, 1.0f, dx, IC);
  }
}

}  // namespace lt::cpu

namespace lt {

size_t linear_tile_bytes(WeightKind k, int blocksize, bool double_quant, int T, int IC, int OC, bool bf16_products) {
  using cpu::dequant::align64;
  if (k == WeightKind::F16) return size_t(std::min(kHalfTileRows, OC)) * IC * sizeof(float);
  if (k == WeightKind::F32 || k == WeightKind::BF16) return 0;
  LT_CHECK(k == WeightKind::Int8 || ggml_block_kind(k) || (blocksize >= 1 && (blocksize & (blocksize - 1)) == 0),
           "linear_tile_bytes: {} block size {} is not a power of two", weight_kind_name(k), blocksize);
  // bf16 products: the bf16 tiles of a 4-bit kind's products, of the others' backward
  const size_t tiled16 = bf16_products ? cpu::tile16_bytes(k, blocksize, double_quant, IC, OC) : 0;
  if (ggml_block_kind(k))  // decoded rows, then x quantized (decode: codes and scales; prefill: as floats), or
    return std::max({      // at least the VNNI product's operands for one thread (and the alignment)
        align64(size_t(std::min<int64_t>(OC, kQuantTileRows) * IC) * 4) + align64(size_t(T) * IC * 4),
        cpu::vnni::ggml_forward_scratch_bytes(T, IC, 1) + 64, tiled16});
  if (bf16_products && k != WeightKind::Int8) return tiled16;
  const int64_t rows = std::min<int64_t>(OC, kQuantTileRows);
  const size_t scales = cpu::tile_scratch_floats(k, blocksize, double_quant, rows, IC);
  const size_t tiled = bf16_products ? tiled16 : align64(size_t(rows * IC) * 4) + align64(scales * 4);
  if (k != WeightKind::Int8) return tiled;
  return std::max(tiled, cpu::int8_linear_workspace_bytes(T, IC, OC));
}

}  // namespace lt
