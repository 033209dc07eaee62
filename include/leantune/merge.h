// Merging a PEFT LoRA adapter into its base model for good: W += s·B·A for every adapted
// projection (trained biases replace the base's), written as a Hugging Face folder that
// transformers and leantune load like any other model.
//
// Usage:
//   leantune::merge_adapter("models/SmolLM2-135M", "out/adapter", "out/merged");
//   leantune::Model merged("out/merged");
#pragma once
#include <string>

namespace leantune {

// Writes out_dir/model.safetensors (f32) and copies config.json and the tokenizer files
// (tokenizer.json, tokenizer_config.json, special_tokens_map.json, generation_config.json) from
// the base folder. base_model: an HF folder or a .safetensors beside its config.json.
// leantune::Error naming the file or tensor when the base is not a Hugging Face model or the
// adapter does not fit it.
void merge_adapter(const std::string& base_model, const std::string& adapter, const std::string& out_dir);

}  // namespace leantune
