// Llama-family inference forward over a KV cache. Per layer (DESIGN.md §2):
//   xn = rmsnorm(x); q,k,v = linear(xn) (k, v written straight into the cache rows);
//   rope(q, k); att = attention(q, cache); x += linear_o(att);
//   xn = rmsnorm(x); x += down(silu(gate(xn)) * up(xn))
// then the final norm and lm_head on the last token only.
#include "model/llama_model.h"

#include <algorithm>
#include <fmt/format.h>

#include "core/error.h"
#include "core/mapped_file.h"
#include "io/model_files.h"
#include "io/peft_adapter.h"
#include "kernels/cpu/gemm.h"
#include "model/rope_freqs.h"

namespace lt {

static std::string layer_name(int l, const char* rest) { return fmt::format("model.layers.{}.{}", l, rest); }

void resolve_inference_options(const ModelConfig& c, InferenceOptions& o) {
  if (o.context <= 0) o.context = std::min(c.max_seq_len, 4096);
  LT_CHECK(o.context >= 1, "context must be at least 1 (got {})", o.context);
  LT_CHECK(c.sliding_window <= 0 || o.context <= c.sliding_window,
           "context {} is longer than the model's sliding attention window ({}); sliding-window attention is not "
           "supported, use --context {} or less", o.context, c.sliding_window, c.sliding_window);
  if (o.prefill_block <= 0) o.prefill_block = std::min(o.context, 256);
  o.prefill_block = std::min(o.prefill_block, o.context);
}

MemoryPlan plan_inference(const ModelConfig& c, const InferenceOptions& opts) {
  InferenceOptions o = opts;
  resolve_inference_options(c, o);
  const size_t C = c.dim, QD = c.q_dim(), KVD = c.kv_dim(), F = c.hidden_dim, V = c.vocab_size;
  const size_t P = o.context, TB = o.prefill_block, f = sizeof(float);
  MemoryPlan p;
  const auto W = Category::FrozenWeights;
  p.add("model.embed_tokens.weight", W, V * C * f);
  for (int l = 0; l < c.n_layers; ++l) {
    p.add(layer_name(l, "input_layernorm.weight"), W, C * f);
    p.add(layer_name(l, "self_attn.q_proj.weight"), W, QD * C * f);
    p.add(layer_name(l, "self_attn.k_proj.weight"), W, KVD * C * f);
    p.add(layer_name(l, "self_attn.v_proj.weight"), W, KVD * C * f);
    if (c.attention_bias) {
      p.add(layer_name(l, "self_attn.q_proj.bias"), W, QD * f);
      p.add(layer_name(l, "self_attn.k_proj.bias"), W, KVD * f);
      p.add(layer_name(l, "self_attn.v_proj.bias"), W, KVD * f);
    }
    p.add(layer_name(l, "self_attn.o_proj.weight"), W, C * QD * f);
    p.add(layer_name(l, "post_attention_layernorm.weight"), W, C * f);
    p.add(layer_name(l, "mlp.gate_proj.weight"), W, F * C * f);
    p.add(layer_name(l, "mlp.up_proj.weight"), W, F * C * f);
    p.add(layer_name(l, "mlp.down_proj.weight"), W, C * F * f);
  }
  p.add("model.norm.weight", W, C * f);
  if (!c.tie_embeddings) p.add("lm_head.weight", W, V * C * f);
  for (int l = 0; l < c.n_layers; ++l) {
    p.add(fmt::format("kv_cache.{}.k", l), Category::KVCache, P * KVD * f);
    p.add(fmt::format("kv_cache.{}.v", l), Category::KVCache, P * KVD * f);
  }
  const auto A = Category::Activations;
  p.add("act.x", A, TB * C * f, Lifetime::Step);
  p.add("act.xn", A, TB * C * f, Lifetime::Layer);
  p.add("act.q", A, TB * QD * f, Lifetime::Layer);
  p.add("act.att", A, TB * QD * f, Lifetime::Layer);
  p.add("act.gate", A, TB * F * f, Lifetime::Layer);
  p.add("act.up", A, TB * F * f, Lifetime::Layer);
  p.add("logits", Category::LossChunk, V * f, Lifetime::Step);
  p.add("rope.inv_freq", Category::Workspace, size_t(c.head_dim / 2) * f);
  p.add("positions", Category::Data, TB * sizeof(int), Lifetime::Step);
  return p;
}

LlamaModel::LlamaModel(const ModelConfig& config, const TensorSet& tensors, InferenceOptions opts, const Ops& ops)
    : cfg_(config), opts_(opts), ops_(ops) {
  validate_config(cfg_, tensors.source);
  LT_CHECK(cfg_.quantization.empty(), "{}: the model is stored quantized ({}); inference on quantized weights is "
           "not supported yet: run the unquantized model (quantized bases are for LoRA training)", tensors.source,
           cfg_.quantization);
  resolve_inference_options(cfg_, opts_);
  plan_ = plan_inference(cfg_, opts_);
  arenas_.allocate(plan_);
  x_ = arenas_.get_as<float>("act.x");
  xn_ = arenas_.get_as<float>("act.xn");
  q_ = arenas_.get_as<float>("act.q");
  att_ = arenas_.get_as<float>("act.att");
  gate_ = arenas_.get_as<float>("act.gate");
  up_ = arenas_.get_as<float>("act.up");
  logits_ = arenas_.get_as<float>("logits");
  pos_ = arenas_.get_as<int>("positions");
  inv_freq_ = arenas_.get_as<float>("rope.inv_freq");
  auto inv = rope_inv_freq(cfg_);
  std::copy(inv.begin(), inv.end(), inv_freq_);
  load_weights(tensors);
}

std::unique_ptr<LlamaModel> LlamaModel::load(const std::string& path, InferenceOptions opts, const Ops& ops) {
  auto files = load_model_files(path);
  return std::make_unique<LlamaModel>(files.config, files.tensors, opts, ops);
}

void LlamaModel::load_weights(const TensorSet& ts) {
  const int64_t C = cfg_.dim, QD = cfg_.q_dim(), KVD = cfg_.kv_dim(), F = cfg_.hidden_dim, V = cfg_.vocab_size;
  auto take = [&](const std::string& name, std::vector<int64_t> shape) {
    const TensorInfo& t = ts.get(name, shape);
    float* dst = arenas_.get_as<float>(name);
    convert_to_f32(dst, t.data, t.dtype, size_t(t.numel()));
    release_mapped_pages(t.data, t.nbytes);
    return dst;
  };
  embed_ = take("model.embed_tokens.weight", {V, C});
  layers_.resize(cfg_.n_layers);
  for (int l = 0; l < cfg_.n_layers; ++l) {
    auto& L = layers_[l];
    L.attn_norm = take(layer_name(l, "input_layernorm.weight"), {C});
    L.wq = take(layer_name(l, "self_attn.q_proj.weight"), {QD, C});
    L.wk = take(layer_name(l, "self_attn.k_proj.weight"), {KVD, C});
    L.wv = take(layer_name(l, "self_attn.v_proj.weight"), {KVD, C});
    L.bq = L.bk = L.bv = nullptr;
    if (cfg_.attention_bias) {
      L.bq = take(layer_name(l, "self_attn.q_proj.bias"), {QD});
      L.bk = take(layer_name(l, "self_attn.k_proj.bias"), {KVD});
      L.bv = take(layer_name(l, "self_attn.v_proj.bias"), {KVD});
    }
    L.wo = take(layer_name(l, "self_attn.o_proj.weight"), {C, QD});
    L.ffn_norm = take(layer_name(l, "post_attention_layernorm.weight"), {C});
    L.w_gate = take(layer_name(l, "mlp.gate_proj.weight"), {F, C});
    L.w_up = take(layer_name(l, "mlp.up_proj.weight"), {F, C});
    L.w_down = take(layer_name(l, "mlp.down_proj.weight"), {C, F});
    L.k_cache = arenas_.get_as<float>(fmt::format("kv_cache.{}.k", l));
    L.v_cache = arenas_.get_as<float>(fmt::format("kv_cache.{}.v", l));
  }
  final_norm_ = take("model.norm.weight", {C});
  if (cfg_.tie_embeddings) {
    lm_head_ = embed_;
  } else {
    lm_head_ = take("lm_head.weight", {V, C});
  }
}

void LlamaModel::merge_adapter(const std::string& dir, float sign) {
  LoadedAdapter ad = load_peft_adapter(dir);
  const float s = sign * ad.config.scaling();
  const int64_t R = ad.config.r;
  const auto& mods = llama_linear_modules();
  int merged = 0;
  for (int l = 0; l < cfg_.n_layers; ++l) {
    auto& L = layers_[l];
    float* W[7] = {L.wq, L.wk, L.wv, L.wo, L.w_gate, L.w_up, L.w_down};
    float* Bias[7] = {L.bq, L.bk, L.bv, nullptr, nullptr, nullptr, nullptr};
    const int64_t C = cfg_.dim, QD = cfg_.q_dim(), KVD = cfg_.kv_dim(), F = cfg_.hidden_dim;
    const int64_t in[7] = {C, C, C, QD, C, C, F}, out[7] = {QD, KVD, KVD, C, F, F, C};
    for (int m = 0; m < 7; ++m) {
      if (ad.tensors.find(peft_lora_key(l, mods[m], true))) {
        const TensorInfo& A = ad.tensors.get(peft_lora_key(l, mods[m], true), {R, in[m]});
        const TensorInfo& B = ad.tensors.get(peft_lora_key(l, mods[m], false), {out[m], R});
        std::vector<float> fa(size_t(A.numel())), fb(size_t(B.numel()));
        convert_to_f32(fa.data(), A.data, A.dtype, fa.size());
        convert_to_f32(fb.data(), B.data, B.dtype, fb.size());
        cpu::gemm_f32(false, false, int(out[m]), int(in[m]), int(R), s, fb.data(), int(R), fa.data(), int(in[m]), 1.0f,
                      W[m], int(in[m]));
        ++merged;
      }
      if (ad.tensors.find(peft_bias_key(l, mods[m]))) {
        LT_CHECK(Bias[m], "{}: adapter has a bias for {} of layer {}, which this model does not have", dir, mods[m], l);
        LT_CHECK(sign > 0, "{}: cannot unmerge an adapter that carries trained biases", dir);
        const TensorInfo& bt = ad.tensors.get(peft_bias_key(l, mods[m]), {out[m]});
        convert_to_f32(Bias[m], bt.data, bt.dtype, size_t(bt.numel()));
      }
    }
  }
  LT_CHECK(merged > 0, "{}: the adapter holds no LoRA weights for this model", dir);
}

void LlamaModel::forward(const int* tokens, int T, int pos0) {
  LT_CHECK(T >= 1, "forward needs at least one token");
  LT_CHECK(pos0 >= 0 && pos0 + T <= opts_.context, "sequence of {} tokens does not fit the context of {} positions",
           pos0 + T, opts_.context);
  for (int t = 0; t < T; ++t)
    LT_CHECK(tokens[t] >= 0 && tokens[t] < cfg_.vocab_size, "token id {} outside the vocabulary (size {})", tokens[t],
             cfg_.vocab_size);
  for (int t0 = 0; t0 < T; t0 += opts_.prefill_block) {
    int n = std::min(opts_.prefill_block, T - t0);
    forward_block(tokens + t0, n, pos0 + t0);
  }
  // final norm + lm_head on the last token of the last block (its row is in x_)
  const int C = cfg_.dim;
  int last = (T - 1) % opts_.prefill_block;
  ops_.rmsnorm_forward(xn_, nullptr, x_ + size_t(last) * C, final_norm_, 1, C, cfg_.norm_eps);
  ops_.matmul_forward(logits_, xn_, lm_head_, nullptr, 1, C, cfg_.vocab_size);
}

void LlamaModel::forward_block(const int* tokens, int T, int pos0) {
  const int C = cfg_.dim, QD = cfg_.q_dim(), KVD = cfg_.kv_dim(), F = cfg_.hidden_dim;
  const int NH = cfg_.n_heads, NKV = cfg_.n_kv_heads, HS = cfg_.head_dim;
  const bool interleaved = cfg_.rope_layout == RopeLayout::Interleaved;
  for (int t = 0; t < T; ++t) pos_[t] = pos0 + t;
  ops_.embedding_forward(x_, tokens, embed_, T, C);
  for (auto& L : layers_) {
    float* k = L.k_cache + size_t(pos0) * KVD;  // (T, KVD) rows of the cache
    float* v = L.v_cache + size_t(pos0) * KVD;
    ops_.rmsnorm_forward(xn_, nullptr, x_, L.attn_norm, T, C, cfg_.norm_eps);
    ops_.matmul_forward(q_, xn_, L.wq, L.bq, T, C, QD);
    ops_.matmul_forward(k, xn_, L.wk, L.bk, T, C, KVD);
    ops_.matmul_forward(v, xn_, L.wv, L.bv, T, C, KVD);
    ops_.rope_forward(q_, pos_, inv_freq_, T, NH, HS, interleaved);
    ops_.rope_forward(k, pos_, inv_freq_, T, NKV, HS, interleaved);
    ops_.attention_forward(att_, nullptr, q_, L.k_cache, L.v_cache, T, pos0, NH, NKV, HS);
    ops_.matmul_forward(xn_, att_, L.wo, nullptr, T, QD, C);
    ops_.add_inplace(x_, xn_, size_t(T) * C);
    ops_.rmsnorm_forward(xn_, nullptr, x_, L.ffn_norm, T, C, cfg_.norm_eps);
    ops_.matmul_forward(gate_, xn_, L.w_gate, nullptr, T, C, F);
    ops_.matmul_forward(up_, xn_, L.w_up, nullptr, T, C, F);
    ops_.swiglu_forward(gate_, gate_, up_, T, F);
    ops_.matmul_forward(xn_, gate_, L.w_down, nullptr, T, F, C);
    ops_.add_inplace(x_, xn_, size_t(T) * C);
  }
}

}  // namespace lt
