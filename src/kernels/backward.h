// The training op table: the backward of every forward op in ops.h, the document-masked training
// attention (forward + backward) and the chunked fused lm_head + cross-entropy loss, as function
// pointers so a backend (ref now; cpu, cuda later) fills the same list and is tested against ref.
// All tensors are row-major f32. Dimension letters as in ops.h: T tokens, C channels, IC/OC linear
// in/out, NH heads, NKV key/value heads, HS head size, F MLP width, V vocabulary.
// Conventions (llm.c): outputs first, dimensions last; a gradient output marked "+=" ACCUMULATES
// into what the caller left there (zero it first for a plain gradient), one marked "written" is
// overwritten. A gradient pointer documented "may be null" is skipped (frozen parameter).
// Usage: const TrainOps& tops = train_ops_ref(); tops.matmul_backward(dx, dw, nullptr, dout, x, w, T, IC, OC);
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/linear.h"

namespace lt {

struct TrainOps {
  const char* name;

  // Backward of embedding_forward: dtable (V, C) += scatter-add of dout (T, C) into the rows
  // tokens[t] (T); a token repeated in the sequence accumulates every occurrence.
  void (*embedding_backward)(float* dtable, const float* dout, const int* tokens, int T, int C);

  // Backward of rmsnorm_forward (out = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps)).
  // dx (T, C) +=; dw (C) += (may be null when w is frozen); dout, x (T, C); w (C);
  // rstd (T) as saved by the forward. With n = x*rstd, g = dout*w:
  // dx = rstd * (g - n * mean(g * n)), dw = sum_t dout * n.
  void (*rmsnorm_backward)(float* dx, float* dw, const float* dout, const float* x, const float* w,
                           const float* rstd, int T, int C);

  // Backward of rope_forward, in place on dx (T, NH, HS): on entry the gradient wrt the roped
  // output, on exit the gradient wrt the pre-rope input (the transposed = inverse rotation).
  // Same pos (T), inv_freq (HS/2), layout and f32 angle (float(pos) * inv_freq[i]) as the forward.
  void (*rope_backward)(float* dx, const int* pos, const float* inv_freq, int T, int NH, int HS, bool interleaved);

  // Training attention with document masking, causal, GQA (head h uses KV head h / (NH/NKV)).
  // q (T, NH*HS); k, v (T, NKV*HS); query t attends keys doc_start[t]..t (doc_start (T), with
  // 0 <= doc_start[t] <= t; all zeros = one document = plain causal attention; a sliding window
  // of W keys passes max(document start, t - W + 1)), scores scaled by 1/sqrt(HS). Key blocks
  // before a query block's starts are skipped, not masked. out (T, NH*HS) written; lse (NH, T) written when not null: the log-sum-exp
  // of the scaled scores, which the backward needs. Online softmax, no T×T buffer.
  void (*attention_train_forward)(float* out, float* lse, const float* q, const float* k, const float* v,
                                  const int* doc_start, int T, int NH, int NKV, int HS);

  // Flash-attention-2 style backward of attention_train_forward: probabilities are recomputed
  // from lse, D_t = rowsum(dout_t * out_t), dS = P * (dout·vᵀ - D). dq (T, NH*HS) +=;
  // dk, dv (T, NKV*HS) += (the NH/NKV query heads of a group all accumulate into their KV head).
  // dout, out (T, NH*HS); q, k, v, doc_start as in the forward; lse (NH, T) from the forward.
  // ds_rows (ds_bytes, may be null): scratch in which the CPU kernels keep the first pass's dS rows
  // for the dq pass (attention_ds_rows_bytes says how many bytes a run needs); where it is null,
  // too small for the call or the starts are not sorted, the dq pass recomputes them: same bits.
  void (*attention_backward)(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                             const float* v, const float* out, const float* lse, const int* doc_start, int T,
                             int NH, int NKV, int HS, void* ds_rows, size_t ds_bytes);

  // Backward of swiglu_forward (out = silu(gate) * up): dgate, dup (T, F) WRITTEN (not
  // accumulated); dout, gate, up (T, F). dgate = dout*up*sig(g)*(1 + g*(1 - sig(g))), dup = dout*silu(g).
  // dup may be dout (in place: each element is read before it is written); dgate may not.
  void (*swiglu_backward)(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int T,
                          int F);

  // Backward of matmul_forward (out = x·wᵀ + b), the f32 products linear_backward_* run for f32
  // weights (the model calls those; this entry lets them be tested on their own). dout (T, OC);
  // x (T, IC); w (OC, IC).
  // dx (T, IC) += dout·w; dw (OC, IC) += doutᵀ·x; db (OC) += sum_t dout. Each may be null (skipped).
  void (*matmul_backward)(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w, int T,
                          int IC, int OC);

  // Backward of linear_forward (kernels/linear.h; 16-bit kinds round dout to their type for the
  // weight's products, the LoRA part uses dout as given), in two directions:
  // input:  dx (T, IC) += dout·W + s·((dout·B)·A) ∘ mask.
  // weight: dw (OC, IC) += doutᵀ·x; db (OC) += Σ_t dout; dB (OC, R) += s·doutᵀ·xa;
  //         dA (R, IC) += s·(dout·B)ᵀ·xd. Each gradient may be null; dw only for unquantized kinds.
  // dout (T, OC); in and xa as given to (and returned by) the forward.
  void (*linear_backward_input)(float* dx, const float* dout, int T, const LinearWeights& w, const LinearScratch& s);
  void (*linear_backward_weight)(const LinearGrads& g, const float* dout, const LinearInput& in, const float* xa,
                                 const LinearWeights& w, const LinearScratch& s);

  // Fused lm_head + softmax + cross-entropy over chunks of `chunk` token rows (DESIGN.md §5):
  // the logits of at most chunk rows exist at a time, in logits_chunk (chunk, V) scratch.
  // x (T, C) final-normed hidden states; w (V, C) the lm_head; labels (T), -100 = ignored,
  // others must be in [0, V) (else lt::Error). Returns the mean loss over the non-ignored
  // labels (0 when there are none). Gradients are those of loss_scale * mean loss:
  // dx (T, C) WRITTEN (rows of ignored labels get 0), dw (V, C) +=; either may be null, and
  // with both null only the loss is computed. Log-sum-exp is max-subtracted, in double.
  float (*lm_head_loss)(float* dx, float* dw, float* logits_chunk, const float* x, const float* w,
                        const int* labels, int T, int C, int V, int chunk, float loss_scale);

  // Gemma's ops.
  // Backward of geglu_forward: dgate, dup (T, F) WRITTEN; dout, gate, up (T, F); dup may be dout.
  // dgate = dout * up * gelu_tanh'(g), dup = dout * gelu_tanh(g), with u = sqrt(2/pi) (g + 0.044715 g³),
  // gelu_tanh'(g) = 0.5 (1 + tanh u) + 0.5 g (1 - tanh² u) sqrt(2/pi) (1 + 3 * 0.044715 g²).
  void (*geglu_backward)(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int T,
                         int F);
  // Backward of softcap_forward, in place on dx (n): on entry the gradient wrt y = cap * tanh(x / cap),
  // on exit wrt x: dx *= 1 - (y / cap)²; y (n) the forward's output.
  void (*softcap_backward)(float* dx, const float* y, size_t n, float cap);
  // attention_train_forward / attention_backward with soft-capped scores (cap > 0): s becomes
  // c = cap * tanh(s / cap) before the softmax; lse is that of the capped scores, and the backward
  // multiplies dS by dc/ds = 1 - (c / cap)².
  void (*attention_softcap_train_forward)(float* out, float* lse, const float* q, const float* k, const float* v,
                                          const int* doc_start, int T, int NH, int NKV, int HS, float cap);
  void (*attention_softcap_backward)(float* dq, float* dk, float* dv, const float* dout, const float* q,
                                     const float* k, const float* v, const float* out, const float* lse,
                                     const int* doc_start, int T, int NH, int NKV, int HS, float cap);
  // lm_head_loss with soft-capped logits (Gemma 2 final_logit_softcapping): each logit z becomes
  // cap * tanh(z / cap) before the softmax, and its gradient is multiplied by 1 - (capped / cap)².
  float (*lm_head_loss_softcap)(float* dx, float* dw, float* logits_chunk, const float* x, const float* w,
                                const int* labels, int T, int C, int V, int chunk, float loss_scale, float cap);
  // The training attention ops above in bf16 (precision bf16 training): q, k, v and the forward's out in
  // bf16 (round-to-nearest-even copies), dout in f32 (rounded to bf16 inside, D from the rounded
  // dout); products on bf16
  // pairs (vdpbf16ps) with f32 accumulation and an f32 softmax; the probabilities P and dS are
  // rounded to bf16 before their products (as FlashAttention does), so results differ from the
  // f32 entries on the same (widened) inputs by about 2^-8 of the output's scale. Same masks,
  // GQA, outputs ("written" / "+=") and determinism for a thread count as the f32 entries.
  // ds_rows / ds_bytes as attention_backward's (bf16 rows).
  // Return false, writing nothing, for shapes they do not handle (HS > 256). Null in tables
  // whose CPU lacks AVX512-BF16 (and in ref): callers run the f32 entries on widened values.
  bool (*attention_train_forward_bf16)(float* out, float* lse, const uint16_t* q, const uint16_t* k,
                                       const uint16_t* v, const int* doc_start, int T, int NH, int NKV, int HS);
  bool (*attention_backward_bf16)(float* dq, float* dk, float* dv, const float* dout, const uint16_t* q,
                                  const uint16_t* k, const uint16_t* v, const uint16_t* out, const float* lse,
                                  const int* doc_start, int T, int NH, int NKV, int HS, void* ds_rows, size_t ds_bytes);
  // lm_head_loss with the lm_head w (V, C) in bf16 (precision bf16 runs store a frozen lm_head
  // so): per chunk, x's rows are rounded to bf16 into x16 (chunk, C) scratch, logits = x16 · wᵀ
  // with f32 accumulation, the softmax, loss and dlogits in f32 (as lm_head_loss), then dlogits
  // are rounded to bf16 (in place in logits_chunk, row stride 2V halves) for dx = dlogits16 · w
  // (WRITTEN) and dw += dlogits16ᵀ · x16 (f32, may be null: a frozen lm_head has none).
  // Results differ from lm_head_loss on the widened w by the rounding of x and of dlogits
  // (about 2^-9 relative each). Every table has it (cpu: bf16 GEMMs, ref: scalar loops).
  float (*lm_head_loss_bf16)(float* dx, float* dw, float* logits_chunk, uint16_t* x16, const float* x,
                             const uint16_t* w, const int* labels, int T, int C, int V, int chunk,
                             float loss_scale);
  // rope_backward with the angles' cos / sin from Ops::rope_table (ops.h): rope_backward's bits.
  void (*rope_apply_backward)(float* dx, const float* cos_sin, int T, int NH, int HS, bool interleaved);
  // swiglu_backward with gate and up in bf16 (gate16, up16: the saved or replayed roundings): the bits of
  // swiglu_backward on their widened values; dgate and dup may not alias the inputs.
  void (*swiglu_backward_bf16)(float* dgate, float* dup, const float* dout, const uint16_t* gate16,
                               const uint16_t* up16, int T, int F);
};

// The ds_bytes with which attention_backward (elem_bytes 4) or attention_backward_bf16 (2) keeps
// every dS row of a call of T tokens whose documents stay within sequences of seq tokens (sorted
// doc_start[t] >= t - t % seq, as the data loader makes them); 0 where that is over 64 MiB, the
// rows growing with the square of seq (then the dq pass recomputes them).
size_t attention_ds_rows_bytes(int T, int seq, int NH, size_t elem_bytes);

// The workspace of the CPU attention kernels (packed key / value tiles, the backward's D rows and
// dS row offsets, bf16 copies of dO): the bytes the largest call of T tokens needs, forward or
// backward, of the f32 entries or (bf16) of the bf16 ones too. A training run binds a buffer of
// its memory plan that large before its attention calls: bind_attention_workspace(buf, bytes)
// makes it the calling thread's workspace until unbound (null); the CPU kernels called on that
// thread carve their scratch from it, and only what does not fit (nothing bound: tests, benches)
// comes from vectors of their own.
size_t attention_workspace_bytes(int T, int NH, int NKV, int HS, bool bf16);
void bind_attention_workspace(void* buf, size_t bytes);

inline constexpr int kIgnoreLabel = -100;  // label value lm_head_loss skips (as PyTorch's ignore_index)

// The labels lm_head_loss counts (not kIgnoreLabel); lt::Error for a label outside [0, V).
int count_loss_labels(const int* labels, int T, int V);

const TrainOps& train_ops_ref();  // scalar reference: the specification (src/kernels/ref/backward_*.cpp)
const TrainOps& train_ops_cpu();  // fast CPU kernels, ISA chosen at run time (src/kernels/cpu/train_*.cpp)

// The reference functions themselves, so tests can call one directly (same contracts as above).
namespace ref {
void embedding_backward(float* dtable, const float* dout, const int* tokens, int T, int C);
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int T, int C);
void rope_backward(float* dx, const int* pos, const float* inv_freq, int T, int NH, int HS, bool interleaved);
void rope_apply_backward(float* dx, const float* cos_sin, int T, int NH, int HS, bool interleaved);
void attention_train_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const int* doc_start, int T, int NH, int NKV, int HS);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, const int* doc_start, int T, int NH,
                        int NKV, int HS, void* ds_rows, size_t ds_bytes);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int T, int F);
void swiglu_backward_bf16(float* dgate, float* dup, const float* dout, const uint16_t* gate16, const uint16_t* up16,
                          int T, int F);
void matmul_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w, int T,
                     int IC, int OC);
void linear_backward_input(float* dx, const float* dout, int T, const LinearWeights& w, const LinearScratch& s);
void linear_backward_weight(const LinearGrads& g, const float* dout, const LinearInput& in, const float* xa,
                            const LinearWeights& w, const LinearScratch& s);
float lm_head_loss(float* dx, float* dw, float* logits_chunk, const float* x, const float* w, const int* labels,
                   int T, int C, int V, int chunk, float loss_scale);
void geglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int T, int F);
void softcap_backward(float* dx, const float* y, size_t n, float cap);
void attention_softcap_train_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                     const int* doc_start, int T, int NH, int NKV, int HS, float cap);
void attention_softcap_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                                const float* v, const float* out, const float* lse, const int* doc_start, int T,
                                int NH, int NKV, int HS, float cap);
float lm_head_loss_softcap(float* dx, float* dw, float* logits_chunk, const float* x, const float* w,
                           const int* labels, int T, int C, int V, int chunk, float loss_scale, float cap);
float lm_head_loss_bf16(float* dx, float* dw, float* logits_chunk, uint16_t* x16, const float* x, const uint16_t* w,
                        const int* labels, int T, int C, int V, int chunk, float loss_scale);
}  // namespace ref

}  // namespace lt
