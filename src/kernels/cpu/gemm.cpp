// oneDNN 2.x dnnl_sgemm behind gemm.h. dnnl_sgemm is row-major; its status must be checked because
// wrong arguments make it return an error and leave C untouched.
#include "kernels/cpu/gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include "core/error.h"
#include "core/profiler.h"

namespace lt::cpu {

void gemm_f32(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
              const float* B, int ldb, float beta, float* C, int ldc) {
  prof::Scope prof_scope("gemm", 2.0 * M * N * K, 4.0 * (double(M) * K + double(K) * N + (beta != 0 ? 2.0 : 1.0) * M * N));
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C,
                                ldc);
  LT_CHECK(st == dnnl_success,
           "gemm_f32: oneDNN dnnl_sgemm failed with status {} for trans_a={} trans_b={} M={} N={} K={} lda={} "
           "ldb={} ldc={}",
           (int)st, trans_a, trans_b, M, N, K, lda, ldb, ldc);
}

void linear_f32(float* out, const float* x, const float* w, int T, int IC, int OC, float beta) {
  gemm_f32(false, true, T, OC, IC, 1.0f, x, IC, w, IC, beta, out, OC);
}

}  // namespace lt::cpu
