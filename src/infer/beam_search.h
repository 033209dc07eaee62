// BeamSearch: the token-level bookkeeping of beam search, exactly as Hugging Face transformers'
// generate(num_beams=K, do_sample=False) does it (GenerationMixin._beam_search, v4.50+): at each
// step the 2K best continuations (max(2, 1 + #eos) × K) of the K running beams by accumulated
// log-probability; those ending in an EOS id or at max_length finish (only when among the top K)
// with score logprob_sum / generated_length ** length_penalty (the EOS counted in the length);
// the K best unfinished continue. Stopping: early_stopping true ends once K hypotheses finished;
// false ends when the best running beam, scored at the current length, cannot beat the worst
// finished one; "never" scores it at max_length when length_penalty > 0.
//
// It knows nothing of the model: the caller runs the K running beams (one row each), hands their
// next-token logits to advance(), and rearranges their KV caches as advance() says (new beam i
// continues old beam parent[i] with token[i]).
#pragma once
#include <span>
#include <vector>

namespace lt {

enum class EarlyStopping { Heuristic, True, Never };  // HF's early_stopping = False / True / "never"

struct BeamOptions {
  int num_beams = 1;
  int num_return = 1;            // hypotheses returned (<= num_beams)
  float length_penalty = 1.0f;
  EarlyStopping early_stopping = EarlyStopping::Heuristic;
};

struct BeamHypothesis {
  std::vector<int> tokens;  // generated tokens, the final EOS included when it ended there
  float score = 0;          // sum of log-probabilities / length ** length_penalty
  bool eos = false;         // ended by an EOS id (else by max_length)
};

class BeamSearch {
 public:
  // max_length: prompt + generated positions at most (HF's max_length); eos_ids may be empty.
  BeamSearch(const BeamOptions& o, int prompt_len, int max_length, std::vector<int> eos_ids, int vocab);

  struct Next {
    int parent = 0, token = 0;
  };
  // logits[b]: beam b's next-token logits (vocab floats), for every running beam (num_beams; on the
  // first step all equal the prompt's). Returns the running beams of the next step.
  const std::vector<Next>& advance(std::span<const float* const> logits);
  bool done() const { return done_; }
  int generated() const { return cur_len_ - prompt_len_; }  // tokens per running beam
  // The best num_return finished hypotheses, best first (when done()).
  std::vector<BeamHypothesis> results() const;

 private:
  struct Cand {
    float logp;
    int beam, token;
  };
  std::vector<Cand> top_candidates(std::span<const float* const> logits) const;

  BeamOptions o_;
  int prompt_len_, max_length_, cur_len_, vocab_;
  std::vector<int> eos_;
  std::vector<std::vector<int>> running_;  // generated tokens per running beam
  std::vector<float> running_scores_;
  std::vector<BeamHypothesis> finished_;   // at most num_beams, best first
  std::vector<Next> next_;
  bool improvable_ = true, done_ = false;
};

}  // namespace lt
