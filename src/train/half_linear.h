// The GEMMs of a linear layer whose weight is stored in 16 bits (mixed precision, DESIGN.md §3):
// y = x·Wᵀ, dX += dY·W, dW += dYᵀ·X with x and W in bf16 or f16 and f32 accumulation into f32
// outputs. bf16 runs on oneDNN's bf16 matmul (cpu::gemm_bf16, AVX512-BF16 where present). f16 is
// emulated exactly: f16 values are exact in f32, so the f16 operands are widened (W a tile of rows
// at a time into a planned workspace) and multiplied with cpu::gemm_f32. The incoming gradient dY
// is rounded to the 16-bit type first, as a 16-bit GEMM would see it: with f16 that is where a too
// large loss scale overflows to Inf (train/loss_scaler.h).
// Dimension letters: N tokens, IC/OC the linear's in/out features.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace lt {

// Rows of an f16 weight widened to f32 at a time.
constexpr int kHalfTileRows = 512;

// Workspace bytes of the 16-bit GEMMs of linears with at most max_io features on N tokens: the
// rounded dY (bf16: N·max_io 16-bit; f16: N·max_io f32) and, for f16, the widened weight tile
// (max over the linears (IC, OC) of min(kHalfTileRows, OC)·IC floats: pass that as tile_floats).
size_t half_dy_bytes(DType t, size_t N, size_t max_io);

struct HalfGemm {
  DType t;                 // BF16 or F16
  int N;
  uint16_t* dy16;          // bf16: (N, OC) the rounded gradient
  float* dy32;             // f16: (N, OC) the gradient rounded to f16 values, in f32
  float* wtile;            // f16: (kHalfTileRows, IC) widened weight rows

  // out (N, OC) = x·wᵀ + beta·out. x16 (N, IC) in t; x32 the same values in f32 (read by the f16
  // emulation); w (OC, IC) in t.
  void forward(float* out, const uint16_t* x16, const float* x32, const uint16_t* w, int IC, int OC,
               float beta = 0.0f) const;
  // dout (N, OC) f32 rounded to t once; then dx (N, IC) += dout·w when dx is not null and
  // dw (OC, IC) += doutᵀ·x when dw is not null.
  void backward(float* dx, float* dw, const float* dout, const uint16_t* x16, const float* x32, const uint16_t* w,
                int IC, int OC) const;
};

}  // namespace lt
