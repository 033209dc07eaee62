// LlamaModel: the Llama-family forward pass for inference (Llama 1/2/3, Mistral, Qwen2, SmolLM2,
// TinyLlama) over a KV cache. Weights are converted to f32 into the frozen-weights arena; every
// buffer comes from one MemoryPlan built by plan_inference() before anything is allocated, and
// forward() allocates nothing.
// Dimension letters: TB prefill block, P context (cache positions), C, QD = NH*HS, KVD = NKV*HS, F, V.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/memory_plan.h"
#include "io/tensor_set.h"
#include "kernels/ops.h"
#include "core/model_config.h"
#include "quant/quant_tensor.h"

namespace lt {

struct InferenceOptions {
  int context = 0;        // KV cache positions P; 0 = min(model max_seq_len, 4096)
  int prefill_block = 0;  // tokens per prefill block TB; 0 = min(P, 256)
  // Quantize the seven linear weights of every layer on load: none (nullopt), nf4, fp4, int8
  // (LLM.int8: per-row int8 weights, per-token int8 activations, outlier columns above
  // int8_threshold in f32). A folder written by `leantune quantize` is used as stored whatever
  // this says.
  Quantization quantization;
  bool double_quant = false;
  int quant_blocksize = 64;
  float int8_threshold = 6.0f;
};

// The spec the linear weights use (stored folder first, then the options); false when f32.
bool inference_quant_spec(const ModelConfig& c, const InferenceOptions& o, QuantSpec* spec);

// The resolved P and TB for a config and options.
void resolve_inference_options(const ModelConfig& c, InferenceOptions& o);

// Every buffer an inference run needs. Names are the HF tensor names for weights.
MemoryPlan plan_inference(const ModelConfig& c, const InferenceOptions& o);

struct LayerWeights {
  float* attn_norm;                 // (C)
  float* ffn_norm;                  // (C)
  // Per projection (index: Proj), shapes from ModelConfig::linear_shape:
  float* w[kNumProj];               // the f32 weight (out, in); null when the model is quantized
  QuantTensor q[kNumProj];          // the quantized weight (when the model is quantized)
  float* bias[kNumProj];            // (out), null where the model has none
  float *k_cache, *v_cache;         // (P, KVD) each
};

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
  // and writes the logits of the last token to logits() (V). Requires pos0 + T <= context().
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
  const float* lm_head_weights() const { return lm_head_; }
  const Ops& ops() const { return ops_; }
  bool quantized() const { return quant_; }

 private:
  void bind_state();  // points the activations, logits and KV cache at this model's arenas
  void load_weights(const TensorSet& tensors);
  void forward_block(const int* tokens, int T, int pos0);
  // out (T, OC) = x (T, IC) · Wᵀ + bias for linear m of layer L (f32 or quantized weights), through
  // the op table's linear_forward
  void linear(float* out, const float* x, const LayerWeights& L, Proj p, int T);

  ModelConfig cfg_;
  InferenceOptions opts_;
  const Ops& ops_;
  MemoryPlan plan_;
  Arenas arenas_;
  float* embed_ = nullptr;       // (V, C)
  float* final_norm_ = nullptr;  // (C)
  float* lm_head_ = nullptr;     // (V, C), = embed_ when tied
  std::vector<LayerWeights> layers_;
  float* inv_freq_ = nullptr;    // (HS/2)
  // activations, one prefill block at a time
  float *x_, *xn_, *q_, *att_, *gate_, *up_;  // (TB,C) (TB,C) (TB,QD) (TB,QD) (TB,F) (TB,F)
  int* pos_ = nullptr;                        // (TB)
  bool quant_ = false;
  void* quant_ws_ = nullptr;                  // tile / activation workspace of the quantized linears
  size_t quant_ws_bytes_ = 0;
  float* logits_ = nullptr;                   // (V)
  std::shared_ptr<const LlamaModel> weights_;  // the model whose weights this one reads (shared ctor)
};

}  // namespace lt
