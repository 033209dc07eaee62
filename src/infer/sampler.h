// The token sampler: turns one row of logits (V) into the next token id, the way Hugging Face
// transformers' generate() does with its default LogitsProcessor list (and llama.cpp users expect):
//   1. repetition penalty   (RepetitionPenaltyLogitsProcessor)
//   2. no-repeat n-gram ban (NoRepeatNGramLogitsProcessor, banned -> -inf)
//   3. temperature          (TemperatureLogitsWarper; 0 = greedy argmax, warpers skipped)
//   4. top-k, 5. top-p, 6. min-p (TopK / TopP / MinP warpers, each on what the previous left)
//   7. a draw from the softmax of what is left, with a seeded xoshiro256** generator.
// All scratch (candidate ids, exp weights, seen-token marks) is sized for V in the constructor;
// sample() allocates nothing. A Sampler is not thread-safe: use one per sequence.
//
// Usage:
//   lt::Sampler s({.temperature = 0.7f, .top_p = 0.9f, .seed = 42}, cfg.vocab_size);
//   int next = s.sample(logits, context);  // context = prompt + generated ids so far
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace lt {

// Run-time sampling parameters; each default turns its stage off (plain softmax sampling).
struct SamplerOptions {
  float temperature = 1.0f;         // logits /= temperature; 0 = greedy (argmax, lowest id on ties)
  int top_k = 0;                    // keep the k highest logits (and ties with the k-th); 0 = off
  float top_p = 1.0f;               // keep the smallest set with cumulative prob >= top_p; 1 = off
  float min_p = 0.0f;               // keep tokens with prob >= min_p * max prob; 0 = off
  float repetition_penalty = 1.0f;  // ids in context: logit > 0 -> logit / p, else logit * p; 1 = off
  int no_repeat_ngram_size = 0;     // ban tokens that would repeat an n-gram of the context; 0 = off
  uint64_t seed = 0;                // seeds xoshiro256** (state expanded from seed by splitmix64)
};

class Sampler {
 public:
  // Checks the options (throws lt::Error naming the bad field) and allocates all scratch for V.
  Sampler(SamplerOptions opts, int vocab_size);

  // Picks the next token. `logits` (V) is modified in place: on return it holds the scores after
  // the repetition penalty, the n-gram bans (-inf) and, when sampling, the temperature, i.e. what
  // HF's processors hand to the top-k warper. `context` is every token so far (prompt +
  // generated); ids must lie in [0, V). Throws lt::Error if every token ends up banned, or
  // when the logits hold NaN or +inf (a broken forward pass, reported as such).
  int sample(float* logits, std::span<const int> context);

  // The distribution sample() draws from, for speculative decoding: runs the same stages on
  // `logits` (modified as by sample()) and writes each kept token's probability to probs (V),
  // 0 for the rest. Sampling only: lt::Error at temperature 0 (greedy has no distribution).
  void distribution(float* logits, std::span<const int> context, float* probs);

  // One uniform draw in [0, 1) from this sampler's seeded generator (speculative decoding's
  // draws and accept tests use the request's own stream, so a seed reproduces them).
  double uniform() { return next_unit(); }

  // Restarts the random sequence as if constructed with `seed`.
  void reseed(uint64_t seed);

  const SamplerOptions& options() const { return opts_; }
  int vocab_size() const { return V_; }
  // Bytes of scratch a Sampler holds for a vocabulary of V, for the memory plan.
  static size_t scratch_bytes(int vocab_size);

 private:
  void apply_repetition_penalty(float* logits, std::span<const int> context);
  void apply_no_repeat_ngram(float* logits, std::span<const int> context);
  void apply_processors(float* logits, std::span<const int> context);  // checks, penalty, bans
  size_t keep_candidates(float* logits, double& total);  // temperature + warpers: cand_[0, n), weight_
  int argmax(const float* logits) const;
  [[noreturn]] void fail_all_banned() const;
  uint64_t next_u64();   // xoshiro256**
  double next_unit();    // uniform in [0, 1), 53 random bits

  SamplerOptions opts_;
  int V_;
  uint64_t rng_[4];
  std::vector<int> cand_;       // (V) candidate token ids still in the running
  std::vector<float> weight_;   // (V) exp(logit - max logit), indexed by token id
  std::vector<uint8_t> seen_;   // (V) marks ids already penalised in this call; all 0 between calls
};

}  // namespace lt
