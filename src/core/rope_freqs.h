// RoPE inverse frequencies per rotated pair, with Llama 3 rope scaling applied when configured
// (as Hugging Face's _compute_llama3_parameters does).
#pragma once
#include <optional>
#include <vector>

#include "core/model_config.h"

namespace lt {

// (HS/2) inverse frequencies: theta^(-2i/HS), then the config's rope_scaling.
std::vector<float> rope_inv_freq(const ModelConfig& c);

// The Llama 3 rope scaling that divides c's unscaled frequencies by `factors` (one per pair, as
// llama.cpp's rope_freqs.weight holds them): factor = the largest, and low / high_freq_factor over
// original_max_position_embeddings 8192 (only their ratios to it matter) fitted to the pairs
// between; no scaling (type "") when every factor is 1. nullopt when no Llama 3 scaling
// reproduces every factor to 1e-5 (relative).
std::optional<RopeScaling> llama3_scaling_from_factors(const ModelConfig& c, const std::vector<float>& factors);

}  // namespace lt
