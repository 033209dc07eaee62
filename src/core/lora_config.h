// LoRA configuration with PEFT's meaning and defaults, and the names PEFT gives adapted modules.
// Every adapted projection computes y = x·Wᵀ (+ b) + s·(dropout(x)·Aᵀ)·Bᵀ with A (r, in),
// B (out, r) and s = alpha / r (alpha / sqrt(r) with rsLoRA), as DESIGN.md §3. PEFT's variants:
//   use_dora           DoRA: y = (m / ||W + s·B·A||_row) ∘ (x·(W + s·B·A)ᵀ) + b, m (out) trained, the
//                      norm a constant in the backward (kernels/linear.h).
//   init pissa[_niter_K] | olora   A and B from the top-r singular triplets (PiSSA) or the QR
//                      factors (OLoRA) of W, and W replaced by W − s·B·A (core/lora_init.h); saved
//                      adapters are converted to plain LoRA on the original W (rank 2r).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/projection.h"

namespace lt {

// Phi-3's four linear modules, as PEFT names them ("all-linear" there).
inline const std::vector<std::string>& phi3_linear_modules() {
  static const std::vector<std::string> names = {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};
  return names;
}

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
  // default: A kaiming-uniform(a=sqrt 5), B = 0 | gaussian | pissa | pissa_niter_K | olora (parse_lora_init)
  std::string init = "default";
  bool use_dora = false;                          // DoRA: a trained magnitude per output row
  float scaling() const { return use_rslora ? alpha / std::sqrt(float(r)) : alpha / float(r); }
  // PiSSA / OLoRA: the initialisation replaces W by W − s·B·A
  bool mutates_base() const { return init == "olora" || init.rfind("pissa", 0) == 0; }
  // K of "pissa_niter_K" (randomized SVD with K subspace iterations); -1 otherwise
  int pissa_niter() const {
    const std::string p = "pissa_niter_";
    return init.rfind(p, 0) == 0 ? std::atoi(init.c_str() + p.size()) : -1;
  }
};

// PEFT's init_lora_weights as text: "true" / "default", "gaussian", "pissa", "pissa_niter_K"
// (K >= 0 whole), "olora". lt::Error naming `where` and the choices otherwise ("false", PEFT's A
// and B both random, included: the adapter would not start at the base model).
std::string parse_lora_init(const std::string& value, const std::string& where);

// "q_proj" -> "self_attn", "gate_proj" -> "mlp".
inline const char* llama_module_parent(const std::string& module) {
  return module == "gate_proj" || module == "up_proj" || module == "down_proj" || module == "gate_up_proj" ? "mlp"
                                                                                                       : "self_attn";
}

// The one LoRA target matcher: whether `lc` adapts projection p (target_modules names it, or its
// fused module for Phi-3, or is "all-linear"), and whether it adapts decoder layer l
// (layers_to_transform empty or naming l).
inline bool lora_targets(const LoraConfig& lc, Proj p) {
  const char* fused = fused_proj_module(p);
  for (const auto& t : lc.target_modules)
    if (t == proj_module(p) || t == "all-linear" || (fused && t == fused)) return true;
  return false;
}
// lc with "all-linear" written as PEFT records it after resolving it on a model with fused
// projections (Phi-3: qkv_proj, o_proj, gate_up_proj, down_proj); lc itself otherwise.
inline LoraConfig lora_config_for_peft(LoraConfig lc, bool fused_proj) {
  if (fused_proj && lc.target_modules == std::vector<std::string>{"all-linear"}) lc.target_modules = phi3_linear_modules();
  return lc;
}
inline bool lora_targets_layer(const LoraConfig& lc, int l) {
  return lc.layers_to_transform.empty() ||
         std::find(lc.layers_to_transform.begin(), lc.layers_to_transform.end(), l) != lc.layers_to_transform.end();
}

}  // namespace lt
