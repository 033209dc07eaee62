// The op table: every forward op of the model as a function pointer, so a backend (ref, cpu,
// later cuda) fills the same list and is tested against ref. All tensors are row-major f32.
// Dimension letters: T tokens, C channels, IC/OC linear in/out, NH heads, NKV key/value heads,
// HS head size, F MLP width, V vocabulary, P cache positions.
#pragma once
#include <cstddef>

#include "core/dtype.h"
#include "kernels/linear.h"

namespace lt {

// What swiglu_forward_half does with its gate and up inputs (below).
enum class HalfInputs : uint8_t { Round, RoundInPlace, Widen };

struct Ops {
  const char* name;

  // out (T, C) = table[tokens[t]] ; table (V, C)
  void (*embedding_forward)(float* out, const int* tokens, const float* table, int T, int C);

  // out (T, C) = x / rms(x) * w ; rstd (T) receives 1/rms when not null; out may be x (in place)
  void (*rmsnorm_forward)(float* out, float* rstd, const float* x, const float* w, int T, int C, float eps);

  // In place on x (T, NH, HS), token t at position pos[t]; inv_freq (HS/2) is the per-pair
  // frequency (rope scaling already applied). interleaved: pairs (2i, 2i+1), else (i, i+HS/2).
  // Angles are computed as float(pos) * inv_freq[i] in f32, then cos/sin, as HF does.
  void (*rope_forward)(float* x, const int* pos, const float* inv_freq, int T, int NH, int HS, bool interleaved);

  // Causal attention with GQA over a cache. q (T, NH*HS) holds the queries of positions
  // pos0..pos0+T-1; k, v hold the keys/values of positions 0..pos0+T-1, position j in row j
  // (P >= pos0+T rows), or with ring > 0 in row j % ring (a sliding window's rolling cache).
  // Head h uses KV head h / (NH/NKV). Query t attends keys 0..pos0+t, or with window > 0 only the
  // last `window` of them (pos0+t-window+1..pos0+t, transformers' sliding window); the keys
  // before are never read. Scores scaled by 1/sqrt(HS). ring > 0 needs window > 0 and
  // ring >= window + T - 1 (no key a query needs is overwritten by the block's own rows).
  // out (T, NH*HS). lse (NH, T), when not null, receives the log-sum-exp of the scaled scores.
  // No T×T matrix is materialized (online softmax over key blocks).
  void (*attention_forward)(float* out, float* lse, const float* q, const float* k, const float* v, int T, int pos0,
                            int NH, int NKV, int HS, int window, int ring);

  // out (T, F) = silu(gate) * up
  void (*swiglu_forward)(float* out, const float* gate, const float* up, int T, int F);

  // out (T, OC) = x (T, IC) · w (OC, IC)ᵀ + bias (OC, may be null), all f32: the plain product
  // that linear_forward runs for f32 weights (the model calls linear_forward; this entry lets a
  // backend's f32 product be tested on its own).
  void (*matmul_forward)(float* out, const float* x, const float* w, const float* bias, int T, int IC, int OC);

  // The linear op, every weight kind (kernels/linear.h): out (T, OC) = x·Wᵀ + bias + s·(xd·Aᵀ)·Bᵀ,
  // written. xa (T, R) receives xd·Aᵀ, which the backward needs (LoRA only; else may be null).
  // out null (a checkpoint replay whose output is saved): xa alone, the same bits (plain LoRA only).
  void (*linear_forward)(float* out, float* xa, const LinearInput& in, const LinearWeights& w,
                         const LinearScratch& s);

  // x[i] += y[i]
  void (*add_inplace)(float* x, const float* y, size_t n);

  // Mixed precision's 16-bit copies, t = BF16 or F16, rounding to nearest even: dst16[i] =
  // round(src[i]); dst32, when not null, receives the rounded values widened back (may be src).
  void (*round_half)(DType t, uint16_t* dst16, float* dst32, const float* src, size_t n);
  // dst[i] = src[i] widened to f32 (exact).
  void (*widen_half)(DType t, float* dst, const uint16_t* src, size_t n);

  // attention_forward over a bf16 KV cache (inference's half-size cache): k and v hold bf16 bits in
  // attention_forward's layout and are widened to f32 (exact) as they are read; no lse. Otherwise
  // exactly attention_forward on the widened values.
  void (*attention_forward_kv16)(float* out, const float* q, const uint16_t* k, const uint16_t* v, int T, int pos0,
                                 int NH, int NKV, int HS, int window, int ring);

  // Gemma's ops.
  // out (T, F) = gelu_tanh(gate) * up (GeGLU), gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g³)))
  // (PyTorch's gelu(approximate="tanh")); out may be gate.
  void (*geglu_forward)(float* out, const float* gate, const float* up, int T, int F);
  // In place on x (n): x = cap * tanh(x / cap) (logit soft-capping), cap > 0.
  void (*softcap_forward)(float* x, size_t n, float cap);
  // attention_forward with soft-capped scores: each scaled score s becomes cap * tanh(s / cap)
  // before the softmax (Gemma 2 attn_logit_softcapping), cap > 0; lse of the capped scores.
  void (*attention_softcap_forward)(float* out, float* lse, const float* q, const float* k, const float* v, int T,
                                    int pos0, int NH, int NKV, int HS, int window, int ring, float cap);
  // matmul_forward with each row's result independent of T (the same products in the same order as
  // for that row alone), for any T: the batch engine's projections, where a request's tokens must
  // not depend on its neighbours. A fast backend reads each weight row from memory once for all T.
  void (*matmul_rows)(float* out, const float* x, const float* w, const float* bias, int T, int IC, int OC);

  // rope_forward in two steps, for a caller that rotates many tensors at the same positions
  // (training: q and k of every layer in the forward, a checkpoint's replay and the backward):
  // rope_table fills cos_sin (2, T, HS/2), the cosines then the sines of every (token, pair) angle,
  // computed as rope_forward computes them; rope_apply rotates x (T, NH, HS) by them in place. The
  // two give rope_forward's bits.
  void (*rope_table)(float* cos_sin, const int* pos, const float* inv_freq, int T, int HS);
  void (*rope_apply)(float* x, const float* cos_sin, int T, int NH, int HS, bool interleaved);

  // SwiGLU in mixed precision (t: BF16 or F16) fused with the roundings around it, one pass over
  // (T, F): gate and up (f32) are rounded into gate16 and up16 (HalfInputs::Round: the f32 values
  // left as they are; RoundInPlace: replaced by the rounded ones), or (Widen) gate16 and up16 are
  // widened into gate and up (each may then be null: not written). Then h = silu(g) · u on the
  // rounded values, rounded into h16, with h (null: not written) holding the rounded value: the bits
  // of round_half / widen_half, swiglu_forward and round_half(t, h16, h, h) in sequence.
  void (*swiglu_forward_half)(DType t, HalfInputs in, float* h, uint16_t* h16, float* gate, uint16_t* gate16,
                              float* up, uint16_t* up16, int T, int F);

  // A Llama MLP's gate and up linears and its SwiGLU in one pass, for BF16 weights without a bias and
  // a plain bf16 LoRA (LoraView::bf16) on both or on neither: the bits of linear_forward for each
  // (xa_gate, xa_up as its xa) and of swiglu_forward_half(BF16, ...) after them, for the outputs o
  // asks for (kernels/linear.h GluOutputs: g and u rounded; never the products unrounded). s is
  // linear_forward's, dy at least linear_dy_bytes(BF16, T, lora_cat_cols(F, gate's R)). Returns
  // false, computing nothing, where the table has no such pass for the shape; null where it has none.
  bool (*gate_up_swiglu)(const GluOutputs& o, float* xa_gate, float* xa_up, const LinearInput& in,
                         const LinearWeights& gate, const LinearWeights& up, const LinearScratch& s) = nullptr;
};

const Ops& ops_ref();  // scalar reference: the specification (src/kernels/ref/)
const Ops& ops_cpu();  // fast CPU kernels, ISA chosen at run time (src/kernels/cpu/)

}  // namespace lt
