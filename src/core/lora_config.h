// LoRA configuration with PEFT's meaning and defaults, and the names PEFT gives adapted modules.
// Every adapted projection computes y = x·Wᵀ (+ b) + s·(dropout(x)·Aᵀ)·Bᵀ with A (r, in),
// B (out, r) and s = alpha / r (alpha / sqrt(r) with rsLoRA), as DESIGN.md §3.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/projection.h"

namespace lt {

// The seven Llama projections, in PEFT's module names (kProjs order).
inline const std::vector<std::string>& llama_linear_modules() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (Proj p : kProjs) v.push_back(proj_module(p));
    return v;
  }();
  return names;
}

struct LoraConfig {
  int r = 8;                                      // rank
  float alpha = 8.0f;                             // lora_alpha (PEFT default 8)
  float dropout = 0.0f;                           // lora_dropout, on the input of A
  bool use_rslora = false;                        // s = alpha / sqrt(r) instead of alpha / r
  std::vector<std::string> target_modules = {"q_proj", "v_proj"};  // or {"all-linear"}
  std::string bias = "none";                      // none | lora_only | all
  std::vector<int> layers_to_transform;           // empty = every layer
  std::string init = "default";                   // default: A kaiming-uniform(a=sqrt 5), B = 0 | gaussian
  float scaling() const { return use_rslora ? alpha / std::sqrt(float(r)) : alpha / float(r); }
};

// "q_proj" -> "self_attn", "gate_proj" -> "mlp".
inline const char* llama_module_parent(const std::string& module) {
  return module == "gate_proj" || module == "up_proj" || module == "down_proj" ? "mlp" : "self_attn";
}

// The one LoRA target matcher: whether `lc` adapts projection p (target_modules names it or is
// "all-linear"), and whether it adapts decoder layer l (layers_to_transform empty or naming l).
inline bool lora_targets(const LoraConfig& lc, Proj p) {
  for (const auto& t : lc.target_modules)
    if (t == proj_module(p) || t == "all-linear") return true;
  return false;
}
inline bool lora_targets_layer(const LoraConfig& lc, int l) {
  return lc.layers_to_transform.empty() ||
         std::find(lc.layers_to_transform.begin(), lc.layers_to_transform.end(), l) != lc.layers_to_transform.end();
}

}  // namespace lt
