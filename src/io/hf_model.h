// Hugging Face model folders: config.json -> ModelConfig, and the weights from model.safetensors
// or from the shards listed in model.safetensors.index.json. Supported model_type: llama,
// mistral, qwen2 (all use the "halves" RoPE layout).
#pragma once
#include <string>

#include "io/tensor_set.h"
#include "core/model_config.h"

namespace lt {

// Reads and validates an HF config.json. Throws lt::Error naming the file and the field for a
// missing field, a wrong type, an unknown architecture or an unsupported rope_scaling.
ModelConfig load_hf_config(const std::string& config_json_path);

// Parses config.json text; `where` names the source in error messages.
ModelConfig parse_hf_config(const std::string& json_text, const std::string& where);

// Maps the weights of the folder `dir`: model.safetensors, or else every shard named by
// model.safetensors.index.json (each mapped once). Every tensor of the index's weight_map must be
// found in the shard it names.
TensorSet load_hf_weights(const std::string& dir);

struct HfModelFiles {
  ModelConfig config;
  TensorSet tensors;
};

// load_hf_config(dir/config.json) + load_hf_weights(dir).
HfModelFiles load_hf_folder(const std::string& dir);

}  // namespace lt
