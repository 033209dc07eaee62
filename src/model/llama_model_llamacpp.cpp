// LlamaModel's forward in llama.cpp's arithmetic (InferenceOptions::llama_cpp_numerics): the layer of
// forward_block as llama.cpp's llama graph computes it (src/models/llama.cpp there), each op from
// kernels/llamacpp_numerics.h; the embedding rows and the residual adds are exact either way.
#include <algorithm>

#include "core/error.h"
#include "kernels/llamacpp_numerics.h"
#include "model/llama_model.h"
#include "quant/quant_tensor.h"

namespace lt {

// what of c llama.cpp's arithmetic here does not cover, or null
static const char* uncovered(const ModelConfig& c) {
  if (c.arch != "llama" && c.arch != "mistral") return "another architecture than llama.cpp's llama graph";
  if (c.qk_norm) return "q/k norms";
  if (c.sandwich_norms || c.norm_offset) return "Gemma's norms";
  if (c.embed_scale != 1.0f) return "scaled embeddings";
  if (c.mlp_act != MlpAct::SiLU) return "a GeGLU MLP";
  if (c.attn_softcap > 0 || c.final_softcap > 0) return "soft-capping";
  if (c.query_pre_attn_scalar > 0) return "a query scale";
  if (c.sliding_window > 0) return "sliding-window attention";
  if (!c.rope_scaling.type.empty() || c.rope_attention_factor != 1.0f) return "RoPE scaling";
  if (c.rope_layout != RopeLayout::Halves) return "interleaved q/k rows";
  if (c.fused_proj) return "fused projections";
  if (c.head_dim % 64 != 0) return "a head_dim that is not a multiple of 64";
  return nullptr;
}

void check_llamacpp_numerics(const ModelConfig& c, const InferenceOptions& o) {
  if (!o.llama_cpp_numerics) return;
  QuantSpec qs;
  const bool blocks = inference_quant_spec(c, o, &qs) && is_ggml_block(qs.type);
  LT_CHECK(blocks && (o.head == WeightKind::Q8_0 || o.head == WeightKind::Q4_0),
           "llama.cpp numerics need q8_0 or q4_0 weights and lm_head (--weights q8_0 | q4_0; weights=\"q8_0\" in "
           "Python)");
  LT_CHECK(o.kv_cache == DType::F32, "llama.cpp numerics need the f32 KV cache (--kv-cache f32; kv_cache=\"f32\")");
  const char* other = uncovered(c);
  LT_CHECK(!other, "llama.cpp numerics cover the plain Llama layer; this {} model has {}: run it without them", c.arch,
           other);
}

void LlamaModel::linear_llamacpp(float* out, const float* x, const LayerWeights& L, Proj p, int T) {
  const size_t m = size_t(p);
  llamacpp::block_linear(out, x, weight_view(L.q[m], 0.0f), L.bias[m], T, xq_, xd_);
}

void LlamaModel::forward_block_llamacpp(const int* tokens, int T, int pos0) {
  const int C = cfg_.dim, KVD = cfg_.kv_dim(), F = cfg_.hidden_dim;
  const int NH = cfg_.n_heads, NKV = cfg_.n_kv_heads, HS = cfg_.head_dim;
  const float eps = cfg_.norm_eps, base = cfg_.rope_theta;
  for (int t = 0; t < T; ++t) pos_[t] = pos0 + t;
  ops_.embedding_forward(x_, tokens, embed_, T, C);
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const LayerWeights& L = layers_[size_t(l)];
    float* k = L.k_cache + size_t(pos0) * KVD;
    float* v = L.v_cache + size_t(pos0) * KVD;
    llamacpp::rmsnorm(xn_, x_, L.attn_norm, T, C, eps);
    linear_llamacpp(q_, xn_, L, Proj::Q, T);
    linear_llamacpp(k, xn_, L, Proj::K, T);
    linear_llamacpp(v, xn_, L, Proj::V, T);
    llamacpp::rope(q_, pos_, T, NH, HS, base);
    llamacpp::rope(k, pos_, T, NKV, HS, base);
    llamacpp::attention(att_, q_, L.k_cache, L.v_cache, T, pos0, NH, NKV, HS, attn_ws_, attn_ws_floats_);
    linear_llamacpp(xn_, att_, L, Proj::O, T);
    ops_.add_inplace(x_, xn_, size_t(T) * C);
    llamacpp::rmsnorm(xn_, x_, L.ffn_norm, T, C, eps);
    linear_llamacpp(gate_, xn_, L, Proj::Gate, T);
    linear_llamacpp(up_, xn_, L, Proj::Up, T);
    llamacpp::swiglu(gate_, gate_, up_, size_t(T) * F);
    linear_llamacpp(xn_, gate_, L, Proj::Down, T);
    ops_.add_inplace(x_, xn_, size_t(T) * C);
  }
}

void LlamaModel::head_llamacpp(const float* x) {
  llamacpp::rmsnorm(xn_, x, final_norm_, 1, cfg_.dim, cfg_.norm_eps);
  llamacpp::block_linear(logits_, xn_, head_, nullptr, 1, xq_, xd_);
}

}  // namespace lt
