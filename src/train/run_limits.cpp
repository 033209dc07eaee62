// check_run_fits_model: the model-dependent limits of a training run (see run_limits.h).
#include "train/run_limits.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <fmt/format.h>

#include "core/error.h"
#include "core/lora_config.h"

namespace lt {

namespace {

constexpr long double kPlanLimit = 0x1p62L;  // 4 EiB: far beyond any machine, well inside size_t

void check_lora_rank(const ModelConfig& c, const TrainModelOptions& o) {
  for (Proj p : kProjs) {
    if (!lora_targets(o.lora, p)) continue;
    const auto [in, out] = c.linear_shape(p);
    const int64_t lim = std::min(in, out);
    LT_CHECK(o.lora.r <= lim, "lora_r: {} is larger than min(in, out) = {} of {}, whose weight is (out {}, in {}) in "
             "this model; a larger rank adds parameters but no rank. Use lora_r <= {} (or leave {} out of "
             "lora_target_modules)", o.lora.r, lim, proj_module(p), out, in, lim, proj_module(p));
  }
}

}  // namespace

int max_lora_rank(const ModelConfig& c, const LoraConfig& lora) {
  int64_t lim = INT_MAX;
  for (Proj p : kProjs)
    if (lora_targets(lora, p)) lim = std::min({lim, c.linear_shape(p).first, c.linear_shape(p).second});
  return int(lim);
}

PlanBound plan_bytes_bound(const ModelConfig& c, const TrainModelOptions& o) {
  using LD = long double;
  LD lin = 0;  // elements of one layer's projections
  for (Proj p : kProjs) lin += LD(c.linear_shape(p).first) * LD(c.linear_shape(p).second);
  const LD R = o.method == Method::Lora ? std::max(o.lora.r, 0) : 0;
  const LD widest = std::max({LD(c.dim), LD(c.q_dim()), LD(c.kv_dim()), LD(c.hidden_dim), LD(c.n_heads), R});
  const LD N = LD(o.micro_batch) * LD(o.seq_len), L = c.n_layers, V = c.vocab_size, C = c.dim;
  // Each weight element: f32 tensor, gradient, two moments and a 16-bit copy (at most 5 x 4
  // bytes); a layer's other weights (norms, biases, 7 LoRA pairs) are at most 32 x widest x max(widest, r).
  const LD weights = 20 * (2 * V * C + L * (lin + 32 * widest * std::max(widest, R)) + C);
  // Activations: per layer at most 20 saved tensors of N x widest (13 named + 7 LoRA inputs),
  // a second (recompute) set, plus the residual streams and ~16 workspace tensors of N x widest.
  const LD activations = 4 * (2 * 20 * (L + 2) + 16) * N * widest;
  const LD logits = 8 * N * V;  // the loss chunk's logits and their gradient (at most N rows of V each)
  PlanBound b;
  b.bytes = weights + activations + logits;
  b.largest = weights >= activations && weights >= logits ? "the weights, their gradients and optimizer moments"
              : activations >= logits ? "the activations (act.* and bwd.* buffers)"
                                      : "the logits chunk of the loss (loss.logits_chunk)";
  return b;
}

void check_run_fits_model(const ModelConfig& c, const TrainModelOptions& o) {
  LT_CHECK(o.seq_len <= c.max_seq_len, "sequence_len: {} is more than the model's context of {} positions "
           "(max_position_embeddings); use sequence_len <= {}", o.seq_len, c.max_seq_len, c.max_seq_len);
  const int64_t tokens = int64_t(o.micro_batch) * o.seq_len;
  LT_CHECK(tokens <= INT_MAX, "micro_batch_size {} x sequence_len {} = {} tokens per micro-batch is more than {}; "
           "the configuration is too large: use a smaller micro_batch_size (gradient_accumulation_steps keeps the "
           "batch)", o.micro_batch, o.seq_len, tokens, INT_MAX);
  if (o.method == Method::Lora && o.lora.r > 0) check_lora_rank(c, o);
  const PlanBound b = plan_bytes_bound(c, o);
  LT_CHECK(b.bytes <= kPlanLimit, "the configuration is too large: in the memory plan, {} could need up to {:.3g} "
           "bytes, beyond 2^62 (4 EiB) and any machine; model: {} layers, hidden size {}, MLP width {}, vocabulary "
           "{}; run: micro_batch_size {} x sequence_len {}", b.largest, double(b.bytes), c.n_layers, c.dim,
           c.hidden_dim, c.vocab_size, o.micro_batch, o.seq_len);
}

}  // namespace lt
