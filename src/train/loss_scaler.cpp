// Dynamic loss scaling (loss_scaler.h).
#include "train/loss_scaler.h"

#include <cmath>

#include "core/error.h"

namespace lt {

LossScaler::LossScaler(const LossScalerOptions& o) : o_(o), scale_(o.init_scale) {
  LT_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0, "initial_loss_scale must be a finite number > 0 (got {})",
           o.init_scale);
  LT_CHECK(o.growth_interval >= 1, "loss_scale_window must be >= 1 (got {})", o.growth_interval);
  LT_CHECK(o.growth_factor > 1 && o.backoff_factor > 0 && o.backoff_factor < 1,
           "loss scaling: growth factor {} must be > 1 and backoff factor {} in (0, 1)", o.growth_factor,
           o.backoff_factor);
}

bool LossScaler::unscale(std::span<ParamGroup> groups) const {
  const float inv = 1.0f / scale_;
  for (ParamGroup& g : groups) {
    if (g.frozen || g.n == 0) continue;
    float* __restrict gr = g.grad;
    const ptrdiff_t n = ptrdiff_t(g.n);
#pragma omp parallel for simd schedule(static) if (n >= (1 << 14))
    for (ptrdiff_t i = 0; i < n; i++) gr[i] *= inv;
  }
  return grads_finite(groups);
}

bool LossScaler::update(bool finite) {
  if (!finite) {
    scale_ *= o_.backoff_factor;
    clean_ = 0;
    return false;
  }
  if (++clean_ >= o_.growth_interval) {
    const float grown = scale_ * o_.growth_factor;
    if (std::isfinite(grown)) scale_ = grown;  // never to Inf
    clean_ = 0;
  }
  return true;
}

void LossScaler::set_state(float scale, int clean_steps) {
  LT_CHECK(std::isfinite(scale) && scale > 0 && clean_steps >= 0, "loss scaler state: scale {} and clean steps {} "
           "are not a finite scale > 0 and a count >= 0", scale, clean_steps);
  scale_ = scale;
  clean_ = clean_steps;
}

}  // namespace lt
