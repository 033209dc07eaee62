// PEFT LoRA adapter folders, as Hugging Face PEFT saves and loads them:
//   adapter_config.json        LoraConfig.to_dict(), sorted keys, indent 2
//   adapter_model.safetensors  base_model.model.model.layers.{i}.{self_attn|mlp}.{module}.lora_A.weight (r, in)
//                              ... .lora_B.weight (out, r), ... .lora_magnitude_vector (out) with DoRA,
//                              and biases with bias="all"/"lora_only":
//                              ... .{module}.bias, or ... .{module}.base_layer.bias for an adapted module
// so an adapter trained here loads with PeftModel.from_pretrained and one trained with PEFT loads
// here. Both files are written atomically. Loading validates the config (only plain LoRA on the
// Llama projections is supported) and every tensor key and shape, naming file and key on error.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/tensor_set.h"
#include "core/model_config.h"
#include "core/lora_config.h"

namespace lt {

// One tensor to save: its PEFT key (from peft_lora_key / peft_bias_key), shape and F32 data.
struct AdapterTensor {
  std::string key;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // numel(shape) floats
};

// "base_model.model.model.layers.{layer}.{self_attn|mlp}.{module}.lora_A.weight" (lora_B if !is_A).
std::string peft_lora_key(int layer, const std::string& module, bool is_A);
// "base_model.model.model.layers.{layer}.{self_attn|mlp}.{module}.bias".
std::string peft_bias_key(int layer, const std::string& module);
// "base_model.model.model.layers.{layer}.{self_attn|mlp}.{module}.lora_magnitude_vector" (DoRA, (out)).
std::string peft_magnitude_key(int layer, const std::string& module);

// PEFT's per-module rank and lora_alpha, keyed by module ("model.layers.0.self_attn.q_proj"), as
// adaptive rank's saved adapters carry them (train/adaptive_rank.h); empty: every module has r, alpha.
struct RankPattern {
  std::map<std::string, int> rank;
  std::map<std::string, float> alpha;
};

// Writes dir/adapter_config.json and dir/adapter_model.safetensors (F32, metadata format=pt).
// `dir` must exist. Bias keys (bias "all" / "lora_only") are given as peft_bias_key; the bias of a
// module that LoRA adapts is written as "...{module}.base_layer.bias", where PEFT saves and looks
// for it (load_peft_adapter maps it back to peft_bias_key). target_modules {"all-linear"} is
// written as the seven Llama projections, which is what PEFT itself records after resolving
// "all-linear" on a Llama model.
void save_peft_adapter(const std::string& dir, const LoraConfig& config, const std::string& base_model_name_or_path,
                       const std::vector<AdapterTensor>& tensors, const RankPattern& pattern = {});

struct LoadedAdapter {
  LoraConfig config;
  TensorSet tensors;       // keys normalized to peft_lora_key / peft_bias_key form; any float dtype
  std::string base_model;  // base_model_name_or_path ("" when null)
};

// Reads a PEFT LoRA adapter folder. Accepts target_modules as a list or the string "all-linear",
// and keys carrying an adapter name (".lora_A.default.weight"), which are normalized.
// lt::Error (naming the file and the key) for: a peft_type other than LORA, r <= 0, an adapter in
// PiSSA / OLoRA form (init_lora_weights pissa / olora: for a residual base), a DoRA adapter
// without a magnitude for each adapted module (or a magnitude without use_dora), modules_to_save,
// other target_modules strings, unknown modules or keys, a lora_A without its lora_B (or the
// reverse), or shapes inconsistent with r (or the module's rank_pattern entry).
// Also refuses a tensor holding NaN or infinity (naming it and the element). An adapter with
// rank_pattern / alpha_pattern (adaptive rank's, AdaLoRA-style) is returned as the plain LoRA of
// rank max(r, every module's rank) that computes the same (zero-padded factors, B scaled by each
// module's scale over the uniform one), so every consumer sees one r and one scale.
LoadedAdapter load_peft_adapter(const std::string& dir);

// Checks that `ad` (loaded from `dir`) fits the base model `m` before anything is merged: every
// adapter tensor maps to a layer and projection of the base with the right shape ((r, in) for
// lora_A, (out, r) for lora_B, (out) for a bias), so none is dropped, and every module the config
// adapts has its tensors in every layer it targets. lt::Error naming the tensor and both shapes.
void check_adapter_matches_model(const LoadedAdapter& ad, const ModelConfig& m, const std::string& dir);

// Parses the adapter_config.json text (`path` is only used in messages). Returns the config and
// sets *base_model, and *pattern (rank_pattern / alpha_pattern); with pattern null, a non-empty
// pattern is an lt::Error. Exposed for tests and for reading a config without its tensors.
LoraConfig parse_peft_adapter_config(const std::string& json_text, const std::string& path, std::string* base_model,
                                     RankPattern* pattern = nullptr);
// The adapter_config.json text save_peft_adapter writes.
std::string peft_adapter_config_json(const LoraConfig& config, const std::string& base_model_name_or_path,
                                     const RankPattern& pattern = {});

}  // namespace lt
