// BatchForward: one forward pass over a batch of sequences at different positions, over the paged
// KV cache (kv_pool.h) and a shared model's weights, each sequence with its own LoRA adapter applied
// unmerged (lora_weights.h). A sequence contributes a run of consecutive positions: a prefill chunk
// or one decode token. Rows of all sequences go through each projection together; the LoRA terms
// are computed per run of sequences sharing an adapter (the scheduler orders them so), one batched
// product each; attention is per sequence over its own blocks.
//
// Batch invariance: every row's numbers are the same whatever else is in the batch (and however a
// prompt is chunked), so a request gives the same tokens alone or among 63 others. Each kernel used
// here is row-wise (rmsnorm, rope, swiglu, add, attention per query); the projections run three
// rows at a time through the GEMV path of Ops::matmul_forward, whose per-row arithmetic does not
// depend on the number of rows (a GEMM's blocking could).
//
// Buffers come from one MemoryPlan (plan_batch_forward); forward() allocates nothing.
#pragma once
#include <memory>
#include <span>

#include "core/memory_plan.h"
#include "infer/kv_pool.h"
#include "infer/lora_weights.h"
#include "model/llama_model.h"

namespace lt {

struct BatchSeq {
  const int* blocks = nullptr;          // block table: position p lives in block blocks[p / block_size]
  int pos0 = 0;                         // position of the first row
  int n = 0;                            // rows: positions pos0 .. pos0 + n - 1
  const LoraWeights* adapter = nullptr; // null: the base model
  bool want_logits = false;             // next-token logits after its last row
};

struct BatchForwardOptions {
  int max_rows = 256;      // rows (tokens) per forward at most
  int max_seqs = 64;       // sequences per forward at most (and logits rows)
  int max_context = 2048;  // positions per sequence at most
  int max_lora_rank = 64;  // largest adapter rank the scratch holds
};

MemoryPlan plan_batch_forward(const ModelConfig& c, const BatchForwardOptions& o);

class BatchForward {
 public:
  // lt::Error when the weights are quantized (the batched projections need f32 weights).
  BatchForward(std::shared_ptr<const LlamaModel> weights, KvPool& pool, BatchForwardOptions o);

  // Runs tokens (the rows, sequence after sequence, in `seqs` order) and writes each sequence's
  // keys and values into its blocks. Logits of the i-th sequence with want_logits: logits(i).
  void forward(std::span<const int> tokens, std::span<const BatchSeq> seqs);
  const float* logits(int i) const { return logits_ + size_t(i) * size_t(cfg_.vocab_size); }
  float* logits(int i) { return logits_ + size_t(i) * size_t(cfg_.vocab_size); }

  const BatchForwardOptions& options() const { return o_; }
  const MemoryPlan& plan() const { return plan_; }
  const Arenas& arenas() const { return arenas_; }
  const ModelConfig& config() const { return cfg_; }

 private:
  // out (R, OC) = x (R, IC)·Wᵀ + bias, then + each adapter run's LoRA term for projection m.
  void project(float* out, const float* x, int layer, int m, std::span<const BatchSeq> seqs, int R);
  void attend(int layer, std::span<const BatchSeq> seqs);
  void write_kv(int layer, std::span<const BatchSeq> seqs);

  std::shared_ptr<const LlamaModel> w_;
  const ModelConfig& cfg_;
  KvPool& pool_;
  BatchForwardOptions o_;
  MemoryPlan plan_;
  Arenas arenas_;
  float *x_, *xn_, *q_, *k_, *v_, *att_, *gate_, *up_, *logits_;
  float *kbuf_, *vbuf_, *lora_a_, *lora_b_, *inv_freq_;
  float* inv_freq_local_ = nullptr;  // Gemma 3 sliding layers' RoPE (null without)
  int* pos_;
};

}  // namespace lt
