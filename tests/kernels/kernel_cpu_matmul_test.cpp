// CPU matmul vs ref, once per ISA: the GEMV path (T <= 3) and the oneDNN path (T >= 4), with and
// without bias, odd IC / OC; matmul_rows (the batch engine's row-invariant product) equal bit for bit
// to one-row GEMVs for any T. Also the gemm.h wrapper's transposes and its error on bad arguments.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/cpu/gemm.h"

namespace lt::test {
namespace {

class KernelCpuMatmul : public KernelIsaTest {};

// Tolerance per output: 1e-5 of sum_i |x_i w_i| (the magnitude rounding error scales with).
void check_matmul(const Ops& cpu, int T, int IC, int OC, bool with_bias) {
  auto x = random_vec((size_t)T * IC, 100 + T, -1, 1), w = random_vec((size_t)OC * IC, 200 + IC),
       b = random_vec(OC, 300 + OC, -5, 5);
  const float* bias = with_bias ? b.data() : nullptr;
  std::vector<float> got((size_t)T * OC, NAN), want((size_t)T * OC);
  cpu.matmul_forward(got.data(), x.data(), w.data(), bias, T, IC, OC);
  ops_ref().matmul_forward(want.data(), x.data(), w.data(), bias, T, IC, OC);
  std::string tag = "matmul T=" + std::to_string(T) + " IC=" + std::to_string(IC) + " OC=" + std::to_string(OC) +
                    (with_bias ? " bias" : "");
  size_t bad = 0;
  for (int t = 0; t < T; t++)
    for (int o = 0; o < OC; o++) {
      double mag = with_bias ? std::fabs(b[o]) : 0.0;
      for (int i = 0; i < IC; i++) mag += std::fabs((double)x[(size_t)t * IC + i] * w[(size_t)o * IC + i]);
      double err = std::fabs((double)got[(size_t)t * OC + o] - want[(size_t)t * OC + o]);
      if (!(err <= 1e-5 * mag + 1e-6) && bad++ == 0)
        ADD_FAILURE() << tag << ": out[" << t << "," << o << "] got " << got[(size_t)t * OC + o] << " want "
                      << want[(size_t)t * OC + o];
    }
  EXPECT_EQ(bad, 0u) << tag;
}

TEST_P(KernelCpuMatmul, SmallAndOddShapes) {
  for (int T : {1, 2, 3, 5, 64})
    for (auto [IC, OC] : {std::pair{67, 33}, std::pair{16, 17}, std::pair{1, 5}, std::pair{300, 129}})
      for (bool bias : {false, true}) check_matmul(cpu(), T, IC, OC, bias);
}

TEST_P(KernelCpuMatmul, DecodeSizedGemv) {
  for (int T : {1, 2, 3}) check_matmul(cpu(), T, 1031, 517, T == 2);
}

// matmul_rows: every row bit-identical to matmul_forward with T = 1 on that row (what a request
// alone computes), whatever T and however the rows are grouped; and close to the reference.
TEST_P(KernelCpuMatmul, RowsAreRowInvariant) {
  for (int T : {1, 2, 3, 4, 7, 17})
    for (auto [IC, OC] : {std::pair{67, 33}, std::pair{300, 129}, std::pair{1, 5}})
      for (bool with_bias : {false, true}) {
        auto x = random_vec((size_t)T * IC, 400 + T, -1, 1), w = random_vec((size_t)OC * IC, 500 + IC),
             b = random_vec(OC, 600 + OC, -5, 5);
        const float* bias = with_bias ? b.data() : nullptr;
        std::vector<float> got((size_t)T * OC, NAN), one((size_t)T * OC, NAN), want((size_t)T * OC);
        cpu().matmul_rows(got.data(), x.data(), w.data(), bias, T, IC, OC);
        for (int t = 0; t < T; t++)
          cpu().matmul_forward(one.data() + (size_t)t * OC, x.data() + (size_t)t * IC, w.data(), bias, 1, IC, OC);
        ops_ref().matmul_rows(want.data(), x.data(), w.data(), bias, T, IC, OC);
        const std::string tag = "matmul_rows T=" + std::to_string(T) + " IC=" + std::to_string(IC);
        ASSERT_EQ(0, std::memcmp(got.data(), one.data(), got.size() * sizeof(float))) << tag;
        expect_close(got, want, 1e-4, 1e-4, tag);
      }
}

LT_INSTANTIATE_ISAS(KernelCpuMatmul);

TEST(KernelGemm, TransposesMatchNaive) {
  int M = 5, N = 7, K = 9;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      auto A = random_vec((size_t)M * K, 1), B = random_vec((size_t)K * N, 2), C = random_vec((size_t)M * N, 3);
      std::vector<float> want(C.size());
      for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
          double s = 0;
          for (int k = 0; k < K; k++) s += (double)(ta ? A[k * M + m] : A[m * K + k]) * (tb ? B[n * K + k] : B[k * N + n]);
          want[m * N + n] = (float)(2.0 * s + 0.5 * C[m * N + n]);
        }
      cpu::gemm_f32(ta, tb, M, N, K, 2.0f, A.data(), ta ? M : K, B.data(), tb ? K : N, 0.5f, C.data(), N);
      expect_close(C, want, 1e-5, 1e-5, std::string("gemm ta=") + (ta ? "1" : "0") + " tb=" + (tb ? "1" : "0"));
    }
}

TEST(KernelGemm, BadLeadingDimensionThrows) {
  std::vector<float> a(16), b(16), c(16);
  EXPECT_THROW(cpu::gemm_f32(false, false, 4, 4, 4, 1.0f, a.data(), 2, b.data(), 4, 0.0f, c.data(), 4), Error);
}

}  // namespace
}  // namespace lt::test
