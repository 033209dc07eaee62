// The accept / resample step of sampled speculative decoding (Leviathan et al. 2023, Chen et al.
// 2023; what vLLM's rejection sampler does). The draft proposed x drawn from q; the model's
// distribution at that position is p (both after the request's logits processors and warpers).
// x is kept with probability min(1, p(x) / q(x)); otherwise the token is drawn from the residual
// norm(max(0, p - q)). Every output token is then distributed exactly as p, whatever q is. After K
// accepted proposals the bonus token is drawn from the model's next p.
// Pure functions of their inputs: the uniforms come from the caller (the request's Sampler), so a
// seed reproduces every decision and the tests can fix them.
#pragma once
#include <span>

namespace lt {

// Whether the proposal x is kept: u < p(x) / q(x) (u uniform in [0, 1)), i.e. u * q(x) < p(x).
inline bool spec_accept(float p_x, float q_x, double u) { return u * double(q_x) < double(p_x); }

// A draw from the (unnormalised) weights w by inverse CDF with u in [0, 1); never a weight-0 token.
// -1 when every weight is 0.
int draw_weighted(std::span<const float> w, double u);

// The token taking a rejected proposal's place: a draw from norm(max(0, p - q)) with u. When that
// residual is empty (p <= q everywhere, only by rounding, since a rejection needs p(x) < q(x)), a
// draw from p.
int draw_residual(std::span<const float> p, std::span<const float> q, double u);

}  // namespace lt
