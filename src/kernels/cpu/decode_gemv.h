// Internal to the CPU backend: the decode products (T <= kDecodeMaxT tokens) of the linear op for
// 16-bit and 4-bit weights, which stream each weight row once from memory at the bandwidth the
// weight's bytes allow, instead of widening or decoding tiles of it into f32 first (half_linear.cpp,
// quant_linear.cpp do that for prefill). Threads split the output rows (chunks of kGemvRows, one
// OpenMP team per call, no barrier per row). Per ISA (gemv_{scalar,avx2,avx512}.cpp):
//   BF16  AVX-512 BF16: vdpbf16ps on the bf16 bits of x and W (pairs of exact products summed in
//         f32); AVX-512F / AVX2: W widened to f32 (a shift) and FMA'd with x's f32 values.
//   F16   W widened with vcvtph2ps (F16C) and FMA'd with x.
//   4-bit NF4 / FP4 / Int4 with one f32 scale per block (no double quantization, no block offset)
//         and rows made of whole blocks: 16 codes at a time looked up in the 16-entry table (one
//         vpermps; AVX2 two and a blend), FMA'd with x into a block sum, then scaled once per block:
//         y = Σ_b s_b · Σ_{c in b} x_c · table[q_c]  (the reference sums x_c · (table[q_c] · s_b)).
//   Q8_0  llama.cpp's blocks of 32 int8 with an f16 scale d (rows of whole blocks), against x
//         quantized once per call to q8_0 too (kernels/q8_0_act.h, into the scratch): each block's
//         int8 dot product in int32, scaled by dx·dw: y = Σ_b (dx_b·dw_b) · Σ_{c in b} qx_c·qw_c, as
//         the reference computes it (only the f32 sum over blocks runs in another order). AVX-512
//         VNNI: vpdpbusd of the codes made unsigned (w + 128) with x's, each int32 lane started at
//         −128·(the sum of its 4 x codes, computed once per call) so it holds Σ w·x exactly; two
//         blocks (68 bytes) per step, their codes picked out of the window with one vpermt2w and
//         each lane scaled by its block's dx·dw, two rows at a time sharing x's loads. AVX2: vpmaddubsw +
//         vpmaddwd on |q_w| and q_x with q_w's sign, as ggml does.
//   Q4_0  the same against llama.cpp's block_q4_0: each block's 16 bytes of nibbles spread into 32
//         codes (low nibbles, then high, as ggml's bytes_from_nibbles_32); the SIMD loops take the
//         nibbles as stored (w + 8) with lanes started at −8·(their x sum): AVX-512 VNNI four blocks
//         per step (vpdpbusd on the low and high nibbles of 4 blocks against x grouped to match by
//         q4_0_group_x, each lane scaled by its block's dx·dw), AVX2 one block per step (vpmaddubsw +
//         vpmaddwd), both two rows at a time; the scalar loop q − 8.
// The sums run in another order than the reference's (kernels/ref), so results differ from it by
// rounding only (tests/kernels/test_decode_gemv.cpp derives the bound). Every SIMD loop prefetches
// the weight bytes kPrefetchBytes ahead of its reads (past a row's end into the next rows). The
// 16-bit loops for one token read 8 rows side by side (AVX2: 2; 4 for 2-3 tokens), each row with the
// one-row loop's arithmetic: one thread of a Xeon VM streamed f16 at 14.8 GB/s one row at a time and
// 19.6 eight at a time (a triad: 18.1; llama.cpp's tinyBLAS, 4 rows at a time, 19.8). The q8_0 /
// q4_0 loops stay at two rows: four were slower there (12.2 against 13.2 GB/s at q8_0).
#pragma once
#include <xmmintrin.h>

#include "core/cpu_features.h"
#include "kernels/linear.h"

namespace lt::cpu {

// Decode reads each weight once, from memory. A software prefetch this far ahead of the read keeps
// more lines in flight than the hardware prefetcher alone: on a 2-vCPU Xeon VM a q8_0 row loop
// read 5-6 GB/s on one thread without it and 8-9 GB/s with it (4-32 KiB ahead all alike). Into L2
// (T1), not L1: the L1 fill buffers are fewer than L2's queue; bf16 / f16 decode on the ~1B shape
// streamed 27-28 GB/s on 2 threads that way against 23-24 with T0 (a triad: 28.8).
inline constexpr int kPrefetchBytes = 8192;
inline void prefetch_ahead(const void* p) { _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T1); }

// The 16-bit group loops read R rows side by side, so kPrefetchBytes past a row's read lands in a
// row of the same group, which is being read already. They prefetch the same column R rows below
// instead: the next group's, which this thread reads next (a thread's chunks are contiguous). One Zen 4 thread decoded the
// SmolLM2 shape in bf16 (576-wide rows) at 52-55 tok/s the first way, 60-68 this way; the ~1B
// shape 9.6-9.8 against 10.4-10.7 (none at all: 36).
template <int R>
inline void prefetch_next_group(const uint16_t* wr, int IC) {
  if constexpr (R >= 4) _mm_prefetch(reinterpret_cast<const char*>(wr + size_t(R) * size_t(IC)), _MM_HINT_T1);
  else prefetch_ahead(wr);
}

inline constexpr int kDecodeMaxT = 3;  // tokens per call the decode products take
inline constexpr int kGemvRows = 8;    // output rows per work item

// True when decode_gemv runs w for T tokens (T <= kDecodeMaxT and a kind / layout listed above).
bool decode_gemv_applies(const WeightView& w, int T);

// y (T, OC) = x·Wᵀ (overwritten, no bias) with the loops of `isa` (usable here). 16-bit kinds read
// in.x16 (BF16 with vdpbf16ps) or in.x, which hold the same values (the linear op's contract). Q8_0
// quantizes x into `scratch` (>= decode_gemv_scratch_bytes; other kinds use none).
void decode_gemv(Isa isa, float* y, const LinearInput& in, const WeightView& w, void* scratch = nullptr,
                 size_t scratch_bytes = 0);
size_t decode_gemv_scratch_bytes(const WeightView& w, int T);

namespace gemv {
// Rows [o0, o1) of y for in.T tokens.
using RowsFn = void (*)(float* y, const LinearInput& in, const WeightView& w, int o0, int o1);
// Q8_0 / Q4_0 rows [o0, o1) of y for T tokens of x quantized to xq (T, IC) with block scales xd (T, IC / 32).
using Q8RowsFn = void (*)(float* y, const int8_t* xq, const float* xd, int T, const WeightView& w, int o0, int o1);
// x as the AVX-512 VNNI rows take it: codes q (T, IC), block scales d (T, IC / 32), and per 4 codes
// −k times their sum, off (T, IC / 4), k = 128 for Q8_0 and 8 for Q4_0 (code_offsets).
struct QuantizedX {
  const int8_t* q;
  const float* d;
  const int32_t* off;
  int T;
};
void code_offsets(int32_t* off, const int8_t* q, int64_t n, int k);
// quantize_act_q8_0 (kernels/q8_0_act.h) or the ISA's loop for it (the same bits; n a multiple of 32)
using QuantizeFn = void (*)(const float* x, int64_t n, int8_t* q, float* d);
QuantizeFn act_quantizer(Isa isa);
namespace scalar {
void half_rows(float* y, const LinearInput& in, const WeightView& w, int o0, int o1);
void four_bit_rows(float* y, const LinearInput& in, const WeightView& w, int o0, int o1);
void q8_0_rows(float* y, const int8_t* xq, const float* xd, int T, const WeightView& w, int o0, int o1);
void q4_0_rows(float* y, const int8_t* xq, const float* xd, int T, const WeightView& w, int o0, int o1);
}  // namespace scalar
namespace avx2 {
// quantize_act_q8_0 (kernels/q8_0_act.h) on AVX2, the same bits (n a multiple of 32)
void quantize_x(const float* x, int64_t n, int8_t* q, float* d);
void half_rows(float* y, const LinearInput& in, const WeightView& w, int o0, int o1);
void four_bit_rows(float* y, const LinearInput& in, const WeightView& w, int o0, int o1);
void q8_0_rows(float* y, const QuantizedX& x, const WeightView& w, int o0, int o1);  // x.off unused
void q4_0_rows(float* y, const QuantizedX& x, const WeightView& w, int o0, int o1);  // x.off with k = 8
}  // namespace avx2
namespace avx512 {
void half_rows(float* y, const LinearInput& in, const WeightView& w, int o0, int o1);
void bf16_dot_rows(float* y, const LinearInput& in, const WeightView& w, int o0, int o1);  // needs AVX512-BF16
void four_bit_rows(float* y, const LinearInput& in, const WeightView& w, int o0, int o1);
// quantize_act_q8_0 (kernels/q8_0_act.h) on AVX-512, the same bits (n a multiple of 32)
void quantize_x(const float* x, int64_t n, int8_t* q, float* d);
void q8_0_rows_vnni(float* y, const QuantizedX& x, const WeightView& w, int o0, int o1);  // needs AVX512-VNNI
// x grouped as q4_0_group_x leaves it
void q4_0_rows_vnni(float* y, const QuantizedX& x, const WeightView& w, int o0, int o1);  // needs AVX512-VNNI
// x's codes q (T, IC) rearranged per 4 blocks (128 codes) into the 4 blocks' first 16 codes, then
// their last 16, and off (T, IC / 4) made −8·(the sum of each 32-bit lane's 8 codes, its 4 in each
// half) for those groups; the blocks past the last whole group keep their layout and code_offsets'.
void q4_0_group_x(int8_t* q, int32_t* off, int64_t IC, int T);
}  // namespace avx512
}  // namespace gemv

}  // namespace lt::cpu
