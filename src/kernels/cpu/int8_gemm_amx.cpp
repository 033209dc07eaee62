// The LLM.int8 integer product (kernels/linear.h, Int8) on AMX int8 tiles (tdpbssd), for CPUs where
// amx_int8_kernels():
//   y[t,o] = float(Σ_c xq[t,c]·wq[o,c]) · ((x_absmax[t] · w_absmax[o]) · kInt8Inv127Sq)
// with the int32 sum exact, so the same bits as the scalar, AVX2 and VNNI loops (dequant_kernels.h).
//   x      the codes in rows padded with zeros (int8_panel.inc): A tiles of 16 tokens × 64 codes
//          read in place.
//   W      32 rows at a time (a work item) into a thread's panel (int8_panel.inc: AMX's B layout, a
//          16 x 16 transpose of 32-bit groups per 64 columns and 16 rows).
//   C      a 2 x 2 micro-kernel: tiles 0-3 the int32 sums of 32 tokens x 32 rows, 4-5 A, 6-7 B, over
//          the whole inner dimension; then stored and scaled as above.
// Each output is one thread's sum; the bits do not depend on the thread count. Compiled with the
// AVX-512 and AMX flags (*_amx.cpp in CMakeLists.txt).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/linear_kernels.h"
#include "kernels/linear.h"

namespace lt::cpu::amx {
namespace {

using u32 = uint32_t;
#include "kernels/cpu/amx_tile_config.inc"
#include "kernels/cpu/transpose_u32.inc"

#include "kernels/cpu/int8_panel.inc"

// y rows [t0, t0 + 32) ∩ [0, T), columns [o0, o0 + 32) ∩ [0, OC): the 2 x 2 tiles' sums, scaled
void block_product(float* y, const int8_t* xp, const float* x_absmax, const int8_t* panel, const float* w_absmax,
                   int T, int IC, int OC, int t0, int o0) {
  const int KP = padded_cols(IC);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const int8_t* a = xp + size_t(t0) * KP;
  for (int kc = 0; kc < KP / 64; ++kc) {
    _tile_loadd(4, a + size_t(kc) * 64, KP);
    _tile_loadd(5, a + size_t(16) * KP + size_t(kc) * 64, KP);
    _tile_loadd(6, panel + size_t(kc) * 2048, 64);
    _tile_loadd(7, panel + size_t(kc) * 2048 + 1024, 64);
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  alignas(64) int32_t c[4][256];
  _tile_stored(0, c[0], 64);
  _tile_stored(1, c[1], 64);
  _tile_stored(2, c[2], 64);
  _tile_stored(3, c[3], 64);
  const __m512 inv = _mm512_set1_ps(kInt8Inv127Sq);
  for (int h = 0; h < 2; ++h) {  // token half
    for (int r = 0; r < 16; ++r) {
      const int t = t0 + 16 * h + r;
      if (t >= T) break;
      const __m512 xa = _mm512_set1_ps(x_absmax[t]);
      for (int g = 0; g < 2; ++g) {  // row group
        const int o = o0 + 16 * g, n = std::min(16, OC - o);
        if (n <= 0) break;
        const __mmask16 m = n == 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
        const __m512 wa = _mm512_maskz_loadu_ps(m, w_absmax + o);
        const __m512 s = _mm512_mul_ps(_mm512_mul_ps(xa, wa), inv);
        const __m512 dot = _mm512_cvtepi32_ps(_mm512_load_si512(c[2 * h + g] + 16 * r));
        _mm512_mask_storeu_ps(y + size_t(t) * OC + o, m, _mm512_mul_ps(dot, s));
      }
    }
  }
}

}  // namespace

size_t int8_gemm_scratch_bytes(int T, int IC, int threads) {
  return x_bytes(T, IC) + size_t(threads) * thread_bytes(IC);
}

void int8_gemm(float* y, const int8_t* xq, const float* x_absmax, const int8_t* wq, const float* w_absmax, int T,
               int IC, int OC, void* scratch, int threads) {
  const int KP = padded_cols(IC);
  auto* xp = static_cast<int8_t*>(scratch);
  char* per_thread = static_cast<char*>(scratch) + x_bytes(T, IC);
  pad_x(xp, xq, T, IC, threads);
  const int items = (OC + kRows - 1) / kRows;
#pragma omp parallel num_threads(threads)
  {
    int8_t* panel = reinterpret_cast<int8_t*>(per_thread + size_t(omp_get_thread_num()) * thread_bytes(IC));
    int8_t* stage = panel + size_t(kRows) * KP;
    load_tile_config();
#pragma omp for schedule(static)
    for (int i = 0; i < items; ++i) {
      fill_panel(panel, stage, wq, IC, OC, i * kRows);
      for (int t0 = 0; t0 < T; t0 += kRows)
        block_product(y, xp, x_absmax, panel, w_absmax, T, IC, OC, t0, i * kRows);
    }
    _tile_release();
  }
}

}  // namespace lt::cpu::amx
