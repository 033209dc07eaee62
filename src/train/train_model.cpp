// Training forward/backward (DESIGN.md §2-5). Per layer, forward:
//   xn1 = rmsnorm(res[l]); q,k,v = lin(xn1); [Qwen3: q,k = rmsnorm per head]; rope(q,k);
//   att = attention(q,k,v | doc_start)
//   x_mid = res[l] + lin_o(att); xn2 = rmsnorm(x_mid); h = silu(lin_gate(xn2)) * lin_up(xn2)
//   res[l+1] = x_mid + lin_down(h)
// Gemma 2 / 3: res[0] = embed * sqrt(C); every norm scales by (1 + w) (norm_weight); x_mid =
// res[l] + rmsnorm(lin_o(att)) and res[l+1] = x_mid + rmsnorm(lin_down(h)) (o_out / down_out
// saved); h = gelu_tanh(gate) * up; q scaled for query_pre_attn_scalar; soft-capped attention
// scores and loss logits (Gemma 2); Gemma 3's sliding layers rotate with their own RoPE base.
// Backward walks it in reverse with d_res holding the gradient of the residual stream. With
// checkpointing, only res[l] is kept for a recomputed block; its forward is replayed into one
// shared activation set just before its backward. Linear layers: y = x·Wᵀ + b + s·(xd·Aᵀ)·Bᵀ,
// xd = dropout(x) with masks regenerated from (seed, step, layer, module) instead of stored.
// Every linear runs through the op table's linear op (kernels/linear.h; Ops::linear_forward,
// TrainOps::linear_backward_input / _weight) with a view of its weight: f32, 16-bit, or quantized.
// QLoRA: with a quantized base (TrainModelOptions::quantization, or a folder stored quantized) each
// frozen W lives in its planned quantized storage, decoded tile by tile in one shared workspace.
// The MLP's h is not saved: every layer's backward first recomputes it from the saved gate and up
// into one shared buffer (recompute_layers). Mixed precision (precision: bf16 | fp16): the linears'
// weights live in 16 bits (frozen, or a working copy of the f32 master refreshed by zero_grads())
// and so do the saved GEMM inputs xn1, att, xn2 (and h): each is computed in f32 into one shared
// (N, max_io) buffer, rounded there and stored in 16 bits; the backward widens it back into that
// buffer when it needs it. The other
// saved activations (residuals, q, k, v, lse, rstd, x_mid, gate, up, x·Aᵀ) stay f32.
// LoRA in bf16 (bf16_head()): the frozen embedding / lm_head are bf16 tables too, the lookup widens
// a token's row, and the fused loss's products run in bf16 (TrainOps::lm_head_loss_bf16).
// Full fine-tuning in bf16 (bf16_head_copy()): the loss products read a bf16 working copy of the
// f32 lm_head, refreshed with the linears' copies; its gradient accumulates in f32.
#include "train/train_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <iterator>
#include <random>
#include <type_traits>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/ledger.h"
#include "core/mapped_file.h"
#include "io/checkpoint_tensors.h"
#include "kernels/cpu/gemm.h"
#include "io/quant_model.h"
#include "core/lora_init.h"
#include "quant/int4.h"
#include "train/base_cache.h"
#include "core/rope_freqs.h"
#include "train/run_limits.h"

namespace lt {

DType precision_dtype(Precision precision) {
  switch (precision) {
    case Precision::FP32: return DType::F32;
    case Precision::BF16: return DType::BF16;
    case Precision::FP16: return DType::F16;
  }
  return DType::F32;
}

bool bf16_attention(const TrainModelOptions& o) {
  if (o.precision != Precision::BF16) {
    LT_CHECK(o.attention_precision != AttentionPrecision::BF16, "attention_precision: bf16 needs precision: bf16 "
             "(got precision: {}); use attention_precision: auto or f32", precision_name(o.precision));
    return false;
  }
  if (o.attention_precision != AttentionPrecision::Auto) return o.attention_precision == AttentionPrecision::BF16;
  // auto: the bf16 kernels take 17-23% less CPU time than the f32 ones (bench/bench_attention_bf16.cpp)
  // and the whole bf16 LoRA step 1-2% less (SmolLM2-135M shape, 4 x 512, 1 thread), with half the
  // bytes for the saved q, k, v; but not where vdpbf16ps is the slow unit (the packed GEMMs chose f32
  // FMAs, gemm.h): on a 2-vCPU Xeon without AMX the f32 kernels made that step 3.5-5% faster
  return cpu_isa() == Isa::Avx512 && cpu_features().avx512_bf16 && cpu::packed_bf16_mode() != cpu::PackedMode::Fma;
}

bool bf16_head(const ModelConfig& c, const TrainModelOptions& o) {
  return o.precision == Precision::BF16 && o.method == Method::Lora && c.final_softcap <= 0;
}

bool bf16_head_copy(const ModelConfig& c, const TrainModelOptions& o) {
  return o.precision == Precision::BF16 && o.method == Method::Full && c.final_softcap <= 0;
}

static const char* head_table_name(const ModelConfig& c) {
  return c.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
}

// LoRA products in bf16 (LoraView::bf16, kernels/linear.h): bf16 LoRA on a bf16 base or a quantized
// one with bf16 products, no dropout, no DoRA (what PyTorch autocast runs for PEFT; dropout keeps
// them in f32).
bool bf16_lora(const ModelConfig&, const TrainModelOptions& o) {
  return o.precision == Precision::BF16 && o.method == Method::Lora && o.lora.r > 0 && !o.lora.use_dora &&
         o.lora.dropout <= 0;
}

// A quantized base's products in bf16 (WeightView::bf16_products, kernels/linear.h): QLoRA in bf16,
// as bitsandbytes runs a 4-bit / 8-bit base with compute_dtype=bfloat16 (not with DoRA).
bool quant_bf16_products(const ModelConfig& c, const TrainModelOptions& o) {
  return o.precision == Precision::BF16 && !o.lora.use_dora && quantized_base(c, o, nullptr);
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
    fail("gradient_checkpointing: '{}' is not one of none, every, every:K, attention, mlp", excerpt(s));
  }
}

// Adaptive rank's state rows, named as its checkpoint tensors (train/adaptive_rank.h).
std::array<std::string, 3> adaptive_rank_state_names(const std::string& lora_a) {
  const std::string suffix = ".lora_A.weight";
  LT_ASSERT(lora_a.size() > suffix.size() && lora_a.ends_with(suffix));
  const std::string m = lora_a.substr(0, lora_a.size() - suffix.size());
  return {"rank_ema1." + m, "rank_ema2." + m, "rank_mask." + m};
}

int loss_chunk_rows(const ModelConfig& c, const TrainModelOptions& o) {
  const int N = o.micro_batch * o.seq_len;
  if (o.loss_chunk > 0) return std::min(o.loss_chunk, N);
  // bf16 loss products run on AMX / AVX512-BF16 GEMMs, which need tall chunks (Qwen2.5-0.5B's
  // 151,936-word head, 2 threads: 952 GFLOP/s at 256 rows, 1200 at 1024); f32 GEMMs are as fast at
  // 128 rows as at 256 (258 / 272 GFLOP/s), so there the chunk stays small
  const bool b16 = bf16_head(c, o) || bf16_head_copy(c, o);
  const size_t max_bytes = (b16 ? size_t(640) : size_t(80)) << 20;
  const size_t fit = max_bytes / (size_t(std::max(c.vocab_size, 1)) * sizeof(float));
  const int rows = int(std::clamp<size_t>(fit / 16 * 16, 16, b16 ? 1024 : 256));
  return std::min(rows, N);
}

namespace {

struct Dims {
  int N, C, QD, KVD, F, V, R, L, NH, NKV, HS, max_io;
  bool qk_norm;   // Qwen3, Gemma 3: per-head RMSNorm of q and k before RoPE
  bool sandwich;  // Gemma: post-attention and post-MLP norms
};

Dims dims_of(const ModelConfig& c, const TrainModelOptions& o) {
  Dims d;
  d.N = o.micro_batch * o.seq_len;
  d.C = c.dim; d.QD = c.q_dim(); d.KVD = c.kv_dim(); d.F = c.hidden_dim; d.V = c.vocab_size;
  d.R = o.method == Method::Lora ? o.lora.r : 0;
  d.L = c.n_layers; d.NH = c.n_heads; d.NKV = c.n_kv_heads; d.HS = c.head_dim;
  d.max_io = std::max({d.C, d.QD, d.F});
  d.qk_norm = c.qk_norm;
  d.sandwich = c.sandwich_norms;
  return d;
}

// (in, out) of projection p (ModelConfig's one shape table)
std::pair<int, int> proj_shape(const ModelConfig& c, Proj p) {
  const auto [in, out] = c.linear_shape(p);
  return {int(in), int(out)};
}

// PEFT's name of projection p's LoRA A or B in layer l.
std::string peft_name(int l, Proj p, bool A) {
  return "base_model.model." + proj_hf_name(l, p, A ? "lora_A.weight" : "lora_B.weight");
}

// The same in model c: Phi-3's fused projections share their fused module's A and B
// (io/fused_proj.h), named as PEFT names them.
std::string peft_name(const ModelConfig& c, int l, Proj p, bool A) {
  if (!c.is_fused(p)) return peft_name(l, p, A);
  return "base_model.model." + fused_hf_name(l, p, A ? "lora_A.weight" : "lora_B.weight");
}

// DoRA's magnitude: "base_model.model.model.layers.{l}.{parent}.{module}.lora_magnitude_vector"
std::string peft_mag_name(int l, Proj p) { return "base_model.model." + proj_hf_name(l, p, "lora_magnitude_vector"); }

// PiSSA / OLoRA: the copy of a LoRA tensor's initial value (A₀, B₀), kept for the conversion on save
std::string lora_init_name(const std::string& tensor) { return tensor + ".init"; }

// DoRA: the per-step weight norm of a linear
std::string dora_norm_name(int l, Proj p) { return "dora_norm." + proj_hf_name(l, p, "weight"); }

// DoRA, PiSSA and OLoRA: the combinations implemented.
void validate_lora_variants(const ModelConfig& c, const TrainModelOptions& o) {
  const LoraConfig& lc = o.lora;
  QuantSpec qs;
  const bool quant = quantized_base(c, o, &qs);
  if (lc.use_dora && lc.dropout > 0) {
    LT_CHECK(o.precision == Precision::FP32, "use_dora with lora_dropout {} and precision {} is not supported (DoRA's "
             "base product of the dropped input needs f32 weights); use lora_dropout 0 or precision fp32", lc.dropout,
             precision_name(o.precision));
    LT_CHECK(!quant || qs.type != QuantType::Int8, "use_dora with lora_dropout {} on an int8 base "
             "is not supported (PEFT's dropped-input product uses the dequantized weight, not LLM.int8); use "
             "lora_dropout 0, or nf4 / fp4", lc.dropout);
  }
  if (!lc.mutates_base()) return;
  LT_CHECK(!quant && o.precision == Precision::FP32, "init_lora_weights {} changes the base weights to W − s·B·A; that "
           "is implemented for f32 weights only (not a quantized base, not precision {}). Use precision fp32 and "
           "quantization none, or init_lora_weights true", lc.init, precision_name(o.precision));
}

void validate_options(const ModelConfig& c, const TrainModelOptions& o) {
  LT_CHECK(o.micro_batch >= 1, "micro_batch_size must be >= 1 (got {})", o.micro_batch);
  LT_CHECK(o.seq_len >= 2, "sequence_len must be >= 2 (got {})", o.seq_len);
  check_run_fits_model(c, o);  // context, tokens per micro-batch, LoRA rank per module, plan size (train/run_limits.h)
  LT_CHECK(o.seq_len <= c.max_seq_len, "sequence_len {} is longer than the model's context ({})", o.seq_len,
           c.max_seq_len);
  LT_CHECK(o.loss_chunk >= 0, "loss chunk must be >= 0 (0: the default)");
  LT_CHECK(std::isfinite(o.loraplus_lr_ratio) && o.loraplus_lr_ratio >= 0, "loraplus_lr_ratio must be >= 0 (got {}; "
           "0 turns LoRA+ off)", o.loraplus_lr_ratio);
  LT_CHECK(o.loraplus_lr_ratio == 0 || o.method == Method::Lora, "loraplus_lr_ratio is for LoRA (it scales the lr of "
           "lora_B); full fine-tuning has no B matrices. Use method: lora, or loraplus_lr_ratio: 0");
  if (o.method == Method::Lora) {
    const auto& lc = o.lora;
    LT_CHECK(lc.r > 0, "lora_r must be > 0 (got {})", lc.r);
    LT_CHECK(lc.dropout >= 0 && lc.dropout < 1, "lora_dropout must be in [0, 1) (got {})", lc.dropout);
    LT_CHECK(!lc.target_modules.empty(), "lora_target_modules is empty");
    for (const auto& t : lc.target_modules) {
      LT_CHECK(t == "all-linear" || parse_proj(t) || parse_fused_proj(t),
               "unknown LoRA target module '{}'; expected q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
               "down_proj or all-linear (Phi-3: qkv_proj, o_proj, gate_up_proj, down_proj)",
               t);
      const auto p = parse_proj(t);
      LT_CHECK(!c.fused_proj || !p || !c.is_fused(*p), "LoRA target module '{}': this {} model has no {} module; it "
               "fuses q/k/v into qkv_proj and gate/up into gate_up_proj, which PEFT adapts as one module each (use "
               "qkv_proj, o_proj, gate_up_proj, down_proj or all-linear)", t, c.arch, t);
      LT_CHECK(c.fused_proj || !parse_fused_proj(t), "LoRA target module '{}' is a Phi-3 fused module; this {} model "
               "has separate q_proj, k_proj, v_proj (gate_proj, up_proj)", t, c.arch);
    }
    if (c.fused_proj)
      LT_CHECK(!lc.use_dora && !lc.mutates_base(), "{} on Phi-3's fused qkv_proj / gate_up_proj is not supported yet "
               "(plain LoRA, LoRA+ and rsLoRA are); use init_lora_weights true without use_dora",
               lc.use_dora ? "use_dora" : "init_lora_weights " + lc.init);
    for (int l : lc.layers_to_transform)
      LT_CHECK(l >= 0 && l < c.n_layers, "layers_to_transform: layer {} does not exist (the model has {})", l,
               c.n_layers);
    LT_CHECK(lc.bias == "none" || lc.bias == "all" || lc.bias == "lora_only",
             "lora bias: '{}' is not one of none, all, lora_only", excerpt(lc.bias));
    LT_CHECK(parse_lora_init(lc.init, "init_lora_weights") == lc.init, "init_lora_weights: '{}' is not in its "
             "normal form (parse_lora_init)", lc.init);
    validate_lora_variants(c, o);
  }
  if (o.qat) {
    LT_CHECK(o.method == Method::Full && o.precision == Precision::FP32 && !o.quantization && !c.quantization,
             "qat: {} fake-quantizes the trained f32 weights: it needs method full, precision fp32 and an "
             "unquantized base (got method {}, precision {}, quantization {})", quantization_name(o.qat),
             method_name(o.method), precision_name(o.precision),
             quantization_name(c.quantization ? c.quantization : o.quantization));
    LT_CHECK(is_int4(*o.qat), "qat: {} is not an int4 format", quantization_name(o.qat));
    check_quant_spec({*o.qat, o.qat_group_size, false});
  }
  const bool stored = c.quantization.has_value(), requested = o.quantization.has_value();
  if (!stored && !requested) return;
  LT_CHECK(o.method == Method::Lora, "{}: full fine-tuning trains the base weights in fp32; quantized frozen weights "
           "are for LoRA (QLoRA). Use method: lora, or quantization: none{}",
           stored ? fmt::format("the base model is stored quantized ({})", quantization_name(c.quantization))
                  : fmt::format("quantization: {}", quantization_name(o.quantization)),
           stored ? " with the unquantized model" : "");
  LT_CHECK(std::isfinite(o.int8_threshold) && o.int8_threshold >= 0, "int8_threshold must be >= 0 (got {}; 0 "
           "disables the LLM.int8 outlier columns)", o.int8_threshold);
  if (!requested) return;
  QuantSpec want{*o.quantization, o.quant_blocksize, o.double_quant};
  if (want.type == QuantType::Int8) want.blocksize = 64;  // unused by int8
  if (is_ggml_block(want.type)) want.blocksize = 32;  // q8_0 / q4_0: blocks of 32 only
  try {
    check_quant_spec(want);
  } catch (const Error& e) {
    fail("quantization: {} (quant_blocksize {}, double_quant {}): {}", quantization_name(o.quantization),
         o.quant_blocksize, o.double_quant, e.what());
  }
  if (stored) {
    const QuantSpec have = model_quant_spec(c);
    LT_CHECK(have.type == want.type && (want.type == QuantType::Int8 || (have.blocksize == want.blocksize &&
                                                                         have.double_quant == want.double_quant)),
             "the base model is already quantized ({}, block size {}, double quant {}) and cannot be re-quantized "
             "to {} (block size {}, double quant {}); set quantization: none to train on it as stored, or start "
             "from the unquantized model", quantization_name(c.quantization), have.blocksize, have.double_quant,
             quantization_name(o.quantization),
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
  int layer;
  Proj p;
  Proj mask_p;  // the LoRA dropout mask's module: p, or (Phi-3) the first projection of its fused module
  int in, out;
  const QuantTensor* q = nullptr;  // quantized frozen weight (then w is null)
  QuantTensor qt;
  float *w = nullptr, *dw = nullptr, *b = nullptr, *db = nullptr;
  uint16_t* w16 = nullptr;         // 16-bit weight (mixed precision): the frozen storage, or w's working copy
  float* wq = nullptr;             // QAT: w fake-quantized to int4 (the forward's and input gradient's weight)
  float *A = nullptr, *B = nullptr, *dA = nullptr, *dB = nullptr;
  float *mag = nullptr, *dmag = nullptr;  // DoRA magnitude (out) and its gradient
  float* norm = nullptr;                  // DoRA: ||W + s·B·A|| per row, computed by each forward

  // The weight as the linear op reads it: quantized, else the 16-bit copy, else the f32 tensor.
  WeightView view(DType half, float int8_threshold) const {
    if (q) return weight_view(*q, int8_threshold);
    if (w16) return half_weight(half_kind(half), w16, out, in);
    if (wq) return f32_weight(wq, out, in);
    return f32_weight(w, out, in);
  }
};

struct TrainModel::LayerActs {
  float *rstd1, *xn1, *q, *k, *v, *att, *lse, *x_mid, *rstd2, *xn2, *gate, *up, *h;
  // Qwen3 (qk_norm): q and k before their per-head RMSNorm, and its 1/rms per (token, head)
  float *q_pre = nullptr, *k_pre = nullptr, *rstd_q = nullptr, *rstd_k = nullptr;
  // Gemma (sandwich norms): o_proj's and down_proj's outputs before their norms, and those 1/rms
  float *o_out = nullptr, *rstd_po = nullptr, *down_out = nullptr, *rstd_pf = nullptr;
  float* xa[kNumProj];  // (N, R) per adapted projection (index: Proj), else null
  // mixed precision: the saved GEMM inputs in 16 bits; xn1, att, xn2, h then point at the shared f32 buffer
  uint16_t *xn1_h = nullptr, *att_h = nullptr, *xn2_h = nullptr, *h_h = nullptr;
  // bf16 precision: the MLP's gate and up projections saved in bf16 (as autocast's linear outputs);
  // gate, up then point into the shared mlp.gate_up
  uint16_t *gate_h = nullptr, *up_h = nullptr;
  // bf16 precision: the attention operands saved in bf16; q, k, v then point into the shared attn.qkv
  uint16_t *q_h = nullptr, *k_h = nullptr, *v_h = nullptr;
};

// ---- the buffer table ---------------------------------------------------------------------------
// Every buffer of the plan is named once. A weight is named by its checkpoint name; its gradient,
// moments and 16-bit or quantized storage by the suffixes below. Every other buffer is one row of
// BufferTable {name, size, field}: plan_training() lists the rows, TrainModel's constructor
// stores each row's address in the row's field.

// The buffers of a trainable tensor: the tensor, its gradient and its two AdamW moments.
struct TrainableBuffer {
  const char* prefix;  // before the tensor's name
  Category cat;
  float* TrainParam::*field;
};
constexpr TrainableBuffer kTrainableBuffers[] = {{"", Category::TrainableParams, &TrainParam::p},
                                                 {"grad.", Category::Grads, &TrainParam::g},
                                                 {"adam_m.", Category::OptimizerState, &TrainParam::m},
                                                 {"adam_v.", Category::OptimizerState, &TrainParam::v}};

// Whether the model holds kTrainableBuffers[i] (else a TrainableStore or the ZeRO shards do).
static bool holds_trainable_buffer(const TrainModelOptions& o, size_t i) {
  return i == 0 ? !o.store_params : i == 1 ? !o.store_grads : o.optimizer_state;
}

// A frozen linear weight's 16-bit storage, or a trainable one's 16-bit working copy.
static std::string half_buffer_name(const std::string& weight, Precision p) {
  return weight + "." + precision_name(p);
}

// QAT: a trainable linear weight's fake-quantized working copy.
static std::string qat_buffer_name(const std::string& weight) { return weight + ".qat"; }

static std::string quant_buffer_name(const std::string& weight, const QuantSpec& s) {
  return weight + "." + quant_type_name(s.type);
}

struct BufferTable {
  using M = TrainModel;
  using Acts = TrainModel::LayerActs;

  // A buffer that is not a weight: its plan entry and how its address is stored (`index`: the
  // element of a per-layer field).
  struct Row {
    std::string name;
    Category cat;
    size_t bytes;
    Lifetime life;
    void (*bind)(M& m, void* buf, const Row& row);
    int index = 0;
  };

  // An activation buffer of a decoder layer: elements, the part of the block that produces it (1
  // attention, 2 MLP, 3 x_mid: recomputed only when the whole block is, 4 h and 8 the norms' outputs
  // xn1, xn2: recomputed in every layer) and its LayerActs field
  // (xa[module] for a LoRA input); a GEMM input (field16 set) is 16-bit with mixed precision; an
  // attention operand (qkv_off >= 0) is bf16 with bf16_attention(), its f32 values at attn.qkv + qkv_off;
  // an MLP projection (mlp_off >= 0) is bf16 with precision bf16, its f32 values at mlp.gate_up + mlp_off.
  struct Act {
    std::string name;
    size_t n;
    int part;
    float* Acts::*field;
    uint16_t* Acts::*field16 = nullptr;
    int module = -1;
    long qkv_off = -1;
    long mlp_off = -1;
    bool is16(const TrainModelOptions& o) const {
      if (!field16) return false;
      if (qkv_off >= 0) return bf16_attention(o);
      if (mlp_off >= 0) return o.precision == Precision::BF16;
      return o.precision != Precision::FP32;
    }
    size_t bytes(const TrainModelOptions& o) const { return n * (is16(o) ? 2 : sizeof(float)); }
    // half_x: the shared f32 buffer of the 16-bit GEMM inputs (mixed precision), else null;
    // qkv: the shared f32 attention operands (bf16_attention()), else null
    void bind(Acts& a, void* buf, float* half_x, float* qkv, float* mlp) const {
      if (qkv_off >= 0 && qkv) {
        a.*field16 = static_cast<uint16_t*>(buf);
        a.*field = qkv + qkv_off;
      } else if (mlp_off >= 0 && mlp) {
        a.*field16 = static_cast<uint16_t*>(buf);
        a.*field = mlp + mlp_off;
      } else if (qkv_off < 0 && mlp_off < 0 && half_x && field16) {
        a.*field16 = static_cast<uint16_t*>(buf);
        a.*field = half_x;
      } else if (module >= 0) {
        a.xa[module] = static_cast<float*>(buf);
      } else {
        a.*field = static_cast<float*>(buf);
      }
    }
  };

  // The binders: the buffer into the fields F (one buffer may be seen as several types), into
  // element `index` of a per-layer field, into the quantized linears' workspace (address and size).
  template <auto... F>
  static void to(M& m, void* buf, const Row&) {
    ((m.*F = static_cast<std::remove_reference_t<decltype(m.*F)>>(buf)), ...);
  }
  template <auto F>
  static void to_layer(M& m, void* buf, const Row& r) {
    auto& v = m.*F;
    if (v.size() <= size_t(r.index)) v.resize(size_t(r.index) + 1);
    v[size_t(r.index)] = static_cast<float*>(buf);
  }
  static void to_tile(M& m, void* buf, const Row& r) {
    m.lin_scratch_.tile = buf;
    m.lin_scratch_.tile_bytes = r.bytes;
  }
  static void to_dy(M& m, void* buf, const Row&) { m.lin_scratch_.dy = buf; }
  template <float* LinearScratch::*F>
  static void to_lora(M& m, void* buf, const Row&) {
    m.lin_scratch_.*F = static_cast<float*>(buf);
  }
  template <uint16_t* LinearScratch::*F>
  static void to_lora16(M& m, void* buf, const Row&) {
    m.lin_scratch_.*F = static_cast<uint16_t*>(buf);
  }
  static void to_attn_ds(M& m, void* buf, const Row& r) {  // touched now: a call fills only what its documents need,
    std::memset(buf, 0, r.bytes);                           // and the plan counts all of it resident
    m.attn_ds_ = buf;
    m.attn_ds_bytes_ = r.bytes;
  }
  static void to_attn_ws(M& m, void* buf, const Row& r) {  // touched now, as the dS rows
    std::memset(buf, 0, r.bytes);
    m.attn_ws_ = buf;
    m.attn_ws_bytes_ = r.bytes;
  }
  static void to_load_scratch(M& m, void* buf, const Row& r) {
    m.load_scratch_ = static_cast<float*>(buf);
    m.load_scratch_floats_ = r.bytes / sizeof(float);
  }

  static std::vector<Row> rows(const ModelConfig& c, const TrainModelOptions& o, size_t* acts_at = nullptr);
  static void add_workspaces(std::vector<Row>& r, const ModelConfig& c, const TrainModelOptions& o, const Dims& d);
  static std::vector<Act> acts(const Dims& d, const std::vector<bool>& adapted);
};

// The rows in plan order; the decoder layers' activation sets go before rows[*acts_at].
std::vector<BufferTable::Row> BufferTable::rows(const ModelConfig& c, const TrainModelOptions& o, size_t* acts_at) {
  const Dims d = dims_of(c, o);
  const size_t f = sizeof(float), N = d.N;
  const auto W = Category::Workspace, A = Category::Activations;
  std::vector<Row> r;
  add_workspaces(r, c, o, d);
  for (int l = 0; l <= d.L; ++l)  // L+1 residual streams
    r.push_back({fmt::format("act.res.{}", l), A, N * d.C * f, Lifetime::Step, to_layer<&M::res_>, l});
  if (acts_at) *acts_at = r.size();
  if (c.sliding_window > 0 && c.sliding_window < o.seq_len)  // the window's first key per query
    r.push_back({"attn.window_start", Category::Data, N * sizeof(int), Lifetime::Step, to<&M::window_start_>});
  r.push_back({"act.final.xn", A, N * d.C * f, Lifetime::Step, to<&M::xnf_>});
  r.push_back({"act.final.rstd", A, N * f, Lifetime::Step, to<&M::rstdf_>});
  const size_t chunk = size_t(loss_chunk_rows(c, o));
  r.push_back({"loss.logits_chunk", Category::LossChunk, chunk * d.V * f,
               Lifetime::Phase, to<&M::logits_chunk_>});
  r.push_back({"loss.d_xn", Category::LossChunk, N * d.C * f, Lifetime::Phase, to<&M::d_xnf_>});
  if (bf16_head(c, o) || bf16_head_copy(c, o))
    r.push_back({"loss.x16", Category::LossChunk, chunk * d.C * 2, Lifetime::Phase,
                 to<&M::loss_x16_>});
  // backward scratch, reused layer by layer
  r.push_back({"bwd.d_res", W, N * d.C * f, Lifetime::Phase, to<&M::d_res_>});
  r.push_back({"bwd.d_xn", W, N * d.C * f, Lifetime::Layer, to<&M::d_xn_>});
  r.push_back({"bwd.d_h", W, N * d.F * f, Lifetime::Layer, to<&M::d_h_>});
  // d_gate: over the gate activation, d_up: over d_h (layer_backward)
  r.push_back({"bwd.d_q", W, N * d.QD * f, Lifetime::Layer, to<&M::d_q_>});
  r.push_back({"bwd.d_k", W, N * d.KVD * f, Lifetime::Layer, to<&M::d_k_>});
  r.push_back({"bwd.d_v", W, N * d.KVD * f, Lifetime::Layer, to<&M::d_v_>});
  r.push_back({"bwd.d_att", W, N * d.QD * f, Lifetime::Layer, to<&M::d_att_>});
  if (c.attn_softcap <= 0) {  // the dS rows the attention backward keeps for its dq pass (0: recomputed)
    const size_t ds = attention_ds_rows_bytes(int(N), o.seq_len, d.NH, bf16_attention(o) ? 2 : f);
    if (ds) r.push_back({"bwd.attn_ds", W, ds, Lifetime::Layer, to_attn_ds});
    // the attention kernels' packed tiles and rows (bind_attention_workspace)
    const size_t ws = attention_workspace_bytes(int(N), d.NH, d.NKV, d.HS, bf16_attention(o));
    r.push_back({"attn.workspace", W, ws, Lifetime::Layer, to_attn_ws});
  }
  if (d.R > 0) {
    r.push_back({"lora.g", W, N * d.R * f, Lifetime::Layer, to_lora<&LinearScratch::lora_g>});
    if (bf16_lora(c, o)) {  // bf16 copies of A or B, of xa or g
      r.push_back({"lora.w16", W, size_t(d.R) * d.max_io * 2, Lifetime::Layer, to_lora16<&LinearScratch::lora_w16>});
      r.push_back({"lora.t16", W, N * d.R * 2, Lifetime::Layer, to_lora16<&LinearScratch::lora_t16>});
      r.push_back({"lora.wt", W, size_t(d.R) * d.max_io * f, Lifetime::Layer, to_lora<&LinearScratch::lora_wt>});
      size_t wcat = 0;  // [W; bf16(s·A); 0] and [W | bf16(s·B) | 0] of the concatenated products, where
      for (Proj p : kProjs) {  // the AMX GEMM does not append the rank-r operands (kernels/linear.h); none
        if (quantized_base(c, o, nullptr)) break;  // for a quantized base (its tiles, then the rank-R term)
        auto [in, out] = proj_shape(c, p);
        wcat = std::max(wcat, lora_wcat_bytes(int(N), in, out, d.R));
      }
      if (wcat) r.push_back({"lora.wcat", W, wcat, Lifetime::Layer, to_lora16<&LinearScratch::lora_wcat>});
    }
    if (o.lora.use_dora)
      r.push_back({"lora.dora", W, N * d.max_io * f, Lifetime::Layer, to_lora<&LinearScratch::dora>});
    if (o.lora.dropout > 0) {
      r.push_back({"lora.tmp", W, N * d.max_io * f, Lifetime::Layer, to_lora<&LinearScratch::lora_tmp>});
      r.push_back({"lora.xd", W, N * d.max_io * f, Lifetime::Layer, to_lora<&LinearScratch::lora_xd>});
    }
  }
  return r;
}

// The RoPE table, the quantized linears' workspaces and the 16-bit GEMM workspaces.
void BufferTable::add_workspaces(std::vector<Row>& r, const ModelConfig& c, const TrainModelOptions& o,
                                 const Dims& d) {
  const size_t f = sizeof(float), N = d.N;
  const auto W = Category::Workspace;
  r.push_back({"rope.inv_freq", W, size_t(d.HS / 2) * f, Lifetime::Persistent, to<&M::inv_freq_>});
  r.push_back({"rope.cos_sin", W, N * size_t(d.HS / 2) * 2 * f, Lifetime::Step, to<&M::rope_cs_>});
  if (c.rope_local_theta > 0) {
    r.push_back({"rope.inv_freq_local", W, size_t(d.HS / 2) * f, Lifetime::Persistent, to<&M::inv_freq_local_>});
    r.push_back({"rope.cos_sin_local", W, N * size_t(d.HS / 2) * 2 * f, Lifetime::Step, to<&M::rope_cs_local_>});
  }
  if (c.norm_offset)
    r.push_back({"norm.offset_weight", W, size_t(std::max(d.C, d.HS)) * f, Lifetime::Layer, to<&M::norm_eff_>});
  QuantSpec qs;
  const bool quant = quantized_base(c, o, &qs);
  if (quant) {
    // one tile workspace shared by every quantized linear; converting checkpoint tensors chunk by
    // chunk on load (not needed when the file holds them quantized)
    size_t ws = 0, load = 0;
    for (Proj p : kProjs) {
      auto [in, out] = proj_shape(c, p);
      ws = std::max(ws, linear_tile_bytes(weight_kind(qs.type), qs.blocksize, qs.double_quant, d.N, in, out,
                                          quant_bf16_products(c, o)));
      load = std::max(load, quantize_chunked_scratch_floats(qs, out, in) * f);
    }
    r.push_back({"quant.workspace", W, ws, Lifetime::Layer, to_tile});
    if (!c.quantization) r.push_back({"quant.load_scratch", W, load, Lifetime::Persistent, to_load_scratch});
  }
  const DType ht = precision_dtype(o.precision);
  if (ht == DType::F32) return;
  r.push_back({"half.x", W, N * d.max_io * f, Lifetime::Layer, to<&M::half_x_>});
  if (bf16_attention(o))  // q, k, v in f32 while a layer computes them (saved in bf16)
    r.push_back({"attn.qkv", W, N * (d.QD + 2 * size_t(d.KVD)) * f, Lifetime::Layer, to<&M::attn_qkv_>});
  if (o.precision == Precision::BF16)  // the MLP's gate and up in f32 while a layer uses them (saved in bf16)
    r.push_back({"mlp.gate_up", W, 2 * N * size_t(d.F) * f, Lifetime::Layer, to<&M::mlp_gate_up_>});
  if (quant) {  // bf16 products: dout rounded to bf16 for the base's backward
    const int dy_cols = bf16_lora(c, o) ? lora_cat_cols(d.max_io, d.R) : d.max_io;  // as below
    if (quant_bf16_products(c, o))
      r.push_back({"half.dy", W, linear_dy_bytes(WeightKind::BF16, d.N, dy_cols), Lifetime::Layer, to_dy});
    return;
  }
  // bf16 LoRA: dout and g side by side, (N, lora_cat_cols(OC, R)), and in the forward x16 and xa
  // (kernels/linear.h)
  const int dy_cols = bf16_lora(c, o) ? lora_cat_cols(d.max_io, d.R) : d.max_io;
  r.push_back({"half.dy", W, linear_dy_bytes(half_kind(ht), d.N, dy_cols), Lifetime::Layer, to_dy});
  if (ht != DType::F16) return;
  size_t tile = 0;
  for (Proj p : kProjs) {
    auto [in, out] = proj_shape(c, p);
    tile = std::max(tile, linear_tile_bytes(WeightKind::F16, 0, false, d.N, in, out));
  }
  r.push_back({"half.w_tile", W, tile, Lifetime::Layer, to_tile});
}

std::vector<BufferTable::Act> BufferTable::acts(const Dims& d, const std::vector<bool>& adapted) {
  const size_t N = d.N;
  std::vector<Act> v = {{"rstd1", N, 1, &Acts::rstd1},
                        {"xn1", N * d.C, 8, &Acts::xn1, &Acts::xn1_h},
                        {"q", N * d.QD, 1, &Acts::q, &Acts::q_h, -1, 0},
                        {"k", N * d.KVD, 1, &Acts::k, &Acts::k_h, -1, long(N * d.QD)},
                        {"v", N * d.KVD, 1, &Acts::v, &Acts::v_h, -1, long(N * (d.QD + d.KVD))},
                        {"att", N * d.QD, M::kAttentionCore, &Acts::att, &Acts::att_h},
                        {"lse", size_t(d.NH) * N, M::kAttentionCore, &Acts::lse},
                        {"x_mid", N * d.C, 3, &Acts::x_mid},
                        {"rstd2", N, 2, &Acts::rstd2},
                        {"xn2", N * d.C, 8, &Acts::xn2, &Acts::xn2_h},
                        {"gate", N * d.F, 2, &Acts::gate, &Acts::gate_h, -1, -1, 0},
                        {"up", N * d.F, 2, &Acts::up, &Acts::up_h, -1, -1, long(N * d.F)},
                        {"h", N * d.F, 4, &Acts::h, &Acts::h_h}};
  if (d.qk_norm) {
    v.push_back({"q_pre", N * d.QD, 1, &Acts::q_pre});
    v.push_back({"k_pre", N * d.KVD, 1, &Acts::k_pre});
    v.push_back({"rstd_q", N * d.NH, 1, &Acts::rstd_q});
    v.push_back({"rstd_k", N * d.NKV, 1, &Acts::rstd_k});
  }
  if (d.sandwich) {
    v.push_back({"o_out", N * d.C, 1, &Acts::o_out});
    v.push_back({"rstd_po", N, 1, &Acts::rstd_po});
    v.push_back({"down_out", N * d.C, 2, &Acts::down_out});
    v.push_back({"rstd_pf", N, 2, &Acts::rstd_pf});
  }
  for (Proj p : kProjs)
    if (adapted[size_t(p)])
      v.push_back({fmt::format("xa.{}", proj_module(p)), N * d.R, proj_in_attention(p) ? 1 : 2, nullptr, nullptr, int(p)});
  return v;
}

// Per layer, the parts of the block replayed before its backward (bit 1 attention, bit 2 MLP, bit 4
// the MLP's h = act(gate)·up alone, bit 8 the RMSNorms' outputs xn1 and xn2 alone). The attention's
// own outputs (its part kAttentionCore: out and lse, (N, QD) in 16 bits and (NH, N) in f32) are never
// replayed but saved: a replayed attention recomputes its inputs q, k, v (the backward reads them)
// and its o projection (x_mid), not the attention itself (a SmolLM2-shaped bf16 LoRA step
// checkpointed every layer: 4% of the step for 9% more activations). Bits 4 and 8
// are set in every layer: h is never saved but recomputed from the saved gate and up in one
// elementwise pass (what it costs: about 1% of a SmolLM2-shaped step; what it saves: an (N, F)
// activation per layer, 13% of the activations); xn1 and xn2 are recomputed from the saved res[l]
// and x_mid, which their norms' backward reads anyway (two (N, C) passes per layer; 11% of the
// activations). The recomputed values are the same bits: the same kernel on the same inputs.
static std::vector<int> recompute_layers(const ModelConfig& c, const TrainModelOptions& o) {
  std::vector<int> r(c.n_layers, 4 | 8);
  for (int l = 0; l < c.n_layers; ++l) {
    if (o.checkpointing == Checkpointing::EveryK) r[l] |= l % o.checkpoint_every == 0 ? 3 : 0;
    if (o.checkpointing == Checkpointing::Attention) r[l] |= 1;
    if (o.checkpointing == Checkpointing::Mlp) r[l] |= 2;
  }
  return r;
}

static std::vector<bool> adapted_modules(const ModelConfig& c, const TrainModelOptions& o, int l) {
  std::vector<bool> a(kNumProj);
  for (Proj p : kProjs)
    a[size_t(p)] = o.method == Method::Lora && lora_targets(o.lora, p) && (l < 0 || lora_targets_layer(o.lora, l));
  return a;
}

// A buffer is shared (recompute scratch) when every part producing it is replayed.
static bool shared_buffer(const BufferTable::Act& b, int replay) { return replay && (b.part & replay) == b.part; }

// Layer l's buffer of activation b: its own, or the recompute set's shared one.
static std::string act_buffer_name(int l, const BufferTable::Act& b, int replay) {
  return shared_buffer(b, replay) ? "recompute." + b.name : fmt::format("act.{}.{}", l, b.name);
}

bool quantized_base(const ModelConfig& c, const TrainModelOptions& o, QuantSpec* spec) {
  QuantSpec s;
  if (c.quantization) s = model_quant_spec(c);
  else if (o.quantization) s = {*o.quantization, o.quant_blocksize, o.double_quant};
  else return false;
  if (s.type == QuantType::Int8) s = {QuantType::Int8, 64, false};
  if (is_ggml_block(s.type)) s = {s.type, 32, false};
  if (spec) *spec = s;
  return true;
}

// A weight: frozen, or trainable with the buffers of kTrainableBuffers the model holds.
static void plan_weight(MemoryPlan& p, const TrainModelOptions& o, const std::string& name, size_t n, bool train) {
  if (!train) {
    p.add(name, Category::FrozenWeights, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < std::size(kTrainableBuffers); ++i)
    if (holds_trainable_buffer(o, i))
      p.add(kTrainableBuffers[i].prefix + name, kTrainableBuffers[i].cat, n * sizeof(float));
  if (o.topk.residuals())  // grad_topk's state, whoever holds the moments (train/grad_topk.h)
    for (int w = 0; w < o.topk.workers; ++w) p.add(topk_residual_name(w, name), Category::OptimizerState, n * sizeof(float));
  if (o.topk.ages()) p.add(topk_age_name(name), Category::OptimizerState, n * sizeof(float));
}

// Projection m of layer l: its weight (f32, 16-bit or quantized storage; a 16-bit working copy
// when trained in 16 bits), its bias, its LoRA A and B.
static void plan_linear(MemoryPlan& p, const ModelConfig& c, const TrainModelOptions& o, const Dims& d, int l,
                        Proj pj) {
  QuantSpec qs;
  const bool quant = quantized_base(c, o, &qs), full = o.method == Method::Full;
  const bool half = o.precision != Precision::FP32;
  auto [in, out] = proj_shape(c, pj);
  const std::string wn = proj_hf_name(l, pj, "weight");
  if (quant) p.add(quant_buffer_name(wn, qs), Category::FrozenWeights, quant_storage_bytes(qs, out, in));
  else if (half && !full) p.add(half_buffer_name(wn, o.precision), Category::FrozenWeights, size_t(in) * out * 2);
  else plan_weight(p, o, wn, size_t(in) * out, full);
  // full fine-tuning in 16 bits: the working copy the GEMMs read, refreshed after each step
  if (half && full) p.add(half_buffer_name(wn, o.precision), Category::Workspace, size_t(in) * out * 2);
  // QAT: the fake-quantized working copy, refreshed after each step
  if (o.qat && full) p.add(qat_buffer_name(wn), Category::Workspace, size_t(in) * out * sizeof(float));
  const bool adapted = !full && lora_targets(o.lora, pj) && lora_targets_layer(o.lora, l);
  if (c.has_bias(pj)) {
    const bool train_bias = full || o.lora.bias == "all" || (o.lora.bias == "lora_only" && adapted);
    plan_weight(p, o, proj_hf_name(l, pj, "bias"), out, train_bias);
  }
  // Phi-3: one A and one B for the fused module, planned with its first projection
  if (adapted && c.is_fused(pj) && fused_group_head(pj) != pj) return;
  if (adapted && c.is_fused(pj)) out = int(c.fused_rows(pj).second);
  if (adapted) {
    plan_weight(p, o, peft_name(c, l, pj, true), size_t(d.R) * in, true);
    plan_weight(p, o, peft_name(c, l, pj, false), size_t(out) * d.R, true);
    if (o.adaptive_rank) {  // importance EMAs of A's and B's entries, and the component mask
      const auto names = adaptive_rank_state_names(peft_name(c, l, pj, true));
      const size_t entries = size_t(d.R) * (size_t(in) + size_t(out));
      p.add(names[0], Category::OptimizerState, entries * sizeof(float));
      p.add(names[1], Category::OptimizerState, entries * sizeof(float));
      p.add(names[2], Category::OptimizerState, size_t(d.R) * sizeof(float));
    }
    if (o.lora.use_dora) {
      plan_weight(p, o, peft_mag_name(l, pj), size_t(out), true);
      p.add(dora_norm_name(l, pj), Category::Workspace, size_t(out) * sizeof(float), Lifetime::Step);
    }
    if (o.lora.mutates_base()) {
      plan_weight(p, o, lora_init_name(peft_name(l, pj, true)), size_t(d.R) * in, false);
      plan_weight(p, o, lora_init_name(peft_name(l, pj, false)), size_t(out) * d.R, false);
    }
  }
}

// Every weight, in checkpoint order.
static void plan_weights(MemoryPlan& p, const ModelConfig& c, const TrainModelOptions& o, const Dims& d) {
  const bool full = o.method == Method::Full;
  const bool head16 = bf16_head(c, o);  // frozen embedding / lm_head in bf16
  auto plan_table = [&](const std::string& name, bool train) {
    if (head16) p.add(half_buffer_name(name, o.precision), Category::FrozenWeights, size_t(d.V) * d.C * 2);
    else plan_weight(p, o, name, size_t(d.V) * d.C, train);
  };
  plan_table("model.embed_tokens.weight", full && !o.freeze_embeddings);
  for (int l = 0; l < d.L; ++l) {
    plan_weight(p, o, fmt::format("model.layers.{}.input_layernorm.weight", l), d.C, full);
    plan_weight(p, o, fmt::format("model.layers.{}.post_attention_layernorm.weight", l), d.C, full);
    if (c.sandwich_norms)
      for (const char* n : {"pre_feedforward_layernorm", "post_feedforward_layernorm"})
        plan_weight(p, o, fmt::format("model.layers.{}.{}.weight", l, n), d.C, full);
    if (c.qk_norm)
      for (const char* n : {"q_norm", "k_norm"})
        plan_weight(p, o, fmt::format("model.layers.{}.self_attn.{}.weight", l, n), d.HS, full);
    for (Proj pj : kProjs) plan_linear(p, c, o, d, l, pj);
  }
  plan_weight(p, o, "model.norm.weight", d.C, full);
  if (!c.tie_embeddings) plan_table("lm_head.weight", full && !o.freeze_lm_head);
  if (bf16_head_copy(c, o))  // the loss products' working copy, refreshed after each step
    p.add(half_buffer_name(head_table_name(c), o.precision), Category::Workspace, size_t(d.V) * d.C * 2);
}

// The decoder layers' activations: each layer's own set, or (replayed parts) one shared recompute
// set sized for the largest user (every layer has the same shapes).
static void plan_layer_acts(MemoryPlan& p, const ModelConfig& c, const TrainModelOptions& o, const Dims& d) {
  const auto rec = recompute_layers(c, o);
  std::vector<std::string> shared_added;
  for (int l = 0; l < d.L; ++l) {
    for (const auto& b : BufferTable::acts(d, adapted_modules(c, o, l))) {
      const std::string name = act_buffer_name(l, b, rec[l]);
      if (!shared_buffer(b, rec[l])) {
        p.add(name, Category::Activations, b.bytes(o), Lifetime::Step);
      } else if (std::find(shared_added.begin(), shared_added.end(), name) == shared_added.end()) {
        shared_added.push_back(name);
        p.add(name, Category::Recompute, b.bytes(o), Lifetime::Layer);
      }
    }
  }
}

MemoryPlan plan_training(const ModelConfig& c, const TrainModelOptions& o) {
  validate_options(c, o);
  const Dims d = dims_of(c, o);
  MemoryPlan p;
  plan_weights(p, c, o, d);
  size_t acts_at = 0;
  const auto rows = BufferTable::rows(c, o, &acts_at);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i == acts_at) plan_layer_acts(p, c, o, d);
    p.add(rows[i].name, rows[i].cat, rows[i].bytes, rows[i].life);
  }
  return p;
}

TrainModel::~TrainModel() = default;

TopkBuffers topk_buffers(const std::vector<TrainParam>& params) {
  TopkBuffers b;
  for (const auto& p : params) {
    b.residual.resize(p.topk_residual.size());
    for (size_t w = 0; w < p.topk_residual.size(); ++w) b.residual[w].push_back(p.topk_residual[w]);
    if (p.topk_age) b.age.push_back(p.topk_age);
  }
  return b;
}

// About 200 lines: the weight loading's lambdas share one registration state (params_, pref_,
// gref_, the store); left whole while the linear op (issue #12) changes how a linear's weights load.
TrainModel::TrainModel(const ModelConfig& config, const TensorSet& ts, const TrainModelOptions& opts, const Ops& ops,
                       UnitStore* store, FrozenBlock* frozen)
    : cfg_(config), opts_(opts), ops_(ops), tops_(&ops == &ops_ref() ? train_ops_ref() : train_ops_cpu()),
      own_store_(store ? nullptr : std::make_unique<UnitStore>()), store_(store ? store : own_store_.get()) {
  validate_config(cfg_, ts.source);
  check_checkpoint_tensors(cfg_, ts);
  LT_CHECK(store_->holds_params() == opts_.store_params && store_->holds_grads() == opts_.store_grads,
           "TrainModel: store_params / store_grads need a sharding strategy holding exactly those");
  LT_CHECK(!(opts_.store_params && opts_.qat), "sharded parameters (ZeRO stage 3) with qat are not supported yet: the "
           "fake-quantized working copies are refreshed from whole f32 masters; use zero_stage 2 or less");
  LT_CHECK(!(opts_.store_params && opts_.method == Method::Full && opts_.precision != Precision::FP32),
           "sharded parameters (ZeRO stage 3) with full fine-tuning in {} are not supported yet: the 16-bit working "
           "copies are refreshed from whole f32 masters; use precision: fp32, or LoRA, or zero_stage 2",
           precision_name(opts_.precision));
  LT_CHECK(!(cfg_.fused_proj && opts_.method == Method::Lora && (opts_.store_params || opts_.store_grads)),
           "LoRA on Phi-3 with sharded parameters or gradients (ZeRO stage 2 / 3) is not supported yet: the fused "
           "modules' A and B are shared by their projections; use zero_stage 0 or 1");
  plan_ = plan_training(cfg_, opts_);
  // a borrowed frozen block is already converted: its weights are not loaded again
  const bool borrowed = frozen && frozen->filled;
  if (frozen) {
    if (!borrowed) frozen->arenas.allocate(category_plan(plan_, Category::FrozenWeights));
    arenas_.allocate(plan_, frozen->arenas, Category::FrozenWeights);
  } else {
    arenas_.allocate(plan_);
  }
  lin_scratch_ = {};  // bound below when planned
  for (const auto& r : BufferTable::rows(cfg_, opts_)) r.bind(*this, arenas_.get(r.name), r);
  const Dims d = dims_of(cfg_, opts_);
  N_ = d.N;
  const bool full = opts_.method == Method::Full;
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
  const bool sp = opts_.store_params;
  // a trainable tensor: its buffer (planned, or the store's load buffer) to fill, registered with
  // the pointers aimed at it; finish_trainable() once filled
  auto begin_trainable = [&](const std::string& name, std::vector<int64_t> shape, int layer, bool decay, float** pref,
                             float** gref) -> float* {
    size_t n = 1;
    for (auto s : shape) n *= size_t(s);
    TrainParam tp{name, shape, nullptr, nullptr, nullptr, nullptr, n, layer, decay, trainable_unit(name, d.L)};
    for (size_t i = 0; i < std::size(kTrainableBuffers); ++i)
      if (holds_trainable_buffer(opts_, i))
        tp.*kTrainableBuffers[i].field = arenas_.get_as<float>(kTrainableBuffers[i].prefix + name);
    if (opts_.topk.residuals())
      for (int w = 0; w < opts_.topk.workers; ++w) tp.topk_residual.push_back(arenas_.get_as<float>(topk_residual_name(w, name)));
    if (opts_.topk.ages()) tp.topk_age = arenas_.get_as<float>(topk_age_name(name));
    if (opts_.adaptive_rank && name.ends_with(".lora_A.weight")) {
      const auto names = adaptive_rank_state_names(name);
      tp.rank = {arenas_.get_as<float>(names[0]), arenas_.get_as<float>(names[1]), arenas_.get_as<float>(names[2])};
    }
    float* dst = store_->load_buffer(params_.size(), n, sp ? nullptr : tp.p);
    if (!sp) tp.p = dst;
    float* g = tp.g;
    params_.push_back(tp);
    *pref = dst;
    *gref = g;
    store_->add_pointers(params_.size() - 1, pref, gref);
    return dst;
  };
  auto finish_trainable = [&]() { store_->loaded(params_.size() - 1); };
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
    if (!train && borrowed) return;
    convert_to_f32(dst, t.data, t.dtype, size_t(t.numel()));
    release_mapped_pages(t.data, t.nbytes);
    if (train) finish_trainable();
  };
  const int64_t C = d.C, V = d.V;
  QuantSpec qs;
  const bool quant = quantized_base(cfg_, opts_, &qs), stored = cfg_.quantization.has_value();
  // a frozen linear weight into its quantized storage: the file's parts copied, or the checkpoint
  // tensor converted and quantized a chunk at a time
  auto load_quant = [&](Linear& lin, const std::string& name) {
    const size_t index = size_t(lin.layer) * kNumProj + size_t(lin.p);
    if (frozen && frozen->quant.size() <= index) frozen->quant.resize(index + 1);
    lin.q = &lin.qt;
    if (borrowed) {
      lin.qt = frozen->quant[index];
      return;
    }
    const std::string qn = quant_buffer_name(name, qs);
    void* dst = arenas_.get(qn);
    const size_t bytes = quant_storage_bytes(qs, lin.out, lin.in);
    if (stored) {
      lin.qt = copy_quant_tensor(dst, bytes, load_quant_tensor(ts, name, qs, lin.out, lin.in));
      for (const char* part : {".codes", ".absmax", ".qabsmax", ".absmax2", ".qweight", ".row_absmax", ".scales",
                               ".mins"})
        if (const TensorInfo* t = ts.find(name + part)) release_mapped_pages(t->data, t->nbytes);
    } else {
      const TensorInfo& t = ts.get(name, {lin.out, lin.in});
      LT_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16,
               "{}: tensor '{}' is {}; quantization on load needs F32, F16 or BF16 weights", t.file, name,
               dtype_name(t.dtype));
      const auto* src = static_cast<const uint8_t*>(t.data);
      const size_t es = dtype_size(t.dtype);
      lin.qt = quantize_weight_chunked(dst, bytes, lin.out, lin.in, qs, load_scratch_, load_scratch_floats_,
                                       [&](float* out, int64_t first, int64_t count) {
                                         convert_to_f32(out, src + size_t(first) * es, t.dtype, size_t(count));
                                       });
      release_mapped_pages(t.data, t.nbytes);
    }
    if (frozen) frozen->quant[index] = lin.qt;
  };
  if (load_scratch_) std::memset(load_scratch_, 0, load_scratch_floats_ * sizeof(float));
  half_ = precision_dtype(opts_.precision);
  // a frozen linear weight into its 16-bit storage, converted a chunk at a time
  auto load_half = [&](const std::string& name, int64_t out, int64_t in) -> uint16_t* {
    const TensorInfo& t = ts.get(name, {out, in});
    auto* dst = arenas_.get_as<uint16_t>(half_buffer_name(name, opts_.precision));
    if (borrowed) return dst;
    const size_t n = size_t(t.numel()), es = dtype_size(t.dtype);
    if (t.dtype == half_) {
      std::memcpy(dst, t.data, n * 2);
    } else {
      float chunk[4096];
      for (size_t i = 0; i < n; i += 4096) {
        const size_t k = std::min<size_t>(4096, n - i);
        convert_to_f32(chunk, static_cast<const uint8_t*>(t.data) + i * es, t.dtype, k);
        ops_.round_half(half_, dst + i, nullptr, chunk, k);
      }
    }
    release_mapped_pages(t.data, t.nbytes);
    return dst;
  };
  const bool head16 = bf16_head(cfg_, opts_);
  if (head16) {  // frozen, in bf16: no f32 table, no gradient
    embed16_ = load_half("model.embed_tokens.weight", V, C);
    embed_ = d_embed_ = nullptr;
  } else {
    load("model.embed_tokens.weight", {V, C}, -1, true, &embed_, &d_embed_);
  }
  std::mt19937_64 rng(opts_.seed);
  // the vectors' elements are registered pointers: no reallocation after this
  attn_norm_.assign(size_t(d.L), nullptr);
  d_attn_norm_.assign(size_t(d.L), nullptr);
  ffn_norm_.assign(size_t(d.L), nullptr);
  d_ffn_norm_.assign(size_t(d.L), nullptr);
  q_norm_.assign(size_t(d.L), nullptr);
  d_q_norm_.assign(size_t(d.L), nullptr);
  k_norm_.assign(size_t(d.L), nullptr);
  d_k_norm_.assign(size_t(d.L), nullptr);
  for (auto* v : {&post_attn_norm_, &d_post_attn_norm_, &post_ffn_norm_, &d_post_ffn_norm_}) v->assign(size_t(d.L), nullptr);
  for (int l = 0; l < d.L; ++l) {
    auto n1 = fmt::format("model.layers.{}.input_layernorm.weight", l);
    auto n2 = fmt::format("model.layers.{}.{}", l, cfg_.ffn_norm_name());
    load(n1, {C}, l, false, &attn_norm_[size_t(l)], &d_attn_norm_[size_t(l)]);
    load(n2, {C}, l, false, &ffn_norm_[size_t(l)], &d_ffn_norm_[size_t(l)]);
    if (cfg_.sandwich_norms) {  // Gemma: the attention's and the MLP's output norms
      load(fmt::format("model.layers.{}.post_attention_layernorm.weight", l), {C}, l, false,
           &post_attn_norm_[size_t(l)], &d_post_attn_norm_[size_t(l)]);
      load(fmt::format("model.layers.{}.post_feedforward_layernorm.weight", l), {C}, l, false,
           &post_ffn_norm_[size_t(l)], &d_post_ffn_norm_[size_t(l)]);
    }
    if (cfg_.qk_norm) {
      load(fmt::format("model.layers.{}.self_attn.q_norm.weight", l), {d.HS}, l, false, &q_norm_[size_t(l)],
           &d_q_norm_[size_t(l)]);
      load(fmt::format("model.layers.{}.self_attn.k_norm.weight", l), {d.HS}, l, false, &k_norm_[size_t(l)],
           &d_k_norm_[size_t(l)]);
    }
    for (Proj p : kProjs) {
      auto [in, out] = proj_shape(cfg_, p);
      auto lin = std::make_unique<Linear>();
      lin->layer = l; lin->p = p; lin->in = in; lin->out = out;
      auto wn = proj_hf_name(l, p, "weight");
      if (quant) {
        load_quant(*lin, wn);
      } else if (half_ != DType::F32 && !full) {
        lin->w16 = load_half(wn, out, in);
      } else {
        load(wn, {out, in}, l, true, &lin->w, &lin->dw);
        if (half_ != DType::F32)  // filled by zero_grads()
          lin->w16 = arenas_.get_as<uint16_t>(half_buffer_name(wn, opts_.precision));
        if (opts_.qat && full) lin->wq = arenas_.get_as<float>(qat_buffer_name(wn));  // filled by zero_grads()
      }
      if (cfg_.has_bias(p)) load(proj_hf_name(l, p, "bias"), {out}, l, false, &lin->b, &lin->db);
      auto an = peft_name(cfg_, l, p, true), bn = peft_name(cfg_, l, p, false);
      lin->mask_p = cfg_.is_fused(p) ? fused_group_head(p) : p;  // a fused module has one dropout mask
      const int lora_out = cfg_.is_fused(p) ? int(cfg_.fused_rows(p).second) : out;  // B's rows
      const bool shared = !full && is_trainable(an) && cfg_.is_fused(p) && fused_group_head(p) != p;
      if (shared) {
        // Phi-3: the fused module's A, and B's row block of this projection (its head was made first)
        const Linear& head = *linears_[linears_.size() - size_t(int(p) - int(fused_group_head(p)))];
        const size_t row0 = size_t(cfg_.fused_rows(p).first) * size_t(d.R);
        lin->A = head.A; lin->dA = head.dA;
        lin->B = head.B + row0; lin->dB = head.dB + row0;
      }
      if (!full && is_trainable(an) && opts_.lora.use_dora) {  // DoRA's m starts at ||W|| (= ||W_res + s·B₀·A₀||)
        lin->norm = arenas_.get_as<float>(dora_norm_name(l, p));
        dora_weight_norm(lin->norm, lin->view(half_, opts_.int8_threshold), LoraView{});
      }
      if (!full && is_trainable(an) && opts_.lora.mutates_base()) {
        init_mutating_lora(*lin, an, bn, begin_trainable, finish_trainable);
      } else if (!full && is_trainable(an) && !shared) {
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
        float* B = begin_trainable(bn, {lora_out, d.R}, l, true, &lin->B, &lin->dB);
        std::memset(B, 0, size_t(lora_out) * d.R * sizeof(float));
        finish_trainable();
      }
      if (!full && is_trainable(an) && opts_.lora.use_dora) {
        float* M = begin_trainable(peft_mag_name(l, p), {out}, l, true, &lin->mag, &lin->dmag);
        std::memcpy(M, lin->norm, size_t(out) * sizeof(float));
        finish_trainable();
      }
      linears_.push_back(std::move(lin));
    }
  }
  load("model.norm.weight", {C}, -1, false, &final_norm_, &d_final_norm_);
  if (head16) {  // tied: the embedding's bf16 table serves as the lm_head too
    lm_head16_ = cfg_.tie_embeddings ? embed16_ : load_half("lm_head.weight", V, C);
    lm_head_ = d_lm_head_ = nullptr;
  } else if (cfg_.tie_embeddings) {
    lm_head_ = embed_;
    d_lm_head_ = d_embed_;
    if (!params_.empty() && params_[0].name == "model.embed_tokens.weight")  // one tensor, two names
      store_->add_pointers(0, &lm_head_, &d_lm_head_);
  } else {
    load("lm_head.weight", {V, C}, -1, true, &lm_head_, &d_lm_head_);
  }
  if (bf16_head_copy(cfg_, opts_))  // filled from lm_head_ by refresh_working_copies()
    lm_head16_ = arenas_.get_as<uint16_t>(half_buffer_name(head_table_name(cfg_), opts_.precision));
  // LoRA+: PEFT's B groups ("lora_B" in the name, or a 1-D tensor) at lr · ratio
  if (!full && opts_.loraplus_lr_ratio > 0)
    for (auto& p : params_)
      if (p.name.find("lora_B") != std::string::npos || p.shape.size() == 1) p.lr_factor = opts_.loraplus_lr_ratio;
  // units: each one's tensors are contiguous in params_ (registered in execution order)
  store_->attach(params_, d.L + 2);
  store_->set_backward_reads_params(0, false);  // the embedding's backward scatters gradients only
  rope_.emplace(cfg_);
  std::copy(rope_->inv_freq().begin(), rope_->inv_freq().end(), inv_freq_);
  for (int l = 0; l < d.L && inv_freq_local_; ++l)
    if (cfg_.local_rope(l)) {  // Gemma 3's sliding layers: default RoPE with their own base
      const auto local = rope_inv_freq(layer_rope_config(cfg_, l), 0);
      std::copy(local.begin(), local.end(), inv_freq_local_);
      break;
    }

  recompute_ = recompute_layers(cfg_, opts_);
  for (int l = 0; l < d.L; ++l) {
    auto a = std::make_unique<LayerActs>();
    std::fill(std::begin(a->xa), std::end(a->xa), nullptr);
    for (const auto& b : BufferTable::acts(d, adapted_modules(cfg_, opts_, l)))
      b.bind(*a, arenas_.get(act_buffer_name(l, b, recompute_[l])), half_ != DType::F32 ? half_x_ : nullptr,
             attn_qkv_, mlp_gate_up_);  // null without bf16_attention() / precision bf16
    acts_.push_back(std::move(a));
  }
  refresh_working_copies();
  if (frozen && !borrowed) {  // converted once; read-only for this model and every borrower
    frozen->arenas.seal(Category::FrozenWeights);
    frozen->filled = true;
  } else if (frozen) {
    ++frozen->borrowers;
  }
}

size_t TrainModel::trainable_count() const {
  size_t n = 0;
  for (const auto& p : params_) n += p.n;
  return n;
}

void TrainModel::lora_tensors(int layer, const std::string& module, float** A, float** B) const {
  const std::optional<Proj> p = parse_fused_proj(module) ? parse_fused_proj(module) : parse_proj(module);
  LT_CHECK(p && layer >= 0 && layer < cfg_.n_layers, "no linear module {} in layer {}", module, layer);
  const Linear& lin = linear(layer, *p);
  *A = lin.A;
  *B = lin.B;
}

// PiSSA / OLoRA (core/lora_init.h): A₀, B₀ computed into their planned copies from the f32 frozen W,
// which becomes W − s·B₀·A₀, then copied into the trainable A and B.
template <class Begin, class Finish>
void TrainModel::init_mutating_lora(Linear& lin, const std::string& an, const std::string& bn, Begin& begin,
                                    Finish& finish) {
  const LoraConfig& lc = opts_.lora;
  const int R = lc.r;
  LT_ASSERT(lin.w && !lin.w16 && !lin.q);  // validate_lora_variants: f32 weights only
  float* A0 = arenas_.get_as<float>(lora_init_name(an));
  float* B0 = arenas_.get_as<float>(lora_init_name(bn));
  if (lc.init == "olora") olora_init(lin.w, lin.out, lin.in, R, lc.scaling(), A0, B0);
  else pissa_init(lin.w, lin.out, lin.in, R, lc.scaling(), lc.pissa_niter(),
                  lora_mix64(opts_.seed ^ uint64_t(lin.layer * 7 + int(lin.p) + 1)), A0, B0);
  float* A = begin(an, std::vector<int64_t>{R, lin.in}, lin.layer, true, &lin.A, &lin.dA);
  std::memcpy(A, A0, size_t(R) * lin.in * sizeof(float));
  finish();
  float* B = begin(bn, std::vector<int64_t>{lin.out, R}, lin.layer, true, &lin.B, &lin.dB);
  std::memcpy(B, B0, size_t(lin.out) * R * sizeof(float));
  finish();
}

const float* TrainModel::initial_lora(const std::string& name) const {
  return opts_.lora.mutates_base() ? arenas_.get_as<float>(lora_init_name(name)) : nullptr;
}

void TrainModel::load_lora(const TensorSet& adapter) {
  LT_CHECK(!opts_.store_params, "load_lora: the parameters are sharded (ZeRO stage 3); load the adapter through the "
           "sharded checkpoint instead");
  // every A, B and DoRA magnitude by its PEFT name (Phi-3: the fused modules' tensors)
  for (auto& p : params_) {
    const bool lora = p.name.find(".lora_A.") != std::string::npos || p.name.find(".lora_B.") != std::string::npos ||
                      p.name.find(".lora_magnitude_vector") != std::string::npos;
    if (!lora) continue;
    const TensorInfo& t = adapter.get(p.name, p.shape);
    convert_to_f32(p.p, t.data, t.dtype, size_t(t.numel()));
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

void TrainModel::zero_grads() {
  for (auto& p : params_)
    if (p.g) std::memset(p.g, 0, p.n * sizeof(float));
  refresh_working_copies();
}

void TrainModel::refresh_working_copies() {
  if (lm_head16_ && lm_head_) ops_.round_half(half_, lm_head16_, nullptr, lm_head_, size_t(cfg_.vocab_size) * cfg_.dim);
  for (auto& lin : linears_) {
    const size_t n = size_t(lin->out) * lin->in;
    if (lin->w && lin->w16) ops_.round_half(half_, lin->w16, nullptr, lin->w, n);
    if (lin->w && lin->wq) fake_quantize_int4(lin->wq, lin->w, int64_t(n), opts_.qat_group_size, *opts_.qat);
  }
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
  bool lora16;                  // bf16_lora(): the LoRA products in bf16
  bool quant16;                 // quant_bf16_products(): a quantized base's products in bf16
  const LinearScratch& scratch;

  uint64_t key(const Linear& L, uint64_t step) const {
    return lora_mix64(seed ^ lora_mix64(step * 131 + uint64_t(L.layer) * 7 + uint64_t(L.mask_p)));
  }
  LinearWeights weights(const Linear& L, uint64_t step) const {
    LinearWeights w;
    w.w = L.view(half, int8_threshold);
    w.w.bf16_products = quant16 && w.w.quantized();
    w.bias = L.b;
    if (L.A) w.lora = {R, L.A, L.B, s, p, key(L, step), L.mag, L.mag ? L.norm : nullptr};
    w.lora.bf16 = lora16 && L.A && (L.w16 || L.q) && !L.w && !L.mag && p <= 0;  // a frozen base (bf16_lora)
    return w;
  }
  // out (N, out) = x·Wᵀ + b + s·(xd·Aᵀ)·Bᵀ ; xa[L.p] (N, R) saved. With a 16-bit weight x16
  // holds x in 16 bits and x the same values in f32.
  void forward(float* out, const float* x, const uint16_t* x16, const Linear& L, float* const* xa,
               uint64_t step) const {
    const LinearWeights w = weights(L, step);
    if (L.mag) dora_weight_norm(L.norm, w.w, w.lora);  // DoRA: this step's norm, a constant for the backward
    ops.linear_forward(out, xa[size_t(L.p)], {x, x16, N}, w, scratch);
  }
  // gate and up (Ops::gate_up_swiglu) and the SwiGLU after them in one pass; false: not here
  bool gate_up(const GluOutputs& o, const float* x, const uint16_t* x16, const Linear& g, const Linear& u,
               float* const* xa, uint64_t step) const {
    if (!ops.gate_up_swiglu || g.mag || u.mag) return false;
    return ops.gate_up_swiglu(o, xa[size_t(g.p)], xa[size_t(u.p)], {x, x16, N}, weights(g, step), weights(u, step),
                              scratch);
  }
  // dx (N, in) += dout·W + s·((dout·B)·A)∘mask ; dW, db, dA, dB accumulate when present
  void backward(float* dx, const float* dout, const float* x, const uint16_t* x16, const Linear& L, float* const* xa,
                uint64_t step) const {
    const LinearWeights w = weights(L, step);
    LinearGrads g{L.dw, L.db, L.dA, L.dB, L.dmag};
    if (dx) {
      tops.linear_backward_input(dx, dout, N, w, scratch);
      if (L.A && !L.mag) g.lora_g = scratch.lora_g;  // dout·B, left there by the input's backward
      if (w.lora.bf16) g.dout16 = static_cast<const uint16_t*>(scratch.dy);  // bf16(dout), likewise
    }
    tops.linear_backward_weight(g, dout, {x, x16, N}, xa[size_t(L.p)], w, scratch);
  }
};
}  // namespace

// The attention of a layer: with bf16_attention() q, k, v are rounded to bf16 and saved so, and the
// bf16 kernels run where the TrainOps table has them; elsewhere (ref, LEANTUNE_ISA below avx512, no
// AVX512-BF16, a head size they decline, soft-capped scores) the f32 kernels run on the same
// rounded values, widened.
namespace {
struct BoundAttentionWorkspace {  // the planned workspace, this thread's for one attention call
  BoundAttentionWorkspace(void* buf, size_t bytes) { bind_attention_workspace(buf, bytes); }
  ~BoundAttentionWorkspace() { bind_attention_workspace(nullptr, 0); }
};
}  // namespace

void TrainModel::round_qkv(LayerActs& a) {
  if (!a.q_h) return;
  const Dims d = dims_of(cfg_, opts_);
  ops_.round_half(DType::BF16, a.q_h, a.q, a.q, size_t(N_) * d.QD);
  ops_.round_half(DType::BF16, a.k_h, a.k, a.k, size_t(N_) * d.KVD);
  ops_.round_half(DType::BF16, a.v_h, a.v, a.v, size_t(N_) * d.KVD);
}

void TrainModel::attention_forward(LayerActs& a, const int* key_start) {
  const Dims d = dims_of(cfg_, opts_);
  const BoundAttentionWorkspace bound(attn_ws_, attn_ws_bytes_);
  const float cap = cfg_.attn_softcap;
  round_qkv(a);
  if (a.q_h) {
    if (cap <= 0 && tops_.attention_train_forward_bf16 &&
        tops_.attention_train_forward_bf16(a.att, a.lse, a.q_h, a.k_h, a.v_h, key_start, N_, d.NH, d.NKV, d.HS))
      return;
  }
  if (cap > 0)
    tops_.attention_softcap_train_forward(a.att, a.lse, a.q, a.k, a.v, key_start, N_, d.NH, d.NKV, d.HS, cap);
  else
    tops_.attention_train_forward(a.att, a.lse, a.q, a.k, a.v, key_start, N_, d.NH, d.NKV, d.HS);
}

// d_q_, d_k_, d_v_ += the attention's input gradients for d_att_ (a.att holds the saved output).
void TrainModel::attention_backward(LayerActs& a, const int* key_start) {
  const Dims d = dims_of(cfg_, opts_);
  const BoundAttentionWorkspace bound(attn_ws_, attn_ws_bytes_);
  const float cap = cfg_.attn_softcap;
  if (a.q_h) {
    if (cap <= 0 && tops_.attention_backward_bf16 &&
        tops_.attention_backward_bf16(d_q_, d_k_, d_v_, d_att_, a.q_h, a.k_h, a.v_h, a.att_h, a.lse, key_start, N_,
                                      d.NH, d.NKV, d.HS, attn_ds_, attn_ds_bytes_))
      return;
    ops_.widen_half(DType::BF16, a.q, a.q_h, size_t(N_) * d.QD);
    ops_.widen_half(DType::BF16, a.k, a.k_h, size_t(N_) * d.KVD);
    ops_.widen_half(DType::BF16, a.v, a.v_h, size_t(N_) * d.KVD);
  }
  if (cap > 0)
    tops_.attention_softcap_backward(d_q_, d_k_, d_v_, d_att_, a.q, a.k, a.v, a.att, a.lse, key_start, N_, d.NH,
                                     d.NKV, d.HS, cap);
  else
    tops_.attention_backward(d_q_, d_k_, d_v_, d_att_, a.q, a.k, a.v, a.att, a.lse, key_start, N_, d.NH, d.NKV,
                             d.HS, attn_ds_, attn_ds_bytes_);
}

void TrainModel::layer_forward(int l, LayerActs& a, const BatchView& b, uint64_t step, int parts) {
  const Dims d = dims_of(cfg_, opts_);
  const int N = N_;
  const bool il = cfg_.rope_layout == RopeLayout::Interleaved;
  const LinearRunner lr{ops_, tops_, N, d.R, opts_.lora.scaling(), opts_.lora.dropout, opts_.seed,
                        opts_.int8_threshold, half_, bf16_lora(cfg_, opts_), quant_bf16_products(cfg_, opts_),
                        lin_scratch_};
  auto lin = [&](Proj p) -> const Linear& { return linear(l, p); };
  // mixed precision: a GEMM input computed in f32 is rounded in place and stored in 16 bits
  auto store = [&](uint16_t* x16, float* x32, int cols) {
    if (x16) ops_.round_half(half_, x16, x32, x32, size_t(N) * cols);
  };
  const float* x = res_[l];
  const float* rope_cs = cfg_.local_rope(l) ? rope_cs_local_ : rope_cs_;
  if (parts & 1) {
  ops_.rmsnorm_forward(a.xn1, a.rstd1, x, norm_weight(attn_norm_[l], d.C), N, d.C, cfg_.norm_eps);
  store(a.xn1_h, a.xn1, d.C);
  lr.forward(d.qk_norm ? a.q_pre : a.q, a.xn1, a.xn1_h, lin(Proj::Q), a.xa, step);
  lr.forward(d.qk_norm ? a.k_pre : a.k, a.xn1, a.xn1_h, lin(Proj::K), a.xa, step);
  lr.forward(a.v, a.xn1, a.xn1_h, lin(Proj::V), a.xa, step);
  if (d.qk_norm) {  // Qwen3, Gemma 3: each head's q and k RMS-normalized over HS
    ops_.rmsnorm_forward(a.q, a.rstd_q, a.q_pre, norm_weight(q_norm_[l], d.HS), N * d.NH, d.HS, cfg_.norm_eps);
    ops_.rmsnorm_forward(a.k, a.rstd_k, a.k_pre, norm_weight(k_norm_[l], d.HS), N * d.NKV, d.HS, cfg_.norm_eps);
  }
  ops_.rope_apply(a.q, rope_cs, N, d.NH, d.HS, il);
  ops_.rope_apply(a.k, rope_cs, N, d.NKV, d.HS, il);
  scale_queries(a.q, size_t(N) * d.QD, cfg_, l);  // yarn / longrope attention factor, query_pre_attn_scalar
  if (parts & 4) {  // a replay: the attention's out and lse are saved (kAttentionCore), q, k, v rounded
    round_qkv(a);   // as attention_forward rounds them, out widened for the o projection's f32 reads
    if (a.att_h) ops_.widen_half(half_, a.att, a.att_h, size_t(N) * d.QD);
  } else {
    attention_forward(a, key_start(l, b));
    store(a.att_h, a.att, d.QD);
  }
  if (d.sandwich) {  // Gemma: x_mid = x + rmsnorm(o_proj(att))
    lr.forward(a.o_out, a.att, a.att_h, lin(Proj::O), a.xa, step);
    ops_.rmsnorm_forward(a.x_mid, a.rstd_po, a.o_out, norm_weight(post_attn_norm_[l], d.C), N, d.C, cfg_.norm_eps);
  } else {
    lr.forward(a.x_mid, a.att, a.att_h, lin(Proj::O), a.xa, step);
  }
  ops_.add_inplace(a.x_mid, x, size_t(N) * d.C);
  } else if (parts & 8) {  // xn1 again from the saved res[l] (recompute_layers)
    ops_.rmsnorm_forward(a.xn1, a.rstd1, x, norm_weight(attn_norm_[l], d.C), N, d.C, cfg_.norm_eps);
    store(a.xn1_h, a.xn1, d.C);
  }
  auto mlp_act = [&] {  // h = act(gate) · up
    if (cfg_.mlp_act == MlpAct::GeluTanh) ops_.geglu_forward(a.h, a.gate, a.up, N, d.F);
    else ops_.swiglu_forward(a.h, a.gate, a.up, N, d.F);
    store(a.h_h, a.h, d.F);
  };
  // mixed precision SwiGLU: the roundings (or widenings) of gate, up and h in its one pass (ops.h)
  const bool fused_act = cfg_.mlp_act != MlpAct::GeluTanh && a.h_h && a.gate_h && a.up_h;
  if (!(parts & 2)) {
    if (parts & 8) {  // xn2 again from the saved x_mid
      ops_.rmsnorm_forward(a.xn2, a.rstd2, a.x_mid, norm_weight(ffn_norm_[l], d.C), N, d.C, cfg_.norm_eps);
      store(a.xn2_h, a.xn2, d.C);
    }
    if (parts & 4 && fused_act) {  // h16 again from the saved gate and up, these left in f32 for a
      // backward that reads f32 (h in f32: the backward widens h16 itself)
      float* g32 = half_ == DType::BF16 && tops_.swiglu_backward_bf16 ? nullptr : a.gate;
      float* u32 = g32 ? a.up : nullptr;
      ops_.swiglu_forward_half(half_, HalfInputs::Widen, nullptr, a.h_h, g32, a.gate_h, u32, a.up_h, N, d.F);
    } else if (parts & 4) {  // (recompute_layers)
      if (a.gate_h) ops_.widen_half(half_, a.gate, a.gate_h, size_t(N) * d.F);
      if (a.up_h) ops_.widen_half(half_, a.up, a.up_h, size_t(N) * d.F);
      mlp_act();
    }
    return;
  }
  ops_.rmsnorm_forward(a.xn2, a.rstd2, a.x_mid, norm_weight(ffn_norm_[l], d.C), N, d.C, cfg_.norm_eps);
  store(a.xn2_h, a.xn2, d.C);
  // the fused pass writes only what is read: h16 for down (h in f32 too where down's LoRA reads it: not
  // bf16 LoRA), and the 16-bit gate and up the backward reads (swiglu_backward_bf16) unless the
  // backward replays this MLP (h itself is always recomputed from them: recompute_layers)
  const Linear& down_l = lin(Proj::Down);
  const bool h32 = down_l.A && !lr.weights(down_l, step).lora.bf16, gu16 = (parts & 4) || !(recompute_[l] & 2);
  const GluOutputs glu{a.h_h, h32 ? a.h : nullptr, gu16 ? a.gate_h : nullptr, gu16 ? a.up_h : nullptr, nullptr,
                       nullptr, d.F};
  if (fused_act && lr.gate_up(glu, a.xn2, a.xn2_h, lin(Proj::Gate), lin(Proj::Up), a.xa, step)) {
  } else {
  lr.forward(a.gate, a.xn2, a.xn2_h, lin(Proj::Gate), a.xa, step);
  lr.forward(a.up, a.xn2, a.xn2_h, lin(Proj::Up), a.xa, step);
  if (fused_act) {  // a replay leaves gate and up rounded in f32 for the backward, a first pass unrounded
    const HalfInputs in = parts & 4 ? HalfInputs::RoundInPlace : HalfInputs::Round;  // (nothing reads them)
    ops_.swiglu_forward_half(half_, in, a.h, a.h_h, a.gate, a.gate_h, a.up, a.up_h, N, d.F);
  } else {
    store(a.gate_h, a.gate, d.F);  // bf16: rounded in place, so the activation sees what the backward will
    store(a.up_h, a.up, d.F);
    mlp_act();
  }
  }
  const Linear& down = lin(Proj::Down);
  if ((parts & 4) && !d.sandwich && !down.mag) {  // a replay: res[l + 1] is saved; the backward needs
    if (down.A) lr.forward(nullptr, a.h, a.h_h, down, a.xa, step);  // only the down LoRA's xa
    return;
  }
  float* y = res_[l + 1];
  if (d.sandwich) {  // Gemma: y = x_mid + rmsnorm(down_proj(h))
    lr.forward(a.down_out, a.h, a.h_h, lin(Proj::Down), a.xa, step);
    ops_.rmsnorm_forward(y, a.rstd_pf, a.down_out, norm_weight(post_ffn_norm_[l], d.C), N, d.C, cfg_.norm_eps);
  } else {
    lr.forward(y, a.h, a.h_h, lin(Proj::Down), a.xa, step);
  }
  ops_.add_inplace(y, a.x_mid, size_t(N) * d.C);
}

const float* TrainModel::norm_weight(const float* w, int n) {
  if (!cfg_.norm_offset) return w;
  for (int i = 0; i < n; ++i) norm_eff_[i] = 1.0f + w[i];
  return norm_eff_;
}

void TrainModel::layer_backward(int l, LayerActs& a, const BatchView& b, uint64_t step) {
  const Dims d = dims_of(cfg_, opts_);
  const int N = N_;
  const TrainOps& t = tops_;
  const bool il = cfg_.rope_layout == RopeLayout::Interleaved;
  const LinearRunner lr{ops_, tops_, N, d.R, opts_.lora.scaling(), opts_.lora.dropout, opts_.seed,
                        opts_.int8_threshold, half_, bf16_lora(cfg_, opts_), quant_bf16_products(cfg_, opts_),
                        lin_scratch_};
  auto lin = [&](Proj p) -> const Linear& { return linear(l, p); };
  const size_t NC = size_t(N) * d.C;
  // mixed precision: a saved 16-bit GEMM input widened back into the shared f32 buffer
  auto load = [&](const uint16_t* x16, float* x32, int cols) {
    if (x16) ops_.widen_half(half_, x32, x16, size_t(N) * cols);
  };
  const float* rope_cs = cfg_.local_rope(l) ? rope_cs_local_ : rope_cs_;
  // Gemma: the gradient of an output norm's input (o_out / down_out) into d_xn_, from d_res_
  auto post_norm_backward = [&](float* dw, const float* x, const float* w, const float* rstd) {
    std::memset(d_xn_, 0, NC * sizeof(float));
    t.rmsnorm_backward(d_xn_, dw, d_res_, x, norm_weight(w, d.C), rstd, N, d.C);
    return d_xn_;
  };
  // MLP: d_res is the gradient of res[l+1]
  std::memset(d_h_, 0, size_t(N) * d.F * sizeof(float));
  load(a.h_h, a.h, d.F);
  const float* d_down = d.sandwich ? post_norm_backward(d_post_ffn_norm_[l], a.down_out, post_ffn_norm_[l], a.rstd_pf)
                                   : d_res_;
  lr.backward(d_h_, d_down, a.h, a.h_h, lin(Proj::Down), a.xa, step);
  // gate and up: in bf16 (saved, or left by the replay; bf16 training), else in f32, left there by
  // the replay that recomputed h (recompute_layers). From f32, d_up overwrites d_h and d_gate the gate
  // activation in place (each element of both is read before it is written; nothing reads the gate
  // after this). (d_gate written over h instead made the pass three times slower on a 2-vCPU Zen 4.)
  float* d_up = d_h_;
  float* d_gate = a.gate;
  if (cfg_.mlp_act == MlpAct::GeluTanh) {
    t.geglu_backward(d_gate, d_up, d_h_, a.gate, a.up, N, d.F);
  } else if (half_ == DType::BF16 && a.gate_h && a.up_h && t.swiglu_backward_bf16) {
    d_up = a.up;  // from the 16-bit gate and up (the rounded f32 ones' bits), into gate and up's f32
    t.swiglu_backward_bf16(d_gate, d_up, d_h_, a.gate_h, a.up_h, N, d.F);
  } else {
    t.swiglu_backward(d_gate, d_up, d_h_, a.gate, a.up, N, d.F);
  }
  std::memset(d_xn_, 0, NC * sizeof(float));
  load(a.xn2_h, a.xn2, d.C);
  lr.backward(d_xn_, d_gate, a.xn2, a.xn2_h, lin(Proj::Gate), a.xa, step);
  lr.backward(d_xn_, d_up, a.xn2, a.xn2_h, lin(Proj::Up), a.xa, step);
  t.rmsnorm_backward(d_res_, d_ffn_norm_[l], d_xn_, a.x_mid, norm_weight(ffn_norm_[l], d.C), a.rstd2, N,
                     d.C);  // now d x_mid
  // attention
  std::memset(d_att_, 0, size_t(N) * d.QD * sizeof(float));
  load(a.att_h, a.att, d.QD);
  const float* d_o = d.sandwich ? post_norm_backward(d_post_attn_norm_[l], a.o_out, post_attn_norm_[l], a.rstd_po)
                                : d_res_;
  lr.backward(d_att_, d_o, a.att, a.att_h, lin(Proj::O), a.xa, step);
  std::memset(d_q_, 0, size_t(N) * d.QD * sizeof(float));
  std::memset(d_k_, 0, size_t(N) * d.KVD * sizeof(float));
  std::memset(d_v_, 0, size_t(N) * d.KVD * sizeof(float));
  attention_backward(a, key_start(l, b));
  scale_queries(d_q_, size_t(N) * d.QD, cfg_, l);  // the query factor's gradient
  t.rope_apply_backward(d_q_, rope_cs, N, d.NH, d.HS, il);
  t.rope_apply_backward(d_k_, rope_cs, N, d.NKV, d.HS, il);
  std::memset(d_xn_, 0, NC * sizeof(float));
  load(a.xn1_h, a.xn1, d.C);
  if (d.qk_norm) {
    // Qwen3: through the per-head RMSNorms first; d_att_ (read by the attention backward above)
    // holds the gradient of each projection's output in turn
    std::memset(d_att_, 0, size_t(N) * d.QD * sizeof(float));
    t.rmsnorm_backward(d_att_, d_q_norm_[l], d_q_, a.q_pre, norm_weight(q_norm_[l], d.HS), a.rstd_q, N * d.NH, d.HS);
    lr.backward(d_xn_, d_att_, a.xn1, a.xn1_h, lin(Proj::Q), a.xa, step);
    std::memset(d_att_, 0, size_t(N) * d.KVD * sizeof(float));
    t.rmsnorm_backward(d_att_, d_k_norm_[l], d_k_, a.k_pre, norm_weight(k_norm_[l], d.HS), a.rstd_k, N * d.NKV,
                       d.HS);
    lr.backward(d_xn_, d_att_, a.xn1, a.xn1_h, lin(Proj::K), a.xa, step);
  } else {
    lr.backward(d_xn_, d_q_, a.xn1, a.xn1_h, lin(Proj::Q), a.xa, step);
    lr.backward(d_xn_, d_k_, a.xn1, a.xn1_h, lin(Proj::K), a.xa, step);
  }
  lr.backward(d_xn_, d_v_, a.xn1, a.xn1_h, lin(Proj::V), a.xa, step);
  t.rmsnorm_backward(d_res_, d_attn_norm_[l], d_xn_, res_[l], norm_weight(attn_norm_[l], d.C), a.rstd1, N,
                     d.C);  // now d res[l]
}

void TrainModel::check_batch(const BatchView& b) const {
  for (int i = 0; i < N_; ++i) {
    LT_CHECK(b.tokens[i] >= 0 && b.tokens[i] < cfg_.vocab_size, "token id {} at batch position {} is outside the "
             "vocabulary ({})", b.tokens[i], i, cfg_.vocab_size);
    LT_CHECK(b.doc_start[i] >= 0 && b.doc_start[i] <= i, "doc_start[{}] = {} is not in [0, {}]", i, b.doc_start[i], i);
    LT_CHECK(b.positions[i] >= 0 && b.positions[i] < cfg_.max_seq_len, "position {} at batch position {} is past the "
             "model's context ({})", b.positions[i], i, cfg_.max_seq_len);
  }
}

const int* TrainModel::key_start(int l, const BatchView& b) const {
  return window_start_ && cfg_.attention_window(l) > 0 ? window_start_ : b.doc_start;
}

// One pass, as llm.c's forward and backward: each unit between the store's before / after hooks
// (units: 0 embedding, l+1 layer l, L+1 final norm and lm_head; a tied lm_head is unit 0).
float TrainModel::run(const BatchView& b, float loss_scale, bool backward, uint64_t step) {
  check_batch(b);
  // dynamic / longrope: the pass's frequencies from its largest position (transformers' per-call update)
  if (rope_->update(*std::max_element(b.positions, b.positions + N_)))
    std::copy(rope_->inv_freq().begin(), rope_->inv_freq().end(), inv_freq_);
  ops_.rope_table(rope_cs_, b.positions, inv_freq_, N_, cfg_.head_dim);
  if (rope_cs_local_) ops_.rope_table(rope_cs_local_, b.positions, inv_freq_local_, N_, cfg_.head_dim);
  // sliding layers: query i attends keys max(its document's start, i - W + 1)..i; the attention
  // kernels skip the key tiles before a query tile's starts
  if (window_start_)
    for (int i = 0; i < N_; ++i) window_start_[i] = std::max(b.doc_start[i], i - cfg_.sliding_window + 1);
  const Dims d = dims_of(cfg_, opts_);
  const int N = N_, head = d.L + 1, lm = cfg_.tie_embeddings ? 0 : head;
  const TrainOps& t = tops_;
  UnitStore& s = *store_;
  s.begin_pass(backward);
  s.before(0, Pass::Forward);
  if (embed16_) {  // bf16 table: each token's row widened (exact)
    for (int i = 0; i < N; ++i)
      ops_.widen_half(DType::BF16, res_[0] + size_t(i) * d.C, embed16_ + size_t(b.tokens[i]) * d.C, size_t(d.C));
  } else {
    ops_.embedding_forward(res_[0], b.tokens, embed_, N, d.C);
  }
  if (cfg_.embed_scale != 1.0f)  // Gemma: times sqrt(C)
    for (size_t i = 0; i < size_t(N) * d.C; ++i) res_[0][i] *= cfg_.embed_scale;
  s.after(0, Pass::Forward);
  for (int l = 0; l < d.L; ++l) {
    s.before(l + 1, Pass::Forward);
    layer_forward(l, *acts_[l], b, step);
    s.after(l + 1, Pass::Forward);
    if (ledger_) ledger_->mark("forward", l);
  }
  s.before(head, Pass::Forward);
  ops_.rmsnorm_forward(xnf_, rstdf_, res_[d.L], norm_weight(final_norm_, d.C), N, d.C, cfg_.norm_eps);
  s.after(head, Pass::Forward);
  // the chunked lm_head + cross-entropy; with backward it also writes d_lm_head and d_xnf
  const Pass loss_pass = backward ? Pass::Loss : Pass::Forward;
  s.before(lm, loss_pass);
  const int chunk = loss_chunk_rows(cfg_, opts_);
  const float loss =
      lm_head16_ ? t.lm_head_loss_bf16(backward ? d_xnf_ : nullptr, backward ? d_lm_head_ : nullptr, logits_chunk_, loss_x16_, xnf_, lm_head16_,
                                       b.labels, N, d.C, d.V, chunk, loss_scale)
      : cfg_.final_softcap > 0
          ? t.lm_head_loss_softcap(backward ? d_xnf_ : nullptr, backward ? d_lm_head_ : nullptr, logits_chunk_, xnf_,
                                   lm_head_, b.labels, N, d.C, d.V, chunk, loss_scale, cfg_.final_softcap)
          : t.lm_head_loss(backward ? d_xnf_ : nullptr, backward ? d_lm_head_ : nullptr, logits_chunk_, xnf_,
                           lm_head_, b.labels, N, d.C, d.V, chunk, loss_scale);
  s.after(lm, loss_pass);
  if (ledger_) ledger_->mark("loss");
  if (backward) {
    std::memset(d_res_, 0, size_t(N) * d.C * sizeof(float));
    s.before(head, Pass::Backward);
    t.rmsnorm_backward(d_res_, d_final_norm_, d_xnf_, res_[d.L], norm_weight(final_norm_, d.C), rstdf_, N, d.C);
    s.after(head, Pass::Backward);
    for (int l = d.L - 1; l >= 0; --l) {
      s.before(l + 1, Pass::Backward);
      if (recompute_[l]) layer_forward(l, *acts_[l], b, step, recompute_[l]);
      layer_backward(l, *acts_[l], b, step);
      s.after(l + 1, Pass::Backward);
      if (ledger_) ledger_->mark("backward", l);
    }
    s.before(0, Pass::Backward);
    if (d_embed_ && cfg_.embed_scale != 1.0f)  // Gemma: the scale's gradient
      for (size_t i = 0; i < size_t(N) * d.C; ++i) d_res_[i] *= cfg_.embed_scale;
    if (d_embed_) t.embedding_backward(d_embed_, d_res_, b.tokens, N, d.C);
    s.after(0, Pass::Backward);
  }
  s.end_pass();
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
  return run({tokens, labels, positions, doc_start}, loss_scale, true, dropout_step);
}

float TrainModel::forward_loss(const int* tokens, const int* labels, const int* positions, const int* doc_start) {
  // evaluation: LoRA dropout off
  float p = opts_.lora.dropout;
  opts_.lora.dropout = 0;
  float loss = run({tokens, labels, positions, doc_start}, 1.0f, false, 0);
  opts_.lora.dropout = p;
  return loss;
}

}  // namespace lt
