// The LLM.int8 product (Dettmers et al. 2022) as bitsandbytes computes it, for the Int8 kind of
// the fast linear op (kernels/linear.h): activations quantized per row with outlier columns taken
// out, the int32 product (AMX int8 tiles, AVX512-VNNI, AVX2 or the scalar loop, same bits), and the
// outlier columns in f32 against the matching decoded weight columns.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/dequant_kernels.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_kernels.h"

namespace lt::cpu {
namespace {

constexpr int kOutlierChunk = 256;  // outlier columns handled per f32 GEMM
constexpr int kTileRows = 128;      // weight rows dequantized per GEMM

}  // namespace

int quantize_int8_activations(int8_t* xq, float* x_absmax, int32_t* outlier_cols, const float* x, int T, int IC,
                              float threshold) {
  LT_CHECK(threshold >= 0.0f, "int8: outlier threshold {} must be >= 0 (0 disables outliers)", threshold);
  // outlier_cols first holds a 0/1 flag per column, then is compacted into the ascending list.
  int n_out = 0;
  if (threshold > 0.0f) {
    for (int c = 0; c < IC; ++c) outlier_cols[c] = 0;
    for (int t = 0; t < T; ++t)  // branch-free, so the compiler vectorizes it
      for (int c = 0; c < IC; ++c) outlier_cols[c] |= int32_t(std::fabs(x[int64_t(t) * IC + c]) >= threshold);
    for (int c = 0; c < IC; ++c)
      if (outlier_cols[c]) outlier_cols[n_out++] = c;
  }
  const bool vector_rows = n_out == 0 && cpu_isa() == Isa::Avx512;
  // Per-row quantization skipping the outlier columns (a sorted list: walk it alongside).
#pragma omp parallel for schedule(static) if (int64_t(T) * IC >= dequant::kParallelMin)
  for (int t = 0; t < T; ++t) {
    const float* xr = x + int64_t(t) * IC;
    int8_t* qr = xq + int64_t(t) * IC;
    if (vector_rows) {  // no outlier column: the AVX-512 loop (the same bits)
      x_absmax[t] = dequant::avx512::quantize_int8_row(qr, xr, IC);
      continue;
    }
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

bool int8_vnni_available(Isa isa) {
  return isa == Isa::Avx512 && cpu_supports(Isa::Avx512) && cpu_features().avx512_vnni;
}

void int8_gemm_scaled(float* y, const int8_t* xq, const float* x_absmax, const int8_t* wq, const float* w_absmax,
                      int T, int IC, int OC, bool use_vnni) {
  if (use_vnni) {
    LT_CHECK(int8_vnni_available(Isa::Avx512), "int8: the VNNI kernel was requested but this CPU ({}) has no "
             "AVX512-VNNI", cpu_features_string());
    dequant::avx512::int8_gemm_vnni(y, xq, x_absmax, wq, w_absmax, T, IC, OC);
  } else {
    dequant::scalar::int8_gemm(y, xq, x_absmax, wq, w_absmax, T, IC, OC);
  }
}

void int8_gemm_isa(Isa isa, float* y, const int8_t* xq, const float* x_absmax, const int8_t* wq,
                   const float* w_absmax, int T, int IC, int OC) {
  if (int8_vnni_available(isa)) return dequant::avx512::int8_gemm_vnni(y, xq, x_absmax, wq, w_absmax, T, IC, OC);
  if (isa != Isa::Scalar && cpu_supports(Isa::Avx2)) return dequant::avx2::int8_gemm(y, xq, x_absmax, wq, w_absmax, T, IC, OC);
  dequant::scalar::int8_gemm(y, xq, x_absmax, wq, w_absmax, T, IC, OC);
}

namespace {
// The tiled integer product a call of T tokens runs at this ISA level: AMX, the VNNI panels, or
// neither (int8_gemm_isa), and its scratch for `threads` threads
enum class Tiled { None, Amx, Vnni };
Tiled tiled_int8(Isa isa, int T) {
  if (isa != Isa::Avx512 || T < amx::kInt8MinTokens) return Tiled::None;
  if (amx_int8_kernels()) return Tiled::Amx;
  return int8_vnni_available(isa) ? Tiled::Vnni : Tiled::None;
}
size_t tiled_scratch_bytes(Tiled k, int T, int IC, int threads) {
  if (k == Tiled::Amx) return amx::int8_gemm_scratch_bytes(T, IC, threads);
  return k == Tiled::Vnni ? vnni_int8::int8_gemm_scratch_bytes(T, IC, threads) : 0;
}
}  // namespace

size_t int8_linear_workspace_bytes(int T, int IC, int OC) {
  using dequant::align64;
  const size_t chunk = size_t(std::min(IC, kOutlierChunk)), rows = size_t(std::min(OC, kTileRows));
  const size_t tiled = tiled_scratch_bytes(tiled_int8(cpu_isa(), T), T, IC, omp_get_max_threads());
  return align64(size_t(T) * IC) + align64(size_t(T) * 4) + align64(size_t(IC) * 4) +
         align64(size_t(T) * chunk * 4) + align64(rows * chunk * 4) + tiled;
}

void int8_linear_forward(float* y, const float* x, const WeightView& w, int T, void* workspace,
                         size_t workspace_bytes, Isa isa) {
  const int IC = w.cols, OC = w.rows;
  const auto* wq = static_cast<const int8_t*>(w.data);
  const float* w_absmax = w.row_absmax;
  const size_t need = int8_linear_workspace_bytes(T, IC, OC);
  LT_CHECK(workspace_bytes >= need, "int8_linear_forward: workspace of {} bytes, needs {} (T={}, IC={}, OC={})",
           workspace_bytes, need, T, IC, OC);
  char* p = static_cast<char*>(workspace);
  const int chunk = std::min(IC, kOutlierChunk), tile = std::min(OC, kTileRows);
  int8_t* xq = dequant::carve<int8_t>(p, size_t(T) * IC);            // (T, IC)
  float* x_absmax = dequant::carve<float>(p, size_t(T));             // (T)
  int32_t* cols = dequant::carve<int32_t>(p, size_t(IC));            // (n_out) outlier columns
  float* x_out = dequant::carve<float>(p, size_t(T) * chunk);        // (T, nc) outlier activations
  float* w_out = dequant::carve<float>(p, size_t(tile) * chunk);     // (rows, nc) their weights, f32

  const int n_out = quantize_int8_activations(xq, x_absmax, cols, x, T, IC, w.int8_threshold);
  // the tiled product with as many threads as the rest of the workspace holds scratch for (at most OpenMP's)
  const Tiled kind = tiled_int8(isa, T);
  const size_t left = workspace_bytes - size_t(p - static_cast<char*>(workspace));
  const size_t base = tiled_scratch_bytes(kind, T, IC, 0), per_thread = tiled_scratch_bytes(kind, T, IC, 1) - base;
  const int threads = kind != Tiled::None && left >= base
                          ? int(std::min<size_t>(size_t(omp_get_max_threads()), (left - base) / per_thread)) : 0;
  if (threads > 0 && kind == Tiled::Amx) amx::int8_gemm(y, xq, x_absmax, wq, w_absmax, T, IC, OC, p, threads);
  else if (threads > 0) vnni_int8::int8_gemm(y, xq, x_absmax, wq, w_absmax, T, IC, OC, p, threads);
  else int8_gemm_isa(isa, y, xq, x_absmax, wq, w_absmax, T, IC, OC);

  for (int j0 = 0; j0 < n_out; j0 += chunk) {
    const int nc = std::min(chunk, n_out - j0);
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < nc; ++j) x_out[int64_t(t) * nc + j] = x[int64_t(t) * IC + cols[j0 + j]];
    for (int o0 = 0; o0 < OC; o0 += tile) {
      const int rows = std::min(tile, OC - o0);
      for (int r = 0; r < rows; ++r)
        for (int j = 0; j < nc; ++j)
          w_out[int64_t(r) * nc + j] = (float(wq[int64_t(o0 + r) * IC + cols[j0 + j]]) * w_absmax[o0 + r]) *
                                       kInt8Inv127;
      gemm_f32(false, true, T, rows, nc, 1.0f, x_out, nc, w_out, nc, 1.0f, y + o0, OC);
    }
  }
}

}  // namespace lt::cpu
