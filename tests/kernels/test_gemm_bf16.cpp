// The bf16 GEMM against a double-precision product of the same bf16 values: every transpose,
// leading dimensions wider than the matrix, alpha / beta, odd sizes, M = 1, sizes past the widened
// path's blocks, the training shapes' multiples of 32 with row tails and padded strides; for the
// packed path (gemm_bf16_amx.cpp: 64 rows and more, or a transposed A) also K past one packed slice
// (1024), N past one packed panel, more columns than rows (the threads split columns), 64-byte rows
// read in place, odd strides of a transposed B, and bits that do not depend on the thread count. Run
// as the machine dispatches it (AMX where present), with LEANTUNE_AMX=0, with each AVX-512 micro-kernel
// (LEANTUNE_PACKED_BF16=dpbf16 / fma / 0, the last oneDNN; CMakeLists.txt) and with LEANTUNE_ISA=avx2,
// which takes the widened f32 path that AVX2-only CPUs (no oneDNN bf16 matmul) use.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "kernels/cpu/gemm.h"

using namespace lt;

namespace {

struct Case { int M, N, K; bool ta, tb; float alpha, beta; int pad; };

// 64-byte aligned storage (the AMX path reads aligned (M, K) rows in place)
template <class T>
struct Aligned {
  explicit Aligned(size_t n) : p(static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64))), n(n) {}
  ~Aligned() { std::free(p); }
  T* data() { return p; }
  T& operator[](size_t i) { return p[i]; }
  T* begin() { return p; }
  T* end() { return p + n; }
  T* p;
  size_t n;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {1, 37, 19, false, true, 1, 0, 0},      {17, 33, 65, false, false, 1, 0, 3},   {64, 48, 32, true, false, 0.5f, 1, 1},
      {5, 7, 3, true, true, 2, 0.25f, 5},     {128, 96, 576, false, true, 1, 1, 0},  {300, 530, 270, true, false, 1, 0.5f, 2},
      {260, 520, 300, false, true, 1, 0, 1},  {70, 96, 544, false, true, 1, 1, 2},   {33, 320, 800, false, false, 1, 0, 4},
      {16, 32, 64, false, true, 1, 0, 0},     {1, 64, 32, false, false, 1, 1, 0},    {96, 1056, 288, false, true, 1, 0, 0},
      {64, 96, 2080, false, true, 1, 1, 0},   {45, 70, 1500, true, true, 0.5f, 0, 1}, {40, 1100, 96, true, false, 1, 0, 0},
      {64, 64, 64, true, true, 1, 1, 0},      {35, 2000, 33, true, false, 1, 0, 0},  {64, 80, 96, false, true, 1, 0, 1},
      {20, 1500, 1000, true, false, 1, 0.5f, 0},  {64, 1500, 1000, false, false, 1, 0.5f, 0},
      {70, 200, 64, false, true, 1, 0, 0}};
  return c;
}

void check_against_double() {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0, 1);
  for (const Case& t : cases()) {
    const int lda = (t.ta ? t.M : t.K) + t.pad, ldb = (t.tb ? t.K : t.N) + t.pad, ldc = t.N + t.pad;
    Aligned<uint16_t> A(size_t(t.ta ? t.K : t.M) * lda), B(size_t(t.tb ? t.N : t.K) * ldb);
    for (auto& v : A) v = f32_to_bf16(nd(rng));
    for (auto& v : B) v = f32_to_bf16(nd(rng));
    std::vector<float> C(size_t(t.M) * ldc);
    for (auto& v : C) v = nd(rng);
    std::vector<float> C0 = C;
    cpu::gemm_bf16(t.ta, t.tb, t.M, t.N, t.K, t.alpha, A.data(), lda, B.data(), ldb, t.beta, C.data(), ldc);
    for (int i = 0; i < t.M; ++i)
      for (int j = 0; j < t.N; ++j) {
        double s = 0, mag = 0;
        for (int k = 0; k < t.K; ++k) {
          double a = bf16_to_f32(t.ta ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k]);
          double b = bf16_to_f32(t.tb ? B[size_t(j) * ldb + k] : B[size_t(k) * ldb + j]);
          s += a * b;
          mag += std::abs(a * b);
        }
        double want = t.alpha * s + t.beta * C0[size_t(i) * ldc + j];
        // bf16 products are exact in f32; the K + 1 f32 additions and the alpha scaling round at
        // most K + 2 times: |error| <= (K + 2) u (|alpha| sum |a b| + |beta c|), u = 2^-24
        const double bound = (t.K + 2) * 0x1p-24 * (std::abs(t.alpha) * mag + std::abs(t.beta * C0[size_t(i) * ldc + j]));
        EXPECT_NEAR(C[size_t(i) * ldc + j], want, bound + 1e-30)
            << t.M << "x" << t.N << "x" << t.K << " at " << i << "," << j;
      }
    for (int i = 0; i < t.M; ++i)  // padding columns untouched
      for (int j = t.N; j < ldc; ++j) EXPECT_EQ(C[size_t(i) * ldc + j], C0[size_t(i) * ldc + j]);
  }
}

}  // namespace

TEST(GemmBf16, MatchesADoubleProductOfTheSameBf16Values) { check_against_double(); }

bool packed_here() { return cpu_isa() == Isa::Avx512 && cpu::packed_bf16_kernels(); }
const char* kNoPacked = "no packed bf16 kernels here (no AMX nor AVX512-BF16, or LEANTUNE_PACKED_BF16=0)";

// The packed path sums each element in one thread in a fixed order: the same bits at 1 and 2 threads.
TEST(GemmBf16, PackedBitsDoNotDependOnTheThreadCount) {
  if (!packed_here()) GTEST_SKIP() << kNoPacked;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 1);
  const int before = omp_get_max_threads();
  for (const Case& t : cases()) {
    const int lda = (t.ta ? t.M : t.K) + t.pad, ldb = (t.tb ? t.K : t.N) + t.pad, ldc = t.N + t.pad;
    std::vector<uint16_t> A(size_t(t.ta ? t.K : t.M) * lda), B(size_t(t.tb ? t.N : t.K) * ldb);
    for (auto& v : A) v = f32_to_bf16(nd(rng));
    for (auto& v : B) v = f32_to_bf16(nd(rng));
    std::vector<float> C0(size_t(t.M) * ldc);
    for (auto& v : C0) v = nd(rng);
    std::vector<float> C1 = C0, C2 = C0;
    omp_set_num_threads(1);
    cpu::gemm_bf16(t.ta, t.tb, t.M, t.N, t.K, t.alpha, A.data(), lda, B.data(), ldb, t.beta, C1.data(), ldc);
    omp_set_num_threads(2);
    cpu::gemm_bf16(t.ta, t.tb, t.M, t.N, t.K, t.alpha, A.data(), lda, B.data(), ldb, t.beta, C2.data(), ldc);
    EXPECT_EQ(0, std::memcmp(C1.data(), C2.data(), C1.size() * sizeof(float))) << t.M << "x" << t.N << "x" << t.K;
  }
  omp_set_num_threads(before);
}

// The FMA micro-kernel (PackedMode::Fma) adds each product of the widened values to the f32 sum in k
// order, one rounding each: a chain of fmaf from +0, bit for bit, through slices and sub-slices of K
// (C stored and reloaded as f32 between them changes nothing), row and column tails, 1 and 2 threads.
TEST(GemmBf16, FmaMicroKernelIsAnFmaChainInKOrder) {
  if (cpu_isa() != Isa::Avx512 || cpu::packed_bf16_mode() != cpu::PackedMode::Fma)
    GTEST_SKIP() << "the FMA micro-kernel is not the one chosen here (LEANTUNE_PACKED_BF16=fma, LEANTUNE_AMX=0)";
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0, 1);
  struct F { int M, N, K; bool ta, tb; };
  const int before = omp_get_max_threads();
  for (const F& t : {F{64, 64, 64, false, true}, F{96, 70, 576, false, true}, F{70, 40, 1100, false, false},
                     F{64, 33, 96, true, false}, F{100, 1100, 64, false, true}})
    for (int threads : {1, 2}) {
      const int lda = t.ta ? t.M : t.K, ldb = t.tb ? t.K : t.N;
      Aligned<uint16_t> A(size_t(t.M) * t.K), B(size_t(t.N) * t.K);
      for (auto& v : A) v = f32_to_bf16(nd(rng));
      for (auto& v : B) v = f32_to_bf16(nd(rng));
      std::vector<float> C(size_t(t.M) * t.N, 9.0f);
      omp_set_num_threads(threads);
      cpu::gemm_bf16(t.ta, t.tb, t.M, t.N, t.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), t.N);
      omp_set_num_threads(before);
      int bad = 0;
      for (int i = 0; i < t.M; ++i)
        for (int j = 0; j < t.N; ++j) {
          float s = 0.0f;
          for (int k = 0; k < t.K; ++k)
            s = std::fma(bf16_to_f32(t.ta ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k]),
                         bf16_to_f32(t.tb ? B[size_t(j) * ldb + k] : B[size_t(k) * ldb + j]), s);
          float got = C[size_t(i) * t.N + j];
          if (std::memcmp(&s, &got, 4) != 0 && bad++ < 3)
            ADD_FAILURE() << t.M << "x" << t.N << "x" << t.K << " threads " << threads << " at " << i << "," << j
                          << ": " << got << " want " << s;
        }
    }
}

TEST(GemmBf16, WidenedPathMatchesTooUnderAnAvx2Cap) {
  const char* old = std::getenv("LEANTUNE_ISA");
  const std::string saved = old ? old : "";
  setenv("LEANTUNE_ISA", "avx2", 1);
  check_against_double();
  if (old) setenv("LEANTUNE_ISA", saved.c_str(), 1);
  else unsetenv("LEANTUNE_ISA");
}

// gemm_bf16_appended (packed) against gemm_bf16 on the concatenations it stands for, [A | A2 | 0] and
// [op(B); op(B2); 0]: the same k steps in the same order, so the same bits (slices and sub-slices of K
// accumulate through C exactly, whole blocks and part blocks alike, wherever they end: K = 896 splits
// into 4 sub-slices of 7 steps and the tail, its concatenation's 29 steps into 8, 8, 8 and 5).
TEST(GemmBf16, AppendedProductIsTheConcatenationsProduct) {
  if (!packed_here()) GTEST_SKIP() << kNoPacked;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  struct App { int M, N, K, K2; bool tb; float beta; };
  for (const App& t : {App{64, 64, 64, 16, true, 0}, App{100, 70, 576, 16, true, 1}, App{2048, 48, 96, 1, false, 0},
                       App{64, 64, 1088, 32, true, 1}, App{64, 96, 1088, 7, false, 0}, App{90, 576, 192, 16, false, 1},
                       App{100, 70, 896, 16, true, 1}, App{64, 96, 960, 7, false, 0}}) {  // sub-slices of K
    const int Kc = t.K + 32;
    Aligned<uint16_t> A(size_t(t.M) * t.K), A2(size_t(t.M) * t.K2), Acat(size_t(t.M) * Kc);
    Aligned<uint16_t> B(size_t(t.N) * t.K), B2(size_t(t.N) * t.K2), Bcat(size_t(t.N) * Kc);
    for (auto* v : {&A, &A2, &B, &B2})
      for (auto& x : *v) x = f32_to_bf16(nd(rng));
    std::fill(Acat.begin(), Acat.end(), uint16_t(0));
    std::fill(Bcat.begin(), Bcat.end(), uint16_t(0));
    for (int i = 0; i < t.M; ++i) {
      for (int k = 0; k < t.K; ++k) Acat[size_t(i) * Kc + k] = A[size_t(i) * t.K + k];
      for (int k = 0; k < t.K2; ++k) Acat[size_t(i) * Kc + t.K + k] = A2[size_t(i) * t.K2 + k];
    }
    // op(B) (K, N): stored (N, K) when transposed, else (K, N); B2 likewise with K2
    for (int j = 0; j < t.N; ++j) {
      for (int k = 0; k < t.K; ++k) (t.tb ? Bcat[size_t(j) * Kc + k] : Bcat[size_t(k) * t.N + j]) = t.tb ? B[size_t(j) * t.K + k] : B[size_t(k) * t.N + j];
      for (int k = 0; k < t.K2; ++k)
        (t.tb ? Bcat[size_t(j) * Kc + t.K + k] : Bcat[size_t(t.K + k) * t.N + j]) = t.tb ? B2[size_t(j) * t.K2 + k] : B2[size_t(k) * t.N + j];
    }
    std::vector<float> C0(size_t(t.M) * t.N);
    for (auto& v : C0) v = nd(rng);
    std::vector<float> C1 = C0, C2 = C0;
    const int ldb = t.tb ? t.K : t.N, ldb2 = t.tb ? t.K2 : t.N;
    ASSERT_TRUE(cpu::gemm_bf16_appended(t.tb, t.M, t.N, t.K, A.data(), t.K, B.data(), ldb, t.K2, A2.data(), t.K2,
                                        B2.data(), ldb2, t.beta, C1.data(), t.N));
    cpu::gemm_bf16(false, t.tb, t.M, t.N, Kc, 1.0f, Acat.data(), Kc, Bcat.data(), t.tb ? Kc : t.N, t.beta, C2.data(), t.N);
    EXPECT_EQ(0, std::memcmp(C1.data(), C2.data(), C1.size() * sizeof(float))) << t.M << "x" << t.N << "x" << t.K << "+" << t.K2;
  }
}

// gemm_bf16_lora (packed) against the three steps it fuses: xa = A·op(L) by gemm_bf16, xa rounded
// to bf16, then gemm_bf16_appended with it: the same k steps in the same order, so xa, xa16 and C
// have the same bits. Both uses: the forward's (B and B2 transposed, L = Aᵀ stored (R, K), beta 0)
// and the dx product's (nothing transposed, xa16 in the columns after A's own in a wider row,
// beta 1); at 1 and 2 threads, K past a packed slice (1024), N past one packed panel and one
// block, ranks 1, 16 and 32, A's rows in a wider padded matrix.
TEST(GemmBf16, LoraRankTermIsItsThreeSteps) {
  if (!packed_here()) GTEST_SKIP() << kNoPacked;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 1);
  struct Lf { int M, N, K, R, lda; };
  for (bool fwd : {true, false})
    for (const Lf& t : {Lf{64, 64, 64, 16, 64}, Lf{96, 576, 576, 16, 608}, Lf{128, 48, 1536, 32, 1600},
                        Lf{64, 1200, 96, 1, 160}, Lf{256, 40, 2048, 16, 2080}, Lf{96, 100, 896, 16, 928}})
      for (int threads : {1, 2}) {
        // A (M, lda): K columns of A, then (backward) room for xa16 at column K
        const int lda = fwd ? t.lda : std::max(t.lda, (t.K + t.R + 31) / 32 * 32);
        Aligned<uint16_t> A(size_t(t.M) * lda), A2(size_t(t.M) * lda), B(size_t(t.N) * t.K);
        Aligned<uint16_t> L(size_t(t.R) * t.K), B2(size_t(t.N) * t.R);
        for (auto* v : {&A, &B, &L, &B2})
          for (auto& x : *v) x = f32_to_bf16(nd(rng));
        std::copy(A.begin(), A.end(), A2.begin());
        const int ldb = fwd ? t.K : t.N, ldl = fwd ? t.K : t.R, ldb2 = fwd ? t.R : t.N, ld16 = fwd ? t.R : lda;
        std::vector<float> xa1(size_t(t.M) * t.R, 5.0f), xa2 = xa1, C1(size_t(t.M) * t.N), C2;
        for (auto& c : C1) c = nd(rng);
        C2 = C1;
        std::vector<uint16_t> own1(size_t(t.M) * t.R, 1), own2(size_t(t.M) * t.R, 2);
        uint16_t* x16_1 = fwd ? own1.data() : A.data() + t.K;  // the backward's xa16 sits in A's rows
        uint16_t* x16_2 = fwd ? own2.data() : A2.data() + t.K;
        const float beta = fwd ? 0.0f : 1.0f;
        const int saved = omp_get_max_threads();
        omp_set_num_threads(threads);
        const cpu::LoraRankTerm rt{t.R, L.data(), fwd, ldl, xa1.data(), x16_1, ld16, B2.data(), ldb2};
        ASSERT_TRUE(
            cpu::gemm_bf16_lora(fwd, t.M, t.N, t.K, A.data(), lda, B.data(), ldb, rt, beta, C1.data(), t.N));
        cpu::gemm_bf16(false, fwd, t.M, t.R, t.K, 1.0f, A2.data(), lda, L.data(), ldl, 0.0f, xa2.data(), t.R);
        for (int i = 0; i < t.M; ++i)
          for (int r = 0; r < t.R; ++r) x16_2[size_t(i) * ld16 + r] = f32_to_bf16(xa2[size_t(i) * t.R + r]);
        ASSERT_TRUE(cpu::gemm_bf16_appended(fwd, t.M, t.N, t.K, A2.data(), lda, B.data(), ldb, t.R, x16_2, ld16,
                                            B2.data(), ldb2, beta, C2.data(), t.N));
        omp_set_num_threads(saved);
        const std::string tag = std::string(fwd ? "forward " : "dx ") + std::to_string(t.M) + "x" +
                                std::to_string(t.N) + "x" + std::to_string(t.K) + " R " + std::to_string(t.R) +
                                " threads " + std::to_string(threads);
        EXPECT_EQ(0, std::memcmp(xa1.data(), xa2.data(), xa1.size() * sizeof(float))) << tag << " xa";
        EXPECT_EQ(own1 == own2, fwd) << tag << " xa16 (its own rows in the forward, else untouched)";
        EXPECT_EQ(0, std::memcmp(A.data(), A2.data(), size_t(t.M) * lda * 2)) << tag << " xa16 (in A's rows)";
        EXPECT_EQ(0, std::memcmp(C1.data(), C2.data(), C1.size() * sizeof(float))) << tag << " C";
      }
}

// Elsewhere (and for shapes the AMX path does not take) it declines and leaves C alone.
TEST(GemmBf16, AppendedProductDeclinesOffItsPath) {
  std::vector<uint16_t> A(64 * 40, 0x3f80), B(64 * 40, 0x3f80);
  std::vector<float> C(64 * 64, 7.0f);
  EXPECT_FALSE(cpu::gemm_bf16_appended(true, 64, 64, 40, A.data(), 40, B.data(), 40, 8, A.data(), 8, B.data(), 8, 0.0f,
                                       C.data(), 64));  // K not a multiple of 32
  EXPECT_FALSE(cpu::gemm_bf16_appended(true, 16, 64, 32, A.data(), 32, B.data(), 32, 8, A.data(), 8, B.data(), 8, 0.0f,
                                       C.data(), 64));  // a few rows
  for (float c : C) ASSERT_EQ(c, 7.0f);
  std::vector<float> xa(96 * 16, 7.0f);
  std::vector<uint16_t> xa16(96 * 16);
  Aligned<uint16_t> A2(96 * 64);
  const cpu::LoraRankTerm rt{16, B.data(), true, 64, xa.data(), xa16.data(), 16, B.data(), 16};
  EXPECT_FALSE(cpu::gemm_bf16_lora(true, 80, 64, 64, A2.data(), 64, B.data(), 64, rt, 0.0f, C.data(),
                                   64));  // rows not a multiple of 32
  EXPECT_FALSE(cpu::gemm_bf16_lora(true, 64, 64, 64, A2.data() + 1, 64, B.data(), 64, rt, 0.0f, C.data(),
                                   64));  // A's rows not on 64-byte lines
  for (float c : C) ASSERT_EQ(c, 7.0f);
  for (float x : xa) ASSERT_EQ(x, 7.0f);
}
