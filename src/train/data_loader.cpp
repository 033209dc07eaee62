// Deterministic shuffling, train/eval split and batch assembly (packed or one example per row)
// with shifted labels, per-segment RoPE positions and document-start indices (see data_loader.h).
// next() writes into the caller's Batch buffers only; all per-epoch state (order, cumulative
// lengths) is built in start_epoch().
#include "train/data_loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/error.h"

namespace lt {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

Rng::Rng(uint64_t seed) {
  uint64_t st = seed;
  for (uint64_t& s : s_) s = splitmix64(st);
}

uint64_t Rng::next_u64() {
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  uint64_t result = rotl(s_[1] * 5, 7) * 9;
  uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

uint64_t Rng::below(uint64_t n) {
  LT_ASSERT(n > 0);
  // Lemire: the high 64 bits of x * n are uniform in [0, n) once the biased low range is rejected.
  unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next_u64()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

std::vector<size_t> shuffled_indices(size_t n, uint64_t seed) {
  std::vector<size_t> v(n);
  std::iota(v.begin(), v.end(), size_t{0});
  Rng rng(seed);
  shuffle_in_place(v, rng);
  return v;
}

DataSplit split_train_eval(std::vector<Example> all, double eval_fraction, uint64_t seed) {
  LT_CHECK(eval_fraction >= 0.0 && eval_fraction < 1.0, "data: eval fraction must be in [0, 1), got {}",
           eval_fraction);
  size_t n = all.size();
  size_t n_eval = static_cast<size_t>(std::llround(static_cast<double>(n) * eval_fraction));
  if (eval_fraction > 0.0 && n_eval == 0) n_eval = 1;
  LT_CHECK(n_eval < n, "data: an eval fraction of {} of {} examples leaves no training examples", eval_fraction, n);
  std::vector<size_t> order = shuffled_indices(n, seed);
  DataSplit s;
  s.train.reserve(n - n_eval);
  s.eval.reserve(n_eval);
  for (size_t k = 0; k < n; ++k) (k < n - n_eval ? s.train : s.eval).push_back(std::move(all[order[k]]));
  return s;
}

DataLoader::DataLoader(std::vector<Example> examples, int B, int T, bool packing, uint64_t seed, int pad_id,
                       bool shuffle)
    : examples_(std::move(examples)), B_(B), T_(T), packing_(packing), seed_(seed), pad_id_(pad_id), shuffle_(shuffle) {
  LT_CHECK(!examples_.empty(), "data: the dataset is empty; nothing to train on");
  LT_CHECK(B >= 1 && T >= 1, "data: batch size B={} and sequence length T={} must be >= 1", B, T);
  for (size_t i = 0; i < examples_.size(); ++i) {
    const Example& e = examples_[i];
    LT_CHECK(!e.ids.empty(), "data: example {} has no tokens", i);
    LT_CHECK(e.ids.size() == e.labels.size(), "data: example {} has {} ids but {} labels", i, e.ids.size(),
             e.labels.size());
    total_tokens_ += e.ids.size();
  }
  const LabelLoss loss = count_label_loss(examples_, T, packing);
  LT_CHECK(loss.no_labels + loss.lost_to_cut < examples_.size(), "data: none of the {} examples keeps a trained token "
           "within T={} tokens ({} lose them all to truncation, {} have none); the loss would be 0 and nothing "
           "learned", examples_.size(), T, loss.lost_to_cut, loss.no_labels);
  start_epoch(0);
}

size_t DataLoader::batches_per_epoch() const {
  size_t per = packing_ ? static_cast<size_t>(B_) * T_ : static_cast<size_t>(B_);
  size_t n = packing_ ? total_tokens_ : examples_.size();
  return (n + per - 1) / per;
}

void DataLoader::start_epoch(int epoch) {
  LT_CHECK(epoch >= 0, "data: epoch must be >= 0, got {}", epoch);
  epoch_ = epoch;
  position_ = 0;
  order_.resize(examples_.size());
  std::iota(order_.begin(), order_.end(), size_t{0});
  if (shuffle_) {
    uint64_t e = static_cast<uint64_t>(epoch);
    Rng rng(seed_ ^ splitmix64(e));
    shuffle_in_place(order_, rng);
  }
  cum_.resize(order_.size() + 1);
  cum_[0] = 0;
  for (size_t k = 0; k < order_.size(); ++k) cum_[k + 1] = cum_[k] + examples_[order_[k]].ids.size();
  cursor_ex_ = 0;
  cursor_tok_ = 0;
}

void DataLoader::seek(int epoch, size_t position) {
  start_epoch(epoch);
  LT_CHECK(position <= batches_per_epoch(), "data: cannot seek to batch {} of epoch {}: an epoch has {} batches",
           position, epoch, batches_per_epoch());
  position_ = position;
  if (packing_) locate_token(position * static_cast<size_t>(B_) * T_);
}

void DataLoader::locate_token(size_t offset) {
  if (offset >= total_tokens_) {
    cursor_ex_ = order_.size();
    cursor_tok_ = 0;
    return;
  }
  // cum_[k] <= offset < cum_[k+1]
  size_t k = static_cast<size_t>(std::upper_bound(cum_.begin(), cum_.end(), offset) - cum_.begin()) - 1;
  cursor_ex_ = k;
  cursor_tok_ = offset - cum_[k];
}

bool DataLoader::next(Batch& out) {
  if (position_ >= batches_per_epoch()) return false;
  size_t n = static_cast<size_t>(B_) * T_;
  out.B = B_;
  out.T = T_;
  out.tokens.resize(n);
  out.labels.resize(n);
  out.positions.resize(n);
  out.doc_start.resize(n);
  if (packing_) {
    fill_packed(out);
  } else {
    fill_rows(out);
  }
  int count = 0;
  for (int l : out.labels) count += (l != kIgnoreLabel);
  out.n_label_tokens = count;
  ++position_;
  return true;
}

namespace {

// Writes padding at flat indices [from, to).
void pad_range(Batch& out, size_t from, size_t to, int pad_id) {
  for (size_t i = from; i < to; ++i) {
    out.tokens[i] = pad_id;
    out.labels[i] = kIgnoreLabel;
    out.positions[i] = 0;
    out.doc_start[i] = static_cast<int>(i);
  }
}

// Copies tokens [start, start+count) of e to flat index `at` as one segment (positions from 0);
// each token's label is the unshifted label of the following token of e, kIgnoreLabel past its end.
void write_segment(Batch& out, size_t at, const Example& e, size_t start, size_t count) {
  size_t len = e.ids.size();
  for (size_t i = 0; i < count; ++i) {
    size_t j = start + i, f = at + i;
    out.tokens[f] = e.ids[j];
    out.labels[f] = (j + 1 < len) ? e.labels[j + 1] : kIgnoreLabel;
    out.positions[f] = static_cast<int>(i);
    out.doc_start[f] = static_cast<int>(at);
  }
}

}  // namespace

void DataLoader::fill_packed(Batch& out) {
  size_t T = static_cast<size_t>(T_);
  for (size_t r = 0; r < static_cast<size_t>(B_); ++r) {
    size_t c = 0;
    while (c < T && cursor_ex_ < order_.size()) {
      const Example& e = examples_[order_[cursor_ex_]];
      size_t take = std::min(T - c, e.ids.size() - cursor_tok_);
      write_segment(out, r * T + c, e, cursor_tok_, take);
      c += take;
      cursor_tok_ += take;
      if (cursor_tok_ == e.ids.size()) {
        ++cursor_ex_;
        cursor_tok_ = 0;
      }
    }
    pad_range(out, r * T + c, (r + 1) * T, pad_id_);
  }
}

void DataLoader::fill_rows(Batch& out) {
  size_t T = static_cast<size_t>(T_);
  for (size_t r = 0; r < static_cast<size_t>(B_); ++r) {
    size_t idx = position_ * static_cast<size_t>(B_) + r;
    size_t c = 0;
    if (idx < order_.size()) {
      const Example& e = examples_[order_[idx]];
      if (e.ids.size() > T && !warned_truncation_) {
        fmt::print(stderr, "leantune: warning: an example of {} tokens is truncated to T={} (packing is off); "
                   "further truncations are not reported\n", e.ids.size(), T);
        warned_truncation_ = true;
      }
      c = std::min(T, e.ids.size());
      write_segment(out, r * T, e, 0, c);
    }
    pad_range(out, r * T + c, (r + 1) * T, pad_id_);
  }
}

LabelLoss count_label_loss(const std::vector<Example>& examples, int T, bool packing) {
  LabelLoss r;
  r.examples = examples.size();
  for (const Example& e : examples) {
    // the shifted targets are labels[1..len-1]; a row of T tokens keeps labels[1..T]
    const size_t len = e.labels.size();
    const size_t kept = packing ? len : std::min(len, static_cast<size_t>(T) + 1);
    auto trained = [&](size_t from, size_t to) {
      for (size_t j = from; j < to; ++j)
        if (e.labels[j] != kIgnoreLabel) return true;
      return false;
    };
    if (!trained(1, len)) ++r.no_labels;
    else if (!trained(1, kept)) ++r.lost_to_cut;
  }
  return r;
}

void check_labels_survive(const std::vector<Example>& examples, int T, bool packing, const std::string& dataset) {
  const LabelLoss r = count_label_loss(examples, T, packing);
  const size_t lost = r.no_labels + r.lost_to_cut;
  const std::string counts = fmt::format("{} of {} examples lose every trained token to truncation at sequence_len {} "
                                         "(sample_packing off){}", r.lost_to_cut, r.examples, T,
                                         r.no_labels ? fmt::format(" and {} have no trained token at all", r.no_labels)
                                                     : std::string());
  LT_CHECK(lost < r.examples, "data: {}: no example keeps a trained token, so training would report a loss of 0 and "
           "learn nothing: {}. Raise sequence_len, turn sample_packing on, or shorten the prompts", dataset, counts);
  if (lost)
    fmt::print(stderr, "leantune: warning: data: {}: {}; they add compute but no training signal\n", dataset, counts);
}

std::vector<Batch> make_eval_batches(const std::vector<Example>& eval, int B, int T, bool packing, int pad_id) {
  DataLoader dl(eval, B, T, packing, 0, pad_id, /*shuffle=*/false);
  std::vector<Batch> batches(dl.batches_per_epoch());
  for (Batch& b : batches) {
    bool ok = dl.next(b);
    LT_ASSERT(ok);
  }
  return batches;
}

}  // namespace lt
