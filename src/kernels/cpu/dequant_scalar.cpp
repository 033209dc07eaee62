// Scalar reference versions of the quantized inner loops (dequant_kernels.h): plain loops, the spec
// the AVX2 / AVX-512 versions are tested against.
#include <omp.h>

#include "kernels/linear.h"
#include "kernels/cpu/dequant_kernels.h"
#include "kernels/ggml_blocks.h"

namespace lt::cpu::dequant::scalar {

void dequant4(float* out, const uint8_t* codes, int64_t f0, int64_t n, const float* scales, int64_t b_first,
              int blocksize, const float* table16) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t f = f0 + i;
    const uint8_t byte = codes[f >> 1];
    const int c = (f & 1) ? (byte & 15) : (byte >> 4);
    out[i] = table16[c] * scales[f / blocksize - b_first];
  }
}

void dequant8(float* out, const int8_t* q, const float* row_absmax, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = (float(q[r * cols + c]) * row_absmax[r]) * kInt8Inv127;
}

void int8_gemm(float* y, const int8_t* xq, const float* x_absmax, const int8_t* wq, const float* w_absmax, int T,
               int IC, int OC) {
#pragma omp parallel for schedule(static) if (int64_t(T) * IC * OC >= kParallelMin)
  for (int o = 0; o < OC; ++o) {
    const int8_t* w = wq + int64_t(o) * IC;
    for (int t = 0; t < T; ++t) {
      const int8_t* x = xq + int64_t(t) * IC;
      int32_t acc = 0;
      for (int c = 0; c < IC; ++c) acc += int32_t(x[c]) * int32_t(w[c]);
      y[int64_t(t) * OC + o] = float(acc) * ((x_absmax[t] * w_absmax[o]) * kInt8Inv127Sq);
    }
  }
}

void dequant_ggml(float* out, const uint8_t* blocks, int64_t nblocks, bool q4) {
  const WeightKind k = q4 ? WeightKind::Q4_0 : WeightKind::Q8_0;
  for (int64_t b = 0; b < nblocks; ++b) {
    const uint8_t* blk = blocks + size_t(b) * ggml_block_bytes(k);
    const float d = ggml_block_scale(blk);
    for (int j = 0; j < 32; ++j) out[b * 32 + j] = float(ggml_block_code(k, blk, j)) * d;
  }
}

}  // namespace lt::cpu::dequant::scalar
