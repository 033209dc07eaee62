// bf16 GEMM behind gemm.h: C (f32) = alpha * op(A) · op(B) + beta * C with A, B in bf16 and f32
// accumulation, through oneDNN's matmul primitive (AVX512-BF16 vdpbf16ps where the CPU has it,
// oneDNN's own emulation otherwise). oneDNN 2.x has no BLAS-like bf16 call, so transposes and
// leading dimensions become strided memory descriptors; primitives are cached per shape (creation
// costs 0.25-0.5 ms, a cache hit ~1 µs), which allocates only the first time a shape is seen.
#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <mutex>
#include <tuple>

#include "core/error.h"
#include "core/profiler.h"
#include "kernels/cpu/gemm.h"

namespace lt::cpu {

namespace {

using Key = std::tuple<bool, bool, int, int, int, int, int, int, float, float>;

struct Cached {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c;
};

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

void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t* A, int lda,
               const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  prof::Scope prof_scope("gemm_bf16", 2.0 * M * N * K,
                         2.0 * (double(M) * K + double(K) * N) + 4.0 * (beta != 0 ? 2.0 : 1.0) * M * N);
  if (M == 0 || N == 0) return;
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
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(n.a, n.b, n.c), attr, engine());
      n.prim = dnnl::matmul(pd);
      it = cache.emplace(key, std::move(n)).first;
    }
    c = &it->second;
  } catch (const dnnl::error& e) {
    fail("gemm_bf16: oneDNN rejected trans_a={} trans_b={} M={} N={} K={} lda={} ldb={} ldc={}: {}", trans_a, trans_b,
         M, N, K, lda, ldb, ldc, e.what());
  }
  static dnnl::stream stream(engine());
  dnnl::memory ma(c->a, engine(), const_cast<uint16_t*>(A)), mb(c->b, engine(), const_cast<uint16_t*>(B)),
      mc(c->c, engine(), C);
  c->prim.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
  stream.wait();
}

}  // namespace lt::cpu
