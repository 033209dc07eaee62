// RoPE frequencies per rope_scaling type, following transformers' modeling_rope_utils.py
// (_compute_*_parameters and dynamic_rope_update); see rope_freqs.h.
#include "core/rope_freqs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace lt {

namespace {

// theta^(-2i/HS), i < HS/2, rounded to f32 (the default RoPE).
std::vector<float> default_freqs(double theta, int HS) {
  std::vector<float> f(HS / 2);
  for (int i = 0; i < HS / 2; ++i) f[i] = float(1.0 / std::pow(theta, double(2 * i) / double(HS)));
  return f;
}

void apply_llama3(std::vector<float>& f, const RopeScaling& s) {
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

// NTK: base * (factor * L / max_pos - (factor - 1))^(HS / (HS - 2)) for L = max(seq_len, max_pos).
std::vector<float> dynamic_freqs(const ModelConfig& c, int seq_len) {
  const double L = std::max(seq_len, c.max_seq_len), factor = c.rope_scaling.factor, HS = c.head_dim;
  const double base = double(c.rope_theta) * std::pow(factor * L / c.max_seq_len - (factor - 1.0), HS / (HS - 2.0));
  return default_freqs(base, c.head_dim);
}

// YaRN: interpolated (f / factor) below the correction range, extrapolated (f) above it, a
// linear ramp between; the range from beta_fast / beta_slow rotations over the original context.
std::vector<float> yarn_freqs(const ModelConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  const int HS = c.head_dim;
  const double base = c.rope_theta, orig = s.original_max_position_embeddings;
  auto correction_dim = [&](double rotations) { return HS * std::log(orig / (rotations * 2 * M_PI)) / (2 * std::log(base)); };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0), high = std::min(high, double(HS - 1));
  if (low == high) high += 0.001;  // as transformers: no division by zero
  std::vector<float> f(HS / 2);
  for (int i = 0; i < HS / 2; ++i) {
    const float pos_freq = float(std::pow(base, double(2 * i) / HS));
    const float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (s.factor * pos_freq);
    const float ramp = float(std::clamp((i - low) / (high - low), 0.0, 1.0));
    const float extrapolation_factor = 1.0f - ramp;
    f[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return f;
}

// LongRoPE: 1 / (ext[i] * theta^(2i/HS)), ext = long_factor beyond the original context.
std::vector<float> longrope_freqs(const ModelConfig& c, bool long_context) {
  const auto& ext = long_context ? c.rope_scaling.long_factor : c.rope_scaling.short_factor;
  std::vector<float> f(c.head_dim / 2);
  for (int i = 0; i < c.head_dim / 2; ++i)
    f[i] = float(1.0 / (double(ext[i]) * std::pow(double(c.rope_theta), double(2 * i) / c.head_dim)));
  return f;
}

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

}  // namespace

std::vector<float> rope_inv_freq(const ModelConfig& c, int seq_len) {
  const RopeScaling& s = c.rope_scaling;
  if (s.type == "dynamic") return dynamic_freqs(c, seq_len);
  if (s.type == "yarn") return yarn_freqs(c);
  if (s.type == "longrope") return longrope_freqs(c, seq_len > s.original_max_position_embeddings);
  std::vector<float> f = default_freqs(c.rope_theta, c.head_dim);
  if (s.type == "llama3") apply_llama3(f, s);
  if (s.type == "linear")
    for (auto& v : f) v /= s.factor;
  return f;
}

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const std::string& t = c.rope_scaling.type;
  LT_CHECK(!rope_depends_on_length(c) && c.rope_attention_factor == 1.0f && t != "yarn",
           "rope_scaling type '{}' is not supported by this model code yet: it needs the per-call frequencies and the "
           "attention factor of core/rope_freqs.h (RopeFreqState, rope_scale_queries); supported here: linear, "
           "llama3 (or none)",
           t);
  return rope_inv_freq(c, 0);
}

bool rope_depends_on_length(const ModelConfig& c) {
  return c.rope_scaling.type == "dynamic" || c.rope_scaling.type == "longrope";
}

float rope_attention_factor(const RopeScaling& s) {
  if (s.type != "yarn" && s.type != "longrope") return 1.0f;
  if (s.attention_factor > 0) return s.attention_factor;
  const double factor = s.factor, orig = s.original_max_position_embeddings;
  if (s.type == "yarn") {
    if (s.mscale != 0 && s.mscale_all_dim != 0)
      return float(yarn_mscale(factor, s.mscale) / yarn_mscale(factor, s.mscale_all_dim));
    return float(yarn_mscale(factor, 1.0));
  }
  return factor <= 1.0 ? 1.0f : float(std::sqrt(1.0 + std::log(factor) / std::log(orig)));
}

void rope_scale_queries(float* q, size_t n, const ModelConfig& c) {
  const float a = c.rope_attention_factor;
  if (a == 1.0f) return;
  const float a2 = a * a;
  for (size_t i = 0; i < n; ++i) q[i] *= a2;
}

ModelConfig layer_rope_config(const ModelConfig& c, int l) {
  if (!c.local_rope(l)) return c;
  ModelConfig local = c;
  local.rope_theta = c.rope_local_theta;
  local.rope_scaling = RopeScaling{};
  local.rope_attention_factor = 1.0f;
  return local;
}

float query_factor(const ModelConfig& c, int l) {
  const float a = c.local_rope(l) ? 1.0f : c.rope_attention_factor;
  if (c.query_pre_attn_scalar <= 0) return a * a;
  return float(double(a) * a * std::sqrt(double(c.head_dim) / c.query_pre_attn_scalar));
}

void scale_queries(float* q, size_t n, const ModelConfig& c, int l) {
  if (c.query_pre_attn_scalar <= 0 && !c.local_rope(l)) return rope_scale_queries(q, n, c);
  const float f = query_factor(c, l);
  if (f == 1.0f) return;
  for (size_t i = 0; i < n; ++i) q[i] *= f;
}

void validate_rope_scaling(const ModelConfig& c, const std::string& where) {
  const RopeScaling& s = c.rope_scaling;
  const std::string& t = s.type;
  LT_CHECK(t.empty() || t == "linear" || t == "dynamic" || t == "yarn" || t == "longrope" || t == "llama3",
           "{}: rope_scaling type '{}' is not supported; supported: linear, dynamic, yarn, longrope, llama3 (or none)",
           where, t);
  if (t.empty()) return;
  LT_CHECK(std::isfinite(s.factor) && s.factor > 0, "{}: rope_scaling.factor must be positive, got {}", where, s.factor);
  LT_CHECK(s.original_max_position_embeddings > 0,
           "{}: rope_scaling.original_max_position_embeddings must be positive, got {}", where,
           s.original_max_position_embeddings);
  LT_CHECK(std::isfinite(s.attention_factor) && s.attention_factor >= 0,
           "{}: rope_scaling.attention_factor must be a positive number, got {}", where, s.attention_factor);
  LT_CHECK(std::isfinite(c.rope_attention_factor) && c.rope_attention_factor > 0,
           "{}: the RoPE attention factor must be positive, got {}", where, c.rope_attention_factor);
  if (t == "llama3")
    LT_CHECK(std::isfinite(s.low_freq_factor) && std::isfinite(s.high_freq_factor) && s.low_freq_factor > 0 &&
                 s.high_freq_factor > s.low_freq_factor,
             "{}: rope_scaling needs 0 < low_freq_factor < high_freq_factor, got {} and {}", where, s.low_freq_factor,
             s.high_freq_factor);
  if (t == "dynamic")
    LT_CHECK(c.head_dim > 2, "{}: dynamic rope_scaling needs a head size above 2, got {}", where, c.head_dim);
  if (t == "yarn")
    LT_CHECK(std::isfinite(s.beta_fast) && std::isfinite(s.beta_slow) && s.beta_fast > 0 && s.beta_slow > 0 &&
                 std::isfinite(s.mscale) && std::isfinite(s.mscale_all_dim) && c.rope_theta > 1,
             "{}: yarn rope_scaling needs positive beta_fast and beta_slow (got {} and {}), finite mscale values and "
             "rope_theta > 1",
             where, s.beta_fast, s.beta_slow);
  if (t == "longrope") {
    const size_t pairs = size_t(c.head_dim / 2);
    for (const auto* list : {&s.short_factor, &s.long_factor}) {
      const char* name = list == &s.short_factor ? "short_factor" : "long_factor";
      LT_CHECK(list->size() == pairs, "{}: rope_scaling.{} must hold head_dim / 2 = {} numbers, got {}", where, name,
               pairs, list->size());
      for (float v : *list)
        LT_CHECK(std::isfinite(v) && v > 0, "{}: rope_scaling.{} holds {}, not a positive number", where, name, v);
    }
  }
}

RopeFreqState::RopeFreqState(const ModelConfig& c)
    : c_(c), inv_freq_(rope_inv_freq(c, 0)), cached_len_(c.max_seq_len) {}

bool RopeFreqState::update(int max_position) {
  const RopeScaling& s = c_.rope_scaling;
  const int seq_len = max_position + 1;
  if (s.type == "longrope") {
    const bool want_long = seq_len > s.original_max_position_embeddings;
    if (want_long == long_) return false;
    long_ = want_long;
    inv_freq_ = rope_inv_freq(c_, seq_len);
    return true;
  }
  if (s.type != "dynamic") return false;
  // transformers' dynamic_frequency_update: grow beyond the cached length; back to the original
  // frequencies when a call is shorter than max_position_embeddings after having grown.
  if (seq_len > cached_len_) {
    inv_freq_ = rope_inv_freq(c_, seq_len);
    cached_len_ = seq_len;
    return true;
  }
  if (seq_len < c_.max_seq_len && cached_len_ > c_.max_seq_len) {
    inv_freq_ = rope_inv_freq(c_, 0);
    cached_len_ = c_.max_seq_len;
    return true;
  }
  return false;
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
