// LoraWeights: a PEFT LoRA adapter held unmerged for inference, so that one base model serves many
// adapters at once: a projection's output for a row using this adapter is
//   y = x·Wᵀ + b + s·(x·Aᵀ)·Bᵀ      (A (r, in), B (out, r), s = alpha / r or alpha / sqrt(r))
// computed by the batch forward for all rows of one adapter together (S-LoRA / Punica grouping).
// The weights are converted to f32 once, into one buffer whose size is bytes().
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "core/model_config.h"

namespace lt {

class LoraWeights {
 public:
  // Loads the PEFT adapter folder `dir` (io/peft_adapter.h) and checks it fits `c`. lt::Error
  // naming the folder when it does not, or when it carries trained biases (they replace the base
  // biases, which only merging can do: serve a merged model instead).
  LoraWeights(const std::string& dir, const ModelConfig& c);

  struct Proj {
    const float* A = nullptr;  // (r, in); null when the projection is not adapted
    const float* B = nullptr;  // (out, r)
  };
  // Projection m (0..6: q, k, v, o, gate, up, down) of layer l.
  const Proj& proj(int layer, int m) const { return projs_[size_t(layer)][size_t(m)]; }
  int rank() const { return r_; }
  float scale() const { return s_; }
  size_t bytes() const { return data_.size() * sizeof(float); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int r_ = 0;
  float s_ = 0;
  std::vector<float> data_;
  std::vector<std::array<Proj, 7>> projs_;
};

}  // namespace lt
