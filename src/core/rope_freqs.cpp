#include "core/rope_freqs.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

namespace {

// x0 = low_freq_factor / original_max, x1 = high_freq_factor / original_max, in units of
// 1 / wavelength u: pairs with u < x0 are divided by the factor, those with u > x1 are kept, and in
// between the smooth share s = (u - x0) / (x1 - x0) is kept. Fitted from the factors' pairs.
bool fit_bounds(const std::vector<double>& u, const std::vector<float>& f, double F, double* x0, double* x1) {
  const double inf = std::numeric_limits<double>::infinity();
  double hi_min = inf, lo_max = 0;  // smallest u kept unscaled, largest u fully scaled
  std::vector<std::pair<double, double>> smooth;  // (u, s)
  for (size_t i = 0; i < u.size(); ++i) {
    if (std::fabs(f[i] - 1.0) <= 1e-6) hi_min = std::min(hi_min, u[i]);
    else if (std::fabs(f[i] - F) <= 1e-6 * F) lo_max = std::max(lo_max, u[i]);
    else smooth.push_back({u[i], (1.0 / f[i] - 1.0 / F) / (1.0 - 1.0 / F)});
  }
  if (smooth.size() >= 2) {  // s is linear in u: the line through the outermost two
    const auto [ua, sa] = smooth.front();
    const auto [ub, sb] = smooth.back();
    if (ua == ub) return false;
    const double k = (sb - sa) / (ub - ua);
    if (!(k > 0)) return false;
    *x0 = ua - sa / k, *x1 = *x0 + 1.0 / k;
  } else if (smooth.size() == 1) {  // x0 between the fully scaled pairs and this one
    const auto [us, s] = smooth[0];
    *x0 = lo_max > 0 ? (lo_max + us) / 2 : us / 2;
    *x1 = *x0 + (us - *x0) / s;
  } else {  // no pair in between: the middle third of the gap between the two groups
    const double lo = lo_max > 0 ? lo_max : hi_min / 4, hi = hi_min < inf ? hi_min : 4 * lo_max;
    *x0 = lo + (hi - lo) / 3, *x1 = lo + 2 * (hi - lo) / 3;
  }
  return *x0 > 0 && *x1 > *x0 && *x1 < 1e6;  // u <= 1 / 2pi: anything larger is no fit (and no float)
}

}  // namespace

std::optional<RopeScaling> llama3_scaling_from_factors(const ModelConfig& c, const std::vector<float>& factors) {
  ModelConfig plain = c;
  plain.rope_scaling = RopeScaling{};
  const std::vector<float> inv = rope_inv_freq(plain);
  if (factors.size() != inv.size() || inv.empty()) return std::nullopt;
  for (float f : factors)
    if (!std::isfinite(f) || f < 1.0f - 1e-6f) return std::nullopt;
  const double F = *std::max_element(factors.begin(), factors.end());
  if (F <= 1.0 + 1e-6) return RopeScaling{};  // every factor 1: no scaling
  std::vector<double> u(inv.size());
  for (size_t i = 0; i < u.size(); ++i) u[i] = inv[i] / (2.0 * M_PI);
  double x0, x1;
  if (!fit_bounds(u, factors, F, &x0, &x1)) return std::nullopt;
  RopeScaling s;
  s.type = "llama3";
  s.factor = float(F);
  s.original_max_position_embeddings = 8192;
  s.low_freq_factor = float(x0 * 8192), s.high_freq_factor = float(x1 * 8192);
  if (!(s.high_freq_factor > s.low_freq_factor)) return std::nullopt;
  ModelConfig fitted = plain;
  fitted.rope_scaling = s;
  const std::vector<float> got = rope_inv_freq(fitted);
  for (size_t i = 0; i < inv.size(); ++i)
    if (std::fabs(double(got[i]) * factors[i] - inv[i]) > 1e-5 * inv[i]) return std::nullopt;
  return s;
}

}  // namespace lt
