#include "core/rope_freqs.h"

#include <cmath>

namespace lt {

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int HS = c.head_dim;
  std::vector<float> f(HS / 2);
  for (int i = 0; i < HS / 2; ++i) f[i] = float(1.0 / std::pow(double(c.rope_theta), double(2 * i) / double(HS)));
  if (c.rope_scaling.type == "llama3") {
    const auto& s = c.rope_scaling;
    const double old_ctx = s.original_max_position_embeddings;
    const double low_wavelen = old_ctx / s.low_freq_factor, high_wavelen = old_ctx / s.high_freq_factor;
    for (auto& v : f) {
      double wavelen = 2.0 * M_PI / v;
      double scaled = wavelen > low_wavelen ? v / s.factor : v;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        double smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        scaled = (1.0 - smooth) * scaled / s.factor + smooth * scaled;
      }
      v = float(scaled);
    }
  }
  return f;
}

}  // namespace lt
