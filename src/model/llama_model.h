// LlamaModel: the Llama-family forward pass for inference (Llama 1/2/3, Mistral, Qwen2, Qwen3,
// Gemma 2 / 3 text, SmolLM2, TinyLlama) over a KV cache. Weights are converted to f32 into the frozen-weights arena; every
// buffer comes from one MemoryPlan built by plan_inference() before anything is allocated, and
// forward() allocates nothing.
// Dimension letters: TB prefill block, P context (cache positions), C, QD = NH*HS, KVD = NKV*HS, F, V.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/memory_plan.h"
#include "io/tensor_set.h"
#include "kernels/ops.h"
#include "core/model_config.h"
#include "core/rope_freqs.h"
#include "quant/quant_tensor.h"

namespace lt {

struct InferenceOptions {
  int context = 0;        // KV cache positions P; 0 = min(model max_seq_len, 4096)
  int prefill_block = 0;  // tokens per prefill block TB; 0 = min(P, 256), with llama_cpp_numerics min(P, 512)
  // Quantize the seven linear weights of every layer on load: none (nullopt), nf4, fp4, int8
  // (LLM.int8: per-row int8 weights, per-token int8 activations, outlier columns above
  // int8_threshold in f32). A folder written by `leantune quantize` is used as stored whatever
  // this says.
  Quantization quantization;
  bool double_quant = false;
  int quant_blocksize = 64;
  float int8_threshold = 6.0f;
  // 16-bit inference (--weights bf16 | f16): the seven linear weights of every layer kept in BF16
  // or F16 (copied as stored from a 16-bit file, rounded once from f32); each product rounds its
  // input to the type (the linear op's 16-bit contract, as llama.cpp does) and accumulates in f32.
  // F32: as `quantization` says.
  DType linear16 = DType::F32;
  // The lm_head's storage: F32 (as loaded), BF16 / F16, or Int8 (per-row int8, no outlier
  // columns). A fifth of a small model's bytes: --weights sets it with the linear weights, while
  // `quantization` alone leaves it f32 (QLoRA's layout).
  WeightKind head = WeightKind::F32;
  // The KV cache's element: F32, or BF16 (half the bytes a decode step reads from the cache; keys
  // and values rounded once when written, attention widens them exactly when reading).
  DType kv_cache = DType::F32;
  // llama.cpp's arithmetic op for op (kernels/llamacpp_numerics.h, model/llama_model_llamacpp.cpp):
  // the same logits, bit for bit, as llama.cpp's CPU backend on the same q8_0 / q4_0 weights. Slow
  // (scalar); the plain Llama layer only (check_llamacpp_numerics says what is not covered).
  bool llama_cpp_numerics = false;
};

// The spec the linear weights use (stored folder first, then the options); false when f32.
bool inference_quant_spec(const ModelConfig& c, const InferenceOptions& o, QuantSpec* spec);

// The resolved P and TB for a config and options.
void resolve_inference_options(const ModelConfig& c, InferenceOptions& o);

// With o.llama_cpp_numerics: lt::Error naming what llama.cpp's arithmetic here does not cover (it
// needs q8_0 / q4_0 weights and lm_head, the f32 KV cache and the plain Llama layer); else nothing.
void check_llamacpp_numerics(const ModelConfig& c, const InferenceOptions& o);

// The KV cache rows of layer l: P, or for a sliding layer whose window is shorter than the context
// a rolling cache of min(P, window + TB - 1) rows, enough for the window of a whole prefill block.
int kv_cache_rows(const ModelConfig& c, const InferenceOptions& resolved, int l);

// Every buffer an inference run needs. Names are the HF tensor names for weights.
MemoryPlan plan_inference(const ModelConfig& c, const InferenceOptions& o);

struct LayerWeights {
  float* attn_norm;                 // (C)
  float* ffn_norm;                  // (C) the norm before the MLP
  // Gemma (sandwich_norms): the norms of the attention's and the MLP's outputs (null without).
  // Every norm weight of a norm_offset model is held as (1 + w), the factor the norm applies.
  float *post_attn_norm = nullptr, *post_ffn_norm = nullptr;
  // Per projection (index: Proj), shapes from ModelConfig::linear_shape:
  float* w[kNumProj];               // the f32 weight (out, in); null when quantized or 16-bit
  uint16_t* w16[kNumProj];          // the BF16 / F16 weight (InferenceOptions::linear16), else null
  bool w16_bf16[kNumProj] = {};     // an F16 weight whose values are all bf16s (WeightView::bf16_values)
  QuantTensor q[kNumProj];          // the quantized weight (when the model is quantized)
  float* bias[kNumProj];            // (out), null where the model has none
  float *q_norm, *k_norm;           // (HS) each: Qwen3's per-head RMSNorm of q and k (null without)
  float *k_cache, *v_cache;         // (kv_cache_rows, KVD) each, f32 cache (else null)
  uint16_t *k_cache16, *v_cache16;  // (kv_cache_rows, KVD) each, bf16 cache (else null)
  int window = 0;                   // the layer's sliding attention window (0: every key)
  int ring = 0;                     // > 0: a rolling cache of this many rows (position p in row p % ring)
};

// Pieces of the forward pass that differ by family, shared by LlamaModel and the batch engine.
// x (n) *= c.embed_scale (Gemma's sqrt(C), in f32 as transformers); no-op at 1.
void scale_embeddings(float* x, size_t n, const ModelConfig& c);
// out (T, F) = act(gate) * up: SwiGLU or GeGLU by c.mlp_act (out may be gate).
void mlp_activation(const Ops& ops, const ModelConfig& c, float* out, const float* gate, const float* up, int T,
                    int F);
// Ops::attention_forward, or with c.attn_softcap its soft-capped variant.
void attention(const Ops& ops, const ModelConfig& c, float* out, const float* q, const float* k, const float* v,
               int T, int pos0, int window, int ring);

class LlamaModel {
 public:
  // Builds the plan, allocates it, and copies/converts every weight from `tensors` (checked
  // against the config by name and shape).
  LlamaModel(const ModelConfig& config, const TensorSet& tensors, InferenceOptions opts, const Ops& ops);

  // Loads a checkpoint path (HF folder, .safetensors in an HF folder, or llama2.c .bin).
  static std::unique_ptr<LlamaModel> load(const std::string& path, InferenceOptions opts, const Ops& ops);

  // Another sequence over the weights of `weights`: its own KV cache, activations, workspace and
  // logits (opts.context / prefill_block; the quantization is the weights'), reading the weights
  // in place. Any number of such models may run at once, one per thread, over one `weights`,
  // which they keep alive and which must not change meanwhile (no merge_adapter on it).
  LlamaModel(std::shared_ptr<const LlamaModel> weights, InferenceOptions opts);

  // Runs tokens[0..T) at positions pos0..pos0+T-1 through the model, appending to the KV cache,
  // and writes the logits of the last token to logits() (V). Requires pos0 + T <= context(), and
  // with a rolling (sliding-window) cache that the window of pos0 is still in it (a sequence cut
  // back further than the rolling cache reaches is refused).
  void forward(const int* tokens, int T, int pos0);

  // Merges a PEFT LoRA adapter into the base weights: W += sign * s * B·A for every adapted
  // projection (sign -1 unmerges, so adapters swap without reloading the model). Trainable
  // biases saved with the adapter replace the base biases when merging. lt::Error naming the
  // tensor when the adapter does not fit this model.
  void merge_adapter(const std::string& adapter_dir, float sign = 1.0f);

  const float* logits() const { return logits_; }
  float* logits() { return logits_; }
  const ModelConfig& config() const { return cfg_; }
  const MemoryPlan& plan() const { return plan_; }
  const Arenas& arenas() const { return arenas_; }
  int context() const { return opts_.context; }

  // The weights, for forward passes over other state layouts (infer/batch_forward.h: a batch of
  // sequences over a paged KV cache). Read-only; the k_cache / v_cache of each layer are this
  // model's own cache, which such passes do not use.
  const std::vector<LayerWeights>& layer_weights() const { return layers_; }
  const float* embed_weights() const { return embed_; }
  const float* final_norm_weights() const { return final_norm_; }
  const float* lm_head_weights() const { return lm_head_; }  // null unless the head is f32
  // true when every linear weight and the lm_head are f32 (what merge_adapter and the batch engine need)
  bool f32_weights() const { return !quant_ && opts_.linear16 == DType::F32 && opts_.head == WeightKind::F32; }
  const Ops& ops() const { return ops_; }
  bool quantized() const { return quant_; }
  // The layers whose one-token q|k|v and gate|up products run stacked (decode_qkv, decode_gate_up).
  int stacked_decode_layers() const;

 private:
  void bind_state();     // points the activations and logits at this model's arenas
  void bind_kv_cache();  // points each layer at its KV cache rows, with its window and ring
  void load_weights(const TensorSet& tensors);
  void load_head(const TensorSet& tensors);  // head_ (and lm_head_ when f32)
  void copy_as_half(uint16_t* dst, const TensorInfo& t, DType type) const;
  // y (T, OC) = x·Wᵀ through the op table's linear op; a 16-bit W gets x rounded to its type first
  void run_linear(float* y, const float* x, const WeightView& w, const float* bias, int T);
  void forward_block(const int* tokens, int T, int pos0);
  // forward_block and the head in llama.cpp's arithmetic (InferenceOptions::llama_cpp_numerics)
  void forward_block_llamacpp(const int* tokens, int T, int pos0);
  void head_llamacpp(const float* x);
  void linear_llamacpp(float* out, const float* x, const LayerWeights& L, Proj p, int T);
  // out (T, OC) = x (T, IC) · Wᵀ + bias for linear m of layer L (f32 or quantized weights), through
  // the op table's linear_forward
  void linear(float* out, const float* x, const LayerWeights& L, Proj p, int T);
  WeightView view(const LayerWeights& L, Proj p) const;  // projection p's weight as the linear op reads it
  WeightView stacked(const LayerWeights& L, Proj first, int n) const;
  bool decode_qkv(const LayerWeights& L, float* k, float* v);
  bool decode_gate_up(const LayerWeights& L);

  ModelConfig cfg_;
  InferenceOptions opts_;
  const Ops& ops_;
  MemoryPlan plan_;
  Arenas arenas_;
  float* embed_ = nullptr;       // (V, C)
  float* final_norm_ = nullptr;  // (C)
  float* lm_head_ = nullptr;     // (V, C), = embed_ when tied; null when the head is not f32
  WeightView head_;              // the lm_head as the linear op reads it (any InferenceOptions::head)
  QuantTensor head_q_;           // Int8 head storage
  std::vector<LayerWeights> layers_;
  float* inv_freq_ = nullptr;    // (HS/2) the frequencies of the current call, from rope_
  float* inv_freq_local_ = nullptr;  // (HS/2) Gemma 3's sliding layers' RoPE (null without)
  // transformers' per-call RoPE frequencies (dynamic, longrope): one state per sequence, as one
  // rotary module per model instance in transformers
  std::optional<RopeFreqState> rope_;
  // activations, one prefill block at a time
  float *x_, *xn_, *q_, *att_, *gate_, *up_;  // (TB,C) (TB,C) (TB,QD) (TB,QD) (TB,F) (TB,F)
  int* pos_ = nullptr;                        // (TB)
  float *k_ = nullptr, *v_ = nullptr;         // (TB, KVD) this block's keys / values before a bf16 cache
  uint16_t* x16_ = nullptr;                   // (TB, max(C, QD, F)) 16-bit input of a 16-bit weight's product
  float* xr_ = nullptr;                       // (TB, max(C, QD, F)) the same values in f32
  bool quant_ = false;
  void* quant_ws_ = nullptr;                  // tile / activation workspace of the quantized linears
  size_t quant_ws_bytes_ = 0;
  int8_t* xq_ = nullptr;        // llama.cpp numerics: (TB, max(C, QD, F)) the product's quantized input
  float* xd_ = nullptr;         // ... and its block scales (TB, max(C, QD, F) / 32)
  float* attn_ws_ = nullptr;    // ... attention's per-thread scratch (attn_ws_floats_)
  size_t attn_ws_floats_ = 0;
  float* logits_ = nullptr;                   // (V)
  std::shared_ptr<const LlamaModel> weights_;  // the model whose weights this one reads (shared ctor)
  bool decode_stacking_ = false;  // one token's stacked projections fit in att_ / gate_ (bind_state)
  int ring_ = 0;       // the rolling cache's rows (every sliding layer has the same), 0 without
  int ring_from_ = 0;  // the first position the rolling cache still holds
};

}  // namespace lt
