// Dynamic loss scaling for fp16 training (as torch.cuda.amp.GradScaler): the loss the backward
// sees is multiplied by scale() so small gradients survive f16's range; the gradients are then
// unscaled (multiplied by 1/scale, exact: the scale is a power of two) before clipping. When any
// gradient is Inf/NaN the step is skipped and the scale halved; after `growth_interval`
// consecutive clean steps it doubles.
// Usage: forward_backward(..., scaler.scale(), step, step_label_tokens); ok = scaler.unscale(groups);
//        if (scaler.update(ok)) adamw_step(...); zero_grads();
#pragma once
#include <span>

#include "train/optimizer.h"

namespace lt {

struct LossScalerOptions {
  float init_scale = 65536.0f;  // 2^16
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int growth_interval = 2000;   // clean steps before the scale grows
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& o = {});
  float scale() const { return scale_; }
  int clean_steps() const { return clean_; }
  // Multiplies every non-frozen gradient by 1/scale(); returns whether all of them are finite.
  bool unscale(std::span<ParamGroup> groups) const;
  // After a step's gradients were checked: true (apply the step) when finite, and the scale grows
  // after growth_interval clean steps in a row; false (skip it) otherwise, and the scale backs off.
  bool update(bool finite);
  // Restores the state of a checkpoint.
  void set_state(float scale, int clean_steps);

 private:
  LossScalerOptions o_;
  float scale_;
  int clean_ = 0;
};

}  // namespace lt
