// Training forward/backward (DESIGN.md §2-5). Per layer, forward:
//   xn1 = rmsnorm(res[l]); q,k,v = lin(xn1); rope(q,k); att = attention(q,k,v | doc_start)
//   x_mid = res[l] + lin_o(att); xn2 = rmsnorm(x_mid); h = silu(lin_gate(xn2)) * lin_up(xn2)
//   res[l+1] = x_mid + lin_down(h)
// Backward walks it in reverse with d_res holding the gradient of the residual stream. With
// checkpointing, only res[l] is kept for a recomputed block; its forward is replayed into one
// shared activation set just before its backward. Linear layers: y = x·Wᵀ + b + s·(xd·Aᵀ)·Bᵀ,
// xd = dropout(x) with masks regenerated from (seed, step, layer, module) instead of stored.
// Every linear runs through the op table's linear op (kernels/linear.h; Ops::linear_forward,
// TrainOps::linear_backward_input / _weight) with a view of its weight: f32, 16-bit, or quantized.
// QLoRA: with a quantized base (TrainModelOptions::quantization, or a folder stored quantized) each
// frozen W lives in its planned quantized storage, decoded tile by tile in one shared workspace.
// Mixed precision (precision: bf16 | fp16): the linears' weights live in 16 bits (frozen, or a
// working copy of the f32 master refreshed by zero_grads()) and so do the saved GEMM inputs xn1,
// att, xn2, h: each is computed in f32 into one shared (N, max_io) buffer, rounded there and
// stored in 16 bits; the backward widens it back into that buffer when it needs it. The other
// saved activations (residuals, q, k, v, lse, rstd, x_mid, gate, up, x·Aᵀ) stay f32.
#include "train/train_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <random>

#include "core/error.h"
#include "core/ledger.h"
#include "core/mapped_file.h"
#include "io/checkpoint_tensors.h"
#include "io/quant_model.h"
#include "kernels/cpu/convert.h"
#include "core/rope_freqs.h"
#include "train/run_limits.h"

namespace lt {

DType precision_dtype(const std::string& precision) {
  if (precision == "fp32") return DType::F32;
  if (precision == "bf16") return DType::BF16;
  if (precision == "fp16") return DType::F16;
  fail("precision: '{}' is not one of fp32, bf16, fp16", precision);
}

void parse_checkpointing(const std::string& s, TrainModelOptions& o) {
  if (s == "none" || s == "false" || s.empty()) {
    o.checkpointing = Checkpointing::None;
  } else if (s == "every" || s == "true" || s == "block") {
    o.checkpointing = Checkpointing::EveryK;
    o.checkpoint_every = 1;
  } else if (s.rfind("every:", 0) == 0) {
    o.checkpointing = Checkpointing::EveryK;
    try {
      o.checkpoint_every = std::stoi(s.substr(6));
    } catch (...) {
      fail("gradient_checkpointing: '{}' is not every:K with an integer K", s);
    }
    LT_CHECK(o.checkpoint_every >= 1, "gradient_checkpointing: K must be >= 1 in '{}'", s);
  } else if (s == "attention") {
    o.checkpointing = Checkpointing::Attention;
  } else if (s == "mlp") {
    o.checkpointing = Checkpointing::Mlp;
  } else {
    fail("gradient_checkpointing: '{}' is not one of none, every, every:K, attention, mlp", s);
  }
}

namespace {

struct Dims {
  int N, C, QD, KVD, F, V, R, L, NH, NKV, HS, max_io;
};

Dims dims_of(const ModelConfig& c, const TrainModelOptions& o) {
  Dims d;
  d.N = o.micro_batch * o.seq_len;
  d.C = c.dim; d.QD = c.q_dim(); d.KVD = c.kv_dim(); d.F = c.hidden_dim; d.V = c.vocab_size;
  d.R = o.method == "lora" ? o.lora.r : 0;
  d.L = c.n_layers; d.NH = c.n_heads; d.NKV = c.n_kv_heads; d.HS = c.head_dim;
  d.max_io = std::max({d.C, d.QD, d.F});
  return d;
}

// (in, out) of module m in llama_linear_modules() order
std::pair<int, int> module_shape(const Dims& d, int m) {
  switch (m) {
    case 0: return {d.C, d.QD};
    case 1: case 2: return {d.C, d.KVD};
    case 3: return {d.QD, d.C};
    case 4: case 5: return {d.C, d.F};
    default: return {d.F, d.C};
  }
}

bool targets_module(const LoraConfig& lc, const std::string& m) {
  for (const auto& t : lc.target_modules)
    if (t == m || t == "all-linear") return true;
  return false;
}

bool targets_layer(const LoraConfig& lc, int l) {
  return lc.layers_to_transform.empty() ||
         std::find(lc.layers_to_transform.begin(), lc.layers_to_transform.end(), l) != lc.layers_to_transform.end();
}

std::string hf_linear_name(int l, int m, const char* what) {
  const auto& mod = llama_linear_modules()[m];
  return fmt::format("model.layers.{}.{}.{}.{}", l, llama_module_parent(mod), mod, what);
}

std::string peft_name(int l, int m, bool A) {
  const auto& mod = llama_linear_modules()[m];
  return fmt::format("base_model.model.model.layers.{}.{}.{}.lora_{}.weight", l, llama_module_parent(mod), mod,
                     A ? "A" : "B");
}

void validate_options(const ModelConfig& c, const TrainModelOptions& o) {
  LT_CHECK(o.method == "lora" || o.method == "full", "method: '{}' is not one of lora, full", o.method);
  LT_CHECK(o.micro_batch >= 1, "micro_batch_size must be >= 1 (got {})", o.micro_batch);
  LT_CHECK(o.seq_len >= 2, "sequence_len must be >= 2 (got {})", o.seq_len);
  check_run_fits_model(c, o);  // context, tokens per micro-batch, LoRA rank per module, plan size (train/run_limits.h)
  LT_CHECK(o.seq_len <= c.max_seq_len, "sequence_len {} is longer than the model's context ({})", o.seq_len,
           c.max_seq_len);
  LT_CHECK(o.loss_chunk >= 1, "loss chunk must be >= 1");
  precision_dtype(o.precision);
  LT_CHECK(c.sliding_window <= 0 || o.seq_len <= c.sliding_window,
           "sequence_len {} is longer than the model's sliding attention window ({}), which is not supported",
           o.seq_len, c.sliding_window);
  if (o.method == "lora") {
    const auto& lc = o.lora;
    LT_CHECK(lc.r > 0, "lora_r must be > 0 (got {})", lc.r);
    LT_CHECK(lc.dropout >= 0 && lc.dropout < 1, "lora_dropout must be in [0, 1) (got {})", lc.dropout);
    LT_CHECK(!lc.target_modules.empty(), "lora_target_modules is empty");
    for (const auto& t : lc.target_modules) {
      const auto& all = llama_linear_modules();
      LT_CHECK(t == "all-linear" || std::find(all.begin(), all.end(), t) != all.end(),
               "unknown LoRA target module '{}'; expected q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
               "down_proj or all-linear",
               t);
    }
    for (int l : lc.layers_to_transform)
      LT_CHECK(l >= 0 && l < c.n_layers, "layers_to_transform: layer {} does not exist (the model has {})", l,
               c.n_layers);
    LT_CHECK(lc.bias == "none" || lc.bias == "all" || lc.bias == "lora_only",
             "lora bias: '{}' is not one of none, all, lora_only", lc.bias);
    LT_CHECK(lc.init == "default" || lc.init == "gaussian", "lora init: '{}' is not one of default, gaussian",
             lc.init);
  }
  const bool stored = !c.quantization.empty(), requested = o.quantization != "none";
  if (!stored && !requested) return;
  LT_CHECK(o.method == "lora", "{}: full fine-tuning trains the base weights in fp32; quantized frozen weights are "
           "for LoRA (QLoRA). Use method: lora, or quantization: none{}",
           stored ? fmt::format("the base model is stored quantized ({})", c.quantization)
                  : fmt::format("quantization: {}", o.quantization),
           stored ? " with the unquantized model" : "");
  LT_CHECK(std::isfinite(o.int8_threshold) && o.int8_threshold >= 0, "int8_threshold must be >= 0 (got {}; 0 "
           "disables the LLM.int8 outlier columns)", o.int8_threshold);
  if (!requested) return;
  QuantSpec want{parse_quant_type(o.quantization), o.quant_blocksize, o.double_quant};
  if (want.type == QuantType::Int8) want.blocksize = 64;  // unused by int8
  try {
    check_quant_spec(want);
  } catch (const Error& e) {
    fail("quantization: {} (quant_blocksize {}, double_quant {}): {}", o.quantization, o.quant_blocksize,
         o.double_quant, e.what());
  }
  if (stored) {
    const QuantSpec have = model_quant_spec(c);
    LT_CHECK(have.type == want.type && (want.type == QuantType::Int8 || (have.blocksize == want.blocksize &&
                                                                         have.double_quant == want.double_quant)),
             "the base model is already quantized ({}, block size {}, double quant {}) and cannot be re-quantized "
             "to {} (block size {}, double quant {}); set quantization: none to train on it as stored, or start "
             "from the unquantized model", c.quantization, have.blocksize, have.double_quant, o.quantization,
             want.blocksize, want.double_quant);
  }
}

// The linear op's kind of a 16-bit storage type (BF16 / F16).
WeightKind half_kind(DType t) { return t == DType::BF16 ? WeightKind::BF16 : WeightKind::F16; }

}  // namespace

// One linear module: its weight (f32, 16-bit or quantized), bias and LoRA, and their gradients.
// The float pointers are registered with the TrainableStore (rebound unit by unit under ZeRO), so
// the op's view is built from them at each call.
struct Linear {
  int layer, m, in, out;
  const QuantTensor* q = nullptr;  // quantized frozen weight (then w is null)
  QuantTensor qt;
  float *w = nullptr, *dw = nullptr, *b = nullptr, *db = nullptr;
  uint16_t* w16 = nullptr;         // 16-bit weight (mixed precision): the frozen storage, or w's working copy
  float *A = nullptr, *B = nullptr, *dA = nullptr, *dB = nullptr;

  // The weight as the linear op reads it: quantized, else the 16-bit copy, else the f32 tensor.
  WeightView view(DType half, float int8_threshold) const {
    if (q) return weight_view(*q, int8_threshold);
    if (w16) return half_weight(half_kind(half), w16, out, in);
    return f32_weight(w, out, in);
  }
};

struct TrainModel::LayerActs {
  float *rstd1, *xn1, *q, *k, *v, *att, *lse, *x_mid, *rstd2, *xn2, *gate, *up, *h;
  float* xa[7];  // (N, R) per adapted module, else null
  // mixed precision: the saved GEMM inputs in 16 bits; xn1, att, xn2, h then point at the shared f32 buffer
  uint16_t *xn1_h = nullptr, *att_h = nullptr, *xn2_h = nullptr, *h_h = nullptr;
};

// The activation buffers of one layer: name, elements, and the part of the block that produces
// them (1 attention, 2 MLP, 3 x_mid: recomputed only when the whole block is).
struct ActBuffer {
  std::string name;
  size_t n;
  int part;
  bool gemm_input = false;  // xn1, att, xn2, h: 16-bit with mixed precision
  size_t bytes(bool half) const { return n * (half && gemm_input ? 2 : sizeof(float)); }
};

static std::vector<ActBuffer> act_buffers(const Dims& d, const std::vector<bool>& adapted) {
  const size_t N = d.N;
  std::vector<ActBuffer> v = {
      {"rstd1", N, 1}, {"xn1", N * d.C, 1, true}, {"q", N * d.QD, 1}, {"k", N * d.KVD, 1}, {"v", N * d.KVD, 1},
      {"att", N * d.QD, 1, true}, {"lse", size_t(d.NH) * N, 1}, {"x_mid", N * d.C, 3}, {"rstd2", N, 2},
      {"xn2", N * d.C, 2, true}, {"gate", N * d.F, 2}, {"up", N * d.F, 2}, {"h", N * d.F, 2, true}};
  for (int m = 0; m < 7; ++m)
    if (adapted[m]) v.push_back({"xa." + llama_linear_modules()[m], N * d.R, m < 4 ? 1 : 2});
  return v;
}

// Per layer, the parts of the block replayed before its backward (bit 1 attention, bit 2 MLP).
static std::vector<int> recompute_layers(const ModelConfig& c, const TrainModelOptions& o) {
  std::vector<int> r(c.n_layers, 0);
  for (int l = 0; l < c.n_layers; ++l) {
    if (o.checkpointing == Checkpointing::EveryK) r[l] = l % o.checkpoint_every == 0 ? 3 : 0;
    if (o.checkpointing == Checkpointing::Attention) r[l] = 1;
    if (o.checkpointing == Checkpointing::Mlp) r[l] = 2;
  }
  return r;
}

static std::vector<bool> adapted_modules(const ModelConfig& c, const TrainModelOptions& o, int l) {
  std::vector<bool> a(7);
  for (int m = 0; m < 7; ++m)
    a[m] = o.method == "lora" && targets_module(o.lora, llama_linear_modules()[m]) && (l < 0 || targets_layer(o.lora, l));
  return a;
}

// A buffer is shared (recompute scratch) when every part producing it is replayed.
static bool shared_buffer(const ActBuffer& b, int replay) { return replay && (b.part & replay) == b.part; }

bool quantized_base(const ModelConfig& c, const TrainModelOptions& o, QuantSpec* spec) {
  QuantSpec s;
  if (!c.quantization.empty()) s = model_quant_spec(c);
  else if (o.quantization != "none") s = {parse_quant_type(o.quantization), o.quant_blocksize, o.double_quant};
  else return false;
  if (s.type == QuantType::Int8) s = {QuantType::Int8, 64, false};
  if (spec) *spec = s;
  return true;
}

static std::string quant_buffer_name(const std::string& weight, const QuantSpec& s) {
  return weight + "." + quant_type_name(s.type);
}

MemoryPlan plan_training(const ModelConfig& c, const TrainModelOptions& o) {
  validate_options(c, o);
  const Dims d = dims_of(c, o);
  QuantSpec qs;
  const bool quant = quantized_base(c, o, &qs);
  const size_t f = sizeof(float), N = d.N;
  const bool full = o.method == "full";
  const DType ht = precision_dtype(o.precision);
  const bool half = ht != DType::F32;
  MemoryPlan p;
  // a trainable tensor: the tensor, its gradient and two AdamW moments
  auto trainable = [&](const std::string& name, size_t n) {
    if (!o.store_params) p.add(name, Category::TrainableParams, n * f);
    if (!o.store_grads) p.add("grad." + name, Category::Grads, n * f);
    if (!o.optimizer_state) return;
    p.add("adam_m." + name, Category::OptimizerState, n * f);
    p.add("adam_v." + name, Category::OptimizerState, n * f);
  };
  auto weight = [&](const std::string& name, size_t n, bool train) {
    if (train) trainable(name, n);
    else p.add(name, Category::FrozenWeights, n * f);
  };
  weight("model.embed_tokens.weight", size_t(d.V) * d.C, full && !o.freeze_embeddings);
  for (int l = 0; l < d.L; ++l) {
    weight(fmt::format("model.layers.{}.input_layernorm.weight", l), d.C, full);
    weight(fmt::format("model.layers.{}.post_attention_layernorm.weight", l), d.C, full);
    for (int m = 0; m < 7; ++m) {
      auto [in, out] = module_shape(d, m);
      const std::string wn = hf_linear_name(l, m, "weight");
      if (quant) p.add(quant_buffer_name(wn, qs), Category::FrozenWeights, quant_storage_bytes(qs, out, in));
      else if (half && !full) p.add(wn + "." + o.precision, Category::FrozenWeights, size_t(in) * out * 2);
      else weight(wn, size_t(in) * out, full);
      // full fine-tuning in 16 bits: the working copy the GEMMs read, refreshed after each step
      if (half && full) p.add(wn + "." + o.precision, Category::Workspace, size_t(in) * out * 2);
      const auto& mod = llama_linear_modules()[m];
      bool adapted = !full && targets_module(o.lora, mod) && targets_layer(o.lora, l);
      if (c.has_bias(m)) {
        bool train_bias = full || o.lora.bias == "all" || (o.lora.bias == "lora_only" && adapted);
        weight(hf_linear_name(l, m, "bias"), out, train_bias);
      }
      if (adapted) {
        trainable(peft_name(l, m, true), size_t(d.R) * in);
        trainable(peft_name(l, m, false), size_t(out) * d.R);
      }
    }
  }
  weight("model.norm.weight", d.C, full);
  if (!c.tie_embeddings) weight("lm_head.weight", size_t(d.V) * d.C, full && !o.freeze_lm_head);
  p.add("rope.inv_freq", Category::Workspace, size_t(d.HS / 2) * f);
  if (quant) {
    // one tile workspace shared by every quantized linear; converting checkpoint tensors chunk by
    // chunk on load (not needed when the file holds them quantized)
    size_t ws = 0, load = 0;
    for (int m = 0; m < 7; ++m) {
      auto [in, out] = module_shape(d, m);
      ws = std::max(ws, linear_tile_bytes(weight_kind(qs.type), qs.blocksize, qs.double_quant, d.N, in, out));
      load = std::max(load, quantize_chunked_scratch_floats(qs, out, in) * f);
    }
    p.add("quant.workspace", Category::Workspace, ws, Lifetime::Layer);
    if (c.quantization.empty()) p.add("quant.load_scratch", Category::Workspace, load);
  }
  if (half) {
    p.add("half.x", Category::Workspace, N * d.max_io * f, Lifetime::Layer);
    if (!quant) p.add("half.dy", Category::Workspace, linear_dy_bytes(half_kind(ht), d.N, d.max_io), Lifetime::Layer);
    if (!quant && ht == DType::F16) {
      size_t tile = 0;
      for (int m = 0; m < 7; ++m) {
        auto [in, out] = module_shape(d, m);
        tile = std::max(tile, linear_tile_bytes(WeightKind::F16, 0, false, d.N, in, out));
      }
      p.add("half.w_tile", Category::Workspace, tile, Lifetime::Layer);
    }
  }

  // activations: L+1 residual streams, per-layer sets (or one shared recompute set)
  for (int l = 0; l <= d.L; ++l) p.add(fmt::format("act.res.{}", l), Category::Activations, N * d.C * f, Lifetime::Step);
  auto rec = recompute_layers(c, o);
  std::vector<std::string> shared_added;
  for (int l = 0; l < d.L; ++l) {
    for (const auto& b : act_buffers(d, adapted_modules(c, o, l))) {
      if (!shared_buffer(b, rec[l])) {
        p.add(fmt::format("act.{}.{}", l, b.name), Category::Activations, b.bytes(half), Lifetime::Step);
      } else if (std::find(shared_added.begin(), shared_added.end(), b.name) == shared_added.end()) {
        shared_added.push_back(b.name);  // sized for the largest user: every layer has the same shapes
        p.add("recompute." + b.name, Category::Recompute, b.bytes(half), Lifetime::Layer);
      }
    }
  }
  p.add("act.final.xn", Category::Activations, N * d.C * f, Lifetime::Step);
  p.add("act.final.rstd", Category::Activations, N * f, Lifetime::Step);
  p.add("loss.logits_chunk", Category::LossChunk, size_t(std::min(o.loss_chunk, d.N)) * d.V * f, Lifetime::Phase);
  p.add("loss.d_xn", Category::LossChunk, N * d.C * f, Lifetime::Phase);
  // backward scratch, reused layer by layer
  const auto W = Category::Workspace;
  p.add("bwd.d_res", W, N * d.C * f, Lifetime::Phase);
  p.add("bwd.d_xn", W, N * d.C * f, Lifetime::Layer);
  p.add("bwd.d_h", W, N * d.F * f, Lifetime::Layer);
  p.add("bwd.d_gate", W, N * d.F * f, Lifetime::Layer);
  p.add("bwd.d_up", W, N * d.F * f, Lifetime::Layer);
  p.add("bwd.d_q", W, N * d.QD * f, Lifetime::Layer);
  p.add("bwd.d_k", W, N * d.KVD * f, Lifetime::Layer);
  p.add("bwd.d_v", W, N * d.KVD * f, Lifetime::Layer);
  p.add("bwd.d_att", W, N * d.QD * f, Lifetime::Layer);
  if (d.R > 0) {
    p.add("lora.g", W, N * d.R * f, Lifetime::Layer);
    if (o.lora.dropout > 0) {
      p.add("lora.tmp", W, N * d.max_io * f, Lifetime::Layer);
      p.add("lora.xd", W, N * d.max_io * f, Lifetime::Layer);
    }
  }
  return p;
}

TrainModel::~TrainModel() = default;

TrainModel::TrainModel(const ModelConfig& config, const TensorSet& ts, const TrainModelOptions& opts, const Ops& ops,
                       TrainableStore* store)
    : cfg_(config), opts_(opts), ops_(ops), tops_(&ops == &ops_ref() ? train_ops_ref() : train_ops_cpu()),
      store_(store) {
  validate_config(cfg_, ts.source);
  check_checkpoint_tensors(cfg_, ts);
  LT_CHECK(!(opts_.store_params || opts_.store_grads) ||
               (store_ && store_->holds_params() == opts_.store_params && store_->holds_grads() == opts_.store_grads),
           "TrainModel: store_params / store_grads need a TrainableStore holding exactly those");
  LT_CHECK(!(opts_.store_params && opts_.method == "full" && opts_.precision != "fp32"),
           "sharded parameters (ZeRO stage 3) with full fine-tuning in {} are not supported yet: the 16-bit working "
           "copies are refreshed from whole f32 masters; use precision: fp32, or LoRA, or zero_stage 2",
           opts_.precision);
  plan_ = plan_training(cfg_, opts_);
  arenas_.allocate(plan_);
  const Dims d = dims_of(cfg_, opts_);
  N_ = d.N;
  const bool full = opts_.method == "full";
  // the trainable tensors' names, whether or not the model holds them
  std::vector<std::string> trainable_names;
  {
    TrainModelOptions all = opts_;
    all.store_params = all.store_grads = false;
    all.optimizer_state = false;
    for (const auto& b : plan_training(cfg_, all).buffers)
      if (b.cat == Category::TrainableParams) trainable_names.push_back(b.name);
  }
  auto is_trainable = [&](const std::string& n) {
    return std::find(trainable_names.begin(), trainable_names.end(), n) != trainable_names.end();
  };
  const bool sp = opts_.store_params, sg = opts_.store_grads;
  // a trainable tensor: its buffer (planned, or the store's load buffer) to fill, registered with
  // the pointers aimed at it; finish_trainable() once filled
  auto begin_trainable = [&](const std::string& name, std::vector<int64_t> shape, int layer, bool decay, float** pref,
                             float** gref) -> float* {
    size_t n = 1;
    for (auto s : shape) n *= size_t(s);
    float* dst = sp ? store_->load_buffer(params_.size(), n) : arenas_.get_as<float>(name);
    float* g = sg ? nullptr : arenas_.get_as<float>("grad." + name);
    TrainParam tp{name, shape, sp ? nullptr : dst, g,
                  opts_.optimizer_state ? arenas_.get_as<float>("adam_m." + name) : nullptr,
                  opts_.optimizer_state ? arenas_.get_as<float>("adam_v." + name) : nullptr, n, layer, decay,
                  trainable_unit(name, d.L)};
    params_.push_back(tp);
    pref_.push_back({pref});
    gref_.push_back({gref});
    *pref = dst;
    *gref = g;
    return dst;
  };
  auto finish_trainable = [&]() {
    if (!sp) return;
    store_->loaded(params_.size() - 1);
    *pref_.back()[0] = nullptr;
  };
  // copy a checkpoint tensor into its buffer (*pref points at it); a trainable one is registered
  // with *gref pointing at its gradient, a frozen one gets *gref = null
  auto load = [&](const std::string& name, std::vector<int64_t> shape, int layer, bool decay, float** pref,
                  float** gref) {
    const TensorInfo& t = ts.get(name, shape);
    float* dst;
    const bool train = is_trainable(name);
    if (train) dst = begin_trainable(name, shape, layer, decay, pref, gref);
    else dst = *pref = arenas_.get_as<float>(name);
    if (!train) *gref = nullptr;
    convert_to_f32(dst, t.data, t.dtype, size_t(t.numel()));
    release_mapped_pages(t.data, t.nbytes);
    if (train) finish_trainable();
  };
  const int64_t C = d.C, V = d.V;
  QuantSpec qs;
  const bool quant = quantized_base(cfg_, opts_, &qs), stored = !cfg_.quantization.empty();
  float* load_scratch = nullptr;
  size_t load_scratch_floats = 0;
  if (quant) {
    lin_scratch_.tile = arenas_.get("quant.workspace");
    for (const auto& b : plan_.buffers)
      if (b.name == "quant.workspace") lin_scratch_.tile_bytes = b.bytes;
    if (!stored) {
      load_scratch = arenas_.get_as<float>("quant.load_scratch");
      for (const auto& b : plan_.buffers)
        if (b.name == "quant.load_scratch") load_scratch_floats = b.bytes / sizeof(float);
    }
  }
  // a frozen linear weight into its quantized storage: the file's parts copied, or the checkpoint
  // tensor converted and quantized a chunk at a time
  auto load_quant = [&](Linear& lin, const std::string& name) {
    const std::string qn = quant_buffer_name(name, qs);
    void* dst = arenas_.get(qn);
    const size_t bytes = quant_storage_bytes(qs, lin.out, lin.in);
    if (stored) {
      lin.qt = copy_quant_tensor(dst, bytes, load_quant_tensor(ts, name, qs, lin.out, lin.in));
      for (const char* part : {".codes", ".absmax", ".qabsmax", ".absmax2", ".qweight", ".row_absmax"})
        if (const TensorInfo* t = ts.find(name + part)) release_mapped_pages(t->data, t->nbytes);
    } else {
      const TensorInfo& t = ts.get(name, {lin.out, lin.in});
      LT_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16,
               "{}: tensor '{}' is {}; quantization on load needs F32, F16 or BF16 weights", t.file, name,
               dtype_name(t.dtype));
      const auto* src = static_cast<const uint8_t*>(t.data);
      const size_t es = dtype_size(t.dtype);
      lin.qt = quantize_weight_chunked(dst, bytes, lin.out, lin.in, qs, load_scratch, load_scratch_floats,
                                       [&](float* out, int64_t first, int64_t count) {
                                         convert_to_f32(out, src + size_t(first) * es, t.dtype, size_t(count));
                                       });
      release_mapped_pages(t.data, t.nbytes);
    }
    lin.q = &lin.qt;
  };
  if (load_scratch) std::memset(load_scratch, 0, load_scratch_floats * sizeof(float));
  half_ = precision_dtype(opts_.precision);
  const std::string half_suffix = "." + opts_.precision;
  // a frozen linear weight into its 16-bit storage, converted a chunk at a time
  auto load_half = [&](const std::string& name, int64_t out, int64_t in) -> uint16_t* {
    const TensorInfo& t = ts.get(name, {out, in});
    auto* dst = arenas_.get_as<uint16_t>(name + half_suffix);
    const size_t n = size_t(t.numel()), es = dtype_size(t.dtype);
    if (t.dtype == half_) {
      std::memcpy(dst, t.data, n * 2);
    } else {
      float chunk[4096];
      for (size_t i = 0; i < n; i += 4096) {
        const size_t k = std::min<size_t>(4096, n - i);
        convert_to_f32(chunk, static_cast<const uint8_t*>(t.data) + i * es, t.dtype, k);
        cpu::f32_to_half(half_, dst + i, nullptr, chunk, k);
      }
    }
    release_mapped_pages(t.data, t.nbytes);
    return dst;
  };
  load("model.embed_tokens.weight", {V, C}, -1, true, &embed_, &d_embed_);
  std::mt19937_64 rng(opts_.seed);
  // the vectors' elements are registered pointers: no reallocation after this
  attn_norm_.assign(size_t(d.L), nullptr);
  d_attn_norm_.assign(size_t(d.L), nullptr);
  ffn_norm_.assign(size_t(d.L), nullptr);
  d_ffn_norm_.assign(size_t(d.L), nullptr);
  for (int l = 0; l < d.L; ++l) {
    auto n1 = fmt::format("model.layers.{}.input_layernorm.weight", l);
    auto n2 = fmt::format("model.layers.{}.post_attention_layernorm.weight", l);
    load(n1, {C}, l, false, &attn_norm_[size_t(l)], &d_attn_norm_[size_t(l)]);
    load(n2, {C}, l, false, &ffn_norm_[size_t(l)], &d_ffn_norm_[size_t(l)]);
    for (int m = 0; m < 7; ++m) {
      auto [in, out] = module_shape(d, m);
      auto lin = std::make_unique<Linear>();
      lin->layer = l; lin->m = m; lin->in = in; lin->out = out;
      auto wn = hf_linear_name(l, m, "weight");
      if (quant) {
        load_quant(*lin, wn);
      } else if (half_ != DType::F32 && !full) {
        lin->w16 = load_half(wn, out, in);
      } else {
        load(wn, {out, in}, l, true, &lin->w, &lin->dw);
        if (half_ != DType::F32) lin->w16 = arenas_.get_as<uint16_t>(wn + half_suffix);  // filled by zero_grads()
      }
      if (cfg_.has_bias(m)) load(hf_linear_name(l, m, "bias"), {out}, l, false, &lin->b, &lin->db);
      auto an = peft_name(l, m, true), bn = peft_name(l, m, false);
      if (!full && is_trainable(an)) {
        // PEFT init: A kaiming-uniform(a=sqrt 5) = U(-1/sqrt(in), 1/sqrt(in)), or N(0, 1/r); B = 0
        float* A = begin_trainable(an, {d.R, in}, l, true, &lin->A, &lin->dA);
        if (opts_.lora.init == "gaussian") {
          std::normal_distribution<float> nd(0.0f, 1.0f / float(d.R));
          for (size_t i = 0; i < size_t(d.R) * in; ++i) A[i] = nd(rng);
        } else {
          float bound = 1.0f / std::sqrt(float(in));
          std::uniform_real_distribution<float> ud(-bound, bound);
          for (size_t i = 0; i < size_t(d.R) * in; ++i) A[i] = ud(rng);
        }
        finish_trainable();
        float* B = begin_trainable(bn, {out, d.R}, l, true, &lin->B, &lin->dB);
        std::memset(B, 0, size_t(out) * d.R * sizeof(float));
        finish_trainable();
      }
      linears_.push_back(std::move(lin));
    }
  }
  load("model.norm.weight", {C}, -1, false, &final_norm_, &d_final_norm_);
  if (cfg_.tie_embeddings) {
    lm_head_ = embed_;
    d_lm_head_ = d_embed_;
    if (!params_.empty() && params_[0].name == "model.embed_tokens.weight") {  // one tensor, two names
      pref_[0].push_back(&lm_head_);
      gref_[0].push_back(&d_lm_head_);
    }
  } else {
    load("lm_head.weight", {V, C}, -1, true, &lm_head_, &d_lm_head_);
  }
  // units: each one's tensors are contiguous in params_ (registered in execution order)
  unit_first_.assign(size_t(d.L) + 2, 0);
  unit_end_.assign(size_t(d.L) + 2, 0);
  for (size_t u = 0, i = 0; u < unit_first_.size(); ++u) {
    unit_first_[u] = i;
    while (i < params_.size() && params_[i].unit == int(u)) ++i;
    unit_end_[u] = i;
  }
  LT_CHECK(unit_end_.back() == params_.size(), "TrainModel: trainable tensors out of unit order");
  unit_seen_.reserve(4 * unit_first_.size());  // a pass acquires each unit at most twice (+ the head)
  inv_freq_ = arenas_.get_as<float>("rope.inv_freq");
  auto inv = rope_inv_freq(cfg_);
  std::copy(inv.begin(), inv.end(), inv_freq_);

  for (int l = 0; l <= d.L; ++l) res_.push_back(arenas_.get_as<float>(fmt::format("act.res.{}", l)));
  recompute_ = recompute_layers(cfg_, opts_);
  if (half_ != DType::F32) {
    half_x_ = arenas_.get_as<float>("half.x");
    if (!quant) lin_scratch_.dy = arenas_.get("half.dy");
    if (!quant && half_ == DType::F16) {
      lin_scratch_.tile = arenas_.get("half.w_tile");
      for (const auto& b : plan_.buffers)
        if (b.name == "half.w_tile") lin_scratch_.tile_bytes = b.bytes;
    }
  }
  for (int l = 0; l < d.L; ++l) {
    auto a = std::make_unique<LayerActs>();
    std::fill(std::begin(a->xa), std::end(a->xa), nullptr);
    for (const auto& b : act_buffers(d, adapted_modules(cfg_, opts_, l))) {
      void* buf = arenas_.get(shared_buffer(b, recompute_[l]) ? "recompute." + b.name
                                                              : fmt::format("act.{}.{}", l, b.name));
      float* ptr = static_cast<float*>(buf);
      const std::string& n = b.name;
      if (half_ != DType::F32 && b.gemm_input) {
        auto* h = static_cast<uint16_t*>(buf);
        if (n == "xn1") a->xn1_h = h; else if (n == "att") a->att_h = h; else if (n == "xn2") a->xn2_h = h;
        else a->h_h = h;
        ptr = half_x_;
      }
      if (n == "rstd1") a->rstd1 = ptr; else if (n == "xn1") a->xn1 = ptr; else if (n == "q") a->q = ptr;
      else if (n == "k") a->k = ptr; else if (n == "v") a->v = ptr; else if (n == "att") a->att = ptr;
      else if (n == "lse") a->lse = ptr; else if (n == "x_mid") a->x_mid = ptr; else if (n == "rstd2") a->rstd2 = ptr;
      else if (n == "xn2") a->xn2 = ptr; else if (n == "gate") a->gate = ptr; else if (n == "up") a->up = ptr;
      else if (n == "h") a->h = ptr;
      else
        for (int m = 0; m < 7; ++m)
          if (n == "xa." + llama_linear_modules()[m]) a->xa[m] = ptr;
    }
    acts_.push_back(std::move(a));
  }

  xnf_ = arenas_.get_as<float>("act.final.xn");
  rstdf_ = arenas_.get_as<float>("act.final.rstd");
  logits_chunk_ = arenas_.get_as<float>("loss.logits_chunk");
  d_xnf_ = arenas_.get_as<float>("loss.d_xn");
  d_res_ = arenas_.get_as<float>("bwd.d_res");
  d_xn_ = arenas_.get_as<float>("bwd.d_xn");
  d_h_ = arenas_.get_as<float>("bwd.d_h");
  d_gate_ = arenas_.get_as<float>("bwd.d_gate");
  d_up_ = arenas_.get_as<float>("bwd.d_up");
  d_q_ = arenas_.get_as<float>("bwd.d_q");
  d_k_ = arenas_.get_as<float>("bwd.d_k");
  d_v_ = arenas_.get_as<float>("bwd.d_v");
  d_att_ = arenas_.get_as<float>("bwd.d_att");
  lin_scratch_.lora_g = d.R > 0 ? arenas_.get_as<float>("lora.g") : nullptr;
  lin_scratch_.lora_tmp = d.R > 0 && opts_.lora.dropout > 0 ? arenas_.get_as<float>("lora.tmp") : nullptr;
  lin_scratch_.lora_xd = d.R > 0 && opts_.lora.dropout > 0 ? arenas_.get_as<float>("lora.xd") : nullptr;
  refresh_half_weights();
}

size_t TrainModel::trainable_count() const {
  size_t n = 0;
  for (const auto& p : params_) n += p.n;
  return n;
}

void TrainModel::lora_tensors(int layer, const std::string& module, float** A, float** B) const {
  const auto& mods = llama_linear_modules();
  int m = int(std::find(mods.begin(), mods.end(), module) - mods.begin());
  LT_CHECK(m < 7 && layer >= 0 && layer < cfg_.n_layers, "no linear module {} in layer {}", module, layer);
  const auto& lin = *linears_[size_t(layer) * 7 + m];
  *A = lin.A;
  *B = lin.B;
}

void TrainModel::load_lora(const TensorSet& adapter) {
  LT_CHECK(!opts_.store_params, "load_lora: the parameters are sharded (ZeRO stage 3); load the adapter through the "
           "sharded checkpoint instead");
  for (auto& lin : linears_) {
    if (!lin->A) continue;
    const int64_t R = opts_.lora.r;
    for (bool isA : {true, false}) {
      auto name = peft_name(lin->layer, lin->m, isA);
      std::vector<int64_t> shape = isA ? std::vector<int64_t>{R, lin->in} : std::vector<int64_t>{lin->out, R};
      const TensorInfo& t = adapter.get(name, shape);
      convert_to_f32(isA ? lin->A : lin->B, t.data, t.dtype, size_t(t.numel()));
    }
  }
  for (auto& p : params_) {  // trainable biases saved with the adapter
    if (p.name.find(".bias") == std::string::npos) continue;
    auto key = "base_model.model." + p.name;
    if (const TensorInfo* t = adapter.find(key)) {
      LT_CHECK(t->numel() == int64_t(p.n), "{}: tensor '{}' has {} elements, expected {}", t->file, key, t->numel(), p.n);
      convert_to_f32(p.p, t->data, t->dtype, p.n);
    }
  }
}

int trainable_unit(const std::string& name, int n_layers) {
  if (name.find("embed_tokens") != std::string::npos) return 0;
  const size_t at = name.find("layers.");
  if (at != std::string::npos) {
    size_t i = at + 7;
    int l = 0;
    bool digits = false;
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i, digits = true) l = l * 10 + (name[i] - '0');
    if (digits && i < name.size() && name[i] == '.' && l < n_layers) return l + 1;
  }
  return n_layers + 1;
}

void TrainModel::bind(int u, float* base, bool grads) {
  size_t off = 0;
  for (size_t i = unit_first_[size_t(u)]; i < unit_end_[size_t(u)]; ++i) {
    float* ptr = base ? base + off : nullptr;
    (grads ? params_[i].g : params_[i].p) = ptr;
    for (float** r : (grads ? gref_ : pref_)[i]) *r = ptr;
    off += params_[i].n;
  }
}

void TrainModel::remember_unit_order(bool backward) {
  if (!opts_.store_params || order_known_[backward]) return;
  unit_order_[backward] = unit_seen_;  // once, on the first pass of each kind
  order_known_[backward] = true;
}

void TrainModel::use_params(int u) {
  if (!opts_.store_params || unit_empty(u)) return;
  // the hint: what followed u the last time a pass of this kind got this far the same way
  const auto& order = unit_order_[pass_backward_];
  const size_t at = unit_seen_.size();
  int next = -1;
  if (order_known_[pass_backward_] && at < order.size() && order[at] == u && at + 1 < order.size()) next = order[at + 1];
  if (unit_seen_.size() < unit_seen_.capacity()) unit_seen_.push_back(u);
  bind(u, store_->acquire_params(u, next), false);
}
void TrainModel::drop_params(int u) {
  if (!opts_.store_params || unit_empty(u)) return;
  store_->release_params(u);
  bind(u, nullptr, false);
}
void TrainModel::use_grads(int u) {
  if (opts_.store_grads && !unit_empty(u)) bind(u, store_->acquire_grads(u), true);
}
void TrainModel::drop_grads(int u, bool last) {
  if (!store_ || unit_empty(u)) return;
  if (!opts_.store_grads) {
    if (last) store_->grads_ready(u);
    return;
  }
  store_->release_grads(u);
  bind(u, nullptr, true);
}

void TrainModel::zero_grads() {
  for (auto& p : params_)
    if (p.g) std::memset(p.g, 0, p.n * sizeof(float));
  refresh_half_weights();
}

void TrainModel::refresh_half_weights() {
  for (auto& lin : linears_)
    if (lin->w && lin->w16) cpu::f32_to_half(half_, lin->w16, nullptr, lin->w, size_t(lin->out) * lin->in);
}

namespace {
// One linear layer through the op tables (kernels/linear.h): its weights as the op's view, with
// the LoRA dropout mask of (seed, step, layer, module).
struct LinearRunner {
  const Ops& ops;
  const TrainOps& tops;
  int N, R;
  float s, p;
  uint64_t seed;
  float int8_threshold;
  DType half;                   // 16-bit storage type of Linear::w16
  const LinearScratch& scratch;

  uint64_t key(const Linear& L, uint64_t step) const {
    return lora_mix64(seed ^ lora_mix64(step * 131 + uint64_t(L.layer) * 7 + uint64_t(L.m)));
  }
  LinearWeights weights(const Linear& L, uint64_t step) const {
    LinearWeights w;
    w.w = L.view(half, int8_threshold);
    w.bias = L.b;
    if (L.A) w.lora = {R, L.A, L.B, s, p, key(L, step)};
    return w;
  }
  // out (N, out) = x·Wᵀ + b + s·(xd·Aᵀ)·Bᵀ ; xa (N, R) saved. With a 16-bit weight x16 holds
  // x in 16 bits and x the same values in f32.
  void forward(float* out, const float* x, const uint16_t* x16, const Linear& L, float* xa, uint64_t step) const {
    ops.linear_forward(out, xa, {x, x16, N}, weights(L, step), scratch);
  }
  // dx (N, in) += dout·W + s·((dout·B)·A)∘mask ; dW, db, dA, dB accumulate when present
  void backward(float* dx, const float* dout, const float* x, const uint16_t* x16, const Linear& L, const float* xa,
                uint64_t step) const {
    const LinearWeights w = weights(L, step);
    if (dx) tops.linear_backward_input(dx, dout, N, w, scratch);
    tops.linear_backward_weight({L.dw, L.db, L.dA, L.dB}, dout, {x, x16, N}, xa, w, scratch);
  }
};
}  // namespace

void TrainModel::layer_forward(int l, LayerActs& a, uint64_t step, int parts) {
  const Dims d = dims_of(cfg_, opts_);
  const int N = N_;
  const TrainOps& t = tops_;
  const bool il = cfg_.rope_layout == RopeLayout::Interleaved;
  const LinearRunner lr{ops_, tops_, N, d.R, opts_.lora.scaling(), opts_.lora.dropout, opts_.seed,
                        opts_.int8_threshold, half_, lin_scratch_};
  auto lin = [&](int m) -> const Linear& { return *linears_[size_t(l) * 7 + m]; };
  // mixed precision: a GEMM input computed in f32 is rounded in place and stored in 16 bits
  auto store = [&](uint16_t* x16, float* x32, int cols) {
    if (x16) cpu::f32_to_half(half_, x16, x32, x32, size_t(N) * cols);
  };
  const float* x = res_[l];
  if (parts & 1) {
  ops_.rmsnorm_forward(a.xn1, a.rstd1, x, attn_norm_[l], N, d.C, cfg_.norm_eps);
  store(a.xn1_h, a.xn1, d.C);
  lr.forward(a.q, a.xn1, a.xn1_h, lin(0), a.xa[0], step);
  lr.forward(a.k, a.xn1, a.xn1_h, lin(1), a.xa[1], step);
  lr.forward(a.v, a.xn1, a.xn1_h, lin(2), a.xa[2], step);
  ops_.rope_forward(a.q, positions_, inv_freq_, N, d.NH, d.HS, il);
  ops_.rope_forward(a.k, positions_, inv_freq_, N, d.NKV, d.HS, il);
  t.attention_train_forward(a.att, a.lse, a.q, a.k, a.v, doc_start_, N, d.NH, d.NKV, d.HS);
  store(a.att_h, a.att, d.QD);
  lr.forward(a.x_mid, a.att, a.att_h, lin(3), a.xa[3], step);
  ops_.add_inplace(a.x_mid, x, size_t(N) * d.C);
  }
  if (!(parts & 2)) return;
  ops_.rmsnorm_forward(a.xn2, a.rstd2, a.x_mid, ffn_norm_[l], N, d.C, cfg_.norm_eps);
  store(a.xn2_h, a.xn2, d.C);
  lr.forward(a.gate, a.xn2, a.xn2_h, lin(4), a.xa[4], step);
  lr.forward(a.up, a.xn2, a.xn2_h, lin(5), a.xa[5], step);
  ops_.swiglu_forward(a.h, a.gate, a.up, N, d.F);
  store(a.h_h, a.h, d.F);
  float* y = res_[l + 1];
  lr.forward(y, a.h, a.h_h, lin(6), a.xa[6], step);
  ops_.add_inplace(y, a.x_mid, size_t(N) * d.C);
}

void TrainModel::layer_backward(int l, LayerActs& a, uint64_t step) {
  const Dims d = dims_of(cfg_, opts_);
  const int N = N_;
  const TrainOps& t = tops_;
  const bool il = cfg_.rope_layout == RopeLayout::Interleaved;
  const LinearRunner lr{ops_, tops_, N, d.R, opts_.lora.scaling(), opts_.lora.dropout, opts_.seed,
                        opts_.int8_threshold, half_, lin_scratch_};
  auto lin = [&](int m) -> const Linear& { return *linears_[size_t(l) * 7 + m]; };
  const size_t NC = size_t(N) * d.C;
  // mixed precision: a saved 16-bit GEMM input widened back into the shared f32 buffer
  auto load = [&](const uint16_t* x16, float* x32, int cols) {
    if (x16) cpu::half_to_f32(half_, x32, x16, size_t(N) * cols);
  };
  // MLP: d_res is the gradient of res[l+1]
  std::memset(d_h_, 0, size_t(N) * d.F * sizeof(float));
  load(a.h_h, a.h, d.F);
  lr.backward(d_h_, d_res_, a.h, a.h_h, lin(6), a.xa[6], step);
  t.swiglu_backward(d_gate_, d_up_, d_h_, a.gate, a.up, N, d.F);
  std::memset(d_xn_, 0, NC * sizeof(float));
  load(a.xn2_h, a.xn2, d.C);
  lr.backward(d_xn_, d_gate_, a.xn2, a.xn2_h, lin(4), a.xa[4], step);
  lr.backward(d_xn_, d_up_, a.xn2, a.xn2_h, lin(5), a.xa[5], step);
  t.rmsnorm_backward(d_res_, d_ffn_norm_[l], d_xn_, a.x_mid, ffn_norm_[l], a.rstd2, N, d.C);  // now d x_mid
  // attention
  std::memset(d_att_, 0, size_t(N) * d.QD * sizeof(float));
  load(a.att_h, a.att, d.QD);
  lr.backward(d_att_, d_res_, a.att, a.att_h, lin(3), a.xa[3], step);
  std::memset(d_q_, 0, size_t(N) * d.QD * sizeof(float));
  std::memset(d_k_, 0, size_t(N) * d.KVD * sizeof(float));
  std::memset(d_v_, 0, size_t(N) * d.KVD * sizeof(float));
  t.attention_backward(d_q_, d_k_, d_v_, d_att_, a.q, a.k, a.v, a.att, a.lse, doc_start_, N, d.NH, d.NKV, d.HS);
  t.rope_backward(d_q_, positions_, inv_freq_, N, d.NH, d.HS, il);
  t.rope_backward(d_k_, positions_, inv_freq_, N, d.NKV, d.HS, il);
  std::memset(d_xn_, 0, NC * sizeof(float));
  load(a.xn1_h, a.xn1, d.C);
  lr.backward(d_xn_, d_q_, a.xn1, a.xn1_h, lin(0), a.xa[0], step);
  lr.backward(d_xn_, d_k_, a.xn1, a.xn1_h, lin(1), a.xa[1], step);
  lr.backward(d_xn_, d_v_, a.xn1, a.xn1_h, lin(2), a.xa[2], step);
  t.rmsnorm_backward(d_res_, d_attn_norm_[l], d_xn_, res_[l], attn_norm_[l], a.rstd1, N, d.C);  // now d res[l]
}

float TrainModel::run(const int* tokens, const int* labels, const int* positions, const int* doc_start,
                      float loss_scale, bool backward, uint64_t step) {
  const Dims d = dims_of(cfg_, opts_);
  const int N = N_;
  for (int i = 0; i < N; ++i) {
    LT_CHECK(tokens[i] >= 0 && tokens[i] < d.V, "token id {} at batch position {} is outside the vocabulary ({})",
             tokens[i], i, d.V);
    LT_CHECK(doc_start[i] >= 0 && doc_start[i] <= i, "doc_start[{}] = {} is not in [0, {}]", i, doc_start[i], i);
    LT_CHECK(positions[i] >= 0 && positions[i] < cfg_.max_seq_len, "position {} at batch position {} is past the "
             "model's context ({})", positions[i], i, cfg_.max_seq_len);
  }
  tokens_ = tokens;
  positions_ = positions;
  doc_start_ = doc_start;
  const TrainOps& t = tops_;
  // units (TrainableStore): 0 embedding, l+1 layer l, L+1 final norm and lm_head (tied: unit 0)
  const int head = d.L + 1;
  const bool tied = cfg_.tie_embeddings;
  pass_backward_ = backward;
  unit_seen_.clear();
  use_params(0);
  ops_.embedding_forward(res_[0], tokens, embed_, N, d.C);
  drop_params(0);
  for (int l = 0; l < d.L; ++l) {
    use_params(l + 1);
    layer_forward(l, *acts_[l], step);
    drop_params(l + 1);
    if (ledger_) ledger_->mark("forward", l);
  }
  // the final norm and the loss; tied, the head (final norm) and the embedding (lm_head) take
  // turns, so one unit is acquired at a time: the lm_head part of the embedding's gradient leaves
  // after the loss and its embedding part at the end
  const int lm_unit = tied ? 0 : head;
  use_params(head);
  if (backward && !tied) use_grads(head);
  ops_.rmsnorm_forward(xnf_, rstdf_, res_[d.L], final_norm_, N, d.C, cfg_.norm_eps);
  if (tied) {
    drop_params(head);
    use_params(0);
    if (backward) use_grads(0);
  }
  float loss = t.lm_head_loss(backward ? d_xnf_ : nullptr, backward ? d_lm_head_ : nullptr, logits_chunk_, xnf_,
                              lm_head_, labels, N, d.C, d.V, std::min(opts_.loss_chunk, N), loss_scale);
  if (ledger_) ledger_->mark("loss");
  if (!backward) {
    drop_params(lm_unit);
    remember_unit_order(false);
    return loss;
  }
  if (tied) {
    drop_params(0);
    drop_grads(0, /*last=*/false);  // the embedding's own gradient comes at the end
    use_params(head);
    use_grads(head);
  }
  std::memset(d_res_, 0, size_t(N) * d.C * sizeof(float));
  t.rmsnorm_backward(d_res_, d_final_norm_, d_xnf_, res_[d.L], final_norm_, rstdf_, N, d.C);
  drop_params(head);
  drop_grads(head);
  for (int l = d.L - 1; l >= 0; --l) {
    use_params(l + 1);
    use_grads(l + 1);
    if (recompute_[l]) layer_forward(l, *acts_[l], step, recompute_[l]);
    layer_backward(l, *acts_[l], step);
    drop_params(l + 1);
    drop_grads(l + 1);
    if (ledger_) ledger_->mark("backward", l);
  }
  use_grads(0);
  if (d_embed_) t.embedding_backward(d_embed_, d_res_, tokens, N, d.C);
  drop_grads(0);
  remember_unit_order(true);
  return loss;
}

float TrainModel::forward_backward(const int* tokens, const int* labels, const int* positions, const int* doc_start,
                                   float loss_scale, uint64_t dropout_step, int64_t step_label_tokens) {
  // the loss kernel divides by this micro-batch's label count: rescale by own / step (in double,
  // so with own == step the scale is exactly loss_scale)
  if (step_label_tokens > 0)
    if (const int own = count_loss_labels(labels, N_, cfg_.vocab_size); own > 0) {
      LT_CHECK(own <= step_label_tokens, "a micro-batch has {} label tokens but its step's count is {}", own,
               step_label_tokens);
      loss_scale = float(double(loss_scale) * own / double(step_label_tokens));
    }
  return run(tokens, labels, positions, doc_start, loss_scale, true, dropout_step);
}

float TrainModel::forward_loss(const int* tokens, const int* labels, const int* positions, const int* doc_start) {
  // evaluation: LoRA dropout off
  float p = opts_.lora.dropout;
  opts_.lora.dropout = 0;
  float loss = run(tokens, labels, positions, doc_start, 1.0f, false, 0);
  opts_.lora.dropout = p;
  return loss;
}

}  // namespace lt
