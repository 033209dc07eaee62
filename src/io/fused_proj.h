// Phi-3's fused projections (ModelConfig::fused_proj): its checkpoints hold self_attn.qkv_proj
// (rows q, k, v) and mlp.gate_up_proj (rows gate, up), and PEFT adapts those modules. Everything
// inside leantune works on the seven projections, so loaders split the fused tensors into row
// blocks here (views into the same mapped memory: a (rows, in) row block is contiguous) and
// writers fuse them back. A fused LoRA (A (r, in), B (q+k+v rows, r)) is exactly one LoRA per
// projection sharing A, with B's row blocks: x·Aᵀ·Bᵀ restricted to q's rows is x·Aᵀ·B_qᵀ.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/model_config.h"
#include "io/peft_adapter.h"
#include "io/tensor_set.h"

namespace lt {

// For a fused_proj config: replaces every layer's qkv_proj / gate_up_proj weight (and bias) in
// `ts` by q/k/v and gate/up views of its rows. Tensors already split (a folder `leantune quantize`
// wrote) are left as they are. lt::Error naming the tensor when a fused one has the wrong shape.
// No-op for the other configs.
void split_fused_tensors(const ModelConfig& c, TensorSet& ts);

// For a fused_proj config: replaces the q/k/v and gate/up weights (and biases) of `ts` (HF names)
// by their fused tensors, concatenated into `storage`; the fused tensor takes the place of its
// group's first. The group's tensors must share a dtype. No-op for the other configs.
void fuse_proj_tensors(const ModelConfig& c, std::vector<TensorInfo>& ts, std::vector<std::vector<uint8_t>>& storage);

// For a fused_proj base: rewrites a PEFT adapter on qkv_proj / gate_up_proj as the equivalent
// adapter on the split projections (lora_A shared, lora_B / magnitudes / biases split by rows,
// target_modules named per projection) so that merging and serving see seven projections. lt::Error
// naming `dir` when the adapter names modules the base does not have (q_proj on Phi-3, qkv_proj on
// the others). Checks the fused shapes against the base.
void split_fused_adapter(LoadedAdapter& ad, const ModelConfig& c, const std::string& dir);

}  // namespace lt
