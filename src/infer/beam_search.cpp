// Beam search bookkeeping (beam_search.h), step for step as transformers' _beam_search with batch
// size 1: _get_top_k_continuations, _get_running_beams_for_next_iteration, _update_finished_beams,
// _check_early_stop_heuristic and _beam_search_has_unfinished_sequences. Scores are float32 as
// there; -1e9 marks what HF masks out.
#include "infer/beam_search.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lt {

constexpr float kMasked = -1.0e9f;

BeamSearch::BeamSearch(const BeamOptions& o, int prompt_len, int max_length, std::vector<int> eos_ids, int vocab)
    : o_(o), prompt_len_(prompt_len), max_length_(max_length), cur_len_(prompt_len), vocab_(vocab),
      eos_(std::move(eos_ids)) {
  LT_CHECK(o_.num_beams >= 1, "num_beams is {}; it must be 1 or more", o_.num_beams);
  LT_CHECK(o_.num_return >= 1 && o_.num_return <= o_.num_beams,
           "{} sequences asked of {} beams; ask 1 to num_beams ({})", o_.num_return, o_.num_beams, o_.num_beams);
  LT_CHECK(std::isfinite(o_.length_penalty), "length_penalty must be a finite number");
  LT_CHECK(max_length_ > prompt_len_, "beam search: no room to generate ({} of {} positions taken by the prompt)",
           prompt_len_, max_length_);
  const int keep = std::max(2, 1 + int(eos_.size())) * o_.num_beams;
  LT_CHECK(keep <= vocab_, "beam search with {} beams keeps {} candidates; the vocabulary has only {}", o_.num_beams,
           keep, vocab_);
  running_.assign(size_t(o_.num_beams), {});
  running_scores_.assign(size_t(o_.num_beams), kMasked);
  running_scores_[0] = 0;  // only the first beam's continuations count on the first step
}

// The beams_to_keep best (beam, token) continuations by accumulated log-probability, best first
// (ties: the lower flat index beam * vocab + token first).
std::vector<BeamSearch::Cand> BeamSearch::top_candidates(std::span<const float* const> logits) const {
  const int K = o_.num_beams, keep = std::max(2, 1 + int(eos_.size())) * K;
  std::vector<Cand> all;
  std::vector<int> idx(static_cast<size_t>(vocab_));
  for (int b = 0; b < K; ++b) {
    const float* x = logits[size_t(b)];
    const float mx = *std::max_element(x, x + vocab_);
    double sum = 0;
    for (int v = 0; v < vocab_; ++v) sum += std::exp(double(x[v] - mx));
    const float lse = float(std::log(sum));
    for (int v = 0; v < vocab_; ++v) idx[size_t(v)] = v;
    auto better = [x](int a, int c) { return x[a] > x[c] || (x[a] == x[c] && a < c); };
    std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(), better);  // only these can reach the top `keep`
    for (int i = 0; i < keep; ++i) {
      const int v = idx[size_t(i)];
      all.push_back({(x[v] - mx - lse) + running_scores_[size_t(b)], b, v});
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const Cand& a, const Cand& c) { return a.logp > c.logp; });
  all.resize(size_t(keep));
  return all;
}

const std::vector<BeamSearch::Next>& BeamSearch::advance(std::span<const float* const> logits) {
  LT_CHECK(!done_, "beam search: advance() after the search ended");
  LT_CHECK(int(logits.size()) == o_.num_beams, "beam search: {} logits rows for {} beams", logits.size(),
           o_.num_beams);
  const int K = o_.num_beams;
  const std::vector<Cand> top = top_candidates(logits);
  const bool at_max = cur_len_ + 1 >= max_length_;
  auto hits = [&](const Cand& c) { return at_max || std::find(eos_.begin(), eos_.end(), c.token) != eos_.end(); };

  // finished: the top K candidates that hit a stop, scored with the length penalty, merged with
  // the finished so far (the best K kept; the earlier ones first on ties)
  const bool full = int(finished_.size()) == K && o_.early_stopping == EarlyStopping::True;
  if (!full && improvable_) {
    const float denom = float(std::pow(double(cur_len_ + 1 - prompt_len_), double(o_.length_penalty)));
    for (int i = 0; i < K; ++i)
      if (hits(top[size_t(i)])) {
        BeamHypothesis h;
        h.tokens = running_[size_t(top[size_t(i)].beam)];
        h.tokens.push_back(top[size_t(i)].token);
        h.score = top[size_t(i)].logp / denom;
        h.eos = !at_max || std::find(eos_.begin(), eos_.end(), h.tokens.back()) != eos_.end();
        finished_.push_back(std::move(h));
      }
    std::stable_sort(finished_.begin(), finished_.end(),
                     [](const BeamHypothesis& a, const BeamHypothesis& b) { return a.score > b.score; });
    if (int(finished_.size()) > K) finished_.resize(size_t(K));
  }

  // running: the K best candidates with the stopped ones masked out
  std::vector<std::pair<float, int>> order;
  for (int i = 0; i < int(top.size()); ++i)
    order.push_back({top[size_t(i)].logp + (hits(top[size_t(i)]) ? kMasked : 0.0f), i});
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::vector<int>> running(static_cast<size_t>(K));
  next_.assign(size_t(K), {});
  for (int i = 0; i < K; ++i) {
    const Cand& c = top[size_t(order[size_t(i)].second)];
    running[size_t(i)] = running_[size_t(c.beam)];
    running[size_t(i)].push_back(c.token);
    running_scores_[size_t(i)] = order[size_t(i)].first;
    next_[size_t(i)] = {c.beam, c.token};
  }
  running_.swap(running);
  ++cur_len_;

  // can a running beam still beat the worst finished hypothesis?
  const bool never = o_.early_stopping == EarlyStopping::Never && o_.length_penalty > 0;
  const int best_len = never ? max_length_ - prompt_len_ : cur_len_ - prompt_len_;
  const float best_running = running_scores_[0] / float(std::pow(double(best_len), double(o_.length_penalty)));
  const float worst = int(finished_.size()) == K ? finished_.back().score : kMasked;
  improvable_ = improvable_ && best_running > worst;
  const bool all_finished = int(finished_.size()) == K && o_.early_stopping == EarlyStopping::True;
  bool all_hit = true;
  for (const Cand& c : top) all_hit = all_hit && hits(c);
  done_ = !improvable_ || all_finished || all_hit;
  return next_;
}

std::vector<BeamHypothesis> BeamSearch::results() const {
  std::vector<BeamHypothesis> r(finished_.begin(), finished_.begin() + std::min<long>(long(finished_.size()),
                                                                                      long(o_.num_return)));
  return r;
}

}  // namespace lt
