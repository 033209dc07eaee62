// RoPE inverse frequencies and attention factor for every rope_scaling type transformers reads
// for Llama-family configs (modeling_rope_utils.py, transformers 5): default, linear, dynamic
// (NTK), yarn, longrope and llama3.
//
// Two types depend on the length of the forward pass, as transformers' dynamic_rope_update does
// it per call, with seq_len = max(position_ids) + 1:
//   - dynamic: above max_position_embeddings the base grows with seq_len; the frequencies only
//     grow from call to call and reset when a call is shorter than max_position_embeddings;
//   - longrope: long_factor when seq_len > original_max_position_embeddings, else short_factor.
// RopeFreqState replays that per call. yarn and longrope also multiply cos and sin by an
// attention factor (ModelConfig::rope_attention_factor), which rope_scale_queries applies.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "core/model_config.h"

namespace lt {

// (HS/2) inverse frequencies of a forward pass with seq_len = (largest position + 1).
std::vector<float> rope_inv_freq(const ModelConfig& c, int seq_len);
// The one table of a model that applies neither the attention factor nor per-call frequencies:
// none, linear and llama3. Throws lt::Error for dynamic, yarn and longrope, which need
// RopeFreqState and rope_scale_queries (a model still calling this refuses them rather than
// computing them wrong).
std::vector<float> rope_inv_freq(const ModelConfig& c);
// Whether the frequencies of a forward pass depend on its length (dynamic, longrope).
bool rope_depends_on_length(const ModelConfig& c);

// The factor transformers multiplies cos and sin by (its `attention_scaling`): yarn from factor,
// mscale and mscale_all_dim, longrope from factor and the original context, unless the config
// gives attention_factor; 1 for the other types.
float rope_attention_factor(const RopeScaling& s);

// Applies c.rope_attention_factor to RoPE'd queries q (n floats) as q *= factor²: the attention
// scores equal those of cos and sin scaled by factor on both q and k, and keys stay as cached.
// In a backward pass the same call on dq (before rope_backward) is its gradient. No-op at 1.
void rope_scale_queries(float* q, size_t n, const ModelConfig& c);

// The RoPE of layer l: c itself, or for a Gemma 3 sliding layer (c.local_rope(l)) c with
// rope_theta = rope_local_theta, no rope_scaling and attention factor 1.
ModelConfig layer_rope_config(const ModelConfig& c, int l);

// What layer l multiplies its RoPE'd queries by: the attention factor² of its RoPE (as
// rope_scale_queries), times sqrt(HS / query_pre_attn_scalar) when the config sets that scalar
// (Gemma), so the kernels' 1/sqrt(HS) scaling gives query_pre_attn_scalar^-1/2. Its own gradient
// too (the same call on dq). scale_queries applies it (no-op at 1; exactly rope_scale_queries
// for the models without query_pre_attn_scalar).
float query_factor(const ModelConfig& c, int l);
void scale_queries(float* q, size_t n, const ModelConfig& c, int l);

// Throws lt::Error naming `where` when c.rope_scaling is not usable (unknown type, factors out
// of range, longrope factor lists of the wrong length, ...). Called by validate_config.
void validate_rope_scaling(const ModelConfig& c, const std::string& where);

// transformers' per-call frequency update for one model instance. Call update() before each
// forward pass with its largest position; it returns true when inv_freq() changed (copy it into
// the table the kernels read). For the other types inv_freq() never changes.
class RopeFreqState {
 public:
  // Starts with the frequencies transformers builds the rotary module with: dynamic as the
  // default RoPE, longrope with short_factor.
  explicit RopeFreqState(const ModelConfig& c);
  bool update(int max_position);
  const std::vector<float>& inv_freq() const { return inv_freq_; }

 private:
  ModelConfig c_;
  std::vector<float> inv_freq_;
  int cached_len_;  // dynamic: the length the current frequencies were computed for
  bool long_ = false;  // longrope: long_factor in use
};

// The Llama 3 rope scaling that divides c's unscaled frequencies by `factors` (one per pair, as
// llama.cpp's rope_freqs.weight holds them): factor = the largest, and low / high_freq_factor over
// original_max_position_embeddings 8192 (only their ratios to it matter) fitted to the pairs
// between; no scaling (type "") when every factor is 1. nullopt when no Llama 3 scaling
// reproduces every factor to 1e-5 (relative).
std::optional<RopeScaling> llama3_scaling_from_factors(const ModelConfig& c, const std::vector<float>& factors);

}  // namespace lt
