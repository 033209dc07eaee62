// The token sampler (see sampler.h for the order of stages and their HF counterparts).
// Sampling works on a candidate list of token ids rather than on all V logits: it starts as every
// finite logit, top-k shrinks it by heap select or nth_element (O(V)), top-p finds the nucleus by
// quickselect bisection on its mass (O(V), no full sort), min-p compacts it, and the draw walks
// its cumulative weights. Weights are exp(logit - max logit) over the candidates; each filter
// compares ratios of weights, so no stage needs the normalised softmax itself.
// Dimension letters: V vocabulary, L context length, n candidates left.
#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace lt {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// NaN or +inf in the model's logits is a broken forward pass (NaN/inf weights, an overflow), not
// a sampling problem: say so before any stage mixes it into the scores. -inf is a legal mask.
void check_logits_finite(const float* logits, int V) {
  int first = -1, count = 0;
  for (int i = 0; i < V; ++i)
    if (std::isnan(logits[i]) || logits[i] == std::numeric_limits<float>::infinity()) {
      if (first < 0) first = i;
      ++count;
    }
  if (count == 0) return;
  fail("the model's logits hold {} non-finite value(s) of {} (the first, for token id {}, is {}): the forward pass "
       "produced NaN/inf, so the model weights hold NaN/inf or the activations overflowed; check the model file "
       "(e.g. with `leantune logits`) and its dtype",
       count, V, first, logits[first]);
}

}  // namespace

Sampler::Sampler(SamplerOptions opts, int vocab_size) : opts_(opts), V_(vocab_size) {
  LT_CHECK(vocab_size > 0, "sampler: vocab_size must be positive, got {}", vocab_size);
  LT_CHECK(std::isfinite(opts.temperature) && opts.temperature >= 0.0f,
           "sampler: temperature must be a finite value >= 0 (0 = greedy), got {}", opts.temperature);
  LT_CHECK(opts.top_k >= 0, "sampler: top_k must be >= 0 (0 = off), got {}", opts.top_k);
  LT_CHECK(opts.top_p > 0.0f && opts.top_p <= 1.0f, "sampler: top_p must be in (0, 1] (1 = off), got {}",
           opts.top_p);
  LT_CHECK(opts.min_p >= 0.0f && opts.min_p <= 1.0f, "sampler: min_p must be in [0, 1] (0 = off), got {}",
           opts.min_p);
  LT_CHECK(std::isfinite(opts.repetition_penalty) && opts.repetition_penalty > 0.0f,
           "sampler: repetition_penalty must be a finite value > 0 (1 = off), got {}",
           opts.repetition_penalty);
  LT_CHECK(opts.no_repeat_ngram_size >= 0, "sampler: no_repeat_ngram_size must be >= 0 (0 = off), got {}",
           opts.no_repeat_ngram_size);
  cand_.resize(size_t(V_));
  weight_.resize(size_t(V_));
  seen_.assign(size_t(V_), 0);
  reseed(opts.seed);
}

size_t Sampler::scratch_bytes(int vocab_size) {
  return size_t(vocab_size) * (sizeof(int) + sizeof(float) + sizeof(uint8_t));
}

void Sampler::reseed(uint64_t seed) {
  opts_.seed = seed;
  uint64_t x = seed;
  for (auto& s : rng_) s = splitmix64(x);  // splitmix64 never yields an all-zero state here
}

uint64_t Sampler::next_u64() {
  const uint64_t result = rotl(rng_[1] * 5, 7) * 9;
  const uint64_t t = rng_[1] << 17;
  rng_[2] ^= rng_[0];
  rng_[3] ^= rng_[1];
  rng_[1] ^= rng_[2];
  rng_[0] ^= rng_[3];
  rng_[2] ^= t;
  rng_[3] = rotl(rng_[3], 45);
  return result;
}

double Sampler::next_unit() { return double(next_u64() >> 11) * 0x1.0p-53; }

void Sampler::apply_repetition_penalty(float* logits, std::span<const int> context) {
  const float p = opts_.repetition_penalty;
  // HF gathers each id once, however often it repeats: mark ids as they are penalised, then clear.
  for (int id : context) {
    if (seen_[id]) continue;
    seen_[id] = 1;
    float& l = logits[id];
    l = l > 0.0f ? l / p : l * p;
  }
  for (int id : context) seen_[id] = 0;
}

void Sampler::apply_no_repeat_ngram(float* logits, std::span<const int> context) {
  const size_t n = size_t(opts_.no_repeat_ngram_size), L = context.size();
  if (L + 1 < n) return;
  // The last n-1 tokens are the prefix of the n-gram the next token would complete; every earlier
  // n-gram (start i, 0 <= i <= L-n) with that prefix bans its last token.
  const int* prefix = context.data() + (L + 1 - n);
  for (size_t i = 0; i + n <= L; ++i) {
    if (std::equal(prefix, prefix + (n - 1), context.data() + i)) logits[context[i + n - 1]] = kNegInf;
  }
}

int Sampler::argmax(const float* logits) const {
  int best = -1;
  float best_l = kNegInf;
  for (int i = 0; i < V_; ++i) {
    if (logits[i] > best_l) {  // strict: the lowest id wins ties; NaN never wins
      best_l = logits[i];
      best = i;
    }
  }
  return best;
}

// No candidate is left: every logit is -inf, from the model or from the n-gram bans.
void Sampler::fail_all_banned() const {
  if (opts_.no_repeat_ngram_size > 0)
    fail("sampler: every token is banned or -inf (no_repeat_ngram_size={}, vocab {}); lower no_repeat_ngram_size",
         opts_.no_repeat_ngram_size, V_);
  fail("sampler: every one of the model's {} logits is -inf; the model gives no token a probability", V_);
}

namespace {

// Candidate order: higher score first, the lower id on ties.
struct Better {
  const float* logits;
  bool operator()(int a, int b) const { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); }
};

// Top-k: HF keeps every score >= the k-th largest, so ties with the k-th stay in. Returns the
// candidates left (cand[0, n') holds them).
size_t keep_top_k(const float* logits, int* cand, size_t n, int top_k) {
  if (top_k <= 0 || size_t(top_k) >= n) return n;
  const size_t k = size_t(top_k);
  const Better better{logits};
  // A small k is a heap select (one compare per rejected id); a large one, introselect.
  if (k <= 256) std::partial_sort(cand, cand + k, cand + n, better);
  else std::nth_element(cand, cand + (k - 1), cand + n, better);
  const float kth = logits[cand[k - 1]];
  size_t kept = k;
  for (size_t j = k; j < n; ++j)
    if (logits[cand[j]] == kth) std::swap(cand[kept++], cand[j]);
  return kept;
}

// Weights w[id] = exp(l - max) over the candidates (the max candidate, w = 1, survives every
// filter below); returns their sum.
double exp_weights(const float* logits, const int* cand, size_t n, float* w) {
  float max_l = kNegInf;
  for (size_t j = 0; j < n; ++j) max_l = std::max(max_l, logits[cand[j]]);
  double total = 0.0;
  for (size_t j = 0; j < n; ++j) {
    const int id = cand[j];
    w[id] = std::exp(logits[id] - max_l);
    total += w[id];
  }
  return total;
}

// Top-p: keep tokens, best first, until their mass reaches top_p (the token crossing it stays).
// Fast path: partial-sort the best 64 and scan them (a peaked distribution ends there). Else
// bisect the rest by quickselect: split the undecided range [lo, hi) at its middle with
// nth_element; if the better half's mass reaches the target, the crossing token lies in it,
// otherwise past it. O(n) expected, against O(n log n) for HF's full sort. Returns the
// candidates left; `total` becomes their mass.
size_t keep_top_p(const float* logits, int* cand, size_t n, const float* w, float top_p, double& total) {
  if (top_p >= 1.0f || n <= 1) return n;
  const Better better{logits};
  const double target = double(top_p) * total;
  const size_t head = std::min<size_t>(n, 64);
  std::partial_sort(cand, cand + head, cand + n, better);
  double above = 0.0;  // mass of cand[0, lo), every one better than all of cand[lo, n)
  size_t lo = 0, hi = n;
  for (; lo < head; ++lo) {
    above += w[cand[lo]];
    if (above >= target) { hi = lo + 1; lo = hi; break; }
  }
  while (hi - lo > 64) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(cand + lo, cand + mid, cand + hi, better);
    double m = 0.0;
    for (size_t j = lo; j < mid; ++j) m += w[cand[j]];
    if (above + m >= target) {
      hi = mid;
    } else {
      above += m;
      lo = mid;
    }
  }
  std::sort(cand + lo, cand + hi, better);
  for (; lo < hi; ++lo) {
    above += w[cand[lo]];
    if (above >= target) { hi = lo + 1; break; }
  }
  // hi == n with the target unmet means rounding kept the full mass just under it: keep all.
  if (hi == n) return n;
  total = above;
  return hi;
}

// Min-p: prob >= min_p * max prob  <=>  w >= min_p, since the max candidate has w = 1. Returns
// the candidates left (compacted); `total` becomes their mass.
size_t keep_min_p(int* cand, size_t n, const float* w, float min_p, double& total) {
  if (min_p <= 0.0f) return n;
  size_t kept = 0;
  total = 0.0;
  for (size_t j = 0; j < n; ++j) {
    if (w[cand[j]] >= min_p) {
      cand[kept++] = cand[j];
      total += w[cand[j]];
    }
  }
  return kept;
}

}  // namespace

// Repetition penalty and n-gram bans (after checking the logits and, when they are used, the context).
void Sampler::apply_processors(float* logits, std::span<const int> context) {
  check_logits_finite(logits, V_);
  const bool penalise = opts_.repetition_penalty != 1.0f, ban = opts_.no_repeat_ngram_size > 0;
  if (penalise || ban) {
    for (size_t t = 0; t < context.size(); ++t)
      LT_CHECK(context[t] >= 0 && context[t] < V_, "sampler: context token {} at position {} is outside "
               "the vocabulary [0, {})", context[t], t, V_);
  }
  if (penalise) apply_repetition_penalty(logits, context);
  if (ban) apply_no_repeat_ngram(logits, context);
}

// Temperature, then the candidate list (every token with a finite score) cut by top-k, top-p and
// min-p. Returns n: cand_[0, n) are kept, with weights weight_[id] summing to `total`.
size_t Sampler::keep_candidates(float* logits, double& total) {
  const float T = opts_.temperature;
  int* cand = cand_.data();
  float* w = weight_.data();
  size_t n = 0;
  for (int i = 0; i < V_; ++i) {
    if (T != 1.0f) logits[i] /= T;
    if (logits[i] > kNegInf) cand[n++] = i;
  }
  if (n == 0) fail_all_banned();
  n = keep_top_k(logits, cand, n, opts_.top_k);
  total = exp_weights(logits, cand, n, w);
  n = keep_top_p(logits, cand, n, w, opts_.top_p, total);
  return keep_min_p(cand, n, w, opts_.min_p, total);
}

int Sampler::sample(float* logits, std::span<const int> context) {
  apply_processors(logits, context);
  if (opts_.temperature == 0.0f) {
    const int best = argmax(logits);
    if (best < 0) fail_all_banned();
    return best;
  }
  double total = 0.0;
  const size_t n = keep_candidates(logits, total);
  const int* cand = cand_.data();
  const float* w = weight_.data();

  // The draw: inverse CDF over the kept candidates' weights.
  const double u = next_unit() * total;
  double cum = 0.0;
  for (size_t j = 0; j < n; ++j) {
    cum += w[cand[j]];
    if (u < cum) return cand[j];
  }
  return cand[n - 1];  // u landed on the rounding slack at the very top
}

void Sampler::distribution(float* logits, std::span<const int> context, float* probs) {
  LT_CHECK(opts_.temperature > 0.0f, "sampler: distribution() is for sampling; temperature is 0 (greedy)");
  apply_processors(logits, context);
  double total = 0.0;
  const size_t n = keep_candidates(logits, total);
  std::fill(probs, probs + V_, 0.0f);
  for (size_t j = 0; j < n; ++j) probs[cand_[j]] = float(double(weight_[cand_[j]]) / total);
}

}  // namespace lt
