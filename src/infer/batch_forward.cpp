// The batched forward (batch_forward.h). Per layer, over all R rows:
//   xn = rmsnorm(x); q,k,v = project(xn) (+ LoRA per adapter run); [Qwen3: q, k = rmsnorm per head];
//   rope(q, k) at each row's position (q *= the yarn attention factor²); k, v rows written into
//   their sequences' blocks; att = attention per sequence over its blocks (a sliding layer: the
//   blocks of its window only);
//   x += project_o(att); xn = rmsnorm(x); x += down(silu(gate(xn)) * up(xn))
// then the final norm and lm_head on the last row of each sequence that wants logits.
// Gemma 2 / 3 as LlamaModel runs them (model/llama_model.h): scaled embeddings, post-attention and
// post-MLP norms, GeGLU, query_pre_attn_scalar, soft-capped scores and logits, local RoPE.
#include "infer/batch_forward.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/rope_freqs.h"

namespace lt {

namespace {

// out (R, OC) = x (R, IC)·Wᵀ + bias: each row's arithmetic is the GEMV's for that row alone
// (Ops::matmul_rows), whatever R, so a request's tokens do not depend on its neighbours; the weights
// are read from memory once per call for all R rows.
void rows_linear(const Ops& ops, float* out, const float* x, const float* W, const float* bias, int R, int IC,
                 int OC) {
  ops.matmul_rows(out, x, W, bias, R, IC, OC);
}

}  // namespace

MemoryPlan plan_batch_forward(const ModelConfig& c, const BatchForwardOptions& o) {
  LT_CHECK(o.max_rows >= 1 && o.max_seqs >= 1 && o.max_context >= 1 && o.max_lora_rank >= 1,
           "batch forward: max_rows {}, max_seqs {}, max_context {}, max_lora_rank {}: each must be at least 1",
           o.max_rows, o.max_seqs, o.max_context, o.max_lora_rank);
  const size_t R = o.max_rows, C = c.dim, QD = c.q_dim(), KVD = c.kv_dim(), F = c.hidden_dim, f = sizeof(float);
  const size_t widest = std::max({C, QD, KVD, F});
  MemoryPlan p;
  const auto A = Category::Activations;
  p.add("batch.x", A, R * C * f, Lifetime::Step);
  p.add("batch.xn", A, R * C * f, Lifetime::Layer);
  p.add("batch.q", A, R * QD * f, Lifetime::Layer);
  p.add("batch.k", A, R * KVD * f, Lifetime::Layer);
  p.add("batch.v", A, R * KVD * f, Lifetime::Layer);
  p.add("batch.att", A, R * QD * f, Lifetime::Layer);
  p.add("batch.gate", A, R * F * f, Lifetime::Layer);
  p.add("batch.up", A, R * F * f, Lifetime::Layer);
  p.add("batch.logits", Category::LossChunk, size_t(o.max_seqs) * size_t(c.vocab_size) * f, Lifetime::Step);
  p.add("batch.positions", Category::Data, R * sizeof(int), Lifetime::Step);
  const auto W = Category::Workspace;
  p.add("batch.k_gather", W, size_t(o.max_context) * KVD * f, Lifetime::Layer);
  p.add("batch.v_gather", W, size_t(o.max_context) * KVD * f, Lifetime::Layer);
  p.add("batch.lora_a", W, R * size_t(o.max_lora_rank) * f, Lifetime::Layer);
  p.add("batch.lora_b", W, R * widest * f, Lifetime::Layer);
  p.add("batch.inv_freq", W, size_t(c.head_dim / 2) * f);
  if (c.rope_local_theta > 0) p.add("batch.inv_freq_local", W, size_t(c.head_dim / 2) * f);
  return p;
}

BatchForward::BatchForward(std::shared_ptr<const LlamaModel> weights, KvPool& pool, BatchForwardOptions o)
    : w_(std::move(weights)), cfg_(w_->config()), pool_(pool), o_(o), plan_(plan_batch_forward(cfg_, o)) {
  LT_CHECK(w_->f32_weights(), "the batch engine runs f32 weights; load the model without quantization or 16-bit weights to serve it");
  arenas_.allocate(plan_);
  x_ = arenas_.get_as<float>("batch.x");
  xn_ = arenas_.get_as<float>("batch.xn");
  q_ = arenas_.get_as<float>("batch.q");
  k_ = arenas_.get_as<float>("batch.k");
  v_ = arenas_.get_as<float>("batch.v");
  att_ = arenas_.get_as<float>("batch.att");
  gate_ = arenas_.get_as<float>("batch.gate");
  up_ = arenas_.get_as<float>("batch.up");
  logits_ = arenas_.get_as<float>("batch.logits");
  pos_ = arenas_.get_as<int>("batch.positions");
  kbuf_ = arenas_.get_as<float>("batch.k_gather");
  vbuf_ = arenas_.get_as<float>("batch.v_gather");
  lora_a_ = arenas_.get_as<float>("batch.lora_a");
  lora_b_ = arenas_.get_as<float>("batch.lora_b");
  inv_freq_ = arenas_.get_as<float>("batch.inv_freq");
  // One frequency table for every row: the types whose frequencies follow each call's length
  // (transformers: the largest position of the whole batch) are refused.
  LT_CHECK(!rope_depends_on_length(cfg_), "rope_scaling type '{}' changes its frequencies with the length of each "
           "forward call, which a batch of sequences at different positions does not have; the batch engine runs "
           "linear, yarn, llama3 (or none). Generate without it (leantune generate) instead", cfg_.rope_scaling.type);
  const auto inv = rope_inv_freq(cfg_, 0);
  std::copy(inv.begin(), inv.end(), inv_freq_);
  for (int l = 0; l < cfg_.n_layers && cfg_.rope_local_theta > 0; ++l) {
    if (!cfg_.local_rope(l)) continue;
    inv_freq_local_ = arenas_.get_as<float>("batch.inv_freq_local");
    const auto local = rope_inv_freq(layer_rope_config(cfg_, l), 0);
    std::copy(local.begin(), local.end(), inv_freq_local_);
    break;
  }
}

void BatchForward::project(float* out, const float* x, int layer, int m, std::span<const BatchSeq> seqs, int R) {
  const LayerWeights& L = w_->layer_weights()[size_t(layer)];
  const auto [IC, OC] = cfg_.linear_shape(m);
  const Ops& ops = w_->ops();
  rows_linear(ops, out, x, L.w[size_t(m)], L.bias[size_t(m)], R, int(IC), int(OC));
  // LoRA: one product pair per run of consecutive sequences with the same adapter
  int row = 0;
  for (size_t i = 0; i < seqs.size();) {
    const LoraWeights* ad = seqs[i].adapter;
    int n = 0;
    size_t j = i;
    for (; j < seqs.size() && seqs[j].adapter == ad; ++j) n += seqs[j].n;
    const LoraWeights::Proj* P = ad ? &ad->proj(layer, m) : nullptr;
    if (P && P->A) {
      const int r = ad->rank();
      rows_linear(ops, lora_a_, x + size_t(row) * IC, P->A, nullptr, n, int(IC), r);  // (n, r)
      rows_linear(ops, lora_b_, lora_a_, P->B, nullptr, n, r, int(OC));               // (n, OC)
      float* o = out + size_t(row) * OC;
      const float s = ad->scale();
      for (size_t e = 0; e < size_t(n) * size_t(OC); ++e) o[e] += s * lora_b_[e];
    }
    row += n;
    i = j;
  }
}

void BatchForward::write_kv(int layer, std::span<const BatchSeq> seqs) {
  const size_t KVD = cfg_.kv_dim(), BS = pool_.block_size();
  int row = 0;
  for (const BatchSeq& s : seqs) {
    for (int i = 0; i < s.n; ++i, ++row) {
      const size_t p = size_t(s.pos0 + i);
      const int b = s.blocks[p / BS];
      std::memcpy(pool_.k(layer, b) + (p % BS) * KVD, k_ + size_t(row) * KVD, KVD * sizeof(float));
      std::memcpy(pool_.v(layer, b) + (p % BS) * KVD, v_ + size_t(row) * KVD, KVD * sizeof(float));
    }
  }
}

// Each sequence's keys 0 .. pos0+n-1 gathered from its blocks into one contiguous (P, KVD) buffer
// (on a sliding layer only the blocks from its first query's window on: the kernel reads no key
// before it), then the model's attention kernel for its rows.
void BatchForward::attend(int layer, std::span<const BatchSeq> seqs) {
  const size_t KVD = cfg_.kv_dim(), QD = cfg_.q_dim(), BS = pool_.block_size();
  const int window = cfg_.attention_window(layer);
  int row = 0;
  for (const BatchSeq& s : seqs) {
    const size_t len = size_t(s.pos0 + s.n);
    const size_t first = window > 0 ? size_t(std::max(0, s.pos0 - window + 1)) : 0;
    for (size_t p0 = first / BS * BS; p0 < len; p0 += BS) {
      const size_t rows = std::min(BS, len - p0);
      const int b = s.blocks[p0 / BS];
      std::memcpy(kbuf_ + p0 * KVD, pool_.k(layer, b), rows * KVD * sizeof(float));
      std::memcpy(vbuf_ + p0 * KVD, pool_.v(layer, b), rows * KVD * sizeof(float));
    }
    attention(w_->ops(), cfg_, att_ + size_t(row) * QD, q_ + size_t(row) * QD, kbuf_, vbuf_, s.n, s.pos0, window, 0);
    row += s.n;
  }
}

void BatchForward::forward(std::span<const int> tokens, std::span<const BatchSeq> seqs) {
  const int R = int(tokens.size()), C = cfg_.dim, F = cfg_.hidden_dim;
  const int NH = cfg_.n_heads, NKV = cfg_.n_kv_heads, HS = cfg_.head_dim;
  LT_CHECK(R >= 1 && R <= o_.max_rows, "batch forward: {} rows; 1 to {} fit", R, o_.max_rows);
  LT_CHECK(int(seqs.size()) <= o_.max_seqs, "batch forward: {} sequences; {} fit", seqs.size(), o_.max_seqs);
  int rows = 0;
  for (const BatchSeq& s : seqs) {
    LT_CHECK(s.n >= 1 && s.pos0 >= 0 && s.pos0 + s.n <= o_.max_context,
             "batch forward: positions {}..{} outside the context of {}", s.pos0, s.pos0 + s.n - 1, o_.max_context);
    LT_CHECK(!s.adapter || s.adapter->rank() <= o_.max_lora_rank, "batch forward: adapter rank {} above {}",
             s.adapter ? s.adapter->rank() : 0, o_.max_lora_rank);
    for (int i = 0; i < s.n; ++i) pos_[rows + i] = s.pos0 + i;
    rows += s.n;
  }
  LT_CHECK(rows == R, "batch forward: the sequences hold {} rows, {} tokens were given", rows, R);
  for (int t : tokens)
    LT_CHECK(t >= 0 && t < cfg_.vocab_size, "token id {} outside the vocabulary (size {})", t, cfg_.vocab_size);
  const Ops& ops = w_->ops();
  const bool il = cfg_.rope_layout == RopeLayout::Interleaved;
  ops.embedding_forward(x_, tokens.data(), w_->embed_weights(), R, C);
  scale_embeddings(x_, size_t(R) * C, cfg_);
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const LayerWeights& L = w_->layer_weights()[size_t(l)];
    const float* inv_freq = cfg_.local_rope(l) ? inv_freq_local_ : inv_freq_;
    ops.rmsnorm_forward(xn_, nullptr, x_, L.attn_norm, R, C, cfg_.norm_eps);
    project(q_, xn_, l, 0, seqs, R);
    project(k_, xn_, l, 1, seqs, R);
    project(v_, xn_, l, 2, seqs, R);
    if (L.q_norm) {  // Qwen3: each head's q and k RMS-normalized over HS, in place
      ops.rmsnorm_forward(q_, nullptr, q_, L.q_norm, R * NH, HS, cfg_.norm_eps);
      ops.rmsnorm_forward(k_, nullptr, k_, L.k_norm, R * NKV, HS, cfg_.norm_eps);
    }
    ops.rope_forward(q_, pos_, inv_freq, R, NH, HS, il);
    ops.rope_forward(k_, pos_, inv_freq, R, NKV, HS, il);
    scale_queries(q_, size_t(R) * cfg_.q_dim(), cfg_, l);  // the yarn attention factor, query_pre_attn_scalar
    write_kv(l, seqs);
    attend(l, seqs);
    project(xn_, att_, l, 3, seqs, R);
    if (L.post_attn_norm) ops.rmsnorm_forward(xn_, nullptr, xn_, L.post_attn_norm, R, C, cfg_.norm_eps);
    ops.add_inplace(x_, xn_, size_t(R) * C);
    ops.rmsnorm_forward(xn_, nullptr, x_, L.ffn_norm, R, C, cfg_.norm_eps);
    project(gate_, xn_, l, 4, seqs, R);
    project(up_, xn_, l, 5, seqs, R);
    mlp_activation(ops, cfg_, gate_, gate_, up_, R, F);
    project(xn_, gate_, l, 6, seqs, R);
    if (L.post_ffn_norm) ops.rmsnorm_forward(xn_, nullptr, xn_, L.post_ffn_norm, R, C, cfg_.norm_eps);
    ops.add_inplace(x_, xn_, size_t(R) * C);
  }
  // final norm + lm_head on the last row of each sequence that wants logits
  int nl = 0, row = 0;
  for (const BatchSeq& s : seqs) {
    row += s.n;
    if (!s.want_logits) continue;
    ops.rmsnorm_forward(xn_ + size_t(nl) * C, nullptr, x_ + size_t(row - 1) * C, w_->final_norm_weights(), 1, C,
                        cfg_.norm_eps);
    ++nl;
  }
  if (nl > 0) rows_linear(ops, logits_, xn_, w_->lm_head_weights(), nullptr, nl, C, cfg_.vocab_size);
  if (nl > 0 && cfg_.final_softcap > 0)
    ops.softcap_forward(logits_, size_t(nl) * size_t(cfg_.vocab_size), cfg_.final_softcap);
}

}  // namespace lt
