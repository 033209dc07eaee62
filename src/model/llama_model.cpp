// Llama-family inference forward over a KV cache. Per layer (DESIGN.md §2):
//   xn = rmsnorm(x); q,k,v = linear(xn) (k, v written straight into the cache rows);
//   (linear: the op table's linear op over f32 weights, or NF4 / FP4 / int8 ones, kernels/linear.h);
//   Qwen3: q, k = rmsnorm per head (q_norm, k_norm over HS);
//   rope(q, k); att = attention(q, cache); x += linear_o(att);
//   xn = rmsnorm(x); x += down(silu(gate(xn)) * up(xn))
// then the final norm and lm_head on the last token only.
// Gemma 2 / 3: x = embed * sqrt(C); norms scale by (1 + w); attention's and the MLP's outputs
// normed (post_attention / post_feedforward_layernorm) before their residual adds; GeGLU; q scaled
// for query_pre_attn_scalar; scores and final logits soft-capped (Gemma 2); Gemma 3's sliding
// layers rotate with their own RoPE base.
#include "model/llama_model.h"

#include <algorithm>
#include <cstring>
#include <omp.h>
#include <fmt/format.h>

#include "core/error.h"
#include "core/mapped_file.h"
#include "io/checkpoint_tensors.h"
#include "io/fused_proj.h"
#include "io/gguf_model.h"
#include "io/model_files.h"
#include "io/peft_adapter.h"
#include "io/quant_model.h"
#include "kernels/ggml_blocks.h"
#include "kernels/linear.h"
#include "kernels/llamacpp_numerics.h"
#include "core/rope_freqs.h"

namespace lt {

static std::string layer_name(int l, const char* rest) { return fmt::format("model.layers.{}.{}", l, rest); }

void scale_embeddings(float* x, size_t n, const ModelConfig& c) {
  if (c.embed_scale == 1.0f) return;
  for (size_t i = 0; i < n; ++i) x[i] *= c.embed_scale;
}

void mlp_activation(const Ops& ops, const ModelConfig& c, float* out, const float* gate, const float* up, int T,
                    int F) {
  if (c.mlp_act == MlpAct::GeluTanh) ops.geglu_forward(out, gate, up, T, F);
  else ops.swiglu_forward(out, gate, up, T, F);
}

void attention(const Ops& ops, const ModelConfig& c, float* out, const float* q, const float* k, const float* v,
               int T, int pos0, int window, int ring) {
  if (c.attn_softcap > 0)
    ops.attention_softcap_forward(out, nullptr, q, k, v, T, pos0, c.n_heads, c.n_kv_heads, c.head_dim, window, ring,
                                  c.attn_softcap);
  else
    ops.attention_forward(out, nullptr, q, k, v, T, pos0, c.n_heads, c.n_kv_heads, c.head_dim, window, ring);
}


void resolve_inference_options(const ModelConfig& c, InferenceOptions& o) {
  if (o.context <= 0) o.context = std::min(c.max_seq_len, 4096);
  LT_CHECK(o.context >= 1, "context must be at least 1 (got {})", o.context);
  // llama.cpp numerics: llama.cpp's default batch (its attention sums in another order for a batch of
  // one token than for more, so the blocks must be its batches)
  if (o.prefill_block <= 0) o.prefill_block = std::min(o.context, o.llama_cpp_numerics ? 512 : 256);
  o.prefill_block = std::min(o.prefill_block, o.context);
}

int kv_cache_rows(const ModelConfig& c, const InferenceOptions& o, int l) {
  const int w = c.attention_window(l);
  return w > 0 ? int(std::min<int64_t>(o.context, int64_t(w) + o.prefill_block - 1)) : o.context;
}

// The checks of the 16-bit and head options (lt::Error naming the option).
static void check_weight_options(const ModelConfig& c, const InferenceOptions& o) {
  LT_CHECK(o.linear16 == DType::F32 || o.linear16 == DType::BF16 || o.linear16 == DType::F16,
           "inference: 16-bit linear weights must be bf16 or f16 (got {})", dtype_name(o.linear16));
  LT_CHECK(o.linear16 == DType::F32 || (!o.quantization && !c.quantization), "inference: {} linear weights cannot "
           "be combined with quantization ({}); choose one", dtype_name(o.linear16),
           c.quantization ? "the model folder is quantized" : quantization_name(o.quantization));
  LT_CHECK(o.head == WeightKind::F32 || o.head == WeightKind::BF16 || o.head == WeightKind::F16 ||
           o.head == WeightKind::Int8 || o.head == WeightKind::Q8_0 || o.head == WeightKind::Q4_0,
           "inference: the lm_head can be f32, bf16, f16, int8, q8_0 or q4_0 (got {})",
           weight_kind_name(o.head));
}

static WeightKind half_kind(DType t) { return t == DType::BF16 ? WeightKind::BF16 : WeightKind::F16; }
static DType half_dtype(WeightKind k) { return k == WeightKind::BF16 ? DType::BF16 : DType::F16; }
// the storage of a quantized lm_head (InferenceOptions::head Int8, Q8_0 or Q4_0)
static QuantSpec head_spec(WeightKind k) {
  if (k == WeightKind::Q8_0) return {QuantType::Q8_0, 32, false};
  return k == WeightKind::Q4_0 ? QuantSpec{QuantType::Q4_0, 32, false} : QuantSpec{QuantType::Int8, 64, false};
}
static bool quantized_head(WeightKind k) {
  return k == WeightKind::Int8 || k == WeightKind::Q8_0 || k == WeightKind::Q4_0;
}

bool inference_quant_spec(const ModelConfig& c, const InferenceOptions& o, QuantSpec* spec) {
  if (c.quantization) {
    *spec = model_quant_spec(c);
    return true;
  }
  if (!o.quantization) return false;
  spec->type = *o.quantization;
  spec->blocksize = is_ggml_block(spec->type) ? 32 : o.quant_blocksize;  // q8_0 / q4_0: blocks of 32 only
  spec->double_quant = o.double_quant && spec->type != QuantType::Int8;
  check_quant_spec(*spec);
  return true;
}

MemoryPlan plan_inference(const ModelConfig& c, const InferenceOptions& opts) {
  InferenceOptions o = opts;
  resolve_inference_options(c, o);
  const size_t C = c.dim, QD = c.q_dim(), KVD = c.kv_dim(), F = c.hidden_dim, V = c.vocab_size;
  const size_t TB = o.prefill_block, f = sizeof(float);
  MemoryPlan p;
  const auto W = Category::FrozenWeights;
  check_weight_options(c, o);
  check_llamacpp_numerics(c, o);
  QuantSpec qs;
  const bool quant = inference_quant_spec(c, o, &qs);
  const bool half = o.linear16 != DType::F32;
  // a linear weight: f32, 16-bit, or its quantized storage (the HF name either way)
  auto lin = [&](int l, Proj pj) {
    auto [in, out] = c.linear_shape(pj);
    p.add(proj_hf_name(l, pj, "weight"), W,
          quant ? quant_storage_bytes(qs, out, in) : size_t(in * out) * (half ? 2 : f));
  };
  // a linear's bias (f32 whatever the weight), when the model has one
  auto bias = [&](int l, Proj pj) {
    if (c.has_bias(pj)) p.add(proj_hf_name(l, pj, "bias"), W, size_t(c.linear_shape(pj).second) * f);
  };
  p.add("model.embed_tokens.weight", W, V * C * f);
  for (int l = 0; l < c.n_layers; ++l) {
    p.add(layer_name(l, "input_layernorm.weight"), W, C * f);
    for (Proj pj : {Proj::Q, Proj::K, Proj::V}) lin(l, pj);
    for (Proj pj : {Proj::Q, Proj::K, Proj::V}) bias(l, pj);
    if (c.qk_norm)
      for (const char* n : {"self_attn.q_norm.weight", "self_attn.k_norm.weight"})
        p.add(layer_name(l, n), W, size_t(c.head_dim) * f);
    lin(l, Proj::O);
    bias(l, Proj::O);
    p.add(layer_name(l, "post_attention_layernorm.weight"), W, C * f);
    if (c.sandwich_norms)
      for (const char* n : {"pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight"})
        p.add(layer_name(l, n), W, C * f);
    for (Proj pj : {Proj::Gate, Proj::Up, Proj::Down}) lin(l, pj);
    for (Proj pj : {Proj::Gate, Proj::Up, Proj::Down}) bias(l, pj);
  }
  p.add("model.norm.weight", W, C * f);
  if (o.head == WeightKind::F32 && !c.tie_embeddings) p.add("lm_head.weight", W, V * C * f);
  if (o.head == WeightKind::BF16 || o.head == WeightKind::F16) p.add("lm_head.weight", W, V * C * 2);
  if (quantized_head(o.head)) {
    p.add("lm_head.weight", W, quant_storage_bytes(head_spec(o.head), int64_t(V), int64_t(C)));
    p.add("head.load_scratch", Category::Workspace, quantize_chunked_scratch_floats(head_spec(o.head), V, C) * f);
  }
  LT_CHECK(o.kv_cache == DType::F32 || o.kv_cache == DType::BF16, "inference: the KV cache can be f32 or bf16 (got {})",
           dtype_name(o.kv_cache));
  LT_CHECK(o.kv_cache == DType::F32 || c.attn_softcap == 0, "inference: a bf16 KV cache is not supported with "
           "attention soft-capping (Gemma 2's attn_logit_softcapping); use the f32 KV cache");
  const size_t kv_es = o.kv_cache == DType::BF16 ? 2 : f;
  for (int l = 0; l < c.n_layers; ++l) {
    const size_t rows = size_t(kv_cache_rows(c, o, l));
    p.add(fmt::format("kv_cache.{}.k", l), Category::KVCache, rows * KVD * kv_es);
    p.add(fmt::format("kv_cache.{}.v", l), Category::KVCache, rows * KVD * kv_es);
  }
  const auto A = Category::Activations;
  p.add("act.x", A, TB * C * f, Lifetime::Step);
  p.add("act.xn", A, TB * C * f, Lifetime::Layer);
  p.add("act.q", A, TB * QD * f, Lifetime::Layer);
  p.add("act.att", A, TB * QD * f, Lifetime::Layer);
  p.add("act.gate", A, TB * F * f, Lifetime::Layer);
  p.add("act.up", A, TB * F * f, Lifetime::Layer);
  if (o.kv_cache == DType::BF16) {
    p.add("act.k", A, TB * KVD * f, Lifetime::Layer);
    p.add("act.v", A, TB * KVD * f, Lifetime::Layer);
  }
  p.add("logits", Category::LossChunk, V * f, Lifetime::Step);
  p.add("rope.inv_freq", Category::Workspace, size_t(c.head_dim / 2) * f);
  if (c.rope_local_theta > 0) p.add("rope.inv_freq_local", Category::Workspace, size_t(c.head_dim / 2) * f);
  p.add("positions", Category::Data, TB * sizeof(int), Lifetime::Step);
  const bool head16 = o.head == WeightKind::BF16 || o.head == WeightKind::F16;
  if (half || head16) {  // the input of a 16-bit product, rounded to the type
    const size_t widest = std::max({C, QD, F});
    p.add("act.x16", A, TB * widest * 2, Lifetime::Layer);
    p.add("act.xr", A, TB * widest * f, Lifetime::Layer);
  }
  // the linear op's tile scratch (quantized or F16 weights) and the scratch of quantizing on load
  size_t ws = 0, load = 0;
  for (Proj pj : kProjs) {
    auto [in, out] = c.linear_shape(pj);
    if (quant) {
      ws = std::max(ws, linear_tile_bytes(weight_kind(qs.type), qs.blocksize, qs.double_quant, int(TB), int(in),
                                          int(out)));
      load = std::max(load, quantize_chunked_scratch_floats(qs, out, in) * f);
    } else if (half) {
      ws = std::max(ws, linear_tile_bytes(half_kind(o.linear16), 64, false, int(TB), int(in), int(out)));
    }
  }
  if (o.head != WeightKind::F32) ws = std::max(ws, linear_tile_bytes(o.head, 64, false, 1, int(C), int(V)));
  if (ws) p.add("quant.workspace", Category::Workspace, ws, Lifetime::Layer);
  if (o.llama_cpp_numerics) {
    const size_t widest = std::max({C, QD, F});
    p.add("llamacpp.xq", Category::Workspace, TB * widest, Lifetime::Layer);
    p.add("llamacpp.xd", Category::Workspace, TB * (widest / 32) * f, Lifetime::Layer);
    p.add("llamacpp.attention", Category::Workspace,
          size_t(omp_get_max_threads()) * llamacpp::attention_scratch_floats(o.context, c.head_dim) * f,
          Lifetime::Layer);
  }
  if (quant && !c.quantization) p.add("quant.load_scratch", Category::Workspace, load);
  return p;
}

LlamaModel::LlamaModel(const ModelConfig& config, const TensorSet& tensors, InferenceOptions opts, const Ops& ops)
    : cfg_(config), opts_(opts), ops_(ops) {
  validate_config(cfg_, tensors.source);
  check_checkpoint_tensors(cfg_, tensors);
  resolve_inference_options(cfg_, opts_);
  plan_ = plan_inference(cfg_, opts_);
  arenas_.allocate(plan_);
  bind_state();
  load_weights(tensors);
  bind_kv_cache();
}

LlamaModel::LlamaModel(std::shared_ptr<const LlamaModel> weights, InferenceOptions opts)
    : cfg_(weights->cfg_), opts_(weights->opts_), ops_(weights->ops_), weights_(std::move(weights)) {
  opts_.context = opts.context;
  opts_.prefill_block = opts.prefill_block;
  resolve_inference_options(cfg_, opts_);
  // this sequence's buffers only: the weights (and the scratch that quantized them) stay shared
  for (const auto& b : plan_inference(cfg_, opts_).buffers)
    if (b.cat != Category::FrozenWeights && b.name != "quant.load_scratch" && b.name != "head.load_scratch")
      plan_.add(b.name, b.cat, b.bytes, b.life);
  arenas_.allocate(plan_);
  bind_state();
  embed_ = weights_->embed_;
  final_norm_ = weights_->final_norm_;
  lm_head_ = weights_->lm_head_;
  head_ = weights_->head_;
  quant_ = weights_->quant_;
  layers_ = weights_->layers_;
  bind_kv_cache();
}

void LlamaModel::bind_kv_cache() {
  ring_ = 0;
  for (int l = 0; l < cfg_.n_layers; ++l) {
    LayerWeights& L = layers_[size_t(l)];
    const bool kv16 = opts_.kv_cache == DType::BF16;
    L.k_cache = kv16 ? nullptr : arenas_.get_as<float>(fmt::format("kv_cache.{}.k", l));
    L.v_cache = kv16 ? nullptr : arenas_.get_as<float>(fmt::format("kv_cache.{}.v", l));
    L.k_cache16 = kv16 ? arenas_.get_as<uint16_t>(fmt::format("kv_cache.{}.k", l)) : nullptr;
    L.v_cache16 = kv16 ? arenas_.get_as<uint16_t>(fmt::format("kv_cache.{}.v", l)) : nullptr;
    L.window = cfg_.attention_window(l);
    const int rows = kv_cache_rows(cfg_, opts_, l);
    L.ring = rows < opts_.context ? rows : 0;
    if (L.ring) ring_ = L.ring;
  }
}

void LlamaModel::bind_state() {
  x_ = arenas_.get_as<float>("act.x");
  xn_ = arenas_.get_as<float>("act.xn");
  q_ = arenas_.get_as<float>("act.q");
  att_ = arenas_.get_as<float>("act.att");
  gate_ = arenas_.get_as<float>("act.gate");
  up_ = arenas_.get_as<float>("act.up");
  logits_ = arenas_.get_as<float>("logits");
  pos_ = arenas_.get_as<int>("positions");
  inv_freq_ = arenas_.get_as<float>("rope.inv_freq");
  for (const auto& b : plan_.buffers) {
    if (b.name == "quant.workspace") quant_ws_bytes_ = b.bytes, quant_ws_ = arenas_.get("quant.workspace");
    if (b.name == "act.x16") x16_ = arenas_.get_as<uint16_t>("act.x16"), xr_ = arenas_.get_as<float>("act.xr");
    if (b.name == "act.k") k_ = arenas_.get_as<float>("act.k"), v_ = arenas_.get_as<float>("act.v");
    if (b.name == "llamacpp.xq") {
      xq_ = arenas_.get_as<int8_t>("llamacpp.xq"), xd_ = arenas_.get_as<float>("llamacpp.xd");
    }
    if (b.name == "llamacpp.attention") {
      attn_ws_ = arenas_.get_as<float>("llamacpp.attention"), attn_ws_floats_ = b.bytes / sizeof(float);
    }
  }
  // one token's stacked q|k|v output fits in att_, gate|up in gate_ (decode_qkv, decode_gate_up)
  decode_stacking_ = opts_.prefill_block >= 2 && size_t(opts_.prefill_block) * cfg_.q_dim() >=
                     size_t(cfg_.q_dim()) + 2 * size_t(cfg_.kv_dim());
  rope_.emplace(cfg_);
  std::copy(rope_->inv_freq().begin(), rope_->inv_freq().end(), inv_freq_);
  if (cfg_.rope_local_theta > 0) {  // Gemma 3's sliding layers: default RoPE, its own base
    inv_freq_local_ = arenas_.get_as<float>("rope.inv_freq_local");
    ModelConfig local = cfg_;
    local.rope_theta = cfg_.rope_local_theta;
    local.rope_scaling = RopeScaling{};
    const auto inv = rope_inv_freq(local, 0);
    std::copy(inv.begin(), inv.end(), inv_freq_local_);
  }
}

std::unique_ptr<LlamaModel> LlamaModel::load(const std::string& path, InferenceOptions opts, const Ops& ops) {
  // --weights q8_0 / q4_0 on a GGUF of that type: its linear weights as stored (io/gguf_model.h), not
  // decoded and quantized again (which would give the same blocks)
  const bool blocks = opts.quantization && is_ggml_block(*opts.quantization) && is_gguf_model_path(path);
  if (opts.llama_cpp_numerics && blocks) check_gguf_stored_as(path, *opts.quantization);
  auto files = blocks ? load_gguf_model(path, opts.quantization) : load_model_files(path);
  return std::make_unique<LlamaModel>(files.config, files.tensors, opts, ops);
}

void LlamaModel::load_weights(const TensorSet& ts) {
  const int64_t C = cfg_.dim, V = cfg_.vocab_size;
  check_weight_options(cfg_, opts_);
  QuantSpec qs;
  quant_ = inference_quant_spec(cfg_, opts_, &qs);
  const bool stored = cfg_.quantization.has_value();
  float* scratch = nullptr;
  size_t scratch_floats = 0;
  for (const auto& b : plan_.buffers)
    if (b.name == "quant.load_scratch") scratch_floats = b.bytes / sizeof(float);
  if (scratch_floats) scratch = arenas_.get_as<float>("quant.load_scratch");
  auto take = [&](const std::string& name, std::vector<int64_t> shape) {
    const TensorInfo& t = ts.get(name, shape);
    float* dst = arenas_.get_as<float>(name);
    convert_to_f32(dst, t.data, t.dtype, size_t(t.numel()));
    release_mapped_pages(t.data, t.nbytes);
    return dst;
  };
  // a 16-bit copy: as stored when the file holds that type, else converted a chunk at a time
  auto take16 = [&](const std::string& name, std::vector<int64_t> shape, DType type) {
    const TensorInfo& t = ts.get(name, shape);
    auto* dst = arenas_.get_as<uint16_t>(name);
    copy_as_half(dst, t, type);
    return dst;
  };
  // a norm weight: Gemma's are offsets from 1, held as the factor (1 + w) the norm applies
  auto take_norm = [&](const std::string& name, int64_t n) {
    float* w = take(name, {n});
    if (cfg_.norm_offset)
      for (int64_t i = 0; i < n; ++i) w[i] = 1.0f + w[i];
    return w;
  };
  // a linear weight: f32, 16-bit, the stored quantized parts copied, or quantized on load chunk by chunk
  auto take_linear = [&](LayerWeights& L, int l, Proj m) -> float* {
    const std::string name = proj_hf_name(l, m, "weight");
    const auto [in, out] = cfg_.linear_shape(m);
    const std::vector<int64_t> shape = {out, in};
    L.w16[size_t(m)] = nullptr;
    if (opts_.linear16 != DType::F32) {
      uint16_t* w16 = L.w16[size_t(m)] = take16(name, shape, opts_.linear16);
      L.w16_bf16[size_t(m)] = opts_.linear16 == DType::F16 && f16_values_are_bf16(w16, size_t(out * in));
      return nullptr;
    }
    if (!quant_) return take(name, shape);
    void* dst = arenas_.get(name);
    const size_t bytes = quant_storage_bytes(qs, shape[0], shape[1]);
    if (stored) {
      L.q[size_t(m)] = copy_quant_tensor(dst, bytes, load_quant_tensor(ts, name, qs, shape[0], shape[1]));
      for (const char* part : {".codes", ".absmax", ".qabsmax", ".absmax2", ".qweight", ".row_absmax", ".blocks"})
        if (const TensorInfo* t = ts.find(name + part)) release_mapped_pages(t->data, t->nbytes);
    } else {
      const TensorInfo& t = ts.get(name, shape);
      LT_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16,
               "{}: tensor '{}' is {}; quantization on load needs F32, F16 or BF16 weights", t.file, name,
               dtype_name(t.dtype));
      const auto* src = static_cast<const uint8_t*>(t.data);
      const size_t es = dtype_size(t.dtype);
      L.q[size_t(m)] = quantize_weight_chunked(dst, bytes, shape[0], shape[1], qs, scratch, scratch_floats,
                                       [&](float* out, int64_t first, int64_t count) {
                                         convert_to_f32(out, src + size_t(first) * es, t.dtype, size_t(count));
                                       });
      release_mapped_pages(t.data, t.nbytes);
    }
    return nullptr;
  };
  embed_ = take("model.embed_tokens.weight", {V, C});
  layers_.resize(cfg_.n_layers);
  for (int l = 0; l < cfg_.n_layers; ++l) {
    auto& L = layers_[l];
    L.attn_norm = take_norm(layer_name(l, "input_layernorm.weight"), C);
    for (Proj p : {Proj::Q, Proj::K, Proj::V}) L.w[size_t(p)] = take_linear(L, l, p);
    for (Proj p : kProjs)
      L.bias[size_t(p)] = cfg_.has_bias(p) ? take(proj_hf_name(l, p, "bias"), {cfg_.linear_shape(p).second}) : nullptr;
    L.q_norm = cfg_.qk_norm ? take_norm(layer_name(l, "self_attn.q_norm.weight"), cfg_.head_dim) : nullptr;
    L.k_norm = cfg_.qk_norm ? take_norm(layer_name(l, "self_attn.k_norm.weight"), cfg_.head_dim) : nullptr;
    L.w[size_t(Proj::O)] = take_linear(L, l, Proj::O);
    L.ffn_norm = take_norm(layer_name(l, cfg_.ffn_norm_name()), C);
    if (cfg_.sandwich_norms) {
      L.post_attn_norm = take_norm(layer_name(l, "post_attention_layernorm.weight"), C);
      L.post_ffn_norm = take_norm(layer_name(l, "post_feedforward_layernorm.weight"), C);
    }
    for (Proj p : {Proj::Gate, Proj::Up, Proj::Down}) L.w[size_t(p)] = take_linear(L, l, p);
  }
  if (scratch) std::memset(scratch, 0, scratch_floats * sizeof(float));  // keep the ledger's view honest
  final_norm_ = take_norm("model.norm.weight", C);
  load_head(ts);
}

// dst (n) = t's elements in the 16-bit `type`: copied when t holds that type, else rounded from
// f32 a chunk at a time (never the whole tensor in f32)
void LlamaModel::copy_as_half(uint16_t* dst, const TensorInfo& t, DType type) const {
  const size_t n = size_t(t.numel());
  LT_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16,
           "{}: tensor '{}' is {}; 16-bit weights are made from F32, F16 or BF16 tensors", t.file, t.name,
           dtype_name(t.dtype));
  if (t.dtype == type) {
    std::memcpy(dst, t.data, n * 2);
  } else {
    constexpr size_t kChunk = 1 << 16;
    std::vector<float> buf(std::min(n, kChunk));
    const auto* src = static_cast<const uint8_t*>(t.data);
    for (size_t i = 0; i < n; i += kChunk) {
      const size_t k = std::min(kChunk, n - i);
      const float* f = reinterpret_cast<const float*>(src + i * 4);
      if (t.dtype != DType::F32) convert_to_f32(buf.data(), src + i * 2, t.dtype, k), f = buf.data();
      ops_.round_half(type, dst + i, nullptr, f, k);
    }
  }
  release_mapped_pages(t.data, t.nbytes);
}

void LlamaModel::load_head(const TensorSet& ts) {
  const int64_t C = cfg_.dim, V = cfg_.vocab_size;
  const std::string name = cfg_.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  lm_head_ = nullptr;
  if (opts_.head == WeightKind::F32) {
    if (cfg_.tie_embeddings) {
      lm_head_ = embed_;
    } else {
      const TensorInfo& t = ts.get(name, {V, C});
      lm_head_ = arenas_.get_as<float>("lm_head.weight");
      convert_to_f32(lm_head_, t.data, t.dtype, size_t(t.numel()));
      release_mapped_pages(t.data, t.nbytes);
    }
    head_ = f32_weight(lm_head_, int(V), int(C));
    return;
  }
  const TensorInfo& t = ts.get(name, {V, C});
  if (!quantized_head(opts_.head)) {
    auto* dst = arenas_.get_as<uint16_t>("lm_head.weight");
    copy_as_half(dst, t, half_dtype(opts_.head));
    head_ = half_weight(opts_.head, dst, int(V), int(C));
    head_.bf16_values = opts_.head == WeightKind::F16 && f16_values_are_bf16(dst, size_t(V * C));
    return;
  }
  LT_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16,
           "{}: tensor '{}' is {}; an {} lm_head is quantized from F32, F16 or BF16", t.file, name,
           dtype_name(t.dtype), weight_kind_name(opts_.head));
  const QuantSpec hs = head_spec(opts_.head);
  size_t scratch_floats = 0;
  for (const auto& b : plan_.buffers)
    if (b.name == "head.load_scratch") scratch_floats = b.bytes / sizeof(float);
  float* scratch = arenas_.get_as<float>("head.load_scratch");
  const auto* src = static_cast<const uint8_t*>(t.data);
  const size_t es = dtype_size(t.dtype);
  head_q_ = quantize_weight_chunked(arenas_.get("lm_head.weight"), quant_storage_bytes(hs, V, C), V, C,
                                    hs, scratch, scratch_floats, [&](float* out, int64_t first, int64_t count) {
                                      convert_to_f32(out, src + size_t(first) * es, t.dtype, size_t(count));
                                    });
  release_mapped_pages(t.data, t.nbytes);
  std::memset(scratch, 0, scratch_floats * sizeof(float));
  head_ = weight_view(head_q_, 0.0f);  // per-row int8 for every column: no outlier pass over the vocabulary
}

// DoRA, after W += s·B·A: each row scaled by m / ||row|| (PEFT's merge: the magnitude over the norm
// of the adapted weight). Not invertible from the merged weight alone, so no unmerge.
static void apply_dora_magnitude(const LoadedAdapter& ad, const std::string& dir, int l, const std::string& module,
                                 float* W, int64_t out, int64_t in, float sign) {
  LT_CHECK(sign > 0, "{}: cannot unmerge a DoRA adapter (its magnitudes rescale the merged rows)", dir);
  const TensorInfo& t = ad.tensors.get(peft_magnitude_key(l, module), {out});
  std::vector<float> mag(static_cast<size_t>(out)), norm(static_cast<size_t>(out));
  convert_to_f32(mag.data(), t.data, t.dtype, mag.size());
  dora_weight_norm(norm.data(), f32_weight(W, int(out), int(in)), LoraView{});
  for (int64_t o = 0; o < out; ++o) {
    const float k = mag[size_t(o)] / norm[size_t(o)];
    for (int64_t i = 0; i < in; ++i) W[o * in + i] *= k;
  }
}

void LlamaModel::merge_adapter(const std::string& dir, float sign) {
  LT_CHECK(!weights_, "{}: cannot merge a LoRA adapter into a sequence that reads another model's weights; merge "
           "it into the model that holds them", dir);
  LT_CHECK(!quant_, "{}: cannot merge a LoRA adapter into quantized weights; load the model unquantized to merge "
           "(or train with the quantized base and keep the adapter separate)", dir);
  LT_CHECK(f32_weights(), "{}: cannot merge a LoRA adapter into 16-bit weights; load the model with f32 weights "
           "to merge", dir);
  LoadedAdapter ad = load_peft_adapter(dir);
  split_fused_adapter(ad, cfg_, dir);  // Phi-3: qkv_proj / gate_up_proj as the split projections
  check_adapter_matches_model(ad, cfg_, dir);  // every tensor used, every shape this model's (io/peft_adapter.h)
  const float s = sign * ad.config.scaling();
  const int64_t R = ad.config.r;
  int merged = 0;
  for (int l = 0; l < cfg_.n_layers; ++l) {
    auto& L = layers_[l];
    for (Proj p : kProjs) {
      const size_t m = size_t(p);
      const std::string mod = proj_module(p);
      const auto [in, out] = cfg_.linear_shape(p);
      if (ad.tensors.find(peft_lora_key(l, mod, true))) {
        const TensorInfo& A = ad.tensors.get(peft_lora_key(l, mod, true), {R, in});
        const TensorInfo& B = ad.tensors.get(peft_lora_key(l, mod, false), {out, R});
        std::vector<float> fa(size_t(A.numel())), fb(size_t(B.numel()));
        convert_to_f32(fa.data(), A.data, A.dtype, fa.size());
        convert_to_f32(fb.data(), B.data, B.dtype, fb.size());
        // W += s·B·A through the op table's product: delta (out, in) = B (out, R) · (Aᵀ (in, R))ᵀ
        std::vector<float> at(fa.size()), delta(size_t(out) * size_t(in));
        for (int64_t r = 0; r < R; ++r)
          for (int64_t i = 0; i < in; ++i) at[size_t(i * R + r)] = fa[size_t(r * in + i)];
        ops_.matmul_forward(delta.data(), fb.data(), at.data(), nullptr, int(out), int(R), int(in));
        for (size_t i = 0; i < delta.size(); ++i) L.w[m][i] += s * delta[i];
        if (ad.config.use_dora) apply_dora_magnitude(ad, dir, l, mod, L.w[m], out, in, sign);
        ++merged;
      }
      if (ad.tensors.find(peft_bias_key(l, mod))) {
        LT_CHECK(L.bias[m], "{}: adapter has a bias for {} of layer {}, which this model does not have", dir, mod, l);
        LT_CHECK(sign > 0, "{}: cannot unmerge an adapter that carries trained biases", dir);
        const TensorInfo& bt = ad.tensors.get(peft_bias_key(l, mod), {out});
        convert_to_f32(L.bias[m], bt.data, bt.dtype, size_t(bt.numel()));
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
  // dynamic / longrope: this call's frequencies from its largest position, as transformers'
  // dynamic_rope_update does per forward call. Keys already in the cache keep the rotation they
  // were written with (transformers' cache too: only the new tokens are rotated with the new ones).
  if (rope_->update(pos0 + T - 1)) std::copy(rope_->inv_freq().begin(), rope_->inv_freq().end(), inv_freq_);
  // a rolling cache must still hold the window of the first query (a sequence cut back too far)
  if (pos0 == 0) ring_from_ = 0;
  const int window_start = std::max(0, pos0 - cfg_.sliding_window + 1);
  LT_CHECK(ring_ == 0 || window_start >= ring_from_, "position {}: its sliding window starts at position {}, which "
           "the rolling KV cache ({} rows) no longer holds; start the sequence over or cut it back less", pos0,
           window_start, ring_);
  int n = 0;
  for (int t0 = 0; t0 < T; t0 += n) {
    n = std::min(opts_.prefill_block, T - t0);
    const int p = pos0 + t0;
    if (ring_) {  // a block's rows never wrap around the rolling cache
      n = std::min(n, ring_ - p % ring_);
      ring_from_ = std::max(ring_from_, p + n - ring_);  // the positions this block overwrites
    }
    forward_block(tokens + t0, n, p);
  }
  // final norm + lm_head on the last token of the last block (its row is in x_)
  const int C = cfg_.dim;
  int last = n - 1;
  if (opts_.llama_cpp_numerics) return head_llamacpp(x_ + size_t(last) * C);
  ops_.rmsnorm_forward(xn_, nullptr, x_ + size_t(last) * C, final_norm_, 1, C, cfg_.norm_eps);
  run_linear(logits_, xn_, head_, nullptr, 1);
  if (cfg_.final_softcap > 0) ops_.softcap_forward(logits_, size_t(cfg_.vocab_size), cfg_.final_softcap);
}

WeightView LlamaModel::view(const LayerWeights& L, Proj p) const {
  const size_t m = size_t(p);
  const auto [in, out_features] = cfg_.linear_shape(p);
  if (quant_) return weight_view(L.q[m], opts_.int8_threshold);
  if (!L.w16[m]) return f32_weight(L.w[m], int(out_features), int(in));
  WeightView w = half_weight(half_kind(opts_.linear16), L.w16[m], int(out_features), int(in));
  w.bf16_values = L.w16_bf16[m];
  return w;
}

void LlamaModel::linear(float* out, const float* x, const LayerWeights& L, Proj p, int T) {
  run_linear(out, x, view(L, p), L.bias[size_t(p)], T);
}

// The bytes of one row of a weight whose rows a stacked view may join (16-bit, q8_0, q4_0), else 0.
static size_t stackable_row_bytes(const WeightView& w) {
  if (w.half()) return size_t(w.cols) * 2;
  if (ggml_block_kind(w.kind)) return size_t(w.cols / 32) * ggml_block_bytes(w.kind);
  return 0;
}

// Projections first.. first + n - 1 of L as one (Σ rows, cols) weight, where they lie one after
// another in memory (the plan allocates them so: whole 64-byte multiples in one arena), have the
// same kind and no bias; rows 0 where they do not.
WeightView LlamaModel::stacked(const LayerWeights& L, Proj first, int n) const {
  WeightView s = view(L, first);
  for (int i = 1; i < n; ++i) {
    const WeightView w = view(L, Proj(int(first) + i));
    const size_t row = stackable_row_bytes(s);
    const bool next = static_cast<const char*>(s.data) + size_t(s.rows) * row == w.data;
    if (!row || w.kind != s.kind || w.cols != s.cols || w.bf16_values != s.bf16_values || !next) return {};
    s.rows += w.rows;
  }
  for (int i = 0; i < n; ++i)
    if (L.bias[size_t(first) + size_t(i)]) return {};
  return s;
}

int LlamaModel::stacked_decode_layers() const {
  int n = 0;
  for (const LayerWeights& L : layers_)
    n += decode_stacking_ && stacked(L, Proj::Q, 3).rows == cfg_.q_dim() + 2 * cfg_.kv_dim() &&
         stacked(L, Proj::Gate, 2).rows == 2 * cfg_.hidden_dim;
  return n;
}

// One token's q, k and v in one product over their stacked rows (q_, k, v written): one pass of
// the team over all the rows, one fork and join instead of three. att_ holds the stacked output
// until the attention writes there. False (nothing written) where the rows are not stacked.
bool LlamaModel::decode_qkv(const LayerWeights& L, float* k, float* v) {
  const int QD = cfg_.q_dim(), KVD = cfg_.kv_dim();
  if (!decode_stacking_) return false;
  const WeightView w = stacked(L, Proj::Q, 3);
  if (w.rows != QD + 2 * KVD) return false;
  run_linear(att_, xn_, w, nullptr, 1);
  std::memcpy(q_, att_, size_t(QD) * sizeof(float));
  std::memcpy(k, att_ + QD, size_t(KVD) * sizeof(float));
  std::memcpy(v, att_ + QD + KVD, size_t(KVD) * sizeof(float));
  return true;
}

// One token's gate and up in one product over their stacked rows: gate_ (F) then up_ = gate_ + F.
bool LlamaModel::decode_gate_up(const LayerWeights& L) {
  if (!decode_stacking_) return false;
  const WeightView w = stacked(L, Proj::Gate, 2);
  if (w.rows != 2 * cfg_.hidden_dim) return false;
  run_linear(gate_, xn_, w, nullptr, 1);
  return true;
}

void LlamaModel::run_linear(float* y, const float* x, const WeightView& w, const float* bias, int T) {
  LinearWeights lw;
  lw.w = w;
  lw.bias = bias;
  LinearScratch s;
  s.tile = quant_ws_;
  s.tile_bytes = quant_ws_bytes_;
  LinearInput in{x, nullptr, T};
  if (w.half()) {  // the 16-bit contract: x holds values of the type (x16 their bits)
    ops_.round_half(half_dtype(w.kind), x16_, xr_, x, size_t(T) * size_t(w.cols));
    in = {xr_, x16_, T};
  }
  ops_.linear_forward(y, nullptr, in, lw, s);
}

void LlamaModel::forward_block(const int* tokens, int T, int pos0) {
  if (opts_.llama_cpp_numerics) return forward_block_llamacpp(tokens, T, pos0);
  const int C = cfg_.dim, QD = cfg_.q_dim(), KVD = cfg_.kv_dim(), F = cfg_.hidden_dim;
  const int NH = cfg_.n_heads, NKV = cfg_.n_kv_heads, HS = cfg_.head_dim;
  const bool interleaved = cfg_.rope_layout == RopeLayout::Interleaved;
  for (int t = 0; t < T; ++t) pos_[t] = pos0 + t;
  ops_.embedding_forward(x_, tokens, embed_, T, C);
  scale_embeddings(x_, size_t(T) * C, cfg_);
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const LayerWeights& L = layers_[size_t(l)];
    const float* inv_freq = cfg_.local_rope(l) ? inv_freq_local_ : inv_freq_;
    const size_t row = size_t(L.ring ? pos0 % L.ring : pos0);  // (T, KVD) rows of the cache
    const bool kv16 = L.k_cache16 != nullptr;  // keys / values made in f32, then rounded into the cache
    float* k = kv16 ? k_ : L.k_cache + row * KVD;
    float* v = kv16 ? v_ : L.v_cache + row * KVD;
    ops_.rmsnorm_forward(xn_, nullptr, x_, L.attn_norm, T, C, cfg_.norm_eps);
    if (T != 1 || !decode_qkv(L, k, v)) {
      linear(q_, xn_, L, Proj::Q, T);
      linear(k, xn_, L, Proj::K, T);
      linear(v, xn_, L, Proj::V, T);
    }
    if (L.q_norm) {  // Qwen3: each head's q and k RMS-normalized over HS, in place
      ops_.rmsnorm_forward(q_, nullptr, q_, L.q_norm, T * NH, HS, cfg_.norm_eps);
      ops_.rmsnorm_forward(k, nullptr, k, L.k_norm, T * NKV, HS, cfg_.norm_eps);
    }
    ops_.rope_forward(q_, pos_, inv_freq, T, NH, HS, interleaved);
    ops_.rope_forward(k, pos_, inv_freq, T, NKV, HS, interleaved);
    scale_queries(q_, size_t(T) * QD, cfg_, l);  // yarn / longrope attention factor, query_pre_attn_scalar
    if (kv16) {
      ops_.round_half(DType::BF16, L.k_cache16 + row * KVD, nullptr, k, size_t(T) * KVD);
      ops_.round_half(DType::BF16, L.v_cache16 + row * KVD, nullptr, v, size_t(T) * KVD);
      ops_.attention_forward_kv16(att_, q_, L.k_cache16, L.v_cache16, T, pos0, NH, NKV, HS, L.window, L.ring);
    } else {
      attention(ops_, cfg_, att_, q_, L.k_cache, L.v_cache, T, pos0, L.window, L.ring);
    }
    linear(xn_, att_, L, Proj::O, T);
    if (L.post_attn_norm) ops_.rmsnorm_forward(xn_, nullptr, xn_, L.post_attn_norm, T, C, cfg_.norm_eps);
    ops_.add_inplace(x_, xn_, size_t(T) * C);
    ops_.rmsnorm_forward(xn_, nullptr, x_, L.ffn_norm, T, C, cfg_.norm_eps);
    const bool stacked_gate_up = T == 1 && decode_gate_up(L);
    if (!stacked_gate_up) {
      linear(gate_, xn_, L, Proj::Gate, T);
      linear(up_, xn_, L, Proj::Up, T);
    }
    mlp_activation(ops_, cfg_, gate_, gate_, stacked_gate_up ? gate_ + F : up_, T, F);
    linear(xn_, gate_, L, Proj::Down, T);
    if (L.post_ffn_norm) ops_.rmsnorm_forward(xn_, nullptr, xn_, L.post_ffn_norm, T, C, cfg_.norm_eps);
    ops_.add_inplace(x_, xn_, size_t(T) * C);
  }
}

}  // namespace lt
