// ModelConfig: the hyperparameters of a Llama-family model, read from the checkpoint
// (HF config.json or a llama2.c header) and read-only afterwards.
// Dimension letters: C model width, L layers, NH heads, NKV key/value heads, HS head size,
// F MLP width, V vocabulary.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/projection.h"
#include "core/quant_spec.h"

namespace lt {

enum class RopeLayout : unsigned char {
  Halves,       // HF: rotate (x[i], x[i + HS/2])
  Interleaved,  // llama2.c / Meta: rotate (x[2i], x[2i+1])
};

// config.json rope_scaling / rope_parameters, as transformers reads them (core/rope_freqs.h
// computes the frequencies). io resolves what transformers derives: a missing yarn / longrope
// factor, original_max_position_embeddings (rope dict, else a top-level field, else
// max_position_embeddings).
struct RopeScaling {
  std::string type;  // "" (none) | "linear" | "dynamic" | "yarn" | "longrope" | "llama3"
  float factor = 1.0f;
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
  int original_max_position_embeddings = 8192;  // llama3, yarn, longrope
  float attention_factor = 0.0f;  // yarn, longrope: > 0 given by the config, 0 derived from factor
  float beta_fast = 32.0f, beta_slow = 1.0f;  // yarn
  float mscale = 0.0f, mscale_all_dim = 0.0f;  // yarn (0: absent)
  bool truncate = true;                         // yarn
  std::vector<float> short_factor, long_factor;  // longrope, HS/2 each
};

// The model_type values leantune reads, for the messages that refuse the others.
inline constexpr const char* kSupportedModelTypes = "llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text";

// The MLP's gated activation: down(act(gate(x)) * up(x)).
enum class MlpAct : unsigned char {
  SiLU,      // SwiGLU (Llama, Mistral, Qwen)
  GeluTanh,  // GeGLU with the tanh approximation of gelu (Gemma: gelu_pytorch_tanh)
};

struct ModelConfig {
  std::string arch = "llama";  // llama | mistral | qwen2 | qwen3 | phi3 | gemma2 | gemma3_text (model_type)
  int dim = 0;                 // C
  int n_layers = 0;            // L
  int n_heads = 0;             // NH
  int n_kv_heads = 0;          // NKV
  int head_dim = 0;            // HS (config head_dim, else C / NH)
  int hidden_dim = 0;          // F
  int vocab_size = 0;          // V
  int max_seq_len = 2048;      // max_position_embeddings
  float norm_eps = 1e-5f;      // rms_norm_eps
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  // transformers multiplies RoPE's cos and sin by this (yarn / longrope attention factor, from
  // rope_attention_factor()); 1 for the other types. Apply with rope_scale_queries().
  float rope_attention_factor = 1.0f;
  RopeLayout rope_layout = RopeLayout::Halves;
  bool tie_embeddings = false;  // lm_head shares the embedding table
  // Linear biases, as transformers applies them: Llama's attention_bias gives q, k, v AND o_proj
  // a bias, Qwen2 always has q/k/v biases and none on o_proj, Llama's mlp_bias gives gate, up
  // and down a bias. has_bias() is what every module asks.
  bool attention_bias = false;  // q/k/v projections have biases
  bool o_proj_bias = false;     // o_proj has a bias
  bool mlp_bias = false;        // gate/up/down projections have biases
  // Qwen3: q and k are RMS-normalized per head (over HS, weights self_attn.q_norm / k_norm of
  // size HS, eps norm_eps) after their projections and before RoPE.
  bool qk_norm = false;
  // Sliding-window attention (Mistral; Qwen2 / Qwen3 with use_sliding_window): > 0, a query at
  // position p of a sliding layer attends keys p - sliding_window + 1 .. p (transformers' window).
  // sliding_layers: which layers slide (Qwen2's layer_types / max_window_layers); empty: all.
  int sliding_window = 0;
  std::vector<bool> sliding_layers;
  // Phi-3: the checkpoint and PEFT hold q/k/v as one qkv_proj and gate/up as one gate_up_proj
  // (core/projection.h). Loaders split them into the seven projections (row blocks) and writers
  // fuse them back; a LoRA on a fused module is one A shared by its projections and one B whose
  // row blocks are theirs (fused_rows).
  bool fused_proj = false;
  // Gemma 2 / Gemma 3 (text). embed_scale: the embeddings are multiplied by it (sqrt(C) rounded
  // to f32, as transformers' normalizer); 1 for the others. norm_offset: every RMSNorm weight w
  // (the layer norms, the final norm, q_norm / k_norm) scales by (1 + w). sandwich_norms: four
  // norms per layer: input_layernorm before attention, post_attention_layernorm on its output
  // (before the residual add), pre_feedforward_layernorm before the MLP, post_feedforward_layernorm
  // on its output. (Without them post_attention_layernorm is the norm before the MLP.)
  float embed_scale = 1.0f;
  bool norm_offset = false;
  bool sandwich_norms = false;
  MlpAct mlp_act = MlpAct::SiLU;
  // Attention scores s become softcap * tanh(s / softcap) (Gemma 2 attn_logit_softcapping), and
  // the final logits the same with final_softcap (final_logit_softcapping); 0: none.
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  // Scores scaled by query_pre_attn_scalar^-1/2 instead of HS^-1/2 (Gemma); 0: HS.
  float query_pre_attn_scalar = 0.0f;
  // Gemma 3: the sliding layers' RoPE base (rope_local_base_freq / rope_parameters
  // sliding_attention), default RoPE without rope_scaling; 0: every layer uses rope_theta and
  // rope_scaling.
  float rope_local_theta = 0.0f;
  int bos_token_id = -1, eos_token_id = -1;
  // A folder written by `leantune quantize` (config.json quantization_config, io/quant_model.h):
  // its seven linear weights per layer are stored quantized. nullopt when they are not.
  std::optional<QuantType> quantization;
  int quant_blocksize = 64;     // 4-bit block size
  bool quant_double_quant = false;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  // Whether projection p has a bias.
  bool has_bias(Proj p) const {
    return p <= Proj::V ? attention_bias : p == Proj::O ? o_proj_bias : mlp_bias;
  }
  // (in, out) of projection p: its weight is (out, in), its bias (out). The one shape table.
  std::pair<int64_t, int64_t> linear_shape(Proj p) const {
    const int64_t C = dim, QD = q_dim(), KVD = kv_dim(), F = hidden_dim;
    switch (p) {
      case Proj::Q: return {C, QD};
      case Proj::K: case Proj::V: return {C, KVD};
      case Proj::O: return {QD, C};
      case Proj::Gate: case Proj::Up: return {C, F};
      case Proj::Down: return {F, C};
    }
    return {0, 0};
  }
  // The module PEFT and the checkpoint name p by: its fused module when fused_proj, else its own.
  const char* module_name(Proj p) const {
    return fused_proj && fused_proj_module(p) ? fused_proj_module(p) : proj_module(p);
  }
  // Whether p is stored in a fused module, and (first row, rows of the whole fused module) of p's block.
  bool is_fused(Proj p) const { return fused_proj && fused_proj_module(p) != nullptr; }
  std::pair<int64_t, int64_t> fused_rows(Proj p) const {
    const int64_t QD = q_dim(), KVD = kv_dim(), F = hidden_dim;
    switch (p) {
      case Proj::Q: return {0, QD + 2 * KVD};
      case Proj::K: return {QD, QD + 2 * KVD};
      case Proj::V: return {QD + KVD, QD + 2 * KVD};
      case Proj::Gate: return {0, 2 * F};
      case Proj::Up: return {F, 2 * F};
      default: return {0, linear_shape(p).second};
    }
  }
  // The attention window of layer l: sliding_window for a sliding layer, 0 (every key) otherwise.
  int attention_window(int l) const {
    return sliding_window > 0 && (sliding_layers.empty() || sliding_layers[size_t(l)]) ? sliding_window : 0;
  }
  bool gemma() const { return arch == "gemma2" || arch == "gemma3_text"; }
  // Whether layer l uses the local RoPE (rope_local_theta) rather than the global one.
  bool local_rope(int l) const { return rope_local_theta > 0 && attention_window(l) > 0; }
  // The name of the norm before the MLP (Gemma: pre_feedforward_layernorm).
  const char* ffn_norm_name() const {
    return sandwich_norms ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight";
  }
  // The same by index in kProjs order (loops over the projections of a layer).
  bool has_bias(int m) const { return has_bias(Proj(m)); }
  std::pair<int64_t, int64_t> linear_shape(int m) const { return linear_shape(Proj(m)); }
};

// Checks the config is usable (positive sizes, NH divisible by NKV, ...); throws naming `where`.
void validate_config(const ModelConfig& c, const std::string& where);

}  // namespace lt
