// Internal to the CPU backend: the fast linear op behind ops_cpu().linear_forward and
// train_ops_cpu().linear_backward_* (contracts and formats: kernels/linear.h), and the kernels it is
// built from: f32 GEMMs (gemm.h), 16-bit GEMMs (half_linear.cpp), quantized weights decoded a tile
// of rows at a time (quant_linear.cpp, per-ISA loops in dequant_*.cpp), the LLM.int8 product
// (int8_linear.cpp). `isa` picks the decoding loops (all give the same bits) and, for Int8,
// whether the integer product runs on AVX512-VNNI. Never call these inside a parallel region:
// oneDNN and the decoding loops run their own OpenMP teams.
#pragma once
#include <omp.h>

#include <cstddef>
#include <cstdint>

#include "core/cpu_features.h"
#include "kernels/linear.h"

namespace lt::cpu {

// The ISA's f32 matmul_forward (ops.h): GEMV for a few tokens, oneDNN otherwise.
using MatmulFn = void (*)(float* out, const float* x, const float* w, const float* bias, int T, int IC, int OC);

void linear_forward(Isa isa, MatmulFn f32_matmul, float* out, float* xa, const LinearInput& in,
                    const LinearWeights& w, const LinearScratch& s);
void linear_backward_input(Isa isa, float* dx, const float* dout, int T, const LinearWeights& w,
                           const LinearScratch& s);
void linear_backward_weight(Isa isa, const LinearGrads& g, const float* dout, const LinearInput& in, const float* xa,
                            const LinearWeights& w, const LinearScratch& s);

// DoRA (dora_linear.cpp): the same three directions when w.lora.dora(); linear_* call them.
void dora_forward(Isa isa, MatmulFn f32_matmul, float* out, float* xa, const LinearInput& in, const LinearWeights& w,
                  const LinearScratch& s);
void dora_backward_input(Isa isa, float* dx, const float* dout, int T, const LinearWeights& w, const LinearScratch& s);
void dora_backward_weight(Isa isa, const LinearGrads& g, const float* dout, const LinearInput& in, const float* xa,
                          const LinearWeights& w, const LinearScratch& s);
// The LoRA input: x itself, or with dropout xd = x ∘ mask written into s.lora_xd (T, IC).
const float* lora_dropped_input(const float* x, int T, int IC, const LoraView& l, const LinearScratch& s);

// A prefill of at most this many tokens against rows decoded or widened to f32 tiles (F16,
// Q8_0 / Q4_0 without an integer path) splits each tile's rows over the team, each thread decoding
// and multiplying its own slice (for_row_slices): oneDNN's sgemm split a (128 tokens, 128 rows, IC)
// product over 2 threads and ran it slower than 1 thread did (Zen 4: 0.94 against 0.77 ms at
// IC = 2048), so the q8_0 and f16 prefills of a ~1B model got slower with a second thread.
inline constexpr int kSlicedMaxTokens = 512;

// fn(r0, n) on each thread of a team of `team` for its slice [r0, r0 + n) of `rows` rows.
template <class Fn>
void for_row_slices(int rows, int team, Fn fn) {
  const int slice = (rows + team - 1) / team;
#pragma omp parallel num_threads(team)
  {
    const int r0 = omp_get_thread_num() * slice, n = rows - r0 < slice ? rows - r0 : slice;
    if (n > 0) fn(r0, n);
  }
}

// 16-bit weights (half_linear.cpp). x (T, IC) f32 values of the type, x16 their bits; dy: the
// scratch for dout rounded to the type (linear_dy_bytes); F16 widens kHalfTileRows rows of W at a
// time into `tile` (tile_bytes), or runs the bf16 split there. out = x·Wᵀ (overwritten); dx += dy·W;
// dw += dyᵀ·x.
void half_forward(float* out, const float* x, const uint16_t* x16, const WeightView& w, int T, void* tile,
                  size_t tile_bytes);
// The tokens per chunk of the bf16 split of an F16 forward on T tokens with tile_bytes of tile (AMX
// bf16 at the avx512 level, IC a multiple of 32; x's parts take 4 or 8 bytes per element of x), or 0
// where it does not run (then the f32 path does): fewer tokens than the least below, or a tile too
// small for that many, leave it out. Each chunk packs all of W again, which the split repays from
// 64 tokens (four products per weight) or 8 (bf16 values: two); measured on the ~1B shape, 2 threads.
inline constexpr int kSplitMinTokens = 64, kSplitMinTokensBf16 = 8;
int half_split_tokens(const WeightView& w, int T, size_t tile_bytes);
void half_backward(float* dx, float* dw, const float* dout, const float* x, const uint16_t* x16, const WeightView& w,
                   int T, void* dy, float* tile);

// The q8_0 / q4_0 prefill product on AMX int8 tiles (ggml_gemm_amx.cpp), only where
// amx_int8_kernels(): y (T, OC) overwritten, `threads` OpenMP threads, scratch (64-byte aligned)
// of ggml_forward_scratch_bytes(T, IC, threads) bytes. quant_forward takes it when the tile
// scratch fits it.
namespace amx {
size_t ggml_forward_scratch_bytes(int T, int IC, int threads);
void ggml_forward(float* y, const float* x, const WeightView& w, int T, void* scratch, int threads);
}  // namespace amx

// The same product on AVX512-VNNI vpdpbusd (ggml_gemm_vnni_avx512.cpp), the AMX path's numerics
// (the same bits), for CPUs with avx512_vnni: y (T, OC) overwritten, `threads` OpenMP threads,
// scratch (64-byte aligned) of ggml_forward_scratch_bytes(T, IC, threads) bytes: x quantized
// (codes, scales, offsets), then one weight panel of kItemRows rows per thread. quant_forward
// takes it where there is no AMX int8 and the tile scratch fits it (linear_tile_bytes makes room
// for one thread).
namespace vnni {
inline constexpr int kItemRows = 32;  // weight rows per work item (a panel)
inline size_t align64(size_t n) { return (n + 63) & ~size_t(63); }
inline size_t ggml_forward_panel_bytes(int IC) {
  return align64(size_t(kItemRows) * IC) + align64(size_t(kItemRows) * (IC / 32) * 4);
}
inline size_t ggml_forward_scratch_bytes(int T, int IC, int threads) {
  const size_t x = align64(size_t(T) * IC) + 2 * align64(size_t(T) * (IC / 32) * 4);
  return x + size_t(threads) * ggml_forward_panel_bytes(IC);
}
void ggml_forward(float* y, const float* x, const WeightView& w, int T, void* scratch, int threads);
}  // namespace vnni

// Quantized weights decoded kQuantTileRows rows at a time into the tile scratch
// (quant_linear.cpp). y = x·Wᵀ (overwritten; Int8: the LLM.int8 product); dx += dy·W (decoded W).
// With WeightView::bf16_products kQuant16TileRows rows decoded to bf16 and bf16 GEMMs: a 4-bit
// forward reads x16, the backward rounds dy into dy_scratch (linear_dy_bytes).
void quant_forward(Isa isa, float* y, const float* x, const uint16_t* x16, const WeightView& w, int T, void* tile,
                   size_t tile_bytes);
void quant_backward_input(Isa isa, float* dx, const float* dy, const WeightView& w, int T, void* tile,
                          size_t tile_bytes, void* dy_scratch);
// bf16 products' backward on dout already rounded: dx (T, IC) += dy16 (T, OC; row stride ld)·bf16(W).
void quant_backward_input_bf16(Isa isa, float* dx, const uint16_t* dy16, int ld, const WeightView& w, int T,
                               void* tile, size_t tile_bytes);
// Tile scratch floats dequantize_rows needs for `nrows` rows (0 unless double quantization).
size_t dequantize_rows_scratch_floats(const WeightView& w, int64_t nrows);
// out (nrows, cols) = rows [row0, row0 + nrows) of a quantized w decoded to f32 with the loops of
// `isa` (must be usable here). scale_scratch holds dequantize_rows_scratch_floats(w, nrows) floats.
void dequantize_rows(float* out, const WeightView& w, int64_t row0, int64_t nrows, float* scale_scratch, Isa isa);
// The same rows rounded to bf16 (nearest even): out (nrows, cols) bf16 bits.
void dequantize_rows_bf16(uint16_t* out, const WeightView& w, int64_t row0, int64_t nrows, float* scale_scratch,
                          Isa isa);

// The LLM.int8 product (int8_linear.cpp), bitsandbytes' algorithm (kernels/linear.h, Int8).
// Activations x (T, IC): outlier columns listed in outlier_cols (ascending, count returned) get zero
// codes; each row's absmax covers the other columns only. threshold 0: no outliers.
int quantize_int8_activations(int8_t* xq, float* x_absmax, int32_t* outlier_cols, const float* x, int T, int IC,
                              float threshold);
// y (T, OC) = the scaled int8 product of xq (T, IC) and wq (OC, IC) (no outlier part); use_vnni
// needs int8_vnni_available(), false runs the scalar reference loop (same bits).
void int8_gemm_scaled(float* y, const int8_t* xq, const float* x_absmax, const int8_t* wq, const float* w_absmax,
                      int T, int IC, int OC, bool use_vnni);
bool int8_vnni_available(Isa isa);  // isa is Avx512, usable here, and the CPU has AVX512-VNNI
size_t int8_linear_workspace_bytes(int T, int IC, int OC);
// int8_gemm_scaled with the integer loop of `isa`: VNNI where int8_vnni_available(isa), the AVX2
// vpmaddubsw loop for Avx2 / Avx512 without VNNI, else scalar (all the same bits).
void int8_gemm_isa(Isa isa, float* y, const int8_t* xq, const float* x_absmax, const int8_t* wq,
                   const float* w_absmax, int T, int IC, int OC);
// The same integer product on AMX int8 tiles (int8_gemm_amx.cpp), only where amx_int8_kernels():
// the same bits; `threads` OpenMP threads, scratch of int8_gemm_scratch_bytes(T, IC, threads) bytes.
namespace amx {
inline constexpr int kInt8MinTokens = 32;  // fewer tokens: the VNNI loop (AMX pads to 32)
size_t int8_gemm_scratch_bytes(int T, int IC, int threads);
void int8_gemm(float* y, const int8_t* xq, const float* x_absmax, const int8_t* wq, const float* w_absmax, int T,
               int IC, int OC, void* scratch, int threads);
}  // namespace amx
// The same on AVX512-VNNI (int8_gemm_vnni_avx512.cpp), where the CPU has avx512_vnni: the same bits.
namespace vnni_int8 {
size_t int8_gemm_scratch_bytes(int T, int IC, int threads);
void int8_gemm(float* y, const int8_t* xq, const float* x_absmax, const int8_t* wq, const float* w_absmax, int T,
               int IC, int OC, void* scratch, int threads);
}  // namespace vnni_int8
// y (T, OC) = the LLM.int8 product of x with the Int8 weight w; workspace of
// int8_linear_workspace_bytes(T, IC, OC) bytes, 64-byte aligned; integer product per int8_gemm_isa,
// or, at the avx512 level from kInt8MinTokens tokens, on AMX or else the VNNI panels where the
// workspace holds their scratch (int8_linear_workspace_bytes makes room for OpenMP's thread count).
void int8_linear_forward(float* y, const float* x, const WeightView& w, int T, void* workspace,
                         size_t workspace_bytes, Isa isa);

}  // namespace lt::cpu
