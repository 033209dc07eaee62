// The LLM.int8 integer product (kernels/linear.h, Int8) on AVX512-VNNI for prefill and training,
// for CPUs with avx512_vnni and no AMX int8 (or LEANTUNE_AMX=0):
//   y[t,o] = float(Σ_c xq[t,c]·wq[o,c]) · ((x_absmax[t] · w_absmax[o]) · kInt8Inv127Sq)
// x and W in int8_panel.inc's layouts (the AMX kernel's), the panel's codes offset to unsigned
// (w + 128, vpdpbusd's first operand), so each int32 lane (an output row) starts at −128·Σx of its
// token and sums exactly Σ w·x: 2 x 16 rows x 8 tokens of sums in registers, x's 4 codes broadcast.
// The same bits as the scalar loop; each output one thread's sum (bits independent of the thread
// count). Compiled with the AVX-512 flags (*_avx512.cpp).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/linear_kernels.h"
#include "kernels/linear.h"

namespace lt::cpu::vnni_int8 {
namespace {

using u32 = uint32_t;
#include "kernels/cpu/transpose_u32.inc"
#include "kernels/cpu/int8_panel.inc"

constexpr int kTokens = 8;  // tokens per register block (kRows is a multiple)

size_t xsum_bytes(int T) { return align64(size_t(padded_tokens(T)) * 4); }

// y rows [t0, t0 + 8) ∩ [0, T), columns [o0, o0 + 32) ∩ [0, OC)
void block_product(float* y, const int8_t* xp, const int32_t* xsum, const float* x_absmax, const int8_t* panel,
                   const float* w_absmax, int T, int IC, int OC, int t0, int o0) {
  const int KP = padded_cols(IC);
  __m512i acc[2][kTokens];
  for (int t = 0; t < kTokens; ++t) acc[0][t] = acc[1][t] = _mm512_set1_epi32(-128 * xsum[t0 + t]);
  const int8_t* x = xp + size_t(t0) * KP;
  for (int kc = 0; kc < KP / 64; ++kc) {
    const int8_t* p = panel + size_t(kc) * 2048;
    for (int j = 0; j < 16; ++j) {
      const __m512i w0 = _mm512_loadu_si512(p + j * 64), w1 = _mm512_loadu_si512(p + 1024 + j * 64);
      const int8_t* xc = x + kc * 64 + 4 * j;
#pragma GCC unroll 8
      for (int t = 0; t < kTokens; ++t) {
        int32_t q;
        std::memcpy(&q, xc + size_t(t) * KP, 4);
        const __m512i xb = _mm512_set1_epi32(q);
        acc[0][t] = _mm512_dpbusd_epi32(acc[0][t], w0, xb);
        acc[1][t] = _mm512_dpbusd_epi32(acc[1][t], w1, xb);
      }
    }
  }
  const __m512 inv = _mm512_set1_ps(kInt8Inv127Sq);
  for (int t = 0; t < kTokens && t0 + t < T; ++t) {
    const __m512 xa = _mm512_set1_ps(x_absmax[t0 + t]);
    for (int g = 0; g < 2; ++g) {
      const int o = o0 + 16 * g, n = std::min(16, OC - o);
      if (n <= 0) break;
      const __mmask16 m = n == 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
      const __m512 s = _mm512_mul_ps(_mm512_mul_ps(xa, _mm512_maskz_loadu_ps(m, w_absmax + o)), inv);
      _mm512_mask_storeu_ps(y + size_t(t0 + t) * OC + o, m, _mm512_mul_ps(_mm512_cvtepi32_ps(acc[g][t]), s));
    }
  }
}

}  // namespace

size_t int8_gemm_scratch_bytes(int T, int IC, int threads) {  // + 64: the scratch's start rounded up
  return 64 + x_bytes(T, IC) + xsum_bytes(T) + size_t(threads) * thread_bytes(IC);
}

void int8_gemm(float* y, const int8_t* xq, const float* x_absmax, const int8_t* wq, const float* w_absmax, int T,
               int IC, int OC, void* scratch_start, int threads) {
  const int KP = padded_cols(IC), TP = padded_tokens(T);
  const auto at = reinterpret_cast<uintptr_t>(scratch_start);
  void* scratch = static_cast<char*>(scratch_start) + (align64(at) - at);  // xsum's int32s aligned
  auto* xp = static_cast<int8_t*>(scratch);
  auto* xsum = reinterpret_cast<int32_t*>(static_cast<char*>(scratch) + x_bytes(T, IC));
  char* per_thread = static_cast<char*>(scratch) + x_bytes(T, IC) + xsum_bytes(T);
  pad_x(xp, xq, T, IC, threads);
  for (int t = 0; t < TP; ++t) {
    int32_t s = 0;
    for (int c = 0; c < IC && t < T; ++c) s += xq[size_t(t) * IC + c];
    xsum[t] = s;
  }
  const int items = (OC + kRows - 1) / kRows;
  const __m512i flip = _mm512_set1_epi8(char(0x80));
#pragma omp parallel num_threads(threads)
  {
    auto* panel = reinterpret_cast<int8_t*>(per_thread + size_t(omp_get_thread_num()) * thread_bytes(IC));
    int8_t* stage = panel + size_t(kRows) * KP;
#pragma omp for schedule(static)
    for (int i = 0; i < items; ++i) {
      fill_panel(panel, stage, wq, IC, OC, i * kRows);
      for (size_t b = 0; b < size_t(kRows) * KP; b += 64) {  // w + 128: unsigned codes
        const __m512i v = _mm512_loadu_si512(panel + b);
        _mm512_storeu_si512(panel + b, _mm512_xor_si512(v, flip));
      }
      for (int t0 = 0; t0 < T; t0 += kTokens)
        block_product(y, xp, xsum, x_absmax, panel, w_absmax, T, IC, OC, t0, i * kRows);
    }
  }
}

}  // namespace lt::cpu::vnni_int8
