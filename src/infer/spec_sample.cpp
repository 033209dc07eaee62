// Speculative decoding's accept / resample step (spec_sample.h).
#include "infer/spec_sample.h"

#include <algorithm>

#include "core/error.h"

namespace lt {

int draw_weighted(std::span<const float> w, double u) {
  double total = 0.0;
  for (float x : w) total += double(x);
  if (!(total > 0.0)) return -1;
  const double target = u * total;
  double cum = 0.0;
  int last = -1;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] <= 0.0f) continue;
    cum += double(w[i]);
    last = int(i);
    if (target < cum) return last;
  }
  return last;  // u landed on the rounding slack at the very top
}

int draw_residual(std::span<const float> p, std::span<const float> q, double u) {
  LT_CHECK(p.size() == q.size(), "speculative decoding: p has {} entries, q {}", p.size(), q.size());
  double total = 0.0;
  for (size_t i = 0; i < p.size(); ++i) total += std::max(0.0, double(p[i]) - double(q[i]));
  if (!(total > 0.0)) return draw_weighted(p, u);
  const double target = u * total;
  double cum = 0.0;
  int last = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    const double r = double(p[i]) - double(q[i]);
    if (r <= 0.0) continue;
    cum += r;
    last = int(i);
    if (target < cum) return last;
  }
  return last;
}

}  // namespace lt
