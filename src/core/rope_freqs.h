// RoPE inverse frequencies per rotated pair, with Llama 3 rope scaling applied when configured
// (as Hugging Face's _compute_llama3_parameters does).
#pragma once
#include <vector>

#include "core/model_config.h"

namespace lt {

// (HS/2) inverse frequencies: theta^(-2i/HS), then the config's rope_scaling.
std::vector<float> rope_inv_freq(const ModelConfig& c);

}  // namespace lt
