// TrainModel: the Llama-family forward and backward for fine-tuning, full or LoRA, over a packed
// micro-batch of N = B*T tokens with document masking (DESIGN.md §2-5). Every buffer — frozen and
// trainable weights, gradients, AdamW moments, saved activations, checkpoint recompute scratch,
// the loss chunk — comes from plan_training(), built before anything is allocated; a step
// allocates nothing. A pass calls its UnitStore (train/unit_store.h) before and after each unit
// (embedding, decoder layer, head); under ZeRO stages 2-3 the store's sharding strategy holds the
// trainable tensors' gradients (and parameters) and hands them out unit by unit during the pass.
// Dimension letters: N tokens in the micro-batch, C, QD = NH*HS, KVD = NKV*HS, F, V, R LoRA rank.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/memory_plan.h"
#include "io/tensor_set.h"
#include "kernels/backward.h"
#include "kernels/ops.h"
#include "core/model_config.h"
#include "core/rope_freqs.h"
#include "quant/quant_tensor.h"
#include "core/lora_config.h"
#include "core/train_types.h"
#include "train/grad_topk.h"
#include "train/unit_store.h"

namespace lt {

// None: every activation saved. EveryK: blocks l % k == 0 keep only their input and replay their
// whole forward before their backward (k = 1: every block). Attention / Mlp (selective): every
// block keeps its MLP / attention internals and recomputes only the attention / MLP internals.
enum class Checkpointing { None, EveryK, Attention, Mlp };

struct TrainModelOptions {
  Method method = Method::Lora;
  LoraConfig lora;
  int micro_batch = 1;           // B
  int seq_len = 256;             // T
  Checkpointing checkpointing = Checkpointing::None;
  int checkpoint_every = 1;      // with EveryK: blocks l with l % k == 0 are recomputed in backward
  bool freeze_embeddings = false;  // full fine-tuning only
  bool freeze_lm_head = false;     // full fine-tuning only (tied: follows freeze_embeddings)
  int loss_chunk = 0;            // rows of logits computed at a time; 0: loss_chunk_rows' default
  uint64_t seed = 0;             // LoRA init and dropout masks
  // Frozen linear weights (q, k, v, o, gate, up, down) stored quantized, LoRA only (QLoRA):
  // nf4 | fp4 | int8, quantized on load; nullopt: none. A base model stored quantized
  // (ModelConfig::quantization) is used as stored; none or its own format is accepted then.
  Quantization quantization;
  int quant_blocksize = 64;      // 4-bit: a power of two in [64, 4096]
  bool double_quant = false;     // 4-bit: absmax values quantized to 8 bits
  float int8_threshold = 6.0f;   // LLM.int8 outlier threshold (0: none)
  // false: the AdamW moments live outside the model (ZeRO shards, disk offload; dist/zero.h): the
  // plan lists none and TrainParam::m / v are null.
  bool optimizer_state = true;
  // true: the trainable tensors' parameters / gradients live in the sharding strategy of the
  // UnitStore given to the constructor (ZeRO stage 3 / 2, dist/zero.h): the plan lists none of
  // those buffers.
  bool store_params = false;
  bool store_grads = false;
  // Mixed precision: fp32 | bf16 | fp16. bf16 / fp16 store the frozen linear weights (LoRA;
  // a quantized base stays quantized), a working copy of each trainable linear weight (full) and
  // the saved GEMM inputs (xn1, att, xn2, h) in that type, and run those linears' GEMMs with f32
  // accumulation (kernels/linear.h); masters, gradients, AdamW moments and LoRA A/B stay f32.
  Precision precision = Precision::FP32;
  // precision bf16 only (else F32 / Auto): the attention's operands, see bf16_attention().
  AttentionPrecision attention_precision = AttentionPrecision::Auto;
  // LoRA+ (PEFT's create_loraplus_optimizer): > 0 multiplies the lr of the tensors PEFT puts in its
  // B groups (every lora_B, and every 1-D tensor: trained biases, DoRA magnitudes) by this ratio;
  // 0: off. Sets TrainParam::lr_factor, which the sharding strategies apply.
  float loraplus_lr_ratio = 0.0f;
  // INT4 quantization-aware training (full fine-tuning, fp32): Int4 or Int4Asym; nullopt: off. Each
  // linear's forward and input gradient use its f32 master weight fake-quantized in blocks of
  // qat_group_size (quant/int4.h: the values the exported 4-bit model decodes to), refreshed by
  // zero_grads(); the weight gradient goes to the master unchanged (straight-through).
  Quantization qat;
  int qat_group_size = 32;
  // Top-k gradient sparsification (train/grad_topk.h; fraction 0: off): the plan lists each
  // trainable tensor's error-feedback residuals (one per emulated worker) and AdamW ages as
  // OptimizerState rows, whoever holds the moments; TrainParam::topk_residual / topk_age point at them.
  TopkOptions topk;
  // Adaptive LoRA rank (train/adaptive_rank.h): the plan lists each adapted module's importance
  // state as persistent OptimizerState rows, "rank_ema1.<module>" and "rank_ema2.<module>"
  // (A's then B's entries) and "rank_mask.<module>" (r floats); TrainParam::rank points at them.
  bool adaptive_rank = false;
};

// The 16-bit storage type of a precision: BF16 for bf16, F16 for fp16, F32 for fp32.
DType precision_dtype(Precision precision);

// Whether a run saves q, k, v in bf16 and runs the bf16 attention: precision bf16 and
// attention_precision bf16, or auto where the kernels' level (cpu_isa(), LEANTUNE_ISA caps it) is
// avx512 on a CPU with AVX512-BF16. Where the bf16 kernels are not in the TrainOps table (ref, a
// lower LEANTUNE_ISA, no AVX512-BF16) the f32 kernels run on the same rounded values, widened.
// lt::Error for attention_precision bf16 with precision fp32 / fp16.
bool bf16_attention(const TrainModelOptions& o);

// Whether the frozen embedding and lm_head (one table when tied) are stored in bf16 and the loss
// runs TrainOps::lm_head_loss_bf16: LoRA (or QLoRA) with precision bf16, logits not soft-capped.
// The embedding lookup widens the bf16 rows to f32; the softmax, loss and dlogits stay f32.
// Rows of logits the loss computes at a time: o.loss_chunk, or by default (f32 logits either way)
// with bf16 loss products 1024 rows within 640 MiB, else 256 rows within 80 MiB (a 151,936-word
// vocabulary: 1024 and 128 rows), a multiple of 16 and at least 16; never more than the
// micro-batch's tokens.
int loss_chunk_rows(const ModelConfig& c, const TrainModelOptions& o);

bool bf16_head(const ModelConfig& c, const TrainModelOptions& o);

// Whether full fine-tuning in bf16 runs the loss through TrainOps::lm_head_loss_bf16 on a bf16
// working copy of the f32 lm_head (the tied embedding), refreshed with the linears' working copies
// after each step (what PyTorch autocast runs for the lm_head); the lookup reads the f32 table.
bool bf16_head_copy(const ModelConfig& c, const TrainModelOptions& o);

// Parses "none" | "every" | "every:K" | "attention" | "mlp"; lt::Error otherwise.
void parse_checkpointing(const std::string& s, TrainModelOptions& o);

MemoryPlan plan_training(const ModelConfig& c, const TrainModelOptions& o);

// Whether the frozen linear weights are quantized (requested or stored so), and in which format.
bool quantized_base(const ModelConfig& c, const TrainModelOptions& o, QuantSpec* spec = nullptr);

// One trainable tensor with its gradient and AdamW moments (all from the arenas). With a sharding
// strategy holding parameters (gradients), p (g) is null except while its unit is acquired.
struct TrainParam {
  std::string name;              // PEFT key for LoRA tensors, HF name for full fine-tuning
  std::vector<int64_t> shape;
  float *p, *g, *m, *v;
  size_t n;
  int layer;                     // -1 for embeddings / final norm / lm_head
  bool decay;                    // weight decay applies (not to norms and biases)
  int unit = 0;                  // trainable_unit(): 0 embedding, layer + 1, L + 1 final norm / lm_head
  float lr_factor = 1.0f;        // multiplies the step's lr (LoRA+: loraplus_lr_ratio for B, biases, magnitudes)
  std::vector<float*> topk_residual;  // grad_topk: one residual per emulated worker (n floats each), else empty
  float* topk_age = nullptr;          // grad_topk with variance correction: AdamW ages (n floats)
  // adaptive rank, on each lora_A only: its module's planned state (adaptive_rank_state_names)
  struct RankState {
    float *ema1 = nullptr, *ema2 = nullptr, *mask = nullptr;
  } rank;
};

// Adaptive rank's plan rows of the module whose A is `lora_a` ("X.lora_A.weight"): rank_ema1.X,
// rank_ema2.X, rank_mask.X (the names its checkpoint tensors have).
std::array<std::string, 3> adaptive_rank_state_names(const std::string& lora_a);

// grad_topk's planned state (TrainParam::topk_residual / topk_age), for GradTopK.
TopkBuffers topk_buffers(const std::vector<TrainParam>& params);

// The unit of a trainable tensor from its name (HF or PEFT): 0 the embedding, l+1 anything in
// decoder layer l ("layers.<l>."), n_layers+1 the rest (final norm, lm_head).
int trainable_unit(const std::string& name, int n_layers);

struct Linear;  // train_model.cpp
class Ledger;
struct FrozenBlock;  // train/base_cache.h

class TrainModel {
 public:
  // ops: ops_ref() runs every op, forward and backward, on the scalar reference kernels;
  // ops_cpu() on the fast CPU kernels.
  // store: its strategy must hold exactly the parameters / gradients that opts.store_params /
  // store_grads say (it must outlive the model); null: the model holds everything (a store of its own).
  // frozen: the frozen_weights arena lives there (train/base_cache.h; it must outlive the model):
  // an empty block is allocated and filled by this constructor, then sealed read-only; a filled one
  // (the same model files and frozen buffers) is borrowed as it is, nothing converted.
  TrainModel(const ModelConfig& config, const TensorSet& tensors, const TrainModelOptions& opts, const Ops& ops,
             UnitStore* store = nullptr, FrozenBlock* frozen = nullptr);
  ~TrainModel();

  // Forward and backward over one micro-batch (B*T tokens, labels already shifted, -100 ignored).
  // Gradients ACCUMULATE into the parameters' g (call zero_grads() after an optimizer step).
  // Returns the mean loss over this micro-batch's non-ignored labels. The gradients are those of
  // loss_scale * (sum of this micro-batch's token losses) / step_label_tokens: the label-token
  // count of the whole optimizer step (every micro-batch of the accumulation, every rank), so that
  // accumulated gradients equal the larger batch's; 0 means this micro-batch's own count (its
  // mean loss). loss_scale: the fp16 loss scale, else 1. dropout_step selects the LoRA dropout masks.
  float forward_backward(const int* tokens, const int* labels, const int* positions, const int* doc_start,
                         float loss_scale, uint64_t dropout_step, int64_t step_label_tokens = 0);
  // Forward only: the mean loss (evaluation).
  float forward_loss(const int* tokens, const int* labels, const int* positions, const int* doc_start);
  // Zeroes the gradients and refreshes the working copies of the trainable weights from their f32
  // masters (16-bit ones for bf16 / fp16 full fine-tuning, fake-quantized ones for QAT): call it
  // after every optimizer step and after loading a checkpoint.
  void zero_grads();
  // Sets the LoRA A/B (and trainable biases) from a PEFT adapter's tensors (PEFT key names);
  // lt::Error naming the tensor when one is missing or mis-shaped.
  void load_lora(const TensorSet& adapter);

  std::vector<TrainParam>& params() { return params_; }
  const ModelConfig& config() const { return cfg_; }
  const TrainModelOptions& options() const { return opts_; }
  const MemoryPlan& plan() const { return plan_; }
  const Arenas& arenas() const { return arenas_; }
  Arenas& arenas() { return arenas_; }  // adaptive rank's release (train/adaptive_rank.h)
  // Marks the ledger after each layer's forward and backward and after the loss (null: off).
  void set_ledger(Ledger* l) { ledger_ = l; }
  size_t trainable_count() const;
  // Base weight by HF name (for merging and export).
  float* weight(const std::string& name) const { return arenas_.get_as<float>(name); }
  // The LoRA (A, B) of a module, or nulls.
  void lora_tensors(int layer, const std::string& module, float** A, float** B) const;
  // PiSSA / OLoRA: the initial value (A₀ or B₀) of the LoRA tensor named `name` (a PEFT key), which
  // the conversion to plain LoRA on save needs; null for other initialisations.
  const float* initial_lora(const std::string& name) const;

 private:
  friend struct BufferTable;  // train_model.cpp: the planned buffers and the fields they are bound to
  struct LayerActs;
  struct BatchView {  // one micro-batch's inputs (N each)
    const int *tokens, *labels, *positions, *doc_start;
  };
  // parts: 1 attention, 2 MLP, 4 h alone, 8 xn1 / xn2 alone (a replay: 4 always); kAttentionCore is
  // the attention's own outputs' part, never replayed (recompute_layers)
  static constexpr int kAttentionCore = 16;
  void layer_forward(int l, LayerActs& a, const BatchView& b, uint64_t dropout_step, int parts = 3);
  // bf16 attention: q, k, v rounded to bf16 in place and into their saved 16-bit copies
  void round_qkv(LayerActs& a);
  void layer_backward(int l, LayerActs& a, const BatchView& b, uint64_t dropout_step);
  void attention_forward(LayerActs& a, const int* key_start);   // a.att, a.lse from a.q, a.k, a.v
  void attention_backward(LayerActs& a, const int* key_start);  // d_q_, d_k_, d_v_ += from d_att_
  void refresh_working_copies();  // 16-bit or fake-quantized (QAT) working copies <- f32 masters (full fine-tuning)
  template <class Begin, class Finish>
  void init_mutating_lora(Linear& lin, const std::string& an, const std::string& bn, Begin& begin, Finish& finish);
  void check_batch(const BatchView& b) const;
  // The first key of each query for layer l: window_start_ on a sliding layer, else doc_start.
  const int* key_start(int l, const BatchView& b) const;
  float run(const BatchView& b, float loss_scale, bool backward, uint64_t dropout_step);

  ModelConfig cfg_;
  TrainModelOptions opts_;
  const Ops& ops_;
  Ledger* ledger_ = nullptr;
  const TrainOps& tops_;  // the backward ops of the same backend (ref with ops_ref, else cpu)
  MemoryPlan plan_;
  Arenas arenas_;
  int N_ = 0;
  std::vector<TrainParam> params_;
  std::unique_ptr<UnitStore> own_store_;  // without a store given: one of its own, holding nothing
  UnitStore* store_ = nullptr;
  std::vector<std::unique_ptr<Linear>> linears_;  // kNumProj per layer, in kProjs order
  const Linear& linear(int layer, Proj p) const { return *linears_[size_t(layer) * kNumProj + size_t(p)]; }
  std::vector<std::unique_ptr<LayerActs>> acts_;  // L sets; recomputed buffers point into one shared set
  std::vector<int> recompute_;                    // per layer: parts replayed before backward (0 none)
  // weights and their grads (grads null when frozen)
  float *embed_, *d_embed_, *final_norm_, *d_final_norm_, *lm_head_, *d_lm_head_;
  // bf16_head(): the frozen tables (embed_, lm_head_ null); bf16_head_copy(): lm_head16_ the working copy
  uint16_t *embed16_ = nullptr, *lm_head16_ = nullptr;
  std::vector<float*> attn_norm_, d_attn_norm_, ffn_norm_, d_ffn_norm_;
  std::vector<float*> q_norm_, d_q_norm_, k_norm_, d_k_norm_;  // Qwen3 (HS each), else null
  // Gemma (sandwich_norms): post_attention_layernorm (on the attention's output) and
  // post_feedforward_layernorm; ffn_norm_ is then pre_feedforward_layernorm. Null without.
  std::vector<float*> post_attn_norm_, d_post_attn_norm_, post_ffn_norm_, d_post_ffn_norm_;
  float* norm_eff_ = nullptr;  // (max(C, HS)) Gemma: the (1 + w) of the norm in use (norm_weight)
  // The factor a norm with weights w applies: w, or (1 + w) written to norm_eff_ (Gemma; valid
  // until the next call). Its gradient is w's.
  const float* norm_weight(const float* w, int n);
  float* inv_freq_;  // (HS/2) the frequencies of the current pass, from rope_
  float* inv_freq_local_ = nullptr;  // (HS/2) Gemma 3's sliding layers' RoPE, else null
  // (2, N, HS/2) the cos / sin of the pass's RoPE angles (Ops::rope_table), and of the sliding
  // layers' (Gemma 3, else null), computed once per pass for every layer's q and k
  float* rope_cs_ = nullptr;
  float* rope_cs_local_ = nullptr;
  std::optional<RopeFreqState> rope_;  // transformers' per-call frequencies (dynamic, longrope)
  // activations and scratch
  std::vector<float*> res_;                       // L+1 residual streams (N, C)
  float *xnf_, *rstdf_, *d_xnf_, *d_res_, *logits_chunk_;
  uint16_t* loss_x16_ = nullptr;                  // bf16_head(): (chunk, C) the loss chunk's rows of xnf in bf16
  int* window_start_ = nullptr;                   // (N) sliding window's first key per query (null: no window)
  float* load_scratch_ = nullptr;                 // quantizing checkpoint tensors on load (constructor)
  size_t load_scratch_floats_ = 0;
  DType half_ = DType::F32;                       // 16-bit storage type (F32: none)
  float* half_x_ = nullptr;                       // (N, max_io) a saved 16-bit GEMM input in f32
  float* attn_qkv_ = nullptr;                     // (N, QD + 2 KVD) bf16 precision: q, k, v in f32
  float* mlp_gate_up_ = nullptr;                  // (2, N, F) bf16 precision: gate and up in f32
  void* attn_ds_ = nullptr;                       // the attention backward's kept dS rows (bytes below)
  size_t attn_ds_bytes_ = 0;
  void* attn_ws_ = nullptr;                       // the attention kernels' workspace (bytes below)
  size_t attn_ws_bytes_ = 0;
  LinearScratch lin_scratch_;                     // the linears' scratch: quantized / f16 tile, 16-bit dy, LoRA
  float *d_xn_, *d_h_, *d_q_, *d_k_, *d_v_, *d_att_;
};

}  // namespace lt
