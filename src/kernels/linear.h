// The operands of the linear op (Ops::linear_forward, TrainOps::linear_backward_input /
// linear_backward_weight): a weight of any storage kind described by raw pointers (WeightView),
// an optional bias, an optional LoRA adapter on top (LoraView), and the scratch one call may use,
// planned by the caller (nothing allocates inside a call).
//   y (T, OC) = x (T, IC) · Wᵀ + bias + s · (xd · Aᵀ) · Bᵀ,   xd = x ∘ dropout mask
// The view is self-describing: every number needed to decode an element is reachable from it
// (the code tables too), so any backend can run every kind without knowing where the weights came
// from; src/quant builds views of its QuantTensor storage (quant/quant_tensor.h weight_view()).
//
// Element (r, c) of W (OC, IC) per kind, f = r·IC + c (the reference, kernels/ref/linear.cpp):
//   F32        data[f]
//   BF16, F16  the 16-bit value widened to f32 (exact)
//   Int8       (float(q[f]) · row_absmax[r]) · kInt8Inv127           (LLM.int8 weights)
//   NF4, FP4,  code_values[code(f)] · scale(f / blocksize): codes two per byte, even f in the high
//   Int4       nibble; scale(b) = absmax[b], or with double quantization (qabsmax set)
//              absmax_code_values[qabsmax[b]] · absmax2[b / 256] (rounded) + offset; with
//              block_offset set (asymmetric Int4) that product rounded, then + block_offset[b]
//   Q8_0       float(q) · f16_to_f32(d) of llama.cpp's block_q8_0: data is (rows · cols / 32) blocks
//              of 34 bytes (d as f16, then 32 int8 q), block f / 32, q its element f % 32; cols is a
//              multiple of 32 (rows are whole blocks)
//   Q4_0       float(q − 8) · f16_to_f32(d) of llama.cpp's block_q4_0: (rows · cols / 32) blocks of 18
//              bytes (d as f16, then 16 bytes: element j of a block in byte j's low nibble, j + 16 in
//              its high one); cols a multiple of 32 (kernels/ggml_blocks.h reads both block kinds)
// What each kind's products are:
//   F32, NF4, FP4, Int4  f32 products of x with the decoded W.
//   BF16, F16      mixed precision: x must hold values of that type (x16: the same values' bits,
//                  which the fast bf16 GEMM reads; F16 with bf16_values may also run on bf16 GEMMs,
//                  each product still exact); the backward rounds dout to the type once, as
//                  a 16-bit GEMM's operand; accumulation in f32. dW is an f32 gradient (of the
//                  master weight the 16-bit working copy was rounded from).
//   Int8           forward: the LLM.int8 product. Columns c with |x[t,c]| >= int8_threshold for some
//                  t (threshold > 0) are outliers, computed in f32 against the decoded W; the other
//                  columns are quantized per row, xq = round_half_even(x · ((1/absmax_t) · 127)),
//                  absmax_t over the non-outlier columns, and y = float(Σ xq·q) · ((absmax_t ·
//                  row_absmax[o]) · kInt8Inv127Sq). Backward: f32 products with the decoded W.
//   Q8_0, Q4_0     forward: llama.cpp's q8_0 / q4_0 product. Each row of x is quantized in blocks of 32
//                  (kernels/q8_0_act.h: codes qx, f16 scales dx), and y[t,o] = Σ_b (dx_b · d_b) ·
//                  float(Σ_{c in b} qx_c · q_c) (Q4_0: q_c − 8), the block sums in int32 (exact), the block terms
//                  summed in f32 in any order (the tiled prefill multiplies qx·dx by the decoded W,
//                  which equals it up to that rounding; on AMX int8 the block sums are tdpbssd tiles). Backward: f32 products with the decoded W.
//   Quantized kinds are frozen: no dW.
//   bf16 products (WeightView::bf16_products, quantized kinds; QLoRA in bf16, as bitsandbytes runs a
//                  4-bit / 8-bit base with compute_dtype=bfloat16): the products with the decoded W —
//                  a 4-bit kind's forward, every quantized kind's backward — take bf16 operands: W's
//                  decoded values rounded to bf16 (nearest even), x as x16 (its bf16 bits, which x's
//                  values must equal), dout rounded to bf16 once (the dy scratch, linear_dy_bytes);
//                  f32 accumulation. The LLM.int8 and q8_0 / q4_0 forwards stay as above.
// The LoRA part is f32 throughout (dout is not rounded for it), except with LoraView::bf16 (a BF16 weight or
// a quantized one with bf16_products, x16 given, no dropout, not DoRA: bf16 mixed-precision LoRA, as PyTorch
// autocast runs PEFT's lora_A / lora_B; W below is then bf16(W)): the four products whose inner dimension is
// IC, OC or T take bf16 operands, A and B rounded from their f32 masters on each call, with f32 accumulation:
//   xa = x16·bf16(A)ᵀ,  g = bf16(dout)·bf16(B),  dB += s·bf16(dout)ᵀ·bf16(xa),  dA += s·bf16(g)ᵀ·x16;
// and the two of inner dimension R are bf16 products too (autocast, too, multiplies bf16 values
// there), each the base's product with its inner dimension extended by R:
//   out = [x16 | bf16(xa)]·[W | bf16(s·B)]ᵀ + bias,   dx += [bf16(dout) | bf16(g)]·[W; bf16(s·A)].
//
// DoRA (LoraView::magnitude set; PEFT's use_dora, peft/tuners/lora/dora.py and variants.py): with
// k = m / n per output row, n = weight_norm = ||W + s·B·A||_row (dora_weight_norm) held constant,
// as PEFT detaches it, and the base products without the bias (y0 = x·Wᵀ, yd = xd·Wᵀ):
//   y = y0 + (k − 1)∘yd + k∘(s·(xd·Aᵀ)·Bᵀ) + bias          (no dropout: k∘(y0 + s·(x·Aᵀ)·Bᵀ) + bias)
// so  dx = dout·W + (((k − 1)∘dout)·W)∘mask + s·(((k∘dout)·B)·A)∘mask,
//     dB = s·(k∘dout)ᵀ·xa,  dA = s·((k∘dout)·B)ᵀ·xd,  dm = Σ_t dout∘(yd + s·xa·Bᵀ) / n,  db = Σ_t dout.
// The weight is frozen (no dW). The backward recomputes yd (one more base product). DoRA with
// dropout needs an f32 or quantized weight (a 16-bit kind's product needs x in 16 bits, xd is not).
#pragma once
#include <cstddef>
#include <cstdint>

namespace lt {

enum class WeightKind : uint8_t { F32, BF16, F16, Int8, NF4, FP4, Int4, Q8_0, Q4_0 };
const char* weight_kind_name(WeightKind k);  // "f32", "bf16", "f16", "int8", "nf4", "fp4", "int4", "q8_0", "q4_0"

inline constexpr float kInt8Inv127 = 7.874015718698502e-3f;  // bitsandbytes' 1/127
inline constexpr float kInt8Inv127Sq = 6.2000124e-05f;       // bitsandbytes' 1/127²

struct WeightView {
  WeightKind kind = WeightKind::F32;
  int rows = 0, cols = 0;                        // (OC, IC)
  const void* data = nullptr;                    // F32 float, BF16/F16 uint16_t, Int8 int8_t, 4-bit codes, Q8_0/Q4_0 blocks
  const float* row_absmax = nullptr;             // Int8 (rows)
  float int8_threshold = 0.0f;                   // Int8: outlier threshold; 0: no outlier columns
  int blocksize = 64;                            // NF4/FP4 elements per scale block
  const float* code_values = nullptr;            // NF4/FP4 (16)
  const float* absmax = nullptr;                 // NF4/FP4 without double quantization (nblocks)
  const uint8_t* qabsmax = nullptr;              // double quantization: (nblocks) 8-bit scale codes
  const float* absmax2 = nullptr;                // double quantization: (ceil(nblocks / 256))
  const float* absmax_code_values = nullptr;     // double quantization: (256)
  float offset = 0.0f;                           // double quantization
  const float* block_offset = nullptr;           // 4-bit: (nblocks) added after the scale (asymmetric Int4)
  // F16: every value is exactly a bf16 (f16_values_are_bf16; an f16 made from a bf16 checkpoint),
  // set by the loader. The prefill may then run the product as two exact bf16 GEMMs (half_linear.cpp).
  bool bf16_values = false;
  // Quantized kinds: the products with the decoded W in bf16 (above); needs x16 in the forward of a
  // 4-bit kind and the dy scratch in the backward. Not with DoRA.
  bool bf16_products = false;

  bool quantized() const {
    return kind == WeightKind::Int8 || kind == WeightKind::Q8_0 || kind == WeightKind::Q4_0 || four_bit();
  }
  bool half() const { return kind == WeightKind::BF16 || kind == WeightKind::F16; }
  bool four_bit() const { return kind == WeightKind::NF4 || kind == WeightKind::FP4 || kind == WeightKind::Int4; }
};

// Views of plain f32 and 16-bit (BF16 / F16) weights (rows, cols).
WeightView f32_weight(const float* w, int rows, int cols);
WeightView half_weight(WeightKind kind, const uint16_t* w, int rows, int cols);

struct LoraView {
  int rank = 0;              // R; 0: no adapter
  const float* A = nullptr;  // (R, IC)
  const float* B = nullptr;  // (OC, R)
  float scale = 1.0f;        // s = alpha / r
  float dropout = 0.0f;      // p in [0, 1): mask element i is lora_dropout_scale(dropout_key, i, p)
  uint64_t dropout_key = 0;  // selects the mask (regenerated in the backward, never stored)
  const float* magnitude = nullptr;    // DoRA (OC): m; null: plain LoRA
  const float* weight_norm = nullptr;  // DoRA (OC): ||W + s·B·A|| per row (dora_weight_norm), a constant
  bool bf16 = false;  // bf16 products (above); needs a BF16 weight (or bf16_products), x16, no dropout, not DoRA
  bool dora() const { return magnitude != nullptr; }
};

struct LinearWeights {
  WeightView w;
  const float* bias = nullptr;  // (OC) or null
  LoraView lora;
};

// Gradients of linear_backward_weight; each ACCUMULATES (+=) and may be null (skipped).
struct LinearGrads {
  float* dw = nullptr;  // (OC, IC), not for quantized kinds
  float* db = nullptr;  // (OC)
  float* dA = nullptr;  // (R, IC)
  float* dB = nullptr;  // (OC, R)
  float* dmag = nullptr;  // (OC) DoRA magnitude
  // (T, R) g = dout·B of this dout, when the caller has it: linear_backward_input leaves it in
  // LinearScratch::lora_g (plain LoRA, not DoRA), so the backward of one layer computes it once.
  // Null: computed here.
  const float* lora_g = nullptr;
  // LoraView::bf16: the (T, lora_cat_cols(OC, R)) [bf16(dout) | bf16(g) | 0] linear_backward_input leaves in
  // LinearScratch::dy, when the caller has it; null: bf16(dout) rounded here into dy, g recomputed.
  const uint16_t* dout16 = nullptr;
};

struct LinearInput {
  const float* x = nullptr;      // (T, IC)
  const uint16_t* x16 = nullptr; // (T, IC) BF16 / F16 kinds: x's values in the weight's type
  int T = 0;
};

// The outputs of a Llama MLP's gate and up linears and its SwiGLU in one pass (Ops::gate_up_swiglu),
// each (T, F), row stride F; g and u are the two products' sums rounded to bf16 (their values, in f32).
struct GluOutputs {
  uint16_t* h16 = nullptr;     // bf16(silu(g) · u): always written
  float* h = nullptr;          // the same values in f32, or null
  uint16_t* gate16 = nullptr;  // bf16(g), or null
  uint16_t* up16 = nullptr;    // bf16(u), or null
  float* gate = nullptr;       // g, or null
  float* up = nullptr;         // u, or null
  int F = 0;
};

// Scratch of one call, parts sized by the functions below; a part the call does not use may be null.
struct LinearScratch {
  void* tile = nullptr;          // >= linear_tile_bytes(): dequantized or widened weight rows, LLM.int8 activations
  size_t tile_bytes = 0;
  // >= linear_dy_bytes(): BF16 / F16 backward, dout rounded to the type; LoraView::bf16: (T,
  // lora_cat_cols(OC, R)) [bf16(dout) | bf16(g) | 0] in the backward, (T, lora_cat_cols(IC, R))
  // [x16 | bf16(xa) | 0] in the forward
  void* dy = nullptr;
  float* lora_g = nullptr;       // (T, R) LoRA backward
  float* lora_xd = nullptr;      // (T, IC) LoRA with dropout: the masked input
  float* lora_tmp = nullptr;     // (T, IC) LoRA with dropout, backward_input
  float* dora = nullptr;         // (T, OC) DoRA: a base product or dout scaled by k
  uint16_t* lora_w16 = nullptr;  // (R · max(IC, OC)) LoraView::bf16: A or B rounded to bf16
  uint16_t* lora_t16 = nullptr;  // (T, R) LoraView::bf16 backward: xa or g rounded to bf16
  float* lora_wt = nullptr;      // (R · max(IC, OC)) LoraView::bf16 backward: s·dBᵀ before it is added to dB
  // (max(lora_cat_cols(OC, R) · IC, OC · lora_cat_cols(IC, R))) LoraView::bf16: [W; bf16(s·A); 0] in
  // backward_input, [W | bf16(s·B) | 0] in the forward, the inner-dimension concatenations (dy then
  // needs linear_dy_bytes(kind, T, lora_cat_cols(max(IC, OC), R)))
  uint16_t* lora_wcat = nullptr;
};

// Width of bf16 LoRA's inner-dimension concatenations of n base columns and R rank columns: padded
// with zeros to whole 64-byte rows (AMX and oneDNN read aligned rows 1.2-1.3x faster).
inline constexpr int lora_cat_cols(int n, int R) { return (n + R + 31) / 32 * 32; }

inline constexpr int kQuantTileRows = 128;  // quantized weight rows decoded at a time (fast path)
inline constexpr int kQuant16TileRows = 256;  // the same with bf16_products, decoded to bf16
inline constexpr int kHalfTileRows = 512;   // F16 weight rows widened at a time (fast path)

// Tile bytes a call on T tokens may use: F16 widened rows, quantized kinds their decoded rows
// (4-bit with double quantization: plus the decoded scales; with bf16_products kQuant16TileRows rows
// in bf16) or the LLM.int8 activations; 0 for F32 and BF16. blocksize / double_quant matter for NF4
// / FP4 only.
size_t linear_tile_bytes(WeightKind k, int blocksize, bool double_quant, int T, int IC, int OC,
                         bool bf16_products = false);
// dy bytes of the BF16 / F16 backward for T tokens and OC outputs (0 for other kinds).
size_t linear_dy_bytes(WeightKind k, int T, int OC);
// The same for a weight view: a quantized one with bf16_products rounds dout to bf16 as BF16 does.
size_t linear_dy_bytes(const WeightView& w, int T, int OC);
// LinearScratch::lora_wcat bytes a bf16 LoRA linear (LoraView::bf16) of this shape uses with the
// CPU kernels on this machine: the concatenations, or 0 where the AMX GEMM appends the rank-R
// operands instead (kernels/cpu/linear.cpp; the scratch may then be null).
size_t lora_wcat_bytes(int T, int IC, int OC, int R);

// The LoRA dropout mask: element i of the (T, IC) input is kept with probability 1 - p, scaled by
// 1/(1-p), as a pure function of (key, i).
inline uint64_t lora_mix64(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline float lora_dropout_scale(uint64_t key, size_t i, float p) {
  const uint64_t h = lora_mix64(key ^ (uint64_t(i) * 0xd1b54a32d192ed03ull));
  const float u = float(h >> 40) * (1.0f / 16777216.0f);
  return u < p ? 0.0f : 1.0f / (1.0f - p);
}

// DoRA's norm (OC) = ||W + s·(B·A)|| per row, W decoded as the reference does (kernels/ref), B·A
// summed over r in f32 before the scale (as PEFT's lora_B(lora_A(I))ᵀ), squares summed in double.
// O(OC·IC·R); nothing allocates. Rows in parallel (OpenMP); each row's result is independent of
// the thread count. Rank 0: ||W|| per row.
void dora_weight_norm(float* norm, const WeightView& w, const LoraView& l);

// lt::Error naming the problem when the operands are incomplete (shapes, a kind's missing parts,
// a LoRA without A or B, a dropout outside [0, 1)). Every implementation calls it first.
void check_linear(const LinearWeights& w, int T);

}  // namespace lt
