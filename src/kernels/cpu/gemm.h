// The one wrapper over oneDNN's GEMM. Every f32 GEMM of the engine goes through here so the
// library (and its version quirks) stays behind one small API; bf16 / int8 paths will join here.
// oneDNN runs on the same OpenMP runtime as our kernels: never call these inside a parallel region.
#pragma once
#include <cstdint>

#include "kernels/linear.h"

namespace lt::cpu {

// Row-major BLAS-like GEMM: C (M, N) = alpha * op(A) · op(B) + beta * C, where op(A) is (M, K)
// and op(B) is (K, N); trans_a / trans_b say A / B are stored transposed. lda/ldb/ldc are row
// strides in elements. Throws lt::Error naming the shape if oneDNN rejects the call.
void gemm_f32(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
              const float* B, int ldb, float beta, float* C, int ldc);

// The same with A and B in bf16 (uint16_t bit patterns, dtype.h) and f32 accumulation into the
// f32 C (gemm_bf16.cpp: oneDNN's matmul primitive, AVX512-BF16 when present).
void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t* A, int lda,
               const uint16_t* B, int ldb, float beta, float* C, int ldc);

// The micro-kernel of gemm_bf16_amx.cpp's packed products (gemm_bf16 at the avx512 level and the
// fused products below): AMX tiles (where amx_bf16_kernels()), AVX512-BF16 vdpbf16ps, or f32 FMAs on
// f32 copies of the packed operands (exact: a product of two bf16 values is an f32), or None (oneDNN,
// unfused). Without AMX the faster of the two AVX-512 units is chosen once per process: Fma where the
// f32 FMA rate is at least 1.5x vdpbf16ps's FLOP rate (a Xeon without AMX issued vdpbf16ps at a quarter
// of its FMA rate: half the FLOPs), else None. LEANTUNE_PACKED_BF16=0|dpbf16|fma overrides (tests and
// comparisons); neither AVX-512 mode runs without avx512_bf16.
enum class PackedMode { None, Amx, Dpbf16, Fma };
PackedMode packed_bf16_mode();
inline bool packed_bf16_kernels() { return packed_bf16_mode() != PackedMode::None; }

namespace amx {
// gemm_bf16 on AMX tiles (gemm_bf16_amx.cpp); only where amx_bf16_kernels(), K > 0, and never
// inside a parallel region. Each element's bits do not depend on the thread count.
void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t* A, int lda,
               const uint16_t* B, int ldb, float beta, float* C, int ldc);
// gemm_bf16_appended's product, K a multiple of 32
void gemm_bf16_appended(bool trans_b, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                        int K2, const uint16_t* A2, int lda2, const uint16_t* B2, int ldb2, float beta, float* C,
                        int ldc);
// C (M, N) = A · op(B)ᵀ for the bf16 split of an f16 weight W (N, K), packed from W as the product
// goes (no bf16 copy of W): op(B) (N, parts · K) holds each k step of 32 of W `parts` times, as
// [hi, hi] (parts 2: an f16 W whose values are all bf16s, hi = W exactly) or [hi, lo, hi, lo]
// (parts 4: any f16 W, hi + lo = W exactly); A (M, parts · K) holds x's parts to match
// (half_linear.cpp). K a multiple of 32.
// FLOP rates of one thread's vdpbf16ps and f32 FMA loops (GFLOP/s; ~1 ms each): packed_bf16_mode()'s choice
void avx512_dot_rates(double& dpbf16, double& fma);
void gemm_f16_split(int M, int N, int K, int parts, const uint16_t* A, int lda, const uint16_t* W, int ldw,
                    float* C, int ldc);
}  // namespace amx

// The rank term gemm_bf16_lora (below) computes inside its product.
struct LoraRankTerm {
  int R;                      // 1..32
  const uint16_t* L;          // op(L) (K, R): stored (R, K) when trans_l, else (K, R); row stride ldl
  bool trans_l;
  int ldl;
  float* xa;                  // (M, R) f32, row stride R: A · op(L)
  uint16_t* xa16;             // (M, R) bf16, row stride ld16: xa rounded
  int ld16;
  const uint16_t* B2;         // op(B2) (R, N), transposed as B is; row stride ldb2
  int ldb2;
  // xa's columns R1.. into xa_b (M, R - R1) instead, xa then (M, R1) (gemm_bf16_glu: two adapters' xa)
  int R1 = 0;
  float* xa_b = nullptr;
};

// gemm_bf16_glu's epilogue: rows m0 .. m0 + rows of a finished (32-column) block of C, c (row stride
// ldc) holding gate's columns f0 .. f0 + 16 and then up's, into the outputs (kernels_avx512.cpp).
using GluEpilogue = void (*)(const GluOutputs& o, int m0, int rows, int f0, const float* c, int ldc);
namespace avx512 {
void swiglu_glu_block(const GluOutputs& o, int m0, int rows, int f0, const float* c, int ldc);
}

namespace amx {
// gemm_bf16_lora's product and its condition (below)
bool lora_fuses(int M, int K, int R, const uint16_t* A, int lda);
void gemm_bf16_lora(bool trans_b, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                    const LoraRankTerm& r, float beta, float* C, int ldc);
// gemm_bf16_glu's product and its condition (below)
bool glu_fuses(int M, int F, int K, const uint16_t* A, int lda);
void gemm_bf16_glu(int M, int F, int K, const uint16_t* A, int lda, const uint16_t* Wg, const uint16_t* Wu, int ldw,
                   const LoraRankTerm* r, const GluOutputs& o, GluEpilogue epi);
}  // namespace amx

// C (M, N) = A · op(B) + A2 · op(B2) + beta · C with A (M, K), A2 (M, K2) stored untransposed and B,
// B2 both transposed or not: one product whose inner dimension is A's K then A2's K2 (1..32) as one
// more k step of 32 (zero padded), the same sums as gemm_bf16 on the concatenations [A | A2 | 0] and
// [op(B); op(B2); 0] without building them (bf16 LoRA's base and rank terms, linear.cpp). Only on
// the AMX path (K a multiple of 32, M >= 64): returns false, computing nothing, elsewhere.
bool gemm_bf16_appends(int M, int K, int K2);  // whether gemm_bf16_appended computes this shape here
bool gemm_bf16_appended(bool trans_b, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                        int K2, const uint16_t* A2, int lda2, const uint16_t* B2, int ldb2, float beta, float* C,
                        int ldc);

// bf16 LoRA's products in one pass over A (linear.cpp; forward: A = x16, L = bf16(A_lora)ᵀ; the
// backward's dx: A = bf16(dout), L = bf16(B_lora)): xa = A · op(L), in f32 and rounded to bf16
// (r.xa, r.xa16), then C = A · op(B) + xa16 · op(B2) + beta · C as gemm_bf16_appended. Each
// 32-row block's xa is computed just before its rows' appended step, so A is read once while in
// cache: the bits of gemm_bf16(false, trans_l, M, R, K, 1, A, lda, L, ldl, 0, xa, R), rounding,
// and gemm_bf16_appended. Only on the AMX path (M a multiple of 32 and >= 64, K a multiple of 32
// up to 8192, R <= 32, A's rows on 64-byte lines): returns false, computing nothing, elsewhere.
bool gemm_bf16_lora(bool trans_b, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                    const LoraRankTerm& r, float beta, float* C, int ldc);

// Two linears sharing their input, g = A·Wgᵀ (+ the rank term's gate columns) and u = A·Wuᵀ, as one
// product whose columns interleave Wg's and Wu's rows 16 at a time (packed so, no copy), each
// finished 32-column block [g 16 | u 16] of C handed to epi while in cache (never written to memory).
// With r (two adapters' rank terms side by side: op(L) = [Ag; Au]ᵀ, R = Rg + Ru, R1 = Rg, B2 in the
// interleaved order with gate rows [s·Bg | 0] and up rows [0 | s·Bu]) each column's sums are those of
// gemm_bf16_lora for its own adapter, the other's columns adding exact zeros. Only on the AMX path
// (as gemm_bf16_lora, and F a multiple of 16, K <= 1024): returns false, computing nothing, elsewhere.
bool gemm_bf16_glu(int M, int F, int K, const uint16_t* A, int lda, const uint16_t* Wg, const uint16_t* Wu, int ldw,
                   const LoraRankTerm* r, const GluOutputs& o, GluEpilogue epi);

// The linear-layer shape: out (T, OC) = x (T, IC) · w (OC, IC)ᵀ (no bias). beta = 1 accumulates.
void linear_f32(float* out, const float* x, const float* w, int T, int IC, int OC, float beta = 0.0f);

// The fused lm_head + cross-entropy with the TrainOps::lm_head_loss contract (kernels/backward.h),
// its three products as GEMMs per chunk (cross_entropy.cpp).
float lm_head_loss(float* dx, float* dw, float* logits_chunk, const float* x, const float* w, const int* labels,
                   int T, int C, int V, int chunk, float loss_scale);
// The same with soft-capped logits (TrainOps::lm_head_loss_softcap).
float lm_head_loss_softcap(float* dx, float* dw, float* logits_chunk, const float* x, const float* w,
                           const int* labels, int T, int C, int V, int chunk, float loss_scale, float cap);
// The same with the per-row softmax + loss (+ gradient) done by row_fn (one per ISA).
using XentRowFn = double (*)(float* logits_row, int V, int label, float gscale, bool want_grad);
float lm_head_loss_rows(XentRowFn row_fn, float* dx, float* dw, float* logits_chunk, const float* x, const float* w,
                        const int* labels, int T, int C, int V, int chunk, float loss_scale);
// TrainOps::lm_head_loss_bf16 with the ISA's row function (cross_entropy_bf16.cpp).
float lm_head_loss_rows_bf16(XentRowFn row_fn, float* dx, float* dw, float* logits_chunk, uint16_t* x16,
                             const float* x, const uint16_t* w, const int* labels, int T, int C, int V, int chunk,
                             float loss_scale);

}  // namespace lt::cpu
