// LLM.int8 weights: row-wise int8 quantization and its inverse (see int8.h).
#include "quant/int8.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/linear.h"
#include "quant/quant_layout.h"

namespace lt {
namespace {

// One row: absmax, then round-half-even codes of x * ((1/absmax) * 127) (bitsandbytes'
// A * (127.0 / row_stats), which torch evaluates as reciprocal then multiply).
float quantize_row(int8_t* q, const float* x, int64_t n) {
  float am = 0.0f;
  for (int64_t c = 0; c < n; ++c) am = std::max(am, std::fabs(x[c]));
  const float s = am > 0.0f ? (1.0f / am) * 127.0f : 0.0f;
  for (int64_t c = 0; c < n; ++c) q[c] = int8_t(std::clamp(std::nearbyint(x[c] * s), -127.0f, 127.0f));
  return am;
}

}  // namespace

void quantize_int8_rows(int8_t* q, float* row_absmax, const float* w, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= quant::kParallelMin)
  for (int64_t r = 0; r < rows; ++r) row_absmax[r] = quantize_row(q + r * cols, w + r * cols, cols);
}

void dequantize_int8_rows(float* out, const int8_t* q, const float* row_absmax, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = (float(q[r * cols + c]) * row_absmax[r]) * kInt8Inv127;
}

}  // namespace lt
