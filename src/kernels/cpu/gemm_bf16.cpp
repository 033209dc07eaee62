// bf16 GEMM behind gemm.h: C (f32) = alpha * op(A) · op(B) + beta * C with A, B in bf16 and f32
// accumulation: on the packed kernels of gemm_bf16_amx.cpp (AMX tiles, or AVX-512 where gemm.h's
// packed_bf16_mode() picks them; not for a few rows of a stored A), else through oneDNN's matmul
// primitive (AVX512-BF16 vdpbf16ps where the CPU has it, oneDNN's own emulation on other AVX-512
// CPUs). oneDNN 2.x has no BLAS-like bf16 call, so
// transposes and leading dimensions become strided memory descriptors; primitives are cached per
// shape (creation costs 0.25-0.5 ms, a cache hit ~1 µs), which allocates only the first time a
// shape is seen. Where oneDNN has no bf16 matmul (it needs AVX-512: an AVX2-only CPU reports
// "unimplemented") or LEANTUNE_ISA caps the level below avx512, the product is computed by
// widening blocks of A and B to f32 into a fixed scratch and calling gemm_f32: bf16 -> f32 is
// exact and so is every product of two bf16 values in f32, so only the f32 summation order differs.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/profiler.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm.h"

namespace lt::cpu {

namespace {

using Key = std::tuple<bool, bool, int, int, int, int, int, int, float, float>;

struct Cached {
  bool widen = false;  // oneDNN has no bf16 matmul here: gemm_widened
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c;
};

// Block sizes of the widened path: a (kBm x kBk) block of op(A) and a (kBk x kBn) block of op(B),
// widened in their stored orientation (1.25 MiB of f32 per thread, allocated once per thread).
constexpr int kBm = 256, kBn = 512, kBk = 256;
constexpr int kAmxMinRows = 64;  // rows of op(A) from which the AMX GEMM runs when A is stored (M, K)

// rows x cols of a row-major bf16 matrix (row stride ld) widened into dst (row stride cols): rows
// split over the OpenMP team (a serial widening left the other threads idle for a fifth of an AVX2
// prefill), 8 at a time with AVX2 (convert.h: exact, as the scalar loop).
void widen(float* dst, const uint16_t* src, int ld, int rows, int cols) {
  const bool avx2 = cpu_isa() == Isa::Avx2;
#pragma omp parallel for schedule(static) if (int64_t(rows) * cols >= (int64_t(1) << 15))
  for (int r = 0; r < rows; ++r) {
    const uint16_t* s = src + size_t(r) * ld;
    float* d = dst + size_t(r) * cols;
    if (avx2) avx2::half_to_f32(true, d, s, size_t(cols));
    else
      for (int c = 0; c < cols; ++c) d[c] = bf16_to_f32(s[c]);
  }
}

void gemm_widened(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t* A, int lda,
                  const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  thread_local std::vector<float> scratch(size_t(kBm) * kBk + size_t(kBk) * kBn);
  float* a = scratch.data();
  float* b = a + size_t(kBm) * kBk;
  if (K == 0) {  // C = beta * C
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) C[size_t(i) * ldc + j] = beta == 0 ? 0.0f : beta * C[size_t(i) * ldc + j];
    return;
  }
  for (int k0 = 0; k0 < K; k0 += kBk) {
    const int kb = std::min(kBk, K - k0);
    const float bk = k0 == 0 ? beta : 1.0f;
    for (int n0 = 0; n0 < N; n0 += kBn) {
      const int nb = std::min(kBn, N - n0);
      // op(B) block rows k0.., cols n0..: stored (N, K) when transposed
      if (tb) widen(b, B + size_t(n0) * ldb + k0, ldb, nb, kb);
      else widen(b, B + size_t(k0) * ldb + n0, ldb, kb, nb);
      for (int m0 = 0; m0 < M; m0 += kBm) {
        const int mb = std::min(kBm, M - m0);
        if (ta) widen(a, A + size_t(k0) * lda + m0, lda, kb, mb);
        else widen(a, A + size_t(m0) * lda + k0, lda, mb, kb);
        gemm_f32(ta, tb, mb, nb, kb, alpha, a, ta ? mb : kb, b, tb ? kb : nb, bk, C + size_t(m0) * ldc + n0, ldc);
      }
    }
  }
}

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// Row-major (rows, cols) with row stride ld, or its transpose (stored (cols, rows) with stride ld).
dnnl::memory::desc md(int rows, int cols, int ld, bool trans, dnnl::memory::data_type dt) {
  using dims = dnnl::memory::dims;
  return trans ? dnnl::memory::desc(dims{rows, cols}, dt, dims{1, ld}) : dnnl::memory::desc(dims{rows, cols}, dt, dims{ld, 1});
}

}  // namespace

PackedMode packed_bf16_mode() {
  static const PackedMode avx512 = [] {
    const char* env = std::getenv("LEANTUNE_PACKED_BF16");
    const std::string e = env ? env : "";
    if (!cpu_features().avx512_bf16 || e == "0") return PackedMode::None;
    if (e == "dpbf16") return PackedMode::Dpbf16;
    if (e == "fma") return PackedMode::Fma;
    double dp = 0, fma = 0;
    amx::avx512_dot_rates(dp, fma);
    return fma >= 1.5 * dp ? PackedMode::Fma : PackedMode::None;
  }();
  if (amx_bf16_kernels()) return PackedMode::Amx;
  return avx512;
}

void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t* A, int lda,
               const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  prof::Scope prof_scope("gemm_bf16", 2.0 * M * N * K,
                         2.0 * (double(M) * K + double(K) * N) + 4.0 * (beta != 0 ? 2.0 : 1.0) * M * N);
  if (M == 0 || N == 0) return;
  if (cpu_isa() != Isa::Avx512) return gemm_widened(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  // AMX (gemm_bf16_amx.cpp) but for a few rows against a stored op(A) (inference's short
  // prompts): there the pass over op(B) dominates, and oneDNN's runs 15-20% faster
  if (K > 0 && packed_bf16_kernels() && (M >= kAmxMinRows || trans_a))
    return amx::gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  static std::mutex mu;
  static std::map<Key, Cached> cache;
  const Key key{trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta};
  const Cached* c = nullptr;
  try {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it == cache.end()) {
      using dt = dnnl::memory::data_type;
      Cached n;
      n.a = md(M, K, lda, trans_a, dt::bf16);
      n.b = md(K, N, ldb, trans_b, dt::bf16);
      n.c = md(M, N, ldc, false, dt::f32);
      dnnl::primitive_attr attr;
      if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
      if (beta != 0.0f) {
        dnnl::post_ops po;
        po.append_sum(beta);
        attr.set_post_ops(po);
      }
      try {
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(n.a, n.b, n.c), attr, engine());
        n.prim = dnnl::matmul(pd);
      } catch (const dnnl::error& e) {
        if (e.status != dnnl_unimplemented) throw;
        n.widen = true;
      }
      it = cache.emplace(key, std::move(n)).first;
    }
    c = &it->second;
  } catch (const dnnl::error& e) {
    fail("gemm_bf16: oneDNN rejected trans_a={} trans_b={} M={} N={} K={} lda={} ldb={} ldc={}: {}", trans_a, trans_b,
         M, N, K, lda, ldb, ldc, e.what());
  }
  if (c->widen) return gemm_widened(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  static dnnl::stream stream(engine());
  dnnl::memory ma(c->a, engine(), const_cast<uint16_t*>(A)), mb(c->b, engine(), const_cast<uint16_t*>(B)),
      mc(c->c, engine(), C);
  c->prim.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
  stream.wait();
}

bool gemm_bf16_appends(int M, int K, int K2) {
  return cpu_isa() == Isa::Avx512 && packed_bf16_kernels() && M >= kAmxMinRows && K > 0 && K % 32 == 0 && K2 >= 1 &&
         K2 <= 32;
}

bool gemm_bf16_appended(bool trans_b, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                        int K2, const uint16_t* A2, int lda2, const uint16_t* B2, int ldb2, float beta, float* C,
                        int ldc) {
  if (N <= 0 || !gemm_bf16_appends(M, K, K2)) return false;
  prof::Scope prof_scope("gemm_bf16", 2.0 * M * N * (K + K2),
                         2.0 * (double(M) * (K + K2) + double(K + K2) * N) + 4.0 * (beta != 0 ? 2.0 : 1.0) * M * N);
  amx::gemm_bf16_appended(trans_b, M, N, K, A, lda, B, ldb, K2, A2, lda2, B2, ldb2, beta, C, ldc);
  return true;
}

bool gemm_bf16_lora(bool trans_b, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                    const LoraRankTerm& r, float beta, float* C, int ldc) {
  const int R = r.R;
  if (N <= 0 || !gemm_bf16_appends(M, K, R) || !amx::lora_fuses(M, K, R, A, lda)) return false;
  prof::Scope prof_scope("gemm_bf16", 2.0 * M * (N + R) * K + 2.0 * M * N * R,
                         2.0 * (double(M) * (K + R) + double(K + R) * N + double(R) * K) +
                             4.0 * M * ((beta != 0 ? 2.0 : 1.0) * N + R));
  amx::gemm_bf16_lora(trans_b, M, N, K, A, lda, B, ldb, r, beta, C, ldc);
  return true;
}

bool gemm_bf16_glu(int M, int F, int K, const uint16_t* A, int lda, const uint16_t* Wg, const uint16_t* Wu, int ldw,
                   const LoraRankTerm* r, const GluOutputs& o, GluEpilogue epi) {
  const int R = r ? r->R : 0, N = 2 * F;
  if (F <= 0 || !(cpu_isa() == Isa::Avx512 && packed_bf16_kernels() && M >= kAmxMinRows) ||
      !amx::glu_fuses(M, F, K, A, lda) || (r && !amx::lora_fuses(M, K, R, A, lda)))
    return false;
  prof::Scope prof_scope("gemm_bf16_glu", 2.0 * M * (N + R) * K + 2.0 * M * N * R,  // (the epilogue inside)
                         2.0 * (double(M) * (K + R) + double(K + R) * N + double(R) * K) + 4.0 * M * R +
                             2.0 * M * F * (1 + (o.gate16 != nullptr) + (o.up16 != nullptr)) +
                             4.0 * M * F * ((o.h != nullptr) + (o.gate != nullptr) + (o.up != nullptr)));
  amx::gemm_bf16_glu(M, F, K, A, lda, Wg, Wu, ldw, r, o, epi);
  return true;
}

}  // namespace lt::cpu
