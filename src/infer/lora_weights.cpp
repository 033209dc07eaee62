// Loading a PEFT adapter unmerged (lora_weights.h): every lora_A / lora_B converted to f32 into one
// buffer, indexed by layer and projection.
#include "infer/lora_weights.h"

#include "core/error.h"
#include "io/fused_proj.h"
#include "io/peft_adapter.h"
#include "core/dtype.h"

namespace lt {

LoraWeights::LoraWeights(const std::string& dir, const ModelConfig& c) : dir_(dir) {
  LoadedAdapter ad = load_peft_adapter(dir);
  split_fused_adapter(ad, c, dir);  // Phi-3: qkv_proj / gate_up_proj as the split projections
  check_adapter_matches_model(ad, c, dir);
  r_ = ad.config.r;
  s_ = ad.config.scaling();
  const auto& mods = llama_linear_modules();
  // first pass: sizes, and no biases
  size_t total = 0;
  for (int l = 0; l < c.n_layers; ++l)
    for (int m = 0; m < 7; ++m) {
      LT_CHECK(!ad.tensors.find(peft_bias_key(l, mods[size_t(m)])),
               "{}: the adapter carries a trained bias ({} of layer {}); an adapter served unmerged cannot replace "
               "base biases: merge it (`leantune merge`) and serve the merged model", dir, mods[size_t(m)], l);
      if (ad.tensors.find(peft_lora_key(l, mods[size_t(m)], true))) {
        auto [in, out] = c.linear_shape(m);
        total += size_t(r_) * size_t(in + out);
      }
    }
  LT_CHECK(total > 0, "{}: the adapter holds no LoRA weights for this model", dir);
  data_.resize(total);
  projs_.resize(size_t(c.n_layers));
  float* at = data_.data();
  for (int l = 0; l < c.n_layers; ++l)
    for (int m = 0; m < 7; ++m) {
      if (!ad.tensors.find(peft_lora_key(l, mods[size_t(m)], true))) continue;
      auto [in, out] = c.linear_shape(m);
      const TensorInfo& A = ad.tensors.get(peft_lora_key(l, mods[size_t(m)], true), {r_, in});
      const TensorInfo& B = ad.tensors.get(peft_lora_key(l, mods[size_t(m)], false), {out, r_});
      convert_to_f32(at, A.data, A.dtype, size_t(A.numel()));
      projs_[size_t(l)][size_t(m)].A = at;
      at += A.numel();
      convert_to_f32(at, B.data, B.dtype, size_t(B.numel()));
      projs_[size_t(l)][size_t(m)].B = at;
      at += B.numel();
    }
}

}  // namespace lt
