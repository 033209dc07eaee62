// LLM.int8: row-wise int8 quantization, activation quantization with outlier columns, and the
// mixed int8 / f32 linear layer (see int8.h).
#include "quant/int8.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/gemm.h"
#include "quant/quant_kernels.h"

namespace lt {
namespace {

constexpr int kOutlierChunk = 256;  // outlier columns handled per f32 GEMM
constexpr int kTileRows = 128;      // weight rows dequantized per GEMM

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
  quant::scalar::dequant8(out, q, row_absmax, rows, cols);
}

int quantize_int8_activations(int8_t* xq, float* x_absmax, int32_t* outlier_cols, const float* x, int T, int IC,
                              float threshold) {
  LT_CHECK(threshold >= 0.0f, "int8: outlier threshold {} must be >= 0 (0 disables outliers)", threshold);
  // outlier_cols first holds a 0/1 flag per column, then is compacted into the ascending list.
  int n_out = 0;
  if (threshold > 0.0f) {
    for (int c = 0; c < IC; ++c) outlier_cols[c] = 0;
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < IC; ++c)
        if (std::fabs(x[int64_t(t) * IC + c]) >= threshold) outlier_cols[c] = 1;
    for (int c = 0; c < IC; ++c)
      if (outlier_cols[c]) outlier_cols[n_out++] = c;
  }
  // Per-row quantization skipping the outlier columns (a sorted list: walk it alongside).
#pragma omp parallel for schedule(static) if (int64_t(T) * IC >= quant::kParallelMin)
  for (int t = 0; t < T; ++t) {
    const float* xr = x + int64_t(t) * IC;
    int8_t* qr = xq + int64_t(t) * IC;
    float am = 0.0f;
    for (int c = 0, j = 0; c < IC; ++c) {
      if (j < n_out && outlier_cols[j] == c) { ++j; continue; }
      am = std::max(am, std::fabs(xr[c]));
    }
    const float s = am > 0.0f ? (1.0f / am) * 127.0f : 0.0f;
    for (int c = 0, j = 0; c < IC; ++c) {
      float v = 0.0f;
      if (j < n_out && outlier_cols[j] == c) ++j;
      else v = std::nearbyint(xr[c] * s);
      qr[c] = int8_t(std::clamp(v, -127.0f, 127.0f));
    }
    x_absmax[t] = am;
  }
  return n_out;
}

bool int8_vnni_available() { return cpu_isa() == Isa::Avx512 && cpu_features().avx512_vnni; }

void int8_gemm_scaled(float* y, const int8_t* xq, const float* x_absmax, const int8_t* wq, const float* w_absmax,
                      int T, int IC, int OC, bool use_vnni) {
  if (use_vnni) {
    LT_CHECK(int8_vnni_available(), "int8: the VNNI kernel was requested but this CPU ({}) or LEANTUNE_ISA ({}) "
             "does not allow it", cpu_features_string(), isa_name(cpu_isa()));
    quant::avx512::int8_gemm_vnni(y, xq, x_absmax, wq, w_absmax, T, IC, OC);
  } else {
    quant::scalar::int8_gemm(y, xq, x_absmax, wq, w_absmax, T, IC, OC);
  }
}

size_t int8_linear_workspace_bytes(int T, int IC, int OC) {
  using quant::align64;
  const size_t chunk = size_t(std::min(IC, kOutlierChunk)), rows = size_t(std::min(OC, kTileRows));
  return align64(size_t(T) * IC) + align64(size_t(T) * 4) + align64(size_t(IC) * 4) +
         align64(size_t(T) * chunk * 4) + align64(rows * chunk * 4);
}

void int8_linear_forward(float* y, const float* x, const int8_t* wq, const float* w_absmax, int T, int IC, int OC,
                         float threshold, void* workspace, size_t workspace_bytes, bool use_vnni) {
  const size_t need = int8_linear_workspace_bytes(T, IC, OC);
  LT_CHECK(workspace_bytes >= need, "int8_linear_forward: workspace of {} bytes, needs {} (T={}, IC={}, OC={})",
           workspace_bytes, need, T, IC, OC);
  char* p = static_cast<char*>(workspace);
  const int chunk = std::min(IC, kOutlierChunk), tile = std::min(OC, kTileRows);
  int8_t* xq = quant::carve<int8_t>(p, size_t(T) * IC);            // (T, IC)
  float* x_absmax = quant::carve<float>(p, size_t(T));             // (T)
  int32_t* cols = quant::carve<int32_t>(p, size_t(IC));            // (n_out) outlier columns
  float* x_out = quant::carve<float>(p, size_t(T) * chunk);        // (T, nc) outlier activations
  float* w_out = quant::carve<float>(p, size_t(tile) * chunk);     // (rows, nc) their weights, f32

  const int n_out = quantize_int8_activations(xq, x_absmax, cols, x, T, IC, threshold);
  int8_gemm_scaled(y, xq, x_absmax, wq, w_absmax, T, IC, OC, use_vnni);

  for (int j0 = 0; j0 < n_out; j0 += chunk) {
    const int nc = std::min(chunk, n_out - j0);
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < nc; ++j) x_out[int64_t(t) * nc + j] = x[int64_t(t) * IC + cols[j0 + j]];
    for (int o0 = 0; o0 < OC; o0 += tile) {
      const int rows = std::min(tile, OC - o0);
      for (int r = 0; r < rows; ++r)
        for (int j = 0; j < nc; ++j)
          w_out[int64_t(r) * nc + j] = (float(wq[int64_t(o0 + r) * IC + cols[j0 + j]]) * w_absmax[o0 + r]) *
                                       quant::kInv127;
      cpu::gemm_f32(false, true, T, rows, nc, 1.0f, x_out, nc, w_out, nc, 1.0f, y + o0, OC);
    }
  }
}

}  // namespace lt
